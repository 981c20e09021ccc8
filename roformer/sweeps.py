"""Config sweeps: a grid of override sets, one workdir per point, run by train.py and eval.py.

A sweep file is plain Python with `get_sweep(arg: str = '') -> dict` (the part after `:` in
`--sweep FILE:ARG` is `arg`), returning:

  points:    list of {dotted config field: value}, one per run (e.g. kinds x seeds);
  overrides: {field: value} applied to every point (optional; a point's own value wins);
  evals:     {name: {'overrides': {...}, 'when': {field: value}}}: evaluations to run after
             training, each written to eval_results.json ('' name: the run as trained, so
             it overrides nothing that makes a variant, saved_config.makes_a_variant) or
             eval_results.NAME.json; `when` limits one to the points whose config has those
             values, `name` and `label` matching the point's own (optional; default one plain
             evaluation);
  eval_splits: splits eval.py evaluates (optional; default validation and test);
  group_seeds: False to train every point in its own process (optional; default True: the points
             that differ only in their seed train in one, `seed_groups`). On the CPU a group's
             members take turns on one core, so a sweep of a few long runs per seed (a base to
             continue from) would leave the other cores waiting.

A point's workdir is named from its own overrides (`kind=rope,seed=0`), or by a `name` key in
the point's dict; a `label` key names its scheme in reports (scripts/report.py: in place of
the position kind and the options its overrides set, e.g. `rnope` for a layout of layers). A value may name another point's workdir as `{sweep}/NAME` (e.g.
`'init_from': '{sweep}/base'` to continue a run): the runner puts the sweep's directory in its
place and runs that point only after NAME has trained (NAME's evaluations run meanwhile); an
evaluation's `when` may also match `name` or `label`. Each stage is skipped when its output exists (train: the final checkpoint; eval: its
results file), and train.py resumes an unfinished run from its checkpoints, so rerunning a sweep
continues where it stopped.
"""

import contextlib
import dataclasses
import difflib
import glob
import importlib.machinery
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import threading

from roformer import errors
from roformer import files
from roformer import killpoints
from roformer import reliability

EVAL_FILE = 'eval_results.json'


SWEEP_DIR = '{sweep}'  # In a value: the sweep's directory (resolved by `resolve`).
_NOT_FIELDS = ('name', 'label')  # A point's keys that are not config fields.


@dataclasses.dataclass(frozen=True)
class Point:
  name: str
  overrides: dict  # The point's own fields (its name unless it has a `name`).
  fields: dict  # Everything passed to train.py: the sweep's overrides, then the point's.
  needs: tuple = ()  # Points that must train first (named in a `{sweep}/NAME` value).
  label: str = ''  # Its scheme's name in reports ('': the position kind and options).


@dataclasses.dataclass(frozen=True)
class Sweep:
  config: str
  points: list
  overrides: dict
  evals: dict  # name -> {'overrides': {...}, 'when': {...}}
  eval_splits: tuple
  group_seeds: bool = True


def load_module(path: str):
  """Imports a Python file by path (config or sweep file)."""
  if not os.path.isfile(path):
    raise errors.ConfigError(f'{path} does not exist. Fix: give a sweep file such as '
                             'configs/sweeps/positions.py (optionally with :ARG).')
  name = 'sweep_' + re.sub(r'\W', '_', os.path.splitext(os.path.basename(path))[0])
  try:
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except  # The file's own error, named.
    raise errors.ConfigError(f'{path} cannot be loaded ({type(e).__name__}: '
                             f'{str(e).splitlines()[0] if str(e) else ""}). Fix: correct the '
                             'file (--debug shows the traceback).') from e
  return module


def format_value(value) -> str:
  """A value as `--config.a.b=VALUE` takes it (strings inside a tuple quoted, as the tuple
  parser needs them: ('a','b'))."""
  if isinstance(value, (list, tuple)):
    items = [repr(v) if isinstance(v, str) else format_value(v) for v in value]
    return '(' + ','.join(items) + (',)' if len(value) == 1 else ')')
  return str(value)


def short_names(keys) -> dict:
  """Last component of each dotted key, or more components where that would be ambiguous."""
  names = {}
  for key in keys:
    parts = key.split('.')
    for n in range(1, len(parts) + 1):
      short = '.'.join(parts[-n:])
      if sum(k.split('.')[-n:] == parts[-n:] for k in keys) == 1:
        break
    names[key] = short
  return names


def point_name(overrides: dict, all_keys) -> str:
  short = short_names(sorted(all_keys))
  cells = [f'{short[k]}={format_value(v)}' for k, v in overrides.items()]
  return re.sub(r'[^\w.=,+-]', '_', ','.join(cells)) or 'default'


