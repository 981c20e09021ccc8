"""Orbax checkpointing of the train state together with the data iterator's position."""

import asyncio
import functools
import gc
import logging
import os

import grain
import jax
import orbax.checkpoint as ocp

from roformer import files
from roformer import killpoints
from roformer import sharding


def all_steps(directory: str) -> list[int]:
  """Steps with a finished checkpoint in directory (none if it does not exist)."""
  if not os.path.isdir(directory):
    return []
  manager = ocp.CheckpointManager(os.path.abspath(directory))
  try:
    return sorted(manager.all_steps())
  finally:
    manager.close()


# The steps with a finished checkpoint, from the directory's listing alone (files.py: for a
# process that must not start a JAX backend, which orbax's manager does).
steps_on_disk = files.checkpoint_steps


def latest_step(directory: str) -> int | None:
  steps = all_steps(directory)
  return steps[-1] if steps else None


@functools.cache  # Once per process: the handler is registered globally.
def _write_each_array_once() -> None:
  """In one process, each array is written from one copy. Orbax's default on CPU and TPU,
  replica-parallel writing, splits a replicated array into one slice per device so that hosts
  share the writing; with a single process there is no one to share with, and the slices (one
  small program each, for every array) made each save of a tiny model's state take about 2 s
  on 8 devices. Several processes keep the default."""
  if jax.process_count() == 1:
    absl_logger = logging.getLogger('absl')
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)  # Orbax warns that its default is replaced: intended.
    try:
      ocp.type_handlers.register_type_handler(
          jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False), override=True)
    finally:
      absl_logger.setLevel(level)


# With several processes, the Checkpointer whose save this process started last (see save).
_last_save = None

log = logging.getLogger('roformer')


def _run_and_drain(coro):
  """Orbax's `asyncio_utils._run_sync_via_new_loop` (a fresh event loop, closed after the
  coroutine), except that when the coroutine fails, every task still running on the loop is
  ended first. A restore reads its arrays in concurrent tasks gathered together: the first
  unreadable array fails the gather, and orbax's version then closes the loop under the other
  reads, whose TensorStore callbacks raise 'RuntimeError: Event loop is closed' in a
  background thread, printed after the run's own one-line error (about 1 run in 9 on a damaged
  checkpoint). Here the other reads finish or fail before the error leaves the loop; their
  failures are the same damage, logged at debug level by the loop's own handler, which also
  receives the 'exception was never retrieved' of the futures that gathered them."""
  loop = asyncio.new_event_loop()
  loop.set_exception_handler(
      lambda _, context: log.debug('after a failed read: %s', context.get('message')))
  try:
    asyncio.set_event_loop(loop)
    try:
      return loop.run_until_complete(coro)
    except BaseException:
      pending = asyncio.all_tasks(loop)
      if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
      gc.collect()  # Unretrieved futures of the loop report to its handler, not to the user.
      raise
  finally:
    asyncio.set_event_loop(None)
    loop.close()


@functools.cache
def _drain_failed_reads() -> None:
  """Puts `_run_and_drain` in place of orbax's loop runner (once per process)."""
  from orbax.checkpoint._src import asyncio_utils  # pylint: disable=g-import-not-at-top
  if not hasattr(asyncio_utils, '_run_sync_via_new_loop'):
    raise RuntimeError('orbax.checkpoint._src.asyncio_utils has no _run_sync_via_new_loop: '
                       'this orbax is not the pinned one (requirements.txt).')
  global _orbax_runner
  _orbax_runner = asyncio_utils._run_sync_via_new_loop  # pylint: disable=protected-access
  asyncio_utils._run_sync_via_new_loop = _run_and_drain  # pylint: disable=protected-access


_orbax_runner = None  # Orbax's own, replaced by _drain_failed_reads (kept for the tests).


