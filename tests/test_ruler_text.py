"""RULER's tasks in a corpus's text (roformer/data/ruler_text.py): each row hides RULER's needle
sentences (or variable chains) in a window of the text, or lists RULER's numbered words, and asks
at the end, exactly `length` predictions long, with the answers' ids (and only those) scored,
rebuilt the same from its index; the asked needle's depth is placed and reported; a row too short
is one error naming the fix."""

import collections
import re

import ml_collections
import numpy as np
import pytest

from roformer import errors
from roformer.data import mixture
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


def _rows(task, length=800, tokenizer=None, **fields):
  cfg = ml_collections.ConfigDict({'seed': 3, 'eval_examples': 16, 'key_digits': 7,
                                   'depth_buckets': 5, 'filler': 'text', 'needles': 4,
                                   'needle_values': 3, 'needle_queries': 2, 'needle_depth': -1.0,
                                   'chains': 2, 'hops': 3, 'common_words': 3, 'common_count': 4,
                                   **fields})
  split = passkey_text.Split(cfg, 'validation', [{'text': t} for t in TEXT], 'text', task)
  return ruler_text.rows(split, tokenizer or BYTES, length)


def _text(ids) -> str:
  return bytes(int(i) - tokenizer_lib.NUM_SPECIAL for i in ids
               if i >= tokenizer_lib.NUM_SPECIAL).decode('utf-8')


NEEDLE_TASKS = ('niah_multikey', 'niah_multivalue', 'niah_multiquery')
STATEMENT = re.compile(r' VAR ([A-Z]{5}) = (?:(\d+)|VAR ([A-Z]{5}))\.')
TRACE = re.compile(r' Question: Find all variables that are assigned the value (\d+) in the text '
                   r'above\. Answer: According to the chain\(s\) of variable assignment in the '
                   r'text above, (\d+) variables are assigned the value \1, they are:((?: [A-Z]{5})+)$')
ITEM = re.compile(r'\n(\d+)\. ([a-z]+)')
COUNT = re.compile(r'\nQuestion: What are the (\d+) most common words in the above list\? Answer: '
                   r'The top \1 words that appear most often in the list are:((?: [a-z]+)+)$')


@pytest.mark.parametrize('task', NEEDLE_TASKS)
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


def _split(task):
  return _rows(task).split  # The split, its text encoded (cached) by the rows built once.


def test_several_sources_too_short_are_one_refusal_with_the_length_that_holds_them_all():
  """Each source's shortest length is the one its own refusal names; the check of a mixture
  names them all and their largest, which holds every source (and one below it does not)."""
  splits = {'mk': _split('niah_multikey'), 'vt': _split('variable_tracking'),
            'passkey': _split('passkey')}
  shortest = {}
  for name, split in splits.items():
    with pytest.raises(errors.TooShort) as alone:
      ruler_text.rows(split, BYTES, 20)
    shortest[name] = alone.value.shortest
    ids, spans, _ = ruler_text.rows(split, BYTES, shortest[name]).tokens(0)  # It holds one:
    assert len(ids) == shortest[name] + 1 and spans and all(0 < a < b < len(ids)
                                                            for a, b in spans), (name, spans)
  source = mixture.Mixture(splits, {}, {name: 1.0 for name in splits})
  longest = max(shortest.values())
  with pytest.raises(errors.TooShort, match=f'--config.data.seq_len={longest} or more') as both:
    mixture.check_text_lengths({'validation': source, 'train': source}, BYTES, 20)
  assert both.value.shortest == longest
  for name, split in splits.items():
    assert f'{name} ({split.task}) {shortest[name]}' in str(both.value)
  mixture.check_text_lengths({'validation': source}, BYTES, longest)
  with pytest.raises(errors.TooShort):
    mixture.check_text_lengths({'validation': source}, BYTES, longest - 1)


def test_rows_too_short_for_their_needles_are_refused_with_the_length_that_fits():
  with pytest.raises(errors.ConfigError, match=r'niah_multikey rows in text .* of 100 tokens '
                     r'cannot hold .*--config.data.seq_len=\d+ or more'):
    _rows('niah_multikey', length=100)
  cfg = ml_collections.ConfigDict({'needles': 200, 'needle_queries': 2})
  with pytest.raises(errors.ConfigError, match='draw 200 distinct keys'):
    ruler_text.validate('niah_multikey', cfg)


def test_only_passkey_and_rulers_tasks_read_text():
  assert set(synthetic.TEXT_TASKS) == {'passkey', *ruler_text.TASKS}
  from configs import synthetic as synthetic_config  # pylint: disable=import-outside-toplevel
  for task in ('copy', 'flip_flop', 'variable_tracking', 'common_words', 'niah_multikey'):
    cfg = synthetic_config.get_config(task).data.synthetic
    cfg.filler = 'text'
    if task in synthetic.TEXT_TASKS:
      synthetic.validate(task, cfg, 64, 512)
    else:
      with pytest.raises(errors.ConfigError, match=f"this task is '{task}'"):
        synthetic.validate(task, cfg, 64, 512)


def _bound_to(statements, value):
  """Every name bound to `value`, following the chain from the text alone, in binding order."""
  names, found = [], {value}
  for name, number, source in statements:
    if (number or source) in found:
      names.append(name)
      found.add(name)
  return names


