"""The tied output layer and its cross-entropy, chunk by chunk along the sequence.

`chunked_token_sums` returns what `tasks.token_sums` returns for the logits
`(hidden @ embedding^T) * scale (+ bias)`, without ever holding the [tokens, vocabulary] float32
logits, their softmax or their gradient: a `lax.scan` over chunks of `chunk` sequence positions
(every row of the batch, so a batch sharded over devices keeps its rows on them) computes each
chunk's logits, its sums and, when differentiated, its gradients with respect to the hidden
states, the embedding and the output bias (if any) right away. Only scalar sums leave the
function, so each chunk's gradient is known up to the sums' cotangents in the forward pass; the
backward pass scales what the forward pass left (d hidden [batch, L, d], d embedding
[vocabulary, d], d bias [vocabulary]) instead of computing the logits again. Its memory is that
of one chunk's logits instead of all of them.

`correct` counts a token whose target's logit is the largest (`target_is_top`: a target tied for
the largest logit counts as right), read off the max that the log-sum-exp takes anyway. Every
path that scores tokens (`tasks.token_sums`, the synthetic tasks' rows) uses the same definition,
so the reported accuracy does not depend on `model.loss_chunk`.

The label-smoothed objective's gradient differs from the cross-entropy's by
e * (onehot - 1/V) per token, which needs no logits: the backward pass adds it from the
embedding rows of the targets and the hidden states (and, for the bias, the targets' counts).

With a soft-cap (`model.logits_softcap`: each logit l becomes c tanh(l / c), as Gemma 2's output
layer), the chunks' gradients are no longer those of linear logits, and the label-smoothed
objective's extra term needs them: the sums are then differentiated by plain autodiff through the
scan, each chunk recomputed in the backward pass, which keeps the memory of one chunk.

The scale multiplies the embedding once instead of every chunk's logits, (h E^T) s = h (s E)^T:
in float32 the same logits to rounding, in bfloat16 bfloat16 products either way.
"""

import jax
import jax.numpy as jnp

from roformer import attention
from roformer import autodiff
from roformer import sharding


