"""FalconForCausalLM (Falcon 7B, 40B, 180B and Falcon 2 11B), in and out: its config.json's own
names, its three layouts of one block, and its q, k and v in one weight, grouped by key/value
head.

The block is the classic one (LayerNorms with biases, a plain MLP of `ffn_hidden_size`, 4
hidden_size where absent) with RoPE on whole heads, biases on every dense layer or none (`bias`,
off by default) and tied embeddings by default. Which norms and which residual, as transformers'
class computes them:
- `new_decoder_architecture` (40B, 180B, Falcon 2): parallel branches, each after its own norm
  (`ln_attn`, `ln_mlp`: `model.residual='parallel'`) or, with `num_ln_in_parallel_attn` 1, after
  one (`input_layernorm`: `parallel_shared`); `num_kv_heads` key/value heads;
- otherwise (7B) `parallel_attn` (the default) puts both branches after one norm
  (`parallel_shared`) and without it the branches follow each other (`input_layernorm`,
  `post_attention_layernorm`: `sequential`); `multi_query` (the default) gives one key/value
  head, else as many as the queries.

`query_key_value` holds, for each key/value group g in order, the queries of its heads, then
k_g, then v_g (one group of all the heads for multi-query, one group per head without it): this
project's fused [q | k | v] is that weight regrouped. Settings under which transformers' class
fails, or computes another block than the one its fields name (ALiBi, which it scales with the
logits), are refused in one line.
"""

import numpy as np

from roformer import errors
from roformer import hf_fields
from roformer import positions

_read, _field = hf_fields.read, hf_fields.field
# FalconConfig's switch to ALiBi (Falcon-RW's), named after the scheme.
ALIBI_FIELD = positions.ALIBI


def _flag(hf: dict, name: str, default: bool, where: str) -> bool:
  """A switch of the config: its value, `default` where absent, false where null (the class
  tests each for truth)."""
  value = _read(hf, name, default)
  if value is None:
    return False
  if not isinstance(value, bool):
    raise errors.DamagedFileError(f'{where}: {name} is {value!r}, where transformers reads true '
                                  'or false. Fix: use the config.json that came with the weights.')
  return value


def layout(hf: dict, where: str) -> tuple[str, int]:
  """(model.residual, the number of key/value heads) of a Falcon config, or a ConfigError for
  a combination transformers' class fails on."""
  heads = int(_field(hf, 'num_attention_heads', where))
  kv = _read(hf, 'num_kv_heads', None) or heads
  new = _flag(hf, 'new_decoder_architecture', False, where)
  parallel = _flag(hf, 'parallel_attn', True, where)
  norms = _read(hf, 'num_ln_in_parallel_attn', None)
  if new:
    if not parallel:
      raise errors.ConfigError(f'{where}: new_decoder_architecture without parallel_attn, which '
                               "transformers' Falcon fails on. Fix: a checkpoint with "
                               'parallel_attn true (as Falcon 40B and 180B).')
    if norms not in (None, 1, 2) or heads % kv:
      raise errors.ConfigError(f'{where}: num_ln_in_parallel_attn {norms!r} with {kv} key/value '
                               f'heads for {heads}: transformers\' Falcon takes 1 or 2 norms and '
                               'a number of key/value heads that divides the heads. Fix: use the '
                               'config.json that came with the weights.')
    return ('parallel_shared' if norms == 1 else 'parallel'), kv
  if parallel and norms == 2:
    raise errors.ConfigError(f'{where}: num_ln_in_parallel_attn 2 without '
                             "new_decoder_architecture, which transformers' Falcon fails on. Fix: "
                             'use the config.json that came with the weights.')
  if _flag(hf, 'multi_query', True, where):
    kv = 1
  elif kv != heads:
    raise errors.ConfigError(f'{where}: num_kv_heads {kv} for {heads} heads without '
                             'multi_query or new_decoder_architecture, where transformers\' Falcon '
                             'stores a key and a value per head. Fix: use the config.json that '
                             'came with the weights.')
  return ('parallel_shared' if parallel else 'sequential'), kv


