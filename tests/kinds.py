"""Position kinds for per-kind tests, taken from the registry. The default run covers RoPE end
to end in the heavier per-kind checks (every scheme's math is checked on its own in
test_positions/test_schemes, and every kind trains at a tiny size in
test_scheme_interface.py); `python -m pytest -m slow` runs the heavier checks for the others as well.
The structural checks that run for many kinds (no leak, packed rows, the cache, the attention
implementations) run by default for one kind of each set of declared capabilities (`by_capabilities`),
so that every combination of capabilities the registry holds is covered; the others under -m slow."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer import attention
from roformer import models
from roformer import positions

ALL = tuple(positions.kinds())
# The registry's kinds and one combination of each bias-only kind with RoPE (kind 'A+B').
WITH_COMBINED = ALL + tuple(f'rope+{b}' for b in positions.bias_kinds())
FAST = ('rope',)


def params(kinds=ALL, fast=FAST):
  return [k if k in fast else pytest.param(k, marks=pytest.mark.slow) for k in kinds]


def by_capabilities(kinds=WITH_COMBINED):
  """`kinds` as parameters: the first of each set of equal capabilities runs by default, the
  rest under -m slow."""
  first = {}
  for kind in kinds:
    first.setdefault(signature(kind), kind)
  return params(kinds, fast=tuple(first.values()))


def tiny_config(kind: str, **model):
  """configs/test.py with `kind`, a 50-id vocabulary and the `model` fields given: the small
  causal LM the per-scheme tests build their layers from."""
  from configs import test as test_config  # pylint: disable=g-import-not-at-top
  config = test_config.get_config(kind)
  config.model.vocab_size = config.data.vocab_size = 50
  config.model.update(model)
  return config


def set_fields(node, fields: dict) -> None:
  """Sets each dotted field of `fields` ('attention.kind': value) under the config `node`."""
  for dotted, value in fields.items():
    *parents, leaf = dotted.split('.')
    target = node
    for parent in parents:
      target = target[parent]
    target[leaf] = value


def signature(kind: str) -> tuple[bool, ...]:
  """The kind's declared capabilities, each as whether it holds (`logits_term` is a
  description: kinds that add different terms to the logits take the same code paths), but for
  `real_positions`, which decides only which training positions a kind takes, not a path of
  the model that the structural checks run."""
  caps = dataclasses.replace(positions.capabilities(kind), real_positions=False)
  return tuple(bool(v) for v in dataclasses.astuple(caps))


def with_capability(name: str, value=True) -> tuple[str, ...]:
  """The registered kinds whose capability `name` is `value` (truthy for a string)."""
  return tuple(k for k in ALL if bool(getattr(positions.capabilities(k), name)) == value)


@nnx.jit
def _full_pass(model, tokens, positions):
  return model(tokens, positions, jnp.ones_like(tokens))


@nnx.jit
def _decode(model, tokens, positions, cache):  # Compiled: far faster than op by op.
  return model.decode(tokens, positions, cache)


@nnx.jit
def _call(model, *args):
  return model(*args)


class Compiled:
  """`model` called through one jitted function (a few compiled programs per test instead of
  every operation dispatched and compiled on its own: several times faster at these sizes);
  its attributes are the model's."""

  def __init__(self, model):
    self.model = model

  def __call__(self, *args):
    return _call(self.model, *args)

  def __getattr__(self, name):
    return getattr(self.model, name)


def attention_formula(attn, x, mask, bias, *, qk_norm=False, ssmax=False, query_factor=None,
                      gate=None, qk_norm_eps=1e-6, qk_norm_over='head', scale_dim=None,
                      softcap=None, clip=None, softmax_scale=None, sink=None):
  """One softmax attention layer (`attn`, fused q/k/v, one key/value head per query head, of
  any head width) in float64: optional RMSNorm of each head's q and k (scale per dimension,
  epsilon `qk_norm_eps`; with `qk_norm_over='heads'`, of all the heads' q, and k, at once;
  scales of heads x head_dim apply each head its own), optional factor per
  query position (Llama 4's temperature), logits q.k/sqrt(d) + bias (d: `scale_dim`, else the
  heads' width), times s_h log n_i with n_i the visible keys (SSMax), capped to c tanh(l / c)
  with c `softcap` (the logits q.k times `softmax_scale` in place of 1/sqrt(d) where that is
  given), softmax over the visible keys (and a head's `sink` logit, which weights nothing),
  values, each head's output times sigmoid(x gate_kernel + gate_bias) when `gate` is (kernel,
  bias), output projection; with `clip`, q, k and v clamped to [-clip, clip] first."""
  f64 = lambda a: np.asarray(a, np.float64)
  dim = attn.head_dim
  q, k, v = float64_qkv(attn, x)
  if clip:
    q, k, v = (np.clip(t, -clip, clip) for t in (q, k, v))
  if qk_norm:
    axes = (-1,) if qk_norm_over == 'head' else (-2, -1)
    rms = lambda t: t / np.sqrt((t ** 2).mean(axes, keepdims=True) + qk_norm_eps)
    # [1 or heads, dim]; 1 where the norm has no scale.
    scale = lambda s: f64(s[...]).reshape(-1, dim) if s is not None else 1.0
    q, k = (rms(q) * scale(getattr(attn, 'q_scale', None)),
            rms(k) * scale(getattr(attn, 'k_scale', None)))
  if query_factor is not None:
    q = q * f64(query_factor)[None, :, None, None]
  factor = softmax_scale if softmax_scale else 1 / np.sqrt(scale_dim or dim)
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) * factor + bias
  mask = np.broadcast_to(np.asarray(mask), logits.shape)
  if ssmax:
    n = mask.sum(-1, keepdims=True)
    logits = logits * f64(attn.ssmax_scale[...])[None, :, None, None] * np.log(np.maximum(n, 1))
  return float64_softmax_layer(attn, logits, v, mask, softcap=softcap, gate=gate, x=x,
                               sink=sink)


