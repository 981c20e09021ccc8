"""The tables of a page's reference runs, from the records scripts/keep_run.py kept.

Kinds of scripts/docs_from_records.py block that read them and other scripts' records:

  <!-- records: docs/results/mlm_2026-11-29/records runs runs=mlm_bert;mlm_roformer
       labels=bert;roformer curve=validation:loss steps=50;100 eval=test:loss -->

- `runs`: a row per kept run (`runs=`, named by `labels=`, the run names by default), with
  - `curve=SPLIT:METRIC` at each of `steps=` (metrics.jsonl's in-training evaluations);
  - `eval=SPLIT:KEY;...`: eval.py's results (eval_results.json, or `file=`), each key of a
    split at the training length (a language model's results hold one entry per length; the
    entry of multiplier 1 is read, or a key of the split itself such as `unigram_loss`), or at
    M times it with `SPLIT:KEY@M`;
  - `percent=KEY;...`: those keys as percentages; `digits=` the others' (3 by default);
  - `time=PHASE;...`: the wall time of each phase's commands (steps.json, e.g. `train`);
  and a closing line naming the commit, date and commands of the runs' records.
- `bootstrap`: kept translation runs (`runs=`, the baseline first; `labels=`), the decoded
  `split=` (test by default) that their evaluation (`file=`, eval_results.json by default)
  names, scored with sacreBLEU's paired bootstrap (`samples=` 1000 and `seed=` 12345 by
  default, metrics.paired_bootstrap): each run's BLEU and chrF with the bootstrap mean and
  95% interval, and the p-value of its difference from the baseline.
- `scaling`: scripts/attention_scaling.py's record (`PATH` the JSON file): step time and
  scratch memory of each attention kind at each length, and each kind's growth per doubling
  of the length, with the ratio of the kinds at the longest.

- `precision`: scripts/rope_precision.py's record (`PATH` its JSON): per band of positions and
  per way of computing the angles, the largest and mean error of an element relative to its
  pair's norm and the largest logit error over sqrt(d), against float64.
- `torch`: a folder of scripts/compare_torch.py --out records (`PATH`), each its table: the
  two sides' step, tokens/s against PyTorch and each JAX kind's step against `none`, the
  rounds' median and range, and MFU, under a line naming the model, preset, malloc settings,
  date and commit.
- `sinks`: scripts/attention_sinks.py's record (`PATH` its sinks.json): the tables of its
  sinks.md, each label's attention on the first token per layer over its runs.
- `group_rate`: scripts/group_rate.py's record (`PATH` its --out JSON): each form's group steps
  a second (the median and range of its log intervals), and the row cache's rate over the
  rate with the rows built in the loop.

A cell the records lack is one error naming the run and what it holds: a page never shows a
number its records do not give.
"""

import json
import pathlib

from roformer import errors
from roformer import files
from roformer import metrics
from scripts import attention_sinks
from scripts import compare_torch
from scripts import keep_run
from scripts import plot_curves

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _one(options: dict, key: str, default: str) -> str:
  return options.get(key, [default])[0]


def number(spec: str, option: str, text: str, kind=int):
  """`text`, an option's value, as a number of `kind`; one error naming the block otherwise."""
  try:
    return kind(text)
  except ValueError:
    raise errors.ConfigError(f'"{spec}": {option}={text!r} is not a number. Fix: give '
                             f'{"a whole number" if kind is int else "a number"}.') from None


def _pair(text: str, option: str, spec: str) -> tuple[str, str]:
  split, sep, key = text.partition(':')
  if not sep or not split or not key:
    raise errors.ConfigError(f'"{spec}": {option}={text!r} is not SPLIT:KEY. Fix: e.g. '
                             f'{option}=validation:loss.')
  return split, key


def _at(key: str, spec: str) -> tuple[str, int]:
  """`KEY@M` -> (KEY, M); a bare KEY is at 1x."""
  key, sep, multiplier = key.partition('@')
  if sep and not multiplier.isdigit():
    raise errors.ConfigError(f'"{spec}": {key}@{multiplier} names no multiple of the training '
                             f'length. Fix: e.g. {key}@2.')
  return key, int(multiplier) if sep else 1


