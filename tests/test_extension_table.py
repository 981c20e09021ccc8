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
