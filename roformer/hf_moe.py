"""The mixture-of-experts families of Hugging Face checkpoints, whose MLP is this project's
`model.mlp='moe'` (roformer/moe.py): MixtralForCausalLM (Mistral's block, k experts with their
weights renormalized), Qwen2MoeForCausalLM (Qwen2's block with q, k and v biases, the softmax's
own weights or renormalized ones, `norm_topk_prob`, and a shared expert gated by a sigmoid),
Qwen3MoeForCausalLM (Qwen3's block with QK-norm over each head), OlmoeForCausalLM (Llama's
pre-norm block with QK-norm over all heads at once), GptOssForCausalLM (biased experts with a
clamped SwiGLU and sinks in attention, roformer/hf_gpt_oss.py) and MiniMaxM2ForCausalLM
(Mixtral's experts chosen by sigmoid scores plus the choice bias, QK-norm over all heads, part
of each head rotated); DeepSeek's, GLM-4.5's and Llama 4's in their own modules. The rest of
each block is read
and written by
roformer/hf_config.py and roformer/hf_weights.py as their dense siblings'; this module holds the
experts' config fields, tensors and export rules.

Dense MLPs between the sparse ones (the Qwen MoEs' `mlp_only_layers` and `decoder_sparse_step`,
Llama 4's `moe_layers`) are `moe.dense_layers`, of their own width (`intermediate_size`; Llama
4's `intermediate_size_mlp`). The Qwen MoEs' sliding windows are refused, and so is OLMoE's
`clip_qkv` (clamped after its QK-norm, where `attention.qkv_clip` clamps before it). The router's
training settings are read too: `router_aux_loss_coef` becomes `moe.balance_loss` (the classes pool
the layers' tokens before the product, where this project sums the layers' own losses).
"""

import numpy as np

from roformer import attention_options
from roformer import errors
from roformer import hf_deepseek
from roformer import hf_fields
from roformer import hf_gpt_oss
from roformer import hf_layers
from roformer import hf_llama4
from roformer import moe
from roformer import positions

FAMILIES = {'mixtral': 'MixtralForCausalLM', 'qwen2_moe': 'Qwen2MoeForCausalLM',
            'qwen3_moe': 'Qwen3MoeForCausalLM', 'olmoe': 'OlmoeForCausalLM',
            hf_gpt_oss.FAMILY: 'GptOssForCausalLM', hf_llama4.FAMILY: 'Llama4ForCausalLM',
            hf_deepseek.FAMILY: 'DeepseekV3ForCausalLM', 'glm4_moe': 'Glm4MoeForCausalLM',
            hf_deepseek.FAMILY_V2: 'DeepseekV2ForCausalLM', 'minimax_m2': 'MiniMaxM2ForCausalLM'}
# The classes' defaults: experts, experts per token, the experts' width field and its default
# (None: the file must give it), and the router's loss coefficient.
_DEFAULTS = {'mixtral': (8, 2, 'intermediate_size', None, 0.001),
             'qwen2_moe': (60, 4, 'moe_intermediate_size', 1408, 0.001),
             'qwen3_moe': (128, 8, 'moe_intermediate_size', 768, 0.001),
             'olmoe': (64, 8, 'intermediate_size', None, 0.01),
             'gpt_oss': (128, 4, 'intermediate_size', 2880, 0.001),
             'llama4': (16, 1, 'intermediate_size', 8192, 0.001),
             'deepseek_v3': (256, 8, 'moe_intermediate_size', 2048, 0.001),
             'glm4_moe': (128, 8, 'moe_intermediate_size', 1408, 0.001),
             'deepseek_v2': (64, None, 'moe_intermediate_size', 1407, 0.001),  # k: given.
             'minimax_m2': (256, 8, 'intermediate_size', 1536, 0.001)}
# Each family's tensor names under a layer: the router, the experts' prefix, their gate, up and
# down projections.
_NAMES = {fam: ('block_sparse_moe.gate', 'block_sparse_moe.experts.', 'w1', 'w3', 'w2')
          for fam in ('mixtral', 'minimax_m2')}