def eval_value(results: dict, split: str, key: str, where: str, multiplier: int = 1):
  """`key` of `split` in an eval.py results record, at `multiplier` times the training length
  (or the split's own key, at the training length)."""
  splits = results.get('splits', {})
  if split not in splits:
    raise errors.ConfigError(f'{where} holds no {split!r} split (it holds {sorted(splits)}). '
                             'Fix: name one of those.')
  found = splits[split]
  if key in found:
    if multiplier == 1:
      return found[key]
    raise errors.ConfigError(f'{where}: {key!r} is the {split!r} split\'s own value, one for '
                             f'every length. Fix: name it without @{multiplier}.')
  at = [e for e in found.get('lengths', []) if e.get('multiplier') == multiplier]
  if at and key in at[0]:
    return at[0][key]
  if not at and multiplier != 1:
    held = sorted(m for m in (e.get('multiplier') for e in found.get('lengths', []))
                  if isinstance(m, int))
    raise errors.ConfigError(f'{where} holds no {split!r} evaluation at {multiplier}x (it does '
                             f'at {held}). Fix: name one of those.')
  held = sorted((set(found) | set(at[0] if at else ())) - {'lengths'})
  raise errors.ConfigError(f'{where} holds no {key!r} in {split!r} (it holds {held}). Fix: '
                           'name one of those.')


def _seconds(text: float) -> str:
  minutes, seconds = divmod(round(text), 60)
  return f'{minutes}m{seconds:02d}s' if minutes else f'{seconds}s'


def _named_runs(options: dict, spec: str, needs: str, least: int = 1) -> tuple[list, list]:
  """A block's `runs=` (at least `least`, else one error saying what the block `needs`) and
  their `labels=` (the names by default, one per run)."""
  names = options.get('runs', [])
  if len(names) < least:
    raise errors.ConfigError(f'"{spec}": {needs}. Fix: add them.')
  labels = options.get('labels', names)
  if len(labels) != len(names):
    raise errors.ConfigError(f'"{spec}": {len(labels)} labels for {len(names)} runs. Fix: one '
                             'label per run.')
  return names, labels


def runs(folder: pathlib.Path, options: dict, spec: str) -> list[str]:
  """The `runs` block (see the module docstring)."""
  names, labels = _named_runs(options, spec, 'a runs block names runs=')
  curve = _pair(options['curve'][0], 'curve', spec) if 'curve' in options else None
  steps = [number(spec, 'steps', s) for s in options.get('steps', [])] if curve else []
  if curve and not steps:
    raise errors.ConfigError(f'"{spec}": curve= needs steps=. Fix: add the steps to show.')
  evals = [_pair(text, 'eval', spec) for text in options.get('eval', [])]
  percent = set(options.get('percent', []))
  digits = number(spec, 'digits', _one(options, 'digits', '3'))
  phases, file = options.get('time', []), _one(options, 'file', 'eval_results.json')
  value = lambda key, v: f'{100 * v:.1f}%' if key in percent else f'{v:.{digits}f}'
  header = ['run']
  if curve:
    header += [f'{curve[0]} {curve[1]} at step {steps[0]}'] + [str(s) for s in steps[1:]]
  header += [f'{split} {key.replace("@", " at ")}x' if '@' in key else f'{split} {key}'
             for split, key in evals] + [f'{phase} time' for phase in phases]
  lines = ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
  made, timed = {}, False
  for name, label in zip(names, labels):
    run = folder / name
    if not (run / 'config.json').is_file():
      raise errors.ConfigError(f'"{spec}": {run} is not a kept run (no config.json). Fix: '
                               'name a run that scripts/keep_run.py kept.')
    cells = [label]
    if curve:
      points = plot_curves.curves([str(run)], *curve)[str(run)]
      missing = [s for s in steps if s not in points]
      if missing:
        raise errors.ConfigError(f'"{spec}": {run} records no {curve[0]} {curve[1]} at steps '
                                 f'{missing} (it does at {sorted(points)}). Fix: name those.')
      cells += [value(curve[1], points[s]) for s in steps]
    if evals:
      results = files.read_json(str(run / file))
      for split, text in evals:
        key, multiplier = _at(text, spec)
        cells.append(value(key, eval_value(results, split, key, str(run / file), multiplier)))
    record = files.read_json(str(run / keep_run.STEPS_FILE)) if (
        run / keep_run.STEPS_FILE).is_file() else {'steps': []}
    for phase in phases:
      seconds = [s['seconds'] for s in record['steps'] if s['phase'] == phase]
      if not seconds:
        raise errors.ConfigError(f'"{spec}": {run} records no {phase!r} step. Fix: name a '
                                 'phase its steps.json holds.')
      cells.append(_seconds(sum(seconds)))
    lines.append('| ' + ' | '.join(cells) + ' |')
    timed = timed or bool(record['steps'])
    made.setdefault((record.get('commit') or 'an unknown commit', record.get('date', '')),
                    []).append(name)
  shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
  lines.append('')
  when = lambda commit, date: f'at {commit}, {date}' if date else f'at {commit}'
  lines.append('Made ' + '; '.join(f"{when(commit, date)} ({', '.join(names)})"
                                   for (commit, date), names in made.items())
               + (f'; the commands are in {shown}/RUN/steps.json.' if timed else
                  ' (kept without their commands, which the text gives).'))
  return lines


