"""Summarise a sweep as Markdown tables and PNG plots: per point, per scheme over seeds, and the separations.

  python scripts/report.py runs/sweep [--out runs/sweep/report.md]

Reads every point's config.json, metrics.jsonl and eval_results*.json (points still running or
failed are listed with what they have) and writes report.md with, next to it:
- language-model points: validation_loss.png (loss vs step), length_extrapolation.png
  (perplexity vs evaluation length, evaluation-time RoPE scalings as their own curves) and
  position_loss.png (loss per position bucket at the longest evaluated length: where a scheme
  breaks down beyond the training length); for a mixture with passkey rows in text
  (configs/sweeps/passkey_extension.py), its text source's perplexity, and passkey_accuracy.png
  with tables of the rows answered in full per length and per depth of the key;
- synthetic-task points (configs/synthetic.py): accuracy_TASK.png per task (the share of rows
  answered exactly, mean over seeds with their range, vs evaluation length), the same as a table
  beside the share of answer tokens predicted right, passkey accuracy per key depth, and which
  schemes separate by more than their seed spread on either measure.
"""

import collections
import datetime
import glob
import itertools
import math
import os
import statistics
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import metrics as metrics_lib  # pylint: disable=wrong-import-position
from roformer import provenance  # pylint: disable=wrong-import-position
from roformer import separations as separations_lib  # pylint: disable=wrong-import-position
from scripts import sweep_points  # pylint: disable=wrong-import-position

def _fmt(value, digits=4) -> str:
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return '-'
  return f'{value:.{digits}f}' if isinstance(value, float) else f'{value:,}'


def _mean_std(values, digits: int = 4) -> str:
  values = [v for v in values if v is not None]
  if not values:
    return '-'
  if len(values) == 1 or not all(math.isfinite(v) for v in values):  # A diverged seed: inf.
    return f'{statistics.mean(values) if len(values) > 1 else values[0]:.{digits}f}'
  return f'{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}'


def groups(points: list[dict]) -> dict:
  """(scheme, options) -> its finished points (the seeds); unfinished ones are only listed.
  Where one scheme and options were trained for several step counts on one task (a training-
  budget axis), the step count joins the options, so that each budget is its own line."""
  budgets = {}
  for p in points:
    budgets.setdefault((p['scheme'], p['options'], p['task']), set()).add(p.get('steps'))
  out = {}
  for p in points:
    if p['status'] == 'done':
      options = p['options']
      if len(budgets[p['scheme'], options, p['task']]) > 1:
        options = ', '.join(filter(None, (options, f'steps={p.get("steps")}')))
      out.setdefault((p['scheme'], options), []).append(p)
  return out


def label(scheme: str, options: str) -> str:
  return scheme + (f' ({options})' if options else '')


def variant(name: str) -> str:
  """How a curve names an evaluation-time variant (eval_results.NAME.json): `rope_KIND` a RoPE
  scaling, `remap_METHOD` a distance remap, anything else by its name."""
  if not name:
    return ''
  kind, _, rest = name.partition('_')
  if rest and kind in ('rope', 'remap'):
    return f' + {rest} {"scaling" if kind == "rope" else "remap"}'
  return f' + {name}'


def variant_table(points: list[dict], value: str = 'perplexity', key: str = 'evals') -> dict:
  """Curve label -> {evaluation length: [`value` per seed]} from each point's `key` results
  (`evals`, or `retrieval`: a mixture's passkey rows); evaluation-time variants
  (eval_results.NAME.json, e.g. RoPE scalings) as their own curves."""
  curves = {}
  for (scheme, options), members in groups(points).items():
    for name in sorted({n for p in members for n in p[key]}):
      per_length = {}
      for p in members:
        for length, row in p[key].get(name, {}).items():
          per_length.setdefault(length, []).append(row[value])
      curves[label(scheme, options) + variant(name)] = dict(sorted(per_length.items()))
  return curves


def extrapolation(points: list[dict], value: str = 'perplexity') -> dict:
  """Curve label -> {evaluation length: mean `value` over seeds} (see variant_table)."""
  return {tag: {n: statistics.mean(v) for n, v in curve.items()}
          for tag, curve in variant_table(points, value).items()}


