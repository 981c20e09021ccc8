"""The Hugging Face families of the classic block (LayerNorm before each branch, a plain MLP,
full multi-head attention), in and out.

In: those whose config.json has names of its own, GPT-2 (a learned table), BLOOM (ALiBi with a
LayerNorm of the embeddings), MPT (ALiBi, LayerNorms without a bias, no biases) and GPT-J (RoPE on
interleaved pairs, one LayerNorm before parallel branches), each read into this project's config;
roformer/hf_config.py dispatches to them, and reads the other RoPE families.

Out: why each class of that block (GPT-NeoX, StarCoder 2 with grouped-query attention or windows,
Phi, GPT-J, GPT-2, BLOOM, MPT) does not compute a model, for roformer/hf_export_config.py's
`export_family` (the `*_refusal` functions: a reason in words, or None)."""

import types

import ml_collections

from roformer import errors
from roformer import hf_fields
from roformer import positions

_read, _field, _first_failed = hf_fields.read, hf_fields.field, hf_fields.first_failed
_decoder, ACTIVATIONS = hf_fields.decoder, hf_fields.ACTIVATIONS


def gpt2_config(hf: dict, directory: str, where: str) -> ml_collections.ConfigDict:
  """GPT2LMHeadModel's config: the classic pre-LayerNorm block (a plain MLP, biases on every
  layer, tied embeddings by default) with learned absolute positions, one table over its
  n_positions rows, under GPT2Config's names (n_embd, n_layer, n_head, n_inner: 4 n_embd
  where null, n_positions, activation_function, layer_norm_epsilon); an evaluation past the
  table's rows reports them skipped (no row past them was trained)."""
  refused = _first_failed((
      (not _read(hf, 'scale_attn_weights', True), 'scale_attn_weights false (logits q.k '
                                                  'unscaled)'),
      (bool(_read(hf, 'scale_attn_by_inverse_layer_idx', False)),
       'scale_attn_by_inverse_layer_idx (logits divided by the layer index + 1)'),
      (bool(_read(hf, 'add_cross_attention', False)), 'add_cross_attention (the decoder of an '
                                                      'encoder-decoder)')))
  if refused:
    raise errors.ConfigError(f'{where}: {refused} is not computed here. Fix: a GPT-2 checkpoint '
                             'without it (as gpt2 to gpt2-xl and DistilGPT2).')
  d, heads = int(_field(hf, 'n_embd', where)), int(_field(hf, 'n_head', where))
  if heads < 1 or d % heads:
    raise errors.DamagedFileError(f'{where}: n_embd {d} does not split into {heads} heads. Fix: '
                                  'use the config.json that came with the weights.')
  act = _read(hf, 'activation_function', 'gelu_new')
  if act not in ACTIVATIONS:
    raise errors.ConfigError(f'{where}: activation_function {act!r} is not one this project '
                             f'computes. Fix: a checkpoint with one of {sorted(ACTIVATIONS)}.')
  rows = int(_field(hf, 'n_positions', where))
  config = _decoder(
      hf, directory, where, rows, num_layers=int(_field(hf, 'n_layer', where)), d_model=d,
      num_heads=heads, d_ff=int(4 * d if hf.get('n_inner') is None else hf['n_inner']),
      activation=ACTIVATIONS[act], tie_embeddings=bool(_read(hf, 'tie_word_embeddings', True)),
      biases='all', normalization='layer_norm', mlp='plain',
      layer_norm_eps=float(_read(hf, 'layer_norm_epsilon', 1e-5)))
  config.model.position.kind = positions.LEARNED
  config.model.position.learned.max_length = rows
  return config


