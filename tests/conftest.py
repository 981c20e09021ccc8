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


@pytest.fixture(scope='session')
def mlm_workdir(tmp_path_factory, data_dir):
  """A tiny masked-LM run of 16 steps (the encoder the classification tests fine-tune)."""
  from roformer import train_lib  # pylint: disable=g-import-not-at-top
  cfg = test_config.get_config('mlm')
  cfg.data.data_dir = data_dir
  cfg.train.update(steps=16, eval_every=8, checkpoint_every=8, learning_rate=1e-2)
  workdir = str(tmp_path_factory.mktemp('pretrain') / 'mlm')
  return workdir, train_lib.train_and_evaluate(cfg, workdir)
