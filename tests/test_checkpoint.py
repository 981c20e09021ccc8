"""roformer.checkpoint: what a save costs and that it restores what it wrote."""

import jax
import numpy as np

from roformer import checkpoint as checkpoint_lib

COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'


def test_one_process_saves_a_replicated_state_without_compiling_and_restores_it(tmp_path):
  """On 8 devices a replicated array exists 8 times; one process writes each array once, from
  one copy, so a save compiles nothing (replica-parallel writing would compile a slice program
  per array and device), and the restore gives back every value on the target's sharding."""
  mesh = jax.make_mesh((8,), ('data',))
  replicated = jax.sharding.NamedSharding(mesh, jax.P())
  rng = np.random.default_rng(0)
  # Shapes no other test uses (so that no program for them is compiled already), each with a
  # dimension that 8 divides (so that replica-parallel writing could slice it).
  state = {'a': rng.normal(size=(88, 29)).astype(np.float32),
           'b': {'c': rng.normal(size=(104,)).astype(np.float32),
                 'd': np.arange(72 * 3, dtype=np.int32).reshape(72, 3)}}
  on_devices = jax.tree.map(lambda x: jax.device_put(x, replicated), state)
  compiles = []

  def listener(event, duration, **kwargs):
    del duration, kwargs
    if event == COMPILE_EVENT:
      compiles.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    checkpointer = checkpoint_lib.Checkpointer(str(tmp_path / 'checkpoints'), async_save=False)
    checkpointer.save(5, on_devices)
    checkpointer.manager.wait_until_finished()
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  assert compiles == []
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                          state)
  restored = checkpointer.restore(5, abstract)
  checkpointer.close()
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
    np.testing.assert_array_equal(np.asarray(got), want)
    assert got.sharding == replicated


def test_a_steps_metadata_is_read_once_and_again_once_the_step_is_written_anew(tmp_path):
  """The shape check and the restore share one read of a step's metadata (orbax reads it file
  by file); a step set aside (unreadable) and written again, here or by another process (which
  `reload` follows), is read anew, not from the earlier copy."""
  directory = str(tmp_path / 'checkpoints')
  checkpointer = checkpoint_lib.Checkpointer(directory, async_save=False)
  reads = []
  item_metadata = checkpointer.manager.item_metadata
  checkpointer.manager.item_metadata = lambda step: reads.append(step) or item_metadata(step)
  checkpointer.save(3, {'params': {'w': np.zeros((2, 5), np.float32)}})
  assert checkpointer.param_shapes(3) == {'w': (2, 5)}
  abstract = {'params': {'w': jax.ShapeDtypeStruct((2, 5), np.float32)}}
  restored = checkpointer.restore(3, abstract, rename=lambda path: path)  # Reads the paths.
  assert restored['params']['w'].shape == (2, 5) and reads == [3]
  checkpointer.set_aside(3)
  checkpointer.save(3, {'params': {'w': np.zeros((1, 1, 6), np.float32)}})
  assert checkpointer.param_shapes(3) == {'w': (1, 1, 6)} and reads == [3, 3]
  other = checkpoint_lib.Checkpointer(directory, async_save=False)
  other.set_aside(3)
  other.save(3, {'params': {'w': np.zeros((4,), np.float32)}})
  other.close()
  checkpointer.reload()
  assert checkpointer.param_shapes(3) == {'w': (4,)} and reads == [3, 3, 3]
  checkpointer.close()
