"""QK-norm's tensors in the Hugging Face families that have it (`attention.qk_norm`,
roformer/attention_options/qk_norm.py), read into a block's `attn/q_scale`, `attn/k_scale` (and
`q_bias`, `k_bias`) and written back:

- Qwen3, Qwen3-MoE, Gemma 3, EXAONE 4: `q_norm`, `k_norm`, one RMSNorm scale per dimension of a
  head, shared by the heads (Gemma 3 stores it less 1);
- OLMo 2 and 3, OLMoE, MiniMax-M2: `q_norm`, `k_norm` over all the heads at once;
- Phi (`qk_layernorm`): `q_layernorm`, `k_layernorm`, one LayerNorm shared by the heads, with a
  bias;
- StableLM (`qk_layernorm`, StableLM 2 12B): `q_layernorm.norms.<i>`, one LayerNorm per head
  without a bias;
- Cohere (`use_qk_norm`, Command R+): `q_norm`, `k_norm` of [heads, head_dim], a LayerNorm per
  head without a bias.
The queries' and keys' columns of an export may be permuted (to transformers' rotary order);
the scales and biases go with them.
"""

import numpy as np

from roformer import attention_options
from roformer.attention_options import qk_norm

# family: the norms' names under self_attn., and whether each head's is a tensor of its own
# (StableLM's `norms.<i>`); their span and bias are the option's (`qk_norm.transformers_norm`).
LAYOUTS = {**{fam: ('q_norm', 'k_norm', False) for fam in (
    'qwen3', 'qwen3_moe', 'gemma3', 'exaone4', 'olmo2', 'olmo3', 'olmoe', 'cohere',
    'glm4_moe', 'minimax_m2')},
           'phi': ('q_layernorm', 'k_layernorm', False),
           'stablelm': ('q_layernorm.norms', 'k_layernorm.norms', True)}


def has(m, fam: str) -> bool:
  """Whether the model config `m` of family `fam` has QK-norm as the family's class computes
  it, and so its tensors (the import sets it from the file's switch, or always for Qwen3's and
  OLMo 2's kinds)."""
  return fam in LAYOUTS and any(o.transformers_computes(m.attention, fam)
                                for o in attention_options.enabled(m.attention))


def _shape(span: str, heads: int, head_dim: int) -> tuple[int, ...]:
  return {'head': (head_dim,), 'each_head': (heads, head_dim),
          'heads': (heads * head_dim,)}[span]


def read(t, p: str, fam: str, heads: tuple[int, int], head_dim: int, offset: float) -> dict:
  """A layer's QK-norm parameters from its tensors (`t`, roformer/hf_weights.py's reader);
  `heads`: the query and key/value heads; `offset`: what the family stores its scales less."""
  (q_name, k_name, apart), (_, span, bias) = LAYOUTS[fam], qk_norm.transformers_norm(fam)
  out = {}
  for n, name, count in (('q', q_name, heads[0]), ('k', k_name, heads[1])):
    shape = _shape(span, count, head_dim)
    base = p + 'self_attn.' + name
    if apart:  # One LayerNorm per head.
      out[f'{n}_scale'] = np.stack([t(f'{base}.{i}.weight', (head_dim,))
                                    for i in range(count)]) + np.float32(offset)
    else:
      out[f'{n}_scale'] = t(base + '.weight', shape) + np.float32(offset)
    if bias:
      out[f'{n}_bias'] = t(base + '.bias', shape)
  return out


def write(out: dict, p: str, attn: dict, fam: str, heads: tuple[int, int], order: np.ndarray,
          offset: float) -> None:
  """A layer's QK-norm parameters as the family's tensors, their columns in `order`."""
  (q_name, k_name, apart), span = LAYOUTS[fam], qk_norm.transformers_norm(fam)[1]
  for n, name, count in (('q', q_name, heads[0]), ('k', k_name, heads[1])):
    base = p + 'self_attn.' + name
    for kind in ('scale', 'bias'):
      if f'{n}_{kind}' not in attn:
        continue
      array = np.asarray(attn[f'{n}_{kind}'], np.float32)
      if span == 'heads':  # Within each head of the flat width.
        array = array.reshape(count, -1)[:, order].reshape(array.shape)
      else:
        array = array[..., order]
      array = array - offset if kind == 'scale' else array
      suffix = 'weight' if kind == 'scale' else 'bias'
      if apart:
        for i, row in enumerate(array):
          out[f'{base}.{i}.{suffix}'] = np.ascontiguousarray(row)
      else:
        out[f'{base}.{suffix}'] = np.ascontiguousarray(array)
