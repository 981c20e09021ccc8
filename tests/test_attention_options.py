"""Options any position scheme can take: QK-norm (attention.qk_norm), Scalable-Softmax
(attention.ssmax), clipped projections (attention.qkv_clip) and a set factor of the logits
(attention.softmax_scale), each against its formula written
out in float64, on every attention implementation, with the cache, and refused where they mean
nothing."""

import ast
import pathlib
import re

import jax.numpy as jnp
import kinds
import numpy as np
import pytest

from configs import test as test_config
from roformer import attention
from roformer import attention_options
from roformer import errors
from roformer import models
from roformer import resolve
from roformer import specs as specs_lib
from roformer.attention_options import nope_temperature


def tiny(kind='alibi', impl='einsum', layer_kinds=(), **att):
  config = test_config.get_config(kind)
  config.model.update(vocab_size=50, num_layers=1, attention_impl=impl, layer_kinds=layer_kinds)
  config.data.vocab_size = 50
  config.model.attention.update(att)
  resolve.validate(config)
  return config


@pytest.mark.parametrize('impl', ['einsum', 'xla'])
@pytest.mark.parametrize('qk_norm,ssmax,clip,scale', [
    (True, False, None, None), (False, True, None, None), (True, True, None, None),
    (True, False, 0.25, None), (False, False, None, 0.05), (False, True, None, 0.05)])
def test_the_layer_is_the_formula(qk_norm, ssmax, clip, scale, impl):
  """ALiBi's bias (scaled with the logits under SSMax), packed segments of 5 and 7 tokens (so
  n_i counts within the segment), per-head scales drawn at random; q, k and v clamped before
  QK-norm (attention.qkv_clip, OLMo's and MPT's clip_qkv) at a bound that clamps about half of
  them, so that the output without the clamp is another; q.k times 0.05 in place of 1/sqrt(8)
  (attention.softmax_scale, Granite's attention_multiplier), with the bias unscaled."""
  config = tiny('alibi', impl, qk_norm=qk_norm, ssmax=ssmax,
                **({'qkv_clip': True, 'qkv_clip_value': clip} if clip else {}),
                **({'softmax_scale': True, 'softmax_scale_value': scale} if scale else {}))
  model = models.create(config.model, seed=0)
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  rng = np.random.default_rng(0)
  if ssmax:
    attn.ssmax_scale.value = jnp.asarray(rng.uniform(0.2, 2.0, attn.num_heads), jnp.float32)
  if qk_norm:
    attn.q_scale.value = jnp.asarray(rng.uniform(0.5, 2.0, attn.head_dim), jnp.float32)
    attn.k_scale.value = jnp.asarray(rng.uniform(0.5, 2.0, attn.head_dim), jnp.float32)
  x = jnp.asarray(rng.normal(size=(2, 12, config.model.d_model)), jnp.float32)
  seg = jnp.asarray([[1] * 12, [1] * 5 + [2] * 7], jnp.int32)
  pos = jnp.asarray([list(range(12)), list(range(5)) + list(range(7))], jnp.int32)
  mask = attention.make_mask(seg, seg, causal=True)
  out, _ = attn(x, mask, pos, layer)
  q_stub = jnp.zeros((2, 12, attn.num_heads, attn.head_dim))
  bias = np.asarray(layer.logits_bias(q_stub, q_stub, pos, pos, mask, layer.prepare(x, pos, None)),
                    np.float64)
  want = kinds.attention_formula(attn, x, mask, bias, qk_norm=qk_norm, ssmax=ssmax, clip=clip,
                                 softmax_scale=scale)
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-4, atol=2e-5)
  if scale:
    unscaled = kinds.attention_formula(attn, x, mask, bias, qk_norm=qk_norm, ssmax=ssmax)
    assert np.abs(unscaled - want).max() > 1e-2 * np.abs(want).max()
  if clip:
    qkv = np.asarray(x, np.float64) @ np.asarray(attn.qkv.kernel[...], np.float64)
    assert 0.3 < (np.abs(qkv) > clip).mean() < 0.8
    unclipped = kinds.attention_formula(attn, x, mask, bias, qk_norm=qk_norm, ssmax=ssmax)
    assert np.abs(unclipped - want).max() > 1e-2 * np.abs(want).max()


