"""Where one training point's wall time goes (setup, compilation and first step, the steps,
validation and checkpoints, the final evaluation), for each value of a config field, each run a
fresh `train.py` process with an empty compilation cache (a cold start, as a sweep's first
point of its shape).

  python scripts/point_time.py --config configs/synthetic.py:copy \\
      --vary train.compile_ahead=off,on --rounds 2 --out docs/results/x/copy.json

The values take turns, `--rounds` times, so that a change in the host's load reaches each alike.
Each run trains in a temporary directory with `--eval_splits` (a sweep's final evaluation);
its phases are the `Time:` line the run logs (roformer/logs.py `Phases`), and the total is the
process's wall time from start to exit. The record keeps every run's numbers, the command and
the config overrides; scripts/docs_from_records.py renders it (`phases` blocks).
"""

import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
from roformer import cli
from roformer import config_args
from roformer import errors
from roformer import files
from roformer import metrics as metrics_lib
from roformer import provenance
from roformer import resolve
from roformer import sweeps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PHASE = re.compile(r'(?:, |^)([^,]+?) ([0-9.]+) s')


def usable_cpus() -> int:
  """How many cores this process (and the runs it starts) may use: fewer than the machine's
  when pinned, as a sweep pins each training process (`taskset -c 0 python
  scripts/point_time.py`)."""
  return len(sweeps.usable_cpus())


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  p.add_argument('--config', required=True, help="train.py's --config, e.g. "
                 'configs/synthetic.py:copy.')
  p.add_argument('--vary', required=True,
                 help='FIELD=V1,V2,...: a config field and the values compared.')
  p.add_argument('--set', action='append', default=[],
                 help='FIELD=VALUE given to every run (repeatable).')
  p.add_argument('--eval_splits', default='validation', help="train.py's --eval_splits.")
  p.add_argument('--rounds', type=cli.positive_int, default=2)
  p.add_argument('--timeout', type=cli.positive_int, default=1800,
                 help='Seconds one run may take.')
  p.add_argument('--out', default='', help='Write the record (JSON) here.')
  return p


def parse_vary(text: str) -> tuple[str, list[str]]:
  field, sep, values = text.partition('=')
  values = [v for v in values.split(',') if v]
  if not sep or not field or len(values) < 2:
    raise errors.ConfigError(f'--vary={text!r} is not FIELD=V1,V2,... with two values or more. '
                             'Fix: e.g. --vary train.compile_ahead=off,on.')
  return field, values


def check_values(args, field: str, values: list[str]) -> None:
  """Before any run: the config of every value passes train.py's own checks of the fields
  (a misspelt field is named with the closest one), so that a bad last value does not end the
  command after the others' cold runs."""
  sets = []
  for text in args.set:
    name, sep, value = text.partition('=')
    if not sep or not name:
      raise errors.ConfigError(f'--set={text!r} is not FIELD=VALUE. Fix: e.g. '
                               '--set train.steps=100.')
    sets.append((name, value))
  with tempfile.TemporaryDirectory() as tmp:
    for value in values:  # As train.py checks a new run (a continuation's source read too).
      try:
        resolve.check_rerun(config_args.load(args.config, [*sets, (field, value)]),
                            os.path.join(tmp, 'run'))
      except errors.ConfigError as e:
        raise errors.ConfigError(f'--vary {field}={value}: {e}') from None


def phases(log: str) -> dict[str, float]:
  """The phases of the last `Time:` line of a run's log (name -> seconds)."""
  lines = [line for line in log.splitlines() if 'Time: ' in line]
  if not lines:
    raise errors.ConfigError('the run logged no "Time:" line (it did not finish). Fix: run '
                             'the same train.py command alone and read its error.')
  text = lines[-1].split('Time: ', 1)[1].rstrip('.')
  startup = re.match(r'start-up ([0-9.]+) s \(to the first check\), ', text)
  out = {'start-up': float(startup.group(1))} if startup else {}
  text = text[startup.end():] if startup else text
  return {**out, **{name: float(seconds) for name, seconds in _PHASE.findall(text)}}


def one_run(args, field: str, value: str) -> dict:
  with tempfile.TemporaryDirectory() as tmp:
    command = [sys.executable, os.path.join(ROOT, 'train.py'), f'--config={args.config}',
               f'--workdir={os.path.join(tmp, "run")}', f'--eval_splits={args.eval_splits}',
               *(f'--config.{s}' for s in args.set), f'--config.{field}={value}']
    env = {**os.environ, 'JAX_COMPILATION_CACHE_DIR': os.path.join(tmp, 'jax_cache')}
    start = time.perf_counter()
    try:
      proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
      raise errors.ConfigError(f'{field}={value}: train.py ran past --timeout={args.timeout} s. '
                               'Fix: raise --timeout.') from None
    wall = time.perf_counter() - start
    # What the run ran on: its own record (train.py writes one line as it starts).
    started = os.path.join(tmp, 'run', provenance.ENVIRONMENT_FILE)
    made_with = metrics_lib.read_jsonl(started) if os.path.exists(started) else []
  if proc.returncode:
    last = ((proc.stderr or proc.stdout).strip().splitlines() or ['(no output)'])[-1]
    raise errors.ConfigError(f'{field}={value}: train.py failed: {last}')
  return {'value': value, 'wall_s': wall, 'phases': phases(proc.stdout + proc.stderr),
          **({'made_with': made_with[0]} if made_with else {})}


def main(args) -> None:
  field, values = parse_vary(args.vary)
  check_values(args, field, values)
  if args.out:  # Its folder exists before the runs, not after them.
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  runs = []
  for r in range(args.rounds):
    order = values[r % len(values):] + values[:r % len(values)]
    for value in order:
      run = one_run(args, field, value)
      runs.append({'round': r, **run})
      print(f'[point_time] round {r} {field}={value}: {run["wall_s"]:.1f} s '
            f'({", ".join(f"{k} {v:.1f} s" for k, v in run["phases"].items())})', flush=True)
  if args.out:
    files.write_json_atomic(args.out, {
        'date': time.strftime('%Y-%m-%d'), 'config': args.config, 'field': field,
        'values': values, 'set': args.set, 'eval_splits': args.eval_splits,
        'cpus': usable_cpus(), 'command': ' '.join(sys.argv), 'runs': runs})
    print(f'wrote {args.out}')


if __name__ == '__main__':
  cli.run(main, parser())
