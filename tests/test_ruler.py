"""RULER's tasks (roformer/data/ruler.py): every generated row's scored answer equals what an
independent solver re-derives from the row's words, at several lengths and seeds."""

import collections
import re

import numpy as np
import pytest

from configs import synthetic as synthetic_config
from roformer import errors
from roformer import resolve
from roformer.data import synthetic

RULER = ('niah_multikey', 'niah_multivalue', 'niah_multiquery', 'variable_tracking',
         'common_words')


def _words(row, vocab):
  """The row's words (bos dropped) and, per answer span, the scored words."""
  tokens = np.append(row['inputs'][:1], row['targets'][row['targets_segment_ids'] > 0])
  words = vocab.decode(tokens).split()
  scored = vocab.decode(row['targets'][row['weights'] > 0]).split()
  return words, scored


def solve(task, words):
  """The answer from the words alone: the text before the first question is the context."""
  first = words.index('?')
  context, questions = words[:first], ' '.join(words[first:])
  facts = re.findall(r'(k\d+) is ([kv]\d+) \.', ' '.join(context))
  if task in ('niah_multikey', 'niah_multiquery'):
    value = dict(facts)
    assert len(value) == len(facts)  # Distinct keys.
    return [value[k] for k in re.findall(r'\? (k\d+)', questions)]
  if task == 'niah_multivalue':
    (key,) = re.findall(r'\? (k\d+)', questions)
    return [v for k, v in facts if k == key]
  if task == 'variable_tracking':
    (value,) = re.findall(r'\? (v\d+)', questions)
    bound, names = {value}, []
    for name, source in facts:  # In text order: a name is bound after its source.
      if source in bound:
        bound.add(name)
        names.append(name)
    return names
  counts = collections.Counter(context)
  top = max(counts.values())
  return sorted((w for w, n in counts.items() if n == top), key=lambda w: int(w[1:]))


@pytest.mark.parametrize('task', RULER)
@pytest.mark.parametrize('multiple', [1, 4])
def test_every_row_answer_is_what_an_independent_solver_derives(task, multiple):
  config = synthetic_config.get_config(task)
  length = config.data.seq_len * multiple
  source = synthetic.Source(synthetic.Split(config.data.synthetic, task, 'validation'), length)
  for index in range(40):
    row = source[index]
    words, scored = _words(row, source.vocab)
    assert len(row['inputs']) == length and row['targets_segment_ids'].all()  # Full rows.
    assert solve(task, words) == scored, (index, ' '.join(words))


def test_variable_tracking_chains_are_hops_long_and_disjoint():
  config = synthetic_config.get_config('variable_tracking')
  config.data.synthetic.update(chains=3, hops=5)
  config.data.seq_len = 128
  source = synthetic.Source(synthetic.Split(config.data.synthetic, 'variable_tracking', 'test'),
                            128)
  words, scored = _words(source[3], source.vocab)
  assert len(scored) == 6 and len(set(scored)) == 6
  assert len(re.findall(r'k\d+ is [kv]\d+ \.', ' '.join(words))) == 18


@pytest.mark.parametrize('depth', [0.0, 0.5, 1.0])
def test_needle_depth_places_the_asked_needle(depth):
  config = synthetic_config.get_config('niah_multikey')
  config.data.synthetic.needle_depth = depth
  source = synthetic.Source(synthetic.Split(config.data.synthetic, 'niah_multikey',
                                            'validation'), 256)
  buckets = config.data.synthetic.depth_buckets
  for index in range(10):
    row = source[index]
    words, scored = _words(row, source.vocab)
    first = words.index('?')
    asked = words[first + 1]
    at = ' '.join(words[:first]).split(f'{asked} is {scored[0]} .')[0].split()
    filler = first - 4 * config.data.synthetic.needles
    needles_before = sum(1 for w in at if re.fullmatch(r'k\d+', w))
    placed = (len(at) - 4 * needles_before) / filler
    assert depth - 6 / filler < placed <= depth  # The sentence boundary at or before it.
    assert row['bucket'] == min(int(depth * buckets), buckets - 1)


def test_common_words_are_strictly_the_most_frequent():
  config = synthetic_config.get_config('common_words')
  source = synthetic.Source(synthetic.Split(config.data.synthetic, 'common_words', 'train'), 64)
  words, scored = _words(source[0], source.vocab)
  counts = collections.Counter(words[:words.index('?')])
  assert sorted(counts.values())[-3:] == [4, 4, 4] and sorted(counts.values())[-4] == 1
  assert scored == sorted(scored, key=lambda w: int(w[1:]))


@pytest.mark.parametrize('task,fields,message', [
    ('niah_multikey', {'data.seq_len': 16}, 'cannot hold a niah_multikey row'),
    ('variable_tracking', {'data.synthetic.hops': 20}, 'cannot hold a variable_tracking row'),
    ('niah_multiquery', {'data.synthetic.needle_queries': 5}, 'asks more keys than the 4'),
    ('niah_multivalue', {'data.synthetic.needle_values': 10, 'data.synthetic.num_values': 8},
     'needs 10 distinct values'),
    ('common_words', {'data.synthetic.num_symbols': 128}, 'list 497 distinct words'),
    ('niah_multikey', {'data.synthetic.needle_depth': -0.5}, 'needle_depth=-0.5'),
    ('common_words', {'data.synthetic.needle_depth': 0.5}, "not of 'common_words'"),
    ('passkey', {'data.synthetic.needle_depth': 0.5}, "not of 'passkey'"),
])
def test_a_task_that_cannot_fit_is_refused_in_one_line(task, fields, message):
  import kinds  # pylint: disable=g-import-not-at-top
  config = synthetic_config.get_config(task)
  kinds.set_fields(config, fields)
  with pytest.raises(errors.ConfigError, match=message) as e:
    resolve.validate(config)
  assert '\n' not in str(e.value)


def test_the_length_sweep_can_name_every_ruler_task():
  from configs.sweeps import length  # pylint: disable=g-import-not-at-top
  sweep = length.get_sweep('common_words,niah_multikey,rope')
  names = {p['name'] for p in sweep['points']}
  assert {'common_words,rope,seed=0', 'niah_multikey,rope,seed=2'} <= names
  common = next(p for p in sweep['points'] if p['name'].startswith('common_words'))
  assert common['data.synthetic.num_symbols'] == 512
