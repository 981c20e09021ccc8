"""Summarise a sweep: a Markdown table per point and per scheme (mean and std over seeds), and
PNG plots of validation loss vs step and of perplexity vs evaluation length.

  python scripts/report.py runs/sweep [--out runs/sweep/report.md]

Reads every point's config.json, metrics.jsonl and eval_results*.json (points still running or
failed are listed with what they have). Writes report.md, validation_loss.png and
length_extrapolation.png next to it.
"""

import datetime
import glob
import math
import os
import statistics
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import metrics as metrics_lib  # pylint: disable=wrong-import-position
from roformer import sweeps  # pylint: disable=wrong-import-position


def _point_overrides(root: str) -> dict:
  path = os.path.join(root, 'sweep.json')
  if not os.path.exists(path):
    return {}
  return files.read_json(path).get('points', {})


def read_point(workdir: str, overrides: dict) -> dict:
  """What a point's files say: its scheme, options, seed, curves and evaluations."""
  config = files.read_json(os.path.join(workdir, 'config.json'))
  records = []
  if os.path.exists(os.path.join(workdir, 'metrics.jsonl')):
    records = metrics_lib.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  train = [r for r in records if r['split'] == 'train']
  validation = {r['step']: r['loss'] for r in records if r['split'] == 'validation'}
  evals = {}
  for path in sorted(glob.glob(os.path.join(workdir, 'eval_results*.json'))):
    name = os.path.basename(path)[len('eval_results'):-len('.json')].lstrip('.')
    result = files.read_json(path)
    split = result['splits'].get('validation') or next(iter(result['splits'].values()))
    rows = [row for row in split.get('lengths', []) if 'loss' in row]  # Not the skipped ones.
    evals[name] = {'perplexity': {row['multiplier']: row['perplexity'] for row in rows},
                   'loss': {row['multiplier']: row['loss'] for row in rows}}
  options = {k: v for k, v in overrides.items() if k not in ('model.position.kind', 'seed')}
  rates = [r['steps_per_sec'] for r in train if 'steps_per_sec' in r]
  steps = config['train']['steps']
  done = max((r['step'] for r in records), default=0)
  return {
      'name': os.path.basename(workdir),
      'scheme': config['model']['position']['kind'],
      'options': ', '.join(f'{k}={sweeps.format_value(v)}' for k, v in options.items()),
      'seed': config.get('seed', 0),
      'steps': steps,
      'status': ('done' if sweeps.trained(workdir, steps) and sweeps.evaluated(workdir, '', steps)
                 else f'incomplete ({done}/{steps} steps)'),
      'train_loss': train[-1]['loss'] if train else None,
      'val_curve': validation,
      'val_loss': evals.get('', {}).get('loss', {}).get(
          1, validation[max(validation)] if validation else None),
      'steps_per_sec': statistics.median(rates) if rates else None,
      'parameters': _parameters(config),
      'evals': evals,
  }


def _parameters(config: dict):
  try:
    import ml_collections  # pylint: disable=g-import-not-at-top
    from roformer import models  # pylint: disable=g-import-not-at-top
    return models.num_parameters(ml_collections.ConfigDict(config['model']))
  except Exception:  # pylint: disable=broad-except  # A model this code no longer builds.
    return None


def _fmt(value, digits=4) -> str:
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return '-'
  return f'{value:.{digits}f}' if isinstance(value, float) else f'{value:,}'


def _mean_std(values, digits: int = 4) -> str:
  values = [v for v in values if v is not None]
  if not values:
    return '-'
  if len(values) == 1:
    return f'{values[0]:.{digits}f}'
  return f'{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}'


def groups(points: list[dict]) -> dict:
  """(scheme, options) -> its finished points (the seeds); unfinished ones are only listed."""
  out = {}
  for p in points:
    if p['status'] == 'done':
      out.setdefault((p['scheme'], p['options']), []).append(p)
  return out


def label(scheme: str, options: str) -> str:
  return scheme + (f' ({options})' if options else '')


def extrapolation(points: list[dict]) -> dict:
  """Curve label -> {multiplier: mean validation perplexity over seeds}; RoPE's scaled
  evaluations (eval_results.rope_KIND.json) as their own curves."""
  curves = {}
  for (scheme, options), members in groups(points).items():
    names = sorted({n for p in members for n in p['evals']})
    for name in names:
      per_mult = {}
      for p in members:
        for mult, ppl in p['evals'].get(name, {}).get('perplexity', {}).items():
          per_mult.setdefault(mult, []).append(ppl)
      tag = label(scheme, options) + (f' + {name.split("_", 1)[-1]} scaling' if name else '')
      curves[tag] = {m: statistics.mean(v) for m, v in sorted(per_mult.items())}
  return curves


