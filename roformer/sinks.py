"""Attention sinks: how much attention each layer's queries put on the first token of the row.

A trained causal LM often sends a large share of every head's attention to the sequence's
first token whatever it is (Xiao et al. 2023, "Efficient Streaming Language Models with
Attention Sinks"); gated attention (Qiu et al. 2025) is reported to remove that sink. This
module measures it on a restored model: the attention layers are switched to the einsum path
with their weights sown (`MultiHeadAttention.record_probs`), the task's evaluation pass runs,
and each layer's weight on key slot 0 is averaged over the queries that can see it (slot 1 on,
in slot 0's document), the rows and, separately, each head. Beside it, the share that uniform
attention over the same keys would give (1 / (i + 1) at query slot i), so that a value can be
read as "more than no preference" or not.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import errors
from roformer import models


def attention_layers(model) -> list:
  """The model's self-attention modules in graph order (a stack's blocks in layer order)."""
  return [m for _, m in nnx.iter_graph(model) if isinstance(m, models.MultiHeadAttention)]


def record(model, on: bool = True) -> None:
  """Makes every self-attention layer sow its weights (`attention_probs`) on its next call."""
  layers = attention_layers(model)
  if any(m.favor for m in layers):
    raise errors.ConfigError('config.model.attention.kind=favor has no attention weights to '
                             'measure (FAVOR+ never forms them). Fix: measure a softmax or '
                             'stick-breaking run.')
  for m in layers:
    m.record_probs = on


def first_token_sums(probs: jax.Array, segments: jax.Array | None, window: int = 0) -> dict:
  """For weights [batch, heads, q, k] of a causal self-attention over rows whose packed
  documents are `segments` [batch, q] (None: one document per row): per head, the summed
  weight of the queries at slots 1.. on key slot 0, the summed uniform share 1 / (i + 1) of
  those queries, and their count, over the queries that see slot 0 (in its document, and with
  a sliding `window` > 0, the first `window` slots)."""
  b, _, length, _ = probs.shape
  if segments is None:
    segments = jnp.ones((b, length), jnp.int32)
  sees = (segments[:, 1:] == segments[:, :1]) & (segments[:, :1] > 0)
  if window:
    sees = sees & (jnp.arange(1, length) < window)[None]
  sees = sees.astype(jnp.float32)
  uniform = 1.0 / jnp.arange(2, length + 1, dtype=jnp.float32)
  return {'mass': jnp.einsum('bhq,bq->h', probs[:, :, 1:, 0].astype(jnp.float32), sees),
          'uniform': jnp.sum(sees * uniform),
          'queries': jnp.sum(sees)}


@dataclasses.dataclass
class Sinks:
  """Per layer: the mean weight on the first token over heads ([layers]), per head
  ([layers, heads]), and uniform attention's share over the same queries ([layers])."""
  mass: np.ndarray
  per_head: np.ndarray
  uniform: np.ndarray
  queries: int


def measure(graphdef, params, task, batches, max_batches: int = 8) -> Sinks:
  """`Sinks` of the model (graphdef, params) over at most `max_batches` of `batches` (the
  task's evaluation batches), through the task's own evaluation pass."""

  def sums(params, batch):
    model = nnx.merge(graphdef, params)
    record(model)
    task.eval_sums(model, batch)
    segments = batch.get('inputs_segment_ids')
    out = []
    for layer in attention_layers(model):
      out.append(first_token_sums(layer.attention_probs.get_value()[0], segments,
                                  layer.window))
    return jax.tree.map(lambda *x: jnp.stack(x), *out)

  step = jax.jit(sums)
  total = None
  for i, batch in enumerate(batches):
    if i == max_batches:
      break
    got = jax.device_get(step(params, batch))
    total = got if total is None else jax.tree.map(np.add, total, got)
  if total is None or not total['queries'].any():
    raise errors.ConfigError('the evaluation batches hold no query that sees the row\'s first '
                             'token. Fix: use a split with documents longer than one token.')
  count = total['queries'][:, None]
  per_head = total['mass'] / count
  return Sinks(mass=per_head.mean(axis=1), per_head=per_head,
               uniform=total['uniform'] / total['queries'], queries=int(total['queries'][0]))
