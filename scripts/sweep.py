"""Run a sweep of training configs: one workdir per point, then its evaluations.

  python scripts/sweep.py --config configs/lm.py --sweep configs/sweeps/positions.py \\
      --workdir runs/sweep [--parallel N] [--dry_run] [--no_group_seeds]
  python scripts/report.py runs/sweep

Points that differ only in their seed train in one `train.py --seeds=...` process (one start-up
and one compilation for all of them; vmapped on an accelerator), which also runs each one's
plain evaluation as eval.py would (`--eval_splits`); evaluations with overrides run `eval.py`
afterwards. Children log to WORKDIR/logs/NAME.log (a group's name has {seed} in place of the
seed) and share JAX's persistent compilation cache (WORKDIR/.jax_cache) and the synthetic rows
the sweep builds once beforehand (WORKDIR/.rows, roformer/data/row_cache.py; `--no_row_cache`
leaves each run to build its own). Each run of the sweep adds a line to WORKDIR/timings.jsonl:
its commit, host, processes and wall time, in all and group by group (`record_time`). Finished
stages are skipped and unfinished runs resume from their checkpoints, so the same command
continues an interrupted sweep (a finished point whose checkpoints were deleted stands on its
records). A failed point is reported by name and the
sweep goes on (a group's other members included). Exit status: 2 when nothing ran because a
flag, the sweep file or a point's config was refused (one `error: ...` line, before anything is
written), 1 if any point failed, 130 after Ctrl-C. The work is ordered longest first and
`--parallel` (default: one process per CPU core; on an accelerator, one process in all unless it
is a GPU and every group's step is too small to keep it busy: `sweep_plan.default_parallel`)
keeps that many processes running (at most one per group); on the CPU each is pinned to cores of
its own (`--no_pin` leaves them on every core: see sweeps.core_sets for why). Points that start
from another point (a `{sweep}/NAME` value) wait for it. `--dry_run` prints one shell command
per group (train && evals) instead, for a job scheduler (in order: a point after the points it
starts from); on a multi-host cluster add train.py's `--distributed` with
`--extra_train_flags=--distributed`.
"""

import concurrent.futures
import contextlib
import dataclasses
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import logs  # pylint: disable=wrong-import-position
from roformer import provenance  # pylint: disable=wrong-import-position
from roformer import reliability  # pylint: disable=wrong-import-position
from roformer import sweeps  # pylint: disable=wrong-import-position
from roformer.data import row_cache  # pylint: disable=wrong-import-position
from scripts import sweep_plan  # pylint: disable=wrong-import-position
from scripts import sweep_times  # pylint: disable=wrong-import-position


class Progress:
  """Counts points and prints `[sweep] done/total ... ETA` lines (thread-safe), naming the
  running groups while there are at most NAMED of them (a GPU runs a dozen at once: the line
  then counts them, and each is named as it starts and ends).

  The ETA weighs each group by its work (`group_work`: a sweep's groups differ in steps and
  shapes, and the longest run first): the seconds per unit of work of the groups finished so
  far, times the work of the groups not finished, over the processes that share it."""

  NAMED = 4

  def __init__(self, total: int, parallel: int, work: dict[str, float] | None = None):
    self.total, self.parallel = total, parallel
    self.done, self.failed, self.skipped = 0, [], 0
    self.work_left = dict(work or {})  # Group name -> its work, until it ends.
    self.timed_work = self.timed_seconds = 0.0  # Of the groups that trained here.
    self.seconds = {}  # Group name -> its wall time, for the groups that ran here.
    self.ran = []  # The points that had a stage to run here (train or evaluate), in order.
    self.rows_seconds = None  # Building the synthetic rows beforehand, where they were built.
    self.running = set()
    self.lock = threading.Lock()

  def ended(self, group: str, seconds: float | None = None) -> None:
    """Group `group` ended (call under the lock); `seconds` if it ran here."""
    work = self.work_left.pop(group, 0.0)
    if seconds is not None:
      self.seconds[group] = seconds
    if seconds is not None and work > 0:
      self.timed_work += work
      self.timed_seconds += seconds

  def line(self) -> str:
    eta = ''
    if self.timed_work > 0 and self.work_left:
      per_work = self.timed_seconds / self.timed_work
      processes = min(self.parallel, len(self.work_left))
      eta = f' | ETA {logs.duration(per_work * sum(self.work_left.values()) / processes)}'
    running = ''
    if len(self.running) > self.NAMED:
      running = f' | {len(self.running)} running'
    elif self.running:
      running = f' | running {", ".join(sorted(self.running))}'
    failed = f', {len(self.failed)} failed' if self.failed else ''
    return f'[sweep] {self.done}/{self.total} points done{failed}{running}{eta}'

  def say(self, message: str = '') -> None:
    with self.lock:
      print((message + '\n' if message else '') + self.line(), flush=True)