def model_fields(hf: dict, where: str) -> dict:
  """config.model's fields of a Falcon config (RoPE's are read as the other families')."""
  if _flag(hf, ALIBI_FIELD, False, where):
    raise errors.ConfigError(f'{where}: alibi (Falcon-RW), whose bias transformers\' Falcon scales '
                             'with the logits by 1/sqrt(head width), unlike ALiBi. Fix: a Falcon '
                             'checkpoint with RoPE (alibi false, as Falcon 7B and 40B).')
  d = int(_read(hf, 'hidden_size', None) or _field(hf, 'n_embed', where))
  heads = int(_field(hf, 'num_attention_heads', where))
  if heads < 1 or d % heads:
    raise errors.DamagedFileError(f'{where}: hidden_size {d} does not split into {heads} heads. '
                                  'Fix: use the config.json that came with the weights.')
  act = _read(hf, 'activation', 'gelu')
  if act not in hf_fields.ACTIVATIONS:
    raise errors.ConfigError(f'{where}: activation {act!r} is not one this project computes. Fix: '
                             f'a checkpoint with one of {sorted(hf_fields.ACTIVATIONS)}.')
  residual, kv = layout(hf, where)
  return dict(num_layers=int(_field(hf, 'num_hidden_layers', where)), d_model=d,
              num_heads=heads, num_kv_heads=0 if kv == heads else kv,
              d_ff=int(_read(hf, 'ffn_hidden_size', None) or 4 * d),
              activation=hf_fields.ACTIVATIONS[act], normalization='layer_norm', mlp='plain',
              residual=residual, biases='all' if _flag(hf, 'bias', False, where) else 'none',
              tie_embeddings=bool(_read(hf, 'tie_word_embeddings', True)),
              layer_norm_eps=float(_read(hf, 'layer_norm_epsilon', None) or 1e-5))


# A block's norms by residual: (this project's name, Falcon's).
NORMS = {'parallel': (('ln_attn', 'ln_attn'), ('ln_mlp', 'ln_mlp')),
         'parallel_shared': (('ln_attn', 'input_layernorm'),),
         'sequential': (('ln_attn', 'input_layernorm'), ('ln_mlp', 'post_attention_layernorm'))}


def _groups(m) -> tuple[int, int, int]:
  """(key/value groups, query heads per group, head width)."""
  kv = m.num_kv_heads or m.num_heads
  return kv, m.num_heads // kv, m.d_model // m.num_heads


def params(t, m, read_linear, read_norm) -> dict:
  """The parameters of a Falcon checkpoint's tensors (`t`: name, shape -> array, each taken
  once), read by roformer/hf_weights.py's readers of a Linear and of a norm (this module cannot
  import them: hf_weights imports it)."""
  d, f, v = m.d_model, m.d_ff, m.vocab_size
  kv, per, hd = _groups(m)
  bias = m.biases == 'all'
  linear = lambda name, d_in, d_out: read_linear(t, name, d_in, d_out, bias)
  norm = lambda name: read_norm(t, name, d, True)

  out = {'embed': {'embedding': t('transformer.word_embeddings.weight', (v, d))},
         'ln_final': norm('transformer.ln_f'), 'blocks': {}}
  if not m.tie_embeddings:
    out['unembed'] = t('lm_head.weight', (v, d))
  for i in range(m.num_layers):
    p = f'transformer.h.{i}.'
    fused = linear(p + 'self_attention.query_key_value', d, (kv * (per + 2)) * hd)
    block = {ours: norm(p + theirs) for ours, theirs in NORMS[m.residual]}
    block['attn'] = {'qkv': {k: ungroup(a, kv, per, hd) for k, a in fused.items()},
                     'out': linear(p + 'self_attention.dense', d, d)}
    block['mlp'] = {'up': linear(p + 'mlp.dense_h_to_4h', d, f),
                    'down': linear(p + 'mlp.dense_4h_to_h', f, d)}
    out['blocks'][i] = block
  return out


def ungroup(a: np.ndarray, kv: int, per: int, hd: int) -> np.ndarray:
  """Falcon's [q_g.. k_g v_g] per group (last axis) as [q | k | v]."""
  g = a.reshape(a.shape[:-1] + (kv, per + 2, hd))
  flat = lambda x: x.reshape(a.shape[:-1] + (-1,))
  return np.concatenate([flat(g[..., :per, :]), flat(g[..., per, :]), flat(g[..., per + 1, :])],
                        axis=-1)


def group(a: np.ndarray, kv: int, per: int, hd: int) -> np.ndarray:
  """[q | k | v] (last axis) as Falcon's [q_g.. k_g v_g] per group: `ungroup`'s inverse."""
  q, k, v = np.split(a, [kv * per * hd, (kv * per + kv) * hd], axis=-1)
  lead = a.shape[:-1]
  g = np.concatenate([q.reshape(lead + (kv, per, hd)), k.reshape(lead + (kv, 1, hd)),
                      v.reshape(lead + (kv, 1, hd))], axis=-2)
  return g.reshape(a.shape)


