"""BERT's masking for the masked LM: which tokens are selected and how each is corrupted, and
how many positions a batch block gives output logits (`prediction_slots`: enough for the
selection with a bound on what is lost past them, from the exact binomial tail)."""

import math

import jax
import jax.numpy as jnp

from roformer.data import tokenizer as tokenizer_lib


def mask_tokens(key, inputs, segment_ids, *, mask_id: int, rate: float = 0.15,
                mask_fraction: float = 0.8, random_fraction: float = 0.1,
                max_selected: int | None = None, groups: int = 1):
  """BERT's corruption: each real token (not padding, bos or eos) is selected with probability
  `rate`; a selected token becomes `mask_id` with probability mask_fraction, a random ordinary
  token (ids NUM_SPECIAL..mask_id-1) with probability random_fraction, and stays itself
  otherwise. With `max_selected`, the rows are cut into `groups` equal blocks and a block keeps
  only its first `max_selected` selections (the others stay unselected and uncorrupted).
  Returns (corrupted inputs, selected: bool)."""
  k_select, k_how, k_random = jax.random.split(key, 3)
  real = (segment_ids > 0) & (inputs != tokenizer_lib.BOS_ID) & (inputs != tokenizer_lib.EOS_ID)
  selected = real & (jax.random.uniform(k_select, inputs.shape) < rate)
  if max_selected is not None:
    block = selected.reshape(groups, -1)
    block &= jnp.cumsum(block, axis=1, dtype=jnp.int32) <= max_selected
    selected = block.reshape(inputs.shape)
  how = jax.random.uniform(k_how, inputs.shape)
  random_tokens = jax.random.randint(k_random, inputs.shape, tokenizer_lib.NUM_SPECIAL, mask_id,
                                     dtype=inputs.dtype)
  corrupted = jnp.where(selected & (how < mask_fraction), mask_id, inputs)
  corrupted = jnp.where(selected & (how >= mask_fraction) &
                        (how < mask_fraction + random_fraction), random_tokens, corrupted)
  return corrupted, selected


# The automatic number of prediction slots leaves unmasked, in expectation, at most this fraction
# of a Bernoulli(rate) selection (the selections past the slots stay unmasked): the masking rate
# is then `rate` to within this relative error. A selection goes past the slots with
# probability 4e-5 to 5e-5 per block and step at the benchmark shapes, losing a few then.
LOST_FRACTION = 1e-6


def selection_bound(tokens: int, rate: float, lost: float = LOST_FRACTION) -> int:
  """The smallest multiple of 8, s, with E[(X - s)+] <= lost * E[X] for the selected count
  X ~ Binomial(tokens, rate): the selections expected past s, from the exact binomial pmf (a
  normal approximation is too light-tailed at low rates). The pmf is walked up from
  floor(tokens * rate), at or below the mode, until it vanishes; going back down,
  E[(X - s + 1)+] = E[(X - s)+] + P(X > s - 1)."""
  if rate >= 1.0:
    return 8 * math.ceil(tokens / 8)
  start = int(tokens * rate)
  log_pmf = (math.lgamma(tokens + 1) - math.lgamma(start + 1) - math.lgamma(tokens - start + 1)
             + start * math.log(rate) + (tokens - start) * math.log1p(-rate))
  pmf, k = [math.exp(log_pmf)], start
  while k < tokens and (k <= tokens * rate + 1 or pmf[-1] > 1e-300):
    pmf.append(pmf[-1] * (tokens - k) / (k + 1) * rate / (1 - rate))
    k += 1
  above = excess = 0.0  # P(X > s) and E[(X - s)+] at s = start + i, from the end down.
  bound = 8 * math.ceil((start + len(pmf)) / 8)
  for i in range(len(pmf) - 1, -1, -1):
    if (start + i) % 8 == 0 and excess <= lost * tokens * rate:
      bound = start + i
    above += pmf[i]
    excess += above
  return bound


def prediction_slots(max_predictions: int, rate: float, rows: int, length: int) -> int | None:
  """How many positions of a block of `rows` x `length` tokens get masked-LM logits, or None
  for all of them. `max_predictions` > 0: that many per row (BERT's max_predictions_per_seq);
  -1: `selection_bound` (a Bernoulli(rate) selection is expected to lose at most LOST_FRACTION
  of its selections past it); 0: every position."""
  tokens = rows * length
  if max_predictions > 0:
    slots = max_predictions * rows
  elif max_predictions == -1:
    slots = selection_bound(tokens, rate)
  else:
    return None
  return None if slots >= tokens else slots
