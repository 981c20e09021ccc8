"""Attention sinks: how much attention each layer's queries put on the first token of the row.

A trained causal LM often sends a large share of every head's attention to the sequence's
first token whatever it is (Xiao et al. 2023, "Efficient Streaming Language Models with
Attention Sinks"); gated attention (Qiu et al. 2025) is reported to remove that sink. This
module measures it on a restored model: the attention layers are switched to the einsum path
with their weights sown (`MultiHeadAttention.record_probs`), the task's evaluation pass runs
under `nnx.capture`, and each layer's weight on key slot 0 is averaged over the queries that
see it (slot 1 on, in slot 0's document, within a sliding window), the rows and, separately,
each head. Beside it, the share that uniform attention over the same keys would give (1 / (i + 1)
at query slot i, or 1 / i where a query does not see itself), so that a value can be read as
"more than no preference" or not.

The einsum path computes the weights in float32 and rounds them to the values' dtype, as it
does in training; a bfloat16 model measured here is therefore not bit-identical to its pass
through cuDNN, whose weights are never formed.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import attention_options
from roformer import errors
from roformer import saved_config
from roformer import scanned
from roformer import self_attention


def unmeasurable(att_kind: str, options, *, causal: bool) -> str | None:
  """Why attention of kind `att_kind` with the switches `options` (their fields) has no one
  causal map per head to measure (None: it has), from their declarations. The script asks it
  of a run's saved config before anything compiles; `record`, of each layer."""
  why = attention_options.unweighted(att_kind, options)
  if why:
    return why
  if not causal:
    return ('the self-attention is bidirectional: the first token\'s share is defined here for '
            'causal attention. Fix: measure a causal LM.')
  return None


def record(model) -> list:
  """Makes every self-attention layer of `model` sow its weights (`attention_probs`); returns
  the (path, layer) of each, in graph order (a stack's blocks in layer order). This changes the
  model's graph: use it on a model merged for measuring, with its blocks as a loop (a scanned
  run's `trainer.saved_graphdef` and `trainer.saved_params(params)`). Refuses layers whose
  weights are not one attention map per head over causal keys."""
  if any(isinstance(m, scanned.ScannedBlocks) for _, m in nnx.iter_graph(model)):
    raise ValueError('sinks.record measures each layer apart: give it the model with its '
                     'blocks as a loop (trainer.saved_graphdef, trainer.saved_params(params)).')
  layers = [(p, m) for p, m in nnx.iter_graph(model)
            if isinstance(m, self_attention.MultiHeadAttention)]
  for _, m in layers:
    why = unmeasurable(m.attention_kind, m.option_fields, causal=m.causal)
    if why:
      raise errors.ConfigError(why)
    m.record_probs = True
  return layers


def first_token_sums(probs: jax.Array, segments: jax.Array | None, window: int = 0,
                     sees_itself: bool = True) -> dict:
  """For weights [batch, heads, q, k] of a causal self-attention over rows whose packed
  documents are `segments` [batch, q] (None: one document per row): per head, the summed
  weight of the queries at slots 1.. on key slot 0, the summed uniform share of those queries
  (1 / (i + 1), or 1 / i where a query does not see its own slot), and their count, over the
  queries that see slot 0 (in its document and, with a sliding `window` > 0, the first
  `window` slots)."""
  b, _, length, _ = probs.shape
  if segments is None:
    segments = jnp.ones((b, length), jnp.int32)
  sees = (segments[:, 1:] == segments[:, :1]) & (segments[:, :1] > 0)
  if window:
    sees = sees & (jnp.arange(1, length) < window)[None]
  sees = sees.astype(jnp.float32)
  keys = jnp.arange(1, length, dtype=jnp.float32) + (1.0 if sees_itself else 0.0)
  return {'mass': jnp.einsum('bhq,bq->h', probs[:, :, 1:, 0].astype(jnp.float32), sees),
          'uniform': jnp.sum(sees / keys),
          'queries': jnp.sum(sees)}


@dataclasses.dataclass
class Sinks:
  """Per layer: the mean weight on the first token over heads (`mass`, [layers]) and per head
  (`per_head`, [layers, heads]), uniform attention's share over the same queries (`uniform`,
  [layers]), and how many queries were averaged (`queries`, [layers])."""
  mass: np.ndarray
  per_head: np.ndarray
  uniform: np.ndarray
  queries: np.ndarray


def same_model(config) -> str:
  """What runs must share for one `evaluation_pass` to serve them: their whole config but the
  seed (which sets only their parameters, and those are the pass's arguments)."""
  return saved_config.without_seed(config)


def evaluation_pass(graphdef, task):
  """The jitted pass that `measure` runs: (params, batch) -> each layer's sums on the first
  token, through the task's own evaluation pass. Runs whose model and task are the same (a
  sweep's seeds) can share one, and with it one compilation per batch shape."""

  def sums(params, batch):
    model = nnx.merge(graphdef, params)
    layers = record(model)
    _, sown = nnx.capture(lambda m, b: task.eval_sums(m, b), nnx.Intermediate)(model, batch)
    flat = dict(nnx.to_flat_state(sown))
    segments = batch.get('inputs_segment_ids')
    out = []
    for path, layer in layers:
      (probs,) = flat[(*path, 'attention_probs')].get_value()  # One call per layer.
      sees_itself = layer.kind.sees_itself(layer)
      out.append(first_token_sums(probs, segments, layer.window, sees_itself))
    return jax.tree.map(lambda *x: jnp.stack(x), *out)

  return jax.jit(sums)


def measure(graphdef, params, task, batches, max_batches: int = 8, step=None) -> Sinks:
  """`Sinks` of the model (graphdef, params) over at most `max_batches` of `batches` (the
  task's evaluation batches), through the task's own evaluation pass (`step`: one that
  `evaluation_pass` made for the same model and task, else a new one)."""
  record(nnx.merge(graphdef, params))  # Its refusals, before anything compiles.
  step = step or evaluation_pass(graphdef, task)
  total = None
  for i, batch in enumerate(batches):
    if i == max_batches:
      break
    got = jax.device_get(step(params, batch))
    total = got if total is None else jax.tree.map(np.add, total, got)
  empty = [] if total is None else [i for i, n in enumerate(total['queries']) if n == 0]
  if total is None or empty:
    raise errors.ConfigError(
        f'no query of the evaluation batches sees the row\'s first token'
        f'{f" in layer(s) {empty}" if empty else ""} (documents of one token, or a window '
        'of 1). Fix: measure a split with longer documents, or a layout without such windows.')
  per_head = total['mass'] / total['queries'][:, None]
  return Sinks(mass=per_head.mean(axis=1), per_head=per_head,
               uniform=total['uniform'] / total['queries'], queries=total['queries'])
