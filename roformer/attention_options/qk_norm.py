"""QK-norm (`attention.qk_norm`): a norm of the queries and keys before the cache and any
rotation, so that cached keys are normed keys (Dehghani et al. 2023, "Scaling Vision Transformers
to 22 Billion Parameters").

- `qk_norm_type`: RMSNorm ('rms_norm': Qwen3, Gemma 3, EXAONE 4, OLMo 2 and 3) or LayerNorm,
  centred ('layer_norm': Phi's, StableLM 2 12B's and Command R+'s).
- `qk_norm_over`: each head's vector, with a learned scale per dimension shared by the heads
  ('head': Qwen3, Gemma 3, EXAONE 4, Phi), each head's with a scale of its own per head
  ('each_head': StableLM 2 12B, Command R+), or all the heads' queries (and all the key/value
  heads' keys) at once, one scale per dimension of each ('heads': OLMo 2 and 3, OLMoE, which
  norm the projection before splitting it into heads).
- `qk_norm_bias`: the LayerNorm's bias too (Phi's).
- `qk_norm_scale`: a learned scale (the default), or none (Llama 4's L2 norm: x / rms(x)).
- `qk_norm_layers`: every layer ('all'), or the layers whose position kind rotates ('rotary':
  Llama 4 norms its RoPE layers and not its layers without positions).
Its epsilon, `qk_norm_eps`, is the file's norm epsilon in an imported checkpoint
(roformer/hf_config.py).
"""

import jax
import jax.numpy as jnp

from roformer import attention
from roformer import errors
from roformer import variables
from roformer.attention_options import base
from roformer.specs import Bool
from roformer.specs import Float
from roformer.specs import Str

SPANS = ('head', 'each_head', 'heads')  # attention.qk_norm_over
TYPES = ('rms_norm', 'layer_norm')  # attention.qk_norm_type
LAYERS = ('all', 'rotary')  # attention.qk_norm_layers
# The classes that compute it, each as (type, span, bias): q_norm and k_norm with the blocks'
# norm epsilon.
_TRANSFORMERS = {'qwen3': ('rms_norm', 'head', False), 'gemma3': ('rms_norm', 'head', False),
                 'exaone4': ('rms_norm', 'head', False), 'qwen3_moe': ('rms_norm', 'head', False),
                 'olmo2': ('rms_norm', 'heads', False), 'olmo3': ('rms_norm', 'heads', False),
                 'olmoe': ('rms_norm', 'heads', False), 'phi': ('layer_norm', 'head', True),
                 'stablelm': ('layer_norm', 'each_head', False),
                 'cohere': ('layer_norm', 'each_head', False),
                 'llama4': ('rms_norm', 'head', False), 'glm4_moe': ('rms_norm', 'head', False),
                 'minimax_m2': ('rms_norm', 'heads', False)}
# Their config.json switch, where it has one, and its default where the file leaves it out.
_SWITCHES = {'phi': ('qk_layernorm', False), 'stablelm': ('qk_layernorm', False),
             'cohere': ('use_qk_norm', False), 'llama4': ('use_qk_norm', True),
             'glm4_moe': ('use_qk_norm', False)}
# (qk_norm_scale, qk_norm_layers) of each: a scale in every layer but Llama 4's, whose L2 norm
# has none and norms its RoPE layers alone.
_SCALES_AND_LAYERS = {'llama4': (False, 'rotary')}


def transformers_norm(family: str) -> tuple[str, str, bool]:
  """(type, span, bias) of the QK-norm that transformers' class `family` computes (KeyError
  where it has none)."""
  return _TRANSFORMERS[family]


def layer_norm(x, scale, bias, eps: float):
  """(x - mean) / sqrt(var + eps) * scale + bias over the last axis, in float32, returned in
  x's dtype (bias None: none)."""
  y = x.astype(jnp.float32)
  y = y - jnp.mean(y, axis=-1, keepdims=True)
  y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + eps) * scale
  return (y if bias is None else y + bias).astype(x.dtype)


