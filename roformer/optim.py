"""The optimizer: learning-rate schedule and AdamW with clipping, from config.train."""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from roformer import variables


def _one_minus_sqrt(peak: float, end: float, steps: int) -> optax.Schedule:
  """peak * (end + (1 - end) (1 - sqrt(s / steps))): from peak at s = 0 to end * peak at
  s = steps. The cooldown shape that Hagele et al. 2024 (arXiv 2405.18392) found best after
  a constant rate; optax (0.2.8) has no warmup-stable-decay schedule, hence this one."""
  def schedule(s):
    frac = jnp.clip(s / steps, 0.0, 1.0)
    return peak * (end + (1.0 - end) * (1.0 - jnp.sqrt(frac)))
  return schedule


def make_schedule(tc: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warmup to the peak learning rate, then one of:
  - 'cosine': cosine decay to end_lr_fraction of the peak at the last step;
  - 'rsqrt': reciprocal-square-root decay;
  - 'wsd' (warmup-stable-decay): the peak held until the last decay_steps steps, which decay
    as 1 - sqrt to end_lr_fraction of the peak. A longer run with the same decay_steps is the
    shorter run's constant phase continued, so a checkpoint from the stable phase resumes into
    any length.
  Step k is taken at the schedule's value at k - 1 (optax's update count before the step), as
  for the cosine: the decay's first step is still at the peak, and its last within
  1 - sqrt((D - 1) / D) of the end (D = decay_steps, at least 2)."""
  peak, warmup = tc.learning_rate, tc.warmup_steps
  warm = optax.linear_schedule(0.0, peak, max(warmup, 1))
  if tc.schedule == 'cosine':
    decay = optax.cosine_decay_schedule(peak, max(tc.steps - warmup, 1), alpha=tc.end_lr_fraction)
  elif tc.schedule == 'wsd':
    stable_end = tc.steps - tc.decay_steps
    return optax.join_schedules(
        [warm, optax.constant_schedule(peak),
         _one_minus_sqrt(peak, tc.end_lr_fraction, tc.decay_steps)],
        [warmup, stable_end])
  else:
    decay = lambda s: peak * jnp.sqrt(max(warmup, 1) / (s + max(warmup, 1)))
  return optax.join_schedules([warm, decay], [warmup])


def make_optimizer(tc: ml_collections.ConfigDict, sign_rate: float = 0.0
                   ) -> optax.GradientTransformation:
  """AdamW with global-norm clipping, over a model's trainable Params (see
  `roformer.variables.trainable`). Weight decay applies to the Params that declared it where
  they were created (matrices and embeddings; not norms, biases, bias tables or scalars).
  With `sign_rate` > 0, the Params declared for sign descent (a mixture's choice bias) move by
  -sign_rate * sign(gradient) instead, outside the clipping and AdamW: DeepSeek-V3's
  load-balancing rule, whose gradient is each expert's load less the mean (roformer/moe.py)."""
  def decay_mask(params):
    return jax.tree.map(variables.decays, params, is_leaf=variables.is_variable)
  adamw = optax.chain(
      optax.clip_by_global_norm(tc.grad_clip),
      optax.adamw(make_schedule(tc), b1=tc.b1, b2=tc.b2, weight_decay=tc.weight_decay,
                  mask=decay_mask))
  if not sign_rate:
    def init(params):  # A model whose choice bias moves by sign descent needs its rate.
      if any(variables.sign_descends(v)
             for v in jax.tree.leaves(params, is_leaf=variables.is_variable)):
        raise ValueError('make_optimizer: the model has Params declared for sign descent (a '
                         "mixture's choice bias with moe.choice_bias_rate > 0), and no "
                         'sign_rate: pass config.model.moe.choice_bias_rate.')
      return adamw.init(params)
    return optax.GradientTransformation(init, adamw.update)

  def labels(params):
    return jax.tree.map(lambda v: 'sign' if variables.sign_descends(v) else 'adamw', params,
                        is_leaf=variables.is_variable)
  sign = optax.chain(optax.scale_by_sign(), optax.scale(-sign_rate))
  return optax.multi_transform({'adamw': adamw, 'sign': sign}, labels)