def mark_trained(trained: dict | None, point_name: str, ok: bool) -> None:
  """Lets the points that start from `point_name` go (its threading.Event in `trained`, set
  once, with whether its training finished)."""
  event = (trained or {}).get(point_name)
  if event is not None and not event.is_set():
    event.ok = ok
    event.set()


def run_group(sweep, group, root: str, progress: Progress, extra_train: list[str],
              trained: dict | None = None, cores=None,
              children: sweeps.Children | None = None) -> bool:
  """Trains one group (its points that still need it, in one train.py) and runs each point's
  remaining evaluations, after the points they start from have trained (each a
  threading.Event in `trained`, set with its success; their evaluations may still run), its
  processes pinned to `cores` (None: not pinned) and among `children`. Sets its own points'
  events once their training has ended. True if every point of the group finished; once
  `children` are stopped, False with nothing said (the driver sums the stop up)."""
  stopped = lambda: children is not None and children.stopped
  for point in group.points:
    for need in point.needs:
      trained[need].wait()
      if not trained[need].ok and not stopped():
        with progress.lock:
          progress.failed.append(point.name)
          progress.ended(group.name)
        progress.say(f'[sweep] SKIPPED {point.name}: it starts from {need}, which failed.')
        for member in group.points:
          mark_trained(trained, member.name, False)
        return False
  if stopped():  # What it waited for was stopped, or the stop came meanwhile.
    for member in group.points:
      mark_trained(trained, member.name, False)
    return False
  todo = {p.name: sweeps.stages(sweep, p, os.path.join(root, p.name), extra_train)
          for p in group.points}
  for point in group.points:  # Already trained: the points that start from it may go.
    if not any(label == 'train' for label, _ in todo[point.name]):
      mark_trained(trained, point.name, True)
  if not any(todo.values()):
    with progress.lock:
      progress.done += len(group.points)
      progress.skipped += len(group.points)
      progress.ended(group.name)
    return True
  os.makedirs(os.path.join(root, 'logs'), exist_ok=True)
  log_path = os.path.join(root, 'logs', f'{group.name}.log')
  with progress.lock:
    progress.running.add(group.name)
    progress.ran += [p.name for p in group.points if todo[p.name]]
    named = len(progress.running) <= progress.NAMED
  progress.say('' if named else f'[sweep] started {group.name}')
  start = time.perf_counter()
  failures = {}  # Point -> which stage failed, and how.
  output = {}  # Point -> where the output of the stage that failed starts in the log.
  training = [p for p in group.points if any(label == 'train' for label, _ in todo[p.name])]
  with open(log_path, 'a', encoding='utf-8') as log:
    started = [0]  # Where the output of the last command called starts.

    def call(label, cmd) -> str:
      if stopped():  # Not logged as if it ran.
        return f'{label} (not started: the sweep was stopped)'
      log.write(f'\n$ {shlex.join(cmd)}\n')
      log.flush()
      started[0] = log.tell()
      try:
        code = sweeps.call(cmd, cores, children=children, cwd=ROOT, stdout=log,
                           stderr=subprocess.STDOUT)
      except sweeps.Stopped:
        return f'{label} (not started: the sweep was stopped)'
      return f'{label} (exit {code})' if code else ''
    if training:
      members = sweeps.Group(group.name, tuple(training))
      failure = call('train', sweeps.group_train_command(sweep, members, root, extra_train))
      for point in training:  # A member that failed is named; the others go on.
        if not sweeps.trained(os.path.join(root, point.name), point.fields.get('train.steps')):
          failures[point.name] = failure or 'train (stopped before its last step)'
          output[point.name] = started[0]
        mark_trained(trained, point.name, point.name not in failures)
    for point in group.points:
      if point.name in failures:
        continue
      for label, cmd in sweeps.stages(sweep, point, os.path.join(root, point.name), extra_train):
        failures[point.name] = call(label, cmd)
        output[point.name] = started[0]
        if failures[point.name]:
          break
      else:
        failures.pop(point.name, None)
  elapsed = time.perf_counter() - start
  with progress.lock:
    progress.running.discard(group.name)
    for point in group.points:
      if point.name not in failures:
        progress.done += 1
      elif not stopped():  # A stopped point is not a failed one: it resumes.
        progress.failed.append(point.name)
    progress.ended(group.name, elapsed)
  if stopped():
    return not failures
  for point in group.points:
    if point.name in failures:
      why = failure_message(log_path, os.path.join(root, point.name), output.get(point.name, 0))
      progress.say(f'[sweep] FAILED {point.name} at {failures[point.name]}: {why} '
                   f'(log: {log_path})')
  if len(failures) < len(group.points):
    progress.say(f'[sweep] finished {group.name} in {logs.duration(elapsed)}')
  return not failures


