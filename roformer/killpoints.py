"""Named points inside this project's writes where a test has the process killed, to check
that a write cut there loses nothing already complete and leaves nothing that a later run
reads as whole (tests/test_kill_points.py; docs/reliability.md lists what each promises).

Inert unless the environment sets ROFORMER_KILL_AT=POINT[:N[:DELAY]]. Then the N-th time
(default the first) the process reaches POINT it sends itself SIGKILL, which no handler sees
and which flushes nothing: at once, or DELAY seconds later from a thread, so that the kill
lands inside whatever follows the point (an orbax save finishing in its own threads, a
dataset build, the steps after a save). Hand-written rather than a fault-injection library:
the whole mechanism is these few lines, and the points must sit inside this project's own
writes.
"""

import math
import os
import signal
import threading

from roformer import errors

ENV = 'ROFORMER_KILL_AT'

POINTS = {
    'json.partial': 'a JSON file (config.json, eval_results*.json, sweep.json, train_data.json) '
                    'half written to its temporary name',
    'json.written': 'a JSON file written to its temporary name, before the rename',
    'jsonl.partial': 'a metrics.jsonl record half appended',
    'checkpoint.save': 'a checkpoint save begun (with a delay: inside orbax\'s write, '
                       'synchronous or in its background threads, or the steps after it)',
    'tokenizer.train': 'the tokenizer\'s training begun (with a delay: inside SentencePiece)',
    'tokenizer.written': 'the tokenizer written to its temporary name, before the rename',
    'dataset.build': 'an embedded dataset\'s build begun (with a delay: inside TFDS\'s write)',
}


def _parse(value: str) -> tuple[str, int, float] | None:
  """(point, visit, delay) of ROFORMER_KILL_AT's value; a ConfigError naming what is wrong."""
  if not value:
    return None
  name, _, rest = value.partition(':')
  count, _, delay = rest.partition(':')
  try:
    visit, seconds = int(count or 1), float(delay or 0)
  except ValueError:
    visit = seconds = None
  if (name not in POINTS or visit is None or visit < 1 or not math.isfinite(seconds)
      or seconds < 0):
    raise errors.ConfigError(f'{ENV}={value!r} is not POINT[:VISIT[:DELAY]] with POINT one of '
                             f'{sorted(POINTS)}, VISIT >= 1 and DELAY a finite number of seconds '
                             '>= 0. Fix: correct it, or unset it.')
  return name, visit, seconds


_UNREAD = object()
_ARMED = _UNREAD  # ROFORMER_KILL_AT, parsed once: by `check` at start-up, else at first use.
_reached: dict[str, int] = {}


def check() -> None:
  """Parses ROFORMER_KILL_AT now: every entry point calls this before it writes anything, so
  that a malformed value is one error at start-up, not a surprise inside a write."""
  global _ARMED
  _ARMED = _parse(os.environ.get(ENV, ''))


def armed(point: str) -> bool:
  """Whether this process is to be killed at some visit of `point` (writers that cut their
  write in two to be killed in the middle ask this first)."""
  if _ARMED is _UNREAD:
    check()
  return _ARMED is not None and _ARMED[0] == point


def write(f, text: str, point: str) -> None:
  """f.write(text), cut in two at `point` when it is armed: the first half written and
  flushed, the point reached (the process killed there at the armed visit), then the rest."""
  if armed(point):
    f.write(text[:len(text) // 2])
    f.flush()
    reach(point)
    text = text[len(text) // 2:]
  f.write(text)


def reach(point: str) -> None:
  """Marks a visit of `point`; kills the process if this is the armed visit."""
  if not armed(point):
    return
  _reached[point] = _reached.get(point, 0) + 1
  if _reached[point] != _ARMED[1]:
    return
  kill = lambda: os.kill(os.getpid(), signal.SIGKILL)
  if _ARMED[2] <= 0:
    kill()
  else:
    timer = threading.Timer(_ARMED[2], kill)
    timer.daemon = True
    timer.start()