def bloom_config(hf: dict, directory: str, where: str) -> ml_collections.ConfigDict:
  """BloomForCausalLM's config: the classic pre-LayerNorm block (biases on every layer, a plain
  MLP of 4 hidden_size with the tanh GELU, tied embeddings by default) with ALiBi and a
  LayerNorm of the embeddings, under BloomConfig's names (hidden_size or n_embed, n_layer,
  n_head, layer_norm_epsilon). BLOOM adds each key's slope times its position, which differs
  from ALiBi's -slope |i - j| by a constant in each row, and so gives the same softmax.
  BloomConfig has no trained length: data.seq_len is `seq_length` where the file has one, else
  2,048, the length BLOOM's models were pretrained at. slow_but_exact with pretraining_tp > 1 is
  refused: transformers then leaves out two biases of every block."""
  if _read(hf, 'apply_residual_connection_post_layernorm', False):
    raise errors.ConfigError(f'{where}: apply_residual_connection_post_layernorm (the residual '
                             'taken after the norm) is not computed here. Fix: a BLOOM '
                             'checkpoint without it (as the bigscience/bloom models).')
  if _read(hf, 'slow_but_exact', False) and int(_read(hf, 'pretraining_tp', 1)) > 1:
    raise errors.ConfigError(f'{where}: slow_but_exact with pretraining_tp > 1, under which '
                             "transformers' BLOOM leaves out the biases of self_attention.dense "
                             'and mlp.dense_4h_to_h. Fix: set slow_but_exact to false in '
                             'config.json (the same weights, read with their biases).')
  # BloomConfig's names, or the generic ones its attribute_map reads as them.
  named = lambda name, other: _field(hf, name if name in hf or other not in hf else other, where)
  d = int(hf['n_embed'] if hf.get('n_embed') is not None else _field(hf, 'hidden_size', where))
  heads = int(named('n_head', 'num_attention_heads'))
  if heads < 1 or d % heads:
    raise errors.DamagedFileError(f'{where}: hidden_size {d} does not split into {heads} heads. '
                                  'Fix: use the config.json that came with the weights.')
  config = _decoder(
      hf, directory, where, int(_read(hf, 'seq_length', 2048)),
      num_layers=int(named('n_layer', 'num_hidden_layers')), d_model=d, num_heads=heads, d_ff=4 * d,
      activation='gelu_tanh', tie_embeddings=bool(_read(hf, 'tie_word_embeddings', True)),
      biases='all', normalization='layer_norm', mlp='plain', embedding_norm=True,
      layer_norm_eps=float(_read(hf, 'layer_norm_epsilon', 1e-5)))
  config.model.position.kind = positions.ALIBI
  return config


def gptj_config(hf: dict, directory: str, where: str) -> ml_collections.ConfigDict:
  """GPTJForCausalLM's config: one LayerNorm before both parallel branches (`parallel_shared`),
  a plain MLP of n_inner (4 n_embd where null) with biases, attention without them, lm_head with
  its own bias (`model.output_bias`), untied by default, and RoPE at base 10,000 on the
  interleaved pairs of each head's first `rotary_dim` dimensions (64 where absent, as
  GPTJConfig), under GPTJConfig's names (n_embd, n_layer, n_head, n_positions: the trained
  length, layer_norm_epsilon) or the generic ones it reads as them. GPT-J's class computes
  positions from a table of n_positions rows; this project's RoPE continues past it."""
  named = lambda name, other: _field(hf, name if name in hf or other not in hf else other, where)
  d, heads = int(named('n_embd', 'hidden_size')), int(named('n_head', 'num_attention_heads'))
  if heads < 1 or d % heads:
    raise errors.DamagedFileError(f'{where}: n_embd {d} does not split into {heads} heads. Fix: '
                                  'use the config.json that came with the weights.')
  head_dim = d // heads
  rotary = _read(hf, 'rotary_dim', 64)
  rotary = d if rotary is None else rotary  # transformers' width where it is null: n_embd.
  if isinstance(rotary, bool) or not isinstance(rotary, int) or not (
      0 < rotary <= head_dim and rotary % 2 == 0):
    raise errors.ConfigError(f'{where}: rotary_dim {rotary} with heads of {head_dim}: '
                             "transformers' GPT-J rotates an even number of each head's "
                             'dimensions, at most all of them, and fails on this file. Fix: a '
                             'checkpoint whose rotary_dim is so (as GPT-J 6B: 64 of 256).')
  act = _read(hf, 'activation_function', 'gelu_new')
  if act not in ACTIVATIONS:
    raise errors.ConfigError(f'{where}: activation_function {act!r} is not one this project '
                             f'computes. Fix: a checkpoint with one of {sorted(ACTIVATIONS)}.')
  config = _decoder(
      hf, directory, where, int(named('n_positions', 'max_position_embeddings')),
      num_layers=int(named('n_layer', 'num_hidden_layers')), d_model=d, num_heads=heads,
      d_ff=int(4 * d if hf.get('n_inner') is None else hf['n_inner']),
      activation=ACTIVATIONS[act], tie_embeddings=bool(_read(hf, 'tie_word_embeddings', False)),
      biases='mlp', normalization='layer_norm', mlp='plain', residual='parallel_shared',
      output_bias=True, layer_norm_eps=float(_read(hf, 'layer_norm_epsilon', 1e-5)))
  config.model.position.kind = positions.ROPE
  config.model.position.rope.update(base=10000.0, layout='interleaved', fraction=rotary / head_dim)
  return config