def prepare_rows(sweep, groups, root: str, extra_train, workers: int, progress) -> None:
  """Builds the synthetic rows that the points still to run will read, each stream once, on
  `workers` processes, into ROFORMER_ROW_CACHE (roformer/data/row_cache.py): points that
  differ in their scheme alone read the same rows, and a run's batches become slices of them
  instead of rows built in its own thread. A point whose config does not load is left to its
  own run to report."""
  streams = []
  for group in groups:
    for point in group.points:
      if sweeps.done(sweep, point, os.path.join(root, point.name)):
        continue
      try:
        streams += row_cache.streams(sweep_plan.point_config(sweep, point), sweep.eval_splits)
      except Exception:  # pylint: disable=broad-except  # Its train.py says why, by name.
        continue
  directory = os.environ[row_cache.ENV]
  start = time.perf_counter()
  try:
    streams = row_cache.missing(streams, directory)
    if not streams:  # None to build: no directory is made.
      return
    os.makedirs(directory, exist_ok=True)
    size, free = (sum(row_cache.entry_bytes(*s) for s in streams),
                  shutil.disk_usage(directory).free)
    if size > free // 2:  # Room is left for the runs' checkpoints and logs.
      progress.say(f'[sweep] the synthetic rows were not built beforehand: they would take '
                   f'{size / 2**30:.1f} GiB of the {free / 2**30:.1f} GiB free under '
                   f'{directory}; each run builds its own.')
      return
    built = row_cache.build(streams, directory, workers)
  except Exception as e:  # pylint: disable=broad-except  # The runs build their own rows.
    progress.say(f'[sweep] the synthetic rows were not built beforehand ({type(e).__name__}: '
                 f'{e}); each run builds its own.')
    return
  if built:
    progress.rows_seconds = time.perf_counter() - start
    progress.say(f'[sweep] {built:,} synthetic rows built in '
                 f'{logs.duration(progress.rows_seconds)} on {workers} processes '
                 f'({directory}), read by every run')


def record_sweep(root: str, spec: str, sweep) -> None:
  """WORKDIR/sweep.json: the sweep's points (each one's own overrides and label) for
  scripts/report.py. Sweeps pointed at one workdir share their points' runs (frontier.py's
  `:budget` beside frontier.py), so the points of earlier sweeps there are kept."""
  path = os.path.join(root, 'sweep.json')
  earlier = files.read_json(path) if os.path.exists(path) else {}
  files.write_json_atomic(path, {
      'config': sweep.config, 'sweep': spec, 'overrides': sweep.overrides, 'evals': sweep.evals,
      'points': {**earlier.get('points', {}), **{p.name: p.overrides for p in sweep.points}},
      'labels': {**earlier.get('labels', {}),
                 **{p.name: p.label for p in sweep.points if p.label}}}, default=str)


