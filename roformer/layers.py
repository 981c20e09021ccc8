"""The components a block is composed of, each chosen by one config field and declared in a
registry here: the norm (`model.normalization`), the MLP (`model.mlp`) and its activation, the
dense layers with the initialisation (`model.init`) and the biases (`model.biases`) of a model
family. The block (roformer/blocks.py) composes them; the attention's head layout
(`model.num_kv_heads`) is roformer/self_attention.py's.

Two families are spelled by these fields:
- the classic block (the defaults): LayerNorm, a plain GELU MLP, biases everywhere, T5's
  initialisation (N(0, 1) embedding read out at 1/sqrt(d_model), every dense layer
  N(0, 1/fan_in));
- the Llama family ("Transformer++", configs/lm.py:llama): RMSNorm, a gated SiLU MLP (SwiGLU),
  no biases, GPT-2/Llama's initialisation (every weight N(0, init_std^2), the layers that write
  into the residual stream at init_std / sqrt(2 num_layers), the output layer unscaled).
Qwen2 (q/k/v biases only) and GPT-NeoX (LayerNorm, plain GELU MLP, parallel residual) are other
settings of the same fields.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from roformer import attention
from roformer import dense_grad
from roformer import moe
from roformer import sharding
from roformer import variables


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def split_key(key, n):
  return [None] * n if key is None else list(jax.random.split(key, n))


def dense(d_in: int, d_out: int, *, dtype, rngs, axes=(None, None), fan_in_scale: float = 1.0,
          std: float | None = None, use_bias: bool = True) -> nnx.Linear:
  """A Linear layer with N(0, std^2) weights: std = fan_in_scale / sqrt(d_in) unless given. Its
  kernel has the logical `axes` (input, output) and decays; its bias (if any) follows the output
  axis. Its product's weight gradient is one 2-D product (roformer.dense_grad: XLA:CPU ran
  autodiff's 3x slower)."""
  kernel_init = nnx.initializers.normal(stddev=fan_in_scale * d_in ** -0.5 if std is None
                                        else std)
  return nnx.Linear(d_in, d_out, kernel_init=variables.init(kernel_init, axes, decay=True),
                    bias_init=variables.init(nnx.initializers.zeros, axes[1:], decay=False),
                    use_bias=use_bias, dtype=dtype, rngs=rngs, dot_general=dense_grad.dot_general)


# config.model.init: how the weights are drawn (the computation is the same but for the tied
# output layer's scale, which follows the embedding's: see `tied_logits_scale`).
INITS = {
    'classic': 'T5: N(0, 1) embedding, dense layers N(0, 1/fan_in), residual writes times '
               '1/sqrt(2 num_layers); the tied output layer reads the embedding at 1/sqrt(d)',
    'normal': 'GPT-2, GPT-NeoX, Llama: every weight N(0, init_std^2), residual writes '
              'init_std/sqrt(2 num_layers); the output layer is unscaled',
}


def init_name(cfg) -> str:
  return cfg.init


def weight_std(cfg, d_in: int, residual: bool = False) -> float:
  """The standard deviation of a block's dense weights under `model.init`; `residual`: the
  layer writes into the residual stream (an attention output or MLP down projection), drawn
  1/sqrt(2 num_layers) smaller."""
  shrink = (2 * cfg.num_layers) ** -0.5 if residual else 1.0
  if init_name(cfg) == 'normal':
    return cfg.init_std * shrink
  return shrink * d_in ** -0.5


def linear(cfg, d_in: int, d_out: int, *, dtype, rngs, axes, residual: bool = False,
           use_bias: bool = True) -> nnx.Linear:
  """A block's dense layer under `model.init` (`weight_std`)."""
  return dense(d_in, d_out, dtype=dtype, rngs=rngs, axes=axes,
               std=weight_std(cfg, d_in, residual), use_bias=use_bias)


def embedding_std(cfg) -> float:
  return cfg.init_std if init_name(cfg) == 'normal' else 1.0


