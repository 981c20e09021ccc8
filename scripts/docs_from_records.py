"""Regenerate the results in the docs from the kept records of the runs (or check them).

  python scripts/docs_from_records.py            # rewrite every block in README.md and docs/
  python scripts/docs_from_records.py --check    # exit 1 naming each block that differs

A result in a page is a block between two markers; the first names the records
(`scripts/keep_records.py`'s folder, read by `scripts/report.py`), what to show and how:

  <!-- records: docs/results/options_2026-11-27/records table tasks=flip_flop;passkey -->
  (generated)
  <!-- end of records -->

Kinds, with their options (lists separated by `;`; quote a value holding spaces):
- `table`: each line (a scheme, or an evaluation-time variant of one) against each task's
  evaluation lengths: mean ± sample std (ddof 1) over its seeds, `ranges=1` adding each cell's
  seed range. `tasks=` the synthetic tasks (all by default), `measure=` `rows` (rows answered
  exactly, the default), `tokens` (answer tokens right), `perplexity` or `passkey` (a language
  model's text, or its passkey rows in text), `lines=` which lines in which order (all by
  default, best mean over the table's cells first), `learnt=0.9` a column with each seed's first
  in-training validation step answering that share of the rows.
- `separations`: for each named pair (`pairs=better:worse;...`, or `against=LINE` for every line
  against one), task and length (`at=1;8`: only those multiples of the shortest length), whether
  every seed of one is on the better side of every seed of the other, the difference of the means
  with its bootstrap 95% interval and the exact Mann-Whitney p (roformer/separations.py); `tasks=`
  and `measure=` as for `table`.
- `summary`: one row per task for the README: the reference line (`reference=`, `rope` by
  default) at the training length and the longest, the best line at the longest, and the lines
  that separate from the reference there.
- `seeds=0;1;2`, for `table`, `separations` and `summary`: those seeds' points alone (every
  seed by default), to show what an earlier, smaller draw of the same points gave.
- `benchmark`: PATH is a folder of `scripts/benchmark.py --without ... --out` records; a row per
  hand-written backward pass turned off, against the step with all of them (roformer/autodiff.py).
- `phases`: PATH is one `scripts/point_time.py --out` record; a row per value of its varied
  field: the runs' median wall time and median time of each phase, each with its range.
- `compare`: PATH is one `scripts/benchmark.py --vary ... --out` record; `field=` a varied field
  (its last part, e.g. scan_layers) whose two values are compared, `by=` another varied field
  (a row per value): the compile time, the median step and the compiled step's memory of each
  value, and the second's step over the first's with the range of the per-round ratios.

- `rows`: PATH is a folder of scripts/benchmark.py records; `rows=FILE:NAME;...` the rows to
  show (`FILE:*` every row of FILE; `labels=` their names, the rows' own by default): the
  median step, `against=NAME;...` the step over the row of the same record of the first of
  those names it holds (the median ratio and the range of the per-round ratios), tokens/s, model
  TFLOP/s, MFU against the record's own matmul peak, `best_of=FILE;...` against the highest
  peak of those records and `nominal=N` against a device's nominal TFLOP/s, the compiled
  step's peak memory, and with `compile=1` the compile time.
- `sweep_times`: PATH is a sweep's timings.jsonl, or a folder of kept records holding one; a
  row per run of the sweep (`sweep=` the spec as run: that sweep's runs alone) with its date,
  commit, points, processes, rows built beforehand and wall time; `paired=1` each run against
  the first, group by group (scripts/sweep_times.py).
- `rerun`: PATH is a sweep's records run again, `against=` the kept records it reruns: the
  points whose training metrics and evaluations came out the same, and the others' differences
  (scripts/reruns.py).
- `runs`, `bootstrap`, `scaling`, `sinks`, `precision`, `torch` and `group_rate`: a page's
  reference runs (scripts/keep_run.py's records; a paired bootstrap of kept translations),
  scripts/attention_scaling.py's, attention_sinks.py's, rope_precision.py's,
  compare_torch.py's and group_rate.py's records; scripts/run_tables.py describes them.

Nothing in a block is typed by hand: a page's numbers are these, and
`tests/test_docs_from_records.py` fails when a block differs from what its records give.
"""