def test_heads_wider_than_d_model_over_heads_are_the_formula_with_qk_norms_epsilon():
  """model.head_dim=12 with 4 heads of a 32-wide model (an inner width of 48, as Qwen3-0.6B's
  2048 of 1024), QK-norm with an epsilon large enough to move the outputs, and the output gate,
  whose width follows the heads'."""
  config = test_config.get_config('alibi')
  config.model.update(vocab_size=50, num_layers=1, attention_impl='einsum', head_dim=12)
  config.data.vocab_size = 50
  config.model.attention.update(qk_norm=True, qk_norm_eps=0.5, output_gate=True)
  resolve.validate(config)
  model = models.create(config.model, seed=0)
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  assert (attn.qkv.kernel.shape, attn.out.kernel.shape, attn.gate.kernel.shape) == (
      (32, 3 * 48), (48, 32), (32, 48))
  rng = np.random.default_rng(1)
  attn.q_scale.value = jnp.asarray(rng.uniform(0.5, 2.0, 12), jnp.float32)
  attn.k_scale.value = jnp.asarray(rng.uniform(0.5, 2.0, 12), jnp.float32)
  x = jnp.asarray(rng.normal(size=(2, 9, 32)) * 0.3, jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(9), (2, 9))
  mask = attention.make_mask(jnp.ones((2, 9), jnp.int32), jnp.ones((2, 9), jnp.int32),
                             causal=True)
  out, _ = attn(x, mask, pos, layer)
  stub = jnp.zeros((2, 9, 4, 12))
  bias = np.asarray(layer.logits_bias(stub, stub, pos, pos, mask, layer.prepare(x, pos, None)),
                    np.float64)
  gate = (attn.gate.kernel[...], attn.gate.bias[...])
  want = kinds.attention_formula(attn, x, mask, bias, qk_norm=True, qk_norm_eps=0.5, gate=gate)
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-4, atol=2e-5)
  # The epsilon is read: the default's formula is another output.
  other = kinds.attention_formula(attn, x, mask, bias, qk_norm=True, gate=gate)
  assert np.abs(other - want).max() > 1e-3


def test_qk_norm_over_the_heads_norms_all_heads_at_once():
  """qk_norm_over='heads' (OLMo 2's): the queries of all heads (and the keys of all key/value
  heads) normed as one vector, a scale per dimension of it, against float64; per-head norms
  give another output."""
  config = tiny('alibi', qk_norm=True, qk_norm_over='heads', qk_norm_eps=1e-5)
  model = models.create(config.model, seed=0)
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  width = attn.num_heads * attn.head_dim
  assert attn.q_scale.shape == attn.k_scale.shape == (width,)
  rng = np.random.default_rng(2)
  attn.q_scale.value = jnp.asarray(rng.uniform(0.5, 2.0, width), jnp.float32)
  attn.k_scale.value = jnp.asarray(rng.uniform(0.5, 2.0, width), jnp.float32)
  x = jnp.asarray(rng.normal(size=(2, 9, 32)), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(9), (2, 9))
  mask = attention.make_mask(jnp.ones((2, 9), jnp.int32), jnp.ones((2, 9), jnp.int32),
                             causal=True)
  out, _ = attn(x, mask, pos, layer)
  stub = jnp.zeros((2, 9, attn.num_heads, attn.head_dim))
  bias = np.asarray(layer.logits_bias(stub, stub, pos, pos, mask, layer.prepare(x, pos, None)),
                    np.float64)
  want = kinds.attention_formula(attn, x, mask, bias, qk_norm=True, qk_norm_eps=1e-5,
                                 qk_norm_over='heads')
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-4, atol=2e-5)
  per_head = kinds.attention_formula(attn, x, mask, bias, qk_norm=True, qk_norm_eps=1e-5,
                                     qk_norm_over='head')
  assert np.abs(per_head - want).max() > 1e-3