@pytest.mark.parametrize('depth', [-1.0, 0.0, 1.0])
def test_variable_tracking_in_text_asks_for_every_name_bound_to_one_value_in_order(depth):
  rows = _rows('variable_tracking', needle_depth=depth)
  for index in range(8):
    ids, spans, bucket = rows.tokens(index)
    assert len(ids) == 801 and ids[0] == tokenizer_lib.BOS_ID and ids[-1] == tokenizer_lib.EOS_ID
    text = _text(ids)
    statements = STATEMENT.findall(text)
    assert len(statements) == 2 * 4  # chains x (hops + 1)
    assert len({name for name, _, _ in statements}) == 8  # Every name bound once.
    value, count, answer = TRACE.search(text).groups()
    names = _bound_to(statements, value)
    assert answer.split() == names and int(count) == len(names) == 4
    [(start, end)] = spans
    assert _text(ids[start:end]) == answer and end == len(ids) - 1
    if depth >= 0:  # The asked chain's first statement at the depth.
      assert bucket == min(int(depth * 5), 4)
      plain = lambda end: len(STATEMENT.sub('', text[:end]))  # The text's characters.
      where = plain(text.index(f' VAR {names[0]} = {value}.')) / plain(text.index(' Question:'))
      assert abs(where - depth) < 0.02
    np.testing.assert_array_equal(rows.tokens(index)[0], ids)


def test_common_words_in_text_lists_numbered_words_and_asks_for_the_most_frequent():
  rows = _rows('common_words', length=1200, common_words=4, common_count=5)
  for index in range(8):
    ids, spans, bucket = rows.tokens(index)
    assert len(ids) == 1201 and ids[-1] == tokenizer_lib.EOS_ID and bucket == 0
    text = _text(ids)
    items = ITEM.findall(text)
    assert [int(n) for n, _ in items] == list(range(1, len(items) + 1))
    counts = collections.Counter(word for _, word in items)
    count, answer = COUNT.search(text).groups()
    common = [w for w, c in counts.items() if c == 5]
    assert int(count) == 4 and answer.split() == sorted(common) and len(common) == 4
    assert max(c for w, c in counts.items() if w not in common) < 5
    # The list fills the row: the text before it is shorter than the item that did not fit.
    assert text.index(ruler_text.LIST) <= len(f'\n{len(items) + 1}. ') + max(map(len, counts))
    [(start, end)] = spans
    assert _text(ids[start:end]) == answer and end == len(ids) - 1
    np.testing.assert_array_equal(rows.tokens(index)[0], ids)


def test_common_words_rare_words_repeat_below_the_common_count_when_the_pool_runs_short():
  rows = _rows('common_words', length=2000, common_words=2, common_count=4)
  text = _text(rows.tokens(0)[0])
  counts = collections.Counter(word for _, word in ITEM.findall(text))
  common = COUNT.search(text).group(2).split()
  assert {counts[w] for w in common} == {4}
  assert 1 < max(c for w, c in counts.items() if w not in common) < 4  # The pool reused.
  with pytest.raises(errors.ConfigError, match=r'may list more words than .* Fix: a shorter '
                     r'length, or a larger --config.data.synthetic.common_count'):
    _rows('common_words', length=2000, common_words=2, common_count=2)


@pytest.mark.parametrize('task', ['variable_tracking', 'common_words'])
def test_rows_too_short_for_the_chains_or_the_list_are_refused(task):
  with pytest.raises(errors.ConfigError, match=rf'{task} rows in text .* of 60 tokens cannot '
                     r'hold .*--config.data.seq_len=\d+ or more'):
    _rows(task, length=60)
  cfg = ml_collections.ConfigDict({'chains': 300, 'hops': 3, 'key_digits': 5})
  with pytest.raises(errors.ConfigError, match='bind 1200 distinct names'):
    ruler_text.validate('variable_tracking', cfg)
  cfg.update(chains=11, key_digits=1)  # Eleven chains, each its own value of one digit.
  with pytest.raises(errors.ConfigError, match='of which there are 10. Fix: fewer chains'):
    ruler_text.validate('variable_tracking', cfg)


@pytest.fixture(scope='module')
def byte_level_bpe(tmp_path_factory):
  """A pretrained-style tokenizer (byte-level BPE, `<s>` and `</s>`, ids unshifted) trained on
  the text and RULER's sentences: words and numbers split into merges of varying length."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=600, special_tokens=['<s>', '</s>'], show_progress=False,
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(list(TEXT) + list(ruler_text.NEEDLE + ruler_text.QUESTION
                                            + ruler_text.TRACE + ruler_text.COUNT), trainer)
  directory = tmp_path_factory.mktemp('bpe')
  tok.save(str(directory / 'tokenizer.json'))
  (directory / 'tokenizer_config.json').write_text('{"bos_token": "<s>", "eos_token": "</s>"}')
  return vocabularies.Pretrained(str(directory))


@pytest.mark.parametrize('task', ruler_text.TASKS)
def test_the_answer_spans_are_the_answer_in_a_pretrained_tokenizer(task, byte_level_bpe):
  """In a Hugging Face tokenizer, a row is as long, and its last span decodes to the answer that
  the question asks, with the tokenizer's own bos and eos."""
  tok = byte_level_bpe
  bos, eos = vocabularies.framing(tok)
  rows = _rows(task, length=1000, tokenizer=tok)
  pattern = {'variable_tracking': TRACE, 'common_words': COUNT}.get(task, QUESTION)
  for index in range(3):
    ids, spans, _ = rows.tokens(index)
    assert len(ids) == 1001 and list(ids[:len(bos)]) == bos and list(ids[-1:]) == eos
    answer = pattern.findall(tok.decode(ids[:spans[-1][1]]))[-1][-1]
    assert tok.decode(ids[spans[-1][0]:spans[-1][1]]) == ' ' + answer.strip()