def target_is_top(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """Bool [...]: the target's logit is the largest of its row (ties count as right). The one
  definition of a right token: unlike argmax == target, it does not depend on which of several
  tied logits an argmax returns, and it reads off a max that a log-sum-exp computes anyway."""
  target = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  return target >= jnp.max(logits, axis=-1)


def _chunks(x: jax.Array, chunk: int) -> jax.Array:
  """[batch, L, ...] -> [L / chunk, batch * chunk, ...] (L a multiple of chunk)."""
  b, length = x.shape[:2]
  x = x.reshape((b, length // chunk, chunk) + x.shape[2:])
  return jnp.moveaxis(x, 1, 0).reshape((length // chunk, b * chunk) + x.shape[3:])


def _unchunk(x: jax.Array, batch: int) -> jax.Array:
  """The inverse of `_chunks`."""
  n, rows = x.shape[:2]
  x = x.reshape((n, batch, rows // batch) + x.shape[2:])
  return jnp.moveaxis(x, 0, 1).reshape((batch, n * rows // batch) + x.shape[3:])


def _pad(hidden, targets, weights, chunk):
  """Pads the sequence to a multiple of `chunk` with weight-0 positions."""
  pad = -hidden.shape[1] % chunk
  if not pad:
    return hidden, targets, weights
  widen = lambda x: jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
  return widen(hidden), widen(targets), widen(weights)


def _chunk_sums(h, scaled_embedding, bias, t, w, label_smoothing, shards, softcap=0.0):
  """One chunk: float32 logits [rows, V], the three sums per batch shard [shards, 3], and the
  log-normaliser the gradient needs. Everything is written in terms of the logits and their
  log-sum-exp, so XLA computes each [rows, V] quantity inside the pass that reads it instead of
  storing logits - max."""
  logits = jnp.dot(h, scaled_embedding.T).astype(jnp.float32)
  if bias is not None:
    logits = logits + bias
  logits = attention.soft_capped(logits, softcap)
  top = jnp.max(logits, axis=-1, keepdims=True)
  lse = top + jnp.log(jnp.sum(jnp.exp(logits - top), axis=-1, keepdims=True))
  target = jnp.take_along_axis(logits, t[:, None], axis=-1)[:, 0]
  ce = lse[:, 0] - target
  objective = ce
  if label_smoothing:
    mean_logp = jnp.mean(logits, axis=-1) - lse[:, 0]
    objective = (1.0 - label_smoothing) * ce - label_smoothing * mean_logp
  # target_is_top from the max already taken (an argmax is one more reduce over [rows, V]).
  correct = (target >= top[:, 0]).astype(jnp.float32)
  per_row = jnp.stack([objective * w, ce * w, correct * w], axis=-1)  # [rows, 3]
  sums = per_row.reshape(shards, -1, 3).sum(axis=1)
  return sharding.constrain(sums, ('batch', None)), logits, lse


def _forward(hidden, embedding, bias, targets, weights, scale, label_smoothing, chunk, grads,
             softcap=0.0):
  """The scan over chunks: the sums, and with `grads` the cross-entropy's gradients with
  respect to hidden [batch, L, d], to the embedding [V, d] and to the bias [V] (None without
  one), for a unit cotangent of the weighted cross-entropy sum (uncapped logits only)."""
  b, length = hidden.shape[:2]
  # The scale goes into the embedding once, not into every chunk's logits and their gradient:
  # (h E^T) s = h (s E)^T, and the logits' gradient g gives g (s E) and s (h^T g).
  scaled = embedding.astype(hidden.dtype) * jnp.asarray(scale, hidden.dtype)
  hidden_p, targets_p, weights_p = _pad(hidden, targets, weights.astype(jnp.float32), chunk)
  h_chunks = _chunks(hidden_p, chunk)
  n, rows, d = h_chunks.shape
  # The embedding's gradient and the sums are summed per batch shard inside the loop
  # ([shards, d, V], [shards, 3]: each device its own rows' part) and over the shards once
  # after it: summing them whole in every chunk would all-reduce them across the devices once
  # per chunk.
  shards = sharding.shards('batch', b)
  # Each chunk's hidden states also transposed, [shards, d, rows / shards], made once before
  # the loop: the embedding's gradient (transposed) h^T d_logits is then a product of two
  # arrays in their own layouts, which XLA:CPU hands to its fast matmul (it computes a product
  # that contracts the left operand's first axis with a slower one).
  h_t = jnp.swapaxes(h_chunks.reshape(n, shards, rows // shards, d), 2, 3)
  xs = (h_chunks, h_t, _chunks(targets_p, chunk), _chunks(weights_p, chunk))

  def step(carry, x):
    h, h_t, t, w = x
    sums, logits, lse = _chunk_sums(h, scaled, bias, t, w, label_smoothing, shards, softcap)
    if not grads:
      return carry + sums, None
    totals, d_emb_t, d_bias = carry
    onehot = jax.lax.broadcasted_iota(t.dtype, logits.shape, 1) == t[:, None]
    d_logits = w[:, None] * (jnp.exp(logits - lse) - onehot.astype(jnp.float32))
    d_logits = d_logits.astype(h.dtype)
    d_h = jnp.dot(d_logits, scaled)
    # The embedding's gradient transposed, [d, V]: h^T d_logits reads d_logits in its own
    # layout (d_logits^T h would copy the [rows, V] array transposed first). Each chunk's
    # product in the activation dtype, as the unchunked layer's, then summed in float32.
    part = jnp.einsum('sdr,srv->sdv', h_t, d_logits.reshape(shards, -1, d_logits.shape[-1]))
    d_emb_t = sharding.constrain(d_emb_t + part.astype(jnp.float32), ('batch', None, None))
    if bias is not None:  # The rows summed as a product with ones.
      ones = jnp.ones((shards, rows // shards), jnp.float32)
      d_bias = d_bias + jnp.einsum('sr,srv->sv', ones, d_logits.astype(jnp.float32).reshape(
          shards, -1, d_logits.shape[-1]))
    return (totals + sums, d_emb_t, d_bias), d_h

  zeros = sharding.constrain(jnp.zeros((shards, 3), jnp.float32), ('batch', None))
  if not grads:  # Rematerialised: autodiff through it (custom_gradients off) keeps one chunk.
    totals, _ = jax.lax.scan(jax.checkpoint(step), zeros, xs)
    return totals.sum(axis=0), None, None, None
  vocab = embedding.shape[0]
  init = (zeros, sharding.constrain(jnp.zeros((shards, d, vocab), jnp.float32),
                                    ('batch', None, None)),
          None if bias is None else sharding.constrain(jnp.zeros((shards, vocab), jnp.float32),
                                                       ('batch', None)))
  (totals, d_emb_t, d_bias), d_h = jax.lax.scan(step, init, xs)
  d_hidden = _unchunk(d_h, b)[:, :length]
  d_bias = None if bias is None else d_bias.sum(axis=0)
  return totals.sum(axis=0), d_hidden, (d_emb_t.sum(axis=0) * scale).T, d_bias


def _result(totals, weights):
  return {'objective_sum': totals[0], 'loss_sum': totals[1], 'correct': totals[2],
          'weight': weights.astype(jnp.float32).sum()}


@autodiff.custom_vjp('chunked_loss', nondiff_argnums=(5, 6, 7), why="each chunk's gradient in the forward pass")
def _sums(hidden, embedding, bias, targets, weights, scale, label_smoothing, chunk):
  return _result(_forward(hidden, embedding, bias, targets, weights, scale, label_smoothing,
                          chunk, grads=False)[0], weights)


def _sums_fwd(hidden, embedding, bias, targets, weights, scale, label_smoothing, chunk):
  totals, d_hidden, d_embedding, d_bias = _forward(hidden, embedding, bias, targets, weights,
                                                   scale, label_smoothing, chunk, grads=True)
  residuals = (d_hidden, d_embedding, d_bias, hidden, embedding, targets, weights)
  return _result(totals, weights), residuals


def _sums_bwd(scale, label_smoothing, chunk, residuals, cotangents):
  del chunk
  d_hidden, d_embedding, d_bias, hidden, embedding, targets, weights = residuals
  g_objective, g_loss = cotangents['objective_sum'], cotangents['loss_sum']
  both = g_objective + g_loss  # Both sums share the cross-entropy part of the gradient.
  grad_hidden = both.astype(d_hidden.dtype) * d_hidden
  grad_embedding = both * d_embedding
  grad_bias = None if d_bias is None else both * d_bias
  if label_smoothing:  # The objective's extra e * (onehot - 1/V) per token, times w * g.
    factor = g_objective * label_smoothing * scale
    w = weights.astype(jnp.float32)[..., None]
    emb = embedding.astype(hidden.dtype).astype(jnp.float32)
    toward = emb[targets] - jnp.mean(emb, axis=0)  # [batch, L, d]
    grad_hidden = grad_hidden + (factor * w * toward).astype(d_hidden.dtype)
    h = hidden.astype(jnp.float32) * w
    spread = jnp.zeros_like(d_embedding).at[targets.reshape(-1)].add(h.reshape(-1, h.shape[-1]))
    grad_embedding = grad_embedding + factor * (
        spread - jnp.sum(h, axis=(0, 1)) / embedding.shape[0])
    if grad_bias is not None:  # e * (onehot - 1/V) summed over the tokens, times w * g.
      counts = jnp.zeros_like(d_bias).at[targets.reshape(-1)].add(w.reshape(-1))
      grad_bias = grad_bias + g_objective * label_smoothing * (
          counts - jnp.sum(w) / embedding.shape[0])
  return (grad_hidden.astype(hidden.dtype), grad_embedding.astype(embedding.dtype), grad_bias,
          None, None)


_sums.defvjp(_sums_fwd, _sums_bwd)


def chunked_token_sums(hidden: jax.Array, embedding: jax.Array, targets: jax.Array,
                       weights: jax.Array, *, scale: float, label_smoothing: float = 0.0,
                       chunk: int = 64, bias: jax.Array | None = None,
                       softcap: float = 0.0) -> dict[str, jax.Array]:
  """`tasks.token_sums` of the logits (hidden @ embedding^T) * scale (+ bias), soft-capped at
  `softcap` (0: not), `chunk` sequence positions of every row at a time (see the module's
  docstring).

  Args:
    hidden: [batch, L, d] final hidden states, in the activation dtype.
    embedding: [V, d] output embedding (float32 parameters; cast to hidden's dtype as the
      unchunked output layer does).
    targets: integer [batch, L]; weights: [batch, L] (0 for padding).
    scale: the logits' scale (1/sqrt(d_model) for the tied output layer).
    label_smoothing: e of the objective (1 - e) CE + e mean_v(-log p_v).
    chunk: sequence positions per chunk (L is padded with weight-0 positions to a multiple).
    bias: an optional float32 [V] added to the float32 logits (the masked LM's output bias).
  Returns:
    {'objective_sum', 'loss_sum', 'correct', 'weight'}: float32 scalars, differentiable with
    respect to hidden, embedding and bias through the first two; `correct` credits a target
    tied for the largest logit (see the module docstring).
  """
  if softcap:  # Plain autodiff through the rematerialised scan (the module's docstring).
    return _result(_forward(hidden, embedding, bias, targets, weights, float(scale),
                            float(label_smoothing), int(chunk), False, float(softcap))[0],
                   weights)
  return _sums(hidden, embedding, bias, targets, weights, float(scale), float(label_smoothing),
               int(chunk))
