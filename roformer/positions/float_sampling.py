"""Random float sampling of positions (Shimizu et al., Findings of EACL 2026, arXiv 2602.14050):
training and evaluation positions are real numbers from one shared range, so a longer input
at evaluation brings no position the model has not trained on.

With `config.train.float_positions` S > 0, each training sequence of n tokens takes n values
drawn uniformly from [0, S) and sorted, a new draw per sequence and step (each packed document
draws its own), in place of 0, 1, ..., n - 1: the spacing between neighbours varies from draw
to draw around S / n. Evaluation puts the n tokens of a row of n on an even grid of the same
range,

  p_i = (i + 1/2) * S / max(S, n),     i = 0..n - 1,

the midpoints of n equal cells when n >= S (the paper's (2i - 1) / (2 max(n_train, n_infer))
with positions in [0, 1), times S), and i + 1/2 for a row no longer than S: the integer
positions moved by half a step, the same distances. A row longer than S is thus compressed into
the trained range, with spacings S / n that training's random spacings covered. The paper draws
from [0, 1) and does not state the factor its encodings scale them by; S = data.seq_len (mean
spacing 1, as integer positions) is the natural choice and the one the configs here use.

The positions are real numbers, so the scheme must read them as such (a kind that declares
`real_positions`: RoPE, ALiBi, sinusoidal, ...; not a learned table or T5's buckets). S is at
least data.seq_len. The evaluation grid depends on the row's length, so a row is evaluated
whole. Decoding with a cache (generate.py) feeds integer positions: for a kind that reads only
distances they equal the grid up to S; an absolute one (sinusoidal, FoPE) sees them half a step
off, and a row past S is not compressed. The Hugging Face export refuses such a model. With
packed rows of text, each document draws over the whole range (spacing about S / m for m
tokens) while evaluation spaces a row's tokens by the row's width: for short packed documents
the two differ (the synthetic tasks hold one example a row, as the paper's do).
"""

import jax
import jax.numpy as jnp

from roformer import errors
from roformer import specs
from roformer.positions import training


def float_positions(key: jax.Array, segment_ids: jax.Array, top: float) -> jax.Array:
  """float32 [batch, len] training positions: within each packed segment (segment id > 0) its
  tokens' values drawn uniformly from [0, top) and sorted; 0 on padding (segment id 0)."""
  batch, length = segment_ids.shape
  values = jax.random.uniform(key, (batch, length), jnp.float32, 0.0, float(top))
  # Sorted by (segment, value): segments are contiguous runs in increasing order of id, so each
  # keeps its own slots; padding sorts last.
  group = jnp.where(segment_ids > 0, segment_ids, length + 1).astype(jnp.int32)
  _, ordered = jax.lax.sort((group, values), dimension=-1, num_keys=2)
  return jnp.where(segment_ids > 0, ordered, 0.0)


def evaluation_positions(positions: jax.Array, top: float) -> jax.Array:
  """float32: each row's positions 0..n-1 (restarting in every packed segment) on the grid
  (i + 1/2) * top / max(top, n), n the row's width."""
  n = positions.shape[-1]
  return (positions.astype(jnp.float32) + 0.5) * (float(top) / max(float(top), n))


@training.register('float')
class FloatSampling(training.Sampler):
  """`config.train.float_positions` S > 0: training positions sorted uniform draws from [0, S),
  evaluation positions the grid (i + 1/2) S / max(S, n) (module docstring); 0: off."""

  # Fixed with the run: S is the range the model trained on, and its evaluation grid's.
  options = {'float_positions': specs.kept(
      ('resume', 'evaluate'), 'the range of real positions the model trained on and is '
      'evaluated on', specs.Int(0, 2**24, default=0))}
  switch = 'float_positions'
  real = True
  seed = 2311

  @classmethod
  def validate(cls, config):
    top, seq_len = config.train.float_positions, config.data.seq_len
    if top < seq_len:
      raise errors.ConfigError(
          f'config.train.float_positions={top} is below config.data.seq_len={seq_len}: a row '
          'would train on positions closer than integer ones, and the range the model trains '
          f'on would be shorter than its rows. Fix: {seq_len} (the mean spacing of integer '
          'positions) or more.')

  @classmethod
  def draw(cls, key, batch, train):
    return float_positions(key, batch['inputs_segment_ids'], train.float_positions)

  @classmethod
  def evaluated(cls, batch, train):
    return evaluation_positions(batch['inputs_positions'], train.float_positions)
