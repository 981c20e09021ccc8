"""Pure train, evaluation and prediction steps over a train state {'params', 'opt_state',
'step'} ('params': every variable of the model; the optimizer's state covers its nnx.Params):
functions of (state, batch) only, so that `roformer.trainer` can jit them once with explicit
shardings and donate the old state."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from roformer import autodiff
from roformer import auxiliary
from roformer import variables


def micro_batches(batch: dict, count: int) -> dict:
  """[rows, ...] -> [count, rows / count, ...]: micro-batch i takes rows i, i + count, ...,
  so each device's contiguous share of the rows splits into its share of every micro-batch."""
  def split(x):
    x = x.reshape((x.shape[0] // count, count) + x.shape[1:])
    return jnp.swapaxes(x, 0, 1)
  return jax.tree.map(split, batch)


def input_tokens(batch) -> jax.Array:
  """The tokens a step reads: every non-padding position of the model's inputs (a translation
  pair's source and target), whether the loss weighs it or not."""
  keys = [k for k in ('inputs_segment_ids', 'decoder_inputs_segment_ids') if k in batch]
  return sum(jnp.sum(batch[k] > 0).astype(jnp.float32) for k in keys)


def train_step(state, batch, dropout_seed, *, graphdef, tx, schedule, task, label_smoothing,
               redraw_interval: int = 0, grad_accum_steps: int = 1):
  """One optimizer update. Dropout keys derive from (dropout_seed, step), never from the data
  (the seed is an int32 argument, not a constant, so that one program serves every seed); so do
  FAVOR+'s random features, redrawn every `redraw_interval` steps. With `grad_accum_steps` > 1
  the batch is processed as that many micro-batches in a `lax.scan`, summing the gradients of the
  token-weighted loss sums, so the update equals the one of the whole batch."""
  key = jax.random.fold_in(jax.random.key(dropout_seed), state['step'])

  # The optimizer updates the Params; the other variables (FAVOR+'s draw) are set here.
  params, rest = variables.trainable(state['params'])
  if redraw_interval:  # This step's features; the saved state keeps the draw used last.
    rest = variables.set_feature_draw(rest, state['step'] // redraw_interval)

  def sums_fn(params, micro, micro_key):
    model = nnx.merge(graphdef, params, rest)
    # The loss's own backward too; the layers' auxiliary losses (roformer/auxiliary.py) count
    # once per real target token, like the loss they are added to.
    with autodiff.use(model.custom_gradients), auxiliary.collecting():
      sums, aux = auxiliary.total(
          lambda m: task.sums(m, micro, micro_key, label_smoothing), model)
    if aux is not None:
      sums = {**sums, 'auxiliary_sum': aux * sums['weight'],
              'objective_sum': sums['objective_sum'] + aux * sums['weight']}
    return sums['objective_sum'], sums

  grad_fn = jax.grad(sums_fn, has_aux=True)
  if grad_accum_steps == 1:
    grads, sums = grad_fn(params, batch, key)
  else:
    def accumulate(carry, inputs):
      i, micro = inputs
      grads, sums = grad_fn(params, micro, jax.random.fold_in(key, i))
      return jax.tree.map(jnp.add, carry, (grads, sums)), None
    micros = micro_batches(batch, grad_accum_steps)
    zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(
        grad_fn, params, jax.tree.map(lambda x: x[0], micros), key))
    (grads, sums), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(grad_accum_steps), micros))
  weight = jnp.maximum(sums['weight'], 1.0)
  grads = jax.tree.map(lambda g: g / weight, grads)
  # The loss's gradients: a sign-descent Param's (a choice bias's load errors, roformer/moe.py)
  # is not one, and would dominate the norm.
  grad_norm = optax.global_norm([g[...] for g in jax.tree.leaves(
      grads, is_leaf=variables.is_variable) if not variables.sign_descends(g)])
  # A non-finite loss or gradient never reaches the state: that step leaves it unchanged, and
  # the loop stops or counts it (config.train.on_nonfinite). A `lax.cond` rather than a
  # `where` per leaf: selecting between the new and the old state makes XLA copy every donated
  # buffer first (4x the optimizer's time on CPU), while a branch updates them in place.
  finite = jnp.isfinite(sums['loss_sum']) & jnp.isfinite(grad_norm)

  def update(params, opt_state):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  params, opt_state = jax.lax.cond(finite, update, lambda p, o: (p, o), params,
                                   state['opt_state'])
  metrics = {'loss': sums['loss_sum'] / weight, 'grad_norm': grad_norm,
             'learning_rate': schedule(state['step']),
             'nonfinite': jnp.logical_not(finite).astype(jnp.int32),
             'tokens': input_tokens(batch), 'loss_tokens': sums['weight']}
  if 'auxiliary_sum' in sums:
    metrics['auxiliary_loss'] = sums['auxiliary_sum'] / weight
  if 'correct' in sums:  # Not for regression.
    metrics['accuracy'] = sums['correct'] / weight
  return ({'params': nnx.merge_state(params, rest), 'opt_state': opt_state,
           'step': state['step'] + 1}, metrics)


def eval_step(params, batch, *, graphdef, task):
  """The task's evaluation sums of one batch (added up over a split by `evaluate`)."""
  return task.eval_sums(nnx.merge(graphdef, params), batch)


def predict_step(params, batch, *, graphdef, task):
  """Per-example (prediction, loss) (a class, or a regression's score) with their labels and
  weights, for metrics that need every prediction (F1, correlations)."""
  return task.predict(nnx.merge(graphdef, params), batch), batch['label'], batch['weight']