def load(spec: str, config: str = '') -> Sweep:
  """Reads `FILE[:ARG]`; `config` (train.py's --config) may also come from the sweep's 'config'."""
  path, _, arg = spec.partition(':')
  module = load_module(path)
  if not hasattr(module, 'get_sweep'):
    raise errors.ConfigError(f'{path} has no get_sweep(arg) function. Fix: define one returning '
                             "{'points': [...], 'overrides': {...}, 'evals': {...}}.")
  try:
    raw = module.get_sweep(arg) if arg else module.get_sweep()
  except Exception as e:  # pylint: disable=broad-except
    raise errors.ConfigError(f'{spec}: get_sweep failed ({type(e).__name__}: {e}). Fix: correct '
                             'the sweep file or its argument.') from e
  return from_dict(raw, spec, config)


_KEYS = ('points', 'overrides', 'evals', 'eval_splits', 'config', 'group_seeds')


def _fields(value, where: str, spec: str) -> dict:
  """A {dotted field: value} dict (None: empty), each key a non-empty string."""
  if value is None:
    return {}
  if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
    raise errors.ConfigError(f'{spec}: {where} is {type(value).__name__} {_short(value)}, not a '
                             '{field: value} dict with field names as strings. Fix: write it '
                             "as {'seed': 1, ...}.")
  return dict(value)


def _short(value) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + '...'


def from_dict(raw, spec: str, config: str = '') -> Sweep:
  """The sweep that get_sweep returned, each key checked for its type: a malformed sweep file is
  one ConfigError naming the key and the fix, before anything runs."""
  if not isinstance(raw, dict):
    raise errors.ConfigError(f'{spec}: get_sweep() returned {type(raw).__name__}, not a dict.')
  unknown = [k for k in raw if k not in _KEYS]
  if unknown:
    raise errors.ConfigError(f'{spec}: get_sweep() returned unknown keys {unknown}; allowed: '
                             f'{", ".join(_KEYS)}.')
  if not isinstance(raw.get('group_seeds', True), bool):
    raise errors.ConfigError(f"{spec}: group_seeds is {raw['group_seeds']!r}. Fix: True or "
                             'False.')
  points = raw.get('points')
  if not isinstance(points, (list, tuple)) or not points:
    raise errors.ConfigError(f'{spec}: points must be a non-empty list of {{field: value}} '
                             'dicts, one per run.')
  for i, p in enumerate(points):
    if not isinstance(p, dict):
      raise errors.ConfigError(f'{spec}: point {i} is {type(p).__name__} {_short(p)}, not a '
                               '{field: value} dict. Fix: one dict per run.')
  points = [_fields(p, f'point {i}', spec) for i, p in enumerate(points)]
  for i, p in enumerate(points):
    for key in _NOT_FIELDS:
      if key in p and not (isinstance(p[key], str) and p[key]):
        raise errors.ConfigError(f'{spec}: point {i} has {key}={p[key]!r}. Fix: a non-empty '
                                 'string.')
  common = _fields(raw.get('overrides'), 'overrides', spec)
  keys = sorted({k for p in points for k in p if k not in _NOT_FIELDS})
  built, seen = [], {}
  for p in points:
    fields = {k: v for k, v in p.items() if k not in _NOT_FIELDS}
    name = p['name'] if 'name' in p else point_name(fields, keys)
    if not re.fullmatch(r'[\w.=,+-]+', name) or name in seen:
      raise errors.ConfigError(f'{spec}: point name {name!r} is repeated or not a plain name '
                               '(two points have the same fields?). Fix: make each point '
                               'differ, e.g. by seed, or give each a distinct `name`.')
    seen[name] = p
    built.append(Point(name, fields, {**common, **fields}, _needs({**common, **fields}),
                       p.get('label', '')))
  for i, point in enumerate(built):
    earlier = {p.name for p in built[:i]}
    unknown = [n for n in point.needs if n not in earlier]
    if unknown:
      raise errors.ConfigError(f'{spec}: point {point.name} refers to {SWEEP_DIR}/{unknown[0]}, '
                               'which is not a point listed before it. Fix: list the points a '
                               'point starts from before it.')
  evals = raw.get('evals')
  if evals is None:
    evals = {'': {}}
  if not isinstance(evals, dict):
    raise errors.ConfigError(f"{spec}: evals is {type(evals).__name__} {_short(evals)}. Fix: a "
                             "dict {name: {'overrides': {...}, 'when': {...}}} ('' for the plain "
                             'evaluation).')
  for name, ev in evals.items():
    if (not isinstance(name, str) or not re.fullmatch(r'[\w.-]*', name)
        or not isinstance(ev, dict) or set(ev) - {'overrides', 'when'}):
      raise errors.ConfigError(f'{spec}: eval {name!r} needs a plain name and a dict with only '
                               "the keys 'overrides' and 'when'.")
    for key in ('overrides', 'when'):
      _fields(ev.get(key), f'eval {name!r} {key}', spec)
    given = sorted(set(keys) | set(common))  # What a `when` can match (`applies`).
    unset = [k for k in (ev.get('when') or {}) if k not in given and k not in _NOT_FIELDS]
    if unset:
      close = difflib.get_close_matches(unset[0], given, n=1)
      raise errors.ConfigError(
          f"{spec}: eval {name!r} has 'when': {{{unset[0]!r}: ...}}, a field that neither the "
          "sweep's overrides nor any point sets, so it would never run: a `when` matches those "
          f'(or a point\'s name or label). Fix: one of {", ".join(given + list(_NOT_FIELDS))}'
          + (f' (did you mean {close[0]!r}?)' if close else '') + '.')
    if name == '' and ev.get('overrides'):
      # Imported here: saved_config imports JAX, which readers of records (keep_records.py) skip.
      from roformer import saved_config  # pylint: disable=import-outside-toplevel
      variant = [k for k in ev['overrides'] if saved_config.makes_a_variant(k)]
    else:
      variant = []
    if variant:
      raise errors.ConfigError(f"{spec}: the plain eval '' overrides {', '.join(variant)}, but "
                               'its file (eval_results.json) holds each run as trained. Fix: '
                               'give that evaluation a name.')
  splits = raw.get('eval_splits') or ('validation', 'test')
  if isinstance(splits, str) or not isinstance(splits, (list, tuple)) or not all(
      isinstance(x, str) and x for x in splits):
    raise errors.ConfigError(f'{spec}: eval_splits is {_short(splits)}. Fix: a list of split '
                             "names, e.g. ['validation'].")
  config = config or raw.get('config', '')
  if not isinstance(config, str):
    raise errors.ConfigError(f'{spec}: config is {_short(config)}. Fix: a config file path.')
  if not config:
    raise errors.ConfigError(f'{spec} names no config. Fix: pass --config configs/lm.py.')
  return Sweep(config, built, common, dict(evals), tuple(splits), raw.get('group_seeds', True))


