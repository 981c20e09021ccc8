"""Greedy and beam search with an incremental key/value cache.

Both searches drive a `step_fn(tokens [N, 1], positions [N, 1], cache) -> (logits [N, V], cache)`
from the logits of the first generated token, so the same code serves the causal LM (`generate`)
and, later, an encoder-decoder. Everything runs inside `lax.fori_loop` with fixed shapes.
"""

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from roformer.data import tokenizer as tokenizer_lib

StepFn = Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]]
PAD_ID = tokenizer_lib.PAD_ID
NEG_INF = -1.0e9


def length_penalty(length, alpha: float):
  """GNMT (Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6)^alpha; scores are log P(Y) / lp(Y)."""
  return ((5.0 + length) / 6.0) ** alpha


def greedy_search(step_fn: StepFn, first_logits, cache, start_positions, *, max_len: int,
                  eos_id: int):
  """Argmax decoding of up to max_len tokens [batch, max_len]; PAD after a row's EOS."""
  batch = first_logits.shape[0]

  def body(i, carry):
    tokens, logits, cache, done = carry
    token = jnp.where(done, PAD_ID, jnp.argmax(logits, axis=-1)).astype(jnp.int32)
    tokens = tokens.at[:, i].set(token)
    done = done | (token == eos_id)
    logits, cache = step_fn(token[:, None], (start_positions + i)[:, None], cache)
    return tokens, logits, cache, done

  init = (jnp.zeros((batch, max_len), jnp.int32), first_logits, cache,
          jnp.zeros((batch,), bool))
  # Stops early once every row has emitted EOS (the rest stays PAD either way).
  return _loop_until(lambda carry: jnp.all(carry[3]), body, max_len, init)[0]


def _loop_until(finished, body, max_len, init):
  """fori_loop over 0..max_len-1 that stops as soon as finished(carry) holds."""
  def cond(state):
    i, carry = state
    return (i < max_len) & ~finished(carry)
  return jax.lax.while_loop(cond, lambda state: (state[0] + 1, body(*state)), (0, init))[1]


def _take_beams(tree, flat_index, rows: int):
  """Selects rows of every batch-major array in the cache (scalars such as the index stay)."""
  return jax.tree.map(lambda x: x[flat_index] if x.ndim and x.shape[0] == rows else x, tree)