def tied_logits_scale(cfg) -> float:
  """The tied output layer's multiplier: 1/sqrt(d_model) for the classic N(0, 1) embedding
  (T5's; its logits then start at unit scale), 1 for the `normal` initialisation (GPT-2's,
  Qwen2's tied embeddings)."""
  return cfg.d_model ** -0.5 if init_name(cfg) == 'classic' else 1.0


# config.model.biases: which dense layers of a block have a bias.
BIASES = {
    'all': ('qkv', 'out', 'mlp'),  # The classic block, GPT-NeoX.
    'attention': ('qkv', 'out'),  # Llama with attention_bias.
    'qkv': ('qkv',),  # Qwen2.
    'mlp': ('mlp',),  # GPT-J.
    'none': (),  # Llama, Mistral.
}


def has_bias(cfg, layer: str) -> bool:
  return layer in BIASES[cfg.biases]


ACTIVATIONS = {
    'gelu_tanh': lambda x: jax.nn.gelu(x, approximate=True),
    'gelu': lambda x: jax.nn.gelu(x, approximate=False),  # BERT's and Hugging Face's 'gelu'.
    'relu': jax.nn.relu,
    'silu': jax.nn.silu,  # SwiGLU's gate (Llama, Qwen2, Mistral).
    # Primer's squared ReLU (So et al. 2021): Nemotron's and Arcee's plain MLPs.
    'relu_squared': lambda x: jnp.square(jax.nn.relu(x)),
}


@dataclasses.dataclass(frozen=True)
class Component:
  """One choice of a block component: how it is built from the model config, what it is, and
  its forward model FLOPs per token (roformer/flops.py; the norms' are not counted); `problem`
  says what is wrong with its options in the model config, in one line, or None."""
  build: Callable
  about: str
  flops: Callable = lambda cfg: 0.0
  problem: Callable = lambda cfg: None


class RMSNorm(nnx.Module):
  """x / sqrt(mean(x^2) + eps) * scale over the last axis (Zhang & Sennrich 2019), in float32
  and returned in the activation dtype, as Llama computes it; no bias, no centring."""

  def __init__(self, d: int, *, eps: float, dtype):
    self.scale = variables.param(jnp.ones((d,), jnp.float32), (None,), decay=False)
    self.eps, self.dtype = eps, dtype

  def __call__(self, x):
    return attention.rms_norm(x, self.scale[...], self.eps).astype(self.dtype)


def layer_norm(cfg, *, dtype, rngs) -> nnx.LayerNorm:
  return nnx.LayerNorm(
      cfg.d_model, epsilon=cfg.layer_norm_eps, dtype=dtype, rngs=rngs,
      scale_init=variables.init(nnx.initializers.ones, (None,), decay=False),
      bias_init=variables.init(nnx.initializers.zeros, (None,), decay=False))


def layer_norm_unbiased(cfg, *, dtype, rngs) -> nnx.LayerNorm:
  return nnx.LayerNorm(
      cfg.d_model, epsilon=cfg.layer_norm_eps, dtype=dtype, rngs=rngs, use_bias=False,
      scale_init=variables.init(nnx.initializers.ones, (None,), decay=False))


def layer_norm_nonparametric(cfg, *, dtype, rngs) -> nnx.LayerNorm:
  return nnx.LayerNorm(cfg.d_model, epsilon=cfg.layer_norm_eps, dtype=dtype, rngs=rngs,
                       use_bias=False, use_scale=False)


NORMS = {
    'layer_norm': Component(layer_norm, 'LayerNorm: centred and scaled, a scale and a bias'),
    'layer_norm_unbiased': Component(layer_norm_unbiased,
                                     'LayerNorm without its bias: centred and scaled (MPT)'),
    'layer_norm_nonparametric': Component(
        layer_norm_nonparametric, 'LayerNorm without its scale or bias: centred alone (OLMo 1)'),
    'rms_norm': Component(
        lambda cfg, *, dtype, rngs: RMSNorm(cfg.d_model, eps=cfg.layer_norm_eps, dtype=dtype),
        'RMSNorm: scaled by the root mean square, a scale and no bias (Llama)'),
}