def record_time(root: str, args, sweep, parallel: int, pinned, progress: Progress,
                made_with: dict, started: str, seconds: float, ended: str) -> None:
  """Appends to WORKDIR/timings.jsonl one line for this run of the sweep: what ran it (the
  commit, the host, its cores), how (processes, pinned or not, rows built beforehand), how many
  points it trained and how long it took, in all and group by group. A sweep resumed or
  extended later adds a line of its own; scripts/keep_records.py keeps them beside the points'
  records and scripts/docs_from_records.py renders them (scripts/sweep_times.py)."""
  files.append_record(os.path.join(root, sweep_times.TIMES), {
      'made_with': made_with, 'started': started, 'ended': ended,
      'sweep': sweep_times.relative(args.sweep, ROOT),
      'config': sweep_times.relative(sweep.config, ROOT),
      'points': len(sweep.points), 'ran_here': len(progress.ran), 'ran': progress.ran,
      'failed': sorted(progress.failed),
      'processes': parallel, 'pinned': bool(pinned), 'row_cache': not args.no_row_cache,
      'rows_s': progress.rows_seconds, 'wall_s': seconds,
      'groups_s': {name: round(s, 3) for name, s in sorted(progress.seconds.items())}})


def failure_message(log_path: str, workdir: str, start: int = 0, limit: int = 400) -> str:
  """Why the run in `workdir` failed, from its group's log: the output of the stage that
  failed (from byte `start` to the next command the group ran), the line that names it
  ('WORKDIR: why', each failed member of a group has one), else the `error:` line of a run
  alone, else the output's last line; its start, at most `limit` characters."""
  with open(log_path, 'rb') as f:
    f.seek(start)
    text = f.read().decode('utf-8', errors='replace')
  lines, ran = [], False
  for line in text.splitlines():
    if line.startswith('$ '):  # The next stage's command: its output is another's.
      if ran:
        break
      ran = True  # Its own command (`start` at the log's start).
    elif line.strip():
      ran = True
      lines.append(line.strip())
  named = re.compile(r'(?:\d\d:\d\d:\d\d )?' + re.escape(workdir) + r': (.*)')
  found = ([m.group(1) for line in lines if (m := named.fullmatch(line))]
           or [line.removeprefix('error: ') for line in lines if line.startswith('error: ')]
           or lines[-1:] or [''])
  why = found[-1]
  return why if len(why) <= limit else why[:limit - 3] + '...'


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--config', default='', help="train.py's --config (the sweep file may "
                      'name one).')
  parser.add_argument('--sweep', required=True, type=cli.path_arg,
                      help='Sweep file, optionally FILE:ARG.')
  parser.add_argument('--workdir', required=True, type=cli.path_arg,
                      help='Directory holding one workdir per point.')
  parser.add_argument('--parallel', type=int, default=0,
                      help='Training processes at the same time; 0: one per CPU core, or on an '
                      'accelerator 1 unless it is a GPU and every step is too small to keep '
                      'it busy.')
  parser.add_argument('--no_pin', action='store_true',
                      help='Leave the training processes on every core, instead of pinning '
                      'each of the --parallel processes to its own cores (CPU runs only).')
  parser.add_argument('--no_group_seeds', action='store_true',
                      help='Train each point in its own process, instead of the points that '
                      'differ only in their seed in one (train.py --seeds).')
  parser.add_argument('--no_row_cache', action='store_true',
                      help='Let each run build its synthetic rows itself, instead of building '
                      'every stream once beforehand into WORKDIR/.rows.')
  parser.add_argument('--dry_run', action='store_true',
                      help='Print one command per group of points instead of running them.')
  parser.add_argument('--extra_train_flags', default='',
                      help="Extra train.py flags for every point, e.g. '--distributed'.")
  args = parser.parse_args(argv)
  try:
    sweep = sweeps.load(args.sweep, args.config)
    if args.parallel < 0:
      raise errors.ConfigError(f'--parallel={args.parallel} must be >= 1 (or 0: automatic).')
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
  try:
    extra = shlex.split(args.extra_train_flags)
  except ValueError as e:  # An unclosed quote.
    print(f'error: --extra_train_flags={args.extra_train_flags}: {e}. Fix: close the quote.',
          file=sys.stderr)
    return 2
  sweep = sweep_plan.with_extra_steps(sweep, extra)
  groups = ([sweeps.Group(p.name, (p,)) for p in sweep.points]
            if args.no_group_seeds or not sweep.group_seeds else
            sweeps.seed_groups(sweep, sweep.points))
  try:
    sweep_plan.check_points(args.sweep, sweep, root, extra)
  except errors.ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  if args.dry_run:
    for group in groups:
      commands = [sweeps.group_train_command(sweep, group, root, extra)] + [
          sweeps.eval_command(sweep, point, os.path.join(root, point.name), name)
          for point in group.points for name, ev in sweep.evals.items()
          if sweeps.applies(ev, point) and not (name == '' and sweeps.folds_plain_eval(
              sweep, point))]
      print(' && '.join(shlex.join(['python'] + c[1:]) for c in commands))
    return 0
  # Runs of one shape compile the same programs: the children share JAX's persistent
  # compilation cache (keyed by the program and the compiler's options: another shape or
  # option is another entry), small programs included, and the rows they read.
  shared = {'JAX_COMPILATION_CACHE_DIR': os.path.join(root, '.jax_cache'),
            'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'}
  if not args.no_row_cache:
    shared[row_cache.ENV] = os.path.join(root, '.rows')
  with child_environment(shared, unset=[row_cache.ENV] if args.no_row_cache else []):
    return run_sweep(args, sweep, groups, root, extra)