def test_qk_norm_without_a_scale_is_x_over_its_rms():
  """qk_norm_scale=False (Llama 4's L2 norm): no parameter, each head's q and k divided by
  their root mean square, against float64."""
  config = tiny('alibi', qk_norm=True, qk_norm_scale=False, qk_norm_eps=1e-5)
  model = models.create(config.model, seed=0)
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  assert not hasattr(attn, 'q_scale') and not hasattr(attn, 'k_scale')
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(2, 9, 32)), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(9), (2, 9))
  mask = attention.make_mask(jnp.ones((2, 9), jnp.int32), jnp.ones((2, 9), jnp.int32),
                             causal=True)
  stub = jnp.zeros((2, 9, attn.num_heads, attn.head_dim))
  bias = np.asarray(layer.logits_bias(stub, stub, pos, pos, mask, layer.prepare(x, pos, None)),
                    np.float64)
  want = kinds.attention_formula(attn, x, mask, bias, qk_norm=True, qk_norm_eps=1e-5)
  np.testing.assert_allclose(np.asarray(attn(x, mask, pos, layer)[0]), want, rtol=2e-4,
                             atol=2e-5)
  assert np.abs(kinds.attention_formula(attn, x, mask, bias) - want).max() > 1e-3


def test_qk_norm_on_the_rotary_layers_leaves_the_others_unnormed():
  """qk_norm_layers='rotary' (Llama 4: its RoPE layers, not its layers without positions):
  with RoPE then no positions, the first layer is the all-layers model's and the second the
  model's without QK-norm (the same parameters: an unscaled norm has none); without a rotary
  layer it is refused."""
  tokens = jnp.asarray(np.random.default_rng(4).integers(5, 50, (2, 10)))
  pos, seg = jnp.broadcast_to(jnp.arange(10), (2, 10)), jnp.ones((2, 10), jnp.int32)
  mask = attention.make_mask(seg, seg, causal=True)
  x = jnp.asarray(np.random.default_rng(5).normal(size=(2, 10, 32)), jnp.float32)
  outs = {}
  for name, att in (('rotary', dict(qk_norm=True, qk_norm_scale=False, qk_norm_layers='rotary')),
                    ('all', dict(qk_norm=True, qk_norm_scale=False)), ('off', {})):
    config = tiny('rope', layer_kinds=('rope', 'none'), **att)
    config.model.num_layers = 2
    model = models.create(config.model, seed=1)
    outs[name] = [np.asarray(b.attn(x, mask, pos, b.position)[0]) for b in model.blocks]
    outs[name].append(np.asarray(model(tokens, pos, seg)))
  np.testing.assert_allclose(outs['rotary'][0], outs['all'][0], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(outs['rotary'][1], outs['off'][1], rtol=1e-6, atol=1e-6)
  assert np.abs(outs['rotary'][0] - outs['off'][0]).max() > 1e-3
  assert np.abs(outs['rotary'][1] - outs['all'][1]).max() > 1e-3
  with pytest.raises(errors.ConfigError, match="qk_norm_layers='rotary' norms the layers whose "
                                               'position kind rotates, and no layer does'):
    tiny('alibi', qk_norm=True, qk_norm_layers='rotary')


@pytest.mark.parametrize('over,bias', [('each_head', False), ('head', True)])
def test_qk_layer_norm_centres_each_head_with_its_scales_and_bias(over, bias):
  """qk_norm_type='layer_norm': (x - mean) / sqrt(var + eps) * scale (+ bias) over each head's
  vector, a scale per head (StableLM 2 12B, Command R+) or one for all (Phi, with a bias),
  against float64; RMSNorm's output (no centring) differs."""
  config = tiny('rope', qk_norm=True, qk_norm_type='layer_norm', qk_norm_over=over,
                qk_norm_bias=bias, qk_norm_eps=1e-5)
  config.model.num_kv_heads = 2
  attn = models.create(config.model, seed=0).blocks[0].attn
  h, kv, hd = attn.num_heads, attn.num_kv_heads, attn.head_dim
  rng = np.random.default_rng(3)
  shapes = {'q': (h, hd) if over == 'each_head' else (hd,),
            'k': (kv, hd) if over == 'each_head' else (hd,)}
  for n, shape in shapes.items():
    assert getattr(attn, f'{n}_scale').shape == shape
    getattr(attn, f'{n}_scale').value = jnp.asarray(rng.uniform(0.5, 2, shape), jnp.float32)
    if bias:
      getattr(attn, f'{n}_bias').value = jnp.asarray(rng.normal(size=shape), jnp.float32)
  q = rng.normal(size=(2, 5, h, hd)) * 3 + 1
  k = rng.normal(size=(2, 5, kv, hd)) * 3 - 1
  option = attention_options.OPTIONS['qk_norm']
  got = option.queries_keys(attn, jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32))
  for x, n, out in ((q, 'q', got[0]), (k, 'k', got[1])):
    y = x - x.mean(-1, keepdims=True)
    want = y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5) * np.asarray(
        getattr(attn, f'{n}_scale')[...], np.float64)
    if bias:
      want = want + np.asarray(getattr(attn, f'{n}_bias')[...], np.float64)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
  attn.qk_norm_type = 'rms_norm'
  assert np.abs(np.asarray(option.queries_keys(attn, jnp.asarray(q, jnp.float32),
                                               jnp.asarray(k, jnp.float32))[0])
                - np.asarray(got[0])).max() > 1e-2