# MiniMax-M2's choice bias: beside its router, not inside it (the others' `gate.` + this).
_CHOICE_BIAS = {'minimax_m2': 'block_sparse_moe.e_score_correction_bias'}
# The mixture classes that rotate part of each head (partial_rotary_factor).
PARTIAL_ROTARY = ('glm4_moe', 'minimax_m2')
_QWEN_NAMES = ('mlp.gate', 'mlp.experts.', 'gate_proj', 'up_proj', 'down_proj')
_read = hf_fields.read


def _qwen_dense_layers(hf: dict, layers: int, where: str) -> tuple[int, ...]:
  """The layers of a Qwen MoE whose MLP is dense: those in `mlp_only_layers`, and those other
  than every `decoder_sparse_step`-th (the classes' rule; all of them without experts)."""
  only = _read(hf, 'mlp_only_layers', None) or []
  if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                       for i in only):
    raise errors.DamagedFileError(f'{where}: mlp_only_layers is {only!r}, where transformers '
                                  'reads a list of layer indices. Fix: use the config.json that '
                                  'came with the weights.')
  step = hf_layers.interval(hf, 'decoder_sparse_step', 1, where)
  experts = _read(hf, 'num_experts', 1)
  return tuple(i for i in range(layers) if i in only or (i + 1) % step or not experts)


def dense_fields(hf: dict, fam: str, layers: int, where: str) -> dict:
  """config.model's fields of the dense layers between the sparse ones (`moe.dense_layers`,
  and their width), or of a dense MLP in every layer (Llama's gated MLP)."""
  if fam == hf_llama4.FAMILY:
    sparse = hf_llama4.sparse_layers(hf, layers, where)
    dense = tuple(i for i in range(layers) if i not in sparse)
    width = hf_fields.integer(hf, 'intermediate_size_mlp', 16384, where)
  elif fam.startswith('qwen'):
    dense = _qwen_dense_layers(hf, layers, where)
    width = hf_fields.integer(hf, 'intermediate_size', 5632 if fam == 'qwen2_moe' else 6144,
                              where)
  elif fam in hf_deepseek.DEEPSEEK_LAYOUT:
    dense, width = hf_deepseek.dense_layers(hf, fam, layers, where)
  else:
    return {}
  if len(dense) == layers:
    return {'mlp': 'gated', 'd_ff': width}
  return {'moe': {'dense_layers': dense, 'dense_d_ff': width if dense else 0}}