def _decoded(run: pathlib.Path, file: str, split: str,
             spec: str) -> tuple[list[str], list[str]]:
  """(hypotheses, references) of `split` that a kept translation run's evaluation `file`
  names."""
  results = run / file
  if not results.is_file():
    raise errors.ConfigError(f'"{spec}": {run} holds no {file}. Fix: name a run that '
                             'scripts/keep_run.py kept after eval.py, or its file=.')
  named = files.read_json(str(results)).get('splits', {}).get(split, {}).get('hypotheses')
  if not named:
    raise errors.ConfigError(f'"{spec}": {results} names no decoded {split!r} split. Fix: '
                             'name a translation run and a split eval.py decoded.')
  lines = []
  for path in (run / named, run / metrics.references_of(named)):
    if not path.is_file():
      raise errors.ConfigError(f'"{spec}": {path} is missing. Fix: move {run} aside and keep '
                               'the run again with scripts/keep_run.py, which keeps the files '
                               'its evaluations name.')
    lines.append(metrics.read_lines(str(path)))
  return lines[0], lines[1]


def bootstrap(folder: pathlib.Path, options: dict, spec: str) -> list[str]:
  """The `bootstrap` block (see the module docstring)."""
  names, labels = _named_runs(options, spec, 'a bootstrap block names two runs or more (runs=, '
                              'the baseline first)', least=2)
  split, file = _one(options, 'split', 'test'), _one(options, 'file', 'eval_results.json')
  samples = number(spec, 'samples', _one(options, 'samples', '1000'))
  seed = number(spec, 'seed', _one(options, 'seed', '12345'))
  if samples < 40 or seed < 1:
    raise errors.ConfigError(f'"{spec}": samples={samples}, seed={seed}: the bootstrap needs '
                             'at least 40 resamples for its 95% interval, and a seed of 1 or '
                             'more (sacreBLEU draws unseeded at 0). Fix: e.g. samples=1000 '
                             'seed=12345.')
  systems, references = [], None
  for name, label in zip(names, labels):
    hypotheses, theirs = _decoded(folder / name, file, split, spec)
    if references is None:
      references = theirs
    elif theirs != references:
      raise errors.ConfigError(f'"{spec}": {name} was scored against other {split} references '
                               f'than {names[0]}. Fix: compare runs evaluated on the same '
                               'sentences.')
    if len(hypotheses) != len(references):
      raise errors.ConfigError(f'"{spec}": {name} holds {len(hypotheses)} {split} hypotheses '
                               f'for {len(references)} references. Fix: evaluate the run '
                               'again with eval.py, then keep it.')
    systems.append((label, hypotheses))
  rows = metrics.paired_bootstrap(systems, references, samples=samples, seed=seed)
  cell = lambda r, m: f"{r[m]:.2f} ({r[f'{m}_mean']:.2f} ± {r[f'{m}_ci']:.2f})"
  p = lambda r, m: '-' if r[f'{m}_p'] is None else f"{r[f'{m}_p']:.2g}"
  lines = [f'| run | {split} BLEU (bootstrap mean ± 95% interval) | chrF (the same) | '
           f'p, BLEU against {labels[0]} | p, chrF |', '|---|---|---|---|---|']
  lines += [f"| {r['system']} | {cell(r, 'bleu')} | {cell(r, 'chrf')} | {p(r, 'bleu')} | "
            f"{p(r, 'chrf')} |" for r in rows]
  return lines + ['', f"sacreBLEU's paired bootstrap over the {len(references):,} {split} "
                  f'sentences, {samples:,} resamples drawn with seed {seed}, the same for every '
                  f'run. p, against {labels[0]}: the share of resamples whose mean-shifted '
                  'difference exceeds the observed one, plus one, over the resamples plus one '
                  f'(at least 1/{samples + 1:,}). BLEU `' + rows[0]['bleu_signature'] + '`, chrF `'
                  + rows[0]['chrf_signature'] + '`.']