def test_a_bias_of_qk_rms_norm_is_refused():
  with pytest.raises(errors.ConfigError, match=r'qk_norm_bias with qk_norm_type=.rms_norm.: '
                                               r'RMSNorm has no bias'):
    resolve.validate(tiny('rope', qk_norm=True, qk_norm_bias=True))


def test_the_cache_equals_the_full_pass_with_the_options():
  config = tiny('rope', qk_norm=True, ssmax=True, qkv_clip=True, qkv_clip_value=0.5)
  config.model.num_layers = 2
  model = models.create(config.model, seed=3)
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 10)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 5), max_len=12)


@pytest.mark.parametrize('kind', ['favor', 'stick_breaking'])
def test_ssmax_without_a_softmax_is_refused(kind):
  config = test_config.get_config('none')
  config.model.attention.update(kind=kind, ssmax=True)
  with pytest.raises(errors.ConfigError, match='attention.ssmax'):
    resolve.validate(config)


def test_the_nope_temperature_against_hand_values():
  got = np.asarray(nope_temperature.nope_temperature(
      jnp.asarray([0, 8190, 8191, 16383, 24575]), 8192, 0.1))
  np.testing.assert_allclose(got, [1.0, 1.0, 1 + 0.1 * np.log(2), 1 + 0.1 * np.log(3),
                                   1 + 0.1 * np.log(4)], rtol=1e-6)


def test_the_nope_temperature_scales_only_the_layers_without_positions():
  """Llama 4's temperature (floor 4, scale 0.5 to show at these lengths): a layer without
  positions is the formula with each query's logits times its temperature; a RoPE layer is
  unchanged."""
  config = tiny('none', nope_temperature=True, nope_temperature_floor=4,
                nope_temperature_scale=0.5)
  model = models.create(config.model, seed=0)
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 12, config.model.d_model)), jnp.float32)
  pos = jnp.arange(12)[None]
  mask = attention.make_mask(jnp.ones((1, 12), jnp.int32), jnp.ones((1, 12), jnp.int32),
                             causal=True)
  out, _ = attn(x, mask, pos, layer)
  factor = 1 + 0.5 * np.log(np.floor((np.arange(12) + 1) / 4) + 1)
  want = kinds.attention_formula(attn, x, mask, 0.0, query_factor=factor)
  np.testing.assert_allclose(np.asarray(out), want, rtol=2e-4, atol=2e-5)
  hybrid = test_config.get_config('rope')
  hybrid.model.update(vocab_size=50, num_layers=2, layer_kinds=('rope', 'none'))
  hybrid.model.attention.nope_temperature = True
  resolve.validate(hybrid)
  blocks = models.create(hybrid.model, seed=0).blocks
  assert [b.attn.temperature is not None for b in blocks] == [False, True]
  with pytest.raises(errors.ConfigError, match='no layer is one'):
    tiny('rope', nope_temperature=True)


