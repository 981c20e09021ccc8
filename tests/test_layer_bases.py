"""RoPE bases per layer (model.layer_rope_bases), a scaling on the global layers only
(rope.scaling.layers='global') and Gemma 3's layout (configs/lm.py:gemma3)."""

import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import lm
from configs import test as test_config
from roformer import errors
from roformer import models
from roformer import resolve


def _logits(model, tokens):
  pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return np.asarray(nnx.jit(lambda m: m(tokens, pos, jnp.ones_like(tokens)))(model))


def test_each_layer_rotates_with_its_own_base():
  cfg = kinds.tiny_config('rope', num_layers=3, layer_rope_bases=(100.0, 1e6)).model
  model = models.create(cfg, seed=0)
  bases = [block.position.heads.base for block in model.blocks]
  assert bases == [100.0, 1e6, 100.0]  # Cycled over the layers.
  theta = np.asarray(model.blocks[1].position.heads.inv_freq)
  np.testing.assert_allclose(theta, 1e6 ** (-np.arange(0, 8, 2) / 8), rtol=1e-12)


def test_one_base_for_every_layer_is_that_base():
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 12)))
  per_layer = kinds.tiny_config('rope', layer_rope_bases=(500.0,)).model
  plain = kinds.tiny_config('rope').model
  plain.position.rope.base = 500.0
  np.testing.assert_array_equal(_logits(models.create(per_layer, seed=1), tokens),
                                _logits(models.create(plain, seed=1), tokens))
  other = _logits(models.create(kinds.tiny_config('rope').model, seed=1), tokens)
  assert np.abs(other - _logits(models.create(plain, seed=1), tokens)).max() > 1e-4


def test_gemma3_is_five_windowed_layers_at_10k_then_one_global_at_1m():
  cfg = lm.get_config('gemma3')
  resolve.validate(cfg)
  model = models.create(cfg.model, seed=0)
  assert [b.attn.window for b in model.blocks] == [cfg.data.seq_len // 4] * 5 + [0]
  assert [b.position.heads.base for b in model.blocks] == [1e4] * 5 + [1e6]


def test_decoding_a_layout_with_bases_and_windows_equals_the_full_pass():
  cfg = kinds.tiny_config('rope', num_layers=3, layer_windows=(3, 3, 0),
                          layer_rope_bases=(1e4, 1e4, 1e6)).model
  tokens = jnp.asarray(np.random.default_rng(2).integers(5, 50, (2, 10)))
  kinds.assert_decoding_equals_full_pass(models.create(cfg, seed=3), tokens, (4, 1, 1, 2, 2))


def test_a_scaling_on_the_global_layers_leaves_the_windowed_ones_plain():
  """layers='global' (Gemma 3's linear factor): each windowed layer rotates by its base's
  plain frequencies, each global one by the scaled ones; the model equals one whose windowed
  layers were built unscaled and whose global ones were built scaled."""
  fields = dict(num_layers=3, layer_windows=(3, 0), layer_rope_bases=(1e4, 1e6))
  cfg = kinds.tiny_config('rope', **fields).model
  cfg.position.rope.scaling.update(kind='linear', factor=8.0, layers='global')
  model = models.create(cfg, seed=0)
  plain = lambda base: base ** (-np.arange(0, 8, 2) / 8)
  freqs = [np.asarray(b.position.heads.inv_freq) for b in model.blocks]
  np.testing.assert_allclose(freqs[0], plain(1e4), rtol=1e-12)  # Windowed: unscaled.
  np.testing.assert_allclose(freqs[1], plain(1e6) / 8, rtol=1e-12)  # Global: scaled.
  np.testing.assert_allclose(freqs[2], plain(1e4), rtol=1e-12)
  tokens = jnp.asarray(np.random.default_rng(4).integers(5, 50, (2, 12)))
  every = kinds.tiny_config('rope', **fields).model
  every.position.rope.scaling.update(kind='linear', factor=8.0)
  assert np.abs(_logits(model, tokens) - _logits(models.create(every, seed=0), tokens)).max() > 1e-4
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 7))
  cfg.scan_layers = True  # One scan over a period of two structures, then the last layer.
  np.testing.assert_allclose(_logits(models.create(cfg, seed=0), tokens), _logits(model, tokens),
                             atol=1e-5)


@pytest.mark.parametrize('fields,message', [
    ({'layer_windows': (4,), 'position.rope.scaling.kind': 'linear',
      'position.rope.scaling.factor': 2.0, 'position.rope.scaling.layers': 'global'},
     r"layers='global' scales the layers without a sliding window, and every layer has one"),
    ({'position.rope.scaling.layers': 'global'},
     r"scaling.layers shapes a scaling, but the scaling kind is 'none'"),
    ({'position.kind': 'alibi', 'layer_rope_bases': (1e4,)}, 'but no layer rotates'),
    ({'layer_rope_bases': (1e4, 1e6), 'position.rope.base': 500.0},
     r'rope.base=500 is not read: config.model.layer_rope_bases=\(10000.0, 1000000.0\) gives '
     r'each layer its base\. Fix: put 500 in layer_rope_bases'),
])
def test_bases_and_scalings_that_cannot_apply_are_refused_naming_the_field(fields, message):
  cfg = test_config.get_config('rope')
  kinds.set_fields(cfg.model, fields)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)
