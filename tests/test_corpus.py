"""Your own files as a dataset (roformer/data/corpus.py): every format reads back its documents,
the splits, the cache key, a conversion cut short, and each bad input as one error."""

import glob
import gzip
import importlib.util
import json
import os
import pathlib
import shutil

import ml_collections
import numpy as np
import processes
import pytest

from roformer import config_checks
from roformer import config_schema
from roformer import errors
from roformer import evaluate
from roformer import metrics
from roformer import resolve
from roformer import saved_config
from roformer.data import corpus
from roformer.data import pipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ['First document.\nIt has two lines.', 'Zweites Dokument: äöü ß', 'third',
        'a fourth, with "quotes" and a tab\there', '']


def data_cfg(tmp_path, **fields) -> ml_collections.ConfigDict:
  cfg = config_schema.default_config().data
  cfg.update(name='files', data_dir=str(tmp_path / 'cache'), **fields)
  return cfg


def write_jsonl(path: pathlib.Path, docs, key='text', compress=False):
  lines = ''.join(json.dumps({key: d, 'id': i}) + '\n' for i, d in enumerate(docs))
  if compress:
    with gzip.open(path, 'wt', encoding='utf-8') as f:
      f.write(lines)
  else:
    path.write_text(lines, encoding='utf-8')


def write_parquet(path: pathlib.Path, docs, key='text'):
  import pyarrow  # pylint: disable=g-import-not-at-top
  from pyarrow import parquet  # pylint: disable=g-import-not-at-top
  parquet.write_table(pyarrow.table({key: docs, 'n': list(range(len(docs)))}), path,
                      row_group_size=2)


def texts(source) -> list[str]:
  return [source[i]['text'] for i in range(len(source))]


@pytest.mark.parametrize('suffix', ['.txt', '.md', '.jsonl', '.jsonl.gz', '.json.gz', '.parquet'])
def test_each_format_reads_back_its_documents_in_order(tmp_path, suffix):
  """Each split's globs give it their files' documents in order, byte for byte (empty
  documents included), however the file holds them."""
  for split, docs in (('train', DOCS), ('validation', DOCS[:2]), ('test', DOCS[2:])):
    folder = tmp_path / split
    folder.mkdir()
    if suffix in ('.txt', '.md'):
      for i, doc in enumerate(d for d in docs if d):  # A file per document; none empty.
        (folder / f'{i}{suffix}').write_text(doc, encoding='utf-8')
    elif suffix == '.parquet':
      write_parquet(folder / f'a{suffix}', docs)
    else:
      write_jsonl(folder / f'a{suffix}', docs, compress=suffix.endswith('.gz'))
  cfg = data_cfg(tmp_path, files=str(tmp_path / 'train' / '*'),
                 validation_files=str(tmp_path / 'validation' / '*'),
                 test_files=str(tmp_path / 'test' / '*'))
  sources = pipeline.load_sources(cfg)
  for split, docs in (('train', DOCS), ('validation', DOCS[:2]), ('test', DOCS[2:])):
    want = [d for d in docs if d] if suffix in ('.txt', '.md') else docs
    assert texts(sources[split]) == want, split
    assert sources[split].__getitems__([0, len(want) - 1]) == [{'text': want[0]},
                                                               {'text': want[-1]}]


def test_several_globs_and_folders_below(tmp_path):
  (tmp_path / 'a' / 'deep').mkdir(parents=True)
  (tmp_path / 'a' / 'deep' / 'x.txt').write_text('deep one')
  (tmp_path / 'a' / 'y.txt').write_text('shallow one')
  write_jsonl(tmp_path / 'b.jsonl', ['from json'])
  files = corpus.matched(f'{tmp_path}/a/**/*.txt, {tmp_path}/b.jsonl,{tmp_path}/a/y.txt', 'files')
  assert files == [str(tmp_path / 'a' / 'deep' / 'x.txt'), str(tmp_path / 'a' / 'y.txt'),
                   str(tmp_path / 'b.jsonl')]  # Sorted per glob, each file once.