def scaling(path: pathlib.Path) -> list[str]:
  """The `scaling` block of one scripts/attention_scaling.py record."""
  if not path.is_file():
    raise errors.ConfigError(f'{path} does not exist. Fix: name a scripts/attention_scaling.py '
                             '--out file.')
  data = files.read_json(str(path))
  if not isinstance(data, dict) or not data.get('rows') or 'device' not in data or not all(
      all(k in r for k in ('attention', 'length', 'step_seconds', 'temp_bytes')) and
      r['step_seconds'] > 0 and r['temp_bytes'] > 0 for r in data['rows']):
    raise errors.ConfigError(f'{path} is not a scripts/attention_scaling.py record (its device, '
                             'and rows of attention, length and positive step_seconds and '
                             'temp_bytes). Fix: name one of its --out files.')
  kinds = list(dict.fromkeys(r['attention'] for r in data['rows']))
  lengths = sorted({r['length'] for r in data['rows']})
  by = {(r['attention'], r['length']): r for r in data['rows']}
  mib = lambda r: f"{r['temp_bytes'] / 2**20:,.0f} MiB"
  lines = ['| L | ' + ' | '.join(f'{k} s/step' for k in kinds) + ' | '
           + ' | '.join(f'{k} scratch' for k in kinds) + ' |', '|---' * (2 * len(kinds) + 1) + '|']
  for length in lengths:
    rows = [by.get((k, length)) for k in kinds]
    lines.append(f'| {length} | ' + ' | '.join(f"{r['step_seconds']:.2f}" if r else '-'
                                               for r in rows) + ' | '
                 + ' | '.join(mib(r) if r else '-' for r in rows) + ' |')
  lines.append('')
  growth = []
  for kind in kinds:
    pairs = [(by[(kind, a)], by[(kind, b)]) for a, b in zip(lengths, lengths[1:])
             if (kind, a) in by and (kind, b) in by and b == 2 * a]
    if pairs:
      time = [b['step_seconds'] / a['step_seconds'] for a, b in pairs]
      memory = [b['temp_bytes'] / a['temp_bytes'] for a, b in pairs]
      growth.append(f'{kind} time x{min(time):.1f}-{max(time):.1f} and scratch '
                    f'x{min(memory):.1f}-{max(memory):.1f}')
  if growth:
    lines.append('Per doubling of L: ' + '; '.join(growth) + '.')
  last = lengths[-1]
  if len(kinds) == 2 and all((k, last) in by for k in kinds):
    a, b = by[(kinds[0], last)], by[(kinds[1], last)]
    lines.append(f"At L = {last}, {kinds[1]} over {kinds[0]}: time "
                 f"{b['step_seconds'] / a['step_seconds']:.2f}x, scratch "
                 f"{b['temp_bytes'] / a['temp_bytes']:.2f}x.")
  lines.append(f"{data['device']}, {data.get('date', 'undated')}"
               + (f", at {data['commit']}" if data.get('commit') else '') + '.')
  return lines


def sinks(path: pathlib.Path) -> list[str]:
  """The `sinks` block of one scripts/attention_sinks.py record: its own summary tables."""
  try:
    data = json.loads(path.read_text(encoding='utf-8')) if path.is_file() else None
  except (ValueError, UnicodeDecodeError):
    data = None
  keys = ('label', 'mass', 'per_head', 'uniform')
  if not isinstance(data, list) or not data or not all(
      isinstance(r, dict) and all(k in r for k in keys) for r in data):
    raise errors.ConfigError(f'{path} is not a scripts/attention_sinks.py record (a list of runs '
                             f'with {", ".join(keys)}). Fix: name its sinks.json.')
  return attention_sinks.summary(data).rstrip('\n').split('\n')


