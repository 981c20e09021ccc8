"""Where a kept record came from: the commit of the checkout that made it, and for a training
run, an evaluation and a measurement (scripts/benchmark.py and the others) the software,
devices and host they ran on.

A result is only as traceable as what made it: the same config gives other numbers under
another commit, another JAX, another device, or XLA flags set in the shell (which no config
holds: `XLA_FLAGS=--xla_cpu_prefer_vector_width=512` changes results past their last bits,
docs/performance.md). So train.py adds a line to its workdir's ENVIRONMENT_FILE at every start
that trains, the first and each resume, and scripts/keep_records.py keeps it beside the run's
metrics. An evaluation may run later, elsewhere, at another commit: its results
(eval_results*.json) hold the same record under `environments`, one per evaluation that scored
a row of them (eval.py merges the splits and lengths of evaluations with the same settings:
`evaluations_merged`). A measurement script keeps it as `made_with` (`measurement`). On several
processes the first writes them: the devices are all of them, the host and variables its
own.

Imports nothing heavy (no JAX) at import time, and `measurement(packages)` none at all, so
that the PyTorch side of scripts/compare_torch.py, which shares the host with the JAX worker
being timed, can stamp its records too.
"""

import functools
import importlib.metadata
import os
import pathlib
import platform
import subprocess
import time

from roformer import files

ROOT = pathlib.Path(__file__).resolve().parents[1]
# One JSON line per start of a training run in its workdir (`environment`).
ENVIRONMENT_FILE = 'environment.jsonl'
# The packages whose versions decide a run's numbers (grain the order of its data,
# sentencepiece its tokenizer's ids).
PACKAGES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'grain', 'sentencepiece',
            'numpy')
# Environment variables that change what a run computes or where, recorded where set.
VARIABLES = ('XLA_FLAGS', 'JAX_PLATFORMS', 'JAX_ENABLE_X64', 'JAX_DEFAULT_MATMUL_PRECISION',
             'LIBTPU_INIT_ARGS', 'CUDA_VISIBLE_DEVICES', 'OMP_NUM_THREADS')


def commit() -> str:
  """The short commit of this checkout, `+changes` where its tracked files outside docs/ differ
  from it ('' out of a git checkout)."""
  def git(*args):
    return subprocess.run(['git', '-C', str(ROOT), *args], capture_output=True, text=True,
                          check=False, timeout=30)
  try:
    head = git('rev-parse', '--short', 'HEAD')
    if head.returncode:
      return ''
    dirty = git('status', '--porcelain', '--untracked-files=no', '--', '.',
                ':!docs').stdout.strip()
  except (OSError, subprocess.SubprocessError):  # No git on this machine, or it hangs.
    return ''
  return head.stdout.strip() + ('+changes' if dirty else '')


def _cpu_model() -> str:
  """The CPU's model name as /proc/cpuinfo gives it (Linux), else platform's word for it."""
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def _software_and_host(packages, environ=None) -> dict:
  """The checkout, Python, the versions of `packages` installed, the host and the recorded
  variables of `environ` (this process's by default): what any process can say of itself, or
  of a child it starts with `environ`, without JAX."""
  environ = os.environ if environ is None else environ
  versions = {}
  for name in packages:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  return {
      'commit': commit(),
      'python': platform.python_version(),
      'packages': versions,
      'host': {'cpu': _cpu_model(), 'cores': os.cpu_count(),
               'cores_used': (len(os.sched_getaffinity(0))
                              if hasattr(os, 'sched_getaffinity') else os.cpu_count()),
               'system': platform.system()},
      'variables': _variables(environ),
  }


def _variables(environ) -> dict:
  """The variables of `environ` that change what a run computes or where (VARIABLES)."""
  return {name: environ[name] for name in VARIABLES if name in environ}


@functools.lru_cache(maxsize=None)
def _process() -> dict:
  """What does not change while this process runs: software, devices and host."""
  import jax  # pylint: disable=import-outside-toplevel  # Its callers have imported it already.
  devices = jax.devices()
  return {**_software_and_host(PACKAGES), 'backend': jax.default_backend(),
          'devices': f'{len(devices)} x {devices[0].device_kind}',
          'processes': jax.process_count()}


