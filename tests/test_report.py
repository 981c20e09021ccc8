"""scripts/report.py on kept records it must not lose: an --out that names a directory, and a
point whose loss diverged."""

import json
import os
import pathlib
import shutil

import pytest

from roformer import errors
from roformer import metrics as metrics_lib
from scripts import report


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
