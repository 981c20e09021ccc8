"""The shared Transformer stack and the task models built on it.

One pre-LayerNorm stack (multi-head attention + GELU MLP) serves every model; it is parameterized
by a position scheme from `roformer.positions`, whose hooks it calls at fixed points. Dropout is
functional (an explicit key per call), so a train step stays a pure function of its inputs.
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from roformer import attention
from roformer import errors
from roformer import positions as positions_lib


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def _split(key, n):
  return [None] * n if key is None else list(jax.random.split(key, n))


class MultiHeadAttention(nnx.Module):
  """Self-attention whose position information comes entirely from the scheme's hooks."""

  def __init__(self, cfg: ml_collections.ConfigDict, *, dtype, rngs: nnx.Rngs):
    d = cfg.d_model
    self.num_heads = cfg.num_heads
    self.head_dim = d // cfg.num_heads
    self.impl = cfg.attention_impl
    init = nnx.initializers.normal(stddev=d ** -0.5)
    self.qkv = nnx.Linear(d, 3 * d, kernel_init=init, dtype=dtype, rngs=rngs)
    self.out = nnx.Linear(d, d, kernel_init=nnx.initializers.normal(stddev=d ** -0.5 / (
        2 * cfg.num_layers) ** 0.5), dtype=dtype, rngs=rngs)

  def __call__(self, x, mask, pos, scheme: positions_lib.PositionScheme):
    b, length, _ = x.shape
    q, k, v = jnp.split(self.qkv(x).reshape(b, length, 3 * self.num_heads, self.head_dim), 3, axis=2)
    q, k = scheme.rotate(q, k, pos, pos)
    v = scheme.rotate_value(v, pos)
    bias = scheme.logits_bias(q, k, pos, pos)
    out, probs = attention.attend(q, k, v, mask, bias=bias, impl=self.impl)
    if scheme.has_value_term:
      out = out + scheme.value_term(probs, pos, pos)
    return self.out(out.reshape(b, length, -1))


class MLP(nnx.Module):

  def __init__(self, cfg, *, dtype, rngs):
    d, f = cfg.d_model, cfg.d_ff
    self.up = nnx.Linear(d, f, kernel_init=nnx.initializers.normal(stddev=d ** -0.5),
                         dtype=dtype, rngs=rngs)
    self.down = nnx.Linear(f, d, kernel_init=nnx.initializers.normal(
        stddev=f ** -0.5 / (2 * cfg.num_layers) ** 0.5), dtype=dtype, rngs=rngs)

  def __call__(self, x):
    return self.down(jax.nn.gelu(self.up(x)))


class Block(nnx.Module):
  """Pre-LayerNorm Transformer block."""

  def __init__(self, cfg, *, dtype, rngs):
    self.ln_attn = nnx.LayerNorm(cfg.d_model, dtype=dtype, rngs=rngs)
    self.attn = MultiHeadAttention(cfg, dtype=dtype, rngs=rngs)
    self.ln_mlp = nnx.LayerNorm(cfg.d_model, dtype=dtype, rngs=rngs)
    self.mlp = MLP(cfg, dtype=dtype, rngs=rngs)
    self.dropout_rate = cfg.dropout

  def __call__(self, x, mask, pos, scheme, key=None):
    """`scheme` is this layer's view of the position scheme (`scheme.for_layer(i)`)."""
    k1, k2 = _split(key, 2)
    x = scheme.layer_input(x, pos)
    x = x + dropout(self.attn(self.ln_attn(x), mask, pos, scheme), self.dropout_rate, k1)
    return x + dropout(self.mlp(self.ln_mlp(x)), self.dropout_rate, k2)


class Transformer(nnx.Module):
  """Token embedding, position scheme, a stack of blocks, a final LayerNorm, tied output layer."""

  causal = False  # Whether attention is causal: schemes such as t5 and xpos depend on it.

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    dtype = jnp.dtype(cfg.get('dtype', 'float32'))
    self.cfg = cfg
    self.dtype = dtype
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, dtype=dtype,
                           embedding_init=nnx.initializers.normal(stddev=1.0), rngs=rngs)
    self.position = positions_lib.create(cfg, causal=self.causal, rngs=rngs)
    self.blocks = nnx.List([Block(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_layers)])
    self.ln_final = nnx.LayerNorm(cfg.d_model, dtype=dtype, rngs=rngs)

  def encode(self, tokens, positions, mask, key=None):
    """Hidden states [batch, len, d_model] for integer tokens and positions [batch, len]."""
    keys = _split(key, len(self.blocks) + 1)
    x = self.position.embed(self.embed(tokens), positions)
    x = dropout(x, self.cfg.dropout, keys[-1])
    for i, (block, k) in enumerate(zip(self.blocks, keys)):
      x = block(x, mask, positions, self.position.for_layer(i), k)
    return self.ln_final(x)

  def logits(self, hidden):
    """Tied output layer; float32 logits scaled by 1/sqrt(d_model) to match the N(0, 1) init."""
    logits = self.embed.attend(hidden) * jnp.asarray(self.cfg.d_model ** -0.5, hidden.dtype)
    return logits.astype(jnp.float32)


class CausalLM(Transformer):
  """Decoder-only language model: causal mask plus segment masking for packed documents."""

  causal = True

  def __call__(self, tokens, positions, segment_ids, key=None):
    mask = attention.make_mask(segment_ids, segment_ids, causal=True)
    return self.logits(self.encode(tokens, positions, mask, key))


MODELS = {'causal_lm': CausalLM}


def is_causal(cfg: ml_collections.ConfigDict) -> bool:
  return MODELS[cfg.type].causal


def create(cfg: ml_collections.ConfigDict, *, seed: int = 0):
  """Builds the model named by `cfg.type` with parameters drawn from `seed`."""
  if cfg.type not in MODELS:
    raise errors.ConfigError(f'config.model.type={cfg.type!r} is unknown. Fix: one of {sorted(MODELS)}.')
  return MODELS[cfg.type](cfg, rngs=nnx.Rngs(params=seed))
