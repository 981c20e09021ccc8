"""Mixtures of text sources (config.data.mixture, roformer/data/mixture.py): the rows follow the
weights, each source reads as a run on it alone would, the data position resumes, each source is
evaluated on its own, and bad entries are refused before anything is built."""

import json
import os
import re

import ml_collections
import numpy as np
import pytest

from roformer import config_args
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import metrics
from roformer import resolve
from roformer import saved_config
from roformer.data import mixture
from roformer.data import pipeline
from roformer.data import synthetic
from roformer.data import tokenizer
from roformer.data import vocabularies

BYTES = vocabularies.given('bytes')


def _documents(letter: str, count: int) -> list[dict]:
  """Documents of one letter only, of lengths 3..20: a row's bytes say which source it is."""
  rng = np.random.default_rng(ord(letter))
  return [{'text': letter * int(n)} for n in rng.integers(3, 21, count)]


def _mixture(weights: dict, count: int = 400) -> mixture.Mixture:
  cfg = ml_collections.ConfigDict({'text_key': 'text'})
  return mixture.Mixture({name: _documents(name, count) for name in weights},
                         {name: cfg for name in weights}, weights)


def _batches(source, seed=0, **kwargs):
  return pipeline.lm_dataset(source, BYTES, text_key='text', seq_len=32, batch_size=8,
                             shuffle=True, seed=seed, repeat=True, **kwargs)


def _row_sources(batch) -> list[str]:
  """The letter of each row (every real token of a row comes from one source)."""
  out = []
  for row, segments in zip(batch['inputs'], batch['inputs_segment_ids']):
    text = BYTES.decode(row[(segments > 0) & (row >= tokenizer.NUM_SPECIAL)])
    assert len(set(text)) == 1, text
    out.append(text[0])
  return out


def test_the_rows_follow_the_weights_over_many_batches():
  it = iter(_batches(_mixture({'a': 3.0, 'b': 1.0})))  # Weights need not sum to 1.
  rows = [s for _ in range(100) for s in _row_sources(next(it))]
  share = rows.count('a') / len(rows)
  assert abs(share - 0.75) < 0.01, share  # 800 rows; grain interleaves by weight.


def test_each_source_gives_the_rows_it_gives_alone_with_its_own_seed():
  """Source a's rows in the mixed stream, in order, are the rows of a run on a alone whose
  seed is a's own (mixture.member_seed): each source keeps its own shuffle and packing."""
  mixed = _mixture({'a': 0.5, 'b': 0.5})
  it = iter(_batches(mixed, seed=7))
  rows_a = []
  while len(rows_a) < 40:
    batch = next(it)
    for i, name in enumerate(_row_sources(batch)):
      if name == 'a':
        rows_a.append(batch['inputs'][i])
  alone = iter(pipeline.lm_dataset(mixed.members['a'], BYTES, text_key='text', seq_len=32,
                                   batch_size=8, shuffle=True, seed=mixture.member_seed(7, 'a'),
                                   repeat=True))
  alone_rows = [row for _ in range(5) for row in next(alone)['inputs']]
  for got, want in zip(rows_a, alone_rows):
    np.testing.assert_array_equal(got, want)


def test_the_saved_data_position_continues_every_source_where_it_was():
  make = lambda: iter(_batches(_mixture({'a': 0.7, 'b': 0.3})))
  it = make()
  for _ in range(9):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(5)]
  resumed = make()
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])


def test_a_synthetic_source_reads_its_rows_as_words():
  cfg = config_args.load('configs/synthetic.py:associative_recall').data.synthetic
  split = synthetic.Split(cfg, 'associative_recall', 'validation')
  rows, texts = synthetic.Source(split, 16), synthetic.TextRows(split, 16, text_key='body')
  for i in range(5):
    row = rows[i]
    tokens = row['targets'][row['targets_segment_ids'] > 0][:-1]  # Without [eos].
    assert list(rows.vocab.encode(texts[i]['body'])) == list(tokens)
    assert texts[i]['body'].split()[0].startswith('k')  # A key first: no special ids.


def test_a_synthetic_sources_training_rows_follow_the_run_seed():
  cfg = config_args.load('configs/synthetic.py:copy').data.synthetic
  split = synthetic.Split(cfg, 'copy', 'train')
  one, again, other = (synthetic.TextRows(split, 32, seed) for seed in (1, 1, 2))
  assert [one[i] for i in range(4)] == [again[i] for i in range(4)]
  assert [one[i] for i in range(4)] != [other[i] for i in range(4)]