import re
import shlex
import statistics
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from scripts import reruns  # pylint: disable=wrong-import-position
from scripts import run_tables  # pylint: disable=wrong-import-position
from scripts import seed_tables  # pylint: disable=wrong-import-position
from scripts import sweep_times  # pylint: disable=wrong-import-position
from scripts import timing  # pylint: disable=wrong-import-position

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ('README.md', 'docs/*.md')
BLOCK = re.compile(r'(<!-- records: (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(<!-- end of records -->)',
                   re.S)
# Each kind's options (the module docstring says what they do); measure= is read by any kind.
OPTIONS = {'table': ('tasks', 'lines', 'ranges', 'learnt', 'seeds'),
           'separations': ('pairs', 'against', 'at', 'tasks', 'seeds'),
           'summary': ('reference', 'tasks', 'seeds'), 'benchmark': (), 'compare': ('field', 'by'),
           'phases': (), 'rows': ('rows', 'labels', 'against', 'best_of', 'nominal', 'compile'),
           'runs': ('runs', 'labels', 'curve', 'steps', 'eval', 'percent', 'digits', 'time',
                    'file'),
           'bootstrap': ('runs', 'labels', 'split', 'file', 'samples', 'seed'), 'scaling': (),
           'sinks': (), 'precision': (), 'torch': (), 'sweep_times': ('sweep', 'paired'),
           'rerun': ('against', 'over'), 'group_rate': ()}
KINDS = tuple(OPTIONS)


def parse(spec: str) -> tuple[str, str, dict]:
  """`PATH KIND key=value ...` -> (path, kind, {key: [values]})."""
  try:
    words = shlex.split(spec)
  except ValueError as e:
    raise errors.ConfigError(f'"{spec}": {e}. Fix: close the quote.') from None
  if len(words) < 2 or words[1] not in KINDS:
    raise errors.ConfigError(f'"{spec}": a block is "PATH KIND key=value ...", KIND one of '
                             f'{KINDS}. Fix: name the records and the kind.')
  options = {}
  for word in words[2:]:
    key, sep, value = word.partition('=')
    if not sep:
      raise errors.ConfigError(f'"{spec}": {word!r} is not key=value. Fix: write it so.')
    if key not in (*OPTIONS[words[1]], 'measure'):
      raise errors.ConfigError(
          f'"{spec}": a {words[1]} block reads no {key}= (it reads '
          f'{", ".join(f"{k}=" for k in OPTIONS[words[1]]) or "no option"}). Fix: drop it or '
          'name one of those.')
    options[key] = value.split(';')
  measure = options.get('measure', ['rows'])[0]
  if measure not in seed_tables.MEASURES:
    raise errors.ConfigError(f'"{spec}": measure={measure!r} is not one of '
                             f'{tuple(seed_tables.MEASURES)}. '
                             'Fix: one of those.')
  return words[0], words[1], options


def _record(path: pathlib.Path, made_by: str, keys: tuple[str, ...]) -> dict:
  """The JSON record at `path`, with the top-level `keys` that a record `made_by` a script
  holds; a damaged file or another kind of record is one error naming it."""
  if not path.is_file():
    raise errors.ConfigError(f'{path} does not exist. Fix: name a {made_by} --out file.')
  data = files.read_json(str(path))
  missing = [k for k in keys if k not in data]
  if missing:
    raise errors.ConfigError(f'{path} is not a {made_by} record (no {", ".join(missing)}). '
                             f'Fix: name a {made_by} --out file.')
  return data


# What every scripts/benchmark.py record holds at its top level.
_BENCHMARK_KEYS = ('config', 'rows', 'device_kind', 'backend', 'devices', 'date', 'steps',
                   'rounds_count')