def mpt_config(hf: dict, directory: str, where: str) -> ml_collections.ConfigDict:
  """MptForCausalLM's config: LayerNorms without a bias before each branch, no biases, an MLP
  of 4 d_model with the exact GELU, tied embeddings by default, and ALiBi, under MptConfig's
  names (d_model, n_heads, n_layers, max_seq_len: the trained length, layer_norm_epsilon).
  MPT's slopes are ALiBi's for any number of heads. transformers' MPT computes that block
  whatever some fields say; a file whose fields say its model was another (llm-foundry's
  variants) is refused. Its clip_qkv (q, k and v clamped; 0 or null: none) is
  `attention.qkv_clip`, and a softmax_scale other than 1/sqrt of the heads' width is
  `attention.softmax_scale`."""
  for name in ('attn_config', 'ffn_config'):
    if not isinstance(hf.get(name) or {}, dict):
      raise errors.DamagedFileError(f'{where}: {name} is {hf[name]!r}, not a group of fields. '
                                    'Fix: use the config.json that came with the weights.')
  # MptAttentionConfig's defaults under the file's attn_config.
  attn_config = types.SimpleNamespace(**{**dict(alibi=True, alibi_bias_max=8, clip_qkv=None,
                                        softmax_scale=None, qk_ln=False, prefix_lm=False,
                                        sliding_window_size=-1,
                                        attn_type='multihead_attention'),
                                 **(hf.get('attn_config') or {})})
  ffn = hf.get('ffn_config') or {}
  act = ffn.get('ffn_act_fn') or {'name': 'gelu', 'approximate': 'none'}
  act = act if isinstance(act, dict) else {'name': act}
  d, heads = int(_field(hf, 'd_model', where)), int(_field(hf, 'n_heads', where))
  if heads < 1 or d % heads:
    raise errors.DamagedFileError(f'{where}: d_model {d} does not split into {heads} heads. Fix: '
                                  'use the config.json that came with the weights.')
  scale = attn_config.softmax_scale
  refused = _first_failed((
      (not attn_config.alibi, 'attn_config.alibi false (learned positions), where transformers '
                              'applies ALiBi'),
      (attn_config.alibi_bias_max != 8, 'attn_config.alibi_bias_max '
                                        f"{attn_config.alibi_bias_max}, where transformers' "
                                        'slopes take 8'),
      (bool(attn_config.qk_ln), 'attn_config.qk_ln, which transformers does not apply'),
      (bool(attn_config.prefix_lm), 'attn_config.prefix_lm, which transformers does not apply'),
      (attn_config.sliding_window_size not in (None, -1),
       f'attn_config.sliding_window_size {attn_config.sliding_window_size}, which transformers '
       'does not apply'),
      ('rms' in str(_read(hf, 'norm_type', 'low_precision_layernorm')),
       f"norm_type {hf.get('norm_type')!r}, where transformers applies LayerNorm"),
      (ffn.get('ffn_type', 'mptmlp') != 'mptmlp'
       or (act.get('name'), act.get('approximate', 'none')) != ('gelu', 'none'),
       f'ffn_config {ffn}, where transformers applies an MLP with the exact GELU'),
      (attn_config.attn_type != 'multihead_attention',
       f'attn_config.attn_type {attn_config.attn_type!r}'),
      (_read(hf, 'logit_scale', None) is not None, "logit_scale, which transformers' MPT does "
                                                    'not apply'),
      (not _read(hf, 'no_bias', True), "no_bias false (biases), where transformers' MPT has "
                                       'none'),
      (_read(hf, 'expansion_ratio', 4) != 4, f"expansion_ratio {hf.get('expansion_ratio')}, "
                                             "where transformers' MLP is 4 d_model wide")))
  if refused:
    raise errors.ConfigError(f'{where}: {refused} is not computed here. Fix: an MPT checkpoint '
                             'without it (as mosaicml/mpt-7b).')
  config = _decoder(
      hf, directory, where, int(_read(hf, 'max_seq_len', 2048)),
      num_layers=int(_field(hf, 'n_layers', where)), d_model=d, num_heads=heads, d_ff=4 * d,
      activation='gelu', tie_embeddings=bool(_read(hf, 'tie_word_embeddings', True)),
      biases='none', normalization='layer_norm_unbiased', mlp='plain',
      layer_norm_eps=float(_read(hf, 'layer_norm_epsilon', 1e-5)))
  config.model.position.kind = positions.ALIBI
  if scale is not None and abs(scale * (d // heads) ** 0.5 - 1) > 1e-6:  # Not 1/sqrt(width).
    config.model.attention.update(softmax_scale=True, softmax_scale_value=hf_fields.positive(
        scale, 'attn_config.softmax_scale', where))
  if attn_config.clip_qkv:  # transformers clamps where it is truthy.
    config.model.attention.update(qkv_clip=True, qkv_clip_value=hf_fields.positive(
        attn_config.clip_qkv, 'attn_config.clip_qkv', where))
  return config


# A change of architecture: the weights trained for one are not the other's.
AGAIN = 'the weights of one are not the other, so train again'


def alibi_refusal(m, options) -> str | None:
  """Why the ALiBi classes do not compute a model with ALiBi, or None: BLOOM where the
  embeddings are normalised (the classic block, an MLP of 4 d_model with the tanh GELU), MPT
  where they are not (LayerNorms without a bias, no biases, an MLP of 4 d_model with the exact
  GELU); both add the branches one after the other."""
  four = 4 * m.d_model
  if not m.embedding_norm and (m.normalization, m.biases) == ('layer_norm', 'all'):
    return ("ALiBi in the classic block without a norm of the embeddings, which BLOOM, the ALiBi "
            'class with that block, has. Fix: train with --config.model.embedding_norm=true for '
            'BLOOM, or with --config.model.normalization=layer_norm_unbiased '
            f'--config.model.biases=none --config.model.activation=gelu --config.model.d_ff={four} '
            f'for MPT ({AGAIN})')
  if m.embedding_norm:
    block, act, act_name, normalization, biases = (
        'BLOOM (ALiBi with a norm of the embeddings)', 'gelu_tanh', 'the tanh GELU', 'layer_norm',
        'all')
  else:
    block, act, act_name, normalization, biases = (
        'MPT (ALiBi without a norm of the embeddings)', 'gelu', 'the exact GELU',
        'layer_norm_unbiased', 'none')
  where = f"in {'an' if block.startswith('MPT') else 'a'} {block} block"
  checks = (
      (m.residual != 'sequential', f'residual={m.residual!r} {where}, which adds the branches '
                                   'one after the other'),
      ((m.activation, m.d_ff) != (act, four),
       f'an MLP of {m.d_ff} with {m.activation} {where}, whose MLP is 4 x d_model '
       f'= {four} wide with {act_name} ({act}). Fix: train with '
       f'--config.model.d_ff={four} --config.model.activation={act} ({AGAIN})'),
  )
  if not m.embedding_norm:  # MPT clamps q, k and v (attention.qkv_clip).
    options = [o for o in options if 'mpt' not in o.transformers_families]
  return (classic_refusal(m, options, block, normalization, biases)
          or hf_fields.first_failed(checks))


def classic_refusal(m, options, name: str, normalization: str = 'layer_norm',
                        biases: str = 'all') -> str | None:
  """Why `name`, a class of the classic block (GPT-NeoX with RoPE, GPT-2 with one learned
  table, BLOOM and MPT with ALiBi), does not compute model `m`, or None: `normalization` before
  each branch, `biases`, a plain MLP, full multi-head attention over the whole context, no
  attention option."""
  block = f"in {'an' if name.startswith('MPT') else 'a'} {name} block"
  has = {'layer_norm': 'LayerNorm', 'layer_norm_unbiased': 'LayerNorm without a bias'}
  checks = (
      ((m.normalization, m.mlp) != (normalization, 'plain'),
       f'{m.normalization} with a {m.mlp} MLP {block}, which has {has[normalization]} and a '
       f'plain MLP' + ('' if biases == 'all' else
                       f'. Fix: train with --config.model.normalization={normalization} '
                       f'--config.model.mlp=plain ({AGAIN})')),
      (m.biases != biases, f'biases={m.biases!r} {block}, which has ' + (
          'biases on every layer' if biases == 'all' else
          f'none. Fix: train with --config.model.biases=none ({AGAIN})')),
      (bool(options), f"{', '.join('attention.' + o.field for o in options)} {block}"),
      (m.norm != 'pre', f"norm={m.norm!r} {block}, which normalises each branch's input alone"),
      (positions.head_dim(m) * m.num_heads != m.d_model,
       f'heads of width head_dim={m.head_dim} {block}, which splits d_model {m.d_model} into '
       f'its {m.num_heads} heads'),
      (m.num_kv_heads not in (0, m.num_heads), f'grouped-query attention {block}'),
      (any(m.layer_windows), f'sliding windows {block}'),
  )
  return hf_fields.first_failed(checks)


def starcoder2_block(m) -> bool:
  """Whether the classic block with RoPE (LayerNorms before branches added in sequence, a plain
  MLP, whole heads rotated) has what GPT-NeoX lacks and StarCoder 2 has: grouped-query attention,
  windows, no biases, or heads whose width is not d_model / heads."""
  return ((m.normalization, m.mlp, m.residual) == ('layer_norm', 'plain', 'sequential')
          and m.position.rope.fraction == 1
          and (m.num_kv_heads not in (0, m.num_heads) or any(m.layer_windows)
               or m.biases == 'none' or positions.head_dim(m) * m.num_heads != m.d_model))


def nemotron_block(m) -> bool:
  """Whether the classic block with RoPE on part of each head, its branches in sequence, has what
  GPT-NeoX lacks and Nemotron has: grouped-query attention, biases other than on every layer,
  or heads whose width is not d_model / heads."""
  return ((m.normalization, m.mlp, m.residual) == ('layer_norm', 'plain', 'sequential')
          and m.position.rope.fraction < 1
          and (m.num_kv_heads not in (0, m.num_heads) or m.biases != 'all'
               or positions.head_dim(m) * m.num_heads != m.d_model))


def nemotron_refusal(m, options) -> str | None:
  """Why NemotronForCausalLM does not compute such a block, or None: norms before the branches
  (LayerNorm1P, its scale stored less 1), biases on the attention, the MLP, both or neither
  (attention_bias, mlp_bias), heads of any width, no windows and no attention option."""
  return hf_fields.first_failed(biases_apart_checks(
      m, options, 'in a Nemotron block (the classic one with partial rotary and grouped-query '
      'attention)'))


def biases_apart_checks(m, options, block: str) -> tuple:
  """(failed, why) checks of a class with norms before the branches, its attention's and MLP's
  biases apart (attention_bias, mlp_bias: q, k and v's alone it cannot have), no attention
  option and no windows (Nemotron's, Arcee's); `block` names it in the reasons."""
  return (
      (m.norm != 'pre', f"norm={m.norm!r} {block}, which normalises each branch's input alone"),
      (m.biases == 'qkv', f"biases='qkv' {block}, which has them on all four attention layers "
                          'or none. Fix: train with --config.model.biases=attention or none '
                          f'({AGAIN})'),
      (bool(options), f"{', '.join('attention.' + o.field for o in options)} {block}"),
      (any(m.layer_windows), f'sliding windows {block}'),
  )


def starcoder2_refusal(m, options) -> str | None:
  """Why Starcoder2ForCausalLM does not compute a classic block of its own, or None: norms
  before the branches, biases on every dense layer or none (its use_bias), heads of any width
  (it reads head_dim), one window on every layer or none, and no attention option
  (transformers' rope functions compute every scaling here)."""
  block = 'in a StarCoder 2 block (the classic one with grouped-query attention or windows)'
  windows = positions.layer_windows(m)
  checks = (
      (m.norm != 'pre', f"norm={m.norm!r} {block}, which normalises each branch's input alone"),
      (m.biases not in ('all', 'none'), f'biases={m.biases!r} {block}, which has them on every '
                                        'dense layer or none. Fix: train with '
                                        f'--config.model.biases=all or none ({AGAIN})'),
      (bool(options), f"{', '.join('attention.' + o.field for o in options)} {block}"),
      (any(windows) and len(set(windows)) > 1,
       f'sliding windows {sorted(set(windows))} across the layers {block}, which has one window '
       'on every layer or none. Fix: train with one window on every layer'),
  )
  return hf_fields.first_failed(checks)


def phi_refusal(m, options) -> str | None:
  """Why PhiForCausalLM, the class with one LayerNorm shared by the parallel branches, does
  not compute a model with that residual, or None: a plain MLP, biases on every dense layer (and
  on the output layer, zero where the model has none), norms before the branches, no attention
  option but its QK-norm (one LayerNorm for the heads, with a bias), no window; heads of any
  width (with QK-norm: d_model / num_heads, the width of its q_layernorm and k_layernorm) and
  grouped-query attention."""
  block = 'in a Phi block (one LayerNorm before both parallel branches)'
  checks = (
      ((m.normalization, m.mlp) != ('layer_norm', 'plain'),
       f'{m.normalization} with a {m.mlp} MLP {block}, which has LayerNorm and a plain MLP'),
      (m.biases != 'all', f'biases={m.biases!r} {block}, which has biases on every layer. Fix: '
                          f'train with --config.model.biases=all ({AGAIN})'),
      hf_fields.options_check(m, options, 'phi', block),
      (bool(options) and positions.head_dim(m) * m.num_heads != m.d_model,
       f'QK-norm with heads of width head_dim={positions.head_dim(m)} {block}, whose '
       f'q_layernorm and k_layernorm are d_model / num_heads = {m.d_model // m.num_heads} wide'),
      (m.norm != 'pre', f"norm={m.norm!r} {block}"),
      (any(m.layer_windows), f'sliding windows {block}'),
  )
  return hf_fields.first_failed(checks)


def gptj_refusal(m, options) -> str | None:
  """Why GPTJForCausalLM, the class with one LayerNorm before parallel branches and biases on the
  MLP alone, does not compute a model with them, or None: a plain MLP, norms before the branches,
  no attention option, no window, full multi-head attention with heads that split d_model, and
  RoPE at base 10,000 without a scaling (its frequencies are fixed)."""
  block = 'in a GPT-J block (one LayerNorm before parallel branches, biases on the MLP alone)'
  rope = m.position.rope
  checks = (
      ((m.normalization, m.mlp) != ('layer_norm', 'plain'),
       f'{m.normalization} with a {m.mlp} MLP {block}, which has LayerNorm and a plain MLP'),
      (bool(options), f"{', '.join('attention.' + o.field for o in options)} {block}"),
      (m.norm != 'pre', f"norm={m.norm!r} {block}"),
      (any(m.layer_windows), f'sliding windows {block}'),
      (m.num_kv_heads not in (0, m.num_heads), f'grouped-query attention {block}'),
      (positions.head_dim(m) * m.num_heads != m.d_model,
       f'heads of width head_dim={m.head_dim} {block}, which splits d_model {m.d_model} into '
       f'its {m.num_heads} heads'),
      (rope.base != 10000, f'rope.base={rope.base:g} {block}, whose frequencies are at base '
                           f'10000 ({AGAIN})'),
      (rope.scaling.kind != 'none', f'the RoPE scaling {rope.scaling.kind!r} {block}, whose '
                                    'config takes none. Fix: export a model trained without it, '
                                    'and apply the scaling with eval.py'),
  )
  return hf_fields.first_failed(checks)


def gpt2_refusal(m, options) -> str | None:
  """Why GPT2LMHeadModel, the class with a learned position table, does not compute a model
  with one, or None: the classic block, its branches added one after the other."""
  block = 'GPT-2 (the class with learned positions)'
  if m.residual != 'sequential':
    return (f'residual={m.residual!r} in a {block} block, which adds the branches one after '
            'the other')
  return classic_refusal(m, options, block)