def test_the_mean_leaves_out_the_sources_scored_on_other_tokens():
  """Sources in `apart` are reported but not averaged; the others' weights are renormalised
  (hand-computed: (0.5 * 2.0 + 0.25 * 4.0) / 0.75)."""
  results = {'a': {'loss': 2.0, 'accuracy': 0.5}, 'b': {'loss': 4.0, 'accuracy': 0.25},
             'keys': {'loss': 0.01, 'accuracy': 1.0}}
  weights = {'a': 0.5, 'b': 0.25, 'keys': 0.25}
  out = mixture.weighted(results, weights, apart=frozenset({'keys'}))
  assert out['loss'] == pytest.approx((0.5 * 2.0 + 0.25 * 4.0) / 0.75)
  assert out['accuracy'] == pytest.approx((0.5 * 0.5 + 0.25 * 0.25) / 0.75)
  assert out['perplexity'] == pytest.approx(np.exp(out['loss']))
  assert out['sources'] == results
  everything = mixture.weighted(results, weights)
  assert everything['loss'] == pytest.approx(0.5 * 2.0 + 0.25 * 4.0 + 0.25 * 0.01)
  assert set(mixture.weighted(results, weights, apart=frozenset(results))) == {'sources'}


def _config(config, entries):
  config.data.mixture = entries
  config.train.update(steps=4, eval_every=4, checkpoint_every=4, log_every=2)
  config.eval.update(length_multipliers=(1,), max_batches=1)
  return config


def test_a_run_on_a_mixture_reports_each_source_as_a_run_on_it_alone_is_scored(config,
                                                                                tmp_path):
  config = _config(config, {'plays': {'weight': 3.0},
                            'keys': {'weight': 1.0, 'name': 'synthetic/passkey'}})
  config.data.seq_len = 64
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(config, workdir)
  records = metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  at = lambda split: [r for r in records if r['split'] == split and r['step'] == 4][0]
  whole, plays, keys = at('validation'), at('validation/plays'), at('validation/keys')
  assert whole['loss'] == pytest.approx(0.75 * plays['loss'] + 0.25 * keys['loss'], rel=1e-6)
  assert plays['loss'] != keys['loss']
  saved = saved_config.load(workdir)
  saved.eval.update(max_batches=saved.train.eval_batches)  # The batches training scored.
  results = evaluate.evaluate_workdir(saved, workdir, splits=('validation',))
  assert sorted(results['splits']) == ['validation/keys', 'validation/plays']
  assert 'unigram_loss' in results['splits']['validation/plays']
  assert 'unigram_loss' not in results['splits']['validation/keys']  # Generated rows.
  assert 'validation/plays      64' in evaluate.format_results(results)
  json.dumps(results)
  # The plays scored as data.name=shakespeare alone (no mixture) give the same loss.
  alone = saved_config.load(workdir)
  alone.data.mixture = {}
  alone.eval.update(max_batches=alone.train.eval_batches)
  plain = evaluate.evaluate_workdir(alone, workdir, splits=('validation',))
  for result in (plain['splits']['validation'], results['splits']['validation/plays']):
    np.testing.assert_allclose(result['lengths'][0]['loss'], plays['loss'], rtol=1e-5)


@pytest.mark.parametrize('entries, message', [
    ({'plays': {}}, 'config.data.mixture.plays has no weight'),
    ({'plays': {'weight': 0.0}}, 'config.data.mixture.plays.weight=0.0 must be'),
    ({'plays': {'weight': 1, 'seq_len': 8}}, 'config.data.mixture.plays.seq_len is not a'),
    ({'plays': {'weight': 1, 'name': ''}}, 'config.data.mixture.plays.name'),
    ({'plays': {'weight': 1, 'files': 'x/*.txt'}},
     "config.data.mixture.plays.files is read only by a source of your own files"),
])
def test_a_bad_entry_is_one_error_naming_it(config, entries, message):
  config.data.mixture = entries
  with pytest.raises(errors.ConfigError, match=message.replace('.', r'\.').replace('(', r'\(')):
    resolve.validate(config)


@pytest.mark.parametrize('entries, message', [
    ({'docs': {'weight': 1, 'name': 'files'}, 'plays': {'weight': 1}},
     "config.data.mixture.docs reads your own files but names none"),
    ({'keys': {'weight': 1, 'name': 'synthetic/bogus'}, 'plays': {'weight': 1}},
     "config.data.mixture.keys: config.data.name='synthetic/bogus' names no synthetic task"),
    ({'keys': {'weight': 1, 'name': 'synthetic/copy'}},
     "the tokenizer is trained on the train split of 'shakespeare'"),
    ({'plays': {'weight': 1, 'name': 'shakespear'}, 'keys': {'weight': 1,
                                                            'name': 'synthetic/copy'}},
     "the entries read 'shakespear'; 'synthetic/copy')"),
    ({'docs': {'weight': 1, 'name': 'files', 'files': '/a/*.txt'}},
     "the entries read your own files '/a/*.txt')"),
])
def test_an_entry_that_cannot_be_read_is_refused_before_any_data_is_opened(config, entries,
                                                                           message):
  config.data.mixture = entries
  with pytest.raises(errors.ConfigError, match=re.escape(message)):
    resolve.validate(config)
  if 'tokenizer is trained' in message:  # Bytes need no source of config.data's.
    config.data.update(tokenizer='bytes')
    resolve.validate(config)


