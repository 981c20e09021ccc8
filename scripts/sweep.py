"""Run a sweep of training configs: one workdir per point, then its evaluations.

  python scripts/sweep.py --config configs/lm.py --sweep configs/sweeps/positions.py \\
      --workdir runs/sweep [--parallel 2] [--dry_run]
  python scripts/report.py runs/sweep

Each point runs `train.py` then `eval.py` (once per evaluation the sweep file asks for) as
child processes, logging to WORKDIR/logs/POINT.log. Finished stages are skipped and unfinished
runs resume from their checkpoints, so the same command continues an interrupted sweep. A failed
point is reported and the sweep goes on; the exit status is 1 if any point failed.
Points that start from another point (a `{sweep}/NAME` value) wait for it. `--dry_run` prints
one shell command per point (train && evals) instead, for a job scheduler (in order: a point
after the points it starts from);
on a multi-host cluster add train.py's `--distributed` with `--extra_train_flags=--distributed`.
"""

import concurrent.futures
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import logs  # pylint: disable=wrong-import-position
from roformer import sweeps  # pylint: disable=wrong-import-position


class Progress:
  """Counts points and prints `[sweep] done/total ... ETA` lines (thread-safe)."""

  def __init__(self, total: int, parallel: int):
    self.total, self.parallel = total, parallel
    self.done, self.failed, self.skipped = 0, [], 0
    self.durations = []
    self.running = set()
    self.lock = threading.Lock()

  def line(self) -> str:
    finished = self.done + len(self.failed)
    eta = ''
    if self.durations and finished < self.total:
      left = self.total - finished
      mean = sum(self.durations) / len(self.durations)
      eta = f' | ETA {logs.duration(mean * left / min(self.parallel, left))}'
    running = f' | running {", ".join(sorted(self.running))}' if self.running else ''
    failed = f', {len(self.failed)} failed' if self.failed else ''
    return f'[sweep] {self.done}/{self.total} points done{failed}{running}{eta}'

  def say(self, message: str = '') -> None:
    with self.lock:
      print((message + '\n' if message else '') + self.line(), flush=True)


def run_point(sweep, point, root: str, progress: Progress, extra_train: list[str],
              finished: dict | None = None) -> bool:
  """Trains and evaluates one point (after the points it needs, each a threading.Event in
  `finished` set with its success)."""
  workdir = os.path.join(root, point.name)
  for need in point.needs:
    finished[need].wait()
    if not finished[need].ok:
      with progress.lock:
        progress.failed.append(point.name)
      progress.say(f'[sweep] SKIPPED {point.name}: it starts from {need}, which failed.')
      return False
  todo = sweeps.stages(sweep, point, workdir, extra_train)
  if not todo:
    with progress.lock:
      progress.done += 1
      progress.skipped += 1
    return True
  os.makedirs(os.path.join(root, 'logs'), exist_ok=True)
  log_path = os.path.join(root, 'logs', f'{point.name}.log')
  with progress.lock:
    progress.running.add(point.name)
  progress.say()
  start = time.perf_counter()
  failure = ''  # Which stage failed, and how.
  with open(log_path, 'a', encoding='utf-8') as log:
    for label, cmd in todo:
      log.write(f'\n$ {shlex.join(cmd)}\n')
      log.flush()
      code = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
      if code:
        failure = f'{label} (exit {code})'
      elif label == 'train' and not sweeps.trained(workdir, point.fields.get('train.steps')):
        failure = 'train (stopped before its last step)'  # E.g. preempted: evaluate later.
      if failure:
        break
  ok = not failure
  with progress.lock:
    progress.running.discard(point.name)
    if ok:
      progress.done += 1
      progress.durations.append(time.perf_counter() - start)
    else:
      progress.failed.append(point.name)
  if ok:
    progress.say(f'[sweep] finished {point.name} in {logs.duration(time.perf_counter() - start)}')
  else:
    progress.say(f'[sweep] FAILED {point.name} at {failure}: {_last_line(log_path)} '
                 f'(log: {log_path})')
  return ok


def _last_line(path: str) -> str:
  with open(path, encoding='utf-8', errors='replace') as f:
    lines = [line.strip() for line in f if line.strip()]
  return lines[-1][-300:] if lines else ''


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', default='', help="train.py's --config (the sweep file may "
                      'name one).')
  parser.add_argument('--sweep', required=True, type=cli.path_arg,
                      help='Sweep file, optionally FILE:ARG.')
  parser.add_argument('--workdir', required=True, type=cli.path_arg,
                      help='Directory holding one workdir per point.')
  parser.add_argument('--parallel', type=int, default=1, help='Points run at the same time.')
  parser.add_argument('--dry_run', action='store_true',
                      help='Print one command per point instead of running them.')
  parser.add_argument('--extra_train_flags', default='',
                      help="Extra train.py flags for every point, e.g. '--distributed'.")
  args = parser.parse_args(argv)
  try:
    sweep = sweeps.load(args.sweep, args.config)
    if args.parallel < 1:
      raise errors.ConfigError(f'--parallel={args.parallel} must be >= 1.')
    if os.path.exists(args.workdir) and not os.path.isdir(args.workdir):
      raise errors.ConfigError(f'--workdir={args.workdir} is a file. Fix: give a directory.')
    path, sep, arg = sweep.config.partition(':')
    if os.path.exists(path):  # Children run in the repository: pass the caller's file.
      sweep = dataclasses.replace(sweep, config=os.path.abspath(path) + sep + arg)
    sweeps.load_module(sweep.config.split(':')[0])  # The config file exists and imports.
  except errors.ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  root = os.path.abspath(args.workdir)
  extra = shlex.split(args.extra_train_flags)
  if args.dry_run:
    for point in sweep.points:
      workdir = os.path.join(root, point.name)
      commands = [sweeps.train_command(sweep, point, workdir, extra)] + [
          sweeps.eval_command(sweep, point, workdir, name)
          for name, ev in sweep.evals.items() if sweeps.applies(ev, point)]
      print(' && '.join(shlex.join(['python'] + c[1:]) for c in commands))
    return 0
  os.makedirs(root, exist_ok=True)
  # Points that differ only in their seed compile the same programs: the children share JAX's
  # persistent compilation cache.
  os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(root, '.jax_cache'))
  with open(os.path.join(root, 'sweep.json'), 'w', encoding='utf-8') as f:
    json.dump({'config': sweep.config, 'sweep': args.sweep,
               'points': {p.name: p.overrides for p in sweep.points},
               'overrides': sweep.overrides,
               'evals': sweep.evals}, f, indent=2, default=str)
  progress = Progress(len(sweep.points), args.parallel)
  progress.say(f'[sweep] {len(sweep.points)} points of {args.sweep} on {sweep.config} in {root}')
  finished = {p.name: threading.Event() for p in sweep.points}

  def run(point):
    ok = False
    try:
      ok = run_point(sweep, point, root, progress, extra, finished)
    finally:
      finished[point.name].ok = ok
      finished[point.name].set()
    return ok
  # Points that start from another point run after it (a pool thread waits for it), and the
  # pool takes them in the order of the sweep file, so list such points after the ones they need.
  with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
    results = list(pool.map(run, sweep.points))
  if progress.skipped:
    print(f'[sweep] {progress.skipped} points were already finished.')
  if progress.failed:
    print(f'[sweep] failed: {", ".join(progress.failed)} (see {root}/logs); rerun the same '
          'command to retry them.', flush=True)
  print(f'[sweep] report: python scripts/report.py {args.workdir}')
  return 0 if all(results) else 1


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
