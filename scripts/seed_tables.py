"""The tables of a sweep's kept points over its seeds, for scripts/docs_from_records.py's
`table`, `separations` and `summary` blocks.

They give each line's mean ± sample std (and range) per task and length, the pairs whose every
seed lies on one side of the other's (roformer/separations.py: the bootstrap interval and the
exact Mann-Whitney p), and the README's one row per task. Each takes the block's options
({key: [values]}) and its spec, to name it in an error."""

import statistics

from roformer import errors
from roformer import separations as separations_lib
from scripts import report
from scripts import sweep_points

# measure -> (what it reads, higher is better, digits, how a table names it).
MEASURES = {'rows': (sweep_points.SYNTHETIC_MEASURES['rows'], True, 3, 'rows answered exactly'),
            'tokens': (sweep_points.SYNTHETIC_MEASURES['tokens'], True, 3, 'answer tokens right'),
            'perplexity': ('perplexity', False, 1, 'validation perplexity'),
            'passkey': ('sequence_accuracy', True, 3, 'passkey rows answered in full')}


def read_points(records: str) -> list[dict]:
  """Every point kept under `records` (scripts/sweep_points.py's reading), finished or not."""
  workdirs = sweep_points.workdirs_of(records)
  if not workdirs:
    raise errors.ConfigError(f'{records} holds no kept run (no */config.json). Fix: name a '
                             'folder written by scripts/keep_records.py.')
  return sweep_points.read_points(records, workdirs)


def tables(points: list[dict], measure: str) -> dict:
  """task -> {line: {length: [value per seed]}} for `measure`."""
  metric = MEASURES[measure][0]
  if measure in ('rows', 'tokens'):
    return report.accuracy_table([p for p in points if sweep_points.is_synthetic(p)], metric)
  lm = [p for p in points if not sweep_points.is_synthetic(p)]
  if measure == 'perplexity':
    return {'text': report.variant_table(lm, metric)}
  return {'passkey in text': report.variant_table(lm, metric, 'retrieval')}


def _cell(values, digits: int, ranges: bool) -> str:
  if not values:
    return '-'
  mean = statistics.mean(values)
  text = (f'{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}' if len(values) > 1
          else f'{mean:.{digits}f}')
  return text + (f' ({min(values):.{digits}f}-{max(values):.{digits}f})' if ranges else '')


def _lengths(lines: dict) -> list[int]:
  return sorted({n for per_length in lines.values() for n in per_length})


def _chosen(by_task: dict, options: dict, spec: str) -> dict:
  tasks = options.get('tasks', sorted(by_task))
  missing = [t for t in tasks if t not in by_task]
  if missing:
    raise errors.ConfigError(f'"{spec}": no records of {missing} (kept: {sorted(by_task)}). '
                             'Fix: name tasks the records hold.')
  return {t: by_task[t] for t in tasks}


def _order(lines: dict, options: dict, spec: str, higher: bool) -> list[str]:
  if 'lines' in options:
    missing = [k for k in options['lines'] if k not in lines]
    if missing:
      raise errors.ConfigError(f'"{spec}": no line {missing} in the records (kept: '
                               f'{sorted(lines)}). Fix: name lines the records hold.')
    return options['lines']
  overall = lambda k: statistics.mean(statistics.mean(v) for v in lines[k].values())
  return sorted(lines, key=lambda k: -overall(k) if higher else overall(k))


def table(points, options: dict, spec: str) -> list[str]:
  """A row per line (best first): mean ± sample std over its seeds for each task and length;
  `ranges=1` adds each cell's range, `learnt=` each seed's first validation step at that share."""
  measure = options.get('measure', ['rows'])[0]
  _, higher, digits, _ = MEASURES[measure]
  by_task = _chosen(tables(points, measure), options, spec)
  ranges = options.get('ranges', ['0'])[0] == '1'
  columns = [(task, n) for task, lines in by_task.items() for n in _lengths(lines)]
  many = len(by_task) > 1
  head = '| line | seeds | ' + ' | '.join(f'{t} {n}' if many else str(n)
                                          for t, n in columns) + ' |'
  merged = {}
  for task, lines in by_task.items():
    for k, per_length in lines.items():
      merged.setdefault(k, {}).update({(task, n): v for n, v in per_length.items()})
  order = _order(merged, options, spec, higher)
  try:
    learnt = float(options['learnt'][0]) if 'learnt' in options else None
  except ValueError:
    raise errors.ConfigError(f'"{spec}": learnt={options["learnt"][0]!r} is not a share of '
                             'rows. Fix: e.g. learnt=0.9.') from None
  out = [head, '|---' * (len(columns) + 2) + '|']
  if learnt is not None:
    out[0] += f' first validation step at {learnt:g} of rows, by seed |'
    out[1] += '---|'
  for k in order:
    seeds = max(len(v) for v in merged[k].values())
    out.append(f'| {k} | {seeds} | ' + ' | '.join(
        _cell(merged[k].get(c, []), digits, ranges) for c in columns) + ' |')
    if learnt is not None:
      out[-1] += f' {_learnt(points, k, by_task, learnt)} |'
  return out


def _learnt(points, line: str, by_task: dict, threshold: float) -> str:
  """Each seed's first in-training validation step with at least `threshold` of the rows
  answered exactly ('-': never), for a line trained as such (not an evaluation variant)."""
  members = [p for p in points if report.label(p['scheme'], p['options']) == line
             and p['task'][len(sweep_points.SYNTHETIC):] in by_task]
  if not members:
    return '(an evaluation variant)'
  steps = []
  for p in sorted(members, key=lambda p: p['seed']):
    reached = [s for s, v in sorted(p['answered_curve'].items()) if v >= threshold]
    steps.append(f'{reached[0]:,}' if reached else '-')
  return ', '.join(steps)


