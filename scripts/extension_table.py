"""The table of one model's evaluations at each length, as it is and under each evaluation-time
RoPE scaling and distance remap (the eval_results*.json that scripts/evaluate_extensions.sh
writes), from a workdir or its kept records.

  python scripts/extension_table.py docs/results/hf_workflow_2026-11-29/records/imported

Prints a Markdown table: one row per evaluation (`as trained`, `rope_<scaling>`,
`remap_<method>`), one column per evaluated length, each cell the validation perplexity
(the loss in nats in brackets). It reads the files that script names (eval_results.json and
eval_results.VARIANT.json; with `--tag NAME`, those of its TAG=NAME run) and no other, and
refuses rows that are not of the same evaluation: another checkpoint, protocol, text or
override besides the scaling or remap itself (such as eval.max_batches).
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


# What the rows of one table differ in: the scaling or remap, and the lengths evaluated.
VARIED = ('model.position.', 'eval.scale_rope_to_length', 'eval.length_multipliers')


def _setting(results: dict) -> dict:
  """What an evaluation's rows are of, besides the scaling or remap it applies."""
  return {'step': results.get('step'), 'protocol': results.get('protocol'),
          'train_seq_len': results.get('train_seq_len'), 'data': results.get('data'),
          'overrides': sorted(o for o in results.get('overrides', ())
                              if not o.split(':', 1)[0].startswith(VARIED))}


def _named(workdir: str, tag: str) -> dict[str, str]:
  """{row name: path} of the files evaluate_extensions.sh writes (with TAG=`tag`)."""
  prefix = 'eval_results' + (f'.{tag}' if tag else '')
  return {name: path for name in ORDER
          if os.path.exists(path := os.path.join(workdir, f'{prefix}{"." if name else ""}'
                                                          f'{name}.json'))}


def table(workdir: str, split: str = 'validation', tag: str = '') -> str:
  results, settings = {}, {}
  found = _named(workdir, tag)
  if not found:
    others = sorted(os.path.basename(p)
                    for p in glob.glob(os.path.join(workdir, 'eval_results*.json')))
    raise errors.ConfigError(
        f'{workdir} holds no evaluation of scripts/evaluate_extensions.sh'
        + (f' with TAG={tag}' if tag else '') + (f' (only {", ".join(others)})' if others
                                                 else '')
        + '. Fix: run scripts/evaluate_extensions.sh on the workdir first'
        + (', or give --tag of the run that wrote them.' if others else '.'))
  for name, path in found.items():
    read = files.read_json(path)
    settings[name] = _setting(read)
    splits = read.get('splits', {})
    if split not in splits:
      raise errors.ConfigError(f'{path} has no {split!r} split (it holds {sorted(splits)}). '
                               'Fix: --split=NAME of one it holds, or run eval.py with '
                               f'--splits={split.split("/")[0]} on the workdir.')
    if 'lengths' not in splits[split]:
      raise errors.ConfigError(f'{path}: the {split!r} split was not evaluated '
                               f'({splits[split].get("skipped", "no lengths")}). Fix: --split=NAME '
                               'of another.')
    results[name] = {row['length']: row for row in splits[split]['lengths']}
  first = next(iter(settings))
  for name, setting in settings.items():
    differ = [f'{k}: {settings[first][k]} vs {v}' for k, v in setting.items()
              if v != settings[first][k]]
    if differ:
      raise errors.ConfigError(
          f'{found[name]} is not an evaluation of the same kind as {found[first]} '
          f'({"; ".join(differ)}): their rows would not compare. Fix: evaluate both again '
          'with the same flags, or write the other with TAG=NAME and table it with --tag NAME.')
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
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('workdir', type=cli.path_arg, help='A workdir or its kept records.')
  parser.add_argument('--split', default='validation',
                      help="The split's rows (a mixture's: validation/NAME).")
  parser.add_argument('--tag', default='', help="The files of evaluate_extensions.sh's "
                      'TAG=NAME run (eval_results.NAME*.json).')
  args = parser.parse_args(argv)
  print(table(args.workdir, args.split, args.tag))
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
