"""Hybrid layouts (config.model.layer_kinds): each layer built with its own position kind,
cycled over the layers, the stack-wide modules passed to the layers of their kind, the cache,
and the settings refused before compiling."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import attention
from roformer import decode
from roformer import errors
from roformer import models
from roformer import positions
from roformer import resolve

TOKENS = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 11)))
POS = jnp.asarray([list(range(11)), list(range(4)) + list(range(7))])
SEG = jnp.asarray([[1] * 11, [1] * 4 + [2] * 7])


def tiny(pattern, num_layers, kind='rope', **model):
  config = test_config.get_config(kind)
  config.model.update(vocab_size=50, num_layers=num_layers, layer_kinds=pattern, **model)
  config.data.vocab_size = 50
  resolve.validate(config)
  return config


def test_each_layer_is_built_with_its_kind_in_a_cycle():
  """Llama 4's iRoPE over 5 layers: rope, rope, rope, none, rope (the pattern names each
  layer's kind, so it cannot be read the other way round)."""
  config = tiny(('rope', 'rope', 'rope', 'none'), 5)
  model = models.create(config.model, seed=0)
  assert positions.layer_kinds(config.model) == ('rope', 'rope', 'rope', 'none', 'rope')
  built = [type(block.position) for block in model.blocks]
  rope, none = positions.scheme('rope').Layer, positions.scheme('none').Layer
  assert built == [rope, rope, rope, none, rope]
  assert positions.model_scheme(config.model).capabilities.rotary


@pytest.mark.parametrize('kind', ['alibi', 'xl', 't5'])
def test_a_pattern_of_one_kind_is_that_kind(kind):
  """Every layer of one kind through the pattern (the stack-wide module held per kind, its
  value handed to each layer) gives the plain kind's outputs with the same parameters."""
  plain = models.create(tiny((), 2, kind).model, seed=1)
  hybrid = models.create(tiny((kind, kind), 2, kind).model, seed=1)
  nnx.update(hybrid.position.parts[kind], nnx.state(plain.position))
  nnx.update(hybrid.blocks, nnx.state(plain.blocks))
  nnx.update(hybrid.embed, nnx.state(plain.embed))
  np.testing.assert_allclose(hybrid(TOKENS, POS, SEG), plain(TOKENS, POS, SEG), atol=1e-6)


def test_the_layers_of_a_mixed_pattern_each_get_their_own_kinds_arrays():
  """xl then t5, both with stack-wide parameters: changing xl's u and v changes block 0's
  output and not block 1's, and changing t5's shared table the other way round."""
  config = tiny(('xl', 't5'), 2)
  config.model.position.t5.shared_across_layers = True
  model = models.create(config.model, seed=2)
  x = jnp.asarray(np.random.default_rng(4).normal(size=(2, 11, 32)), jnp.float32)
  mask = attention.make_mask(SEG, SEG, causal=True)

  def outputs():
    shared = model.position()
    assert isinstance(shared, list) and len(shared) == 2
    return [np.asarray(block(x, mask, POS, shared[i], None, None, layer=i)[0])
            for i, block in enumerate(model.blocks)]

  rng = np.random.default_rng(5)
  for kind, changed in (('xl', 0), ('t5', 1)):  # Drawn changes: a constant bias is no change.
    before = outputs()
    part = model.position.parts[kind]
    nnx.update(part, jax.tree.map(lambda a: a + rng.normal(size=a.shape).astype(a.dtype),
                                  nnx.state(part, nnx.Param)))
    after = outputs()
    assert np.abs(after[changed] - before[changed]).max() > 1e-3, kind
    np.testing.assert_array_equal(after[1 - changed], before[1 - changed], err_msg=kind)


def test_the_cache_equals_the_full_pass_for_a_hybrid_with_windows():
  """RNoPE-SWA: RoPE layers with a window of 3, NoPE layers global (and a third kind)."""
  config = tiny(('rope', 'none', 'alibi'), 3, layer_windows=(3, 0, 4))
  model = models.create(config.model, seed=3)
  kinds.assert_decoding_equals_full_pass(model, TOKENS, (5, 1, 5))


def test_generation_of_a_hybrid_picks_what_a_full_causal_pass_would():
  """decode.generate (the jitted loop of generate.py and hf.load) on RoPE and NoPE layers: the
  layout is static in the compiled program, and each token greedy decoding picks through the
  cache is the argmax of one full causal pass over the prompt and the tokens before it."""
  config = tiny(('rope', 'none'), 2)
  model = models.create(config.model, seed=3)
  prompt = np.asarray(TOKENS[:, :5])
  got = np.asarray(decode.generate(model, jnp.asarray(prompt), max_new_tokens=5, eos_id=-1))
  row = np.concatenate([prompt, got], 1)
  logits = model(jnp.asarray(row), jnp.broadcast_to(jnp.arange(10), row.shape),
                 jnp.ones(row.shape, jnp.int32))
  np.testing.assert_array_equal(got, np.asarray(jnp.argmax(logits[:, 4:9], -1)))


@pytest.mark.parametrize('change,match', [
    ({'layer_kinds': ('rope', 'nope')}, r'config.model.layer_kinds\[1\]=.nope. is not a known'),
    ({'type': 'mlm'}, 'offered for causal LMs'),
    ({'layer_kinds': ('rope', 'sinusoidal')}, 'embeddings below every layer'),
    ({'layer_kinds': ('rope', 'none'), 'position.t5.num_buckets': 8}, 'does not use it'),
    ({'layer_kinds': ('rope', 'none'), 'position.kind': 'alibi'},
     r"position.kind='alibi' is not read: config.model.layer_kinds=\('rope', 'none'\) gives "
     r'each layer its kind\. Fix: name alibi in layer_kinds'),
])
def test_bad_patterns_are_refused_naming_the_field(change, match):
  config = test_config.get_config('mlm') if 'type' in change else test_config.get_config()
  config.model.layer_kinds = ('rope', 'none')
  for key, value in change.items():
    if key == 'position.t5.num_buckets':
      config.model.position.t5.num_buckets = value
    elif key == 'position.kind':
      config.model.position.kind = value
    elif key != 'type':
      config.model[key] = value
  with pytest.raises(errors.ConfigError, match=match):
    resolve.validate(config)
