"""Evaluation passes compiled ahead (roformer/compile_ahead.py) are the programs the evaluation
then calls: after them, validation and the final evaluation at every length compile nothing."""

import jax
import pytest
from jax import monitoring
from jax._src import dispatch

from configs import synthetic
from roformer import compile_ahead
from roformer import evaluate
from roformer import members as members_lib
from roformer import resolve
from roformer import trainer as trainer_lib


def _config():
  config = synthetic.get_config('copy,rope')
  config.data.seq_len = 16
  config.data.synthetic.eval_examples = 8
  config.model.update(d_model=32, d_ff=64)
  config.train.update(batch_size=8, eval_batches=1)
  config.eval.update(batch_size=8, length_multipliers=(1, 2))
  return config


@pytest.fixture
def compiles():
  """The backend compilations that happen while the test runs (a list of durations)."""
  seen = []
  listener = lambda event, duration, **_: seen.append(duration) if (
      event == dispatch.BACKEND_COMPILE_EVENT) else None
  monitoring.register_event_duration_secs_listener(listener)
  yield seen
  monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize('vmapped', [False, True])
def test_validation_and_every_evaluation_length_compile_nothing_after_their_passes_ahead(
    tmp_path, compiles, vmapped):
  config = _config()
  runs = []
  for seed in (0, 1):
    member = config.copy_and_resolve_references()
    member.seed = seed
    runs.append(resolve.for_training(member, str(tmp_path / f'seed={seed}')))
  trainer = trainer_lib.Trainer(config, runs[0].mesh)
  states = [trainer.init_state(seed) for seed in (0, 1)]
  group = members_lib.Members(trainer, [0, 1], states, vmapped=vmapped)
  sources = [r.sources['validation'] for r in runs]
  programs = evaluate.programs_ahead(trainer, group, sources, final=True)
  assert sorted(programs) == ['evaluation at 16', 'evaluation at 32', 'validation']
  ahead = compile_ahead.Ahead()
  for name, (jitted, args) in programs.items():
    ahead.submit(name, jitted, *args)
  ahead.wait_all()
  ahead.close()
  params = group.params(0)  # A vmapped group's member: a program of its own, not evaluation's.
  before = len(compiles)
  assert before >= 2  # What the thread compiled.
  together = evaluate.group_validation(trainer, group, sources, [r.tokenizer for r in runs])
  assert (together is not None) == vmapped
  if not vmapped:
    evaluate.validation(trainer, params, sources[0], runs[0].tokenizer)
  evaluation = resolve.evaluation_of(runs[0], 0, ('validation',))
  results = evaluate.evaluate_run(evaluation, trainer, params)
  assert [r['length'] for r in results['splits']['validation']['lengths']] == [16, 32]
  assert len(compiles) == before, 'an evaluation pass compiled again'


def test_a_pass_that_fails_to_compile_ahead_is_left_to_its_own_call():
  """The failure is not raised in the thread's place: `wait` says it did not compile."""
  ahead = compile_ahead.Ahead()
  ahead.submit('bad', jax.jit(lambda x: x @ x), jax.ShapeDtypeStruct((2, 3), 'float32'))
  assert ahead.wait('bad') is False and ahead.wait('never submitted') is False
  ahead.close()
  off = compile_ahead.Ahead(enabled=False)
  off.submit('ignored', jax.jit(lambda x: x), jax.ShapeDtypeStruct((2,), 'float32'))
  assert off.wait('ignored') is False
  off.close()
