"""Llama 4's language model (Llama4ForCausalLM, `llama4_text`; Meta 2025), whose layout is its
"iRoPE": RoPE on interleaved pairs in three layers of four, attending within chunks of
`attention_chunk_size` positions (`model.layer_chunks`), their q and k divided by their root mean
square without a scale (`attention.qk_norm` with `qk_norm_scale` false on the rotary layers,
`qk_norm_layers='rotary'`); the fourth layer without positions, attending to the whole context
with its queries sharpened by 1 + attn_scale log(floor((p + 1) / floor_scale) + 1)
(`attention.nope_temperature`). Its class norms q and k after rotating them, which removes the
q and k multiplier of YaRN or LongRoPE: the import sets it to 1. Its MLP is a mixture of experts in every layer (Llama 4 Scout's
layout): each token goes to its k (1) experts, weighted by the sigmoids of their logits, the
weight multiplying the expert's input, beside an ungated shared expert of the experts' width
(`moe.router='sigmoid'`, `moe.weight_inputs`, `moe.shared_gate` false; roformer/moe.py).
roformer/hf_config.py reads the rest as the Llama family's; this module holds its own fields and
tensors. Dense MLPs between sparse ones (Maverick's `interleave_moe_layer_step` 2, `moe_layers`
short of every layer) are refused in one line; so is an export of such a model (its class is not
written here).
"""

from roformer import errors
from roformer import hf_fields
from roformer import hf_layers
from roformer import positions

FAMILY = 'llama4'
DEFAULT_THETA, DEFAULT_HEAD_DIM, DEFAULT_CHUNK = 500000.0, 128, 8192
_MLP = 'feed_forward.'
_read = hf_fields.read


def check_sparse(hf: dict, layers: int, where: str) -> None:
  """Every layer's MLP must be the mixture (Llama4TextConfig's moe_layers, else every
  interleave_moe_layer_step-th layer from the step's own)."""
  step = hf_layers.interval(hf, 'interleave_moe_layer_step', 1, where)
  sparse = hf.get('moe_layers')
  if sparse is None:
    sparse = list(range(step - 1, layers, step))
  if sorted(sparse) != list(range(layers)):
    raise errors.ConfigError(
        f'{where}: dense MLPs between the sparse ones (moe_layers {sparse}, '
        f'interleave_moe_layer_step {step}); this project reads Llama 4 with experts in every '
        'layer (as Llama 4 Scout). Fix: a checkpoint with interleave_moe_layer_step 1.')


def model_fields(hf: dict, layers: int, where: str) -> dict:
  """config.model's fields of its layout: the layers' kinds and chunks, and the NoPE layers'
  temperature (QK-norm is the option's own, roformer/attention_options/qk_norm.py)."""
  rotates = hf_layers.smollm3_rotates(hf, layers, where)  # no_rope_layers: SmolLM3's rule.
  if not any(rotates):
    raise errors.ConfigError(f'{where}: no_rope_layers leaves no layer with RoPE; this project '
                             'reads Llama 4 checkpoints with some (3 in each 4). Fix: a checkpoint '
                             'with RoPE layers.')
  chunk = _read(hf, 'attention_chunk_size', DEFAULT_CHUNK)
  kinds = hf_layers.layer_types(hf, layers, where, [
      'chunked_attention' if r and chunk else 'full_attention' for r in rotates],
                                allowed=('chunked_attention', 'full_attention'))
  if 'chunked_attention' in kinds and not chunk:
    raise errors.DamagedFileError(f'{where}: attention_chunk_size is {chunk!r} while layers are '
                                  'chunked (chunked_attention). Fix: use the config.json that '
                                  'came with the weights.')
  fields = {'layer_kinds': positions.layer_kinds_of(rotates),
            'layer_chunks': tuple(int(chunk) if k == 'chunked_attention' else 0 for k in kinds)}
  scale = _read(hf, 'attn_scale', 0.1)
  if _read(hf, 'attn_temperature_tuning', True) and not all(rotates) and scale != 0:
    fields['attention'] = {
        'nope_temperature': True,
        'nope_temperature_floor': hf_layers.interval(hf, 'floor_scale', 8192, where),
        'nope_temperature_scale': hf_fields.positive(scale, 'attn_scale', where)}
  return fields


def scaling_fields(hf: dict, kind: str) -> dict:
  """rope.scaling's fields beyond the family's: the class norms q and k after rotating them
  (`use_qk_norm`), which removes the q and k multiplier of a scaling that has one (YaRN's,
  LongRoPE's), so this project's, applied with the rotation, is 1 there."""
  if _read(hf, 'use_qk_norm', True) and kind in positions.scaling.TEMPERED:
    return {'attention_factor': 1.0}
  return {}


def moe_fields() -> dict:
  """config.model.moe's fields of Llama 4's routing beyond the mixture's own."""
  return {'router': 'sigmoid', 'weight_inputs': True, 'shared_gate': False,
          'renormalize': False}


def read_mlp(t, p: str, m) -> dict:
  """A layer's router, experts ([E, d, 2f] with the gate's columns first) and shared expert."""
  d, f, e = m.d_model, m.d_ff, m.moe.num_experts
  gate_up = t(p + _MLP + 'experts.gate_up_proj', (e, d, 2 * f))
  s = m.moe.shared_d_ff
  return {'router': t(p + _MLP + 'router.weight', (e, d)).T,
          'gate': gate_up[..., :f], 'up': gate_up[..., f:],
          'down': t(p + _MLP + 'experts.down_proj', (e, f, d)),
          'shared': {n: {'kernel': t(f'{p}{_MLP}shared_expert.{n}_proj.weight', shape).T}
                     for n, shape in (('gate', (s, d)), ('up', (s, d)), ('down', (d, s)))}}
