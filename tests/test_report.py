"""scripts/report.py on kept records it must not lose: an --out that names a directory, and a
point whose loss diverged."""

import json
import os
import pathlib
import re
import shutil

import pytest

from roformer import errors
from roformer import metrics as metrics_lib
from scripts import report
from scripts import sweep_points


def _kept_points(root, names=('base,seed=0', 'base,seed=1')):
  """Two points of a kept sweep (docs/results/passkey_extension_base4500) copied to `root`."""
  source = pathlib.Path(__file__).parents[1] / 'docs/results/passkey_extension_base4500/records'
  for name in names:
    shutil.copytree(source / name, root / name)
  return root


def test_a_report_given_a_directory_for_its_file_is_refused_before_anything_is_written(
    tmp_path):
  """--out=DIR/ (or an existing directory) would put the plots in DIR's parent: refused,
  naming the fix, with nothing written anywhere."""
  root = _kept_points(tmp_path / 'sweep')
  (tmp_path / 'plots').mkdir()
  for out in (str(tmp_path / 'plots'), str(tmp_path / 'new') + os.sep):
    before = sorted(p.name for p in tmp_path.rglob('*'))
    with pytest.raises(errors.ConfigError, match=r'is a directory\. Fix: .*report\.md'):
      report.main([str(root), f'--out={out}'])
    assert sorted(p.name for p in tmp_path.rglob('*')) == before


def test_a_diverged_point_reports_an_infinite_perplexity(tmp_path):
  """A validation loss past exp()'s range (800 nats) is perplexity inf, not an OverflowError
  that loses the report."""
  root = _kept_points(tmp_path / 'sweep')

  def diverge(node):
    if isinstance(node, dict):
      return {k: 800.0 if k == 'loss' and v is not None else diverge(v) for k, v in node.items()}
    return [diverge(v) for v in node] if isinstance(node, list) else node
  for path in (root / 'base,seed=1').glob('eval_results*.json'):
    path.write_text(json.dumps(diverge(json.loads(path.read_text()))))
  metrics = root / 'base,seed=1' / 'metrics.jsonl'
  metrics.write_text(''.join(json.dumps(diverge(r)) + '\n'
                             for r in metrics_lib.read_jsonl(str(metrics))))
  assert report.main([str(root), f'--out={tmp_path / "report.md"}']) == 0
  rows = [line for line in (tmp_path / 'report.md').read_text().splitlines()
          if line.startswith('| base,seed=1 |')]
  assert rows and '| 800.0000 | inf |' in rows[0], rows


def test_a_report_says_what_each_points_runs_were_made_and_evaluated_with(tmp_path):
  """The points' environment.jsonl lines, one per distinct commit, software, device, host and
  XLA flags with their number of points (a resumed run on another host counts under both); a
  point without the record is counted as such; records none of which has it add nothing. The
  same for the evaluations whose scores each point's eval_results*.json hold."""
  root = _kept_points(tmp_path / 'sweep', names=('base,seed=0', 'base,seed=1', 'base,seed=2'))
  assert report._made_with([{'environments': []}] * 3) == []  # pylint: disable=protected-access
  record = lambda commit, flags, **fields: {
      **fields, 'commit': commit, 'python': '3.12.3',
      'packages': {'jax': '0.10.2', 'flax': '0.12.1'}, 'backend': 'cpu', 'devices': '1 x cpu',
      'processes': 1, 'host': {'cpu': 'Xeon', 'cores': 2, 'cores_used': 1},
      'variables': flags}
  start = lambda step, commit, flags: json.dumps(record(commit, flags, step=step)) + '\n'
  (root / 'base,seed=0' / 'environment.jsonl').write_text(start(0, 'abc1234', {}))
  (root / 'base,seed=1' / 'environment.jsonl').write_text(
      start(0, 'abc1234', {}) + start(500, 'def5678', {'XLA_FLAGS': '--x=1'}))
  # Seed 1's evaluations merged from two, one at a later commit; seed 0's the same twice.
  for seed, commits in ((0, ['abc1234', 'abc1234']), (1, ['abc1234', 'fed9876'])):
    for path in (root / f'base,seed={seed}').glob('eval_results*.json'):
      results = json.loads(path.read_text())
      results['environments'] = [record(c, {}, splits=['validation']) for c in commits]
      path.write_text(json.dumps(results))
  assert report.main([str(root), f'--out={tmp_path / "report.md"}']) == 0
  text = (tmp_path / 'report.md').read_text()
  made, evaluated = (section.strip().splitlines()[2:] for section in text.split(
      'Made with', 1)[1].split('## Points', 1)[0].split('Evaluated with'))
  line = lambda commit, flags: (
      f'- commit `{commit}`, Python 3.12.3, flax 0.12.1, jax 0.10.2; cpu (1 x cpu) on Xeon, '
      f'1 of 2 cores; {flags}')
  assert made == [
      line('abc1234', 'no XLA_FLAGS or other recorded variable set: 2 points'),
      line('def5678', 'XLA_FLAGS=--x=1: 1 point'),
      '- no record of what made them (trained before runs kept environment.jsonl): 1 point'], made
  assert evaluated == [
      line('abc1234', 'no XLA_FLAGS or other recorded variable set: 2 points'),
      line('fed9876', 'no XLA_FLAGS or other recorded variable set: 1 point'),
      '- no record of what evaluated them (evaluated before evaluations recorded it): 1 point',
  ], evaluated
  # A point not evaluated (still training) or damaged counts under neither list.
  points = [{'environments': [record('abc1234', {}, step=0)], 'evals': {'': {}},
             'evaluation_environments': [record('fed9876', {})]},
            {'environments': [record('abc1234', {}, step=0)], 'evals': {},
             'evaluation_environments': []},
            {**sweep_points.damaged_point(str(root / 'base,seed=2'))}]
  assert report._made_with(points) == [  # pylint: disable=protected-access
      'Made with (each run\'s starts, from its environment.jsonl):', '',
      line('abc1234', 'no XLA_FLAGS or other recorded variable set: 2 points'), '',
      'Evaluated with (each evaluation whose scores its eval_results*.json hold):', '',
      line('fed9876', 'no XLA_FLAGS or other recorded variable set: 1 point'), '']
  damaged = root / 'base,seed=1' / 'eval_results.json'
  kept = json.loads(damaged.read_text())
  for environments, problem in (([{'host': 'Xeon'}], 'entry 1 holds a non-mapping in [\'host\']'),
                                ([{}, 'abc1234'],
                                 "entry 2 holds a non-mapping in ['the whole entry']"),
                                ({'commit': 'abc'}, 'is not a list')):
    damaged.write_text(json.dumps({**kept, 'environments': environments}))
    with pytest.raises(errors.DamagedFileError, match=re.escape(
        f'eval_results.json: "environments" {problem}. Fix: run eval.py on the point again')):
      sweep_points.read_point(str(root / 'base,seed=1'), {})
  (root / 'base,seed=2' / 'environment.jsonl').write_text('{"step": 0, "packages": null}\n')
  with pytest.raises(errors.DamagedFileError, match=re.escape(  # The report names the point.
      "base,seed=2/environment.jsonl: line 1 lacks its step or holds a non-mapping in "
      "['packages']. Fix: restore the file, or delete the line.")):
    sweep_points.environments(str(root / 'base,seed=2'))