def benchmark(folder: pathlib.Path) -> list[str]:
  """The `--without` rows of every scripts/benchmark.py record (*.json) in `folder`: each
  hand-written backward pass turned off against the step with every pass on, timed in the same
  interleaved rounds (the median step's ratio, with the range of the per-round ratios), and the
  compiled step's peak memory with and without it."""
  records = sorted(folder.glob('*.json'))
  if not records:
    raise errors.ConfigError(f'{folder} holds no benchmark record (*.json). Fix: name a folder '
                             'of scripts/benchmark.py --out files.')
  lines = ['| record | config | kind | without | step with (ms) | without / with | peak MiB '
           'with / without |', '|---' * 7 + '|']
  for path in records:
    data = _record(path, 'scripts/benchmark.py', _BENCHMARK_KEYS)
    config, by_name = data['config'], {r['name']: r for r in data['rows']}
    shape = (f"{config['model']['type']} L{config['model']['num_layers']} "
             f"d{config['model']['d_model']} V{config['model']['vocab_size']} "
             f"seq {config['data']['seq_len']} batch {config['train']['batch_size']}")
    for row in data['rows']:
      if not row.get('without'):
        continue
      with_it = by_name[row['name'].removesuffix('-' + row['without'])]
      ratios = timing.round_ratios(row['rounds'], with_it['rounds'])
      lines.append(
          f"| {path.stem} | {shape} | {with_it['name']} | {row['without']} | "
          f"{1e3 * with_it['step_s']:.1f} | {row['step_s'] / with_it['step_s']:.3f}x "
          f"({min(ratios):.3f}-{max(ratios):.3f}) | {with_it['peak_bytes'] / 2**20:,.0f} / "
          f"{row['peak_bytes'] / 2**20:,.0f} |")
  first = _record(records[0], 'scripts/benchmark.py', _BENCHMARK_KEYS)
  lines.append('')
  lines.append(f"{first['device_kind']} ({first['backend']}, {first['devices']} device), "
               f"{first['date']}; median of {first['steps']} steps each in "
               f"{first['rounds_count']} interleaved rounds.")
  return lines


def _varied(name: str, config: dict):
  """A scripts/benchmark.py row's value of a varied field (named by its last part, under
  config.model or a group of it): the value its name carries (`kind[field=value]...`,
  benchmark.variants), or the record config's own, which the name leaves out."""
  named = dict(re.findall(r'\[([^=\]]+)=([^\]]+)\]', name))
  return lambda field: named.get(field, str(_field_in(config['model'], field)))


def _field_in(node: dict, field: str):
  """The value of the first `field` in `node` or the groups under it (model.mla.cache for
  'cache'), '' where none has it."""
  if field in node:
    return node[field]
  for value in node.values():
    if isinstance(value, dict) and (found := _field_in(value, field)) != '':
      return found
  return ''


def compare(path: pathlib.Path, options: dict, spec: str) -> list[str]:
  """The `compare` block of one benchmark record (see the module docstring)."""
  if 'field' not in options or 'by' not in options:
    raise errors.ConfigError(f'"{spec}": a compare block names field= and by=. Fix: add them.')
  field, by = options['field'][0], options['by'][0]
  data = _record(path, 'scripts/benchmark.py', _BENCHMARK_KEYS)
  cells = {}
  for row in data['rows']:
    value = _varied(row['name'], data['config'])
    cells[(value(by), value(field))] = row
  columns = list(dict.fromkeys(f for _, f in cells))
  rows = sorted(dict.fromkeys(b for b, _ in cells), key=_number_first)
  if len(columns) != 2 or len(cells) != len(rows) * 2:
    raise errors.ConfigError(f'"{spec}": {path} holds {sorted(cells)}, not two values of '
                             f'{field} for each {by}. Fix: name the fields it varies.')
  a, b = columns
  cache = all('cache_bytes' in r for r in cells.values())  # A decoding step's cache.
  digits = 1 if data.get('step') == 'decode' else 0  # Decoding's steps take a few ms.
  lines = [f'| {by} | compile, {field}={a} | compile, {field}={b} | step, {a} (ms) | '
           f'step, {b} (ms) | {b} / {a} | memory, {a} / {b} (MiB) |'
           + (f' cache, {a} / {b} (MiB) |' if cache else ''), '|---' * (7 + cache) + '|']
  for v in rows:
    first, second = cells[(v, a)], cells[(v, b)]
    ratios = timing.round_ratios(second['rounds'], first['rounds'])
    lines.append(
        f"| {v} | {first['compile_s']:.1f} s | {second['compile_s']:.1f} s | "
        f"{1e3 * first['step_s']:,.{digits}f} | {1e3 * second['step_s']:,.{digits}f} | "
        f"{second['step_s'] / first['step_s']:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
        f"{first['peak_bytes'] / 2**20:,.0f} / {second['peak_bytes'] / 2**20:,.0f} |"
        + (f" {first['cache_bytes'] / 2**20:,.1f} / {second['cache_bytes'] / 2**20:,.1f} |"
           if cache else ''))
  what = {'eval': "evaluation step's.",
          'decode': "decoding step's: one token a row over a cache of the other tokens.",
          'prefill': "prefill's: the prompt into a cache of its own, the output layer at its "
                     "last token."}
  lines += ['', f"{data['device_kind']} ({data['backend']}, {data['devices']} device), "
            f"{data['date']}; median of {data['steps']} steps each in {data['rounds_count']} "
            'interleaved rounds; compile time is the whole '
            + what.get(data.get('step'), "train step's, optimizer included.")]
  return lines


