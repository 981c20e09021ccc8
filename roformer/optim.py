"""The optimizer: learning-rate schedule and AdamW with clipping, from config.train."""

import jax
import jax.numpy as jnp
import ml_collections
import optax


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
  """AdamW with global-norm clipping; weight decay on matrices only, not on norms or biases
  (anything whose path names a bias: Linear biases, Transformer-XL's u/v, T5's bias tables)."""
  def decay_mask(params):
    def decay(path, p):
      return p.ndim >= 2 and not any('bias' in str(getattr(k, 'key', k)) for k in path)
    return jax.tree_util.tree_map_with_path(decay, params)
  return optax.chain(
      optax.clip_by_global_norm(tc.grad_clip),
      optax.adamw(make_schedule(tc), b1=tc.b1, b2=tc.b2, weight_decay=tc.weight_decay,
                  mask=decay_mask))