def test_carved_splits_follow_the_fractions_and_keep_duplicates_together(tmp_path):
  """Without split globs, a document's split follows from its text alone: the counts are
  within 4 standard deviations of the fractions, a duplicate in another file lands where its
  twin does, and converting again gives the same splits."""
  docs = [f'document number {i} ' + 'x' * (i % 7) for i in range(3000)]
  write_jsonl(tmp_path / 'a.jsonl', docs)
  write_jsonl(tmp_path / 'b.jsonl', docs[:300])  # The first 300 again, in another file.
  cfg = data_cfg(tmp_path, files=f'{tmp_path}/*.jsonl', validation_fraction=0.1,
                 test_fraction=0.2)
  sources = pipeline.load_sources(cfg)
  split_of = {}
  for split, source in sources.items():
    for text in texts(source):
      assert split_of.setdefault(text, split) == split  # Duplicates stay together.
  assert len(split_of) == 3000 and sum(map(len, sources.values())) == 3300
  for split, fraction in (('validation', 0.1), ('test', 0.2)):
    n = sum(1 for s in split_of.values() if s == split)
    assert abs(n - 3000 * fraction) < 4 * np.sqrt(3000 * fraction * (1 - fraction)), (split, n)
  assert [split_of[d] for d in docs] == [corpus.carve(d, 0.1, 0.2) for d in docs]


def test_an_unchanged_corpus_is_read_from_the_cache_and_a_changed_file_converts_again(
    tmp_path, monkeypatch):
  (tmp_path / 'docs').mkdir()
  for i in range(40):
    (tmp_path / 'docs' / f'{i:02d}.txt').write_text(f'text of file {i}')
  cfg = data_cfg(tmp_path, files=f'{tmp_path}/docs/*.txt')
  conversions = []
  convert = corpus.convert
  monkeypatch.setattr(corpus, 'convert', lambda *a, **k: conversions.append(1) or convert(*a, **k))
  first = corpus.prepare(cfg, cfg.data_dir)
  assert corpus.prepare(cfg, cfg.data_dir) == first and len(conversions) == 1
  (tmp_path / 'docs' / '07.txt').write_text('text of file 7, changed')
  second = corpus.prepare(cfg, cfg.data_dir)
  assert second != first and len(conversions) == 2
  assert 'text of file 7, changed' in [t for s in corpus.SPLITS
                                       for t in texts(corpus.Source(second, s, 'text'))]
  os.utime(tmp_path / 'docs' / '03.txt', ns=(1, 1))  # Same bytes, another time: converted.
  assert corpus.prepare(cfg, cfg.data_dir) not in (first, second) and len(conversions) == 3
  cfg.validation_fraction = 0.2  # Other settings, other splits: converted.
  corpus.prepare(cfg, cfg.data_dir)
  assert len(conversions) == 4


def test_a_conversion_cut_short_leaves_nothing_to_read_and_the_next_run_converts(tmp_path):
  """A bad document late in the corpus stops the conversion with no converted corpus and no
  partial directory; a partial directory left by a killed conversion is redone."""
  write_jsonl(tmp_path / 'a.jsonl', [f'doc {i}' for i in range(200)])
  with open(tmp_path / 'a.jsonl', 'a', encoding='utf-8') as f:
    f.write('{"text": "cut sho\n')
  cfg = data_cfg(tmp_path, files=f'{tmp_path}/a.jsonl')
  with pytest.raises(errors.DataError, match='a.jsonl line 201 is not JSON'):
    corpus.prepare(cfg, cfg.data_dir)
  assert os.listdir(corpus.root(cfg.data_dir)) == [f'.{corpus.plan(cfg).key()}.lock']
  write_jsonl(tmp_path / 'a.jsonl', [f'doc {i}' for i in range(200)])  # Repaired.
  key = corpus.plan(cfg).key()
  partial = pathlib.Path(corpus.root(cfg.data_dir), key + '.partial')
  partial.mkdir()
  (partial / 'train.array_record').write_bytes(b'half a file')  # As a kill -9 leaves it.
  directory = corpus.prepare(cfg, cfg.data_dir)
  assert not partial.exists() and directory.endswith(key)
  assert sum(len(corpus.Source(directory, s, 'text')) for s in corpus.SPLITS) == 200