def model_fields(hf: dict, fam: str, head_dim: int, layers: int, where: str) -> dict:
  """config.model's fields of a mixture family's MLP (d_ff is the experts' width; the dense
  layers between them, `dense_fields`); what this project does not compute as the class does
  is refused in one line."""
  experts, k, width, default_width, coef = _DEFAULTS[fam]
  if fam.startswith('qwen'):
    if hf.get('use_sliding_window'):
      raise errors.ConfigError(f'{where}: use_sliding_window in a Qwen MoE, which this project '
                               'does not read. Fix: a checkpoint with use_sliding_window false '
                               '(as those on the Hub).')
  dense = dense_fields(hf, fam, layers, where)
  if dense.get('mlp') == 'gated':
    return dense
  if fam == 'olmoe' and hf.get('clip_qkv') is not None:
    raise errors.ConfigError(f"{where}: clip_qkv in OLMoE clamps q, k and v after its QK-norm; "
                             'this project clamps them before it (attention.qkv_clip). Fix: an '
                             'OLMoE checkpoint without clip_qkv (null, as OLMoE-1B-7B).')
  if fam == 'olmoe' and head_dim * _read(hf, 'num_attention_heads', 0) != hf.get('hidden_size'):
    raise errors.ConfigError(f'{where}: head_dim {head_dim} does not split hidden_size, which '
                             "OLMoE's QK-norm spans. Fix: a checkpoint without head_dim.")
  num = hf_fields.integer(hf, 'num_experts', _read(hf, 'num_local_experts', _read(
      hf, 'n_routed_experts', experts)), where)
  per_token = hf_fields.integer(hf, 'num_experts_per_tok', k, where)
  if per_token > num:
    raise errors.DamagedFileError(f'{where}: num_experts_per_tok {per_token} is more than the '
                                  f'{num} experts. Fix: use the config.json that came with the '
                                  'weights.')
  d_ff = hf_fields.integer(hf, width, default_width or hf_fields.field(hf, width, where), where)
  # Llama 4's shared expert is as wide as the others, DeepSeek-V3's n_shared_experts times.
  shared = (hf_fields.integer(hf, 'shared_expert_intermediate_size', 5632, where)
            if fam == 'qwen2_moe'
            else d_ff if fam == hf_llama4.FAMILY
            else d_ff * (hf_fields.integer(hf, 'n_shared_experts',
                                           hf_deepseek.DEEPSEEK_LAYOUT[fam], where, low=0)
                         if _read(hf, 'n_shared_experts', 0) is not None else 0)
            if fam in hf_deepseek.DEEPSEEK_LAYOUT else 0)
  # gpt-oss takes the softmax of its top k logits: the renormalized weights.
  renormalize = fam in ('mixtral', hf_gpt_oss.FAMILY, 'minimax_m2') or bool(
      _read(hf, 'norm_topk_prob', False))
  return {'mlp': 'moe', 'd_ff': d_ff,
          'moe': {**dense.get('moe', {}),
                  'num_experts': num, 'experts_per_token': per_token, 'shared_d_ff': shared,
                  'renormalize': renormalize,
                  'balance_loss': float(_read(hf, 'router_aux_loss_coef', coef)),
                  **(hf_gpt_oss.moe_fields(hf, where) if fam == hf_gpt_oss.FAMILY else {}),
                  **(hf_llama4.moe_fields() if fam == hf_llama4.FAMILY else {}),
                  # MiniMax-M2 chooses by the sigmoid scores plus the choice bias.
                  **({'router': 'sigmoid', 'choice_bias': True} if fam == 'minimax_m2' else {}),
                  **(hf_deepseek.moe_fields(hf, fam, where)
                     if fam in hf_deepseek.DEEPSEEK_LAYOUT else {})}}


def _names(fam: str) -> tuple[str, ...]:
  return _NAMES.get(fam, _QWEN_NAMES)


def _dense_prefix(fam: str) -> str:
  return hf_llama4.MLP if fam == hf_llama4.FAMILY else 'mlp.'


def read_mlp(t, p: str, fam: str, m, layer: int) -> dict:
  """Layer `layer`'s experts (each one's [out, in] tensors, or transformers 5's fused [E, 2f, d]
  and [E, d, f] ones where a checkpoint holds those) as the MoE's parameters, or its dense gated
  MLP (`moe.dense_layers`, and every layer of a model without experts)."""
  if m.mlp != 'moe' or moe.dense_layer(m, layer):
    f, d = (m.d_ff if m.mlp != 'moe' else moe.dense_width(m)), m.d_model
    return {n: {'kernel': t(f'{p}{_dense_prefix(fam)}{n}_proj.weight', shape).T}
            for n, shape in (('gate', (f, d)), ('up', (f, d)), ('down', (d, f)))}
  if fam == hf_gpt_oss.FAMILY:
    return hf_gpt_oss.read_mlp(t, p, m)
  if fam == hf_llama4.FAMILY:
    return hf_llama4.read_mlp(t, p, m)
  d, f, e = m.d_model, m.d_ff, m.moe.num_experts
  router, experts, gate, up, down = _names(fam)
  mlp = {'router': t(p + router + '.weight', (e, d)).T}
  if p + 'mlp.experts.gate_up_proj' in t.tensors:
    fused = t(p + 'mlp.experts.gate_up_proj', (e, 2 * f, d))
    mlp.update(gate=fused[:, :f].transpose(0, 2, 1), up=fused[:, f:].transpose(0, 2, 1),
               down=t(p + 'mlp.experts.down_proj', (e, d, f)).transpose(0, 2, 1))
  else:
    stacked = lambda name, shape: np.stack([t(f'{p}{experts}{j}.{name}.weight', shape).T
                                            for j in range(e)])
    mlp.update(gate=stacked(gate, (f, d)), up=stacked(up, (f, d)), down=stacked(down, (d, f)))
  if m.moe.choice_bias:  # DeepSeek-V3's, MiniMax-M2's.
    mlp['choice_bias'] = t(p + _choice_bias(fam), (e,))
  if m.moe.shared_d_ff:
    s = m.moe.shared_d_ff
    mlp['shared'] = {n: {'kernel': t(f'{p}{_shared(fam)}{n}_proj.weight', shape).T}
                     for n, shape in (('gate', (s, d)), ('up', (s, d)), ('down', (d, s)))}
    if m.moe.shared_gate:
      mlp['shared_gate'] = t(p + 'mlp.shared_expert_gate.weight', (1, d)).T
  return mlp


