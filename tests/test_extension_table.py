"""scripts/extension_table.py on evaluations it must not misread: a mixture's per-source
splits, and lengths the evaluation skipped. (Its table of the kept Hugging Face workflow is
checked in test_docs.py.)"""

import json
import pathlib

import pytest

from roformer import errors
from scripts import extension_table

RECORDS = (pathlib.Path(__file__).resolve().parents[1] / 'docs' / 'results' /
           'passkey_extension_base4500' / 'records')


def test_the_extension_table_of_a_mixture_reads_its_sources_and_names_a_missing_split(
    tmp_path):
  """A mixture's evaluations have a split per source (validation/NAME): the plain split is
  refused naming those it holds; a length the evaluation skipped reads `skipped`."""
  run = RECORDS / 'base,seed=0'
  with pytest.raises(errors.ConfigError, match=r"no 'validation' split \(it holds "
                     r"\['validation/keys', 'validation/plays'\]\)\. Fix: --split="):
    extension_table.table(str(run))
  plain = json.loads((run / 'eval_results.json').read_text())
  lengths = plain['splits']['validation/plays']['lengths']
  want = f'{lengths[0]["perplexity"]:.2f} ({lengths[0]["loss"]:.3f})'
  del lengths[1]['loss']
  lengths[1]['skipped'] = 'beyond the learned table'
  (tmp_path / 'eval_results.json').write_text(json.dumps(plain))
  header, _, row = extension_table.table(str(tmp_path), 'validation/plays').splitlines()
  assert header.startswith(f'| evaluation | {lengths[0]["length"]} | {lengths[1]["length"]} |')
  assert row.startswith(f'| as trained | {want} | skipped |'), row


IMPORTED = RECORDS.parents[1] / 'hf_workflow_2026-11-29' / 'records' / 'imported'


def test_the_table_reads_only_the_evaluations_of_one_run_of_the_script(tmp_path):
  """Another evaluation in the workdir (eval.py --out=eval_results.mine.json) is no row of the
  table; one of the script's files evaluated with other settings (fewer batches) is refused
  naming it; a TAG=NAME run's files are tabled with --tag NAME."""
  for name in ('eval_results.json', 'eval_results.rope_yarn.json'):
    (tmp_path / name).write_text((IMPORTED / name).read_text())
  want = extension_table.table(str(IMPORTED)).splitlines()
  want = want[:3] + [line for line in want if line.startswith('| rope_yarn |')]
  mine = json.loads((IMPORTED / 'eval_results.json').read_text())
  mine['splits']['validation']['lengths'][0]['loss'] = 0.5
  (tmp_path / 'eval_results.mine.json').write_text(json.dumps(mine))
  assert extension_table.table(str(tmp_path)).splitlines() == want
  assert '| as trained | 5.72 (0.500) |' in extension_table.table(str(tmp_path), tag='mine')
  with pytest.raises(errors.ConfigError, match=r"holds no evaluation of .* with TAG=other "
                     r"\(only eval_results.json, eval_results.mine.json, "):
    extension_table.table(str(tmp_path), tag='other')
  fewer = json.loads((IMPORTED / 'eval_results.rope_yarn.json').read_text())
  fewer['overrides'] = [o.replace('-1 vs 4', '-1 vs 2') for o in fewer['overrides']]
  (tmp_path / 'eval_results.rope_yarn.json').write_text(json.dumps(fewer))
  with pytest.raises(errors.ConfigError, match=r"rope_yarn.json is not an evaluation of the "
                     r"same kind as .*eval_results.json \(overrides: .*eval.max_batches: -1 vs "
                     r"4.* vs .*-1 vs 2"):
    extension_table.table(str(tmp_path))