def test_documents_that_are_not_utf8_are_named_or_skipped(tmp_path):
  (tmp_path / 'good.txt').write_text('fine text')
  (tmp_path / 'bad.txt').write_bytes(b'caf\xe9 latin-1')
  lines = b'{"text": "ok"}\n{"text": "caf\xe9"}\n{"text": "also ok"}\n'
  (tmp_path / 'x.jsonl').write_bytes(lines)
  cfg = data_cfg(tmp_path, files=f'{tmp_path}/*.txt', validation_fraction=0, test_fraction=0)
  with pytest.raises(errors.DataError, match=r'bad.txt is not UTF-8 text \(byte 0xe9 at byte '
                     r'offset 3 of the file\).*skip_bad_documents=True'):
    pipeline.load_sources(cfg, splits=('train',))
  cfg.files = f'{tmp_path}/x.jsonl'
  with pytest.raises(errors.DataError, match=r'x.jsonl line 2 is not UTF-8 text \(byte 0xe9 at '
                     r'byte offset 28 of the file\)'):
    pipeline.load_sources(cfg, splits=('train',))
  assert lines.index(b"\xe9") == 15 + 13  # The first line, then {"text": "caf.
  cfg.update(files=f'{tmp_path}/*.txt,{tmp_path}/x.jsonl', skip_bad_documents=True)
  directory = corpus.prepare(cfg, cfg.data_dir)
  assert texts(corpus.Source(directory, 'train', 'text')) == ['fine text', 'ok', 'also ok']
  info = json.loads(pathlib.Path(directory, 'info.json').read_text())
  assert info['skipped'] == 2 and info['skipped_first'][1].endswith('x.jsonl line 2')