def position_curves(points: list[dict]) -> dict:
  """Curve label -> (bucket width, [mean loss per bucket]) at each scheme's longest plainly
  evaluated length (buckets without tokens left out as None)."""
  curves = {}
  for (scheme, options), members in groups(points).items():
    rows = [p['evals'].get('', {}) for p in members]
    if not all(rows):
      continue
    longest = min(max(r) for r in rows)
    found = [r[longest] for r in rows if 'position_loss' in r.get(longest, {})]
    if not found:
      continue
    per_bucket = list(zip(*[row['position_loss'] for row in found]))
    mean = [statistics.mean([v for v in b if v is not None]) if any(
        v is not None for v in b) else None for b in per_bucket]
    curves[f'{label(scheme, options)} at {longest}'] = (found[0]['position_bucket'], mean)
  return curves


# Synthetic-task metrics the report tabulates: eval_results.json key -> table title.
ACCURACIES = {'sequence_accuracy': 'share of rows answered exactly',
              'accuracy': 'share of answer tokens predicted right'}


def accuracy_table(points: list[dict], metric: str = 'sequence_accuracy') -> dict:
  """For synthetic tasks: task -> {label: {length: [`metric` per seed]}} (an ACCURACIES key);
  evaluation-time variants (eval_results.NAME.json, e.g. `rope_yarn`) as their own lines."""
  out = {}
  for (scheme, options), members in groups(points).items():
    for p in members:
      for name, rows in sorted(p['evals'].items()):
        per_length = out.setdefault(p['task'][len(sweep_points.SYNTHETIC):], {}).setdefault(
            label(scheme, options) + variant(name), {})
        for length, row in rows.items():
          per_length.setdefault(length, []).append(row[metric])
  return out


def separations(table: dict, higher_is_better: bool = True) -> list[tuple]:
  """(task, length, better, worse, comparison) for every pair of lines of `table` (task ->
  {label: {length: [value per seed]}}) with 2+ seeds each at a length: roformer/separations.py's
  measures of the better line against the worse (by mean; `higher_is_better` says which)."""
  found = []
  for task, lines in table.items():
    lengths = sorted({n for per_length in lines.values() for n in per_length})
    for length in lengths:
      scored = {k: v[length] for k, v in lines.items() if len(v.get(length, [])) >= 2}
      for a, b in itertools.combinations(sorted(scored), 2):
        va, vb = scored[a], scored[b]
        if (statistics.mean(va) < statistics.mean(vb)) == higher_is_better:
          a, b, va, vb = b, a, vb, va
        found.append((task, length, a, b, separations_lib.compare(va, vb)))
  return found


def _range(values, digits: int) -> str:
  return f'{min(values):.{digits}f}-{max(values):.{digits}f}'


def separations_section(measures: list[tuple]) -> list[str]:
  """`## Separations`: every pair that separates (each measure: (name, table, higher is
  better, digits)), with its interval and p, and how many do not."""
  rows, total, overlapping, means_apart, smallest = [], 0, 0, 0, set()
  for name, table, higher, digits in measures:
    for task, length, better, worse, c in separations(table, higher):
      total += 1
      seeds = (len(table[task][better][length]), len(table[task][worse][length]))
      smallest.add(seeds)
      if not c.apart:
        overlapping += 1
        means_apart += c.interval[0] > 0 or c.interval[1] < 0
        continue
      low, high = sorted(abs(v) for v in c.interval)
      rows.append((task, name, length, -abs(c.difference), better, worse, seeds, c, digits,
                   f'{_range(table[task][better][length], digits)}',
                   f'{_range(table[task][worse][length], digits)}', low, high))
  if not total:
    return ['## Separations', '', 'No two lines have 2 or more seeds each at one task, measure '
            'and length, so no pair is compared (roformer/separations.py compares seeds). Fix: '
            'run more seeds of the lines to compare.', '']
  lines = ['## Separations', '',
           'For each task, measure, length and pair of lines with 2 or more seeds each at that '
           'length (roformer/separations.py): a pair *separates* when every seed of one is on '
           'the better side of every seed of the other. Each line gives the difference of the '
           'means (better minus worse, in the better direction) with its bootstrap 95% interval, '
           'and the exact two-sided Mann-Whitney p, whose smallest possible value is set by the '
           'seed counts: ' + ', '.join(
               f'{n} against {m} seeds: {separations_lib.smallest_p(n, m):.3f}'
               for n, m in sorted(smallest)) + '.', '',
           f'{len(rows)} of {total} comparisons (a pair of lines at one task, measure and '
           f'length) separate. Of the {overlapping} that do not, '
           f'{means_apart} have a bootstrap interval that excludes 0 (means apart, seeds '
           'overlapping).', '']
  if rows:
    lines += ['| task | measure | length | better | worse | seeds | better\'s seeds | '
              'worse\'s seeds | difference [95% interval] | p |', '|---' * 10 + '|']
    for (task, name, length, _, better, worse, seeds, c, digits, good, bad, low,
         high) in sorted(rows, key=lambda r: r[:4]):
      lines.append(f'| {task} | {name} | {length} | {better} | {worse} | {seeds[0]} v '
                   f'{seeds[1]} | {good} | {bad} | {abs(c.difference):.{digits}f} '
                   f'[{low:.{digits}f}, {high:.{digits}f}] | {c.p:.3f} |')
  return lines + ['']


