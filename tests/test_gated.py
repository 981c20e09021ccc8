"""Gated attention (attention.output_gate): each head's output times sigmoid(x W_g + b) before
the output projection."""

import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import attention
from roformer import errors
from roformer import models
from roformer import resolve


def _model(kind='rope', **attention):
  cfg = kinds.tiny_config(kind, dropout=0.0).model
  cfg.attention.update(output_gate=True, **attention)
  return models.create(cfg, seed=4)


def _logits(model, tokens):
  pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return np.asarray(nnx.jit(lambda m: m(tokens, pos, jnp.ones_like(tokens)))(model))


def test_a_gate_of_one_half_is_the_output_projection_halved():
  """With W_g = 0 and b = 0 every gate is sigmoid(0) = 1/2: the model equals the same model
  without gates whose output projections are halved (exactly: a product by 1/2)."""
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 10)))
  model = _model()
  for block in model.blocks:
    block.attn.gate.kernel[...] = jnp.zeros_like(block.attn.gate.kernel[...])
    block.attn.gate.bias[...] = jnp.zeros_like(block.attn.gate.bias[...])
  gated = _logits(model, tokens)
  for block in model.blocks:
    block.attn.option_fields = ()  # The same layer without its gate.
    block.attn.out.kernel[...] = block.attn.out.kernel[...] * 0.5
  np.testing.assert_allclose(_logits(model, tokens), gated, atol=1e-6)


def test_a_gated_layer_is_the_formula_with_a_gate_per_head_and_dimension():
  """A drawn W_g [d_model, heads * head_dim] and b: the layer is float64 attention whose
  heads' outputs are times sigmoid(x W_g + b) before the output projection (no positions, so
  the logits are q.k/sqrt(d) alone); packed segments of 5 and 7 tokens."""
  model = _model('none')
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  assert attn.gate.kernel[...].shape == (32, 32) and attn.gate.bias[...].shape == (32,)
  rng = np.random.default_rng(1)
  attn.gate.kernel[...] = jnp.asarray(rng.normal(size=(32, 32)) * 0.5, jnp.float32)
  attn.gate.bias[...] = jnp.asarray(rng.normal(size=32), jnp.float32)
  x = jnp.asarray(rng.normal(size=(2, 12, 32)), jnp.float32)
  seg = jnp.asarray([[1] * 12, [1] * 5 + [2] * 7], jnp.int32)
  pos = jnp.asarray([list(range(12)), list(range(5)) + list(range(7))], jnp.int32)
  mask = attention.make_mask(seg, seg, causal=True)
  out, _ = attn(x, mask, pos, layer)
  want = kinds.attention_formula(attn, x, mask, 0.0, gate=(attn.gate.kernel[...],
                                                           attn.gate.bias[...]))
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-4, atol=2e-5)
  ungated = kinds.attention_formula(attn, x, mask, 0.0)  # The gate is not a no-op here.
  assert np.abs(want - ungated).max() > 0.1 * np.abs(ungated).max()


@pytest.mark.parametrize('kind', ['rope', pytest.param('none', marks=pytest.mark.slow),
                                  pytest.param('alibi', marks=pytest.mark.slow)])
def test_decoding_a_gated_model_with_the_cache_equals_the_full_pass(kind):
  tokens = jnp.asarray(np.random.default_rng(2).integers(5, 50, (2, 9)))
  kinds.assert_decoding_equals_full_pass(_model(kind), tokens, (4, 1, 1, 3))


def test_the_gate_is_counted_in_the_flops():
  from roformer import flops  # pylint: disable=g-import-not-at-top
  cfg = test_config.get_config('rope').model
  plain = flops.layer_flops_per_token(cfg, 32, causal=True)
  cfg.attention.output_gate = True
  assert flops.layer_flops_per_token(cfg, 32, causal=True) - plain == 2 * 32 * 32


def test_gating_favor_is_refused_naming_the_field():
  cfg = test_config.get_config('rope')
  cfg.model.attention.update(output_gate=True, kind='favor')
  with pytest.raises(errors.ConfigError, match="output_gate=True .a sigmoid gate on each head's output.: attention.kind='favor' has no per-head outputs"):
    resolve.validate(cfg)