def group_rate(path: pathlib.Path) -> list[str]:
  """The `group_rate` block of one scripts/group_rate.py record: a row per form of the rows."""
  try:
    data = json.loads(path.read_text(encoding='utf-8')) if path.is_file() else None
  except (ValueError, UnicodeDecodeError):
    data = None
  keys = ('form', 'steps_per_s', 'low', 'high', 'intervals')
  rate = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
  if not isinstance(data, list) or not data or not all(
      isinstance(r, dict) and all(k in r for k in keys) and isinstance(r['form'], str)
      and all(rate(r[k]) for k in keys[1:]) for r in data):
    raise errors.ConfigError(f'{path} is not a scripts/group_rate.py record (a list of forms '
                             f'with {", ".join(keys)}, the rates above 0). Fix: name its --out '
                             'file.')
  lines = ['| rows | group steps/s (median) | range over the log intervals | intervals |',
           '|---|---|---|---|']
  lines += [f"| {r['form']} | {r['steps_per_s']:.1f} | {r['low']:.1f}-{r['high']:.1f} | "
            f"{r['intervals']} |" for r in data]
  rate = {r['form']: r['steps_per_s'] for r in data}
  if {'built', 'row cache'} <= set(rate):
    lines += ['', f"The row cache's rate over the rows built in the loop: "
              f"{rate['row cache'] / rate['built']:.1f}x (medians, one run each)."]
  return lines


def precision(path: pathlib.Path) -> list[str]:
  """The `precision` block of one scripts/rope_precision.py record."""
  data = files.read_json(str(path)) if path.is_file() else None
  bands = (data or {}).get('bands')
  if not bands or not all('positions' in b and len(b) > 1 for b in bands):
    raise errors.ConfigError(f'{path} is not a scripts/rope_precision.py record (bands of '
                             'positions). Fix: name one of its --out files.')
  ways = [name for name in bands[0] if name != 'positions']
  lines = ['| positions | ' + ' | '.join(f'{w}: max / mean, logit' for w in ways) + ' |',
           '|---' * (len(ways) + 1) + '|']
  for band in bands:
    cells = [f"{band[w]['max_rel_element']:.2e} / {band[w]['mean_rel_element']:.2e}, "
             f"{band[w]['max_logit_error_over_sqrt_d']:.2e}" for w in ways]
    lines.append(f"| {band['positions'][0]:,}-{band['positions'][1]:,} | " + ' | '.join(cells)
                 + ' |')
  lines += ['', f"{data['device']} ({data['backend']}, jax {data['jax']}), head dimension "
            f"{data['head_dim']}."]
  return lines


_TORCH_KEYS = ('date', 'model', 'preset', 'steps', 'rounds', 'summary', 'jax', 'torch')


def torch_runs(folder: pathlib.Path) -> list[str]:
  """The `torch` block: every scripts/compare_torch.py record in `folder`, by name."""
  paths = sorted(folder.glob('*.json'))
  if not paths:
    raise errors.ConfigError(f'{folder} holds no scripts/compare_torch.py record (*.json). Fix: '
                             'name a folder of its --out files.')
  lines = []
  for path in paths:
    data = files.read_json(str(path))
    missing = [k for k in _TORCH_KEYS if k not in data]
    if missing:
      raise errors.ConfigError(f'{path} is not a scripts/compare_torch.py record (no '
                               f'{", ".join(missing)}). Fix: name a folder of its --out files.')
    jax, torch = data['jax'], data['torch']
    lines += [f"`{path.stem}`: {data['model']} at `{data['preset']}` against {torch['model']} "
              f"({torch['framework']}, {torch['threads']} threads, {torch['attention']} "
              f"attention); malloc JAX {jax['malloc']}, PyTorch {torch['malloc']}; "
              f"{data['steps']} steps per side in {data['rounds']} rounds, taking turns; MFU "
              f"against {jax['peak_flops'] / 1e9:.0f} GFLOP/s measured in the run; "
              f"{data['date']}" + (f", at {data['commit']}" if data.get('commit') else '') + '.',
              '', *compare_torch.table(data['summary']).split('\n'), '']
  return lines[:-1]
