"""The token cache (config.data.token_cache, roformer/data/tokens.py): ids equal to encoding
the text, in the smallest type; written once per split and tokenizer; a cut write leaves
nothing; a run reads it end to end."""

import json
import os
import pathlib

import numpy as np
import pytest

from configs import test as test_config
from roformer import config_checks
from roformer import config_schema
from roformer import errors
from roformer import loop
from roformer import metrics
from roformer import workdir as workdir_lib
from roformer.data import pipeline
from roformer.data import tokens
from roformer.data import vocabularies


@pytest.mark.parametrize('vocab, dtype', [(256, np.uint8), (257, np.uint16), (65536, np.uint16),
                                          (65537, np.uint32), (2**32, np.uint32)])
def test_ids_take_the_smallest_unsigned_type_the_vocabulary_fits(vocab, dtype):
  assert tokens.id_dtype(vocab) == np.dtype(dtype)


def test_a_vocabulary_beyond_the_largest_type_is_refused():
  with pytest.raises(errors.ConfigError, match='does not fit the token cache'):
    tokens.id_dtype(2**32 + 1)


def _setup(data_dir, token_cache: bool, splits=('train', 'validation')):
  cfg = test_config.get_config()
  cfg.data.update(data_dir=data_dir, token_cache=token_cache)
  return workdir_lib.setup_data(cfg, splits=splits)


def test_the_cached_ids_are_the_encoded_text_and_make_the_same_batches(data_dir):
  text_sources, tokenizer = _setup(data_dir, False)
  id_sources, _ = _setup(data_dir, True)
  for split in ('train', 'validation'):
    cached, text = id_sources[split], text_sources[split]
    assert isinstance(cached, tokens.Source) and len(cached) == len(text)
    assert cached.dtype == np.uint16  # 512 pieces.
    for i in (0, len(text) // 2, len(text) - 1):
      want = tokenizer.encode(tokens.as_text(text[i]['text']))
      got = cached[i][tokens.TOKEN_IDS]
      assert got.dtype == np.int32
      np.testing.assert_array_equal(got, want)
  make = lambda source: pipeline.lm_dataset(source, tokenizer, text_key='text', seq_len=32,
                                            batch_size=4, shuffle=True, seed=3, repeat=True)
  for step, a, b in zip(range(6), iter(make(text_sources['train'])),
                        iter(make(id_sources['train']))):
    assert a.keys() == b.keys(), step
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=f'batch {step}, {k}')


def test_a_split_is_tokenized_once_per_tokenizer_and_a_cut_write_is_redone(data_dir, tmp_path,
                                                                           monkeypatch):
  cfg = test_config.get_config()
  cfg.data.update(data_dir=data_dir)
  sources, tokenizer = workdir_lib.setup_data(cfg, splits=('validation',))
  local = {'data_dir': str(tmp_path), 'split_identity': 'v', 'text_key': 'text'}
  encode = lambda record: tokenizer.encode(tokens.as_text(record['text']))
  calls = []

  def cut(record):
    calls.append(1)
    if len(calls) == 5:
      raise KeyboardInterrupt  # As a kill would, halfway.
    return encode(record)

  with pytest.raises(KeyboardInterrupt):
    tokens.cached(sources['validation'], tokenizer, cut, **local)
  assert sorted(os.listdir(tmp_path / 'tokens')) == [
      f'.{tokens.key("v", tokenizer, "text")}.lock']  # Nothing half-written.
  first = tokens.cached(sources['validation'], tokenizer, encode, **local)
  written = os.path.getmtime(first.path)
  again = tokens.cached(sources['validation'], tokenizer, lambda r: 1 / 0, **local)  # Not read.
  assert again.path == first.path and os.path.getmtime(again.path) == written
  other = tokens.cached(sources['validation'], tokenizer, encode,
                        **{**local, 'split_identity': 'another split'})
  assert other.path != first.path
  by_bytes = tokens.cached(sources['validation'], vocabularies.Bytes(),
                           lambda r: vocabularies.Bytes().encode(tokens.as_text(r['text'])),
                           **local)  # Another tokenizer: its own ids, in uint16.
  assert by_bytes.path not in (first.path, other.path) and by_bytes.dtype == np.uint16
  assert by_bytes[0][tokens.TOKEN_IDS].tolist() == vocabularies.Bytes().encode(
      tokens.as_text(sources['validation'][0]['text'])).tolist()