def layer_inputs(model, seed: int, length: int = 12):
  """(attention module, position module, x, positions, mask) of `model`'s first block: random
  inputs [2, length, d_model], the second row two packed documents (the second from slot 5,
  its positions restarting there), the causal mask of those segments."""
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(2, length, attn.out.kernel.shape[-1])), jnp.float32)
  seg = jnp.asarray([[1] * length, [1] * 5 + [2] * (length - 5)], jnp.int32)
  pos = jnp.asarray([list(range(length)), list(range(5)) + list(range(length - 5))], jnp.int32)
  return attn, layer, x, pos, attention.make_mask(seg, seg, causal=True)


def scheme_bias(attn, layer, x, pos, mask) -> np.ndarray:
  """The position scheme's additive bias [batch or 1, heads, q, k] of the layer's inputs, in
  float64 (for schemes whose bias does not read q and k)."""
  stub = jnp.zeros(x.shape[:2] + (attn.num_heads, attn.head_dim))
  return np.asarray(layer.logits_bias(stub, stub, pos, pos, mask, layer.prepare(x, pos, None)),
                    np.float64)


def float64_qkv(attn, x):
  """The layer's float64 q, k, v [batch, len, heads, head_dim] (fused q/k/v, one key/value
  head per query head)."""
  b, length, _ = x.shape
  qkv = (np.asarray(x, np.float64) @ np.asarray(attn.qkv.kernel[...], np.float64)
         + np.asarray(attn.qkv.bias[...], np.float64))
  return np.split(qkv.reshape(b, length, 3 * attn.num_heads, attn.head_dim), 3, axis=2)


def float64_softmax_layer(attn, logits, v, mask, *, softcap=None, gate=None, x=None,
                          sink=None):
  """The rest of the layer in float64 from its logits [batch, heads, q, k]: capped to
  c tanh(l / c) with c `softcap`, softmax over the visible keys (its denominator plus
  exp(sink_h) where a `sink` [heads] is given), values, each head's output times
  sigmoid(x gate_kernel + gate_bias) when `gate` is (kernel, bias), output projection."""
  f64 = lambda a: np.asarray(a, np.float64)
  logits = f64(logits)
  if softcap:
    logits = softcap * np.tanh(logits / softcap)
  logits = np.where(np.asarray(mask), logits, -np.inf)
  top = logits.max(-1, keepdims=True)
  sink_term = 0.0
  if sink is not None:
    sink = f64(sink)[None, :, None, None]
    top = np.maximum(top, sink)
    sink_term = np.exp(sink - top)
  probs = np.exp(logits - top)
  probs /= probs.sum(-1, keepdims=True) + sink_term
  out = np.einsum('bhqk,bkhd->bqhd', probs, v).reshape(v.shape[0], v.shape[1], -1)
  if gate is not None:
    out = out / (1 + np.exp(-(f64(x) @ f64(gate[0]) + f64(gate[1]))))
  return out @ f64(attn.out.kernel[...]) + f64(attn.out.bias[...])


def assert_decoding_equals_full_pass(model, tokens, sizes, max_len: int = 16, atol=1e-4,
                                     full=None):
  """Feeds `tokens` [batch, len] through the key/value cache in steps of `sizes` and checks
  every step's logits against one full pass over the whole row (positions 0..len-1), or
  against `full` where the caller has that pass's logits. Returns the final cache."""
  batch, length = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(length), (batch, length))
  full = np.asarray(_full_pass(model, tokens, pos) if full is None else full)
  cache, start = model.init_cache(batch, max_len), 0
  for size in sizes:
    logits, cache = _decode(model, tokens[:, start:start + size], pos[:, start:start + size],
                            cache)
    np.testing.assert_allclose(np.asarray(logits), full[:, start:start + size], atol=atol)
    start += size
  return cache