def _number_first(value: str):
  """Sort key: numbers in order, then words (a varied field's values are either)."""
  try:
    return (0, float(value), '')
  except ValueError:
    return (1, 0.0, value)


# What a rows block reads of each benchmark row.
_ROW_KEYS = ('step_s', 'rounds', 'tokens_per_s', 'tflops_per_s', 'mfu', 'peak_bytes',
             'compile_s')


def _row_ref(folder: pathlib.Path, text: str, spec: str) -> tuple[str, dict, dict]:
  """`FILE:NAME` -> (FILE, the record, its row NAME)."""
  name_of_file, sep, name = text.partition(':')
  if not sep or not name:
    raise errors.ConfigError(f'"{spec}": {text!r} is not FILE:NAME. Fix: e.g. '
                             'benchmark.json:rope.')
  data = _record(folder / name_of_file, 'scripts/benchmark.py', _BENCHMARK_KEYS)
  by_name = {r['name']: r for r in data['rows']}
  if name not in by_name:
    raise errors.ConfigError(f'"{spec}": {folder / name_of_file} has no row {name!r} (it has '
                             f'{sorted(by_name)}). Fix: name one of those.')
  missing = [k for k in _ROW_KEYS if k not in by_name[name]] + (
      [] if 'peak_flops' in data else ['peak_flops'])
  if missing:
    raise errors.ConfigError(f'"{spec}": {folder / name_of_file} is a scripts/benchmark.py '
                             f'record of another version (no {", ".join(missing)}). Fix: rerun '
                             'its command with --out.')
  return name_of_file, data, by_name[name]


