"""Passkey rows hidden in a corpus's text (config.data.synthetic.filler='text',
roformer/data/passkey_text.py): each row is a window of the text with the key sentence inside
and the question at the end, its answer weighted, rebuilt the same from its index; a mixture
trains on each row as one packed row and scores it like the synthetic task; bad settings are
one error."""

import json
import os
import re

import ml_collections
import numpy as np
import pytest

from roformer import config_args
from roformer import config_lib
from roformer import errors
from roformer import loop
from roformer import metrics
from roformer.data import passkey_text
from roformer.data import pipeline
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies

BYTES = vocabularies.given('bytes')  # One id per byte: a row's text is its ids' bytes.
TEXT = ('Now is the winter of our discontent made glorious summer by this sun of York; ',
        'and all the clouds that lour upon our house in the deep bosom of the ocean buried. ')
ROW = re.compile(r'^(?P<before>.*) The pass key is (?P<key>\d{5})\. Remember it\. (?P=key) is '
                 r'the pass key\. (?P<after>.*) What is the pass key\? The pass key is (?P=key)$',
                 re.S)


def _split(name: str = 'validation', buckets: int = 5) -> passkey_text.Split:
  cfg = ml_collections.ConfigDict({'seed': 3, 'eval_examples': 64, 'key_digits': 5,
                                   'depth_buckets': buckets, 'filler': 'text'})
  return passkey_text.Split(cfg, name, [{'text': t} for t in TEXT], 'text')


def _text(row) -> str:
  ids = np.append(row['inputs'][:1], row['targets'][row['targets_segment_ids'] > 0])
  assert ids[0] == tokenizer_lib.BOS_ID and ids[-1] == tokenizer_lib.EOS_ID
  return bytes(int(i) - tokenizer_lib.NUM_SPECIAL for i in ids[1:-1]).decode('utf-8')


@pytest.mark.parametrize('length', [160, 301])
def test_a_row_hides_the_key_in_a_window_of_the_text_and_asks_for_it_at_the_end(length):
  rows, stream = passkey_text.Rows(_split(), BYTES, length), ''.join(TEXT)
  depths = []
  for i in range(40):
    row = rows[i]
    assert (row['inputs_segment_ids'] == 1).all()  # Exactly `length` predictions.
    np.testing.assert_array_equal(row['inputs_positions'], np.arange(length))
    np.testing.assert_array_equal(row['inputs'][1:], row['targets'][:-1])
    match = ROW.match(_text(row))
    assert match, _text(row)
    window = match['before'] + match['after']
    assert window in stream * (2 + length // len(stream))  # A window of the text, wrapping.
    # Only the answer after the question is weighted: a space and its 5 digits, the row's
    # last targets before [eos].
    answer = np.flatnonzero(row['weights'])
    np.testing.assert_array_equal(answer, np.arange(length - 7, length - 1))
    assert bytes(int(t) - tokenizer_lib.NUM_SPECIAL for t in row['targets'][answer]).decode() == (
        ' ' + match['key'])
    depth = len(match['before']) / len(window)
    assert row['bucket'] == min(int(depth * 5), 4)
    depths.append(depth)
  assert min(depths) < 0.2 and max(depths) > 0.8  # Keys at every depth.


def test_a_row_is_the_same_from_its_index_and_training_rows_follow_the_run_seed():
  rows = passkey_text.Rows(_split(), BYTES, 160)
  again = passkey_text.Rows(_split(), BYTES, 160)
  for i in range(5):
    for key, value in rows[i].items():
      np.testing.assert_array_equal(again[i][key], value)
  assert _text(rows[0]) != _text(rows[1])
  assert len(rows) == 64  # eval_examples rows to evaluate.
  train = [passkey_text.Rows(_split('train'), BYTES, 160, seed) for seed in (1, 1, 2)]
  first = [[_text(r[i]) for i in range(4)] for r in train]
  assert first[0] == first[1] and first[0] != first[2]


def test_a_mixture_trains_on_each_row_as_one_packed_row():
  split, length = _split('train'), 160
  batches = pipeline.lm_dataset(split, BYTES, text_key='text', seq_len=length, batch_size=4,
                                shuffle=False, seed=5)
  batch = next(iter(batches))
  rows = passkey_text.Rows(split, BYTES, length, 5)
  for i in range(4):
    for key in ('inputs', 'targets', 'inputs_positions', 'inputs_segment_ids'):
      np.testing.assert_array_equal(batch[key][i], rows[i][key])


def test_rows_too_short_for_the_key_are_one_error_naming_the_fix():
  need = len(' The pass key is. Remember it. is the pass key.  What is the pass key? The pass '
             'key is') + 3 * 6 + 2 + 1  # The fixed bytes, three keys, bos, eos, one of text.
  passkey_text.Rows(_split(), BYTES, need - 1)
  with pytest.raises(errors.ConfigError, match=f'config.data.seq_len={need - 1} or more'):
    passkey_text.Rows(_split(), BYTES, need - 2)


def test_the_text_filler_is_refused_outside_a_mixture_and_for_other_tasks(config):
  alone = config_args.load('configs/synthetic.py:passkey')
  alone.data.synthetic.filler = 'text'
  with pytest.raises(errors.ConfigError, match="filler='text' hides the key in config.data.name"):
    config_lib.validate(alone)
  config.data.mixture = {'plays': {'weight': 1.0},
                         'copies': {'weight': 1.0, 'name': 'synthetic/copy'}}
  config.data.synthetic.filler = 'text'
  with pytest.raises(errors.ConfigError, match=r"mixture.copies: config.data.synthetic.filler="):
    config_lib.validate(config)


def test_a_run_on_the_mixture_scores_the_key_rows_like_the_synthetic_task(config, tmp_path):
  config.data.mixture = {'plays': {'weight': 3.0},
                         'keys': {'weight': 1.0, 'name': 'synthetic/passkey'}}
  config.data.update(seq_len=112, tokenizer='bytes')
  config.data.synthetic.update(filler='text', key_digits=2, depth_buckets=2, eval_examples=8)
  config.train.update(steps=2, eval_every=2, checkpoint_every=2, log_every=1)
  config.eval.update(length_multipliers=(1, 2), max_batches=-1)
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(config, workdir, eval_splits=('validation',))  # eval.py's results.
  logged = [r for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
            if r['split'] == 'validation/keys']
  assert logged and 'sequence_accuracy' in logged[-1]
  with open(os.path.join(workdir, 'eval_results.json'), encoding='utf-8') as f:
    results = json.load(f)
  keys = results['splits']['validation/keys']['lengths']
  assert [r['length'] for r in keys] == [112, 224]
  for r in keys:  # 8 rows, each answer a space and 2 digits (bytes: one id each).
    assert r['rows'] == 8 and r['tokens'] == 24 and len(r['depth_accuracy']) == 2
    assert r['sequence_accuracy'] <= r['accuracy'] + 1e-9  # A row right has both digits right.
  assert 'unigram_loss' in results['splits']['validation/plays']
  assert 'unigram_loss' not in results['splits']['validation/keys']
