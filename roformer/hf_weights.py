"""Hugging Face weights (`*.safetensors`, sharded or not) as this project's parameters (and back:
roformer/hf_weights_export.py): the tensor names and layouts of the Llama family (Llama, Mistral,
Qwen2, Qwen3: its q_norm and k_norm are QK-norm's scales, `attn/q_scale` and `attn/k_scale`; Gemma
3: those and four norms a block, each storing its scale less 1; SmolLM3: Llama's; Phi-3: Llama's
with q, k and v in one qkv_proj and the MLP's gate and up in one gate_up_proj; OLMo 2 and 3: the
norms of the branches' outputs alone, and q_norm and k_norm over all heads; EXAONE 4: OLMo 2's norms
with q_norm and k_norm over each head; OLMo 1: Llama's without the norms, which have no parameters;
Cohere: Llama's with one norm for both branches, without a bias, and RoPE on interleaved pairs; Phi:
Llama's attention names with `dense` for o_proj, one `input_layernorm` for both branches, `fc1` and
`fc2`, `final_layernorm`, and lm_head's bias as `output_bias`; StableLM: Llama's names with
LayerNorms, and one norm for parallel branches; GLM: Llama's with the MLP's gate and up in one
gate_up_proj, and RoPE on interleaved pairs; GLM-4: GLM's with four norms a block, the branches'
inputs and outputs; StarCoder 2: Llama's names with LayerNorms and a plain MLP, `c_fc` and `c_proj`;
the mixtures of experts: Llama's attention with Qwen3's or OLMo 2's q_norm and k_norm, and their
experts, roformer/hf_moe.py), of Falcon (roformer/hf_falcon.py), of GPT-J (q, k and v apart without
biases, one `ln_1` for both branches, `fc_in` and `fc_out`, lm_head's bias, RoPE on interleaved
pairs), of GPT-NeoX and BLOOM (GPT-NeoX's layout under other names, with a LayerNorm of the
embeddings), and of GPT-2 and MPT (q, k and v in one weight, each one's heads contiguous as here).

The layouts that differ:
- a Linear's weight is [out, in] in PyTorch and its kernel [in, out] here;
- queries, keys and values are one fused [q | k | v] kernel here (k and v of num_kv_heads
  heads); Llama stores q_proj, k_proj and v_proj apart, GPT-NeoX one query_key_value whose
  rows are [q_h, k_h, v_h] head by head;
- the rotary pairs: transformers rotates (x_i, x_{i + r/2}) ("rotate_half"); an import keeps that
  order (`rope.layout='half'`), and an export of a model trained with the interleaved pairs
  (x_{2i}, x_{2i+1}) permutes the rotated columns of q and k to (0, 2, 4, .., 1, 3, 5, ..),
  which leaves every q.k, and so the logits, unchanged (QK-norm's scales are permuted alike,
  and a root mean square does not depend on the order of the dimensions). Cohere's, GPT-J's and
  GLM's classes rotate the interleaved pairs: their import keeps that order
  (`rope.layout='interleaved'`), and an export of a model trained with the halves permutes the
  other way.
"""

import os

import numpy as np

from roformer import errors
from roformer import hf_deepseek
from roformer import hf_falcon
from roformer import hf_fields
from roformer import hf_fp8
from roformer import hf_gpt_oss
from roformer import hf_moe
from roformer import hf_qk_norm
from roformer import positions


def read_safetensors(path) -> dict[str, np.ndarray]:
  """Tensors of a .safetensors file as float32 (the `safetensors` package's numpy reader; its
  bfloat16 tensors come as ml_dtypes arrays; a file with float8 ones, roformer/hf_fp8.py)."""
  if hf_fp8.holds_float8(path):
    return hf_fp8.read(path)
  import safetensors  # pylint: disable=g-import-not-at-top
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  try:
    tensors = safetensors_numpy.load_file(str(path))
  except (safetensors.SafetensorError, OSError, ValueError) as e:
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise errors.DamagedFileError(f'{path} is not a complete .safetensors file ({reason}). '
                                  'Fix: download it again.') from None
  out = {}
  for name, array in tensors.items():
    if not (np.issubdtype(array.dtype, np.floating) or array.dtype.name == 'bfloat16' or
            np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_):  # Masks.
      raise errors.ConfigError(f'{path}: tensor {name} has unsupported dtype {array.dtype}.')
    out[name] = hf_fp8.as_float32(name, array)
  return out


INDEX = 'model.safetensors.index.json'


