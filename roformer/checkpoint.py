"""Orbax checkpointing of the train state together with the data iterator's position."""

import os

import grain
import orbax.checkpoint as ocp


def all_steps(directory: str) -> list[int]:
  """Steps with a finished checkpoint in directory (none if it does not exist)."""
  if not os.path.isdir(directory):
    return []
  manager = ocp.CheckpointManager(os.path.abspath(directory))
  try:
    return sorted(manager.all_steps())
  finally:
    manager.close()


def latest_step(directory: str) -> int | None:
  steps = all_steps(directory)
  return steps[-1] if steps else None


class Checkpointer:
  """Saves {'state': train state, 'data': grain iterator state} per step; async, max_to_keep."""

  def __init__(self, directory: str, *, max_to_keep: int = 3, async_save: bool = True):
    self.directory = os.path.abspath(directory)  # Orbax needs absolute paths.
    self._closed = False
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
    self.manager.save(step, args=ocp.args.Composite(**items), force=True)

  def param_shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the saved parameters, keyed by '/'-joined path, read from metadata only."""
    meta = self.manager.item_metadata(step)['state']
    meta = getattr(meta, 'tree', meta)
    shapes = {}

    def walk(node, prefix):
      if isinstance(node, dict):
        for k, v in node.items():
          walk(v, f'{prefix}/{k}' if prefix else str(k))
      elif hasattr(node, 'shape'):
        shapes[prefix] = tuple(node.shape)

    walk(meta.get('params', {}), '')
    return shapes

  def restore(self, step: int, abstract_state, data_iterator=None):
    """Restores onto `abstract_state`'s shapes and shardings (any mesh); also rewinds the data
    iterator in place when given."""
    items = {'state': ocp.args.StandardRestore(abstract_state)}
    if data_iterator is not None:
      items['data'] = grain.checkpoint.CheckpointRestore(data_iterator)
    return self.manager.restore(step, args=ocp.args.Composite(**items))['state']

  def set_aside(self, step: int) -> str:
    """Renames an unreadable step's directory to STEP.unreadable (or .unreadable-N), so that
    the step can be written again and the files stay for inspection. Returns the new path."""
    source = os.path.join(self.directory, str(step))
    target, n = source + '.unreadable', 1
    while os.path.exists(target):
      target, n = f'{source}.unreadable-{n}', n + 1
    os.rename(source, target)
    self.manager.reload()
    return target

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
