"""This project's parameters as transformers' tensors, written as model.safetensors: the export
direction of roformer/hf_weights.py, whose names and layouts (and their differences: PyTorch's
[out, in] weights, the fused [q | k | v] kernel, the rotary pairs' order) it writes back."""

import os

import numpy as np

from roformer import hf_deepseek
from roformer import hf_falcon
from roformer import hf_gpt_oss
from roformer import hf_moe
from roformer import hf_qk_norm
from roformer import hf_weights
from roformer import positions


def from_params(params: dict, fam: str, m, logits_scale: float) -> dict[str, np.ndarray]:
  """The transformers tensors (float32 numpy, PyTorch's [out, in] layout) of a CausalLM's
  parameters `params` (a nested dict), for the family hf_export_config.export_family chose. A layer
  the transformers class has a bias for and this model has none gets a zero bias. `logits_scale`:
  the tied output layer's own scale, folded into an untied lm_head where it is not 1 (a
  multiplier of the logits, `model.logits_multiplier`, is Cohere's config field instead)."""
  d, f = m.d_model, m.d_ff
  h, hd = m.num_heads, positions.head_dim(m)
  kv = m.num_kv_heads or h
  rope = m.position.rope
  rotary = int(round(hd * rope.fraction))
  # Queries' and keys' columns in transformers' rotary order (untouched where nothing rotates).
  order = np.arange(hd)
  if positions.rope_layers(m):
    # Cohere, GPT-J and GLM rotate interleaved pairs: halves go to them.
    if fam in hf_weights.INTERLEAVED:
      order = np.argsort(hf_weights.half_order(hd, rotary)) if rope.layout == 'half' else order
    elif rope.layout == 'interleaved':
      order = hf_weights.half_order(hd, rotary)
  out = {}

  def linear(name, p, bias: bool, d_out):
    out[name + '.weight'] = np.asarray(p['kernel'], np.float32).T
    if bias:
      out[name + '.bias'] = np.asarray(p.get('bias', np.zeros(d_out)), np.float32)

  offset = np.float32(hf_weights.SCALE_OFFSET.get(fam, 0.0))
  # A norm's parameters: OLMo 1's have none, and so no entry; any other family's must have one.
  of = ((lambda tree, name: tree.get(name, {})) if m.normalization == 'layer_norm_nonparametric'
        else (lambda tree, name: tree[name]))

  def fused_mlp(p, mlp):  # gate and up in one gate_up_proj, without biases.
    linear(p + 'mlp.gate_up_proj', {'kernel': np.concatenate(
        [np.asarray(mlp[n]['kernel'], np.float32) for n in ('gate', 'up')], -1)}, False, None)
    linear(p + 'mlp.down_proj', mlp['down'], False, d)

  def norm(name, p):
    if 'scale' in p:
      out[name + '.weight'] = np.asarray(p['scale'], np.float32) - offset
    if 'bias' in p:
      out[name + '.bias'] = np.asarray(p['bias'], np.float32)

  embedding = np.asarray(params['embed']['embedding'], np.float32)
  head = (np.asarray(params['unembed'], np.float32) if 'unembed' in params
          else embedding * np.float32(logits_scale))
  if fam == 'falcon':
    return hf_falcon.tensors(params, m, order, None if (m.tie_embeddings and logits_scale == 1.0)
                             else head)
  if fam == 'gptj':  # q, k and v apart, none with a bias; the MLP's and lm_head's have one.
    out['transformer.wte.weight'] = embedding
    norm('transformer.ln_f', params['ln_final'])
    if not (m.tie_embeddings and logits_scale == 1.0):
      out['lm_head.weight'] = head
    bias = params['output_bias'] if 'output_bias' in params else np.zeros(m.vocab_size)
    out['lm_head.bias'] = np.asarray(bias, np.float32)  # Zero where the model has none.
    for i in range(m.num_layers):
      b, p = params['blocks'][i], f'transformer.h.{i}.'
      norm(p + 'ln_1', b['ln_attn'])
      parts = np.split(np.asarray(b['attn']['qkv']['kernel'], np.float32), 3, axis=-1)
      for n, part, rotated in zip('qkv', parts, (True, True, False)):
        kernel = hf_weights.per_head(part, h, order) if rotated else part
        linear(p + f'attn.{n}_proj', {'kernel': kernel}, False, d)
      linear(p + 'attn.out_proj', b['attn']['out'], False, d)
      linear(p + 'mlp.fc_in', b['mlp']['up'], True, f)
      linear(p + 'mlp.fc_out', b['mlp']['down'], True, d)
    return out
  # GPT-2's Conv1D weights [in, out] with biases; MPT's [out, in] without.
  if fam in hf_weights.FLAT_NAMES:
    names = hf_weights.FLAT_NAMES[fam]
    out[names['embed'] + '.weight'] = embedding
    if fam == 'gpt2':
      out['transformer.wpe.weight'] = np.asarray(params['position']['table'], np.float32)
    norm(names['final'], params['ln_final'])
    if not (m.tie_embeddings and logits_scale == 1.0):
      out['lm_head.weight'] = head
    for i in range(m.num_layers):
      b, p = params['blocks'][i], f"{names['layers']}{i}."
      norm(p + names['ln_attn'], b['ln_attn'])
      norm(p + names['ln_mlp'], b['ln_mlp'])
      for key, group in hf_weights.FLAT_DENSE.items():
        part = b[group][key]
        if fam == 'gpt2':
          out[p + names[key] + '.weight'] = np.asarray(part['kernel'], np.float32)
          out[p + names[key] + '.bias'] = np.asarray(part['bias'], np.float32)
        else:
          linear(p + names[key], part, bias=False, d_out=None)
    return out
  names = hf_weights.CLASSIC_NAMES.get(fam)
  if names:
    prefix = names['layers']
    out[names['embed'] + '.weight'] = embedding
    norm(names['final'], params['ln_final'])
    if 'embed_norm' in names:
      norm(names['embed_norm'], params['embed_norm'])
    if fam == 'gpt_neox' or not (m.tie_embeddings and logits_scale == 1.0):
      out[names['head'] + '.weight'] = head
  else:
    prefix = 'model.layers.'
    out['model.embed_tokens.weight'] = embedding
    norm('model.final_layernorm' if fam == 'phi' else 'model.norm', of(params, 'ln_final'))
    if not (m.tie_embeddings and logits_scale == 1.0):
      out['lm_head.weight'] = head
    if fam == 'phi':  # Phi's lm_head always has a bias (zero where the model has none).
      bias = params['output_bias'] if 'output_bias' in params else np.zeros(m.vocab_size)
      out['lm_head.bias'] = np.asarray(bias, np.float32)
  for i in range(m.num_layers):
    b, p = params['blocks'][i], f'{prefix}{i}.'
    for ours, theirs in hf_weights.block_norms(fam, m):
      norm(p + theirs, of(b, ours))
    if fam in hf_deepseek.LATENT:
      hf_deepseek.write_attention(out, p, b['attn'])
      hf_moe.write_mlp(out, p, b['mlp'], fam, m, i)
      continue
    qkv = {k: np.asarray(a, np.float32) for k, a in b['attn']['qkv'].items()}
    split = {k: np.split(a, [h * hd, (h + kv) * hd], axis=-1) for k, a in qkv.items()}
    for k in split:  # Queries and keys to transformers' rotary order.
      split[k][0] = hf_weights.per_head(split[k][0], h, order)
      split[k][1] = hf_weights.per_head(split[k][1], kv, order)
    if names:
      fused = {k: np.concatenate(parts, -1) for k, parts in split.items()}
      # [q_0 q_1 .. | k .. | v ..] to head-major [q_0 k_0 v_0 q_1 ..].
      mix = lambda a: a.reshape(a.shape[:-1] + (3, h, hd)).swapaxes(-3, -2).reshape(a.shape)
      linear(p + names['attn'] + 'query_key_value', {k: mix(a) for k, a in fused.items()}, True,
             3 * d)
      linear(p + names['attn'] + 'dense', b['attn']['out'], True, d)
      linear(p + 'mlp.dense_h_to_4h', b['mlp']['up'], True, f)
      linear(p + 'mlp.dense_4h_to_h', b['mlp']['down'], True, d)
      continue
    if fam == 'phi3':  # No biases (export_family checked); q and k in transformers' order.
      linear(p + 'self_attn.qkv_proj', {'kernel': np.concatenate(split['kernel'], -1)}, False,
             None)
      linear(p + 'self_attn.o_proj', b['attn']['out'], False, d)
      fused_mlp(p, b['mlp'])
      continue
    qkv_bias = fam in ('qwen2', 'qwen2_moe') or m.biases in ('qkv', 'attention', 'all')
    for n, index in (('q', 0), ('k', 1), ('v', 2)):
      part = {k: split[k][index] for k in split}
      linear(p + f'self_attn.{n}_proj', part, qkv_bias, part['kernel'].shape[-1])
    if 'q_scale' in b['attn']:  # QK-norm's scales (and biases), permuted with the columns.
      hf_qk_norm.write(out, p, b['attn'], fam, (h, kv), order, offset)
    if hf_gpt_oss.sink_option(m):
      hf_gpt_oss.write_sinks(out, p, b['attn'], m)
    # Phi's biases are on every dense layer, StarCoder 2's there or nowhere (export_family
    # checked).
    linear(p + 'self_attn.' + ('dense' if fam == 'phi' else 'o_proj'), b['attn']['out'],
           m.biases in ('attention', 'all'), d)
    if fam in hf_moe.FAMILIES:
      hf_moe.write_mlp(out, p, b['mlp'], fam, m, i)
      continue
    if fam in hf_weights.PLAIN_MLP:
      up, down = hf_weights.PLAIN_MLP[fam]
      linear(p + 'mlp.' + up, b['mlp']['up'], m.biases in ('all', 'mlp'), f)
      linear(p + 'mlp.' + down, b['mlp']['down'], m.biases in ('all', 'mlp'), d)
      continue
    # GLM's (export_family checked its biases: q, k and v's or none).
    if fam in hf_weights.FUSED_GATE_UP:
      fused_mlp(p, b['mlp'])
      continue
    for n in ('gate', 'up', 'down'):
      linear(p + f'mlp.{n}_proj', b['mlp'][n], m.biases in ('all', 'mlp'),
             f if n != 'down' else d)
  return out


def write(tensors: dict[str, np.ndarray], directory: str) -> None:
  """model.safetensors (float32) in `directory`, with the permissions of any file written
  here (safetensors' save_file makes it readable by its owner alone)."""
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  path = os.path.join(directory, 'model.safetensors')
  safetensors_numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path,
                              metadata={'format': 'pt'})
  os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
  """The process's umask, read without setting it (Linux: /proc; elsewhere, the common 022)."""
  try:
    with open('/proc/self/status', encoding='ascii') as f:
      return next(int(line.split()[1], 8) for line in f if line.startswith('Umask:'))
  except (OSError, StopIteration, ValueError):
    return 0o022