def tensors(params_, m, order: np.ndarray, head: np.ndarray | None) -> dict[str, np.ndarray]:
  """The Falcon tensors of a model's parameters: q's and k's columns in `order` within each
  head (transformers' rotary order), `head` the lm_head weight (None: tied)."""
  kv, per, hd = _groups(m)
  f32 = lambda a: np.asarray(a, np.float32)
  out = {'transformer.word_embeddings.weight': f32(params_['embed']['embedding'])}
  if head is not None:
    out['lm_head.weight'] = f32(head)

  def linear(name, p):
    out[name + '.weight'] = f32(p['kernel']).T
    if 'bias' in p:
      out[name + '.bias'] = f32(p['bias'])

  def norm(name, p):
    out[name + '.weight'], out[name + '.bias'] = f32(p['scale']), f32(p['bias'])

  norm('transformer.ln_f', params_['ln_final'])
  for i in range(m.num_layers):
    b, p = params_['blocks'][i], f'transformer.h.{i}.'
    for ours, theirs in NORMS[m.residual]:
      norm(p + theirs, b[ours])
    qkv = {}
    for key, a in b['attn']['qkv'].items():
      q, k, v = np.split(f32(a), [kv * per * hd, (kv * per + kv) * hd], axis=-1)
      by_head = lambda x: x.reshape(x.shape[:-1] + (-1, hd))[..., order].reshape(x.shape)
      qkv[key] = group(np.concatenate([by_head(q), by_head(k), v], -1), kv, per, hd)
    linear(p + 'self_attention.query_key_value', qkv)
    linear(p + 'self_attention.dense', b['attn']['out'])
    linear(p + 'mlp.dense_h_to_4h', b['mlp']['up'])
    linear(p + 'mlp.dense_4h_to_h', b['mlp']['down'])
  return out


def config_fields(m) -> dict:
  """FalconConfig's own fields of a model `export_family` sent to Falcon (`falcon_block`:
  parallel branches): the new layout, its branches after two norms or one, and its key/value
  heads."""
  return {'new_decoder_architecture': True, 'parallel_attn': True, 'multi_query': False,
          'num_kv_heads': m.num_kv_heads or m.num_heads,
          'num_ln_in_parallel_attn': 2 if m.residual == 'parallel' else 1,
          'ffn_hidden_size': m.d_ff, 'bias': m.biases == 'all', ALIBI_FIELD: False,
          'layer_norm_epsilon': m.layer_norm_eps, 'hidden_dropout': 0.0,
          'attention_dropout': 0.0}


def falcon_block(m) -> bool:
  """Whether the classic block with RoPE is one that Falcon computes and GPT-NeoX, Phi and GPT-J
  do not: parallel branches after one norm without biases, or after two norms with grouped-query
  attention or without biases."""
  if (m.normalization, m.mlp) != ('layer_norm', 'plain'):
    return False
  gqa = m.num_kv_heads not in (0, m.num_heads)
  return ((m.residual == 'parallel_shared' and m.biases == 'none')
          or (m.residual == 'parallel' and (gqa or m.biases == 'none')))


def refusal(m, options) -> str | None:
  """Why FalconForCausalLM does not compute a block `falcon_block` chose, or None: biases on
  every dense layer or none, RoPE on whole heads of width d_model / heads in every layer, no
  windows and no attention option (transformers' rope functions compute every scaling here)."""
  block = 'in a Falcon block (the classic one with parallel branches)'
  checks = (
      (m.norm != 'pre', f"norm={m.norm!r} {block}, which normalises each branch's input alone"),
      (m.biases not in ('all', 'none'), f'biases={m.biases!r} {block}, which has them on every '
                                        'dense layer or none'),
      (bool(m.get('output_bias')), f'a bias of the output layer (model.output_bias) {block}, '
                                   'whose lm_head has none'),
      (bool(options), f"{', '.join('attention.' + o.field for o in options)} {block}"),
      (m.position.rope.fraction < 1, f'partial rotary (rope.fraction={m.position.rope.fraction}) '
                                     f'{block}, which rotates whole heads'),
      (positions.head_dim(m) * m.num_heads != m.d_model,
       f'heads of width head_dim={m.head_dim} {block}, which splits d_model {m.d_model} into '
       f'its {m.num_heads} heads'),
      (any(m.layer_windows), f'sliding windows {block}'),
  )
  return hf_fields.first_failed(checks)