def _lm_sections(lm: list[dict]) -> list[str]:
  lines = ['## Per scheme (mean ± std over the finished seeds)', '',
           '| scheme | seeds | train loss | val loss | val ppl | steps/s | parameters |',
           '|---' * 7 + '|']
  table = sorted(groups(lm).items(),
                 key=lambda kv: statistics.mean([p['val_loss'] for p in kv[1]
                                                 if p['val_loss'] is not None] or [math.inf]))
  for (scheme, options), members in table:
    losses = [p['val_loss'] for p in members]
    ppls = [metrics_lib.perplexity(v) if v is not None else None for v in losses]
    lines.append(f'| {label(scheme, options)} | {len(members)} | '
                 f'{_mean_std([p["train_loss"] for p in members])} | {_mean_std(losses)} | '
                 f'{_mean_std(ppls, 2)} | {_mean_std([p["steps_per_sec"] for p in members], 2)} | '
                 f'{_fmt(members[0]["parameters"])} |')
  curves = extrapolation(lm)
  if curves:
    lengths = sorted({n for c in curves.values() for n in c})
    lines += ['', '## Validation perplexity vs evaluation length (tokens; mean over seeds)', '',
              '| scheme | ' + ' | '.join(str(n) for n in lengths) + ' |',
              '|---' * (len(lengths) + 1) + '|']
    for tag, curve in curves.items():
      lines.append(f'| {tag} | ' + ' | '.join(_fmt(curve.get(n), 2) for n in lengths) + ' |')
  lines += ['', '![validation loss](validation_loss.png)', '',
            '![length extrapolation](length_extrapolation.png)', '']
  if position_curves(lm):
    lines += ['![loss per position](position_loss.png)', '']
  lines += _retrieval_sections(lm)
  text = ' / '.join(sorted({p['task'] for p in lm}))
  measures = [('perplexity', {text: variant_table(lm, 'perplexity')}, False, 2)]
  retrieval = variant_table(lm, 'sequence_accuracy', 'retrieval')
  if retrieval:
    measures.append(('rows exact', {'passkey in text': retrieval}, True, 3))
  return lines + separations_section(measures)


def _retrieval_sections(lm: list[dict]) -> list[str]:
  """A mixture's passkey rows in text: the share answered in full per variant and length
  (mean ± std over seeds), and per depth band of the key."""
  rows = variant_table(lm, 'sequence_accuracy', 'retrieval')
  if not rows:
    return []
  lengths = sorted({n for per_length in rows.values() for n in per_length})
  lines = ['## Passkey in text: rows answered in full vs evaluation length (mean ± std over '
           'seeds)', '', '| scheme | seeds | ' + ' | '.join(str(n) for n in lengths) + ' |',
           '|---' * (len(lengths) + 2) + '|']
  for tag, per_length in rows.items():
    seeds = max(len(v) for v in per_length.values())
    lines.append(f'| {tag} | {seeds} | ' + ' | '.join(
        _mean_std(per_length.get(n, []), 3) for n in lengths) + ' |')
  depths = variant_table(lm, 'depth_accuracy', 'retrieval')
  lines += ['', 'The same per depth band of the key (from the start of the text to its end, '
            'mean over seeds):', '', '| scheme | ' + ' | '.join(str(n) for n in lengths) + ' |',
            '|---' * (len(lengths) + 1) + '|']
  for tag, per_length in depths.items():
    lines.append(f'| {tag} | ' + ' | '.join(band_cells(per_length, lengths)) + ' |')
  return lines + ['', '![passkey accuracy vs length](passkey_accuracy.png)', '']


