"""A rerun block: which points of a sweep run again came out as their kept records."""

import json
import pathlib
import shutil

import pytest

from roformer import errors
from scripts import docs_from_records

KEPT = pathlib.Path(__file__).resolve().parents[1] / 'docs/results/length_2026-11-28/records'
POINTS = ('copy,rope,seed=0', 'copy,alibi,seed=0', 'passkey,rope,seed=1')


def _copy(target: pathlib.Path) -> None:
  for name in POINTS:
    shutil.copytree(KEPT / name, target / name)


def _render(root: pathlib.Path, spec: str, monkeypatch) -> str:
  monkeypatch.setattr(docs_from_records, 'ROOT', root)
  text = f'<!-- records: {spec} -->\n<!-- end of records -->'
  return docs_from_records.regenerate(text, {})


def test_records_rerun_as_they_were_are_the_same_everywhere(tmp_path, monkeypatch):
  _copy(tmp_path / 'a')
  _copy(tmp_path / 'b')
  text = _render(tmp_path, 'b rerun against=a', monkeypatch)
  assert '3 of 3 points logged the same training metrics to the bit as their kept records (`a`)' \
      in text
  # copy (32 tokens) and passkey (64) are evaluated at 1x-8x: three points at each multiple.
  for multiple in ('1x', '2x', '4x', '8x'):
    assert f'| {multiple} | 3 | 3 | 0.000 | 0.000 | 0 |' in text
  assert '| point | length | kept | rerun |' not in text


def test_a_point_that_moved_is_counted_at_its_length_and_named_past_the_threshold(
    tmp_path, monkeypatch):
  _copy(tmp_path / 'a')
  _copy(tmp_path / 'b')
  moved = tmp_path / 'b' / 'copy,alibi,seed=0'
  results = json.loads((moved / 'eval_results.json').read_text())
  rows = results['splits']['validation']['lengths']
  at_2x = next(r for r in rows if r['multiplier'] == 2)
  before = at_2x['sequence_accuracy']
  at_2x['sequence_accuracy'] = before + 0.25 if before < 0.5 else before - 0.25
  (moved / 'eval_results.json').write_text(json.dumps(results))
  metrics = (tmp_path / 'b' / 'passkey,rope,seed=1' / 'metrics.jsonl')
  first, *rest = metrics.read_text().splitlines()
  line = json.loads(first)
  line['loss'] = line['loss'] + 1e-7  # The last bits of one logged loss.
  metrics.write_text('\n'.join([json.dumps(line), *rest]) + '\n')
  text = _render(tmp_path, 'b rerun against=a over=0.2', monkeypatch)
  assert '2 of 3 points logged the same training metrics' in text
  assert '| 2x | 3 | 2 | 0.000 | 0.250 | 1 |' in text
  assert '| 1x | 3 | 3 | 0.000 | 0.000 | 0 |' in text
  assert (f'| copy,alibi,seed=0 | 2x | {before:.3f} | {at_2x["sequence_accuracy"]:.3f} |'
          in text)
  assert 'moved more than 0.2 |' in text
  assert 'copy,alibi,seed=0 | 2x' not in _render(tmp_path, 'b rerun against=a over=0.3',
                                                 monkeypatch)


@pytest.mark.parametrize('spec, match', [
    ('b rerun', 'needs against=RECORDS'),
    ('b rerun against=a measure=perplexity', "measure='perplexity': a rerun block compares"),
    ('b rerun against=a over=abc', "over='abc' is not a number of 0 or more"),
    ('b rerun against=a over=nan', "over='nan' is not a number of 0 or more"),
])
def test_a_rerun_block_without_its_kept_records_or_with_another_measure_is_refused(
    tmp_path, monkeypatch, spec, match):
  _copy(tmp_path / 'a')
  _copy(tmp_path / 'b')
  with pytest.raises(errors.ConfigError, match=match):
    _render(tmp_path, spec, monkeypatch)


def test_two_folders_of_other_points_are_one_error(tmp_path, monkeypatch):
  _copy(tmp_path / 'a')
  shutil.copytree(KEPT / 'copy,xl,seed=4', tmp_path / 'b' / 'copy,xl,seed=4')
  with pytest.raises(errors.ConfigError, match='hold no point of the same name'):
    _render(tmp_path, 'b rerun against=a', monkeypatch)


def test_a_point_without_its_training_metrics_is_refused_not_counted_the_same(tmp_path,
                                                                               monkeypatch):
  """Two missing metrics.jsonl are not the same training: the block names the file."""
  _copy(tmp_path / 'a')
  _copy(tmp_path / 'b')
  (tmp_path / 'b' / 'copy,rope,seed=0' / 'metrics.jsonl').unlink()
  with pytest.raises(errors.ConfigError, match=r'copy,rope,seed=0/metrics.jsonl does not exist'):
    _render(tmp_path, 'b rerun against=a', monkeypatch)


def test_points_whose_evaluations_hold_no_answers_are_one_error(tmp_path, monkeypatch):
  """Rows without the measure (a language model's) give one line, not a KeyError."""
  _copy(tmp_path / 'a')
  _copy(tmp_path / 'b')
  for folder in ('a', 'b'):
    for name in POINTS:
      path = tmp_path / folder / name / 'eval_results.json'
      results = json.loads(path.read_text())
      for row in results['splits']['validation']['lengths']:
        row.pop('sequence_accuracy')
      path.write_text(json.dumps(results))
  with pytest.raises(errors.ConfigError, match='has sequence_accuracy'):
    _render(tmp_path, 'b rerun against=a', monkeypatch)
