"""Test setup: 8 forced CPU devices (set before JAX starts), a compilation cache shared by the
session's processes, and a shared small data directory."""

import atexit
import gc
import json
import os
import shutil
import tempfile

import processes  # tests/processes.py: the flags below, for the subprocesses too.

# Cheap compilation (tests/processes.py): the programs here are tiny and run a few steps, so
# XLA's optimisation passes and its MLIR fusion emitters cost more compile time than they save
# (together about half of the suite's time); the numbers every test compares are computed the
# same way on both sides.
os.environ.setdefault('XLA_FLAGS', processes.xla_flags(8))
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# The entry points run as subprocesses here train a few steps each, where the one malloc arena
# of roformer/host_memory.py costs more compile time than it saves (tests/test_host_memory.py
# turns it on for its own subprocesses).
os.environ.setdefault('ROFORMER_REUSE_FREED_MEMORY', '0')
# Many tests compile the same step again: a resumed run, eval.py after train.py, the same model in
# another test. JAX's persistent cache (keyed by the program, the flags and the devices) lets them
# load the executable instead; it lives for this session only. The subprocesses inherit it.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix='roformer-tests-jax-cache-')
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
  os.environ['JAX_COMPILATION_CACHE_DIR'] = _CACHE
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0.1')

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from configs import test as test_config  # pylint: disable=wrong-import-position

# The files that take longest (measured at the default suite's last timing, docs/testing.md) are
# handed to the two workers first (pytest.ini: --dist loadfile gives out files in collection
# order, with --no-loadscope-reorder, without which pytest-xdist orders them by their number of
# tests instead), so that the run does not end with one worker on a long file while the other
# waits.
LONGEST_FIRST = ('test_hf_export.py', 'test_hf_checkpoints.py', 'test_train.py',
                 'test_reliability.py', 'test_entry_points.py', 'test_sweep.py',
                 'test_fused_bias.py', 'test_scheme_interface.py', 'test_decode.py',
                 'test_attention.py', 'test_translate.py', 'test_members.py', 'test_moe.py',
                 'test_latent_attention.py', 'test_classify.py', 'test_fope.py',
                 'test_context_extension.py', 'test_autodiff.py', 'test_softcap.py',
                 'test_sinks.py', 'test_sharding.py', 'test_docs_from_records.py',
                 'test_scanned.py', 'test_mlm.py', 'test_hf_config_forms.py', 'test_remap.py')


@pytest.fixture(autouse=True, scope='module')
def _free_compiled_programs():
  """Each test file's compiled programs are dropped after it (their compiled code comes back from
  the persistent cache where a later file needs it). XLA:CPU maps each program's code into its own
  pages: a pytest-xdist worker that kept every program of half the suite passed Linux's
  vm.max_map_count (65,530 mappings) near the run's end, and a compilation or a serialization
  then crashed it (a segmentation fault in jaxlib); three files of the suite alone reach 17,800."""
  yield
  jax.clear_caches()
  gc.collect()


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # Stable: order within kept.


def _shared_dir(tmp_path_factory, name: str):
  """A directory for the whole run: pytest-xdist workers (pytest.ini starts two) share their
  base temporary directory's parent, so what one builds the other reuses."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent
  return root / name


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """Shakespeare built once per run (ArrayRecord + a 512-piece tokenizer); the data pipeline's
  locks let the workers build it and the tokenizers together."""
  path = _shared_dir(tmp_path_factory, 'tfds')
  path.mkdir(exist_ok=True)
  return str(path)


@pytest.fixture
def eight_devices():
  """The first 8 devices, for the tests of a sharded batch; skipped where the default backend
  has fewer (a GPU run of these files, or XLA_FLAGS set without 8 forced CPU devices)."""
  import jax  # pylint: disable=g-import-not-at-top
  if jax.device_count() < 8:
    pytest.skip(f'needs 8 devices; {jax.default_backend()} has {jax.device_count()}')
  return jax.devices()[:8]


@pytest.fixture
def config(data_dir):
  """The tiny LM config pointed at the session's data directory."""
  cfg = test_config.get_config()
  cfg.data.data_dir = data_dir
  return cfg


@pytest.fixture(scope='session')
def mlm_workdir(tmp_path_factory, data_dir):
  """A tiny masked-LM run of 16 steps (the encoder the classification tests fine-tune), trained
  by the first worker that asks for it; its final metrics travel as JSON."""
  from roformer import loop  # pylint: disable=g-import-not-at-top
  from roformer.data import cache  # pylint: disable=g-import-not-at-top
  root = _shared_dir(tmp_path_factory, 'pretrain')
  workdir, result = root / 'mlm', root / 'final_metrics.json'
  with cache.exclusive(root / '.lock'):
    if not result.exists():
      shutil.rmtree(workdir, ignore_errors=True)  # A worker that failed here left no result.
      cfg = test_config.get_config('mlm')
      cfg.data.data_dir = data_dir
      cfg.train.update(steps=16, eval_every=8, checkpoint_every=8, learning_rate=1e-2)
      last = loop.train_and_evaluate(cfg, str(workdir))
      result.write_text(json.dumps(last))
  return str(workdir), json.loads(result.read_text())