def _pairs(lines: dict, options: dict, spec: str) -> list[tuple[str, str]]:
  if 'against' in options:
    base = options['against'][0]
    return [(k, base) for k in sorted(lines) if k != base]
  pairs = [tuple(p.split(':', 1)) for p in options.get('pairs', [])]
  if not pairs or any(len(p) != 2 for p in pairs):
    raise errors.ConfigError(f'"{spec}": a separations block names pairs=a:b;c:d or '
                             'against=LINE. Fix: add one.')
  return pairs


def _at(lengths: list[int], options: dict) -> list[int]:
  """The lengths `at=` names as multiples of the shortest (`at=1;8`), or all of them."""
  if 'at' not in options or not lengths:
    return lengths
  try:
    wanted = {lengths[0] * int(m) for m in options['at']}
  except ValueError:
    raise errors.ConfigError(f'at={";".join(options["at"])}: give whole multiples, e.g. '
                             'at=1;8.') from None
  return [n for n in lengths if n in wanted]


def separations(points, options: dict, spec: str) -> list[str]:
  """A row per named pair, task and length: both seed ranges, whether every seed of one lies on
  one side of every seed of the other, the difference of the means with its interval, and p."""
  measure = options.get('measure', ['rows'])[0]
  digits = MEASURES[measure][2]
  by_task = _chosen(tables(points, measure), options, spec)
  out = ['| pair | task | length | seeds | first\'s seeds | second\'s seeds | separates | '
         'first - second [95% interval] | p |', '|---' * 9 + '|']
  for task, lines in by_task.items():
    for a, b in _pairs(lines, options, spec):
      for k in (a, b):
        if k not in lines:
          raise errors.ConfigError(f'"{spec}": no line {k!r} in {task}\'s records (kept: '
                                   f'{sorted(lines)}). Fix: name lines the records hold.')
      for n in _at(sorted(set(lines[a]) & set(lines[b])), options):
        va, vb = lines[a][n], lines[b][n]
        if len(va) < 2 or len(vb) < 2:
          continue
        c = separations_lib.compare(va, vb)
        verdict = ('every seed ' + ('above' if c.difference > 0 else 'below') if c.apart
                   else 'no')
        out.append(f'| {a} : {b} | {task} | {n} | {len(va)} v {len(vb)} | '
                   f'{min(va):.{digits}f}-{max(va):.{digits}f} | '
                   f'{min(vb):.{digits}f}-{max(vb):.{digits}f} | {verdict} | '
                   f'{c.difference:+.{digits}f} [{c.interval[0]:+.{digits}f}, '
                   f'{c.interval[1]:+.{digits}f}] | {c.p:.3f} |')
  return out


def summary(points, options: dict, spec: str) -> list[str]:
  """A row per task: the reference line at 1x and at the longest length, the best line there,
  and the lines on either side of every reference seed there."""
  measure = options.get('measure', ['rows'])[0]
  _, higher, digits, _ = MEASURES[measure]
  by_task = _chosen(tables(points, measure), options, spec)
  reference = options.get('reference', ['rope'])[0]
  out = [f'| task | seeds | `{reference}` at 1x / the longest | best at the longest | on the '
         f'better side of every `{reference}` seed at the longest | on the worse side |',
         '|---' * 6 + '|']
  for task, lines in by_task.items():
    if reference not in lines:
      raise errors.ConfigError(f'"{spec}": no line {reference!r} in {task}\'s records. Fix: '
                               'reference=LINE.')
    lengths = sorted(lines[reference])
    first, last = lengths[0], lengths[-1]
    at = {k: v[last] for k, v in lines.items() if len(v.get(last, [])) >= 2}
    if reference not in at:
      raise errors.ConfigError(f'"{spec}": {reference!r} has fewer than 2 seeds at {last} in '
                               f"{task}'s records: nothing to compare with. Fix: another "
                               'reference line.')
    best = (max if higher else min)(at, key=lambda k: statistics.mean(at[k]))
    sides = {True: [], False: []}
    for k, values in sorted(at.items()):
      if k != reference:
        c = separations_lib.compare(values, at[reference])
        if c.apart:
          sides[(c.difference > 0) == higher].append(f'`{k}`')
    seeds = len(lines[reference][last])
    out.append(f'| {task} | {seeds} | {_cell(lines[reference][first], digits, False)} / '
               f'{_cell(lines[reference][last], digits, False)} | `{best}` '
               f'{_cell(at[best], digits, False)} | {", ".join(sides[True]) or "none"} | '
               f'{", ".join(sides[False]) or "none"} |')
  return out


def seeded(points: list[dict], options: dict, spec: str) -> list[dict]:
  """The points of the seeds `seeds=0;1;2` names (every point without it): a subset of a sweep's
  seeds, to read what an earlier, smaller draw of the same points showed."""
  if 'seeds' not in options:
    return points
  try:
    wanted = {int(s) for s in options['seeds']}
  except ValueError:
    raise errors.ConfigError(f'"{spec}": seeds={";".join(options["seeds"])} is not a list of '
                             'whole numbers. Fix: e.g. seeds=0;1;2.') from None
  kept = {p['seed'] for p in points}
  missing = sorted(wanted - kept)
  if missing:
    raise errors.ConfigError(f'"{spec}": no point of seed {missing} in the records (kept: '
                             f'{sorted(kept, key=str)}). Fix: name seeds the records hold.')
  return [p for p in points if p['seed'] in wanted]
