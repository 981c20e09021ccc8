"""RULER's needle tasks in a corpus's text (roformer/data/ruler_text.py): each row hides RULER's
needle sentences in a window of the text and asks for the values at the end, exactly `length`
predictions long, with the answers' ids (and only those) scored, rebuilt the same from its index;
the asked needle's depth is placed and reported; a row too short is one error naming the fix."""

import re

import ml_collections
import numpy as np
import pytest

from roformer import errors
from roformer.data import passkey_text
from roformer.data import ruler_text
from roformer.data import synthetic
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies

BYTES = vocabularies.given('bytes')
TEXT = ('Now is the winter of our discontent made glorious summer by this sun of York; ',
        'and all the clouds that lour upon our house in the deep bosom of the ocean buried. ')
NEEDLE = re.compile(r' One of the special magic numbers for (\w+) is: (\d+)\.')
QUESTION = re.compile(r' What are all the special magic numbers for (\w+) mentioned in the '
                      r'provided text\? The special magic numbers for \1 mentioned in the '
                      r'provided text are (\d+(?:, \d+)*)')


def _rows(task, length=800, **fields):
  cfg = ml_collections.ConfigDict({'seed': 3, 'eval_examples': 16, 'key_digits': 7,
                                   'depth_buckets': 5, 'filler': 'text', 'needles': 4,
                                   'needle_values': 3, 'needle_queries': 2, 'needle_depth': -1.0,
                                   **fields})
  split = passkey_text.Split(cfg, 'validation', [{'text': t} for t in TEXT], 'text', task)
  return passkey_text.rows(split, BYTES, length)


def _text(ids) -> str:
  return bytes(int(i) - tokenizer_lib.NUM_SPECIAL for i in ids
               if i >= tokenizer_lib.NUM_SPECIAL).decode('utf-8')


@pytest.mark.parametrize('task', ruler_text.TASKS)
def test_a_row_hides_rulers_needles_and_asks_for_the_values_at_the_end(task):
  rows = _rows(task)
  for index in range(8):
    ids, spans, bucket = rows.tokens(index)
    assert len(ids) == 801 and ids[0] == tokenizer_lib.BOS_ID and ids[-1] == tokenizer_lib.EOS_ID
    text = _text(ids)
    needles = NEEDLE.findall(text)
    questions = QUESTION.findall(text)
    assert len(needles) == (3 if task == 'niah_multivalue' else 4)
    assert len(questions) == (2 if task == 'niah_multiquery' else 1)
    bound = {}
    for key, value in needles:
      assert len(value) == 7
      bound.setdefault(key, []).append(value)
    assert len(bound) == (1 if task == 'niah_multivalue' else 4)
    assert text.endswith(questions[-1][1])
    for (key, answer), (start, end) in zip(questions, spans):
      assert answer.split(', ') == bound[key]  # Every value of the key, in order.
      assert _text(ids[start:end]) == ' ' + answer  # The span is exactly the answer's ids.
    assert 0 <= bucket < 5
    np.testing.assert_array_equal(rows.tokens(index)[0], ids)  # From its index alone.
    row = rows[index]
    assert row['weights'].sum() == sum(end - start for start, end in spans)


def test_the_asked_needle_sits_at_needle_depth():
  for depth, bucket in ((0.0, 0), (0.5, 2), (1.0, 4)):
    rows = _rows('niah_multikey', needle_depth=depth)
    for index in range(4):
      ids, spans, got = rows.tokens(index)
      assert got == bucket
      text = _text(ids)
      asked = QUESTION.findall(text)[0][0]
      where = text.index(f'numbers for {asked} is:') / text.index(' What are all')
      assert abs(where - depth) < 0.15


def test_rows_too_short_for_their_needles_are_refused_with_the_length_that_fits():
  with pytest.raises(errors.ConfigError, match=r'niah_multikey rows in text .* of 100 tokens '
                     r'cannot hold .*--config.data.seq_len=\d+ or more'):
    _rows('niah_multikey', length=100)
  cfg = ml_collections.ConfigDict({'needles': 200, 'needle_queries': 2})
  with pytest.raises(errors.ConfigError, match='draw 200 distinct keys'):
    ruler_text.validate('niah_multikey', cfg)


def test_only_passkey_and_the_needle_tasks_read_text():
  assert set(synthetic.TEXT_TASKS) == {'passkey', *ruler_text.TASKS}
  from configs import synthetic as synthetic_config  # pylint: disable=import-outside-toplevel
  for task in ('copy', 'variable_tracking', 'niah_multikey'):
    cfg = synthetic_config.get_config(task).data.synthetic
    cfg.filler = 'text'
    if task in synthetic.TEXT_TASKS:
      synthetic.validate(task, cfg, 64, 512)
    else:
      with pytest.raises(errors.ConfigError, match=f"this task is '{task}'"):
        synthetic.validate(task, cfg, 64, 512)
