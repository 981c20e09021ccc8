"""Llama 4's language model (Llama4ForCausalLM, `llama4_text`; Meta 2025), whose layout is its
"iRoPE": RoPE on interleaved pairs in three layers of four, attending within chunks of
`attention_chunk_size` positions (`model.layer_chunks`), their q and k divided by their root mean
square without a scale (`attention.qk_norm` with `qk_norm_scale` false on the rotary layers,
`qk_norm_layers='rotary'`); the fourth layer without positions, attending to the whole context
with its queries sharpened by 1 + attn_scale log(floor((p + 1) / floor_scale) + 1)
(`attention.nope_temperature`; it reads each token's position, where the class reads its index
in the row: the same for a row from position 0). Its class norms q and k after rotating them,
which removes the q and k multiplier of YaRN or LongRoPE: the import sets it to 1. Its MLP is a
mixture of experts in the layers `moe_layers` (every layer in Llama 4 Scout, every other one in
Maverick: `interleave_moe_layer_step` 2): each token goes to its k (1) experts, weighted by the
sigmoids of their logits, the weight multiplying the expert's input, beside an ungated shared
expert of the experts' width (`moe.router='sigmoid'`, `moe.weight_inputs`, `moe.shared_gate`
false; roformer/moe.py). The other layers' MLP is Llama's gated one, `intermediate_size_mlp`
wide (`moe.dense_layers`, `moe.dense_d_ff`; a dense MLP in every layer where `moe_layers` is
empty; read and written by roformer/hf_moe.py). roformer/hf_config.py reads the rest as the
Llama family's; this module holds its own fields and tensors. An export writes the same class
for a model of this layout (`export_block`) and refuses what the class does not compute;
the layout is its where a model has chunks, its routing, or an attention option as its class
alone computes it (the temperature; QK-norm without a scale on the RoPE layers).
"""

import numpy as np

from roformer import attention_options
from roformer import errors
from roformer import hf_fields
from roformer import hf_layers
from roformer import moe
from roformer import positions
from roformer import self_attention

FAMILY = 'llama4'
DEFAULT_THETA, DEFAULT_HEAD_DIM, DEFAULT_CHUNK = 500000.0, 128, 8192
MLP = 'feed_forward.'
_read = hf_fields.read


def sparse_layers(hf: dict, layers: int, where: str) -> list:
  """The layers whose MLP is the mixture (Llama4TextConfig's moe_layers, else every
  interleave_moe_layer_step-th layer from the step's own)."""
  step = hf_layers.interval(hf, 'interleave_moe_layer_step', 1, where)
  sparse = hf.get('moe_layers')
  return sorted(sparse) if sparse is not None else list(range(step - 1, layers, step))


def model_fields(hf: dict, layers: int, where: str) -> dict:
  """config.model's fields of its layout: the layers' kinds and chunks, and the NoPE layers'
  temperature (QK-norm is the option's own, roformer/attention_options/qk_norm.py)."""
  rotates = hf_layers.rotating_layers(hf, layers, where)  # no_rope_layers.
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
  """A sparse layer's router, experts ([E, d, 2f] with the gate's columns first) and shared
  expert (its dense layers are read as the Qwen MoEs', roformer/hf_moe.py)."""
  d, f = m.d_model, m.d_ff
  e = m.moe.num_experts
  gate_up = t(p + MLP + 'experts.gate_up_proj', (e, d, 2 * f))
  s = m.moe.shared_d_ff
  return {'router': t(p + MLP + 'router.weight', (e, d)).T,
          'gate': gate_up[..., :f], 'up': gate_up[..., f:],
          'down': t(p + MLP + 'experts.down_proj', (e, f, d)),
          'shared': {n: {'kernel': t(f'{p}{MLP}shared_expert.{n}_proj.weight', shape).T}
                     for n, shape in (('gate', (s, d)), ('up', (s, d)), ('down', (d, s)))}}


def write_mlp(out: dict, p: str, mlp: dict, m) -> None:
  """A sparse layer's MLP as Llama 4's tensors: the router, the experts (the gate's columns
  first) and the shared expert."""
  array = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  out[p + MLP + 'router.weight'] = array(np.asarray(mlp['router']).T)
  out[p + MLP + 'experts.gate_up_proj'] = array(np.concatenate(
      [np.asarray(mlp['gate']), np.asarray(mlp['up'])], -1))
  out[p + MLP + 'experts.down_proj'] = array(mlp['down'])
  for n in ('gate', 'up', 'down'):
    out[f'{p}{MLP}shared_expert.{n}_proj.weight'] = array(
        np.asarray(mlp['shared'][n]['kernel']).T)


