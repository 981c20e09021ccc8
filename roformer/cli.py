"""What every entry point shares, written once: a problem with the command line, the config
file or the workdir ends with one line `error: ...` naming it and the fix (exit status 2 for the
command line, 1 for the rest) and no traceback; `--debug` shows the traceback instead.

- absl entry points (train.py, eval.py, scripts/generate.py, scripts/benchmark.py) call
  `cli.run(main)`; with `config_overrides=True` the `--config.a.b=VALUE` overrides are taken out
  of the command line before absl parses the rest, and `cli.overrides()` returns them for
  roformer/config_args.py to apply.
  `cli.run` first lets the process keep the host memory each train step frees for the next
  (roformer/host_memory.py), before JAX starts.
- argparse scripts build a `cli.ArgumentParser` and run `cli.guard(main)`.
- path flags and arguments (`DEFINE_path`, `path_arg`) refuse an empty or blank value, which
  would otherwise mean the current directory.

What counts as the user's problem: ConfigError (and its DamagedFileError, StorageError), an
absl UsageError, and an OSError or a storage failure reported by a library (a full disk while
writing results). Anything else is a bug, and its traceback stays. Ctrl-C that reaches an entry
point (a training run turns the first into a checkpoint and a clean stop) ends it with one line
and exit status 130, as shells report a process that SIGINT ended.
"""

import argparse
import functools
import os
import sys
from typing import Callable, NoReturn

from absl import app
from absl import flags

from roformer import errors
from roformer import host_memory
from roformer import killpoints
from roformer import reliability

USAGE, FAILURE = 2, 1  # Exit statuses: a bad command line; anything else the user can fix.
INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT.

flags.DEFINE_bool('debug', False, 'Show the Python traceback of an error instead of its '
                  'one-line summary.')
_OVERRIDES: list[tuple[str, str | None]] = []  # See config_args.split_argv.


def fail(message: str, status: int = FAILURE) -> NoReturn:
  """Prints `error: message` to stderr and exits with `status`."""
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.exit(status)


def debug_requested(argv=None) -> bool:
  """Whether the command line asks for tracebacks (read from argv: it may fail to parse)."""
  argv = sys.argv[1:] if argv is None else argv
  return any(a in ('--debug', '-debug', '--debug=true', '--debug=True', '--debug=1')
             for a in argv)


def message(exc: BaseException) -> str | None:
  """The one-line message of a problem the user can fix, or None for anything else."""
  if isinstance(exc, errors.ConfigError):
    return str(exc)
  storage = errors.storage_problem(exc)
  if storage:
    return f'{storage}. Fix: {errors.storage_fix(storage)}, then rerun the same command.'
  if isinstance(exc, OSError):
    where = f': {exc.filename}' if exc.filename else ''
    return (f'{exc.strerror or exc}{where}. Fix: check that path (--debug shows where it was '
            'used).')
  return None


def int_list(name: str, values) -> list[int]:
  """The integers of a list flag (`--seeds=0,1,2`); a UsageError names the flag otherwise."""
  try:
    return [int(v) for v in values]
  except ValueError:
    raise app.UsageError(f'--{name}={",".join(values)}: give integers, e.g. --{name}=0,1,2.'
                         ) from None


def _prog() -> str:
  return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else 'the command'


def _with_fix(text: str, fix: str) -> str:
  text = str(text).rstrip()
  return text if 'Fix:' in text else f'{text.rstrip(".")}. Fix: {fix}'


def guard(main: Callable) -> Callable:
  """`main` whose user-fixable errors end the process with one `error: ...` line."""
  @functools.wraps(main)
  def guarded(*args, **kwargs):
    try:
      killpoints.check()  # The environment's settings, before anything is written.
      return main(*args, **kwargs)
    except app.UsageError as e:
      if debug_requested():
        raise
      fail(_with_fix(e, f'{_prog()} --help lists the flags.'), USAGE)
    except KeyboardInterrupt:
      if debug_requested():
        raise
      fail(f'{_prog()} interrupted (Ctrl-C). What it had finished writing is kept; rerun the '
           'same command to go on.', INTERRUPTED)
    except Exception as e:  # pylint: disable=broad-except  # Bugs are re-raised below.
      text = message(e)
      if text is None or debug_requested():
        raise
      fail(text)
  return guarded


def run(main: Callable, *, config_overrides: bool = False) -> None:
  """absl's app.run(main) with this project's errors; see the module docstring."""
  host_memory.reuse_freed_memory()  # Before JAX's CPU client starts its threads.
  reliability.exit_with_parent()  # Only in a process a sweep driver started.

  def parse(argv):
    rest = list(argv)
    if config_overrides:
      from roformer import config_args  # pylint: disable=g-import-not-at-top  # Heavy: JAX.
      rest, found = config_args.split_argv(argv)
      _OVERRIDES[:] = found
    try:
      return flags.FLAGS(rest)
    except flags.Error as e:
      if debug_requested(argv[1:]):
        raise
      fail(_with_fix(e, f'{_prog()} --help lists the flags.'), USAGE)
  app.run(guard(main), flags_parser=parse)


def overrides() -> list[tuple[str, str | None]]:
  """The `--config.*` overrides of the command line that `run` parsed, in order."""
  return list(_OVERRIDES)


def no_arguments(argv) -> None:
  """Refuses positional arguments (the absl entry points take flags only)."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]} (every setting is a --flag; a '
                         'value with spaces needs quotes).')


def empty_path_message(flag: str) -> str:
  return (f'{flag} is empty. Fix: give a path (an empty one would mean the current '
          'directory).')


def DEFINE_path(name: str, default: str | None, help_text: str, *,  # pylint: disable=invalid-name
                required: bool = False) -> flags.FlagHolder:
  """A string flag holding a path; an empty or blank value is refused when flags are parsed.
  It is declared as the calling module's flag, so that the entry point's --help lists it."""
  caller = sys._getframe(1).f_globals.get('__name__', '')  # pylint: disable=protected-access
  holder = flags.DEFINE_string(name, default, help_text, required=required,
                               module_name=sys.argv[0] if caller == '__main__' else caller)
  flags.register_validator(name, lambda value: value is None or bool(value.strip()),
                           message=empty_path_message(f'--{name}'))
  return holder


def path_arg(text: str) -> str:
  """argparse `type=` for a path: refuses an empty or blank one."""
  if not text.strip():
    raise argparse.ArgumentTypeError('is empty (an empty path would mean the current '
                                     'directory); give a path')
  return text


class ArgumentParser(argparse.ArgumentParser):
  """argparse with this project's errors: one `error: ...` line (exit status 2) naming the
  argument and the fix, and a --debug flag (see `guard`)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.add_argument('--debug', action='store_true',
                      help='Show the Python traceback of an error instead of its summary.')

  def error(self, message):  # pylint: disable=redefined-outer-name
    fail(_with_fix(message, f'{self.prog} --help lists the arguments.'), USAGE)