def test_an_evaluation_scores_a_trained_run_on_a_mixture_that_skips_its_tokenizer_source(config):
  """The tokenizer trained on config.data's source must be read by an entry only when it is yet
  to be trained: the model evaluated has its own (eval.py --config.data.mixture=...)."""
  config.data.mixture = {'keys': {'weight': 1, 'name': 'synthetic/copy'}}
  with pytest.raises(errors.ConfigError, match='the tokenizer is trained on the train split'):
    resolve.validate(config)
  resolve.check_fields(config)
  resolve.check_relations(config, on_device=False, trained=(config.data.seq_len, 'its config'))


def test_a_misspelt_task_is_named_as_such_whatever_its_filler(config):
  """A task name that is none is named first, with the task meant: not described by what
  filler='text' does to the task it is not."""
  config.data.mixture = {'keys': {'weight': 1, 'name': 'synthetic/paskey'}, 'plays': {'weight': 1}}
  config.data.synthetic.filler = 'text'
  with pytest.raises(errors.ConfigError, match=re.escape(
      "config.data.mixture.keys: config.data.name='synthetic/paskey' names no synthetic task "
      "(did you mean 'synthetic/passkey'?)")):
    resolve.validate(config)


def test_an_entrys_refusal_names_the_entrys_field_in_its_fix():
  """A source's refusal says to set --config.data.text_key; inside a mixture, the field to set
  is the entry's own."""
  with pytest.raises(errors.ConfigError) as raised:
    with mixture.named('docs'):
      raise errors.DataError("x.jsonl line 1 has no 'text'. Fix: set --config.data.text_key to "
                             'the field, or --config.data.files_other.')
  assert str(raised.value) == (
      "config.data.mixture.docs: x.jsonl line 1 has no 'text'. Fix: set 'text_key' of "
      'config.data.mixture.docs to the field, or --config.data.files_other.')
  assert isinstance(raised.value, errors.DataError)


def test_a_mixture_on_a_run_that_reads_no_text_is_refused():
  config = config_args.load('configs/synthetic.py:passkey')
  config.data.mixture = {'plays': {'weight': 1.0, 'name': 'shakespeare'}}
  with pytest.raises(errors.ConfigError, match='is read only by language models on text') as e:
    resolve.validate(config)
  assert str(e.value).startswith("config.data.mixture={'plays': {'name': 'shakespeare', "
                                 "'weight': 1.0}} is read only") and '\n' not in str(e.value)


def test_the_command_line_sets_a_mixture_and_one_field_of_an_entry():
  config = config_args.load('configs/test.py', [
      ('data.mixture', "{'plays': {'weight': 0.8}, 'keys': {'weight': 0.2}}"),
      ('data.mixture.keys.name', 'synthetic/passkey'),
      ('data.mixture.plays.weight', '0.6')])
  assert mixture.entries(config.data) == {'plays': {'weight': 0.6},
                                          'keys': {'weight': 0.2, 'name': 'synthetic/passkey'}}
  with pytest.raises(errors.ConfigError, match='config.data.mixture.keys.weight'):
    config_args.load('configs/test.py', [('data.mixture', "{'keys': {'weight': 0.2}}"),
                                         ('data.mixture.keys.weight', 'heavy')])
  with pytest.raises(errors.ConfigError, match="the key 'a.b' holds a dot"):
    config_args.load('configs/test.py', [('data.mixture', "{'a.b': {'weight': 0.2}}")])
  with pytest.raises(errors.ConfigError, match='data.mixture.keys.wieght is not a config field'):
    config_args.load('configs/test.py', [('data.mixture', "{'keys': {'weight': 0.2}}"),
                                         ('data.mixture.keys.wieght', '0.3')])
  # A field of an entry not made yet: the entry is made whole first, and the message says how.
  with pytest.raises(errors.ConfigError, match=re.escape(
      "config.data.mixture has no entry 'plays' (its entries: keys). Fix: give the entry whole, "
      """e.g. --config.data.mixture.plays="{'weight': VALUE}", then""")):
    config_args.load('configs/test.py', [('data.mixture', "{'keys': {'weight': 0.2}}"),
                                         ('data.mixture.plays.weight', '0.6')])
  config = config_args.load('configs/test.py', [('data.mixture.plays', "{'weight': 0.6}"),
                                                ('data.mixture.plays.weight', '0.7')])
  assert mixture.entries(config.data) == {'plays': {'weight': 0.7}}
