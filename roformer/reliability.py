"""What keeps a run safe on a shared machine: one writer per workdir, a clean exit on
preemption signals, and a record of the batch that made the loss non-finite."""

import contextlib
import fcntl
import logging
import os
import signal
import socket
import sys
import threading
import time

import numpy as np

from roformer import errors

log = logging.getLogger(__name__)

LOCK_FILE = '.train.lock'
PARENT_ENV = 'ROFORMER_PARENT_PID'  # Set by a sweep driver for the processes it starts.


def exit_with_parent() -> None:
  """In a process a sweep driver started (PARENT_ENV names the driver), asks the kernel to
  send this process SIGTERM when the driver ends, however it ends (kill -9 included): the run
  then saves a checkpoint and exits as on any SIGTERM, and no run is left training and
  holding its workdir's lock when the sweep is run again. The kernel sends it when the
  driver's thread that started this process ends, so the driver starts and waits for each
  process in one thread (`sweeps.call`). Linux only (prctl PR_SET_PDEATHSIG); elsewhere, or
  if the request fails, nothing changes."""
  parent = os.environ.pop(PARENT_ENV, '')  # Not for this process's own children.
  if not parent.isdigit() or not sys.platform.startswith('linux'):
    return
  import ctypes  # pylint: disable=g-import-not-at-top
  pr_set_pdeathsig = 1
  if ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:
    return
  if os.getppid() != int(parent):  # The driver ended before the request took effect.
    os.kill(os.getpid(), signal.SIGTERM)


class WorkdirLock:
  """An exclusive `flock` on workdir/.train.lock for the life of a training run. A second
  train.py on the same workdir gets a ConfigError naming the holder; the kernel drops the lock
  when the holder exits, however it exits (kill -9 included)."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self.file = None

  def __enter__(self):
    f = open(self.path, 'a+', encoding='utf-8')  # pylint: disable=consider-using-with
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.seek(0)
      holder = f.read().strip() or 'another process'
      f.close()
      raise errors.ConfigError(
          f'--workdir={os.path.dirname(self.path)!r} is in use by {holder}: two runs would '
          'overwrite each other\'s checkpoints. Fix: wait for that run to finish (or stop it), '
          'or use another --workdir.') from None
    f.seek(0)
    f.truncate()
    f.write(f'train.py (pid {os.getpid()} on {socket.gethostname()}, since '
            f'{time.strftime("%Y-%m-%d %H:%M:%S")})\n')
    f.flush()
    self.file = f
    return self

  def __exit__(self, *exc):
    if self.file is not None:
      fcntl.flock(self.file, fcntl.LOCK_UN)
      self.file.close()
      self.file = None


class Preemption:
  """Turns SIGTERM and SIGINT into a request the training loop sees after the current step
  (`requested`), so it can checkpoint and return. A second SIGINT acts at once (it raises
  KeyboardInterrupt: Ctrl-C twice); a SIGTERM after the first signal does not, because one
  stop is often delivered more than once (a scheduler or `kill -- -PGID` signals every process
  of a job, the sweep driver stops its runs with SIGTERM after a Ctrl-C at the terminal reached
  them, and its end signals them again, `exit_with_parent`), and acting on the repeat would
  lose the checkpoint being saved (with no grace period, `grace_s` 0, a repeated SIGTERM acts at
  once: nothing else would bound the wait). If the run has not finished `grace_s` seconds after
  the first signal (a long evaluation or save), the process exits with status 1 before a
  scheduler's kill; a save cut short is never visible as a checkpoint, so the previous one
  stays the latest."""

  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self, grace_s: float, multihost: bool = False):
    self.grace_s = grace_s
    self.requested = None  # The signal's name once one arrived (in this process).
    self.multihost = multihost
    self._agreed = None
    self._previous = {}
    self._timer = None

  @property
  def stop(self) -> str | None:
    """Why to stop now, if so. With several processes, only what `agree` settled: every host
    must take the same step to save (a collective) and leave the loop."""
    return self._agreed if self.multihost else self.requested

  def agree(self) -> None:
    """Multi-host: stop if any process got a signal (a collective; call it on every host at
    the same steps)."""
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    flags = multihost_utils.process_allgather(np.int32(self.requested is not None))
    if np.any(flags) and self._agreed is None:
      self._agreed = self.requested or 'a signal on another host'

  def _waits_out(self, signum) -> bool:
    """Whether `signum`, after the first signal, is the same stop delivered again (waited out,
    not acted on): a SIGTERM, unless a SIGTERM without a grace period came first."""
    return self.requested is not None and signum == signal.SIGTERM and (
        self.grace_s > 0 or self.requested == 'SIGINT')

  def _handle(self, signum, frame):
    del frame
    if self._waits_out(signum):
      log.warning('SIGTERM received after %s: still saving a checkpoint and stopping.',
                  self.requested)
      return
    if self.requested is not None:  # A second SIGINT (or SIGTERM without a grace period).
      signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
      os.kill(os.getpid(), signum)
      return
    self.requested = signal.Signals(signum).name
    log.warning('%s received: saving a checkpoint after this step and stopping (grace period '
                '%.0f s).', self.requested, self.grace_s)
    if self.grace_s > 0:
      self._timer = threading.Timer(self.grace_s, self._expired)
      self._timer.daemon = True
      self._timer.start()

  def _expired(self):
    log.error('The grace period of %.0f s after %s ran out before the checkpoint was saved; '
              'exiting.', self.grace_s, self.requested)
    logging.shutdown()
    os._exit(1)  # pylint: disable=protected-access

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():  # Only there can it be set.
      for sig in self.SIGNALS:
        if signal.getsignal(sig) is signal.SIG_IGN:  # E.g. SIGINT of a background job.
          continue
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc):
    if self._timer is not None:
      self._timer.cancel()
    for sig, handler in self._previous.items():
      # After a stop the process is on its way out: a SIGTERM arriving now (a job's kill of
      # every process, then the driver's end) must not turn a saved exit into -15.
      signal.signal(sig, signal.SIG_IGN if self._waits_out(sig) else handler)


@contextlib.contextmanager
def signal_handled(signum, handler):
  """`signum` handled by `handler` (a function, signal.SIG_IGN, ...) while inside, in the main
  thread, the only one that can set a handler; elsewhere it is left as it is."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(signum, handler)
  try:
    yield
  finally:
    signal.signal(signum, previous)


class Diverged(errors.ConfigError):
  """The loss or gradient norm was not finite (config.train.on_nonfinite='stop')."""


class MembersFailed(errors.ConfigError):
  """Some runs of a group trained together failed (each named); the others finished."""


def save_batch(workdir: str, step: int, batch: dict) -> str:
  """Writes the token ids (and every other feature) of the batch of `step` for inspection."""
  path = os.path.join(workdir, f'nonfinite_step_{step}.npz')
  np.savez_compressed(path, step=step, **{k: np.asarray(v) for k, v in batch.items()})
  return path
