"""Greedy search, sampling and beam search with an incremental key/value cache.

All three drive a `step_fn(tokens [N, 1], positions [N, 1], cache) -> (logits [N, V], cache)`
from the logits of the first generated token, so the same code serves the causal LM (`generate`)
and the encoder-decoder (`tasks.Translation`). Everything runs inside `lax.while_loop`s with
fixed shapes: one, or one before and one after each step that `refills` names (`refilling`).
Sampling draws from `filter_logits` (temperature, top-k, top-p) with a key folded from the seed
and the step only, so a seed gives the same samples whatever the data.
"""

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from roformer import errors
from roformer.data import tokenizer as tokenizer_lib

StepFn = Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]]
PAD_ID = tokenizer_lib.PAD_ID
NEG_INF = -1.0e9


def length_penalty(length, alpha: float):
  """GNMT (Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6)^alpha; scores are log P(Y) / lp(Y)."""
  return ((5.0 + length) / 6.0) ** alpha


def greedy_search(step_fn: StepFn, first_logits, cache, start_positions, *, max_len: int,
                  eos_id: int, refills=None):
  """Argmax decoding of up to max_len tokens [batch, max_len]; PAD after a row's EOS.
  `refills`: {step i: its own step function} (`refilling`)."""
  return _extend(step_fn, lambda logits, i: jnp.argmax(logits, axis=-1), first_logits, cache,
                 start_positions, max_len, eos_id, refills)


def _extend(step_fn: StepFn, choose, first_logits, cache, start_positions, max_len: int,
            eos_id: int, refills=None):
  """Appends choose(logits [batch, V], step) -> tokens [batch] for up to max_len steps."""
  batch = first_logits.shape[0]

  def body(step_fn, i, carry):
    tokens, logits, cache, done = carry
    token = jnp.where(done, PAD_ID, choose(logits, i)).astype(jnp.int32)
    tokens = tokens.at[:, i].set(token)
    done = done | (token == eos_id)
    logits, cache = step_fn(token[:, None], (start_positions + i)[:, None], cache)
    return tokens, logits, cache, done

  init = (jnp.zeros((batch, max_len), jnp.int32), first_logits, cache,
          jnp.zeros((batch,), bool))
  # Stops early once every row has emitted EOS (the rest stays PAD either way).
  return _loop_until(lambda carry: jnp.all(carry[3]), body, step_fn, refills, max_len,
                     init)[0]


# A nucleus "reaches" top_p when its float32 cumulative probability is within this of top_p, so
# that rounding of a sum that equals top_p exactly does not keep one token more.
TOP_P_TOLERANCE = 1e-6


def check_sampling(temperature, top_k, top_p, prefix: str = '') -> None:
  """Raises ConfigError naming the argument (`prefix` + name, e.g. '--' for flags) and the
  fix when a sampling setting is out of range."""
  if not temperature >= 0:  # Also refuses NaN.
    raise errors.ConfigError(f'{prefix}temperature={temperature} must be >= 0. Fix: 0 for '
                             'greedy decoding, 1 to sample from the model as it is.')
  if top_k < 0:
    raise errors.ConfigError(f'{prefix}top_k={top_k} must be >= 0. Fix: 0 keeps every token, '
                             'k > 0 the k most likely.')
  if not 0 < top_p <= 1:
    raise errors.ConfigError(f'{prefix}top_p={top_p} must be in (0, 1]. Fix: 1 keeps every '
                             'token, e.g. 0.9 the smallest set holding 90% of the probability.')