def beam_search(step_fn: StepFn, first_logits, cache, start_positions, *, beam_size: int,
                max_len: int, eos_id: int, alpha: float = 0.6, early_stop: bool = True):
  """Beam search with GNMT length normalisation.

  A hypothesis is finished when it emits EOS; its score is log P / lp(length). The search keeps
  the beam_size best finished hypotheses and the beam_size best unfinished ones for max_len
  steps; rows with no finished hypothesis fall back to their unfinished beams. With
  `early_stop`, the search ends as soon as no unfinished beam can still enter the finished
  ones (exact for alpha >= 0: the result is the same as searching all max_len steps).

  Args:
    first_logits: [batch, vocab] logits of the first token to generate.
    cache: the step function's cache for `batch` rows (copied per beam here).
    start_positions: [batch] position of the first generated token.
  Returns:
    (tokens [batch, beam_size, max_len] best first, PAD after EOS; scores [batch, beam_size]).
  """
  batch, vocab = first_logits.shape
  k = beam_size
  rows = batch * k
  repeat = lambda x: jnp.repeat(x, k, axis=0) if x.ndim and x.shape[0] == batch else x
  cache = jax.tree.map(repeat, cache)
  positions = jnp.repeat(start_positions, k)

  def body(i, carry):
    logits, cache, alive_seq, alive_logp, fin_seq, fin_score = carry
    logp = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(batch, k, vocab)
    logp = (logp + alive_logp[..., None]).reshape(batch, k * vocab)
    scores, index = jax.lax.top_k(logp, 2 * k)  # Enough to keep k alive after EOS ones.
    beam, token = index // vocab, (index % vocab).astype(jnp.int32)
    seq = jnp.take_along_axis(alive_seq, beam[..., None], axis=1).at[:, :, i].set(token)
    is_eos = token == eos_id

    done_score = jnp.where(is_eos, scores / length_penalty(i + 1.0, alpha), NEG_INF)
    all_seq = jnp.concatenate([fin_seq, seq], axis=1)
    fin_score, best = jax.lax.top_k(jnp.concatenate([fin_score, done_score], axis=1), k)
    fin_seq = jnp.take_along_axis(all_seq, best[..., None], axis=1)

    alive_logp, best = jax.lax.top_k(jnp.where(is_eos, NEG_INF, scores), k)
    alive_seq = jnp.take_along_axis(seq, best[..., None], axis=1)
    parent = jnp.take_along_axis(beam, best, axis=1)
    cache = _take_beams(cache, (jnp.arange(batch)[:, None] * k + parent).reshape(-1), rows)
    next_token = jnp.take_along_axis(token, best, axis=1).reshape(rows, 1)
    logits, cache = step_fn(next_token, (positions + i)[:, None], cache)
    return logits, cache, alive_seq, alive_logp, fin_seq, fin_score

  # Only the first beam is live at the start, so the k beams do not repeat one hypothesis.
  alive_logp = jnp.tile(jnp.asarray([0.0] + [NEG_INF] * (k - 1), jnp.float32), (batch, 1))
  init = (jnp.repeat(first_logits, k, axis=0), cache,
          jnp.zeros((batch, k, max_len), jnp.int32), alive_logp,
          jnp.zeros((batch, k, max_len), jnp.int32), jnp.full((batch, k), NEG_INF, jnp.float32))
  def settled(carry):
    # Exact early stop (alpha >= 0): a live beam can still lose probability but its length
    # penalty grows at most to lp(max_len), so alive_logp / lp(max_len) bounds its final
    # score. Once no row's best bound beats its k-th finished score, nothing can change.
    _, _, _, alive_logp, _, fin_score = carry
    bound = alive_logp.max(axis=1) / length_penalty(float(max_len), alpha)
    if not early_stop or alpha < 0:
      return jnp.asarray(False)
    return jnp.all(bound < fin_score.min(axis=1))

  _, _, alive_seq, alive_logp, fin_seq, fin_score = _loop_until(settled, body, max_len, init)
  alive_score = alive_logp / length_penalty(float(max_len), alpha)
  none_finished = (fin_score[:, :1] <= NEG_INF / 2)
  tokens = jnp.where(none_finished[..., None], alive_seq, fin_seq)
  return tokens, jnp.where(none_finished, alive_score, fin_score)


def generate(model, prompt: jax.Array, *, max_new_tokens: int, beam_size: int = 1,
             alpha: float = 0.6, eos_id: int = tokenizer_lib.EOS_ID):
  """Continues each row of `prompt` [batch, P] (positions 0..P-1) with a causal LM, jitted.
  Returns tokens [batch, max_new_tokens] (the best beam with beam_size > 1)."""
  graphdef, state = nnx.split(model)
  return _generate(graphdef, state, prompt, max_new_tokens, beam_size, alpha, eos_id)


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5, 6))
def _generate(graphdef, state, prompt, max_new_tokens, beam_size, alpha, eos_id):
  model = nnx.merge(graphdef, state)
  batch, length = prompt.shape
  cache = model.init_cache(batch, length + max_new_tokens)
  positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
  logits, cache = model.decode(prompt, positions, cache)

  def step_fn(token, position, cache):
    logits, cache = model.decode(token, position, cache)
    return logits[:, -1], cache

  start = jnp.full((batch,), length, jnp.int32)
  if beam_size == 1:
    return greedy_search(step_fn, logits[:, -1], cache, start, max_len=max_new_tokens,
                         eos_id=eos_id)
  tokens, _ = beam_search(step_fn, logits[:, -1], cache, start, beam_size=beam_size,
                          max_len=max_new_tokens, eos_id=eos_id, alpha=alpha)
  return tokens[:, 0]