def weight_files(directory: str) -> list[str]:
  """The .safetensors files of a model directory: model.safetensors, or every shard that
  model.safetensors.index.json names (each must be there)."""
  index = os.path.join(directory, INDEX)
  if os.path.isfile(index):
    from roformer import files  # pylint: disable=g-import-not-at-top
    weight_map = files.read_json(index, 'copy it again from the model').get('weight_map')
    if not isinstance(weight_map, dict) or not weight_map:
      raise errors.DamagedFileError(f'{index} has no weight_map. Fix: copy it again.')
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if not os.path.isfile(os.path.join(directory, s))]
    if missing:
      raise errors.ConfigError(
          f'--from_hf={directory!r} lacks {len(missing)} of the {len(shards)} weight shards that '
          f'{INDEX} names ({", ".join(missing[:3])}{"..." if len(missing) > 3 else ""}). Fix: '
          'download every shard into that directory.')
    return [os.path.join(directory, s) for s in shards]
  single = os.path.join(directory, 'model.safetensors')
  if not os.path.isfile(single):
    raise errors.ConfigError(f'--from_hf={directory!r} has no model.safetensors nor {INDEX}. '
                             'Fix: point at a directory with the safetensors weights '
                             '(save_pretrained(..., safe_serialization=True) writes them).')
  return [single]


def read(directory: str) -> dict[str, np.ndarray]:
  """Every tensor of a model directory's weights, float32."""
  tensors = {}
  for path in weight_files(directory):
    tensors.update(read_safetensors(path))
  return tensors


# The language model's tensors of a multimodal checkpoint, under its text class's names: the
# Hub's files (transformers 4.5x, as 5 saves them) and transformers 5's own names.
LANGUAGE_MODEL = (('language_model.model.', 'model.'), ('language_model.lm_head.', 'lm_head.'),
                  ('model.language_model.', 'model.'))
VISION = ('vision_tower.', 'multi_modal_projector.', 'model.vision_tower.',
          'model.multi_modal_projector.', 'vision_model.', 'model.vision_model.')


def language_model(tensors: dict) -> dict:
  """A multimodal checkpoint's tensors as its language model's (Gemma3ForConditionalGeneration's
  as Gemma3ForCausalLM's, Llama 4's alike), without the vision model's and the projector's; any
  other tensor is kept, for `to_params` to report."""
  out = {}
  for name, array in tensors.items():
    if name.startswith(VISION):
      continue
    old, new = next(((o, n) for o, n in LANGUAGE_MODEL if name.startswith(o)), ('', ''))
    out[new + name[len(old):]] = array
  return out


# The classes that rotate interleaved pairs (x_2i, x_2i+1), as this project's default layout.
INTERLEAVED = ('cohere', 'cohere2', 'gptj', 'glm', 'glm4', 'llama4')


def half_order(head_dim: int, rotary_dim: int) -> np.ndarray:
  """The column order that takes interleaved rotary pairs to transformers' halves within one
  head: (0, 2, .., r-2, 1, 3, .., r-1) then the unrotated columns r..head_dim-1."""
  return np.concatenate([np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2),
                         np.arange(rotary_dim, head_dim)])


def per_head(array: np.ndarray, heads: int, order: np.ndarray) -> np.ndarray:
  """The last axis of `array` ([..., heads * head_dim]) reordered within each head."""
  shape = array.shape
  return array.reshape(shape[:-1] + (heads, -1))[..., order].reshape(shape)