def measurement(packages=None, environ=None) -> dict:
  """What a benchmark's record says made it (its `made_with`): the date, then `_process`'s
  record; with `packages`, those packages' versions and no devices, for a process that runs
  no JAX (the PyTorch side of a comparison, a parent that measures a child), and with
  `environ` too, the recorded variables of that environment (a child's that the caller starts
  with it), not this process's."""
  if packages is None:
    if environ is not None:
      raise ValueError("measurement(environ=...) records a child's variables; name the "
                       'packages it runs as well.')
    return {'date': time.strftime('%Y-%m-%d'), **_process()}
  return {'date': time.strftime('%Y-%m-%d'), **_software_and_host(packages, environ)}


def environment(step: int) -> dict:
  """The line a training run's start at `step` (0 for a fresh run) adds to its
  ENVIRONMENT_FILE: the time, then `_process`'s record."""
  return {'step': step, 'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), **_process()}


def evaluation(splits, lengths=()) -> dict:
  """What an evaluation's results record of it (under `environments`): the time it began
  scoring, the splits and lengths it was asked to score (it writes a row for each, one it
  could not score saying why; a mixture's split names its sources' rows), then `_process`'s
  record."""
  scored = {'splits': list(splits), **({'lengths': list(lengths)} if lengths else {})}
  return {'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), **scored, **_process()}


# An `environments` entry standing for scores written without a (readable) record of what
# made them: by an evaluation before evaluations recorded it, or beside a damaged record.
UNRECORDED = 'unrecorded'


def malformed(entry) -> list[str]:
  """The fields of a provenance record (a training start's, an evaluation's) that hold
  something other than what this module writes there (a mapping; an evaluation's splits a
  list of names, its lengths a list of integers); ['the whole entry'] where the record is not
  a mapping."""
  if not isinstance(entry, dict):
    return ['the whole entry']
  listed = lambda key, kind: isinstance(entry.get(key, []), list) and all(
      isinstance(x, kind) and not isinstance(x, bool) for x in entry.get(key, []))
  return ([key for key in ('packages', 'host', 'variables')
           if not isinstance(entry.get(key, {}), dict)]
          + [key for key, kind in (('splits', str), ('lengths', int)) if not listed(key, kind)])


def _rows(entry: dict) -> set:
  """The (split, length) rows an evaluation's entry names (length None: a classifier's)."""
  return {(split.split('/')[0], length) for split in entry.get('splits') or []
          for length in entry.get('lengths') or [None]}


def evaluations_merged(earlier: dict, now: dict) -> list[dict]:
  """The `environments` of the results `now` merged into the results `earlier` of the same
  checkpoint and settings (eval.py): `earlier`'s entries except those whose every row a later
  evaluation scored again (`now`'s, or a later entry's), then `now`'s, so that each entry left
  scored some row of the file (where two name a row, the later one scored it). Scores of
  `earlier` without a readable record stand as UNRECORDED entries naming their rows: one for
  the splits scored at the same lengths."""
  entries = earlier.get('environments')
  if not isinstance(entries, list) or any(malformed(e) for e in entries):
    entries = _unrecorded(earlier.get('splits') or {})
  now_entries = now.get('environments', [])
  covered = set().union(*(_rows(e) for e in now_entries))
  kept = []
  for entry in reversed(entries):  # Newest first: what a later entry scored, it holds.
    rows = _rows(entry)
    if not rows <= covered:
      kept.append(entry)
    covered |= rows
  return kept[::-1] + now_entries


def _unrecorded(scored: dict) -> list[dict]:
  """UNRECORDED entries for the splits `scored` (results' `splits`): one per set of lengths
  (a classifier's: none), naming the splits scored at exactly those lengths."""
  groups = {}
  for name, split in scored.items():
    rows = split.get('lengths', []) if isinstance(split, dict) else []
    lengths = tuple(sorted({row['length'] for row in rows if isinstance(row, dict)
                            and isinstance(row.get('length'), int)}))
    groups.setdefault(lengths, set()).add(name.split('/')[0])
  return [{UNRECORDED: True, 'splits': sorted(names), **({'lengths': list(lengths)} if lengths
                                                          else {})}
          for lengths, names in sorted(groups.items(), key=lambda g: sorted(g[1]))]


def record_start(workdir: str, step: int) -> None:
  """Appends `environment(step)` to workdir/ENVIRONMENT_FILE as one synced line, as
  metrics.jsonl's records are appended (files.append_record)."""
  files.append_record(os.path.join(workdir, ENVIRONMENT_FILE), environment(step))