def assert_implementations_agree(cfg, tokens, positions_, segments, impls=('einsum', 'pallas'),
                                 atol=1e-5, grad_atol=5e-5):
  """The model of `cfg` (its attention_impl set to each of `impls`, seed 1) gives the first
  implementation's logits and every parameter's gradient of a fixed loss on the others."""
  results = []
  for impl in impls:
    cfg.attention_impl = impl
    model = models.create(cfg, seed=1)

    def loss(model):
      out = model(tokens, positions_, segments)
      return jnp.sum(out * jnp.cos(jnp.arange(out.size).reshape(out.shape))), out
    results.append(nnx.value_and_grad(loss, has_aux=True)(model))
  (_, want), want_grads = results[0]
  for (_, got), got_grads in results[1:]:
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=atol)
    for g, w in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads)):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=grad_atol)


def visible_positions(model, seed: int = 0):
  """`model` with CoPE's position embeddings drawn at random: they start at zero (as in the
  paper), where CoPE's bias vanishes and a test of it would pass without checking anything."""
  rng = np.random.default_rng(seed)
  for stack in ('blocks', 'encoder_blocks', 'decoder_blocks'):
    for block in getattr(model, stack, ()):
      layer = block.position
      if hasattr(layer, 'embeddings'):
        layer.embeddings.value = jnp.asarray(rng.normal(size=layer.embeddings.shape), jnp.float32)
  return model


class View:
  """Layer i's position module with the stack's shared arrays bound, so that a test calls its
  hooks as the attention does, on hand-made queries and keys."""

  def __init__(self, module, shared, d_model=None):
    self.module, self.shared, self.d_model = module, shared, d_model

  def __getattr__(self, name):  # Its parameters and constants.
    return getattr(self.module, name)

  def _ctx(self, positions):
    """The layer's context for a fixed random input (schemes that read it: FoX's gates), or
    for none when built without `d_model`."""
    x = None if self.d_model is None else jax.random.normal(
        jax.random.key(0), positions.shape + (self.d_model,))
    return self.module.prepare(x, positions, self.shared)

  def layer_input(self, x, positions):
    return self.module.layer_input(x, positions, self.shared)

  def rotate(self, q, k, q_pos, k_pos):
    return self.module.rotate(q, k, q_pos, k_pos, self._ctx(q_pos))

  def rotate_value(self, v, k_pos):
    return self.module.rotate_value(v, k_pos, self._ctx(k_pos))

  def logits_bias(self, q, k, q_pos, k_pos, mask=None):
    return self.module.logits_bias(q, k, q_pos, k_pos, mask, self._ctx(q_pos))

  def logits(self, q, k, q_pos, k_pos, mask):
    return self.module.logits(q, k, q_pos, k_pos, mask, self._ctx(q_pos))

  def value_term(self, probs, q_pos, k_pos):
    return self.module.value_term(probs, q_pos, k_pos, self._ctx(q_pos))


class Built(nnx.Module):
  """A scheme's modules as a stack of `model_cfg.num_layers` blocks builds them."""

  def __init__(self, model_cfg, *, causal, rngs):
    positions.validate(model_cfg, 0, causal)
    cls = positions.scheme(model_cfg.position.kind)
    self.d_model = model_cfg.d_model
    self.shared = cls.Shared(model_cfg, causal=causal, rngs=rngs)
    self.layers = nnx.List([cls.Layer(model_cfg, causal=causal, rngs=rngs)
                            for _ in range(model_cfg.num_layers)])

  def embed(self, x, positions_):
    return self.shared.embed(x, positions_)

  def for_layer(self, index: int) -> View:
    return View(self.layers[index], self.shared(), self.d_model)

  def rotate(self, q, k, q_pos, k_pos):  # Schemes without per-layer parameters: layer 0's.
    return self.for_layer(0).rotate(q, k, q_pos, k_pos)

  def rotate_value(self, v, k_pos):
    return self.for_layer(0).rotate_value(v, k_pos)

  def logits_bias(self, q, k, q_pos, k_pos, mask=None):
    return self.for_layer(0).logits_bias(q, k, q_pos, k_pos, mask)


def assert_lowers_for_cuda(attend, bias, length: int, heads: int = 2, head_dim: int = 16):
  """`attend` (roformer/fused_bias.py's or fused_stick_breaking.py's, interpret mode off) with
  `bias`, forward and gradient of q and the bias parameters, lowered for CUDA from the CPU
  (jax.export): its kernels go through Triton, which raises here on what it cannot lower
  (blocks that are not powers of 2, a stack of scalars, rounding)."""
  from jax import export  # pylint: disable=g-import-not-at-top
  x = jnp.zeros((1, length, heads, head_dim), jnp.bfloat16)
  pos = jnp.broadcast_to(jnp.arange(length), (1, length))
  seg = jnp.ones((1, length), jnp.int32)
  params = jnp.ones((heads, max(bias.num_params, 1)), jnp.float32)
  row = jnp.zeros((1, heads, length)) if bias.separable else None

  def loss(q, params):
    out = attend(q, x, x, pos, seg, bias, params=params, row=row, col=row, interpret=False)
    return jnp.sum(out.astype(jnp.float32))
  export.export(jax.jit(jax.grad(loss, argnums=(0, 1))), platforms=['cuda'], disabled_checks=[
      export.DisabledSafetyCheck.custom_call('__gpu$xla.gpu.triton')])(x, params)
