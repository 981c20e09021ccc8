"""What every entry point shares, written once: a problem with the command line, the config
file or the workdir ends with one line `error: ...` naming it and the fix (exit status 2 for the
command line, 1 for the rest) and no traceback; `--debug` shows the traceback instead.

Every entry point builds a `cli.ArgumentParser` (argparse with these errors and `--debug`):
- `train.py`, `eval.py` and the scripts that load a config or a workdir call
  `cli.run(main, parser)`; with `config_overrides=True` the `--config.a.b=VALUE` overrides are
  taken out of the command line before argparse reads the rest, and `cli.overrides()` returns
  them for roformer/config_args.py to apply. `cli.run` first lets the process keep the host
  memory each train step frees for the next (roformer/host_memory.py), before JAX starts.
- the other scripts run `cli.guard(main)`.
- path arguments (`path_arg`) refuse an empty or blank value, which would otherwise mean the
  current directory.

What counts as the user's problem: ConfigError (and its DamagedFileError, StorageError), a
UsageError, and an OSError or a storage failure reported by a library (a full disk while writing
results). Anything else is a bug, and its traceback stays. Ctrl-C that reaches an entry point (a
training run turns the first into a checkpoint and a clean stop) ends it with one line and exit
status 130, as shells report a process that SIGINT ended.
"""

import argparse
import difflib
import functools
import os
import re
import sys
import threading
from typing import Any, Callable, NoReturn, Sequence

from absl import logging as absl_logging

from roformer import errors
from roformer import host_memory
from roformer import killpoints
from roformer import reliability

USAGE, FAILURE = 2, 1  # Exit statuses: a bad command line; anything else the user can fix.
INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT.


class UsageError(Exception):
  """A command line that does not make sense (flags that go together, a bad list): exit 2."""


# `--config.a.b=V`, `--config.a.b V`, `--config.a.b` (a bool: true), `--noconfig.a.b` (false).
_OVERRIDE = re.compile(r'^--?(no)?config\.([^=]+)(=(.*))?$', re.S)

Override = tuple[str, str | None]  # (dotted field, text; None for a bare boolean flag)
_OVERRIDES: list[Override] = []  # Those of the command line `run` parsed (`overrides`).


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[Override]]:
  """(the other arguments, the config overrides in order) of a command line. A bare
  `--config.a.b` takes the next argument as its value unless that is another flag.
  roformer/config_args.py turns the overrides into values."""
  rest, overrides, i = [], [], 0
  while i < len(argv):
    arg = argv[i]
    match = _OVERRIDE.match(arg) if i else None  # argv[0] is the program.
    if arg == '--':
      rest += argv[i:]
      break
    if not match:
      rest.append(arg)
    elif match.group(1):
      overrides.append((match.group(2), 'false'))
    elif match.group(3) is not None:
      overrides.append((match.group(2), match.group(4)))
    elif i + 1 < len(argv) and not argv[i + 1].startswith('--'):
      overrides.append((match.group(2), argv[i + 1]))
      i += 1
    else:
      overrides.append((match.group(2), None))
    i += 1
  return rest, overrides


def fail(message: str, status: int = FAILURE) -> NoReturn:
  """Prints `error: message` to stderr and exits with `status`."""
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.exit(status)


def debug_requested(argv=None) -> bool:
  """Whether the command line asks for tracebacks (read from argv: it may fail to parse)."""
  argv = sys.argv[1:] if argv is None else argv
  return '--debug' in argv