def band_cells(per_length: dict, lengths) -> list[str]:
  """One cell per length: each depth band's accuracy, mean over seeds ('a / b / ...')."""
  cells = []
  for n in lengths:
    bands = list(zip(*per_length.get(n, [])))
    cells.append(' / '.join(f'{statistics.mean([v for v in b if v is not None]):.2f}'
                            if any(v is not None for v in b) else '-' for b in bands))
  return cells


def _synthetic_sections(synthetic: list[dict]) -> list[str]:
  tables = {metric: accuracy_table(synthetic, metric) for metric in ACCURACIES}
  lines = []
  for task in sorted(tables['sequence_accuracy']):
    for metric, title in ACCURACIES.items():
      rows = tables[metric][task]
      lengths = sorted({n for per_length in rows.values() for n in per_length})
      lines += [f'## {task}: {title} (mean ± std over seeds)', '',
                '| scheme | seeds | ' + ' | '.join(str(n) for n in lengths) + ' |',
                '|---' * (len(lengths) + 2) + '|']
      order = sorted(rows, key=lambda k: -statistics.mean(rows[k].get(lengths[0], [0])))
      for tag in order:
        seeds = max(len(v) for v in rows[tag].values())
        lines.append(f'| {tag} | {seeds} | ' + ' | '.join(
            _mean_std(rows[tag].get(n, []), 3) for n in lengths) + ' |')
      lines.append('')
    lines += [f'![{task} accuracy vs length](accuracy_{task}.png)', '']
    if task == 'passkey':
      lines += _depth_table([p for p in synthetic if p['task'] == sweep_points.SYNTHETIC + task])
  return lines + separations_section(
      [('rows exact' if metric == 'sequence_accuracy' else 'answer tokens', tables[metric], True,
        3) for metric in ACCURACIES])


def _depth_table(points: list[dict]) -> list[str]:
  """Passkey: exact-match accuracy per depth band of the key, mean over seeds, per length."""
  per = {}
  for (scheme, options), members in groups(points).items():
    for p in members:
      for length, row in p['evals'].get('', {}).items():
        if row.get('depth_accuracy'):
          per.setdefault(label(scheme, options), {}).setdefault(length, []).append(
              row['depth_accuracy'])
  if not per:
    return []
  lengths = sorted({n for v in per.values() for n in v})
  lines = ['Passkey accuracy per depth of the key (bands from the start of the filler to its '
           'end, mean over seeds):', '',
           '| scheme | ' + ' | '.join(str(n) for n in lengths) + ' |',
           '|---' * (len(lengths) + 1) + '|']
  for tag, rows in sorted(per.items()):
    lines.append(f'| {tag} | ' + ' | '.join(band_cells(rows, lengths)) + ' |')
  return lines + ['']


def _made_with(points: list[dict]) -> list[str]:
  """What the points' runs were trained with (their environment.jsonl: roformer/provenance.py)
  and, where their evaluations recorded it, evaluated with (their eval_results*.json's
  `environments`): one line per distinct commit, Python and package versions, devices, host
  and recorded variables, with how many points each (a run resumed or evaluated elsewhere
  counts under both; a point not evaluated, or damaged, under neither); nothing where no point
  kept that record (runs trained, or evaluated, before it existed)."""
  lines = []
  for key, title, missing in (
      ('environments', "Made with (each run's starts, from its environment.jsonl):",
       'no record of what made them (trained before runs kept environment.jsonl)'),
      ('evaluation_environments',
       "Evaluated with (each evaluation whose scores its eval_results*.json hold):",
       'no record of what evaluated them (evaluated before evaluations recorded it)')):
    counted = [p for p in points if not p.get('damaged')
               and (key == 'environments' or p.get('evals'))]
    if not any(not e.get(provenance.UNRECORDED) for p in counted for e in p.get(key, [])):
      continue
    counts = collections.Counter()
    for p in counted:
      for line in {missing if e.get(provenance.UNRECORDED) else _environment_line(e)
                   for e in p.get(key, [])} or {missing}:
        counts[line] += 1
    lines += [title, ''] + [f'- {line}: {n} point{"s" if n > 1 else ""}'
                            for line, n in sorted(counts.items())] + ['']
  return lines