def export_block(m) -> bool:
  """Whether the model `m` has something of Llama 4's own (chunks, its routing, or an attention
  option as only its class computes it: the NoPE layers' temperature, the unscaled QK-norm of
  the RoPE layers), and so is exported to its class."""
  own = lambda o: o.transformers_computes(m.attention, FAMILY) and not any(
      o.transformers_computes(m.attention, f) for f in o.transformers_families if f != FAMILY)
  return (bool(any(m.layer_chunks)) or (m.mlp == 'moe' and m.moe.weight_inputs)
          or any(own(o) for o in attention_options.enabled(m.attention)))


def _chunks(m) -> tuple[int, ...]:
  return tuple(self_attention.layer_chunk(m, i) for i in range(m.num_layers))


def _acts_before_rotation(option) -> bool:
  """Whether an attention option changes q and k before their rotation (its `queries_keys`
  hook: QK-norm), where Llama 4's class applies its norm after it."""
  return type(option).queries_keys is not attention_options.AttentionOption.queries_keys


def export_refusal(m, options) -> str:
  """Why Llama4ForCausalLM does not compute the model `m` ('' where it does)."""
  rotates, chunks = positions.rope_layers(m), _chunks(m)
  o, scaling = m.moe, m.position.rope.scaling
  llama4_routing = (o.router, o.weight_inputs, o.shared_gate, o.shared_d_ff, o.renormalize,
                    o.biases, o.swiglu_limit, o.choice_bias, o.groups, o.routed_scale) == (
                        'sigmoid', True, False, m.d_ff, False, False, 0, False, 1, 1.0)
  failed, reason = hf_fields.options_check(m, options, FAMILY, 'in a Llama 4 block')
  normed = any(_acts_before_rotation(o) for o in options)
  return hf_fields.first_failed((
      *hf_fields.llama_block_checks(m, "Llama 4's chunks or routing", 'Llama 4'),
      (m.position.rope.fraction < 1,
       f"partial rotary (rope.fraction={m.position.rope.fraction}): Llama 4's class rotates "
       'whole heads'),
      (rotates is None, 'layers other than RoPE or without positions in a Llama 4 block'),
      (any(m.layer_windows), 'sliding windows in a Llama 4 block (its local layers are chunked)'),
      (len({c for c in chunks if c}) > 1, f'chunks of several sizes {sorted(set(chunks))} (Llama '
                                          "4's class has one)"),
      (rotates is not None and any(chunks) and [bool(c) for c in chunks] != list(rotates),
       "chunks on other layers than the RoPE ones (Llama 4's class chunks exactly those)"),
      (m.biases not in ('none', 'attention'),
       f"biases={m.biases!r} (Llama 4's are on q, k, v and o, or none)"),
      (m.mlp == 'moe' and not llama4_routing,
       "a mixture other than Llama 4's (sigmoid weights on the inputs of k experts beside an "
       'ungated shared expert as wide, no biases, no clamp)'),
      (m.mlp not in ('moe', 'gated'), f"mlp={m.mlp!r} (Llama 4's is gated or its mixture)"),
      (failed, reason),
      (normed and scaling.kind in positions.scaling.TEMPERED and scaling.attention_factor != 1,
       f"{scaling.kind}'s q and k multiplier with QK-norm: Llama 4's class norms q and k after "
       'rotating them, which removes it. Fix: train or continue with '
       '--config.model.position.rope.scaling.attention_factor=1'),
  )) or ''


def config_fields(m) -> dict:
  """Llama 4's own config.json fields (the rest are written as the Llama family's; its
  options' switches by the options, `transformers_fields`)."""
  chunks, sparse = _chunks(m), m.mlp == 'moe'
  return {'no_rope_layers': [int(r) for r in positions.rope_layers(m)],
          'layer_types': ['chunked_attention' if c else 'full_attention' for c in chunks],
          'attention_chunk_size': max(chunks) or None, 'attention_bias': m.biases == 'attention',
          'use_qk_norm': False, 'attn_temperature_tuning': False,
          'moe_layers': [i for i in range(m.num_layers)
                         if sparse and not moe.dense_layer(m, i)],
          'interleave_moe_layer_step': 1, 'intermediate_size': m.d_ff,
          'intermediate_size_mlp': moe.dense_width(m) if sparse else m.d_ff,
          'router_aux_loss_coef': m.moe.balance_loss,
          'num_local_experts': m.moe.num_experts if sparse else 1,
          'num_experts_per_tok': m.moe.experts_per_token if sparse else 1,
          'output_router_logits': False, 'router_jitter_noise': 0.0}