def message(exc: BaseException) -> str | None:
  """The one-line message of a problem the user can fix, or None for anything else."""
  if isinstance(exc, errors.ConfigError):
    return str(exc)
  storage = errors.storage_problem(exc)
  if storage:
    return f'{storage}. Fix: {errors.storage_fix(storage)}, then rerun the same command.'
  if isinstance(exc, OSError) and type(exc).__module__.split('.')[0] in ('requests', 'urllib3'):
    what = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    status = getattr(getattr(exc, 'response', None), 'status_code', None)
    if status is not None:  # The server answered: the address, not the network.
      return (f'a download failed with HTTP status {status} ({what}). Fix: the server refused '
              'or lacks the file; check its address (a newer version of the library may '
              'know the new one), then rerun the same command.')
    return (f'a download failed ({what}). Fix: check the network (or the proxy), then rerun the '
            'same command.')
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
    raise UsageError(f'--{name}={",".join(values)}: give integers, e.g. --{name}=0,1,2.'
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
    except UsageError as e:
      if debug_requested():
        raise
      fail(_with_fix(e, f'{_prog()} --help lists the flags.'), USAGE)
    except KeyboardInterrupt:
      if debug_requested():
        raise
      fail(_interrupted(), INTERRUPTED)
    except Exception as e:  # pylint: disable=broad-except  # Bugs are re-raised below.
      text = message(e)
      if text is None or debug_requested():
        raise
      fail(text)
  return guarded


def _interrupted() -> str:
  return (f'{_prog()} interrupted (Ctrl-C). What it had finished writing is kept; rerun the '
          'same command to go on.')


def interruptible(work: Callable[[], Any]) -> Any:
  """work() in a thread of its own, waited for in this one, so that Ctrl-C ends the process at
  once: Python handles a signal only between its own instructions, so during one long XLA
  program (a whole decoding in a lax.while_loop) Ctrl-C would wait for it to end. For work
  that writes nothing: the process ends where it is, with guard's line and status 130."""
  outcome = {}

  def target():
    try:
      outcome['value'] = work()
    except BaseException as e:  # pylint: disable=broad-except  # Raised in the caller's thread.
      outcome['error'] = e

  thread = threading.Thread(target=target, name='interruptible', daemon=True)
  thread.start()
  try:
    while thread.is_alive():
      thread.join(0.1)
  except KeyboardInterrupt:
    if debug_requested():
      raise
    print(f'error: {_interrupted()}', file=sys.stderr, flush=True)
    os._exit(INTERRUPTED)  # The thread is inside XLA: nothing can stop it but the exit.
  if 'error' in outcome:
    raise outcome['error']
  return outcome['value']


def run(main: Callable, parser: 'ArgumentParser', *, config_overrides: bool = False,
        argv=None) -> None:
  """main(args) with `parser`'s arguments and this project's errors, then exit with its status;
  see the module docstring."""
  host_memory.reuse_freed_memory()  # Before JAX's CPU client starts its threads.
  reliability.exit_with_parent()  # Only in a process a sweep driver started.
  absl_logging.use_absl_handler()  # Libraries' (absl, orbax) lines through one handler.
  argv = list(sys.argv if argv is None else argv)
  if config_overrides:
    argv, found = split_argv(argv)
    _OVERRIDES[:] = found
  sys.exit(guard(lambda: main(parser.parse_args(argv[1:])))() or 0)


def overrides() -> list[Override]:
  """The `--config.*` overrides of the command line that `run` parsed, in order."""
  return list(_OVERRIDES)


def comma_list(text: str) -> list[str]:
  """argparse `type=` for a comma-separated list (`--splits=validation,test`)."""
  return [part.strip() for part in text.split(',') if part.strip()]


def positive(kind: type = int) -> Callable[[str], Any]:
  """argparse `type=` for a number of `kind` (int or float) above 0."""
  def parse(text: str):
    try:
      value = kind(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f'{text!r} is not a number') from None
    if not value > 0:
      raise argparse.ArgumentTypeError(
          f"{text!r} is not a positive {'integer' if kind is int else 'number'}")
    return value
  return parse


positive_int = positive(int)


def step_arg(text: str) -> int | str:
  """argparse `type=` for a checkpoint step: a number, or 'best' (the checkpoint kept in
  workdir/best/ by the task's best metric)."""
  if text.strip() == 'best':
    return 'best'
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"{text!r} is neither a step number nor 'best'") from None
  if value < 0:
    raise argparse.ArgumentTypeError(f'{text!r} is not a step (steps count from 0)')
  return value


def path_arg(text: str) -> str:
  """argparse `type=` for a path: refuses an empty or blank one."""
  if not text.strip():
    raise argparse.ArgumentTypeError('is empty (an empty path would mean the current '
                                     'directory); give a path')
  return text


def first_sentence(doc: str) -> str:
  """The first sentence of a docstring's first paragraph, on one line: a script's --help
  description, which its first line alone cuts where the sentence wraps."""
  first = ' '.join((doc or '').split('\n\n')[0].split())
  match = re.match(r'(.+?\.)(\s|$)', first)
  return match.group(1) if match else first


class ArgumentParser(argparse.ArgumentParser):
  """argparse with this project's errors: one `error: ...` line (exit status 2) naming the
  argument and the fix, and a --debug flag (see `guard`)."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault('formatter_class', argparse.RawDescriptionHelpFormatter)
    kwargs.setdefault('allow_abbrev', False)  # --seed is not a prefix of --seeds.
    super().__init__(*args, **kwargs)
    self.add_argument('--debug', action='store_true',
                      help='Show the Python traceback of an error instead of its summary.')

  def error(self, message):  # pylint: disable=redefined-outer-name
    fix = f'{self.prog} --help lists the arguments.'
    extra = message.split('unrecognized arguments: ', 1)[1:]
    if extra and any(os.path.exists(arg) for arg in extra[0].split()):
      fix = ("quote a glob so that it reaches the flag whole (--config.data.files='DIR/*.txt'): "
             'unquoted, the shell expands it into one argument per file.')
    elif extra:
      flags = [o for action in self._actions for o in action.option_strings]
      meant = {arg.split('=')[0]: difflib.get_close_matches(arg.split('=')[0], flags, n=1)
               for arg in extra[0].split() if arg.startswith('-')}
      meant = {given: close[0] for given, close in meant.items() if close}
      if meant:
        fix = ('; '.join(f'{given}: did you mean {close}?' for given, close in meant.items())
               + f' ({fix})')
    fail(_with_fix(message, fix), USAGE)
