"""gpt-oss (GptOssForCausalLM; OpenAI 2025): Llama's pre-norm block with biases on q, k, v and o,
a learned sink logit per head in each softmax (`attention.sink_logit`), windows on alternate
layers (`layer_types`; 128 wide in the released models), YaRN with its unrounded ramp
(`truncate: false`), and a mixture of experts whose router and projections have biases and whose
SwiGLU is clamped (`moe.biases`, `moe.swiglu_limit`, `moe.swiglu_alpha`; roformer/moe.py).
roformer/hf_config.py reads the rest of its config as the Llama family's; this module holds its
own fields and tensors.

The experts are stored fused: `gate_up_proj` [E, d, 2f] with the gate and up columns interleaved
(gate in the even ones), `down_proj` [E, f, d], each with a bias, and the router as a Linear
with a bias. The released checkpoints (openai/gpt-oss-20b, -120b) store the experts' matrices in
MXFP4 (`*_blocks`: two 4-bit E2M1 values per byte, low nibble first, in groups of 32 along the
input; `*_scales`: one E8M0 power of two per group, biased by 127): `dequantized` expands them to
float32 on import (each value is exact in float32), and an export writes float32 matrices.
"""

import numpy as np

from roformer import attention_options
from roformer import errors
from roformer import hf_fields
from roformer import hf_fp8

FAMILY = 'gpt_oss'
# E2M1's sixteen values, by their 4-bit code (sign in the high bit).
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
_EXPERTS = 'mlp.experts.'
_MATRICES = ('gate_up_proj', 'down_proj')
# GptOssConfig's defaults where a file leaves them out.
DEFAULT_SCALING = {'rope_type': 'yarn', 'factor': 32.0, 'beta_fast': 32.0, 'beta_slow': 1.0,
                   'truncate': False, 'original_max_position_embeddings': 4096}
DEFAULT_THETA, DEFAULT_WINDOW, DEFAULT_HEAD_DIM = 150000.0, 128, 64
_read = hf_fields.read


def dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
  """MXFP4 `blocks` [..., rows, groups, 16] (bytes) and `scales` [..., rows, groups] as float32
  [..., cols, rows]: each byte's low then high nibble, times 2^(scale - 127), transposed as
  transformers lays the experts' matrices out ([E, in, out])."""
  blocks = np.asarray(blocks).astype(np.uint8)
  values = np.stack([FP4_VALUES[blocks & 0x0F], FP4_VALUES[blocks >> 4]], axis=-1)
  values = values.reshape(blocks.shape[:-1] + (32,))
  values = values * np.exp2(np.asarray(scales).astype(np.int32) - 127)[..., None].astype(
      np.float32)
  return np.swapaxes(values.reshape(blocks.shape[:-2] + (-1,)), -1, -2)


def dequantized(tensors: dict) -> dict:
  """The checkpoint's tensors with every MXFP4 pair (`NAME_blocks`, `NAME_scales`) replaced by
  the float32 NAME it encodes; other tensors as they are."""
  out = {}
  for name, array in tensors.items():
    if name.endswith('_scales') and name[:-len('_scales')] + '_blocks' in tensors:
      continue
    if name.endswith('_blocks'):
      base = name[:-len('_blocks')]
      if base + '_scales' not in tensors:
        raise errors.DamagedFileError(f'the MXFP4 tensor {name!r} has no {base}_scales beside it. '
                                      'Fix: download every weight file again.')
      scales = tensors[base + '_scales']
      if array.ndim < 3 or array.shape[-1] != 16 or array.shape[:-1] != scales.shape:
        raise errors.DamagedFileError(
            f'the MXFP4 tensor {name!r} has shape {array.shape} beside {base}_scales of '
            f'{scales.shape}, where transformers reads [..., groups, 16] bytes and [..., groups] '
            'scales. Fix: download every weight file again.')
      out[base] = dequantize(array, scales)
    else:
      out[name] = array
  return out


def check_quantization(hf: dict, fam: str, where: str) -> None:
  """A quantized checkpoint is read only where its weights can be expanded exactly: gpt-oss's
  MXFP4 experts, and block-scaled FP8 (roformer/hf_fp8.py). Any other quantization_config is one
  line naming it."""
  quantization = hf.get('quantization_config')
  if quantization is None or hf_fp8.quantized_blocks(hf, where):
    return
  method = quantization.get('quant_method') if isinstance(quantization, dict) else quantization
  if fam == FAMILY and method == 'mxfp4':
    return
  raise errors.ConfigError(
      f'{where}: quantization_config {method!r}, weights this project does not read. Fix: the '
      'unquantized checkpoint (or one saved after dequantizing it with transformers).')