def rows(folder: pathlib.Path, options: dict, spec: str) -> list[str]:
  """The `rows` block: named rows of scripts/benchmark.py records (see the module docstring)."""
  if 'rows' not in options:
    raise errors.ConfigError(f'"{spec}": a rows block names rows=FILE:NAME;... Fix: add them.')
  names = []
  for text in options['rows']:  # FILE:* is every row of FILE, in its order.
    if text.endswith(':*'):
      data = _record(folder / text[:-2], 'scripts/benchmark.py', _BENCHMARK_KEYS)
      names += [f"{text[:-2]}:{r['name']}" for r in data['rows']]
    else:
      names.append(text)
  picked = [_row_ref(folder, text, spec) for text in names]
  several = len({text.partition(':')[0] for text in names}) > 1  # Rows named with their file.
  labels = options.get('labels', [f"{pathlib.Path(f).stem}: {n}" if several else n
                                  for f, _, n in (text.partition(':') for text in names)])
  if len(labels) != len(picked):
    raise errors.ConfigError(f'"{spec}": {len(labels)} labels for {len(picked)} rows. Fix: one '
                             'label per row.')
  against = options.get('against', [])
  peaks = [_record(folder / t, 'scripts/benchmark.py', _BENCHMARK_KEYS)['peak_flops']
           for t in options.get('best_of', [])]
  best = max(peaks) / 1e12 if peaks else None
  nominal = (run_tables.number(spec, 'nominal', options['nominal'][0], float)
             if 'nominal' in options else None)
  header = ['row', 'step (ms)'] + ([f'vs {" or ".join(against)}'] if against else []) + [
      'tokens/s', 'TFLOP/s', 'MFU (own peak)'] + ([f'of {best:.1f}'] if best else []) + (
      [f'of {nominal:g}'] if nominal else []) + ['peak memory (MiB)'] + (
      ['compile (s)'] if 'compile' in options else [])
  lines = ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
  for label, (name_of_file, data, row) in zip(labels, picked):
    cells = [label, f"{1e3 * row['step_s']:,.1f}"]
    if against:
      by_name = {r['name']: r for r in data['rows']}
      held = [a for a in against if a in by_name]
      if not held:
        raise errors.ConfigError(f'"{spec}": {folder / name_of_file} has no row of {against} '
                                 'to compare with (a ratio is within one run). Fix: against= '
                                 'rows that every file named holds one of.')
      base = by_name[held[0]]
      ratios = timing.round_ratios(row['rounds'], base['rounds'])
      cells.append('1.000x' if row is base else f"{row['step_s'] / base['step_s']:.3f}x "
                   f'({min(ratios):.3f}-{max(ratios):.3f})')
    tflops = row['tflops_per_s']
    cells += [f"{row['tokens_per_s']:,.0f}", f'{tflops:.1f}' if tflops >= 10 else f'{tflops:.3f}',
              f"{100 * row['mfu']:.1f}%"]
    cells += [f'{100 * tflops / best:.1f}%'] if best else []
    cells += [f'{100 * tflops / nominal:.1f}%'] if nominal else []
    cells.append(f"{row['peak_bytes'] / 2**20:,.0f}")
    cells += [f"{row['compile_s']:.1f}"] if 'compile' in options else []
    lines.append('| ' + ' | '.join(cells) + ' |')
  runs = {}  # The records' shared facts, then each record's own matmul peak.
  for name_of_file, data, _ in picked:
    shared = (f"{data['device_kind']}, {data['date']}"
              + (f", at {data['commit']}" if data.get('commit') else '')
              + f"; median of {data['steps']} steps in {data['rounds_count']} interleaved rounds")
    peak = data['peak_flops'] / 1e12
    runs.setdefault(shared, {})[name_of_file] = f'{peak:.1f}' if peak >= 10 else f'{peak:.3f}'
  lines.append('')
  for shared, peaks in runs.items():
    lines.append(f'{shared}; matmul peak (TFLOP/s) ' + ', '.join(
        f'{peak} ({name})' for name, peak in peaks.items()) + '.')
  if against:
    lines.append('`vs`: the median step over the median step of the row it is compared with, '
                 'each taken over all rounds, so it can fall outside the range in brackets, '
                 'which is that of the rounds\' own ratios.')
  if best:
    lines.append(f'`of {best:.1f}`: the best matmul peak of {", ".join(options["best_of"])}.')
  return lines


def phases(path: pathlib.Path) -> list[str]:
  """The `phases` block of one scripts/point_time.py record (see the module docstring)."""
  data = _record(path, 'scripts/point_time.py', ('runs', 'values', 'field', 'config', 'set',
                                                'eval_splits', 'cpus', 'date'))
  names = list(dict.fromkeys(n for run in data['runs'] for n in run['phases']))
  cell = lambda xs: (f'{statistics.median(xs):.1f}' if len(xs) == 1 else
                     f'{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})')
  lines = [f"| {data['field']} | runs | wall (s) | " + ' | '.join(f'{n} (s)' for n in names)
           + ' |', '|---' * (len(names) + 3) + '|']
  for value in data['values']:
    runs = [r for r in data['runs'] if r['value'] == value]
    lines.append(f'| {value} | {len(runs)} | {cell([r["wall_s"] for r in runs])} | ' + ' | '.join(
        cell([r['phases'].get(n, 0.0) for r in runs]) for n in names) + ' |')
  lines += ['', f"`{data['config']}` with {', '.join(data['set']) or 'its own settings'}, "
            f"--eval_splits={data['eval_splits']}; {data['cpus']} "
            f"CPU{'s' if data['cpus'] != 1 else ''}, {data['date']}; each run a "
            'fresh process with an empty compilation cache, the values in turns; median '
            '(range) of the runs.']
  return lines