@contextlib.contextmanager
def child_environment(defaults: dict, unset=()):
  """os.environ (which the children inherit) with `defaults` set where not set already and
  `unset` removed, as it was again on leaving: a sweep run in-process leaves its caller's
  environment alone."""
  before = dict(os.environ)
  for key in unset:
    os.environ.pop(key, None)
  for key, value in defaults.items():
    os.environ.setdefault(key, value)
  try:
    yield
  finally:
    os.environ.clear()
    os.environ.update(before)


def run_sweep(args, sweep, groups, root: str, extra) -> int:
  """Trains and evaluates `groups` (main's, after its checks)."""
  started, start = time.strftime('%Y-%m-%dT%H:%M:%S%z'), time.perf_counter()
  made_with = provenance.measurement(packages=provenance.PACKAGES)  # What the children run.
  # No more processes than groups: fewer processes each get more cores when pinned.
  parallel = max(1, min(args.parallel or sweep_plan.default_parallel(sweep, groups), len(groups)))
  work = sweep_plan.group_work(sweep, groups)
  groups = sweep_plan.longest_first(groups, work)
  os.makedirs(root, exist_ok=True)
  sweep_plan.share_accelerator(parallel)
  record_sweep(root, args.sweep, sweep)
  progress = Progress(len(sweep.points), parallel, work)
  # Each running group takes a set of cores of its own (none to take on an accelerator, with
  # --no_pin, or where the cores cannot be split among the processes).
  pinned = None if args.no_pin or sweep_plan.on_accelerator() else sweeps.core_sets(
      parallel, sweeps.usable_cpus())
  print(f'[sweep] {len(sweep.points)} points of {args.sweep} on {sweep.config} in {root} '
        f'({len(groups)} training processes, {parallel} at a time'
        f'{", each on its own cores" if pinned else ""})', flush=True)  # Progress lines follow.
  children = sweeps.Children()
  pool = concurrent.futures.ThreadPoolExecutor(parallel)

  def timed(ended: str) -> None:
    """Keeps this run's time once, where anything ran (a sweep found finished adds no line);
    a record that cannot be written is a warning, never the sweep's outcome."""
    if timed.kept or not (progress.seconds or progress.rows_seconds is not None):
      return
    timed.kept = True
    try:
      record_time(root, args, sweep, parallel, pinned, progress, made_with, started,
                  time.perf_counter() - start, ended)
    except OSError as e:
      print(f'[sweep] warning: its time was not kept in {os.path.join(root, sweep_times.TIMES)}'
            f' ({e}); the runs and their records are not affected.', flush=True)
  timed.kept = False
  sigterm = _FirstSigterm()
  # One handler throughout, restored only after the last wait: a SIGTERM repeated at any
  # moment of the stop (a scheduler's, a job's kill of every process) is ignored.
  with reliability.signal_handled(signal.SIGTERM, sigterm):
    try:
      try:
        results = _run_groups(args, sweep, groups, root, extra, parallel, pinned, progress,
                              children, pool)
      except (KeyboardInterrupt, Interrupted) as e:
        # Ctrl-C reaches the runs too (a terminal signals its whole foreground group); the
        # driver stops them in any case (a scheduler may signal the driver alone) and waits
        # for their checkpoints.
        sigterm.seen = True
        running = sorted(progress.running)
        children.stop()
        pool.shutdown(wait=False, cancel_futures=True)
        name, status = ('SIGTERM', 143) if isinstance(e, Interrupted) else ('Ctrl-C', 130)
        print(f'[sweep] {name}: stopping' + (
            f' {", ".join(running)}; each run saves a checkpoint first.' if running else '.'),
              flush=True)
        pool.shutdown(wait=True)
        timed('stopped by ' + name)
        done = sum(sweeps.done(sweep, p, os.path.join(root, p.name)) for p in sweep.points)
        print(f'[sweep] stopped by {name}: {done}/{len(sweep.points)} points finished. Rerun '
              'the same command to go on: finished points are skipped, stopped runs resume '
              'from their checkpoints.', flush=True)
        return status
    except BaseException as e:  # A second Ctrl-C while stopping, or the driver's own error.
      sigterm.seen = True
      children.stop()
      pool.shutdown(wait=False, cancel_futures=True)
      if not isinstance(e, KeyboardInterrupt):
        print(f'[sweep] stopping the runs after the error below ({type(e).__name__}); each '
              'saves a checkpoint first.', flush=True)
      pool.shutdown(wait=True)
      timed('stopped by a second Ctrl-C' if isinstance(e, KeyboardInterrupt) else
            f'stopped by the error {type(e).__name__}')
      raise
    finally:
      pool.shutdown(wait=True)
  timed('failed' if progress.failed else 'finished')
  if progress.skipped:  # Their groups end without a progress line of their own.
    print(progress.line())
    print(f'[sweep] {progress.skipped} point{"s were" if progress.skipped > 1 else " was"} '
          'already finished.')
  if progress.failed:
    print(f'[sweep] failed: {", ".join(progress.failed)} (see {root}/logs); rerun the same '
          'command to retry them.', flush=True)
  print(f'[sweep] report: python scripts/report.py {args.workdir}')
  return 0 if all(results) else 1