# A position kind that meets each option's declared need of the layers' schemes.
_FITTING_KIND = {'dape': 'alibi', 'nope_temperature': 'none', 'differential': 'rope'}

# The attention kinds each option runs with, written out from what each option computes (not
# read from the declarations): a softmax's logits for SSMax, differential attention and DAPE;
# per-head weighted values for the gate; logits for the NoPE temperature; QK-norm, the
# queries' scales (logit_scale, softmax_scale) and the clamp of the projections anywhere; a
# softmax's logits for the soft-cap; a softmax's normalisation for the sink logit.
RUNS_WITH = {'qk_norm': {'softmax', 'favor', 'stick_breaking'}, 'ssmax': {'softmax'},
             'output_gate': {'softmax', 'stick_breaking'}, 'differential': {'softmax'},
             'dape': {'softmax'}, 'nope_temperature': {'softmax', 'stick_breaking'},
             'softcap': {'softmax'}, 'logit_scale': {'softmax', 'favor', 'stick_breaking'},
             'qkv_clip': {'softmax', 'favor', 'stick_breaking'},
             'softmax_scale': {'softmax', 'favor', 'stick_breaking'}, 'sink_logit': {'softmax'}}
EINSUM_ONLY = {'differential', 'dape', 'softcap', 'sink_logit'}


@pytest.mark.parametrize('kind', ['softmax', 'favor', 'stick_breaking'])
@pytest.mark.parametrize('field', ['qk_norm', 'ssmax', 'output_gate', 'differential', 'dape',
                                   'nope_temperature', 'softcap', 'logit_scale', 'qkv_clip',
                                   'softmax_scale', 'sink_logit'])
def test_an_option_runs_with_an_attention_kind_exactly_as_declared(field, kind):
  """The declarations say what each option computes (RUNS_WITH, written out apart from them),
  and the check follows the declarations: an option with an attention kind is refused, naming
  the option, exactly when the kind lacks a feature it declares it needs (the table's 'no'),
  and an option declared einsum-only is refused on another implementation."""
  option, declared = attention_options.OPTIONS[field], attention_options.KINDS[kind]
  config = test_config.get_config(_FITTING_KIND.get(field, 'rope'))
  config.model.update(vocab_size=50, attention_impl='einsum')
  config.model.attention.update({'kind': kind, field: True})
  runs = all(f in declared.has for f in option.needs)
  assert runs == (kind in RUNS_WITH[field])  # The declaration is what the option computes.
  assert option.einsum_only == (field in EINSUM_ONLY)
  m, att = config.model, config.model.attention
  if runs:
    attention_options.check(config, m, att)
  else:
    with pytest.raises(errors.ConfigError, match=f'attention.{field}=True'):
      attention_options.check(config, m, att)
  if runs and option.einsum_only:
    config.model.attention_impl = 'xla'
    with pytest.raises(errors.ConfigError, match=f'attention.{field}=True.*einsum path'):
      attention_options.check(config, m, att)


