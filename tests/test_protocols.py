"""Evaluation's sliding-window protocol: every token scored once, with at least L - stride
tokens of context, through the packed pipeline; a stride of L is the plain windows."""

import numpy as np
import pytest

from configs import test as test_config
from roformer import errors
from roformer import resolve
from roformer.data import pipeline
from roformer.data import vocabularies

BYTES = vocabularies.Bytes()


@pytest.mark.parametrize('n,length,stride', [(5, 8, 3), (8, 8, 4), (9, 8, 4), (40, 8, 3),
                                             (40, 8, 8), (23, 6, 1), (100, 16, 5)])
def test_each_target_is_scored_once_with_at_least_l_minus_stride_of_context(n, length, stride):
  tokens = np.arange(100, 100 + n - 1)  # Framed as [bos] + tokens + [eos]: n targets.
  windows = pipeline.SlidingWindowsForLM(length, stride).flat_map(tokens)
  scored_at = []
  for w in windows:
    assert len(w['inputs']) == len(w['targets']) == len(w['scored']) <= length
    first = int(w['inputs'][0])  # bos (below 100) opens the document; token t is input t - 99.
    start = 0 if first < 100 else first - 99
    for offset in np.flatnonzero(w['scored']):
      target = start + offset  # Index of the scored target in the document.
      assert offset >= min(length - stride, target)  # Its context in this window.
      scored_at.append(target)
  assert sorted(scored_at) == list(range(n))  # Every target once.


def test_the_packed_pipeline_scores_every_token_of_the_split_once():
  source = [{'text': 'x' * n} for n in (3, 17, 40, 64, 9, 130)]
  total = lambda ds, key: sum(int(b[key].sum()) for b in ds)
  plain = pipeline.lm_dataset(source, BYTES, text_key='text', seq_len=32, batch_size=4,
                              shuffle=False)
  sliding = pipeline.lm_dataset(source, BYTES, text_key='text', seq_len=32, batch_size=4,
                                shuffle=False, stride=8)
  real_targets = sum(int((b['targets_segment_ids'] > 0).sum()) for b in plain)
  assert real_targets == sum(len(d['text']) + 1 for d in source)  # Each byte and the eos.
  batches = list(sliding)
  assert total(batches, 'scored') == real_targets
  assert all((b['scored'] <= (b['targets_segment_ids'] > 0)).all() for b in batches)
  assert set(batches[0]) == set(next(iter(plain))) | {'scored'}


def test_a_stride_of_the_whole_length_is_the_plain_windows():
  source = [{'text': 'abc' * n} for n in (5, 30, 11)]
  plain = list(pipeline.lm_dataset(source, BYTES, text_key='text', seq_len=16, batch_size=2,
                                   shuffle=False))
  sliding = list(pipeline.lm_dataset(source, BYTES, text_key='text', seq_len=16, batch_size=2,
                                     shuffle=False, stride=16))
  assert len(plain) == len(sliding)
  for a, b in zip(plain, sliding):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_array_equal(b['scored'], b['targets_segment_ids'] > 0)


@pytest.mark.parametrize('arg,fields,message', [
    ('rope', {'protocol': 'windows', 'stride': 4}, 'read by eval.protocol=sliding only'),
    ('rope', {'protocol': 'sliding', 'stride': 40}, 'longer than the shortest evaluated length, 32'),
    ('mlm', {'protocol': 'sliding'}, 'read only by causal LMs on text'),
])
def test_bad_protocol_settings_are_one_error_naming_the_field(arg, fields, message):
  cfg = test_config.get_config(arg)
  cfg.eval.update(fields)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)
