"""The optimizer: learning-rate schedule and AdamW with clipping, from config.train."""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from roformer import variables


def make_schedule(tc: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warmup to the peak learning rate, then cosine decay (to end_lr_fraction of the
  peak at the last step) or reciprocal-square-root decay."""
  peak, warmup = tc.learning_rate, tc.warmup_steps
  warm = optax.linear_schedule(0.0, peak, max(warmup, 1))
  if tc.schedule == 'cosine':
    decay = optax.cosine_decay_schedule(peak, max(tc.steps - warmup, 1), alpha=tc.end_lr_fraction)
  else:
    decay = lambda s: peak * jnp.sqrt(max(warmup, 1) / (s + max(warmup, 1)))
  return optax.join_schedules([warm, decay], [warmup])


def make_optimizer(tc: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdamW with global-norm clipping, over a model's trainable Params (see
  `roformer.variables.trainable`). Weight decay applies to the Params that declared it where
  they were created (matrices and embeddings; not norms, biases, bias tables or scalars)."""
  def decay_mask(params):
    return jax.tree.map(variables.decays, params, is_leaf=variables.is_variable)
  return optax.chain(
      optax.clip_by_global_norm(tc.grad_clip),
      optax.adamw(make_schedule(tc), b1=tc.b1, b2=tc.b2, weight_decay=tc.weight_decay,
                  mask=decay_mask))
