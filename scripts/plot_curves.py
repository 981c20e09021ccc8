"""Plot a metric against the step for several runs, from their metrics.jsonl files.

  python scripts/plot_curves.py runs/mlm_bert runs/mlm_roformer --out docs/mlm_loss.png \
      [--split validation] [--metric loss] [--labels bert,roformer] [--title ...]

Prints the curves as a Markdown table too (one column per run), so a README can quote the
numbers the plot shows.
"""

import os
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import metrics  # pylint: disable=wrong-import-position


def curves(workdirs, split: str, metric: str) -> dict[str, dict[int, float]]:
  out = {}
  for workdir in workdirs:
    path = os.path.join(workdir, 'metrics.jsonl')
    if not os.path.exists(path):
      raise errors.ConfigError(f'{path} does not exist. Fix: give training workdirs (train.py '
                               '--workdir).')
    every = metrics.read_jsonl(path)
    records = [r for r in every if r.get('split') == split and metric in r]
    out[workdir] = {r['step']: r[metric] for r in records}  # A resumed step keeps its last.
  if not any(out.values()):
    held = sorted({f'{r.get("split")}:{k}' for r in every for k in r if k not in ('step', 'split')})
    raise errors.ConfigError(f'no {split!r} record holds {metric!r} (the last workdir holds '
                             f'split:metric {", ".join(held[:12]) or "none"}). Fix: --split and '
                             '--metric of one of those.')
  return out


def markdown(data: dict[str, dict[int, float]], labels: list[str]) -> str:
  steps = sorted(set().union(*data.values()))
  lines = ['| step | ' + ' | '.join(labels) + ' |', '|---' * (len(labels) + 1) + '|']
  for step in steps:
    cells = [f'{c[step]:.4f}' if step in c else '' for c in data.values()]
    lines.append(f'| {step} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def main(argv=None):
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('workdirs', nargs='+', type=cli.path_arg)
  parser.add_argument('--out', required=True, type=cli.path_arg, help='PNG file to write.')
  parser.add_argument('--split', default='validation')
  parser.add_argument('--metric', default='loss')
  parser.add_argument('--labels', default='', help='Comma-separated, one per workdir.')
  parser.add_argument('--title', default='')
  args = parser.parse_args(argv)
  labels = args.labels.split(',') if args.labels else [os.path.basename(os.path.normpath(w))
                                                        for w in args.workdirs]
  if len(labels) != len(args.workdirs):
    raise errors.ConfigError(f'--labels gives {len(labels)} labels for {len(args.workdirs)} '
                             'workdirs. Fix: one label per workdir.')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
  kinds = fig.canvas.get_supported_filetypes()
  if os.path.splitext(args.out)[1][1:].lower() not in kinds:
    raise errors.ConfigError(f'--out={args.out}: matplotlib writes none of that kind. Fix: a '
                             f'file ending in one of .{", .".join(sorted(kinds))} (e.g. .png).')
  data = curves(args.workdirs, args.split, args.metric)
  for label, curve in zip(labels, data.values()):
    steps = sorted(curve)
    ax.plot(steps, [curve[s] for s in steps], marker='o', markersize=3, label=label)
  ax.set_xlabel('step')
  ax.set_ylabel(f'{args.split} {args.metric}')
  ax.set_title(args.title or f'{args.split} {args.metric}')
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  written = files.save_figure_atomic(fig, args.out)
  print(markdown(data, labels))
  print(f'wrote {written}')


if __name__ == '__main__':
  cli.guard(main)()