def _needs(fields: dict) -> tuple:
  """The points whose workdirs the values name as {sweep}/NAME."""
  found = []
  for value in fields.values():
    for match in re.finditer(re.escape(SWEEP_DIR) + r'/([\w.=,+-]+)', str(value)):
      found.append(match.group(1))
  return tuple(dict.fromkeys(found))


def resolve(value, root: str):
  """`value` with {sweep} replaced by the sweep's directory."""
  return value.replace(SWEEP_DIR, root) if isinstance(value, str) else value


def eval_file(name: str) -> str:
  return EVAL_FILE if not name else f'eval_results.{name}.json'


def applies(ev: dict, point: Point) -> bool:
  """Whether an evaluation's `when` matches the point's fields (or its `name` or `label`)."""
  value = lambda k: {'name': point.name, 'label': point.label}.get(k, point.fields.get(k))
  return all(value(k) == v for k, v in (ev.get('when') or {}).items())


def train_command(sweep: Sweep, point: Point, workdir: str, extra=()) -> list[str]:
  """train.py with the point's fields (and its plain evaluation, `folds_plain_eval`), then
  `extra` flags (e.g. --distributed)."""
  root = os.path.dirname(workdir)
  return [sys.executable, 'train.py', f'--config={sweep.config}', f'--workdir={workdir}'] + [
      f'--config.{k}={format_value(resolve(v, root))}' for k, v in point.fields.items()
  ] + _eval_flag(sweep, point) + list(extra)


def eval_command(sweep: Sweep, point: Point, workdir: str, name: str) -> list[str]:
  ev = sweep.evals[name]
  return [sys.executable, 'eval.py', f'--workdir={workdir}',
          f'--splits={",".join(sweep.eval_splits)}', f'--out={eval_file(name)}'] + [
              f'--config.{k}={format_value(v)}' for k, v in (ev.get('overrides') or {}).items()]


def folds_plain_eval(sweep: Sweep, point: Point) -> bool:
  """Whether the point's plain evaluation (name '', no overrides) runs in its training process
  (train.py --eval_splits), where the programs it needs are compiled already."""
  plain = sweep.evals.get('')
  return plain is not None and not plain.get('overrides') and applies(plain, point)