def _choice_bias(fam: str) -> str:
  """The choice bias's tensor name under a layer."""
  return _CHOICE_BIAS.get(fam, _names(fam)[0] + '.e_score_correction_bias')


def _shared(fam: str) -> str:
  """The shared expert's prefix under a layer (Qwen2-MoE's, DeepSeek-V3's)."""
  return 'mlp.shared_experts.' if fam in hf_deepseek.DEEPSEEK_LAYOUT else 'mlp.shared_expert.'


def write_mlp(out: dict, p: str, mlp: dict, fam: str, m, layer: int) -> None:
  """Layer `layer`'s MoE parameters as the family's per-expert tensors (the Hub's layout, which
  transformers 5 converts on loading; gpt-oss's fused ones), or its dense gated MLP's."""
  if m.mlp != 'moe' or moe.dense_layer(m, layer):
    for n in ('gate', 'up', 'down'):
      out[f'{p}{_dense_prefix(fam)}{n}_proj.weight'] = np.ascontiguousarray(
          np.asarray(mlp[n]['kernel'], np.float32).T)
    return
  if fam == hf_gpt_oss.FAMILY:
    hf_gpt_oss.write_mlp(out, p, mlp, m)
    return
  if fam == hf_llama4.FAMILY:
    hf_llama4.write_mlp(out, p, mlp, m)
    return
  router, experts, gate, up, down = _names(fam)
  array = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  out[p + router + '.weight'] = array(np.asarray(mlp['router']).T)
  for name, ours in ((gate, 'gate'), (up, 'up'), (down, 'down')):
    for j, kernel in enumerate(np.asarray(mlp[ours])):
      out[f'{p}{experts}{j}.{name}.weight'] = array(kernel.T)
  if fam in hf_deepseek.SIGMOID_ROUTED or fam in _CHOICE_BIAS:  # 0 where the model has none.
    out[p + _choice_bias(fam)] = array(
        mlp['choice_bias'] if m.moe.choice_bias else np.zeros(m.moe.num_experts))
  if m.moe.shared_d_ff:
    for n in ('gate', 'up', 'down'):
      out[f'{p}{_shared(fam)}{n}_proj.weight'] = array(np.asarray(mlp['shared'][n]['kernel']).T)
    if m.moe.shared_gate:
      out[p + 'mlp.shared_expert_gate.weight'] = array(np.asarray(mlp['shared_gate']).T)


