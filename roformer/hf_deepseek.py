"""DeepSeek-V3's language model (DeepseekV3ForCausalLM, `deepseek_v3`: DeepSeek-V3 and R1, Kimi
K2, Moonlight) and DeepSeek-V2's (DeepseekV2ForCausalLM, `deepseek_v2`: DeepSeek-V2 and V2-Lite,
DeepSeek-Coder-V2), whose attention is multi-head latent attention with RoPE decoupled onto a few
key dimensions every head shares (`model.mla`, roformer/latent_attention.py), on Llama's pre-norm
block.

Its heads are `qk_nope_head_dim` + `qk_rope_head_dim` wide (`model.head_dim`; the class's own
`head_dim` is the rotary width alone), RoPE rotating the `qk_rope_head_dim` decoupled dimensions
(`position.rope.fraction`), on interleaved pairs where `rope_interleave` (the default) or on the
halves; values `v_head_dim` wide; q from a latent `q_lora_rank` wide or one projection where it is
null; keys and values from one `kv_lora_rank` wide. Beside a YaRN, linear, dynamic, llama3 or
longrope scaling, `mscale_all_dim` multiplies the softmax's 1/sqrt(head_dim) by (0.1
mscale_all_dim ln(factor) + 1)^2 (`attention.softmax_scale`). The first `first_k_dense_replace`
layers have Llama's gated MLP `intermediate_size` wide (`moe.dense_layers`); the others a
mixture of `n_routed_experts` experts `moe_intermediate_size` wide with DeepSeek-V3's routing
(sigmoid scores, the choice bias `e_score_correction_bias`, `n_group` groups of which
`topk_group` are kept, `routed_scaling_factor`, `norm_topk_prob`; roformer/moe.py) beside an
ungated shared expert `n_shared_experts` times as wide. DeepSeek-V2's class rotates interleaved
pairs always, and routes by the softmax: each token's k most probable experts (`topk_method`
'greedy'), or those of its `topk_group` groups with the best single probability
('group_limited_greedy', `moe.group_score='best'`), weighted by their probabilities times
`routed_scaling_factor`, not renormalized (its `norm_topk_prob` is unread), beside the shared
expert. roformer/hf_config.py reads the rest as
the Llama family's and roformer/hf_moe.py the experts; this module holds the attention's fields
and tensors and the export's rules. The multi-token prediction layer that DeepSeek-V3's and
GLM-4.5's checkpoints keep after the last (`num_nextn_predict_layers` 1, as on the Hub) is not
read, as transformers does not read it; more such layers are tensors the import refuses.
"""

import math

import numpy as np

from roformer import errors
from roformer import hf_fields
from roformer import latent_attention
from roformer import moe
from roformer import positions

FAMILY, FAMILY_V2 = 'deepseek_v3', 'deepseek_v2'
LATENT = (FAMILY, FAMILY_V2)  # The families whose attention is latent (model.mla).
_ATTN = 'self_attn.'
_read = hf_fields.read
# The scalings after which the class scales the softmax by mscale_all_dim (all but the default).
_MSCALED = ('linear', 'dynamic', 'yarn', 'llama3', 'longrope')


def head_dims(hf: dict, where: str) -> tuple[int, int]:
  """(each query and key head's width, its rotary part): qk_nope_head_dim + qk_rope_head_dim,
  and qk_rope_head_dim (the class's defaults, 128 and 64, where absent)."""
  rope = hf_fields.integer(hf, 'qk_rope_head_dim', 64, where, low=2)
  return hf_fields.integer(hf, 'qk_nope_head_dim', 128, where, low=0) + rope, rope