@pytest.mark.parametrize('flag', ['forms_logits', 'maps_logits', 'adds_sink'])
def test_an_option_that_forms_maps_or_adds_to_the_logits_must_declare_the_einsum_path(flag):
  """The fused kernels never form the logits: registering an option that forms or maps them,
  or adds a logit to each row, without einsum_only fails, and registers nothing."""
  from roformer.attention_options import base  # pylint: disable=g-import-not-at-top
  cls = type('Undeclared', (base.AttentionOption,), {'field': 'undeclared', flag: True})
  try:
    with pytest.raises(TypeError, match="'undeclared' forms, maps or adds to the logits, so "
                                        'it must declare einsum_only'):
      base.register(cls)
    assert 'undeclared' not in attention_options.OPTIONS
  finally:  # Whatever happened, later tests see the registry as it was.
    attention_options.OPTIONS.pop('undeclared', None)


@pytest.mark.parametrize('field,kind,why', [
    ('dape', 'rope', 'add no bias'), ('differential', 'shaw', 'add a value term'),
    ('nope_temperature', 'rope', 'no layer is one')])
def test_an_option_that_needs_something_of_the_schemes_names_the_kinds_that_fit(field, kind,
                                                                                  why):
  config = test_config.get_config(kind)
  config.model.attention[field] = True
  with pytest.raises(errors.ConfigError, match=why) as e:
    attention_options.check(config, config.model, config.model.attention)
  listed = str(e.value).split('a position kind that fits (', 1)[1].split(', or model.', 1)[0]
  fitting = [k.strip("'") for k in listed.split(', ')]
  assert _FITTING_KIND[field] in fitting and kind not in fitting


def test_windows_need_a_kind_that_forms_the_mask():
  for kind, declared in attention_options.KINDS.items():
    config = test_config.get_config('rope')
    config.model.update(layer_windows=(8,), attention_impl='einsum')
    config.model.attention.kind = kind
    if 'mask' in declared.has:
      resolve.validate(config)
    else:
      with pytest.raises(errors.ConfigError, match='layer_windows=.8,. needs the attention mask'):
        resolve.validate(config)


@pytest.mark.parametrize('kind,model_type,impl,refused', [
    ('stick_breaking', 'mlm', 'einsum', 'is for causal LMs'),
    ('stick_breaking', 'causal_lm', 'xla', 'runs on the einsum/pallas path'),
    ('stick_breaking', 'causal_lm', 'pallas', ''),
    ('favor', 'encoder_decoder', 'einsum', 'is for causal LMs, masked LMs, classifiers'),
    ('stick_breaking', 'causal_lm', 'einsum', ''), ('favor', 'mlm', 'xla', ''),
    ('softmax', 'encoder_decoder', 'cudnn', '')])
def test_an_attention_kind_is_refused_where_it_serves_no_model_type_or_implementation(
    kind, model_type, impl, refused):
  config = test_config.get_config('none')
  config.model.update(type=model_type, attention_impl=impl)
  config.model.attention.kind = kind
  if refused:
    with pytest.raises(errors.ConfigError, match=refused):
      attention_options.check_kind(config.model, config.model.attention)
  else:
    attention_options.check_kind(config.model, config.model.attention)


ROOT = pathlib.Path(__file__).resolve().parents[1]
ATTENTION_FIELDS = set(attention_options.SPECS)


def _is_attention_config(node) -> bool:
  """`att`, `attention`, `<...>.attention` or `attention_config(...)`: the attention group."""
  return ((isinstance(node, ast.Name) and node.id in ('att', 'attention'))
          or (isinstance(node, ast.Attribute) and node.attr == 'attention')
          or (isinstance(node, ast.Call) and getattr(node.func, 'attr', getattr(
              node.func, 'id', '')) == 'attention_config'))


def _field_read(node) -> str:
  """The field of config.model.attention that `node` reads (`att.F`, `att['F']`,
  `att.get('F')`, `getattr(att, 'F')`), or ''."""
  constant = lambda n: n.value if isinstance(n, ast.Constant) and n.value in ATTENTION_FIELDS \
      else ''
  if isinstance(node, ast.Attribute) and node.attr in ATTENTION_FIELDS:
    return node.attr if _is_attention_config(node.value) else ''
  if isinstance(node, ast.Subscript) and _is_attention_config(node.value):
    return constant(node.slice)
  if isinstance(node, ast.Call) and node.args:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == 'get' and _is_attention_config(
        func.value):
      return constant(node.args[0])
    if (isinstance(func, ast.Name) and func.id == 'getattr' and len(node.args) > 1
        and _is_attention_config(node.args[0])):
      return constant(node.args[1])
  return ''


