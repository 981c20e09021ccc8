"""The table of one model's evaluations at each length, as it is and under each evaluation-time
RoPE scaling and distance remap (the eval_results*.json that scripts/evaluate_extensions.sh
writes), from a workdir or its kept records.

  python scripts/extension_table.py docs/results/hf_workflow_2026-11-28/records/imported

Prints a Markdown table: one row per evaluation (`as trained`, `rope_<scaling>`,
`remap_<method>`), one column per evaluated length, each cell the validation perplexity
(the loss in nats in brackets).
"""

import glob
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position

# Rows in this order: as trained, the scalings, then the remaps (evaluate_extensions.sh's).
ORDER = ('', 'rope_linear', 'rope_ntk', 'rope_yarn', 'rope_llama3', 'rope_dynamic',
         'remap_rerope', 'remap_leaky_rerope', 'remap_self_extend', 'remap_string', 'remap_dca',
         'remap_sinks')


def table(workdir: str, split: str = 'validation') -> str:
  results = {}
  found = glob.glob(os.path.join(workdir, 'eval_results*.json'))
  if not found:
    raise errors.ConfigError(f'{workdir} holds no eval_results*.json. Fix: run '
                             'scripts/evaluate_extensions.sh on the workdir first.')
  for path in found:
    name = os.path.basename(path)[len('eval_results'):-len('.json')].lstrip('.')
    splits = files.read_json(path).get('splits', {})
    if split not in splits:
      raise errors.ConfigError(f'{path} has no {split!r} split (it holds {sorted(splits)}). '
                               'Fix: --split=NAME of one it holds, or run eval.py with '
                               f'--splits={split.split("/")[0]} on the workdir.')
    if 'lengths' not in splits[split]:
      raise errors.ConfigError(f'{path}: the {split!r} split was not evaluated '
                               f'({splits[split].get("skipped", "no lengths")}). Fix: --split=NAME '
                               'of another.')
    results[name] = {row['length']: row for row in splits[split]['lengths']}
  names = sorted(results, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
  lengths = sorted({length for rows in results.values() for length in rows})
  lines = ['| evaluation | ' + ' | '.join(str(length) for length in lengths) + ' |',
           '|---|' + '---|' * len(lengths)]
  for name in names:
    cells = [_cell(results[name][n]) if n in results[name] else '' for n in lengths]
    lines.append(f'| {name or "as trained"} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _cell(row: dict) -> str:
  """Perplexity (loss); a length the evaluation skipped (one the scheme cannot run) says so."""
  if 'loss' not in row:
    return 'skipped'
  return f'{row["perplexity"]:.2f} ({row["loss"]:.3f})'


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
  parser.add_argument('workdir', type=cli.path_arg, help='A workdir or its kept records.')
  parser.add_argument('--split', default='validation',
                      help="The split's rows (a mixture's: validation/NAME).")
  args = parser.parse_args(argv)
  print(table(args.workdir, args.split))
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
