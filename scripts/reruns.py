"""A sweep run again beside its kept records: which points came out the same, and by how much
the others moved.

  <!-- records: docs/results/length_2026-11-30/records rerun
       against=docs/results/length_2026-11-28/records over=0.05 -->

A `rerun` block of scripts/docs_from_records.py: PATH is the rerun's records and `against=` the
kept records it reruns (both scripts/keep_records.py folders). For the points both hold, it
counts those whose logged training metrics (metrics.jsonl less its timings) are the same to the
bit, and for each length (a multiple of the point's training length) the points whose `measure`
(rows answered exactly, or `tokens`) is the same float, the median and largest absolute
difference, and how many moved more than `over=`; then a row for each point and length that
moved more than that. A rerun is the same code's claim to reproduce its records: float32 sums
in another order (another host, another XLA) move a run's last bits, and training can carry
such a difference far, which this shows point by point.
"""

import os
import statistics

from roformer import errors
from scripts import sweep_points

MEASURES = sweep_points.SYNTHETIC_MEASURES


def _training_metrics(workdir: str) -> list[dict]:
  """A point's metrics.jsonl without the rates, which are wall-clock timings; a record
  without one is refused (two missing files are not the same training)."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    raise errors.ConfigError(f'{path} does not exist. Fix: keep the point\'s records with '
                             'scripts/keep_records.py.')
  return [{k: v for k, v in r.items() if 'per_sec' not in k}
          for r in sweep_points.checked_metrics(path)]


def table(rerun: list[dict], kept: list[dict], rerun_dir: str, kept_dir: str, options: dict,
          spec: str) -> list[str]:
  """The block's lines (see the module docstring) from the two folders' points (scripts/
  sweep_points.read_points) and the folders themselves (for metrics.jsonl); `options` holds
  `against=`, the kept records' path as the block names it."""
  measure = options.get('measure', ['rows'])[0]
  if measure not in MEASURES:
    raise errors.ConfigError(f'"{spec}": measure={measure!r}: a rerun block compares '
                             f'{tuple(MEASURES)} of synthetic points. Fix: one of those.')
  metric = MEASURES[measure]
  text = options.get('over', ['0.05'])[0]
  try:
    over = float(text)
  except ValueError:
    over = -1.0
  if not over >= 0:  # A NaN as well.
    raise errors.ConfigError(f'"{spec}": over={text!r} is not a number of 0 or more. Fix: '
                             'e.g. over=0.05.')
  by_name = {p['name']: p for p in kept}
  both = [(p, by_name[p['name']]) for p in rerun if p['name'] in by_name]
  if not both:
    raise errors.ConfigError(f'"{spec}": the two folders hold no point of the same name. Fix: '
                             'name in against= the records that the rerun reruns.')
  same_metrics = sum(
      _training_metrics(os.path.join(rerun_dir, new['name']))
      == _training_metrics(os.path.join(kept_dir, old['name'])) for new, old in both)
  moved, per_multiple = [], {}
  for new, old in both:
    rows_new, rows_old = new['evals'].get('', {}), old['evals'].get('', {})
    for length in sorted(set(rows_new) & set(rows_old)):
      if metric not in rows_old[length] or metric not in rows_new[length]:
        continue  # Not a synthetic task's row (a language model's scores no answers).
      a, b = rows_old[length][metric], rows_new[length][metric]
      multiple = length / new['seq_len']
      per_multiple.setdefault(multiple, []).append(abs(b - a))
      if abs(b - a) > over:
        moved.append((new['name'], multiple, a, b))
  if not per_multiple:
    raise errors.ConfigError(f'"{spec}": no evaluation of the points both folders hold has '
                             f'{metric} ({measure}). Fix: a rerun block compares synthetic '
                             'tasks\' points.')
  x = lambda m: f'{m:g}x'
  out = [f'{same_metrics} of {len(both)} points logged the same training metrics to the bit '
         f'as their kept records (`{options["against"][0]}`).', '',
         '| length | points | the same | median difference | largest | moved more than '
         f'{over:g} |', '|---|---|---|---|---|---|']
  for multiple, diffs in sorted(per_multiple.items()):
    out.append(f'| {x(multiple)} | {len(diffs)} | {sum(d == 0 for d in diffs)} | '
               f'{statistics.median(diffs):.3f} | {max(diffs):.3f} | '
               f'{sum(d > over for d in diffs)} |')
  if moved:
    out += ['', '| point | length | kept | rerun |', '|---|---|---|---|']
    out += [f'| {name} | {x(m)} | {a:.3f} | {b:.3f} |' for name, m, a, b in moved]
  out += ['', f'The {"rows answered exactly" if measure == "rows" else "answer tokens right"} '
          "at each length of each point both hold (eval.py's plain evaluation); the same: "
          'the same float; the differences are absolute.']
  return out