def stages(sweep: Sweep, point: Point, workdir: str,
           extra_train=()) -> list[tuple[str, list[str]]]:
  """(label, command) for each stage of a point still to run. Training also runs the plain
  evaluation when it can (`folds_plain_eval`); it is listed apart only when the run is trained
  already."""
  todo = []
  training = not trained(workdir, point.fields.get('train.steps'))
  if training:
    todo.append(('train', train_command(sweep, point, workdir, extra_train)))
  for name, ev in sweep.evals.items():
    if name == '' and training and folds_plain_eval(sweep, point):
      continue
    if applies(ev, point) and not evaluated(workdir, name, point.fields.get('train.steps')):
      todo.append((f'eval {name or "(plain)"}', eval_command(sweep, point, workdir, name)))
  return todo


SEED_TEMPLATE = '{seed}'  # train.py --seeds: each member's workdir.


@dataclasses.dataclass(frozen=True)
class Group:
  """Points that differ only in their seed, trained by one train.py process (--seeds): `name`
  is their common name with {seed} in place of the seed."""
  name: str
  points: tuple


def seed_groups(sweep: Sweep, points) -> list:
  """`points` (in order) as Groups of the points that differ only in the seed and whose names
  differ only in it (`seed=N`), each at the place of its first member; a point that starts from
  another, or that another starts from, stays alone."""
  needed = {n for p in sweep.points for n in p.needs}
  keyed, order = {}, []
  for point in points:
    seed = point.fields.get('seed')
    cell = f'seed={format_value(seed)}'
    key = None
    if (seed is not None and not point.needs and point.name not in needed
        and point.name.count(cell) == 1):
      rest = tuple(sorted((k, str(v)) for k, v in point.fields.items() if k != 'seed'))
      key = (point.name.replace(cell, f'seed={SEED_TEMPLATE}'), rest)
    if key is None or key not in keyed:
      order.append(key if key is not None else point)
      if key is not None:
        keyed[key] = []
    if key is not None:
      keyed[key].append(point)
  return [Group(item[0] if len(keyed[item]) > 1 else keyed[item][0].name, tuple(keyed[item]))
          if isinstance(item, tuple) else Group(item.name, (item,)) for item in order]


def group_train_command(sweep: Sweep, group: Group, root: str, extra=()) -> list[str]:
  """One train.py for the group's points (train.py --seeds), running their plain evaluation
  too when it can."""
  if len(group.points) == 1:
    point = group.points[0]
    return train_command(sweep, point, os.path.join(root, point.name), extra)
  first = group.points[0]
  seeds = ','.join(format_value(p.fields['seed']) for p in group.points)
  fields = {k: v for k, v in first.fields.items() if k != 'seed'}
  return [sys.executable, 'train.py', f'--config={sweep.config}',
          f'--workdir={os.path.join(root, group.name)}', f'--seeds={seeds}'] + [
              f'--config.{k}={format_value(resolve(v, root))}' for k, v in fields.items()
          ] + _eval_flag(sweep, first) + list(extra)


def _eval_flag(sweep: Sweep, point: Point) -> list[str]:
  return ([f'--eval_splits={",".join(sweep.eval_splits)}'] if folds_plain_eval(sweep, point)
          else [])


def done(sweep: Sweep, point: Point, workdir: str) -> bool:
  """Whether the point is trained and has every evaluation that applies to it."""
  steps = point.fields.get('train.steps')
  return trained(workdir, steps) and all(
      evaluated(workdir, name, steps) for name, ev in sweep.evals.items() if applies(ev, point))


def evaluated(workdir: str, name: str, steps: int | None = None) -> bool:
  """Whether the evaluation `name` exists for the run's last step (an evaluation of a run
  that was stopped early is redone once it has finished)."""
  path = os.path.join(workdir, eval_file(name))
  if not os.path.exists(path):
    return False
  return files.read_json(path).get('step') == final_step(workdir, steps)


def final_step(workdir: str, steps: int | None = None) -> int | None:
  if steps is not None:
    return steps
  if not os.path.exists(os.path.join(workdir, 'config.json')):
    return None
  return files.current_config(workdir).get('train', {}).get('steps')


def trained(workdir: str, steps: int | None = None) -> bool:
  """Whether the run in `workdir` has the checkpoint of its last step (`steps`, by default
  the train.steps it trains under now: files.current_config), or finished and then had its
  checkpoints deleted (`finished_without_checkpoints`)."""
  steps = final_step(workdir, steps)
  if steps is None:
    return False
  return (os.path.isdir(os.path.join(workdir, 'checkpoints', str(steps)))
          or finished_without_checkpoints(workdir, steps))