def moe_fields(hf: dict, where: str) -> dict:
  """config.model.moe's fields of gpt-oss's experts beyond the mixture's own."""
  number = lambda name, default: hf_fields.positive(_read(hf, name, default), name, where)
  return {'biases': True, 'swiglu_limit': number('swiglu_limit', 7.0),
          'swiglu_alpha': number('swiglu_alpha', 1.702)}


def read_mlp(t, p: str, m) -> dict:
  """A layer's router and experts as the MoE's parameters."""
  d, f, e = m.d_model, m.d_ff, m.moe.num_experts
  gate_up = t(p + _EXPERTS + 'gate_up_proj', (e, d, 2 * f))
  gate_up_bias = t(p + _EXPERTS + 'gate_up_proj_bias', (e, 2 * f))
  return {'router': t(p + 'mlp.router.weight', (e, d)).T,
          'router_bias': t(p + 'mlp.router.bias', (e,)),
          'gate': gate_up[..., 0::2], 'up': gate_up[..., 1::2],
          'gate_bias': gate_up_bias[:, 0::2], 'up_bias': gate_up_bias[:, 1::2],
          'down': t(p + _EXPERTS + 'down_proj', (e, f, d)),
          'down_bias': t(p + _EXPERTS + 'down_proj_bias', (e, d))}


def write_mlp(out: dict, p: str, mlp: dict, m) -> None:
  """A layer's MoE parameters as gpt-oss's tensors (float32; zero biases where it has none)."""
  array = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  e, f, d = m.moe.num_experts, m.d_ff, m.d_model
  bias = lambda name, shape: array(mlp[name]) if name in mlp else np.zeros(shape, np.float32)
  interleave = lambda a, b: np.stack([np.asarray(a), np.asarray(b)], -1).reshape(
      a.shape[:-1] + (-1,))
  out[p + 'mlp.router.weight'] = array(np.asarray(mlp['router']).T)
  out[p + 'mlp.router.bias'] = bias('router_bias', (e,))
  out[p + _EXPERTS + 'gate_up_proj'] = array(interleave(mlp['gate'], mlp['up']))
  out[p + _EXPERTS + 'gate_up_proj_bias'] = array(interleave(bias('gate_bias', (e, f)),
                                                             bias('up_bias', (e, f))))
  out[p + _EXPERTS + 'down_proj'] = array(mlp['down'])
  out[p + _EXPERTS + 'down_proj_bias'] = bias('down_bias', (e, d))


def sink_option(m):
  """The attention option on that adds a sink logit per head (`attention.sink_logit`), or
  None."""
  return next((o for o in attention_options.enabled(m.attention) if o.adds_sink), None)


def read_sinks(t, p: str, heads: int) -> np.ndarray:
  return t(p + 'self_attn.sinks', (heads,))


def write_sinks(out: dict, p: str, attn: dict, m) -> None:
  """Each head's sink logit: the learned ones, or the fixed ones the option gives."""
  sinks = (attn['sink'] if 'sink' in attn
           else sink_option(m).fixed_sinks(m.attention, m.num_heads))
  out[p + 'self_attn.sinks'] = np.ascontiguousarray(np.asarray(sinks, np.float32))


def export_refusal(m, windows) -> str:
  """Why GptOssForCausalLM does not compute the mixture model `m` ('' where it does): its
  attention always has the sinks, its experts always clamp their SwiGLU, its q, k, v and o have
  biases or none, and its windowed layers share one window."""
  if sink_option(m) is None:
    return 'no sink logit (gpt-oss attends with one per head: attention.sink_logit)'
  if not m.moe.swiglu_limit:
    return "an unclamped SwiGLU (moe.swiglu_limit 0; gpt-oss's experts clamp theirs)"
  if not m.moe.renormalize:
    return "the softmax's own weights (gpt-oss weights its top k by their softmax alone)"
  if m.moe.shared_d_ff:
    return 'a shared expert (gpt-oss has none)'
  if m.biases not in ('attention', 'none'):
    return f"biases={m.biases!r} (gpt-oss's are on q, k, v and o, or none)"
  if len({w for w in windows if w}) > 1:
    return 'windows of more than one width'
  return ''


def config_fields(m, windows) -> dict:
  """gpt-oss's own config.json fields (the rest are written as the Llama family's); `windows`:
  each layer's (positions.layer_windows)."""
  o = m.moe
  window = max(windows)
  return {'num_local_experts': o.num_experts, 'num_experts_per_tok': o.experts_per_token,
          'router_aux_loss_coef': o.balance_loss, 'output_router_logits': False,
          'swiglu_limit': o.swiglu_limit, 'swiglu_alpha': o.swiglu_alpha,
          'attention_bias': m.biases == 'attention', 'sliding_window': window or None,
          'layer_types': ['sliding_attention' if w else 'full_attention'
                          for w in windows]}
