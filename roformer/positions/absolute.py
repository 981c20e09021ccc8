"""Absolute schemes: a code for each position added to the token embeddings (or to every
layer's input): none, sinusoidal (Vaswani et al. 2017), learned (BERT, GPT-2)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import errors
from roformer import specs
from roformer import variables
from roformer.positions import base
from roformer.positions import registry


@base.register('none')
class NoPositions(base.PositionScheme):
  """No position information at all (a causal mask still leaks some, Haviv et al. 2022)."""

  capabilities = base.Capabilities(reads_positions=False, latent_cache=True)


def sinusoidal_table(positions: jax.Array, dim: int, base: float = 10000.0) -> jax.Array:
  """Vaswani et al. 2017: PE[p, 2k] = sin(p * w_k), PE[p, 2k+1] = cos(p * w_k),
  w_k = 1 / base^(2k/d). Returns float32 [..., len, dim] for integer positions [..., len]."""
  if dim % 2:
    raise errors.ConfigError(f'sinusoidal encodings need an even model dimension, got {dim}.')
  omega = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(omega, jnp.float32)
  # Interleave: sin on even dimensions, cos on odd ones.
  return jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(*angles.shape[:-1], dim)


class _SinusoidalEmbedding(base.Shared):

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    self.dim = model_cfg.d_model
    self.base = float(model_cfg.position.sinusoidal.base)

  def embed(self, x, positions):
    return x + sinusoidal_table(positions, self.dim, self.base).astype(x.dtype)


@base.register('sinusoidal')
class Sinusoidal(base.PositionScheme):
  """Fixed sinusoidal absolute encodings added to the token embeddings."""

  options = {'sinusoidal': {'base': specs.Float(1, 1e12, min_open=True, default=10000.0)}}
  capabilities = base.Capabilities(real_positions=True, latent_cache=True)
  Shared = _SinusoidalEmbedding

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if model_cfg.d_model % 2:
      raise errors.ConfigError(f'config.model.d_model={model_cfg.d_model} must be even for '
                               'sinusoidal positions. Fix: use an even d_model.')


def _table(length, dim, rngs) -> nnx.Param:
  table = nnx.initializers.normal(stddev=0.02)(rngs.params(), (length, dim))
  return variables.param(table, (None, None), decay=True)


def _add_rows(table: nnx.Param, x, positions):
  return x + jnp.take(table[...], positions, axis=0).astype(x.dtype)


class _LearnedEmbedding(base.Shared):
  """The table added to the token embeddings (none with `per_layer`: each layer has its own)."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    cfg = model_cfg.position.learned
    self.per_layer = bool(cfg.per_layer)
    if not self.per_layer:
      self.table = _table(cfg.max_length, model_cfg.d_model, rngs)

  def embed(self, x, positions):
    return x if self.per_layer else _add_rows(self.table, x, positions)


class _LearnedLayerInput(base.Layer):
  """With `per_layer`, this layer's table, added at its input."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    cfg = model_cfg.position.learned
    self.per_layer = bool(cfg.per_layer)
    if self.per_layer:
      self.table = _table(cfg.max_length, model_cfg.d_model, rngs)

  def layer_input(self, x, positions, shared):
    return _add_rows(self.table, x, positions) if self.per_layer else x


LEARNED = 'learned'  # The learned table's registered kind: GPT-2's positions.


@base.register(LEARNED)
class Learned(base.PositionScheme):
  """Trained absolute position embeddings (BERT, GPT-2); with `per_layer`, one table per layer
  added at every layer's input (Al-Rfou et al. 2019)."""

  options = {'learned': {'max_length': specs.Int(1, 2**24, default=2048),
                         'per_layer': specs.Bool(default=False)}}
  capabilities = base.Capabilities(latent_cache=True)
  Shared, Layer = _LearnedEmbedding, _LearnedLayerInput

  @classmethod
  def legacy_params(cls, cfg):
    if cfg.learned.per_layer:
      return ((r'tables/(\d+)/table', 'layer:table'),)
    return ((r'tables/0/table', 'table'),)

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if seq_len > cfg.learned.max_length:
      raise errors.ConfigError(
          f'sequence length {seq_len} is longer than the learned position table '
          f'(config.model.position.learned.max_length={cfg.learned.max_length}). Fix: shorten the '
          f'sequence to at most {cfg.learned.max_length} (a model that starts from a trained one, '
          f'config.init_from, keeps its table), or, for a new model, raise '
          f'--config.model.position.learned.max_length to at least {seq_len}.')

  @classmethod
  def max_length(cls, cfg):
    return int(cfg.learned.max_length)


def learned_rows(model_cfg) -> int | None:
  """The rows of the one learned table that every layer's positions come from, added to the
  embeddings (GPT-2's, which transformers' GPT-2 class computes); None for any other layout,
  per-layer tables included."""
  if registry.model_scheme(model_cfg) is not Learned or model_cfg.position.learned.per_layer:
    return None
  return int(model_cfg.position.learned.max_length)
