"""The Transformer block: self-attention and an MLP as residual branches, each behind a norm,
and the layer's own position module. The block composes the components its config names
(roformer/layers.py: the norm and the MLP; roformer/self_attention.py: the head layout) and
lays out its residual branches:

- `model.norm`: 'pre' (the norm before each branch, the default), 'post' (after each
  residual sum: BERT, Hugging Face RoFormer), 'sandwich' (before each branch and on its
  output, before the sum: x + norm_2(attn(norm_1 x)), Gemma 2 and 3) or 'output' (on each
  branch's output alone: x + norm(attn(x)), OLMo 2 and 3);
- `model.residual`: 'sequential' (x + attn(norm(x)), then + mlp(norm(.)): most families),
  'parallel' (GPT-NeoX: x + attn(norm_1(x)) + mlp(norm_2(x)), both branches read the block's
  input) or 'parallel_shared' (Phi-1 and 2, GPT-J, Falcon 7B: x + attn(h) + mlp(h) with
  h = norm(x), one norm for both branches);
- `model.residual_multiplier`: each branch's output times this constant before its sum
  (x + m attn(norm x): Granite's `residual_multiplier`, after muP); 1 leaves it unscaled.
"""

import jax.numpy as jnp
from flax import nnx

from roformer import layers
from roformer import positions as positions_lib
from roformer import self_attention

PLACEMENTS = ('pre', 'post', 'sandwich', 'output')  # config.model.norm
# The placements with a norm before each branch, and those with one on its output.
BEFORE, AFTER = ('pre', 'post', 'sandwich'), ('sandwich', 'output')
RESIDUALS = ('sequential', 'parallel', 'parallel_shared')  # config.model.residual


def scaled(out, multiplier: float):
  """A branch's output times model.residual_multiplier (as it is where that is 1)."""
  return out if multiplier == 1.0 else out * jnp.asarray(multiplier, out.dtype)


def residual(x, sublayer, norm, post: bool, rate: float, key, out_norm=None,
             multiplier: float = 1.0):
  """x + dropout(sublayer(norm(x))) (pre-norm), x + dropout(out_norm(sublayer(norm(x))))
  (sandwich; without `norm`, None: the output norm alone), or norm(x + dropout(sublayer(x)))
  (post-norm), the branch's output times `multiplier` before the sum. `sublayer` returns
  (output, extra); returns (new x, extra)."""
  out, extra = sublayer(x if post or norm is None else norm(x))
  if out_norm is not None:
    out = out_norm(out)
  x = x + layers.dropout(scaled(out, multiplier), rate, key)
  return (norm(x) if post else x), extra


class Block(nnx.Module):
  """Transformer block: self-attention and MLP, each a residual branch with its norm, and the
  layer's own position module (`position`, the scheme's Layer: its per-layer parameters).
  `layer`, its index in the stack, decides what differs by layer beyond the config's
  per-layer view (a mixture's dense layers)."""

  def __init__(self, cfg, *, dtype, rngs, causal: bool = True, window: int = 0,
               chunk: int = 0, layer: int = 0):
    # Built in this order, which decides each parameter's random draw.
    self.before, self.after = cfg.norm in BEFORE, cfg.norm in AFTER
    self.add_norm('ln_attn', self.before, cfg, dtype, rngs)
    self.attn = self_attention.MultiHeadAttention(cfg, dtype=dtype, rngs=rngs, causal=causal,
                                                  window=window, chunk=chunk)
    # One norm before both branches where they share it.
    self.shared_norm = cfg.residual == 'parallel_shared'
    self.add_norm('ln_mlp', self.before and not self.shared_norm, cfg, dtype, rngs)
    self.mlp = layers.mlp(cfg, dtype=dtype, rngs=rngs, layer=layer)
    self.dropout_rate = cfg.dropout
    self.post_norm = cfg.norm == 'post'
    for name in ('attn', 'mlp'):  # The norms of the branches' outputs.
      self.add_norm(f'ln_{name}_out', self.after, cfg, dtype, rngs)
    self.parallel = cfg.residual != 'sequential'
    self.multiplier = float(cfg.residual_multiplier)
    self.position = positions_lib.scheme(cfg.position.kind).Layer(cfg, causal=causal, rngs=rngs)

  def add_norm(self, name: str, placed: bool, cfg, dtype, rngs) -> None:
    """The norm `name` (`ln_<branch>` before a branch, `ln_<branch>_out` on its output) where
    the placement has it."""
    if placed:
      setattr(self, name, layers.norm(cfg, dtype=dtype, rngs=rngs))

  def in_norm(self, name):
    """The norm before branch `name` (None: its output's alone)."""
    return getattr(self, f'ln_{name}') if self.before else None

  def out_norm(self, name):
    """The norm of branch `name`'s output (sandwich and output placements), or None."""
    return getattr(self, f'ln_{name}_out') if self.after else None

  def __call__(self, x, mask, pos, shared=None, key=None, cache=None, segments=None, layer=0):
    """`shared`: what the stack's position Shared module returned; `layer`: this block's index.
    Returns (output, updated layer cache or None)."""
    k1, k2 = layers.split_key(key, 2)
    x = self.position.layer_input(x, pos, shared)
    attend = lambda h: self.attn(h, mask, pos, self.position, shared, cache, segments, layer)
    if self.parallel:  # Both branches read the block's input (pre-norm only: resolve).
      normed = self.ln_attn(x)
      out, cache = attend(normed)
      mlp_in = normed if self.shared_norm else self.ln_mlp(x)
      m = self.multiplier
      return (x + layers.dropout(scaled(out, m), self.dropout_rate, k1)
              + layers.dropout(scaled(self.mlp(mlp_in), m), self.dropout_rate, k2)), cache
    x, cache = residual(x, attend, self.in_norm('attn'), self.post_norm, self.dropout_rate, k1,
                        self.out_norm('attn'), self.multiplier)
    x, _ = residual(x, lambda h: (self.mlp(h), None), self.in_norm('mlp'), self.post_norm,
                    self.dropout_rate, k2, self.out_norm('mlp'), self.multiplier)
    return x, cache


class DecoderBlock(Block):
  """Decoder block: causal self-attention, cross-attention, MLP (sequential residuals)."""

  def __init__(self, cfg, *, dtype, rngs, layer: int = 0):
    super().__init__(cfg, dtype=dtype, rngs=rngs, layer=layer)
    self.add_norm('ln_cross', self.before, cfg, dtype, rngs)
    self.cross = self_attention.CrossAttention(cfg, dtype=dtype, rngs=rngs)
    self.add_norm('ln_cross_out', self.after, cfg, dtype, rngs)

  def __call__(self, x, mask, pos, shared=None, key=None, cache=None, segments=None, layer=0,
               *, memory, memory_mask):
    k1, k2, k3 = layers.split_key(key, 3)
    x = self.position.layer_input(x, pos, shared)
    post, rate, m = self.post_norm, self.dropout_rate, self.multiplier
    # `segments`: the targets' packed segments, for the kernels that read them (without a cache).
    attend = lambda h: self.attn(h, mask, pos, self.position, shared, cache, segments, layer)
    x, cache = residual(x, attend, self.in_norm('attn'), post, rate, k1, self.out_norm('attn'),
                        m)
    x, _ = residual(x, lambda h: (self.cross(h, memory, memory_mask), None),
                    self.in_norm('cross'), post, rate, k2, self.out_norm('cross'), m)
    x, _ = residual(x, lambda h: (self.mlp(h), None), self.in_norm('mlp'), post, rate, k3,
                    self.out_norm('mlp'), m)
    return x, cache