class Checkpointer:
  """Saves {'state': train state, 'data': grain iterator state} per step; async, max_to_keep."""

  def __init__(self, directory: str, *, max_to_keep: int = 3, async_save: bool = True):
    _write_each_array_once()
    _drain_failed_reads()
    self.directory = os.path.abspath(directory)  # Orbax needs absolute paths.
    self._closed = False
    # Each step's saved tree of array metadata, read once (orbax reads it file by file: 1.6 s
    # for the 723 arrays of an 80-layer Llama) for the shape check and the restore. A step is
    # written once (orbax refuses it again) unless set aside, which reloads: `reload` forgets.
    self._metadata = {}
    self.manager = ocp.CheckpointManager(
        self.directory,
        item_handlers={'state': ocp.StandardCheckpointHandler(),
                       'data': grain.checkpoint.CheckpointHandler()},
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=async_save))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self.manager.all_steps())

  def save(self, step: int, state, data_iterator=None) -> None:
    items = {'state': ocp.args.StandardSave(state)}
    if data_iterator is not None:
      items['data'] = grain.checkpoint.CheckpointSave(data_iterator)
    killpoints.reach('checkpoint.save')
    global _last_save
    if jax.process_count() > 1:
      # With several processes, two managers saving at once (a group's members, a run's best/
      # checkpoint beside its own) run orbax's multi-host barriers side by side, and they
      # collide ('Barrier ... is already ongoing'): one save of this process's at a time. (A
      # failed save of the other one is raised here, naming its directory.)
      if _last_save is not None and _last_save is not self and not _last_save._closed:
        _last_save.wait()
      _last_save = self
    self.manager.save(step, args=ocp.args.Composite(**items), force=True)

  def _saved_tree(self, step: int):
    """The saved state's tree of array metadata at `step`."""
    if step not in self._metadata:
      meta = self.manager.item_metadata(step)['state']
      self._metadata[step] = getattr(meta, 'tree', meta)
    return self._metadata[step]

  def param_shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the saved parameters, keyed by '/'-joined path, read from metadata only."""
    meta = self._saved_tree(step)
    shapes = {}

    def walk(node, prefix):
      if isinstance(node, dict):
        for k, v in node.items():
          walk(v, f'{prefix}/{k}' if prefix else str(k))
      elif hasattr(node, 'shape'):
        shapes[prefix] = tuple(node.shape)

    walk(meta.get('params', {}), '')
    return shapes

  def restore(self, step: int, abstract_state, data_iterator=None, rename=None):
    """Restores onto `abstract_state`'s shapes and shardings (any mesh); also rewinds the data
    iterator in place when given. `rename` (a saved '/'-joined path -> its path now) converts
    a checkpoint written under an earlier layout of the parameters: it is read into a target
    of its own structure, each array already on the sharding of the parameter it becomes, and
    then rearranged. Checkpoints of the current layout are read as they are."""
    target, rearrange = abstract_state, None
    if rename is not None:
      target, rearrange = self._renamed_target(step, abstract_state, rename)
    items = {'state': ocp.args.StandardRestore(target)}
    if data_iterator is not None:
      items['data'] = grain.checkpoint.CheckpointRestore(data_iterator)
    state = self.manager.restore(step, args=ocp.args.Composite(**items))['state']
    return state if rearrange is None else rearrange(state)

  def _renamed_target(self, step, abstract_state, rename):
    """(target, rearrange) for `restore`: (abstract_state, None) when the saved paths are the
    current ones."""
    meta = self._saved_tree(step)
    saved = [_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(meta)[0]]
    current = {_path(p): a for p, a in jax.tree_util.tree_flatten_with_path(abstract_state)[0]}
    if set(saved) == set(current) or set(map(rename, saved)) != set(current):
      return abstract_state, None  # Nothing to convert, or no conversion fits: read as it is.
    target = jax.tree_util.tree_map_with_path(lambda p, _: current[rename(_path(p))], meta)

    def rearrange(state):
      by_path = {rename(_path(p)): v for p, v in jax.tree_util.tree_flatten_with_path(state)[0]}
      return jax.tree_util.tree_map_with_path(lambda p, _: by_path[_path(p)], abstract_state)
    return target, rearrange

  def set_aside(self, step: int) -> str:
    """Renames an unreadable step's directory to STEP.unreadable (or .unreadable-N), so that
    the step can be written again and the files stay for inspection. Returns the new path."""
    source = os.path.join(self.directory, str(step))
    target, n = source + '.unreadable', 1
    while os.path.exists(target):
      target, n = f'{source}.unreadable-{n}', n + 1
    os.rename(source, target)
    self.reload()
    return target

  def reload(self) -> None:
    """Reads the steps on disk again (after another process moved one aside)."""
    self._metadata.clear()
    self.manager.reload()

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    if self._closed:
      return
    self._closed = True
    self.manager.wait_until_finished()
    self.manager.close()

  def close_quietly(self) -> None:
    """Closes after a failure: a pending save finishes or fails (its error was or will be
    reported by whoever called save), and nothing raises here."""
    try:
      self.close()
    except Exception:  # pylint: disable=broad-except
      pass


def _path(path) -> str:
  """A pytree path as the '/'-joined string both trees share, variables' `value` kept."""
  return sharding.path_str(path, keep_value=True)