def filter_logits(logits, *, temperature=1.0, top_k: int = 0, top_p=None):
  """The logits sampling draws from: logits / temperature (> 0), then -inf outside the top_k
  most likely tokens (0: off; ties go to the lower id, as with argmax), then -inf outside the
  nucleus: the smallest set of most likely tokens whose probability, renormalised after top-k,
  reaches top_p (None or 1: off; within TOP_P_TOLERANCE). The most likely token always stays.

  Args:
    logits: [..., V] (any float dtype; the result is float32).
    temperature: a float or a traced scalar.
    top_k: static.
    top_p: None, a float or a traced scalar in (0, 1].
  """
  logits = logits.astype(jnp.float32) / temperature
  vocab = logits.shape[-1]
  top_k = top_k if 0 < top_k < vocab else 0
  if not top_k and top_p is None:
    return logits
  if top_p is None:  # Top-k alone: a partial sort is enough.
    _, order = jax.lax.top_k(logits, top_k)
    keep_sorted = jnp.ones(order.shape, bool)
  else:
    order = jnp.argsort(-logits, axis=-1, stable=True)  # Most likely first, ties by id.
    ranked = jnp.take_along_axis(logits, order, axis=-1)
    rank = jnp.arange(vocab)
    if top_k:
      ranked = jnp.where(rank < top_k, ranked, -jnp.inf)
    probs = jax.nn.softmax(ranked, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # Probability of the more likely tokens.
    keep_sorted = (before < top_p - TOP_P_TOLERANCE) | (rank == 0) | (top_p >= 1.0)
    if top_k:
      keep_sorted &= rank < top_k
  keep = jnp.put_along_axis(jnp.zeros(logits.shape, bool), order, keep_sorted, axis=-1,
                            inplace=False)
  return jnp.where(keep, logits, -jnp.inf)


def sample(step_fn: StepFn, first_logits, cache, start_positions, *, key: jax.Array,
           max_len: int, eos_id: int, temperature=1.0, top_k: int = 0, top_p=None,
           refills=None):
  """Ancestral sampling of up to max_len tokens [batch, max_len] (PAD after a row's EOS): each
  row draws its next token from filter_logits(logits, temperature, top_k, top_p), with the key
  fold_in(key, step) shared by the rows (each row draws its own noise from it). Temperature 0
  takes the argmax exactly. temperature and top_p may be traced (changing them or the key does
  not recompile); top_k and whether top_p is None are static. `refills`: as greedy_search's."""
  temperature = jnp.asarray(temperature, jnp.float32)
  hot = temperature > 0

  def choose(logits, i):
    filtered = filter_logits(logits, temperature=jnp.where(hot, temperature, 1.0), top_k=top_k,
                             top_p=top_p)
    drawn = jax.random.categorical(jax.random.fold_in(key, i), filtered, axis=-1)
    return jnp.where(hot, drawn, jnp.argmax(logits, axis=-1))

  return _extend(step_fn, choose, first_logits, cache, start_positions, max_len, eos_id,
                 refills)


def _loop_until(finished, body, step_fn, refills, max_len, init):
  """body(step_fn, i, carry) for i in 0..max_len-1, stopping as soon as finished(carry) holds;
  at each step i of `refills` ({i: another step function}, or None), body(refills[i], i, carry)
  instead.

  The steps between refills run in a while loop each, and each refill once, after the loop
  before it: a step chosen inside one loop (lax.switch) would copy the whole cache at every
  step, and a refill under lax.cond held a second copy of a beam search's cache (0.4x of it
  more memory). A search that finished before the first refill runs that one step anyway
  (numbered where it stopped), which changes none of its outputs: finished rows take PAD, and a
  settled beam search's finished beams cannot be displaced (`beam_search`); the loop after it
  stops at once. A later refill is skipped there (lax.cond, once), since it would read the
  logits that the earlier one computed for a prefix that was never decoded."""
  def until(stop):
    def cond(state):
      i, carry = state
      return (i < stop) & ~finished(carry)
    return lambda state: jax.lax.while_loop(
        cond, lambda state: (state[0] + 1, body(step_fn, *state)), state)

  state = (jnp.int32(0), init)
  for k, at in enumerate(sorted(refills or {})):
    if not 0 <= at < max_len:
      raise ValueError(f'refill at step {at}, outside 0..{max_len - 1}')
    state = until(at)(state)
    step = lambda state, at=at: (state[0] + 1, body(refills[at], *state))
    state = step(state) if k == 0 else jax.lax.cond(finished(state[1]), lambda s: s, step,
                                                    state)
  return until(max_len)(state)[1]


def _take_beams(tree, flat_index, rows: int):
  """Selects rows of every batch-major array in the cache (scalars such as the index stay)."""
  return jax.tree.map(lambda x: x[flat_index] if x.ndim and x.shape[0] == rows else x, tree)


def beam_search(step_fn: StepFn, first_logits, cache, start_positions, *, beam_size: int,
                max_len: int, eos_id: int, alpha: float = 0.6, early_stop: bool = True,
                refills=None):
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
    refills: {step i: its own step function} (`refilling`), or None.
  Returns:
    (tokens [batch, beam_size, max_len] best first, PAD after EOS; scores [batch, beam_size]).
  """
  batch, vocab = first_logits.shape
  k = beam_size
  rows = batch * k
  repeat = lambda x: jnp.repeat(x, k, axis=0) if x.ndim and x.shape[0] == batch else x
  cache = jax.tree.map(repeat, cache)
  positions = jnp.repeat(start_positions, k)

  def body(step_fn, i, carry):
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

  _, _, alive_seq, alive_logp, fin_seq, fin_score = _loop_until(settled, body, step_fn, refills,
                                                                max_len, init)
  alive_score = alive_logp / length_penalty(float(max_len), alpha)
  none_finished = (fin_score[:, :1] <= NEG_INF / 2)
  tokens = jnp.where(none_finished[..., None], alive_seq, fin_seq)
  return tokens, jnp.where(none_finished, alive_score, fin_score)


def generate(model, prompt: jax.Array, *, max_new_tokens: int, beam_size: int = 1,
             alpha: float = 0.6, eos_id: int = tokenizer_lib.EOS_ID, temperature: float = 0.0,
             top_k: int = 0, top_p: float = 1.0, seed=0):
  """Continues each row of `prompt` [batch, P] (positions 0..P-1) with a causal LM, jitted.

  temperature 0 (the default) decodes greedily, or with beam search for beam_size > 1 (the
  best beam); temperature > 0 samples (see `sample`; top_k 0 and top_p 1 are off) with the key
  `seed` (an int or a jax.random key). Changing the seed, temperature or top_p reuses the
  compiled program. Returns tokens [batch, max_new_tokens], PAD after a row's EOS.

  A model that computes every position anew past a length n (its `cache_breaks`: LongRoPE's
  original length) fills a fresh cache over the whole prefix at the step that feeds position n
  (`refilling`), so that each token, greedy, sampled or in a beam, is what a full pass over its
  prefix gives."""
  check_sampling(temperature, top_k, top_p)
  if max_new_tokens < 1:
    raise errors.ConfigError(f'max_new_tokens={max_new_tokens} must be >= 1.')
  graphdef, state = nnx.split(model)
  if temperature == 0:  # top_k and top_p cannot change the argmax.
    return _generate(graphdef, state, prompt, max_new_tokens, beam_size, alpha, eos_id)
  if beam_size > 1:
    raise errors.ConfigError(f'beam_size={beam_size} searches and temperature={temperature} '
                             'samples: choose one. Fix: beam_size=1 or temperature=0.')
  return _sample(graphdef, state, prompt, _key(seed), jnp.float32(temperature),
                 jnp.float32(top_p), max_new_tokens, eos_id, top_k, top_p < 1)


def _key(seed):
  """`seed` as a jax.random key (an int, or a key already)."""
  if isinstance(seed, jax.Array) and jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key):
    return seed
  return jax.random.key(seed)


def refilling(decode_fn, fresh_cache, breaks, ids, cache, first_position: int):
  """(step_fn, refills, cache) for a model that computes every position anew from a position n
  of `breaks` on (its `cache_breaks`; LongRoPE's original length: past it, every position
  rotates by its long set).

  decode_fn(tokens [N, len], positions [N, len], cache) -> (logits of the last [N, V], cache)
  runs the model through a cache; fresh_cache(cache, slots) is an empty one of `slots` slots for
  the same rows. `ids` [N, slots of `cache`] holds the tokens so far (the prompt), from
  position 0; the searches' first step feeds `first_position`. The step that feeds position n
  (refills[n - first_position], for the searches' `refills`) fills fresh_cache(cache, n + 1)
  over every token up to n, where extending the cache would keep states that earlier calls
  computed at the short set; every other step (step_fn) extends it. The cache then carries the
  ids (beam search reorders them with the keys and values). Every row is at the same position.
  Only the breaks that decoding feeds count: from first_position to the last position whose
  logits are read (the last slot but one). Without them: decode_fn, no refills and `cache`
  itself."""
  breaks = tuple(n for n in breaks if first_position <= n <= ids.shape[1] - 2)
  if not breaks:
    return decode_fn, {}, cache

  def write(token, position, state):
    return jax.lax.dynamic_update_slice(state['ids'], token.astype(jnp.int32),
                                        (0, position[0, 0]))

  def step_fn(token, position, state):
    logits, cache = decode_fn(token, position, state['cache'])
    return logits, {'cache': cache, 'ids': write(token, position, state)}

  def refill(n):
    def step(token, position, state):
      ids = write(token, position, state)
      prefix = jnp.broadcast_to(jnp.arange(n + 1), (ids.shape[0], n + 1))
      logits, filled = decode_fn(ids[:, :n + 1], prefix, fresh_cache(state['cache'], n + 1))
      # Slots past n are still empty.
      return logits, {'cache': _grown(filled, state['cache']), 'ids': ids}
    return step

  return (step_fn, {n - first_position: refill(n) for n in breaks},
          {'cache': cache, 'ids': ids})


class Start(NamedTuple):
  """What `causal_lm_start` returns: the searches' arguments."""
  step_fn: StepFn
  first_logits: jax.Array  # [batch, V]
  cache: Any
  start_positions: jax.Array  # [batch]
  refills: dict  # {step: its step function} (`refilling`)


def prefill(model, prompt):
  """A causal LM over `prompt` [batch, P] (positions 0..P-1) into a cache of its own P slots,
  without rings (its queries attend over its own keys, in causal blocks: Site.fills_cache):
  (logits of the last token [batch, 1, V], the filled cache)."""
  batch, length = prompt.shape
  positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
  return model.decode(prompt, positions, model.init_cache(batch, length, rings=False),
                      last_only=True)


def causal_lm_start(model, prompt, max_new_tokens: int) -> Start:
  """Runs a causal LM over `prompt` [batch, P] into a cache with room for max_new_tokens more,
  for the searches: (step_fn, logits of the first new token, cache, its positions, refills).

  The prompt fills a cache of its own P slots, which is then copied into the first slots of
  an empty one of P + max_new_tokens (`_grown`): its queries attend over the P keys alone,
  where over the larger cache their logits, masked past P, would cost (P + max_new_tokens) / P
  times the work and memory. Its windowed layers too keep every slot (`rings` off), and the
  copy keeps their last window in their rings (roformer/window_cache.py). The model's
  `cache_breaks` that decoding feeds refill the cache there (`refilling`)."""
  batch, length = prompt.shape
  slots = length + max_new_tokens
  logits, filled = prefill(model, prompt)
  cache = _grown(filled, model.init_cache(batch, slots))

  def decode_fn(tokens, positions, cache):
    logits, cache = model.decode(tokens, positions, cache, last_only=True)
    return logits[:, -1], cache

  ids = jnp.zeros((batch, slots), jnp.int32).at[:, :length].set(prompt)
  step_fn, refills, cache = refilling(
      decode_fn, lambda cache, n: model.init_cache(cache['positions'].shape[0], n, rings=False),
      model.cache_breaks, ids, cache, length)
  return Start(step_fn, logits[:, -1], cache, jnp.full((batch,), length, jnp.int32), refills)


def _grown(filled, empty):
  """`filled`, a cache of P slots, in the first P slots of `empty`, a cache of more slots with
  the same structure: each array that differs in shape differs in its slot axis alone (keys,
  values, positions, a scheme's per-slot state) and is written at slot 0; the others (the
  index, a translation's memory) are `filled`'s. Where `empty` holds a windowed layer's ring
  of W < P slots (roformer/window_cache.py), it takes the last W of `filled`'s, cache slot s
  at ring slot s mod W (for P <= W, slot s is at s: the first P)."""
  def grow(small, big):
    if small.shape == big.shape:
      return small
    differ = [i for i, (a, b) in enumerate(zip(small.shape, big.shape)) if a != b]
    if len(differ) != 1 or small.ndim != big.ndim:
      raise ValueError(f'a cache array of shape {small.shape} against {big.shape}: they must '
                       'differ in their slot axis alone')
    axis, (p, w) = differ[0], (small.shape[differ[0]], big.shape[differ[0]])
    if p > w:  # A ring: slots p - w .. p - 1, the first of them at (p - w) mod w.
      last = jax.lax.slice_in_dim(small, p - w, p, axis=axis)
      return jnp.roll(last, (p - w) % w, axis=axis).astype(big.dtype)
    return jax.lax.dynamic_update_slice(big, small.astype(big.dtype), (0,) * big.ndim)
  return jax.tree.map(grow, filled, empty)


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5, 6))
def _generate(graphdef, state, prompt, max_new_tokens, beam_size, alpha, eos_id):
  step_fn, logits, cache, start, refills = causal_lm_start(nnx.merge(graphdef, state), prompt,
                                                           max_new_tokens)
  if beam_size == 1:
    return greedy_search(step_fn, logits, cache, start, max_len=max_new_tokens, eos_id=eos_id,
                         refills=refills)
  tokens, _ = beam_search(step_fn, logits, cache, start, beam_size=beam_size,
                          max_len=max_new_tokens, eos_id=eos_id, alpha=alpha, refills=refills)
  return tokens[:, 0]


@functools.partial(jax.jit, static_argnums=(0, 6, 7, 8, 9))
def _sample(graphdef, state, prompt, key, temperature, top_p, max_new_tokens, eos_id, top_k,
            use_top_p):
  step_fn, logits, cache, start, refills = causal_lm_start(nnx.merge(graphdef, state), prompt,
                                                           max_new_tokens)
  return sample(step_fn, logits, cache, start, key=key, max_len=max_new_tokens, eos_id=eos_id,
                temperature=temperature, top_k=top_k, top_p=top_p if use_top_p else None,
                refills=refills)