def test_a_hugging_face_tokenizer_is_keyed_by_the_pipeline_it_encodes_with(tmp_path):
  """A pretrained model's directory (hf:DIR) has a key; a tokenizer.json that differs only in
  truncation (which encoding turns off) shares it, and one that encodes differently does not."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({'a': 0, 'b': 1, '?': 2},
                                                         unk_token='?'))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  for name, change in (('plain', None), ('cut', lambda t: t.enable_truncation(4)),
                       ('lower', lambda t: setattr(t, 'normalizer',
                                                   tokenizers.normalizers.Lowercase()))):
    (tmp_path / name).mkdir()
    if change:
      change(tok)
    tok.save(str(tmp_path / name / 'tokenizer.json'))
    tok.no_truncation()
  keys = {name: tokens.tokenizer_identity(vocabularies.Pretrained(str(tmp_path / name)))
          for name in ('plain', 'cut', 'lower')}
  assert keys['plain'] == keys['cut'] != keys['lower']
  given = lambda name: vocabularies.HuggingFace(str(tmp_path / name / 'tokenizer.json'))
  assert tokens.tokenizer_identity(given('plain')) == tokens.tokenizer_identity(given('cut'))
  assert tokens.tokenizer_identity(given('plain')) != keys['plain']  # Another class.


def test_a_run_reads_the_token_cache_in_training_and_evaluation(data_dir, tmp_path):
  """Two steps and their evaluation on the cached ids (the same batches as the text: the test
  above): each split it reads is tokenized once, and the run's metrics are finite."""
  cfg = test_config.get_config()
  cfg.data.update(data_dir=data_dir, token_cache=True)
  cfg.mesh.num_devices = 1
  cfg.train.update(steps=2, eval_every=2, checkpoint_every=2)
  cfg.eval.length_multipliers = (1,)
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(cfg, workdir, eval_splits=('validation', 'test'))
  records = metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  assert {'train', 'validation'} <= {r['split'] for r in records}
  assert all(np.isfinite(r['loss']) for r in records if 'loss' in r)
  cached = {json.loads(p.read_text(encoding='utf-8'))['split'].rsplit(':', 2)[1]
            for p in pathlib.Path(data_dir, 'tokens').glob('*/info.json')}
  assert cached >= {'test', 'train', 'validation'}


def test_the_token_cache_is_refused_where_no_text_lm_reads_it():
  cfg = config_schema.default_config()
  cfg.data.token_cache = True
  cfg.model.type = 'encoder_decoder'
  (field, _), = config_checks.unread_changes(cfg)
  assert field == 'config.data.token_cache'


def test_a_data_position_saved_on_the_text_resumes_on_the_ids_and_back(data_dir):
  """data.token_cache may change between a run and its resumption: the data position that one
  form saves continues the same batches in the other."""
  text_sources, tokenizer = _setup(data_dir, False, splits=('train',))
  id_sources, _ = _setup(data_dir, True, splits=('train',))
  make = lambda source: iter(pipeline.lm_dataset(
      source, tokenizer, text_key='text', seq_len=32, batch_size=4, shuffle=True, seed=5,
      repeat=True))
  for first, then in ((text_sources, id_sources), (id_sources, text_sources)):
    before = make(first['train'])
    for _ in range(5):
      next(before)
    after = make(then['train'])
    after.set_state(before.get_state())
    for step in range(3):
      a, b = next(before), next(after)
      for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=f'batch {step}, {k}')