@base.register
class QKNorm(base.AttentionOption):
  field = 'qk_norm'
  paper = 'Dehghani et al. 2023'
  about = "RMSNorm or LayerNorm of each head's queries and keys, or of all the heads' at once"
  specs = {'qk_norm_eps': Float(0, 1, min_open=True, default=1e-6),
           # Its span (SPANS): each head (one scale for all, or each its own), or all together.
           'qk_norm_over': Str(SPANS, default='head'),
           'qk_norm_type': Str(TYPES, default='rms_norm'),
           # LayerNorm's bias (Phi's); RMSNorm has none.
           'qk_norm_bias': Bool(default=False),
           # A learned scale (per dimension, per head or of all heads: qk_norm_over), or none.
           'qk_norm_scale': Bool(default=True),
           # Which layers (LAYERS): every one, or those whose position kind rotates.
           'qk_norm_layers': Str(LAYERS, default='all')}
  transformers_families = tuple(_TRANSFORMERS)

  def transformers_computes(self, att, family: str) -> bool:
    """The class's own norm: its type, its span and its bias, as `_TRANSFORMERS` lists them."""
    return (_TRANSFORMERS.get(family) == (att.qk_norm_type, att.qk_norm_over, att.qk_norm_bias)
            and _SCALES_AND_LAYERS.get(family, (True, 'all')) == (att.qk_norm_scale,
                                                                  att.qk_norm_layers))

  def transformers_fields(self, att, family: str) -> dict:
    del att
    return {_SWITCHES[family][0]: True} if family in _SWITCHES else {}

  def from_transformers(self, family: str, hf: dict, eps: float) -> dict:
    """The family's own norm, at the blocks' epsilon: always in Qwen3's and OLMo 2's kinds,
    where its switch is on in Phi's, StableLM's and Cohere's."""
    switch, default = _SWITCHES.get(family, (None, True))
    if family not in _TRANSFORMERS or (switch and not hf.get(switch, default)):
      return {}
    kind, over, bias = _TRANSFORMERS[family]
    scale, layers = _SCALES_AND_LAYERS.get(family, (True, 'all'))
    return {'qk_norm': True, 'qk_norm_eps': eps, 'qk_norm_type': kind, 'qk_norm_over': over,
            'qk_norm_bias': bias, 'qk_norm_scale': scale, 'qk_norm_layers': layers}

  def validate(self, config, model_cfg, att) -> None:
    if att.qk_norm_bias and not att.qk_norm_scale:
      raise errors.ConfigError(
          'config.model.attention.qk_norm_bias with qk_norm_scale=False: a norm without a '
          'scale has no bias either. Fix: --config.model.attention.qk_norm_scale=True, or no '
          'bias.')
    if att.qk_norm_layers == 'rotary' and not any(
        c.rotary for c in base.layer_caps(model_cfg).values()):
      raise errors.ConfigError(
          "config.model.attention.qk_norm_layers='rotary' norms the layers whose position kind "
          'rotates, and no layer does. Fix: --config.model.attention.qk_norm_layers=all, or a '
          'rotary kind in some layer (model.layer_kinds).')
    if att.qk_norm_bias and att.qk_norm_type != 'layer_norm':
      raise errors.ConfigError(
          f'config.model.attention.qk_norm_bias with qk_norm_type={att.qk_norm_type!r}: RMSNorm '
          'has no bias. Fix: --config.model.attention.qk_norm_type=layer_norm, or no bias.')

  def transformers_refusal(self, model_cfg, att) -> str:
    over = att.qk_norm_over
    if over == 'heads' and model_cfg.norm != 'output' and model_cfg.mlp != 'moe':
      return (f"QK-norm over all the heads (attention.qk_norm_over={over!r}) with "
              f"norm={model_cfg.norm!r}: transformers' classes norm the heads together only in "
              "the block with output norms alone (OLMo 2 and 3, norm='output') and in OLMoE's "
              "mixture (mlp='moe'), and each head in the others (Qwen3, Gemma 3, EXAONE 4)")
    if att.qk_norm_eps == model_cfg.layer_norm_eps:
      return ''
    return (f'QK-norm with its own epsilon (attention.qk_norm_eps={att.qk_norm_eps}, '
            f'layer_norm_eps={model_cfg.layer_norm_eps}): the classes that have it (Qwen3, '
            'Gemma 3, EXAONE 4, OLMo, Phi, StableLM, Cohere) have one norm epsilon for both. Fix: '
            'train with --config.model.attention.qk_norm_eps equal to model.layer_norm_eps')

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    over, hd = att.qk_norm_over, module.head_dim
    module.qk_norm_heads = over == 'heads'
    # `caps`: the layer's own position kind's.
    module.qk_norm_on = att.qk_norm_layers == 'all' or caps.rotary
    module.qk_norm_scaled = bool(att.qk_norm_scale) and module.qk_norm_on
    module.qk_norm_eps, module.qk_norm_type = float(att.qk_norm_eps), att.qk_norm_type
    module.qk_norm_bias = bool(att.qk_norm_bias)
    if not module.qk_norm_scaled:
      return
    h, kv = module.num_heads, module.num_kv_heads
    shapes = {'head': ((hd,), (hd,)), 'each_head': ((h, hd), (kv, hd)),
              'heads': ((h * hd,), (kv * hd,))}[over]
    module.q_scale, module.k_scale = (
        variables.param(jnp.ones(shape, jnp.float32), (None,) * len(shape), decay=False)
        for shape in shapes)
    if att.qk_norm_bias:
      module.q_bias, module.k_bias = (
          variables.param(jnp.zeros(shape, jnp.float32), (None,) * len(shape), decay=False)
          for shape in shapes)

  def queries_keys(self, module, q, k):
    if not module.qk_norm_on:
      return q, k
    eps = module.qk_norm_eps

    def norm(x, which):  # x: [batch, len, heads, head_dim].
      scale = (getattr(module, which + '_scale')[...] if module.qk_norm_scaled
               else jnp.ones((), jnp.float32))
      flat = x.reshape(x.shape[:-2] + (-1,)) if module.qk_norm_heads else x
      if module.qk_norm_type == 'rms_norm':
        y = attention.rms_norm(flat, scale, eps)
      else:
        bias = getattr(module, which + '_bias')[...] if module.qk_norm_bias else None
        y = layer_norm(flat, scale, bias, eps)
      return y.reshape(x.shape)
    return norm(q, 'q'), norm(k, 'k')