def _environment_line(entry: dict) -> str:
  """One provenance record (a training start's or an evaluation's) in words."""
  versions = ', '.join(f'{name} {version}' for name, version in sorted(
      entry.get('packages', {}).items()))
  flags = ', '.join(f'{k}={v}' for k, v in sorted(entry.get('variables', {}).items()))
  host = entry.get('host', {})
  processes = entry.get('processes', 1)
  return (f"commit `{entry.get('commit') or 'unknown'}`, Python {entry.get('python', '?')}, "
          f"{versions or 'no package versions'}; {entry.get('backend', '?')} "
          f"({entry.get('devices', '?')}"
          + (f', {processes} processes' if processes != 1 else '')
          + f") on {host.get('cpu', '?')}, {host.get('cores_used', '?')} of "
          f"{host.get('cores', '?')} cores; "
          + (flags or 'no XLA_FLAGS or other recorded variable set'))


def markdown(points: list[dict], root: str) -> str:
  lines = [f'# Sweep report: {root}', '',
           f'Generated {datetime.date.today().isoformat()} by `python scripts/report.py {root}` '
           f'from {len(points)} points. Validation loss and perplexity are eval.py on the '
           'validation split at the training length (the last in-training evaluation where '
           'eval.py has not run); steps/s is the median over the run\'s log intervals, wall '
           'clock: comparable between points only when each had the machine to itself '
           '(`scripts/benchmark.py` measures speed).', '',
           *_made_with(points),
           '## Points', '',
           '| point | task | scheme | options | seed | steps | train loss | val loss | val ppl | '
           'steps/s | parameters | status |', '|---' * 12 + '|']
  for p in points:
    ppl = metrics_lib.perplexity(p['val_loss']) if p['val_loss'] is not None else None
    lines.append(f'| {p["name"]} | {p["task"]} | {p["scheme"]} | {p["options"]} | {p["seed"]} | '
                 f'{p["steps"]} | {_fmt(p["train_loss"])} | {_fmt(p["val_loss"])} | '
                 f'{_fmt(ppl, 2)} | {_fmt(p["steps_per_sec"], 2)} | {_fmt(p["parameters"])} | '
                 f'{p["status"]} |')
  lines.append('')
  lm = [p for p in points if not sweep_points.is_synthetic(p) and not p.get("damaged")]
  if lm:
    lines += _lm_sections(lm)
  synthetic = [p for p in points if sweep_points.is_synthetic(p)]
  if synthetic:
    lines += _synthetic_sections(synthetic)
  return '\n'.join(lines)


def panel(tag: str) -> str:
  """The small multiple a retrieval line goes in: by what was done to the model."""
  if 'continued' in tag:
    return 'continued training'
  if tag.endswith(' scaling'):
    return 'RoPE scalings at evaluation'
  if tag.endswith(' remap'):
    return 'remaps at evaluation'
  return 'as trained'


# Dash patterns of the variants of one line (solid: the line itself).
_DASHES = ('--', ':', '-.', (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)))
_MARKERS = ('o', 's', '^', 'v', 'D')


def band(ax, per_length: dict, tag: str, color, linestyle='-', marker='o') -> None:
  """A line's mean over seeds, with the seeds' range shaded (several seeds) around it."""
  xs = sorted(per_length)
  ax.plot(xs, [statistics.mean(per_length[n]) for n in xs], marker=marker, markersize=3,
          label=tag, color=color, linestyle=linestyle)
  if any(len(per_length[n]) > 1 for n in xs):
    ax.fill_between(xs, [min(per_length[n]) for n in xs], [max(per_length[n]) for n in xs],
                    color=color, alpha=0.15, linewidth=0)