def export_family(m) -> str:
  """The transformers mixture class that computes the model `m` builds, or ConfigError saying
  why none does."""
  options = attention_options.enabled(m.attention)
  computes = lambda fam: bool(options) and all(o.transformers_computes(m.attention, fam)
                                               for o in options)
  named = ', '.join(o.field for o in options)
  windows = positions.layer_windows(m)
  o = m.moe  # MiniMax-M2's: DeepSeek-V3's choice without its groups, scale or shared expert.
  if (o.router == 'sigmoid' and o.choice_bias and computes('minimax_m2') and o.groups == 1
      and o.routed_scale == 1 and not o.shared_d_ff and not o.dense_layers):
    fam, why = 'minimax_m2', _minimax_m2_refusal(m, windows)
  elif m.moe.router == 'sigmoid' and hf_deepseek.routed(m.moe, m.d_ff):
    fam, why = 'glm4_moe', _glm4_moe_refusal(m, options, windows)
  elif (m.moe.router != 'softmax' or m.moe.weight_inputs
        or (m.moe.shared_d_ff and not m.moe.shared_gate)):
    raise errors.ConfigError(
        "no transformers class that this project writes computes this model: a mixture of "
        "experts with Llama 4's routing (moe.router, weight_inputs, shared_gate) outside Llama "
        "4's layout, or sigmoid scores otherwise than DeepSeek-V3's mixture. Fix: export a "
        'mixture with the softmax router (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE or gpt-oss), '
        "with Llama 4's whole routing (moe.router='sigmoid'), or DeepSeek-V3's (GLM-4.5).")
  elif m.moe.choice_bias or m.moe.groups > 1 or m.moe.routed_scale != 1:
    raise errors.ConfigError(
        'no transformers class computes this model: a mixture of experts with DeepSeek\'s '
        'choice bias, groups or routed scale (moe.choice_bias, groups, routed_scale) without '
        "latent attention; DeepseekV2ForCausalLM would be the nearest with model.mla, or "
        "Glm4MoeForCausalLM with sigmoid scores. Fix: export a mixture without them, with "
        "moe.router='sigmoid' (GLM-4.5), or train with model.mla (DeepSeek-V2).")
  elif hf_gpt_oss.sink_option(m) or m.moe.swiglu_limit or m.moe.biases:  # gpt-oss's alone.
    fam, why = hf_gpt_oss.FAMILY, hf_gpt_oss.export_refusal(m, windows)
    others = [o.field for o in options if not o.adds_sink]
    why = why or (f'the attention option {", ".join(others)}' if others else '')
  elif m.moe.shared_d_ff:
    fam, why = 'qwen2_moe', (named if options else 'windows' if any(windows) else
                             f'biases={m.biases!r}' if m.biases not in ('qkv', 'none') else '')
  elif computes('qwen3_moe') or computes('olmoe'):  # QK-norm over each head, or over all.
    fam = 'qwen3_moe' if computes('qwen3_moe') else 'olmoe'
    why = 'windows' if any(windows) else (
        f'biases={m.biases!r}' if m.biases not in ('attention', 'none') else '')
  else:
    fam = 'mixtral'
    why = (named if options else
           "the softmax's own weights (moe.renormalize=false) without QK-norm or a shared expert"
           if not m.moe.renormalize else f'biases={m.biases!r}' if m.biases != 'none' else
           'windows that differ by layer' if len(set(windows)) > 1 else '')
  block = (m.normalization, m.norm, m.residual) == ('rms_norm', 'pre', 'sequential')
  if not block:
    why = (f'normalization={m.normalization!r}, norm={m.norm!r}, residual={m.residual!r} '
           "(the mixture classes' block is Llama's: rms_norm, pre, sequential)")
  elif ((m.position.rope.fraction < 1 and fam not in PARTIAL_ROTARY)
        or not all(positions.rope_layers(m))):
    why = ('RoPE on part of each head or of the layers (the mixture classes rotate all of both '
           "but GLM-4.5's and MiniMax-M2's, which rotate part of each head)")
  elif (m.embedding_multiplier, m.residual_multiplier, m.logits_multiplier) != (
      1, 1, 1) or m.logits_softcap or m.get('output_bias'):
    why = 'a multiplier, a soft-cap or an output bias, which the mixture classes do not have'
  if m.moe.dense_layers and fam not in ('qwen2_moe', 'qwen3_moe', 'glm4_moe') and not why:
    why = (f'dense layers between the sparse ones (moe.dense_layers {tuple(m.moe.dense_layers)}'
           '), which among the mixture classes only the Qwen MoEs, GLM-4.5, DeepSeek-V3 and '
           'Llama 4 have')
  if why:
    raise errors.ConfigError(
        f'no transformers class computes this model: a mixture of experts with {why}; '
        f'{FAMILIES[fam]} would be the nearest. Fix: export a mixture on Llama\'s block, with '
        'renormalized weights and no QK-norm (Mixtral), a shared expert (Qwen2-MoE), QK-norm '
        'over each head (Qwen3-MoE) or over all heads (OLMoE), sinks, biased experts and '
        "their clamped SwiGLU (gpt-oss), or DeepSeek-V3's routing (GLM-4.5).")
  return fam


