"""Test setup: 8 forced CPU devices (set before JAX starts) and a shared small data directory."""

import os

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from configs import test as test_config  # pylint: disable=wrong-import-position


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """Shakespeare built once per session (ArrayRecord + a 512-piece tokenizer)."""
  return str(tmp_path_factory.mktemp('tfds'))


@pytest.fixture
def config(data_dir):
  """The tiny LM config pointed at the session's data directory."""
  cfg = test_config.get_config()
  cfg.data.data_dir = data_dir
  return cfg