class _Tensors:
  """The checkpoint's tensors, each taken once; reports a missing one or a wrong shape."""

  def __init__(self, tensors: dict, where: str):
    self.tensors, self.where, self.used = tensors, where, set()

  def __call__(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name not in self.tensors:
      raise errors.DamagedFileError(f'{self.where} lacks the tensor {name!r} that config.json '
                                    'implies. Fix: download every weight file again.')
    array = self.tensors[name]
    if array.shape != tuple(shape):
      raise errors.ConfigError(f'{self.where}: tensor {name!r} has shape {array.shape}, but '
                               f'config.json implies {tuple(shape)}. Fix: use the config.json '
                               'that came with these weights.')
    self.used.add(name)
    return array

  def get(self, name: str, shape):
    return self(name, shape) if name in self.tensors else None


def _linear(t, name, d_in, d_out, bias: bool):
  out = {'kernel': t(name + '.weight', (d_out, d_in)).T}
  if bias:
    out['bias'] = t(name + '.bias', (d_out,))
  return out


# Gemma's RMSNorm multiplies by 1 + its stored weight; the others by the weight.
SCALE_OFFSET = {'gemma2': 1.0, 'gemma3': 1.0, 'nemotron': 1.0}

# A Gemma 2 or 3 block's norms: the branches' inputs and outputs (its post_attention_layernorm is
# the attention output's, where Llama's is the MLP input's).
GEMMA_NORMS = (('ln_attn', 'input_layernorm'), ('ln_attn_out', 'post_attention_layernorm'),
                ('ln_mlp', 'pre_feedforward_layernorm'),
                ('ln_mlp_out', 'post_feedforward_layernorm'))
# A GLM-4 block's norms: the branches' inputs and outputs (its post_attention_layernorm is the
# MLP input's, as Llama's).
GLM4_NORMS = (('ln_attn', 'input_layernorm'), ('ln_attn_out', 'post_self_attn_layernorm'),
              ('ln_mlp', 'post_attention_layernorm'), ('ln_mlp_out', 'post_mlp_layernorm'))
# An OLMo 2 or 3 block's norms: the branches' outputs alone.
OLMO_NORMS = (('ln_attn_out', 'post_attention_layernorm'),
              ('ln_mlp_out', 'post_feedforward_layernorm'))
# A block's norms by family (this project's name, the checkpoint's); Llama's by default.
NORMS = {'gemma2': GEMMA_NORMS, 'gemma3': GEMMA_NORMS, 'glm4': GLM4_NORMS, 'olmo2': OLMO_NORMS,
         'olmo3': OLMO_NORMS, 'exaone4': OLMO_NORMS,
         **{fam: (('ln_attn', 'input_layernorm'),)  # One for both branches.
            for fam in ('phi', 'cohere', 'cohere2')}}
LLAMA_NORMS = (('ln_attn', 'input_layernorm'), ('ln_mlp', 'post_attention_layernorm'))
SHARED_NORM = (('ln_attn', 'input_layernorm'),)


def block_norms(fam: str, m) -> tuple:
  """A block's norms: its family's, else Llama's, or one for both parallel branches (StableLM's
  use_parallel_residual)."""
  return NORMS.get(fam) or (SHARED_NORM if m.residual == 'parallel_shared' else LLAMA_NORMS)
# The families whose MLP's gate and up are one gate_up_proj ([gate | up]: the classes' chunk
# order), without a bias.
FUSED_GATE_UP = ('phi3', 'glm', 'glm4')
# The Llama-named families with a plain MLP: its two layers' names.
PLAIN_MLP = {'phi': ('fc1', 'fc2'), 'starcoder2': ('c_fc', 'c_proj'),
             'nemotron': ('up_proj', 'down_proj'), 'arcee': ('up_proj', 'down_proj')}


def _norm(t, name, d, bias: bool, offset: float = 0.0, scale: bool = True):
  """A norm's parameters: its scale (unless `scale` is False: OLMo 1's, which has none) and its
  bias where `bias`."""
  out = {'scale': t(name + '.weight', (d,)) + np.float32(offset)} if scale else {}
  if bias:
    out['bias'] = t(name + '.bias', (d,))
  return out


def _names(fam: str) -> tuple[str, str]:
  """(the embedding's tensor name, the output layer's)."""
  if fam == 'gptj':
    return 'transformer.wte.weight', 'lm_head.weight'
  if fam == 'falcon':
    return 'transformer.word_embeddings.weight', 'lm_head.weight'
  if fam in CLASSIC_NAMES:
    return CLASSIC_NAMES[fam]['embed'] + '.weight', CLASSIC_NAMES[fam]['head'] + '.weight'
  if fam in FLAT_NAMES:
    return FLAT_NAMES[fam]['embed'] + '.weight', 'lm_head.weight'
  return 'model.embed_tokens.weight', 'lm_head.weight'


def _layer_of(name: str) -> int:
  """The block index of a tensor under `model.layers.<i>.` (-1 for any other)."""
  parts = name.split('.')
  return (int(parts[2]) if len(parts) > 2 and parts[:2] == ['model', 'layers']
          and parts[2].isdigit() else -1)


def canonical(tensors: dict, fam: str, hf: dict, where: str) -> dict:
  """The tensors under the names transformers' class saves: GPT-2's and BLOOM's under
  `transformer.`, which the Hub's original GPT-2 and BLOOM files leave out (transformers reads
  both); gpt-oss's MXFP4 experts and block-scaled FP8 weights (config.json `hf`'s
  quantization_config) as float32; without DeepSeek-V3's and GLM-4.5's multi-token prediction
  layers after the last (`num_nextn_predict_layers`, 1 where absent), which transformers skips."""
  block = hf_fp8.quantized_blocks(hf, where)
  if block:
    tensors = hf_fp8.dequantized(tensors, block, where)
  elif fam == hf_gpt_oss.FAMILY:  # Its experts' MXFP4 blocks, where the file has them.
    tensors = hf_gpt_oss.dequantized(tensors)
  if fam in hf_deepseek.SIGMOID_ROUTED:
    layers = hf_fields.integer(hf, 'num_hidden_layers', None, where)
    skipped = range(layers, layers + hf_fields.integer(hf, 'num_nextn_predict_layers', 1, where,
                                                       low=0))
    tensors = {n: a for n, a in tensors.items() if _layer_of(n) not in skipped}
  if fam not in ('gpt2', 'bloom') or any(n.startswith('transformer.') for n in tensors):
    return tensors
  return {(n if n.startswith('lm_head.') else 'transformer.' + n): a for n, a in tensors.items()}


# The names of GPT-2's and MPT's tensors (in a block: under LAYERS + its index), whose q, k and v
# are one weight with each one's heads contiguous, as the fused kernel here.
FLAT_NAMES = {
    'gpt2': {'embed': 'transformer.wte', 'final': 'transformer.ln_f', 'layers': 'transformer.h.',
             'ln_attn': 'ln_1', 'ln_mlp': 'ln_2', 'qkv': 'attn.c_attn', 'out': 'attn.c_proj',
             'up': 'mlp.c_fc', 'down': 'mlp.c_proj'},
    'mpt': {'embed': 'transformer.wte', 'final': 'transformer.norm_f',
            'layers': 'transformer.blocks.', 'ln_attn': 'norm_1', 'ln_mlp': 'norm_2',
            'qkv': 'attn.Wqkv', 'out': 'attn.out_proj', 'up': 'ffn.up_proj',
            'down': 'ffn.down_proj'}}
# A block's dense layers by FLAT_NAMES key: the group of the block's parameters they are in.
FLAT_DENSE = {'qkv': 'attn', 'out': 'attn', 'up': 'mlp', 'down': 'mlp'}


def _flat_params(t, fam: str, m) -> dict:
  """GPT-2's or MPT's parameters. GPT-2's Conv1D weights are stored [in, out], as the kernels
  here, each with a bias, and it has the learned table `wpe`; MPT's Linear weights are stored
  [out, in], without biases, and its LayerNorms have a scale alone."""
  names, d, gpt2 = FLAT_NAMES[fam], m.d_model, fam == 'gpt2'
  dims = {'qkv': (d, 3 * d), 'out': (d, d), 'up': (d, m.d_ff), 'down': (m.d_ff, d)}

  def dense(name, d_in, d_out):
    if gpt2:
      return {'kernel': t(name + '.weight', (d_in, d_out)), 'bias': t(name + '.bias', (d_out,))}
    return {'kernel': t(name + '.weight', (d_out, d_in)).T}

  def norm(name):
    return {'scale': t(name + '.weight', (d,)), **({'bias': t(name + '.bias', (d,))}
                                                   if gpt2 else {})}

  params = {'embed': {'embedding': t(names['embed'] + '.weight', (m.vocab_size, d))},
            'ln_final': norm(names['final']), 'blocks': {}}
  if gpt2:
    params['position'] = {'table': t('transformer.wpe.weight', (positions.learned_rows(m), d))}
  if not m.tie_embeddings:
    params['unembed'] = t('lm_head.weight', (m.vocab_size, d))
  for i in range(m.num_layers):
    p = f"{names['layers']}{i}."
    block = {'ln_attn': norm(p + names['ln_attn']), 'ln_mlp': norm(p + names['ln_mlp']),
             'attn': {}, 'mlp': {}}
    for key, group in FLAT_DENSE.items():
      block[group][key] = dense(p + names[key], *dims[key])
    params['blocks'][i] = block
  return params


def _gptj_params(t, m) -> dict:
  """GPT-J's parameters: q, k and v apart without biases (each head's rotated dimensions in
  interleaved pairs, as here), one LayerNorm `ln_1` for both branches, fc_in and fc_out with
  biases, and lm_head's bias as `output_bias`."""
  d, f, v = m.d_model, m.d_ff, m.vocab_size
  params = {'embed': {'embedding': t('transformer.wte.weight', (v, d))},
            'ln_final': _norm(t, 'transformer.ln_f', d, True), 'blocks': {},
            'output_bias': t('lm_head.bias', (v,))}
  if not m.tie_embeddings:
    params['unembed'] = t('lm_head.weight', (v, d))
  for i in range(m.num_layers):
    p = f'transformer.h.{i}.'
    qkv = [_linear(t, p + f'attn.{n}_proj', d, d, False)['kernel'] for n in 'qkv']
    params['blocks'][i] = {
        'ln_attn': _norm(t, p + 'ln_1', d, True),
        'attn': {'qkv': {'kernel': np.concatenate(qkv, axis=-1)},
                 'out': _linear(t, p + 'attn.out_proj', d, d, False)},
        'mlp': {'up': _linear(t, p + 'mlp.fc_in', d, f, True),
                'down': _linear(t, p + 'mlp.fc_out', f, d, True)}}
  return params


def head_stored(tensors: dict, fam: str) -> bool:
  """Whether a checkpoint stores an output layer."""
  return _names(fam)[1] in tensors


def head_differs(tensors: dict, fam: str) -> bool:
  """Whether a checkpoint stores an output layer other than its embedding."""
  embed, head = _names(fam)
  return head in tensors and embed in tensors and not np.array_equal(tensors[head],
                                                                     tensors[embed])


# The names of the classes whose q, k and v are one query_key_value of rows [q_h, k_h, v_h]
# head by head: GPT-NeoX (RoPE), and BLOOM (ALiBi, with a LayerNorm of the embeddings).
CLASSIC_NAMES = {
    'gpt_neox': {'layers': 'gpt_neox.layers.', 'embed': 'gpt_neox.embed_in',
                 'final': 'gpt_neox.final_layer_norm', 'head': 'embed_out', 'attn': 'attention.'},
    'bloom': {'layers': 'transformer.h.', 'embed': 'transformer.word_embeddings',
              'final': 'transformer.ln_f', 'head': 'lm_head', 'attn': 'self_attention.',
              'embed_norm': 'transformer.word_embeddings_layernorm'}}


def _stack_params(t, fam: str, m) -> tuple[dict, str]:
  """(the parameters, the output layer's tensor name) of a Llama-family, GPT-NeoX or BLOOM
  checkpoint."""
  from roformer import layers  # pylint: disable=g-import-not-at-top
  d, f, v = m.d_model, m.d_ff, m.vocab_size
  h, hd = m.num_heads, positions.head_dim(m)
  kv = m.num_kv_heads or h
  qkv_bias, out_bias = layers.has_bias(m, 'qkv'), layers.has_bias(m, 'out')
  mlp_bias, norm_bias = layers.has_bias(m, 'mlp'), m.normalization == 'layer_norm'
  norm_scale = m.normalization != 'layer_norm_nonparametric'
  names = CLASSIC_NAMES.get(fam)
  if names:
    prefix, embed, final, head = (names[k] for k in ('layers', 'embed', 'final', 'head'))
  else:
    prefix, embed, final, head = 'model.layers.', 'model.embed_tokens', 'model.norm', 'lm_head'
  if fam == 'phi':
    final = 'model.final_layernorm'
  offset = SCALE_OFFSET.get(fam, 0.0)
  params = {'embed': {'embedding': t(embed + '.weight', (v, d))},
            'ln_final': _norm(t, final, d, norm_bias, offset, norm_scale), 'blocks': {}}
  if not m.tie_embeddings:
    params['unembed'] = t(head + '.weight', (v, d))
  if names and 'embed_norm' in names:
    params['embed_norm'] = _norm(t, names['embed_norm'], d, True)
  if fam == 'phi':
    params['output_bias'] = t(head + '.bias', (v,))
  for i in range(m.num_layers):
    p = f'{prefix}{i}.'
    # Llama's two, Gemma's four, OLMo 2's and 3's of the outputs, or one for both branches.
    block = {ours: _norm(t, p + theirs, d, norm_bias, offset, norm_scale)
             for ours, theirs in block_norms(fam, m)}
    if names:
      fused = _linear(t, p + names['attn'] + 'query_key_value', d, 3 * d, qkv_bias)
      # Columns [q_0 k_0 v_0 q_1 k_1 v_1 ..] (head-major) to [q_0 q_1 .. | k .. | v ..].
      regroup = lambda a: a.reshape(a.shape[:-1] + (h, 3, hd)).swapaxes(-3, -2).reshape(a.shape)
      block['attn'] = {'qkv': {k: regroup(a) for k, a in fused.items()},
                       'out': _linear(t, p + names['attn'] + 'dense', d, d, out_bias)}
      block['mlp'] = {'up': _linear(t, p + 'mlp.dense_h_to_4h', d, f, mlp_bias),
                      'down': _linear(t, p + 'mlp.dense_4h_to_h', f, d, mlp_bias)}
    elif fam == 'phi3':  # Fused as here: [q | k | v] and [gate | up] (Phi3MLP's chunk order).
      block['attn'] = {'qkv': _linear(t, p + 'self_attn.qkv_proj', d, (h + 2 * kv) * hd, False),
                       'out': _linear(t, p + 'self_attn.o_proj', h * hd, d, False)}
      block['mlp'] = _fused_mlp(t, p, d, f)
    elif fam in hf_deepseek.LATENT:  # Latent attention, and its mixture.
      block['attn'] = hf_deepseek.read_attention(t, p, m)
      block['mlp'] = hf_moe.read_mlp(t, p, fam, m, i)
    else:
      parts = [_linear(t, p + f'self_attn.{n}_proj', d, width, qkv_bias)
               for n, width in (('q', h * hd), ('k', kv * hd), ('v', kv * hd))]
      block['attn'] = {'qkv': {k: np.concatenate([part[k] for part in parts], axis=-1)
                               for k in parts[0]},
                       'out': _linear(t, p + 'self_attn.' + ('dense' if fam == 'phi' else 'o_proj'),
                                      h * hd, d, out_bias)}
      if hf_qk_norm.has(m, fam):  # QK-norm: its scales (and biases).
        block['attn'].update(hf_qk_norm.read(t, p, fam, (h, kv), hd, offset))
      if hf_gpt_oss.sink_option(m):
        block['attn']['sink'] = hf_gpt_oss.read_sinks(t, p, h)
      if fam in hf_moe.FAMILIES:
        block['mlp'] = hf_moe.read_mlp(t, p, fam, m, i)
      elif fam in PLAIN_MLP:
        up, down = PLAIN_MLP[fam]
        block['mlp'] = {'up': _linear(t, p + 'mlp.' + up, d, f, mlp_bias),
                        'down': _linear(t, p + 'mlp.' + down, f, d, mlp_bias)}
      elif fam in FUSED_GATE_UP:
        block['mlp'] = _fused_mlp(t, p, d, f)
      else:
        block['mlp'] = {n: _linear(t, p + f'mlp.{n}_proj', *dims, mlp_bias)
                        for n, dims in (('gate', (d, f)), ('up', (d, f)), ('down', (f, d)))}
    params['blocks'][i] = block
  return params, head


def _fused_mlp(t, p: str, d: int, f: int) -> dict:
  """A gated MLP stored with its gate and up in one gate_up_proj (Phi-3's, GLM's)."""
  gate, up = np.split(_linear(t, p + 'mlp.gate_up_proj', d, 2 * f, False)['kernel'], 2, -1)
  return {'gate': {'kernel': gate}, 'up': {'kernel': up},
          'down': _linear(t, p + 'mlp.down_proj', f, d, False)}


def to_params(tensors: dict, fam: str, m, where: str) -> dict:
  """The CausalLM parameters (a nested dict of numpy arrays) of a checkpoint's tensors, for the
  model config `m` that hf_config.to_config made from its config.json."""
  t = _Tensors(tensors, where)
  if fam in FLAT_NAMES:
    params, head = _flat_params(t, fam, m), 'lm_head'
  elif fam == 'gptj':
    params, head = _gptj_params(t, m), 'lm_head'
  elif fam == 'falcon':
    params, head = hf_falcon.params(t, m, _linear, _norm), 'lm_head'
  else:
    params, head = _stack_params(t, fam, m)
  # Buffers, not weights: rotary frequencies, and the causal masks GPT-NeoX and GPT-2 stored.
  ignored = {n for n in tensors if n.endswith(('rotary_emb.inv_freq', 'attention.bias',
                                               'attention.masked_bias', '.attn.bias',
                                               '.attn.masked_bias'))}
  if m.tie_embeddings:
    ignored.add(head + '.weight')  # Some checkpoints store the tied copy as well.
  unused = sorted(set(tensors) - t.used - ignored)
  if unused:
    raise errors.ConfigError(
        f'{where} holds {len(unused)} tensors that config.json does not account for ('
        f'{", ".join(unused[:3])}{"..." if len(unused) > 3 else ""}). Fix: use the config.json '
        'that came with these weights.')
  return params