def _bad_inputs(tmp_path):
  (tmp_path / 'empty.txt').write_bytes(b'')
  (tmp_path / 'blank.jsonl').write_text('\n\n')
  (tmp_path / 'notjson.jsonl').write_text('{"text": "a"}\nnot json\n')
  (tmp_path / 'nokey.jsonl').write_text('{"text": "a"}\n{"body": "b"}\n')
  (tmp_path / 'number.jsonl').write_text('{"text": 5}\n')
  write_parquet(tmp_path / 'good.parquet', ['a', 'b', 'c'])
  whole = (tmp_path / 'good.parquet').read_bytes()
  (tmp_path / 'cut.parquet').write_bytes(whole[:len(whole) // 2])
  write_parquet(tmp_path / 'other.parquet', ['a'], key='body')
  (tmp_path / 'cut.jsonl.gz').write_bytes(gzip.compress(b'{"text": "a"}\n' * 50)[:40])
  (tmp_path / 'table.csv').write_text('text\na\n')
  (tmp_path / 'surrogate.jsonl').write_text('{"text": "ok"}\n{"text": "\\ud83d alone"}\n')
  whole_gz = gzip.compress(b'{"text": "a"}\n' * 400)
  # A byte of the first deflate block after the 10-byte header: zlib's 'invalid block type'.
  (tmp_path / 'garbled.jsonl.gz').write_bytes(whole_gz[:10] + b'\xff' + whole_gz[11:])
  (tmp_path / 'held').mkdir()
  write_jsonl(tmp_path / 'held' / 'v.jsonl', ['held out'])
  return {  # case: (fields, the error names)
      'no match': ({'files': f'{tmp_path}/nothing/*.txt'}, 'nothing/*.txt\' matches no file'),
      'relative': ({'files': 'nothing/*.txt'}, 'A relative glob is read '
                                                'from the current directory'),
      'a directory': ({'files': f'{tmp_path}/held'}, "held' is a directory. Fix: a glob of its "
                                                    "documents, e.g. --config.data.files="),
      'no files': ({'files': ' , '}, 'config.data.files names no files'),
      'empty file': ({'files': f'{tmp_path}/empty.txt'}, 'empty.txt holds no document (an '
                                                         'empty file)'),
      'blank lines': ({'files': f'{tmp_path}/blank.jsonl'}, 'blank.jsonl holds no document'),
      'not json': ({'files': f'{tmp_path}/notjson.jsonl'}, 'notjson.jsonl line 2 is not JSON'),
      'no text key': ({'files': f'{tmp_path}/nokey.jsonl'},
                      "nokey.jsonl line 2 has no 'text' (it holds ['body'])"),
      'not a string': ({'files': f'{tmp_path}/number.jsonl'},
                       "'text' holds a value of type int, not a string"),
      'cut parquet': ({'files': f'{tmp_path}/cut.parquet'},
                      'cut.parquet is not a readable parquet file'),
      'no column': ({'files': f'{tmp_path}/other.parquet'},
                    "other.parquet has no column 'text' (columns: ['body', 'n'])"),
      'cut gzip': ({'files': f'{tmp_path}/cut.jsonl.gz'}, 'cut.jsonl.gz cannot be read'),
      'unknown format': ({'files': f'{tmp_path}/table.csv'}, 'table.csv: its format is not known'),
      'one split glob': ({'files': f'{tmp_path}/good.parquet',
                          'validation_files': f'{tmp_path}/good.parquet'},
                         'config.data.test_files is empty while another split has its own'),
      'lone surrogate': ({'files': f'{tmp_path}/surrogate.jsonl'},
                         "surrogate.jsonl line 2 is not UTF-8 text (a lone surrogate '\\ud83d'"),
      'garbled gzip': ({'files': f'{tmp_path}/garbled.jsonl.gz'},
                       'garbled.jsonl.gz cannot be read'),
      'same file twice': ({'files': f'{tmp_path}/good.parquet',
                           'validation_files': f'{tmp_path}/held/*.jsonl',
                           'test_files': f'{tmp_path}/held/v.jsonl'},
                          'v.jsonl is matched by both config.data.validation_files and test_files'),
      'only held out': ({'files': f'{tmp_path}/held/*.jsonl',
                         'validation_files': f'{tmp_path}/held/*.jsonl',
                         'test_files': f'{tmp_path}/good.parquet'},
                        'every file config.data.files matches is a validation or test file'),
      'empty split': ({'files': f'{tmp_path}/good.parquet', 'validation_fraction': 0.0},
                      'the validation split of config.data.files has no document'),
  }


def test_each_bad_input_is_one_error_naming_the_file_and_nothing_is_left_half_written(tmp_path):
  for case, (fields, message) in _bad_inputs(tmp_path).items():
    cfg = data_cfg(tmp_path, **fields)
    with pytest.raises(errors.ConfigError) as raised:
      pipeline.load_sources(cfg)
    assert message in str(raised.value) and 'Fix: ' in str(raised.value), (case, raised.value)
    root = pathlib.Path(corpus.root(cfg.data_dir))
    kept = [p for p in root.glob('*') if not p.name.endswith('.lock')] if root.is_dir() else []
    # Only a whole conversion stays ('empty split' converts, then refuses the split).
    assert all((p / 'info.json').exists() for p in kept), (case, kept)
    assert len(kept) == (case == 'empty split'), (case, kept)


def test_the_tokenizer_is_trained_on_the_corpus_and_keyed_by_it(tmp_path):
  write_jsonl(tmp_path / 'a.jsonl', [f'words and more words, line {i}' for i in range(300)])
  cfg = data_cfg(tmp_path, files=f'{tmp_path}/a.jsonl', vocab_size=64)
  sources = pipeline.load_sources(cfg)
  tokenizer = pipeline.load_tokenizer(cfg, sources['train'])
  assert tokenizer.decode(tokenizer.encode('words and more')) == 'words and more'
  assert pathlib.Path(tokenizer.path).parent.name == corpus.plan(cfg).key()


def tfds_descriptions() -> str:
  """A glob of real prose that requirements.txt installs and no test wrote: the descriptions of
  TFDS's datasets (186 README.md files, about 100 KB)."""
  package = importlib.util.find_spec('tensorflow_datasets').submodule_search_locations[0]
  return os.path.join(package, 'datasets', '*', 'README.md')


def test_a_folder_of_text_files_trains_with_one_command_and_eval_scores_it(tmp_path, caplog):
  """README's command on the TFDS descriptions (a few steps of the tiny model): train.py
  converts them, trains and evaluates; evaluating the workdir again gives the same loss. Once
  the files change, an evaluation says so and records each split's documents. The glob is given
  relative to the directory train.py runs in, and saved made absolute: the evaluations here run
  from another directory."""
  workdir, cache, docs = tmp_path / 'run', tmp_path / 'cache', tmp_path / 'docs'
  for path in glob.glob(tfds_descriptions()):
    (docs / path.split(os.sep)[-2]).mkdir(parents=True)
    shutil.copy(path, docs / path.split(os.sep)[-2])
  done = processes.run(
      [f'{REPO}/train.py', f'--config={REPO}/configs/test.py',
       f'--workdir={workdir}', '--config.data.name=files', '--config.data.files=docs/*/README.md',
       f'--config.data.data_dir={cache}', '--config.data.vocab_size=256',
       '--config.train.steps=4', '--config.train.eval_every=4', '--config.train.checkpoint_every=4',
       '--config.mesh.num_devices=1'], cwd=tmp_path, env=processes.env(devices=1))
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  assert 'Converted ' in done.stdout and 'from 186 files' in done.stdout
  records = metrics.read_jsonl(str(workdir / 'metrics.jsonl'))
  validation = [r for r in records if r['split'] == 'validation'][-1]
  saved = saved_config.load(str(workdir))
  assert saved.data.files == f'{docs}/*/README.md' and os.getcwd() != str(tmp_path)
  saved.eval.update(max_batches=saved.train.eval_batches, length_multipliers=(1,))
  results = evaluate.evaluate_workdir(saved, str(workdir), splits=('validation',))
  np.testing.assert_allclose(results['splits']['validation']['lengths'][0]['loss'],
                             validation['loss'], rtol=1e-5)
  held_out = corpus.content(saved.data, str(cache), 'validation')
  assert results['data'] == {'validation': {'': held_out}} and held_out.startswith(
      f'{len(pipeline.load_sources(saved.data, ("validation",))["validation"])} documents')
  assert 'train_data_changed' not in results and 'other train documents' not in caplog.text
  for i in range(40):  # 40 documents more: some are carved into each split.
    (docs / f'more{i}').mkdir()
    (docs / f'more{i}' / 'README.md').write_text(f'Another dataset, number {i}.')
  changed = evaluate.evaluate_workdir(saved, str(workdir), splits=('validation',))
  assert 'now hold other train documents than' in caplog.text
  (change,) = changed['train_data_changed']
  assert change.startswith('config.data.files: ') and '186 files' not in change
  now = len(pipeline.load_sources(saved.data, ('validation',))['validation'])
  assert changed['data']['validation'][''] != held_out
  assert changed['data']['validation'][''].startswith(f'{now} documents, sha256 ')


def test_a_relative_glob_is_made_absolute_unless_a_resumed_or_evaluated_run_saved_it(
    tmp_path, monkeypatch):
  """Globs given here name the files from the current directory; a glob equal to the saved
  run's own stays as saved (a run saved with a relative glob resumes with it), and ~ is
  expanded."""
  monkeypatch.chdir(tmp_path)
  cfg = ml_collections.ConfigDict({'files': 'a/*.txt, ~/b.jsonl', 'validation_files': '',
                                   'test_files': 'c/*.md',
                                   'mixture': {'x': {'files': 'd/*.txt', 'weight': 1.0}}})
  corpus.make_absolute(cfg)
  assert cfg.files == f"{tmp_path}/a/*.txt,{os.path.expanduser('~')}/b.jsonl"
  assert (cfg.validation_files, cfg.test_files) == ('', f'{tmp_path}/c/*.md')
  assert cfg.mixture.x.files == f'{tmp_path}/d/*.txt'
  saved = ml_collections.ConfigDict({'files': 'a/*.txt', 'mixture': {'x': {'files': 'd/*.txt'}}})
  again = ml_collections.ConfigDict({'files': 'a/*.txt', 'test_files': 'c/*.md',
                                     'mixture': {'x': {'files': 'e/*.txt'}}})
  corpus.make_absolute(again, saved)
  assert (again.files, again.test_files, again.mixture.x.files) == (
      'a/*.txt', f'{tmp_path}/c/*.md', f'{tmp_path}/e/*.txt')


def test_files_fields_are_refused_for_another_dataset():
  cfg = config_schema.default_config()
  cfg.data.files = 'docs/*.txt'
  (field, spec), = config_checks.unread_changes(cfg)
  assert field == 'config.data.files' and spec.reader.fix == 'set --config.data.name=files'


def test_files_a_split_of_their_own_matches_are_not_trained_on(tmp_path):
  (tmp_path / 'd' / 'val').mkdir(parents=True)
  write_jsonl(tmp_path / 'd' / 'train.jsonl', ['to train on'])
  write_jsonl(tmp_path / 'd' / 'val' / 'v.jsonl', ['held out'])
  write_jsonl(tmp_path / 't.jsonl', ['tested'])
  cfg = data_cfg(tmp_path, files=f'{tmp_path}/d/**/*.jsonl',
                 validation_files=f'{tmp_path}/d/val/*.jsonl', test_files=f'{tmp_path}/t.jsonl')
  sources = pipeline.load_sources(cfg)
  assert [texts(sources[s]) for s in corpus.SPLITS] == [['to train on'], ['held out'], ['tested']]


def test_your_files_are_refused_for_a_classifier_before_anything_is_read():
  from configs import classify  # pylint: disable=g-import-not-at-top
  cfg = classify.get_config()
  cfg.data.update(name='files', files='nowhere/*.txt')
  with pytest.raises(errors.ConfigError, match="holds documents for language models"):
    resolve.validate(cfg)


def test_a_splits_content_is_its_text_wherever_the_files_are_and_whatever_their_times(tmp_path):
  for folder in ('a', 'b'):
    (tmp_path / folder).mkdir()
    write_jsonl(tmp_path / folder / 'x.jsonl', [f'document {i}' for i in range(50)])
  os.utime(tmp_path / 'b' / 'x.jsonl', ns=(1, 1))  # A copy elsewhere, another time.
  a = data_cfg(tmp_path, files=f'{tmp_path}/a/*.jsonl')
  b = data_cfg(tmp_path, files=f'{tmp_path}/b/*.jsonl')
  assert corpus.cache_key(a) != corpus.cache_key(b)  # Converted twice ...
  assert corpus.content(a, a.data_dir, 'train') == corpus.content(b, b.data_dir, 'train')
  info = pathlib.Path(corpus.prepare(a, a.data_dir), 'info.json')  # Converted before hashes:
  recorded = corpus.content(a, a.data_dir, 'train')
  info.write_text(json.dumps({k: v for k, v in json.loads(info.read_text()).items()
                              if k != 'digests'}))
  assert corpus.content(a, a.data_dir, 'train') == recorded  # ... hashed from its records.
  write_jsonl(tmp_path / 'b' / 'x.jsonl', [f'document {i}' for i in range(49)] + ['other'])
  assert corpus.content(a, a.data_dir, 'train') != corpus.content(b, b.data_dir, 'train')


def test_resuming_on_files_whose_text_changed_is_refused_naming_them(tmp_path):
  from roformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  (tmp_path / 'docs').mkdir()
  write_jsonl(tmp_path / 'docs' / 'x.jsonl', [f'document {i}' for i in range(50)])
  config = config_schema.default_config()
  config.data = data_cfg(tmp_path, files=f'{tmp_path}/docs/*.jsonl')
  workdir = tmp_path / 'run'
  workdir.mkdir()
  workdir_lib.record_train_data(config, str(workdir))
  workdir_lib.check_train_data(config, str(workdir))  # The same text: resumes.
  os.utime(tmp_path / 'docs' / 'x.jsonl', ns=(1, 1))
  workdir_lib.check_train_data(config, str(workdir))  # Touched only: resumes.
  write_jsonl(tmp_path / 'docs' / 'x.jsonl', [f'document {i}' for i in range(60)])
  with pytest.raises(errors.ConfigError, match='was trained on other documents than the files '
                     'hold now .config.data.files: .* documents, sha256') as e:
    workdir_lib.check_train_data(config, str(workdir))
  assert f'--config.init_from={workdir}' in str(e.value)
  plain = config_schema.default_config()  # Data the config fixes: nothing recorded.
  workdir_lib.record_train_data(plain, str(tmp_path / 'other'))
  assert not (tmp_path / 'other').exists()


def test_parquet_rows_whose_text_is_null_are_left_out_and_counted(tmp_path):
  write_parquet(tmp_path / 'a.parquet', ['one', None, 'three', None, 'five'])
  cfg = data_cfg(tmp_path, files=f'{tmp_path}/a.parquet', validation_fraction=0.0,
                 test_fraction=0.0)
  directory = corpus.prepare(cfg, cfg.data_dir)
  assert texts(corpus.Source(directory, 'train', 'text')) == ['one', 'three', 'five']
  info = json.loads((pathlib.Path(directory) / 'info.json').read_text())
  assert info['null_rows'] == 2
  assert info['null_rows_first'] == [f'{tmp_path}/a.parquet row 2', f'{tmp_path}/a.parquet row 4']