def finished_without_checkpoints(workdir: str, steps: int | None = None) -> bool:
  """Whether the run in `workdir` holds no checkpoint but an evaluation of its last step: a
  finished run whose checkpoints were deleted to free the disk (an evaluation is written only
  once the last checkpoint is; a run stopped before its first checkpoint has none). Its
  records stand; an evaluation it lacks can no longer be made."""
  steps = final_step(workdir, steps)
  if steps is None or files.checkpoint_steps(os.path.join(workdir, 'checkpoints')):
    return False
  return any(_evaluated_at(path, steps) for path in glob.glob(os.path.join(workdir, 'eval_*.json')))


def _evaluated_at(path: str, step: int) -> bool:
  try:
    return files.read_json(path).get('step') == step
  except (errors.ConfigError, AttributeError):  # Damaged, or not an evaluation's results.
    return False



def usable_cpus() -> list[int]:
  """The CPU cores this process may run on (its affinity where the OS has one)."""
  if hasattr(os, 'sched_getaffinity'):
    return sorted(os.sched_getaffinity(0))
  return list(range(os.cpu_count() or 1))


def core_sets(parallel: int, cpus) -> list[frozenset] | None:
  """The cores that each of `parallel` concurrent CPU runs is pinned to: disjoint sets that
  together cover `cpus`; None where pinning does not apply (a single run keeps every core, and
  more runs than cores share them).

  Why pin: XLA:CPU spreads a step's ops over a thread pool as large as the process's cores, and
  a sweep's steps are tiny (2,048 tokens of a 2-layer model), so N processes with N-thread
  pools on N cores spend much of their time switching threads and waiting for each other's
  slices. Pinned, each process's pool has the size of its own cores (XLA sizes it from the
  affinity): 12 passkey points, two processes at a time on 2 cores, took 249 s instead of
  279-289 s (docs/performance.md)."""
  cpus = sorted(cpus)
  if parallel < 2 or parallel > len(cpus):
    return None
  return [frozenset(cpus[i::parallel]) for i in range(parallel)]


class Stopped(Exception):
  """A child was to start after its driver's `Children.stop`."""


class Children:
  """The child processes that `call` has running for one driver, so that a driver told to stop
  (Ctrl-C, SIGTERM) stops them all and waits for them: after `stop` no child starts (`call`
  raises Stopped) and each running one gets SIGTERM (a training run saves a checkpoint and
  stops; an evaluation ends, to be run again)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._running = set()
    self.stopped = False

  def stop(self) -> None:
    with self._lock:
      self.stopped = True
      for process in self._running:
        with contextlib.suppress(ProcessLookupError):
          process.send_signal(signal.SIGTERM)

  @contextlib.contextmanager
  def popen(self, command: list[str], **popen_args):
    """subprocess.Popen(command, **popen_args), known to `stop` until it is left."""
    with self._lock:  # A stop either sees this child or keeps it from starting.
      if self.stopped:
        raise Stopped(shlex.join(command))
      process = subprocess.Popen(command, **popen_args)  # pylint: disable=consider-using-with
      self._running.add(process)
    try:
      with process:
        yield process
    finally:
      with self._lock:
        self._running.discard(process)


def call(command: list[str], cores=None, children: Children | None = None,
         **popen_args) -> int:
  """subprocess.call(command, **popen_args), the child pinned to `cores` (None: not pinned)
  and one of `children` (None: of none). The affinity is set as soon as the child exists: the
  threads it starts later (XLA's pool, seconds later, after Python has imported JAX) inherit
  it. The child stops (SIGTERM: it saves and exits) when the driver ends, however the driver
  ends (kill -9 included; `reliability.exit_with_parent`), so that a sweep run again does not
  meet its own earlier runs still training. The kernel ties that to the thread that starts the
  child: this one, which also waits for it."""
  env = popen_args.pop('env', None)
  env = dict(os.environ if env is None else env)
  env.pop(killpoints.ENV, None)  # A test's kill point is for the driver, not its children.
  env[reliability.PARENT_ENV] = str(os.getpid())
  with (children or Children()).popen(command, env=env, **popen_args) as process:
    try:
      if cores and hasattr(os, 'sched_setaffinity'):
        try:
          os.sched_setaffinity(process.pid, cores)
        except ProcessLookupError:  # It has already ended: nothing left to pin.
          pass
      return process.wait()
    except BaseException:  # As subprocess.call: an interrupted wait takes the child with it.
      process.kill()
      raise