def _minimax_m2_refusal(m, windows) -> str:
  """Why MiniMax-M2's class (Mixtral's experts chosen by sigmoid scores plus the choice bias,
  renormalized; QK-norm over all heads; part of each head rotated; no biases) does not compute
  the model `m` ('' where it does), for a mixture without groups, a scale or a shared expert."""
  o = m.moe
  return ('windows' if any(windows) else f'biases={m.biases!r}' if m.biases != 'none' else
          "the sigmoid scores' own weights (moe.renormalize=false)" if not o.renormalize else
          "Llama 4's weighted inputs (moe.weight_inputs)" if o.weight_inputs else
          'biased experts or their clamp (moe.biases, swiglu_limit)'
          if o.biases or o.swiglu_limit else '')


def _glm4_moe_refusal(m, options, windows) -> str:
  """Why GLM-4.5's class (grouped-query attention with q, k and v biases or none, QK-norm over
  each head or none, part of each head rotated, DeepSeek-V3's mixture) does not compute the
  model `m` ('' where it does)."""
  failed, reason = hf_fields.options_check(m, options, 'glm4_moe', 'in a GLM-4.5 block')
  return ('windows' if any(windows) else
          f'biases={m.biases!r}' if m.biases not in ('qkv', 'none') else reason if failed else '')


def config_fields(fam: str, m) -> dict:
  """The mixture's own config.json fields (the dense ones are written as the sibling's)."""
  o = m.moe
  if fam == hf_gpt_oss.FAMILY:
    return hf_gpt_oss.config_fields(m, positions.layer_windows(m))
  if fam == hf_llama4.FAMILY:
    return hf_llama4.config_fields(m)
  if fam in hf_deepseek.LATENT:
    return hf_deepseek.config_fields(m)
  if fam == 'glm4_moe':  # Its partial rotary as GLM's (roformer/hf_export_config.py).
    return {**hf_deepseek.routing_config(m), 'attention_bias': m.biases == 'qkv'}
  out = {'num_experts_per_tok': o.experts_per_token, 'router_aux_loss_coef': o.balance_loss,
         'output_router_logits': False}
  if fam == 'mixtral':
    return {**out, 'num_local_experts': o.num_experts, 'router_jitter_noise': 0.0,
            'sliding_window': max(positions.layer_windows(m)) or None}
  if fam == 'minimax_m2':  # Its partial rotary as GLM's (roformer/hf_export_config.py).
    return {**out, 'num_local_experts': o.num_experts, 'router_jitter_noise': 0.0}
  out.update(num_experts=o.num_experts, norm_topk_prob=o.renormalize,
             attention_bias=m.biases == 'attention')
  if fam == 'olmoe':
    return {**out, 'clip_qkv': None}
  out.update(moe_intermediate_size=m.d_ff, decoder_sparse_step=1,
             mlp_only_layers=list(o.dense_layers), intermediate_size=moe.dense_width(m),
             use_sliding_window=False, sliding_window=None)
  if fam == 'qwen2_moe':
    out.pop('attention_bias')
    # q, k and v biases always (zero where the model has none), which transformers 4 has too.
    out.update(qkv_bias=True, shared_expert_intermediate_size=o.shared_d_ff)
  return out
