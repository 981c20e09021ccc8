"""The task interface (`Task`) and the token-level sums that the language-modelling tasks
share: the cross-entropy with its written-out backward, `token_sums` and `summarize`."""

import jax
import jax.numpy as jnp
import numpy as np

from roformer import autodiff
from roformer import losses
from roformer import metrics as metrics_lib


@autodiff.custom_vjp('cross_entropy', nondiff_argnums=(2,),
                     why='one pass over the log-probabilities, no scatter')
def cross_entropy(logits: jax.Array, targets: jax.Array, label_smoothing: float = 0.0):
  """Per-token cross-entropy -log p[target] and the label-smoothed objective
  (1 - e) CE + e mean_v(-log p_v), from float32 logits [..., V] and integer targets [...].

  Its backward is written out, d/dlogits = (g_ce + g_obj) p - (g_ce + (1 - e) g_obj) onehot -
  (e / V) g_obj, one elementwise pass over the saved log-probabilities: differentiating the
  gather of log p[target] would scatter into a zero [..., V] array and read it back.
  """
  (ce, objective), _ = _cross_entropy_fwd(logits, targets, label_smoothing)
  return ce, objective


def _cross_entropy_fwd(logits, targets, label_smoothing):
  logp = jax.nn.log_softmax(logits)
  ce = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  objective = ce if label_smoothing == 0 else (
      (1.0 - label_smoothing) * ce - label_smoothing * logp.mean(axis=-1))
  return (ce, objective), (logp, targets)


def _cross_entropy_bwd(label_smoothing, residuals, cotangents):
  logp, targets = residuals
  g_ce, g_objective = cotangents
  onehot = jax.lax.broadcasted_iota(targets.dtype, logp.shape, logp.ndim - 1) == targets[..., None]
  on_target = (g_ce + (1.0 - label_smoothing) * g_objective)[..., None]
  grad = ((g_ce + g_objective)[..., None] * jnp.exp(logp) - jnp.where(onehot, on_target, 0.0))
  if label_smoothing:
    grad = grad - (label_smoothing / logp.shape[-1]) * g_objective[..., None]
  return grad, None


cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def token_sums(logits, targets, weights, label_smoothing: float = 0.0, *,
               buckets: jax.Array | None = None, num_buckets: int = 0) -> dict[str, jax.Array]:
  """Summed cross-entropy (`loss_sum`), the label-smoothed training objective
  (`objective_sum`: (1 - e) CE + e mean_v(-log p_v)), right tokens (`losses.target_is_top`) and the
  number of weighted tokens. Logits are float32. With integer `buckets` (the same shape as
  targets, values in [0, num_buckets)), also the loss and weight summed per bucket
  (`bucket_loss_sum`, `bucket_weight`: [num_buckets])."""
  ce, objective = cross_entropy(logits.astype(jnp.float32), targets, float(label_smoothing))
  correct = losses.target_is_top(logits, targets).astype(jnp.float32)
  sums = {'loss_sum': (ce * weights).sum(), 'objective_sum': (objective * weights).sum(),
          'correct': (correct * weights).sum(), 'weight': weights.sum()}
  if buckets is not None:
    one_hot = jax.nn.one_hot(buckets, num_buckets, dtype=jnp.float32) * weights[..., None]
    sums['bucket_loss_sum'] = jnp.einsum('...b,...->b', one_hot, ce)
    sums['bucket_weight'] = one_hot.reshape(-1, num_buckets).sum(0)
  return sums


def summarize(totals: dict) -> dict:
  """Metrics from token sums added up over an evaluation: loss (nats per weighted token),
  accuracy, perplexity, tokens; with per-bucket sums, the loss per position bucket."""
  weight = max(float(totals['weight']), 1.0)
  loss = float(totals['loss_sum']) / weight
  out = {'loss': loss, 'accuracy': float(totals['correct']) / weight,
         'perplexity': metrics_lib.perplexity(loss), 'tokens': float(totals['weight'])}
  if 'bucket_weight' in totals:
    counts = np.asarray(totals['bucket_weight'], np.float64)
    losses = np.asarray(totals['bucket_loss_sum'], np.float64)
    out['position_loss'] = [float(l / c) if c else None for l, c in zip(losses, counts)]
    out['position_tokens'] = [float(c) for c in counts]
  return out


def batch_size(config, batch_size):
  """The rows of a batch on this host: `batch_size` (or config.train.batch_size) over the hosts."""
  return (batch_size or config.train.batch_size) // jax.process_count()


def chunks(loss_chunk: int, length: int) -> bool:
  """Whether the output layer runs in chunks of `loss_chunk` positions (config.model.loss_chunk)
  for rows of `length`: only when a chunk is shorter than the row. A chunk as long as the row
  would be the whole logits in a loop of one step, and a longer one would pad the row (at the
  synthetic tasks' 16 positions, a chunk of 32 made the step 8% slower: docs/performance.md)."""
  return 0 < loss_chunk < length


class Task:
  """What the loop and evaluation ask of a task.

  Batches: `features`, `feature_shapes(batch_size, seq_len)` (the arrays of a batch, which
  evaluation pads a short last batch with) and `batches(config, source, tokenizer, *, train,
  seq_len=None, batch_size=None)` (an iterator of host batches; endless when training).
  Loss: `sums(model, batch, key, label_smoothing)` returns summed `objective_sum` (what is
  differentiated), `loss_sum`, `correct` and `weight` (and optionally `tokens`); the train step
  divides by the weight. Evaluation: `eval_sums(model, batch)` added up over a split, then
  `summarize(totals)`; a `per_example` task instead gives `predict(model, batch)` per example
  (F1, correlations). `check_data(config, sources)` checks the data against the model before
  anything is compiled. `decodes`: validation and the test split also decode and score text
  (BLEU). `best_metric`: the validation metric (higher is better) for which the loop keeps the
  best checkpoint apart, or None."""

  features: tuple[str, ...] = ()
  per_example = False  # Token-level loss and accuracy (not per-example predictions).
  extra_tokens = 0  # Ids the model has beyond the tokenizer's vocabulary.
  decodes = False
  best_metric: str | None = None

  def check_data(self, config, sources) -> None:
    del config, sources