def model_fields(hf: dict, heads: int, where: str) -> dict:
  """config.model's latent attention; what the class computes otherwise is refused."""
  rope = head_dims(hf, where)[1]  # The width is model.head_dim (roformer/hf_config.py).
  if _read(hf, 'num_key_value_heads', heads) != heads:
    raise errors.ConfigError(
        f"{where}: num_key_value_heads {hf.get('num_key_value_heads')} with {heads} heads; "
        "DeepSeek's latent attention gives every head its keys and values. Fix: the "
        'config.json that came with the weights (num_key_value_heads = num_attention_heads).')
  if _read(hf, 'attention_bias', False):
    raise errors.ConfigError(f'{where}: attention_bias, which this project\'s latent attention '
                             'does not have. Fix: a checkpoint without it (as those on the Hub).')
  if _read(hf, 'mlp_bias', False):
    raise errors.ConfigError(f"{where}: mlp_bias, biases of DeepSeek-V2's dense MLPs and shared "
                             'experts, which this project does not read beside its experts. '
                             'Fix: a checkpoint without it (as those on the Hub).')
  q_rank = _read(hf, 'q_lora_rank', 1536)
  return {'mla': {
      'kv_rank': hf_fields.integer(hf, 'kv_lora_rank', 512, where),
      'q_rank': 0 if q_rank is None else hf_fields.integer(hf, 'q_lora_rank', 1536, where),
      'rope_dim': rope, 'v_head_dim': hf_fields.integer(hf, 'v_head_dim', 128, where)}}


def softmax_fields(settings: dict, head_dim: int) -> dict:
  """config.model.attention's softmax scale where the scaling's mscale_all_dim sets one."""
  factor, mscale = settings.get('factor') or 1.0, settings.get('mscale_all_dim') or 0.0
  if settings['rope_type'] not in _MSCALED or not mscale or factor <= 1:
    return {}
  grown = positions.scaling.yarn_mscale(factor, mscale)
  return {'softmax_scale': True, 'softmax_scale_value': head_dim ** -0.5 * grown ** 2}


# The families whose mixture routes as DeepSeek-V3's (GLM-4.5's class is the same router beside
# grouped-query attention), with their classes' defaults: n_group, topk_group,
# routed_scaling_factor, first_k_dense_replace and intermediate_size.
SIGMOID_ROUTED = {FAMILY: (8, 4, 2.5, 3, 18432), 'glm4_moe': (1, 1, 1.0, 1, 10944)}
# The families whose dense layers come first and whose shared experts are n_shared_experts
# experts wide (and its default): these and DeepSeek-V2's.
DEEPSEEK_LAYOUT = {FAMILY: 1, 'glm4_moe': 1, FAMILY_V2: 2}
_V2_DENSE = (0, 11008)  # DeepSeek-V2's first_k_dense_replace and intermediate_size defaults.
_TOPK_METHODS = ('greedy', 'group_limited_greedy')


def moe_fields(hf: dict, fam: str, where: str) -> dict:
  """config.model.moe's fields of DeepSeek-V3's routing (or V2's) beyond the mixture's own."""
  if fam == FAMILY_V2:
    return _v2_moe_fields(hf, where)
  groups, per_token, scale = SIGMOID_ROUTED[fam][:3]
  groups = hf_fields.integer(hf, 'n_group', groups, where)
  return {'router': 'sigmoid', 'choice_bias': True, 'shared_gate': False, 'groups': groups,
          'groups_per_token': (hf_fields.integer(hf, 'topk_group', per_token, where)
                               if groups > 1 else 1),
          'renormalize': bool(_read(hf, 'norm_topk_prob', True)),
          'routed_scale': hf_fields.positive(_read(hf, 'routed_scaling_factor', scale),
                                             'routed_scaling_factor', where)}


def _v2_moe_fields(hf: dict, where: str) -> dict:
  """DeepSeek-V2's routing: the softmax's k best, or of the groups with the best single one."""
  method = _read(hf, 'topk_method', 'greedy')
  if method not in _TOPK_METHODS:
    raise errors.ConfigError(f"{where}: topk_method {method!r}, which DeepSeek-V2's class does "
                             f'not compute. Fix: a checkpoint with one of {_TOPK_METHODS}.')
  groups = hf_fields.integer(hf, 'n_group', None, where) if method != 'greedy' else 1
  return {'router': 'softmax', 'renormalize': False, 'shared_gate': False, 'groups': groups,
          'groups_per_token': (hf_fields.integer(hf, 'topk_group', None, where)
                               if groups > 1 else 1),
          'group_score': 'best' if groups > 1 else 'two_best',
          'routed_scale': hf_fields.positive(_read(hf, 'routed_scaling_factor', 1.0),
                                             'routed_scaling_factor', where)}


def dense_layers(hf: dict, fam: str, layers: int, where: str) -> tuple[tuple[int, ...], int]:
  """(the first first_k_dense_replace layers, whose MLP is dense, and its width)."""
  first, width = _V2_DENSE if fam == FAMILY_V2 else SIGMOID_ROUTED[fam][3:]
  return (tuple(range(min(hf_fields.integer(hf, 'first_k_dense_replace', first, where, low=0),
                          layers))),
          hf_fields.integer(hf, 'intermediate_size', width, where))