def plot(points: list[dict], out_dir: str) -> list[str]:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  written = []
  # One colour per line label, the same in every plot; 28 distinct ones (tab10 alone repeats
  # after 10 lines; a context-extension sweep draws 19): tab20's dark shades, Dark2's, then
  # tab20's light shades.
  pairs = plt.get_cmap('tab20').colors
  palette = pairs[0::2] + plt.get_cmap('Dark2').colors + pairs[1::2]
  colors = {}
  color = lambda tag: colors.setdefault(tag.split(' + ')[0].split(' at ')[0],
                                        palette[len(colors) % len(palette)])

  def save(fig, ax, name, legend=True):
    ax.grid(alpha=0.3, which='both')
    if legend:
      ax.legend(fontsize=6)
    fig.tight_layout()
    written.append(os.path.join(out_dir, name))
    files.save_figure_atomic(fig, written[-1])
    plt.close(fig)

  def log_lengths(ax, lengths):
    ax.set_xscale('log', base=2)
    ax.set_xticks(lengths)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())

  lm = [p for p in points if not sweep_points.is_synthetic(p) and not p.get("damaged")]
  if lm:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for (scheme, options), members in sorted(groups(lm).items()):
      steps = sorted(set.intersection(*[set(p['val_curve']) for p in members]))
      if steps:
        tag = label(scheme, options)
        ax.plot(steps, [statistics.mean(p['val_curve'][s] for p in members) for s in steps],
                marker='o', markersize=3, label=tag, color=color(tag))
    ax.set(xlabel='step', ylabel='validation loss (mean over seeds)',
           title='Validation loss per position scheme')
    save(fig, ax, 'validation_loss.png')
    curves = variant_table(lm)
    if curves:
      fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
      variants = {}  # Of each line: its variants (scalings at evaluation) drawn so far.
      for tag, curve in curves.items():
        if ' + ' not in tag:
          band(ax, curve, tag, color(tag))
          continue
        line = tag.split(' + ')[0].split(' at ')[0]  # Its colour; a dash (then marker) each.
        index = variants[line] = variants.get(line, -1) + 1
        band(ax, curve, tag, color(tag), _DASHES[index % len(_DASHES)],
             _MARKERS[index // len(_DASHES) % len(_MARKERS)])
      log_lengths(ax, sorted({n for c in curves.values() for n in c}))
      ax.set(xlabel='evaluation length (tokens)',
             ylabel='validation perplexity (mean; band: seed range)',
             title='Length extrapolation')
      save(fig, ax, 'length_extrapolation.png')
    positions = position_curves(lm)
    if positions:
      fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
      for tag, (width, losses) in positions.items():
        xs = [width * (i + 0.5) for i, v in enumerate(losses) if v is not None]
        ax.plot(xs, [v for v in losses if v is not None], marker='.', markersize=3, label=tag,
                color=color(tag))
      trained = sorted({p['seq_len'] for p in lm})
      for n in trained:
        ax.axvline(n, color='grey', linestyle=':', linewidth=1)
      ax.set(xlabel='position of the token (dotted: training lengths)',
             ylabel='validation loss (mean over seeds)', title='Loss by position')
      save(fig, ax, 'position_loss.png')
    answered = variant_table(lm, 'sequence_accuracy', 'retrieval')
    if answered:  # Small multiples: the lines as trained in every panel, for reference.
      panels = {}
      for tag in answered:
        panels.setdefault(panel(tag), []).append(tag)
      reference = panels.pop('as trained', [])
      names = list(panels) or ['as trained']
      lengths = sorted({n for c in answered.values() for n in c})
      fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.2), dpi=120,
                               sharey=True, squeeze=False)
      for ax, name in zip(axes[0], names):
        for i, tag in enumerate(panels.get(name, [])):
          band(ax, answered[tag], tag, palette[i % len(palette)])
        for tag in reference:
          band(ax, answered[tag], tag, 'black', linestyle=':')
        log_lengths(ax, lengths)
        ax.set(xlabel='evaluation length (tokens)', ylim=(-0.02, 1.02), title=name)
        ax.grid(alpha=0.3, which='both')
        ax.legend(fontsize=5, loc='lower left')
      axes[0][0].set_ylabel('passkey rows answered in full\n(mean over seeds; band: seed range)')
      fig.suptitle('Passkey retrieval in text vs evaluation length', fontsize=10)
      save(fig, axes[0][0], 'passkey_accuracy.png', legend=False)
  synthetic = [p for p in points if sweep_points.is_synthetic(p)]
  for task, rows in sorted(accuracy_table(synthetic).items()):
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    lengths = sorted({n for per_length in rows.values() for n in per_length})
    for tag, per_length in sorted(rows.items()):
      xs = sorted(per_length)
      means = [statistics.mean(per_length[n]) for n in xs]
      low = [m - min(per_length[n]) for m, n in zip(means, xs)]
      high = [max(per_length[n]) - m for m, n in zip(means, xs)]
      ax.errorbar(xs, means, yerr=[low, high], marker='o', markersize=3, capsize=2, label=tag,
                  color=color(tag))
    log_lengths(ax, lengths)
    ax.set(xlabel='evaluation length (tokens)', ylim=(-0.02, 1.02),
           ylabel='rows answered exactly (mean; bars: seed range)',
           title=f'{task}: accuracy vs evaluation length')
    save(fig, ax, f'accuracy_{task}.png')
  return written