class Interrupted(BaseException):
  """SIGTERM to the sweep driver, raised in its main thread as Ctrl-C raises
  KeyboardInterrupt (not an Exception: no `except Exception` on the way may swallow it)."""


class _FirstSigterm:
  """A SIGTERM handler that raises Interrupted the first time and ignores the signal once
  `seen` (a stop is under way)."""

  def __init__(self):
    self.seen = False

  def __call__(self, signum, frame):
    del signum, frame
    if not self.seen:
      self.seen = True
      raise Interrupted()


def _run_groups(args, sweep, groups, root: str, extra, parallel: int, pinned, progress,
                children: sweeps.Children, pool) -> list[bool]:
  """run_sweep's rows, then its groups on `pool`, each group's processes among `children`;
  each group's result."""
  if not args.no_row_cache:
    prepare_rows(sweep, groups, root, extra, len(sweeps.usable_cpus()), progress)
  # A point's event is set once its training has ended: the points that start from it train
  # while its own evaluations run.
  trained = {p.name: threading.Event() for p in sweep.points}
  slots = queue.Queue()
  for cores in pinned or [None] * parallel:
    slots.put(cores)

  def run(group):
    ok = False
    for point in group.points:  # Its cores are taken once the points it starts from trained.
      for need in point.needs:
        trained[need].wait()
    cores = slots.get()
    try:
      ok = run_group(sweep, group, root, progress, extra, trained, cores, children)
    finally:
      slots.put(cores)
      for point in group.points:  # Whatever ended the group (an exception included).
        mark_trained(trained, point.name, ok or sweeps.trained(
            os.path.join(root, point.name), point.fields.get('train.steps')))
    return ok
  # Points that start from another point train after it (a pool thread waits for it), and the
  # pool takes them in order, so such points come after the ones they need (and a stop, which
  # cancels the groups not started, never leaves a started one waiting for a cancelled one).
  futures = [pool.submit(run, group) for group in groups]
  # The driver's own error in one group (a failed run is not one) stops the sweep as it comes.
  concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
  for future in futures:
    if future.done() and future.exception() is not None:
      raise future.exception()
  return [future.result() for future in futures]


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
