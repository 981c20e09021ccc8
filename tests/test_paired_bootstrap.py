"""metrics.paired_bootstrap against a paired bootstrap written out here from its definition
(Koehn 2004, with sacreBLEU's mean-shifted statistic): the same resamples of sentence indices
for both systems, each resample's corpus score computed afresh, and the p-value as the share of
resamples whose shifted difference exceeds the observed one."""

import os

import numpy as np
import pytest
import sacrebleu

from roformer import metrics

_REFERENCES = ['the cat sat on the mat today', 'a dog ran in the park quickly',
               'birds sing in the morning light', 'we walked home along the river',
               'she reads a book every night', 'the rain fell on the old roof'] * 3
_BASELINE = ['the cat sat on a mat', 'a dog ran to the park', 'birds sing in morning',
             'we walked home by the river', 'she reads every night', 'rain fell on the roof'] * 3
_SYSTEM = ['the cat sat on the mat', 'the dog ran in the park quickly', 'birds sing at dawn',
           'we went home along the river', 'she reads a book each night',
           'the rain fell on the roof'] * 3


def _by_definition(baseline, system, samples, seed, metric):
  rng = np.random.default_rng(seed)
  indices = rng.choice(len(system), size=(samples, len(system)), replace=True)
  score = lambda hyps, chosen: metric.corpus_score([hyps[i] for i in chosen],
                                                   [[_REFERENCES[i] for i in chosen]]).score
  observed = abs(metric.corpus_score(system, [_REFERENCES]).score
                 - metric.corpus_score(baseline, [_REFERENCES]).score)
  ours = np.array([score(system, chosen) for chosen in indices])
  differences = np.abs(ours - np.array([score(baseline, chosen) for chosen in indices]))
  shifted = differences - differences.mean()
  ordered = np.sort(ours)
  low = samples // 40
  return {'mean': ours.mean(), 'ci': (ordered[samples - low - 1] - ordered[low]) / 2,
          'p': (np.sum(shifted > observed) + 1) / (samples + 1)}


def test_the_bootstrap_matches_its_definition_for_bleu_and_chrf():
  rows = metrics.paired_bootstrap([('base', _BASELINE), ('new', _SYSTEM)], _REFERENCES,
                                  samples=80, seed=7)
  assert [r['system'] for r in rows] == ['base', 'new'] and rows[0]['bleu_p'] is None
  for key, metric in (('bleu', sacrebleu.metrics.BLEU()), ('chrf', sacrebleu.metrics.CHRF())):
    baseline = _by_definition(_SYSTEM, _BASELINE, 80, 7, metric)  # The same resamples.
    np.testing.assert_allclose(rows[0][f'{key}_mean'], baseline['mean'], rtol=1e-4)
    np.testing.assert_allclose(rows[0][f'{key}_ci'], baseline['ci'], rtol=1e-4)
    expected = _by_definition(_BASELINE, _SYSTEM, 80, 7, metric)
    assert rows[1][key] == metric.corpus_score(_SYSTEM, [_REFERENCES]).score
    np.testing.assert_allclose(rows[1][f'{key}_mean'], expected['mean'], rtol=1e-4)
    np.testing.assert_allclose(rows[1][f'{key}_ci'], expected['ci'], rtol=1e-4)
    assert rows[1][f'{key}_p'] == expected['p']
    assert 'bs:80|seed:7' in rows[1][f'{key}_signature']


def test_a_perfect_system_against_a_poor_one_gets_the_smallest_p_and_a_copy_gets_one():
  poor = [' '.join(line.split()[:2]) for line in _REFERENCES]
  spaced = [line.replace(' ', '  ') for line in poor]  # Scored alike: the same tokens.
  rows = metrics.paired_bootstrap([('poor', poor), ('perfect', list(_REFERENCES)),
                                   ('copy', list(poor)), ('spaced', spaced)], _REFERENCES,
                                  samples=99)
  assert abs(rows[1]['bleu'] - 100) < 1e-9 and rows[1]['chrf'] == 100.0
  assert rows[1]['bleu_ci'] == rows[1]['chrf_ci'] == 0.0  # Every resample scores 100.
  assert rows[1]['bleu_p'] == rows[1]['chrf_p'] == 1 / 100  # No resample reaches the gap.
  # Hypotheses scored the same as the baseline's differ by nothing in every resample.
  assert rows[2]['bleu_p'] == rows[2]['chrf_p'] == rows[3]['bleu_p'] == rows[3]['chrf_p'] == 1.0


def test_the_seed_is_set_for_the_call_only_and_too_few_resamples_or_seed_0_are_refused(
    monkeypatch):
  monkeypatch.delenv('SACREBLEU_SEED', raising=False)
  first = metrics.paired_bootstrap([('a', _BASELINE), ('b', _SYSTEM)], _REFERENCES, samples=40)
  assert 'SACREBLEU_SEED' not in os.environ
  monkeypatch.setenv('SACREBLEU_SEED', 'none')
  again = metrics.paired_bootstrap([('a', _BASELINE), ('b', _SYSTEM)], _REFERENCES, samples=40)
  assert os.environ['SACREBLEU_SEED'] == 'none' and again == first
  for samples, seed in ((39, 1), (40, 0)):
    with pytest.raises(ValueError, match='at least 40 resamples'):
      metrics.paired_bootstrap([('a', _BASELINE), ('b', _SYSTEM)], _REFERENCES, samples, seed)


def test_a_decoded_file_keeps_a_carriage_return_inside_its_sentence(tmp_path):
  """A line is a sentence only where a newline ends it: a stray carriage return (which text
  mode would turn into a line break) would otherwise shift every sentence after it."""
  path = tmp_path / 'test-step4.hyp.txt'
  path.write_bytes('ein\rHaus\nzwei\n\n'.encode('utf-8'))
  assert metrics.read_lines(str(path)) == ['ein\rHaus', 'zwei', '']
  assert (metrics.references_of('translations/test-step4.b3.hyp.txt')
          == 'translations/test-step4.b3.ref.txt')
