"""The Hugging Face fixtures of tests/data/hf (tiny random models saved by transformers 5.24 with
transformers' own logits and greedy ids, made by scripts/make_hf_fixtures.py), shared by the
tests that read them."""

import json
import os
import pathlib
import shutil

import numpy as np

from roformer import hf

FIXTURES = pathlib.Path(__file__).resolve().parent / 'data' / 'hf'
NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def imported(name: str, tmp_path) -> str:
  """The workdir that importing fixture `name` writes under `tmp_path`."""
  workdir = str(tmp_path / name)
  hf.import_checkpoint(str(FIXTURES / name), workdir)
  return workdir


def relative_error(got, want) -> float:
  """The largest difference over the largest magnitude of `want`."""
  return float(np.abs(np.asarray(got) - want).max() / np.abs(want).max())


def edited(tmp_path, name: str, edit=None, remove=()) -> str:
  """A copy of fixture `name` under `tmp_path`, its config.json changed in place by `edit` (a
  function of the parsed dict) and the files in `remove` deleted."""
  source = tmp_path / f'edited_{name}'
  shutil.copytree(FIXTURES / name, source)
  if edit:
    config = json.loads((source / 'config.json').read_text())
    edit(config)
    (source / 'config.json').write_text(json.dumps(config))
  for file in remove:
    os.remove(source / file)
  return str(source)