def _not_a_sweep(root: str) -> str:
  """Why `root`, which holds no point, cannot be reported, and the fix."""
  if not os.path.exists(root):
    return (f'{root} does not exist. Fix: give the --workdir of scripts/sweep.py, or its kept '
            'records.')
  if not os.path.isdir(root):
    return (f'{root} is a file. Fix: give the directory of a sweep (its --workdir) or of its '
            'records.')
  if os.path.exists(os.path.join(root, 'config.json')):
    parent = os.path.dirname(os.path.abspath(root))
    if os.path.exists(os.path.join(parent, 'sweep.json')):
      return (f'{root} is one run of the sweep in {parent}. Fix: python scripts/report.py '
              f'{parent}')
    variants = glob.glob(os.path.join(root, 'eval_results.r*_*.json'))  # rope_X, remap_X.
    return (f'{root} is one run, not a sweep (report.py compares the runs of a sweep\'s '
            f'--workdir). Fix: read its eval_results*.json'
            + (f', table its evaluations under each scaling and remap with python '
               f'scripts/extension_table.py {root}' if variants else '')
            + f', or plot its curves with python scripts/plot_curves.py {root} --out '
            'curves.png.')
  below = sorted(os.path.dirname(os.path.relpath(p, root))
                 for p in glob.glob(os.path.join(root, '*', '*', 'config.json')))
  if below:
    return (f'{root} holds no run itself, but {os.path.dirname(below[0])}/ in it does. Fix: '
            f'python scripts/report.py {os.path.join(root, os.path.dirname(below[0]))}')
  return (f'{root} holds no run (no */config.json). Fix: run scripts/sweep.py with --workdir '
          f'{root} first.')


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('sweep_dir', type=cli.path_arg)
  parser.add_argument('--out', default='', help='Report path (default SWEEP_DIR/report.md); '
                      'the PNG plots are written beside it, under fixed names.')
  args = parser.parse_args(argv)
  root = args.sweep_dir
  if args.out and (args.out.endswith(('/', os.sep)) or os.path.isdir(args.out)):
    raise errors.ConfigError(f'--out={args.out} is a directory. Fix: name the report file, e.g. '
                             f'--out={os.path.join(args.out, "report.md")} (the plots go beside '
                             'it).')
  workdirs = sweep_points.workdirs_of(root)
  if not workdirs:
    print(f'error: {_not_a_sweep(root)}', file=sys.stderr)
    return 2

  def damaged(workdir, e):  # One damaged point does not hide the others.
    print(f'warning: {e} The point is listed as damaged and left out of the tables.',
          file=sys.stderr)
  points = sweep_points.read_points(root, workdirs, on_damage=damaged)
  out = args.out or os.path.join(root, 'report.md')
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  written = plot(points, os.path.dirname(os.path.abspath(out)))
  files.write_text_atomic(out, markdown(points, root))
  print(f'wrote {out}, ' + ', '.join(written))
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