# RoPE's rotation of FAVOR+'s features (its `rotate_features` hook) checks its own width against
# the number of features: the one reader outside the package.
EXEMPT = {('roformer/positions/rotary.py', '_favor_features')}


def _nodes(tree, rel):
  """The nodes of a module, without those of its exempt functions."""
  skipped = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
             and (rel, f.name) in EXEMPT for n in ast.walk(f)}
  return [n for n in ast.walk(tree) if id(n) not in skipped]


def test_no_module_outside_the_package_reads_an_attention_field():
  """The attention layer, the checks, the FLOPs, the trainer and the export ask the kinds' and
  switches' declarations and hooks: no module of roformer/ outside roformer/attention_options/
  reads a field of config.model.attention (`att.ssmax`, `att['dape']`, `att.get(...)`,
  `attention_config(cfg).differential`), the kind's name aside, which only looks its
  declaration up (never compared with a name, nor matched)."""
  found = []
  for path in sorted(ROOT.glob('roformer/**/*.py')):
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith('roformer/attention_options/'):
      continue
    for node in _nodes(ast.parse(path.read_text(encoding='utf-8')), rel):
      field = _field_read(node)
      compared = isinstance(node, ast.Compare) and any(
          _field_read(side) for side in [node.left, *node.comparators])
      matched = isinstance(node, ast.Match) and _field_read(node.subject)
      if (field and field != 'kind') or compared or matched:
        found.append(f'{rel}:{node.lineno}: {ast.unparse(node)}')
  assert not found, found


def test_the_field_reads_the_check_looks_for_are_found():
  """The check above finds each form of read it names, and passes a kind's look-up."""
  reads = ["att.ssmax", "att['dape']", "m.attention.get('qk_norm')", "getattr(att, 'chunk')",
           "self_attention.attention_config(cfg).differential", "att.kind == 'favor'"]
  for source in reads:
    tree = ast.parse(source)
    assert any(_field_read(n) or (isinstance(n, ast.Compare) and _field_read(n.left))
               for n in ast.walk(tree)), source
  assert not any(_field_read(n) and _field_read(n) != 'kind'
                 for n in ast.walk(ast.parse('KINDS[att.kind]')))


def _other_value(spec):
  """A valid value of `spec` other than its default."""
  if isinstance(spec, specs_lib.Bool):
    return not spec.default
  if isinstance(spec, specs_lib.Str):
    return next(c for c in spec.choices if c != spec.default)
  if spec.max is None or spec.default + 1 <= spec.max:
    return spec.default + 1
  return (spec.default + spec.max) / 2  # Within a bounded range (QK-norm's epsilon).


@pytest.mark.parametrize('field', sorted(f for f in attention_options.SPECS
                                         if attention_options.owners(f)))
def test_a_kinds_or_switchs_own_field_is_refused_while_it_is_off(field):
  """Each field that belongs to an attention kind or switch (FAVOR+'s num_features, SSMax's
  ssmax_init, stick-breaking's attend_current...), changed while none of its owners is on,
  would change nothing: it is refused naming them; with an owner on it is read."""
  config = test_config.get_config('rope')
  value = _other_value(attention_options.SPECS[field])
  config.model.attention[field] = value
  words = [w for w, _ in attention_options.owners(field)]
  with pytest.raises(errors.ConfigError, match=rf'config.model.attention.{field}=.* is read only '
                     rf'by runs with {re.escape(words[0])}.*Fix: drop the override'):
    resolve.check_fields(config)
  setting, _, on = words[0].partition('=')
  name = setting.split('.')[1]
  config.model.attention[name] = on if name == 'kind' else True
  resolve.check_fields(config)
