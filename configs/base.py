"""The config every task config starts from: every field at its default.

Each field's default, type, range and meaning are declared once, in roformer/config_schema.py
(a position scheme's options in its class in roformer/positions/); the files beside this one
change the fields their experiment needs.
"""

import ml_collections

from roformer import config_schema


def get_config() -> ml_collections.ConfigDict:
  return config_schema.default_config()