def routed(o, d_ff: int, router: str = 'sigmoid') -> bool:
  """Whether config.model.moe `o` (experts d_ff wide) is DeepSeek-V3's mixture (`router`
  'sigmoid': sigmoid scores) or DeepSeek-V2's ('softmax': its probabilities, not renormalized,
  no choice bias, groups scored by their best): the scores weighting the experts' outputs, no
  biases or clamp, an ungated shared expert a whole number of experts wide (or none), the dense
  layers first."""
  common = ((o.router, o.weight_inputs, o.biases, o.swiglu_limit) == (router, False, False, 0)
            and o.shared_d_ff % d_ff == 0 and not (o.shared_d_ff and o.shared_gate)
            and tuple(o.dense_layers) == tuple(range(len(o.dense_layers))))
  if router == 'sigmoid':
    return common and o.group_score == 'two_best'
  return (common and not o.renormalize and not o.choice_bias
          and (o.groups == 1 or o.group_score == 'best'))


def family(m) -> str:
  """The DeepSeek class of a model with latent attention: V2's for a mixture under the
  softmax, V3's otherwise (a dense MLP in every layer is either's)."""
  return FAMILY_V2 if m.mlp == 'moe' and m.moe.router == 'softmax' else FAMILY


def routing_config(m) -> dict:
  """The config.json fields of DeepSeek-V3's mixture (DeepSeek-V3's and GLM-4.5's classes) or
  DeepSeek-V2's (its topk_method); a dense model's settings are unread."""
  r, sparse = m.moe, m.mlp == 'moe'
  fields = {'first_k_dense_replace': len(r.dense_layers) if sparse else m.num_layers,
            'intermediate_size': moe.dense_width(m) if sparse else m.d_ff,
            'moe_intermediate_size': m.d_ff, 'output_router_logits': False}
  if not sparse:
    return {**fields, 'n_routed_experts': 2, 'num_experts_per_tok': 1, 'n_group': 1,
            'topk_group': 1, 'n_shared_experts': 0}
  out = {**fields, 'n_routed_experts': r.num_experts, 'num_experts_per_tok': r.experts_per_token,
         'n_group': r.groups, 'topk_group': r.groups_per_token,
         'routed_scaling_factor': r.routed_scale, 'norm_topk_prob': r.renormalize,
         'n_shared_experts': r.shared_d_ff // m.d_ff}
  if r.router == 'softmax':  # DeepSeek-V2's.
    out['topk_method'] = 'group_limited_greedy' if r.groups > 1 else 'greedy'
  return out


def read_attention(t, p: str, m) -> dict:
  """A layer's latent attention: the projections, the latents' norm scales and o_proj."""
  o, d, h = m.mla, m.d_model, m.num_heads
  e, ev = positions.head_dim(m), latent_attention.value_dim(m)
  kernel = lambda name, shape: {'kernel': t(p + _ATTN + name + '.weight', shape).T}
  proj = {'kv_a': kernel('kv_a_proj_with_mqa', (o.kv_rank + o.rope_dim, d)),
          'kv_norm': {'scale': t(p + _ATTN + 'kv_a_layernorm.weight', (o.kv_rank,))},
          'kv_b': kernel('kv_b_proj', (h * (e - o.rope_dim + ev), o.kv_rank))}
  if o.q_rank:
    proj.update(q_a=kernel('q_a_proj', (o.q_rank, d)),
                q_norm={'scale': t(p + _ATTN + 'q_a_layernorm.weight', (o.q_rank,))},
                q_b=kernel('q_b_proj', (h * e, o.q_rank)))
  else:
    proj['q'] = kernel('q_proj', (h * e, d))
  return {'projections': proj, 'out': kernel('o_proj', (d, h * ev))}


def write_attention(out: dict, p: str, attn: dict) -> None:
  """A layer's latent attention as the class's tensors."""
  array = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  proj = attn['projections']
  names = {'kv_a': 'kv_a_proj_with_mqa', 'kv_b': 'kv_b_proj', 'q_a': 'q_a_proj',
           'q_b': 'q_b_proj', 'q': 'q_proj'}
  for ours, theirs in names.items():
    if ours in proj:
      out[p + _ATTN + theirs + '.weight'] = array(np.asarray(proj[ours]['kernel']).T)
  for ours, theirs in (('kv_norm', 'kv_a_layernorm'), ('q_norm', 'q_a_layernorm')):
    if ours in proj:
      out[p + _ATTN + theirs + '.weight'] = array(proj[ours]['scale'])
  out[p + _ATTN + 'o_proj.weight'] = array(np.asarray(attn['out']['kernel']).T)


def export_refusal(m, options) -> str:
  """Why DeepSeek-V3's class, or V2's for a mixture under the softmax, does not compute the
  model `m` ('' where it does)."""
  o, sc = m.moe, m.position.rope.scaling
  fam = family(m)
  name = 'DeepSeek-V2' if fam == FAMILY_V2 else 'DeepSeek-V3'
  others = [x.field for x in options if x.field != 'softmax_scale']
  scaled = len(others) < len(options)
  return hf_fields.first_failed((
      *hf_fields.llama_block_checks(m, 'latent attention', name),
      (not all(positions.rope_layers(m) or [False]),
       f"layers other than RoPE with latent attention ({name}'s class rotates every layer)"),
      (any(m.layer_windows) or any(m.layer_chunks), 'sliding windows or chunks with latent '
                                                    f"attention ({name}'s class has none)"),
      (bool(others), f"attention.{', attention.'.join(others)} with latent attention, which "
                     f"{name}'s class does not compute"),
      (scaled and (sc.kind not in _MSCALED or sc.factor <= 1),
       f"a softmax scale without a RoPE scaling of a factor above 1 ({name}'s class scales "
       'the softmax by its mscale_all_dim alone)'),
      (sc.kind in positions.scaling.TEMPERED and sc.attention_factor_dims != 'rotated',
       f"{sc.kind}'s attention factor on every dimension of q and k ({name}'s class "
       'multiplies the rotated ones alone). Fix: train or continue with '
       '--config.model.position.rope.scaling.attention_factor_dims=rotated'),
      (fam == FAMILY_V2 and m.position.rope.layout != 'interleaved',
       "RoPE on the halves with DeepSeek-V2's mixture (its class rotates interleaved pairs)"),
      (m.mlp not in ('gated', 'moe'), f"mlp={m.mlp!r} ({name}'s is gated, or its mixture)"),
      (m.biases != 'none', f"biases={m.biases!r} ({name}'s class has none)"),
      (m.mlp == 'moe' and not routed(o, m.d_ff, o.router),
       "a mixture other than DeepSeek-V3's (sigmoid scores) or DeepSeek-V2's (the softmax's "
       'probabilities, not renormalized, groups scored by their best, no choice bias), each '
       "weighting the experts' outputs with no biases or clamp, an ungated shared expert a "
       'whole number of experts wide, the dense layers first'),
  )) or ''


def config_fields(m) -> dict:
  """DeepSeek-V3's or V2's own config.json fields (the rest are written as the Llama
  family's)."""
  o, e = m.mla, positions.head_dim(m)
  out = {'q_lora_rank': o.q_rank or None, 'kv_lora_rank': o.kv_rank,
         'qk_nope_head_dim': e - o.rope_dim, 'qk_rope_head_dim': o.rope_dim,
         'head_dim': o.rope_dim, 'v_head_dim': latent_attention.value_dim(m),
         'attention_bias': False, **routing_config(m)}
  if family(m) == FAMILY:
    out.update(rope_interleave=m.position.rope.layout == 'interleaved',
               num_nextn_predict_layers=0)
  else:
    out['mlp_bias'] = False
  return out


def scale_softmax(out: dict, m) -> None:
  """The softmax scale its option wrote (`softmax_scale`, roformer/attention_options/) as the
  written scaling's mscale_all_dim (in both of its forms), from
  scale = head_dim^-1/2 (0.1 mscale_all_dim ln(factor) + 1)^2."""
  scale = out.pop('softmax_scale', None)
  if scale is None:
    return
  grown = math.sqrt(scale * positions.head_dim(m) ** 0.5)
  mscale_all_dim = (grown - 1.0) / (0.1 * math.log(m.position.rope.scaling.factor))
  for key in ('rope_scaling', 'rope_parameters'):
    out[key] = {**out[key], 'mscale_all_dim': mscale_all_dim}