def norm(cfg, *, dtype, rngs):
  """The norm `model.normalization` names (eps `model.layer_norm_eps`)."""
  return NORMS[cfg.normalization].build(cfg, dtype=dtype, rngs=rngs)


class MLP(nnx.Module):
  """down(act(up(x))): the classic block's and GPT-NeoX's."""

  def __init__(self, cfg, *, dtype, rngs):
    d, f = cfg.d_model, cfg.d_ff
    bias = has_bias(cfg, 'mlp')
    self.activation = cfg.activation
    self.up = linear(cfg, d, f, dtype=dtype, rngs=rngs, axes=('embed', 'mlp'), use_bias=bias)
    self.down = linear(cfg, f, d, dtype=dtype, rngs=rngs, axes=('mlp', 'embed'), residual=True,
                       use_bias=bias)

  def __call__(self, x):
    hidden = sharding.constrain(self.up(x), ('batch', None, 'act_mlp'))
    return self.down(ACTIVATIONS[self.activation](hidden))


class GatedMLP(nnx.Module):
  """down(act(gate(x)) * up(x)) (Shazeer 2020): SwiGLU with `activation='silu'` (Llama, Qwen2,
  Mistral), GeGLU with 'gelu' or 'gelu_tanh'. Three d_model x d_ff matrices where the plain MLP
  has two: a gated model at equal parameters uses d_ff about 2/3 of the plain one's."""

  def __init__(self, cfg, *, dtype, rngs, width: int | None = None):
    d, f = cfg.d_model, width or cfg.d_ff
    bias = has_bias(cfg, 'mlp')
    self.activation = cfg.activation
    self.gate = linear(cfg, d, f, dtype=dtype, rngs=rngs, axes=('embed', 'mlp'), use_bias=bias)
    self.up = linear(cfg, d, f, dtype=dtype, rngs=rngs, axes=('embed', 'mlp'), use_bias=bias)
    self.down = linear(cfg, f, d, dtype=dtype, rngs=rngs, axes=('mlp', 'embed'), residual=True,
                       use_bias=bias)

  def __call__(self, x):
    gate = sharding.constrain(self.gate(x), ('batch', None, 'act_mlp'))
    up = sharding.constrain(self.up(x), ('batch', None, 'act_mlp'))
    return self.down(ACTIVATIONS[self.activation](gate) * up)


def mixture_of_experts(cfg, *, dtype, rngs) -> moe.MixtureOfExperts:
  width = cfg.moe.shared_d_ff
  shared = GatedMLP(cfg, dtype=dtype, rngs=rngs, width=width) if width else None
  return moe.MixtureOfExperts(
      cfg, dtype=dtype, rngs=rngs, std=lambda d_in, residual: weight_std(cfg, d_in, residual),
      activation=ACTIVATIONS[cfg.activation], shared=shared)


MLPS = {
    'plain': Component(MLP, 'down(act(up x)): the classic block, GPT-NeoX',
                       lambda cfg: 2 * 2 * cfg.d_model * cfg.d_ff),
    'gated': Component(GatedMLP, 'down(act(gate x) * up x): SwiGLU with silu (Llama), GeGLU '
                                 'with gelu', lambda cfg: 2 * 3 * cfg.d_model * cfg.d_ff),
    'moe': Component(mixture_of_experts, 'a mixture of gated experts, k per token '
                                         '(model.moe: Mixtral, OLMoE, Qwen-MoE)',
                     moe.flops_per_token,
                     lambda cfg: moe.validate(cfg, has_bias(cfg, 'mlp'))),
}


def mlp(cfg, *, dtype, rngs, layer: int = 0):
  """Layer `layer`'s MLP: the kind `model.mlp` names, or, in a mixture's dense layers
  (`moe.dense_layers`), a gated MLP of their width."""
  if cfg.mlp == 'moe' and moe.dense_layer(cfg, layer):
    return GatedMLP(cfg, dtype=dtype, rngs=rngs, width=moe.dense_width(cfg))
  return MLPS[cfg.mlp].build(cfg, dtype=dtype, rngs=rngs)