def render(spec: str, cache: dict) -> str:
  path, kind, options = parse(spec)
  if kind == 'benchmark':
    return '\n'.join(benchmark(ROOT / path)) + '\n'
  if kind == 'compare':
    return '\n'.join(compare(ROOT / path, options, spec)) + '\n'
  if kind == 'phases':
    return '\n'.join(phases(ROOT / path)) + '\n'
  if kind == 'rows':
    return '\n'.join(rows(ROOT / path, options, spec)) + '\n'
  if kind == 'runs':
    return '\n'.join(run_tables.runs(ROOT / path, options, spec)) + '\n'
  if kind == 'bootstrap':
    return '\n'.join(run_tables.bootstrap(ROOT / path, options, spec)) + '\n'
  if kind == 'precision':
    return '\n'.join(run_tables.precision(ROOT / path)) + '\n'
  if kind == 'group_rate':
    return '\n'.join(run_tables.group_rate(ROOT / path)) + '\n'
  if kind == 'torch':
    return '\n'.join(run_tables.torch_runs(ROOT / path)) + '\n'
  if kind == 'sweep_times':
    if options.get('paired', ['0'])[0] not in ('0', '1'):
      raise errors.ConfigError(f'"{spec}": paired={options["paired"][0]!r} is not 0 or 1. Fix: '
                               'paired=1 to compare each run with the first.')
    return '\n'.join(sweep_times.table(sweep_times.read(ROOT / path),
                                       options.get('sweep', [''])[0], f'"{spec}"',
                                       options.get('paired', ['0'])[0] == '1')) + '\n'
  if kind == 'sinks':
    return '\n'.join(run_tables.sinks(ROOT / path)) + '\n'
  if kind == 'scaling':
    return '\n'.join(run_tables.scaling(ROOT / path)) + '\n'
  if kind == 'rerun':
    if 'against' not in options:
      raise errors.ConfigError(f'"{spec}": a rerun block needs against=RECORDS, the kept '
                               'records it reruns. Fix: add it.')
    kept = options['against'][0]
    for folder in (path, kept):
      if folder not in cache:
        cache[folder] = seed_tables.read_points(str(ROOT / folder))
    return '\n'.join(reruns.table(cache[path], cache[kept], str(ROOT / path), str(ROOT / kept),
                                  options, spec)) + '\n'
  if path not in cache:
    cache[path] = seed_tables.read_points(str(ROOT / path))
  lines = {'table': seed_tables.table, 'separations': seed_tables.separations,
           'summary': seed_tables.summary}[kind](
      seed_tables.seeded(cache[path], options, spec), options, spec)
  return '\n'.join(lines) + '\n'


def regenerate(text: str, cache: dict) -> str:
  """`text` with every block's body generated from its records."""
  return BLOCK.sub(lambda m: m.group(1) + render(m.group('spec'), cache) + m.group(4), text)


def pages() -> list[pathlib.Path]:
  return sorted(p for pattern in PAGES for p in ROOT.glob(pattern))


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--check', action='store_true',
                      help='Change nothing; exit 1 naming each page whose blocks differ.')
  args = parser.parse_args(argv)
  cache, stale = {}, []
  for page in pages():
    text = page.read_text(encoding='utf-8')
    new = regenerate(text, cache)
    if new != text:
      stale.append(str(page.relative_to(ROOT)))
      if not args.check:
        files.write_text_atomic(str(page), new)
  if args.check and stale:
    print(f'error: {", ".join(stale)}: results differ from their records. Fix: python '
          'scripts/docs_from_records.py', file=sys.stderr)
    return 1
  print(('rewrote ' + ', '.join(stale)) if stale else 'every block is current')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