def markdown(points: list[dict], root: str) -> str:
  lines = [f'# Sweep report: {root}', '',
           f'Generated {datetime.date.today().isoformat()} by `python scripts/report.py {root}` '
           f'from {len(points)} points. Validation loss and perplexity are eval.py on the '
           'validation split at the training length (the last in-training evaluation where '
           'eval.py has not run); steps/s is the median over the run\'s log intervals, wall '
           'clock: comparable between points only when each had the machine to itself '
           '(`scripts/benchmark.py` measures speed).', '',
           '## Points', '',
           '| point | scheme | options | seed | steps | train loss | val loss | val ppl | '
           'steps/s | parameters | status |', '|---' * 11 + '|']
  for p in points:
    ppl = math.exp(p['val_loss']) if p['val_loss'] is not None else None
    lines.append(f'| {p["name"]} | {p["scheme"]} | {p["options"]} | {p["seed"]} | '
                 f'{p["steps"]} | {_fmt(p["train_loss"])} | {_fmt(p["val_loss"])} | '
                 f'{_fmt(ppl, 2)} | {_fmt(p["steps_per_sec"], 2)} | {_fmt(p["parameters"])} | '
                 f'{p["status"]} |')
  lines += ['', '## Per scheme (mean ± std over the finished seeds)', '',
            '| scheme | seeds | train loss | val loss | val ppl | steps/s | parameters |',
            '|---' * 7 + '|']
  table = sorted(groups(points).items(),
                 key=lambda kv: statistics.mean([p['val_loss'] for p in kv[1]
                                                 if p['val_loss'] is not None] or [math.inf]))
  for (scheme, options), members in table:
    losses = [p['val_loss'] for p in members]
    ppls = [math.exp(v) if v is not None else None for v in losses]
    lines.append(f'| {label(scheme, options)} | {len(members)} | '
                 f'{_mean_std([p["train_loss"] for p in members])} | {_mean_std(losses)} | '
                 f'{_mean_std(ppls, 2)} | {_mean_std([p["steps_per_sec"] for p in members], 2)} | '
                 f'{_fmt(members[0]["parameters"])} |')
  curves = extrapolation(points)
  if curves:
    mults = sorted({m for c in curves.values() for m in c})
    lines += ['', '## Validation perplexity vs evaluation length (mean over seeds)', '',
              '| scheme | ' + ' | '.join(f'{m}x' for m in mults) + ' |',
              '|---' * (len(mults) + 1) + '|']
    for tag, curve in curves.items():
      lines.append(f'| {tag} | ' + ' | '.join(_fmt(curve.get(m), 2) for m in mults) + ' |')
  lines += ['', '![validation loss](validation_loss.png)', '',
            '![length extrapolation](length_extrapolation.png)', '']
  return '\n'.join(lines)


def plot(points: list[dict], out_dir: str) -> list[str]:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  written = []
  fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
  # One colour per line label, the same in both plots; 18 distinct ones (tab10 alone repeats
  # after 10 lines).
  palette = plt.get_cmap('tab10').colors + plt.get_cmap('Dark2').colors
  colors = {}
  color = lambda tag: colors.setdefault(tag, palette[len(colors) % len(palette)])
  for (scheme, options), members in sorted(groups(points).items()):
    steps = sorted(set.intersection(*[set(p['val_curve']) for p in members]))
    if steps:
      tag = label(scheme, options)
      ax.plot(steps, [statistics.mean(p['val_curve'][s] for p in members) for s in steps],
              marker='o', markersize=3, label=tag, color=color(tag))
  ax.set(xlabel='step', ylabel='validation loss (mean over seeds)',
         title='Validation loss per position scheme')
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  written.append(os.path.join(out_dir, 'validation_loss.png'))
  fig.savefig(written[-1])
  plt.close(fig)
  curves = extrapolation(points)
  if curves:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for tag, curve in curves.items():
      mults = sorted(curve)
      ax.plot(mults, [curve[m] for m in mults], marker='o', markersize=3, label=tag,
              linestyle='--' if 'scaling' in tag else '-', color=color(tag))
    ax.set(xscale='log', xlabel='evaluation length / training length',
           ylabel='validation perplexity', title='Length extrapolation')
    ax.set_xticks(sorted({m for c in curves.values() for m in c}))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.grid(alpha=0.3, which='both')
    ax.legend(fontsize=7)
    fig.tight_layout()
    written.append(os.path.join(out_dir, 'length_extrapolation.png'))
    fig.savefig(written[-1])
    plt.close(fig)
  return written


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('sweep_dir', type=cli.path_arg)
  parser.add_argument('--out', default='', help='Report path (default SWEEP_DIR/report.md).')
  args = parser.parse_args(argv)
  root = args.sweep_dir
  workdirs = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, '*', 'config.json')))
  if not workdirs:
    print(f'error: {root} holds no run (no */config.json). Fix: run scripts/sweep.py with '
          f'--workdir {root} first.', file=sys.stderr)
    return 2
  overrides = _point_overrides(root)
  points = [read_point(w, overrides.get(os.path.basename(w), {})) for w in workdirs]
  out = args.out or os.path.join(root, 'report.md')
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  written = plot(points, os.path.dirname(os.path.abspath(out)))
  with open(out, 'w', encoding='utf-8') as f:
    f.write(markdown(points, root))
  print(f'wrote {out}, ' + ', '.join(written))
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
