"""Which transformers class computes a model trained or imported here, and that class's
`config.json`: the export's half of roformer/hf_config.py, which reads the Hub's configs.

`export_family` names the class or refuses, in one line that says why, a model none computes:
the checks of `_refusal`, with the Llama-family classes' own (Gemma 2's and 3's sandwich block,
SmolLM3's layers without positions, Phi-3's and GLM's partial rotary, GLM-4's sandwich block,
Cohere's shared unbiased norm, OLMo 1's norms without parameters, OLMo 2's and 3's output norms,
Granite's multipliers, StableLM's LayerNorms with a gated MLP) in roformer/hf_llama_export.py, and
those of the classic block's classes (GPT-NeoX, StarCoder 2, Phi, GPT-J, GPT-2, BLOOM, MPT) in
roformer/hf_classic.py, and Falcon's in roformer/hf_falcon.py. `from_config` writes the config
in transformers 4's form (`rope_theta` and `rope_scaling`), which transformers 5 reads too;
GPT-2's, BLOOM's, MPT's, GPT-J's and Falcon's in their classes' own names.
"""

from roformer import attention_options
from roformer import errors
from roformer import hf_classic
from roformer import hf_config
from roformer import hf_deepseek
from roformer import hf_falcon
from roformer import hf_fields
from roformer import hf_llama4
from roformer import hf_llama_export
from roformer import hf_moe
from roformer import latent_attention
from roformer import model_types
from roformer import positions


def _refusal(config) -> str | None:
  """Why no transformers class computes the model `config` builds, or None."""
  m = config.model
  att, rope = m.attention, m.position.rope
  options = attention_options.enabled(att)
  alibi = positions.alibi_everywhere(m)
  granite = hf_llama_export.granite_block(m)
  checks = (
      (not model_types.of(m).decoder_only,
       f"it is a {m.type} model; transformers' causal-LM classes take decoder-only models. "
       'Fix: export a causal LM'),
      (config.train.float_positions > 0,
       'it trained on real-valued positions (train.float_positions) and is evaluated on their '
       'grid; transformers feeds integer positions. Fix: export a model trained on integer '
       'positions'),
      (positions.rope_layers(m) is None and not _learned(m) and not alibi,
       f'position.kind={m.position.kind!r}' + (f' with layer_kinds {tuple(m.layer_kinds)}'
                                               if m.layer_kinds else '') +
       ': the Llama, Mistral, Phi-3, Qwen2, Qwen3, Gemma 2 and 3, GPT-NeoX and Phi classes compute '
       "RoPE in every layer and nothing else, SmolLM3's RoPE or nothing in each, GPT-2 one "
       'learned table added to the embeddings, BLOOM and MPT ALiBi in every layer'),
      (m.embedding_norm and not alibi,
       "a norm of the embeddings (model.embedding_norm) outside BLOOM's block (ALiBi)"),
      (m.get('output_bias') and (m.normalization, m.mlp, m.residual) != (
          'layer_norm', 'plain', 'parallel_shared'),
       "a bias of the output layer (model.output_bias) outside Phi's and GPT-J's blocks (one "
       "LayerNorm shared by parallel branches, residual='parallel_shared', and a plain MLP)"),
      (bool(m.layer_rope_bases) and m.norm != 'sandwich',
       "per-layer RoPE bases (layer_rope_bases) outside Gemma 2's and 3's block "
       "(norm='sandwich')"),
      (m.embedding_multiplier != 1 and m.norm != 'sandwich' and not granite,
       f"an embedding multiplier ({m.embedding_multiplier:g}) outside Gemma 2's and 3's block "
       "(norm='sandwich') and Granite's (Llama's block)"),
      (m.residual_multiplier != 1 and not granite,
       f'a multiplier of the residual branches (residual_multiplier={m.residual_multiplier:g}) '
       "outside Granite's block (RMSNorm before each branch, a gated MLP)"),
      (m.logits_softcap > 0 and m.norm != 'sandwich',
       f"a soft-cap of the output logits (logits_softcap={m.logits_softcap:g}) outside Gemma 2's "
       "and 3's block (norm='sandwich')"),
      (rope.keep_fraction < 1, f'p-RoPE (rope.keep_fraction={rope.keep_fraction})'),
      (rope.rotate_values, 'rotated values (rope.rotate_values)'),
      (rope.remap.method != 'none', f'the distance remap {rope.remap.method!r}, an evaluation-'
                                    'time change to attention. Fix: export a model whose saved '
                                    'config has remap.method=none, and apply the remap with '
                                    'eval.py'),
      (rope.scaling.kind == 'yarn' and rope.scaling.ramp == 'ratio',
       "YaRN's 'ratio' ramp (transformers computes the 'index' ramps). Fix: train or continue "
       "with --config.model.position.rope.scaling.ramp=index: the ramps give other "
       'frequencies, so a model trained on one is not the other'),
      (not attention_options.KINDS[att.kind].in_transformers, f'attention.kind={att.kind!r}'),
      (any(not o.transformers_families for o in options),
       'an attention option ('
       + ', '.join(o.field for o in options if not o.transformers_families) + ')'),
      (m.norm == 'post', "norm='post'"),
      (m.type_vocab_size > 0, 'token-type embeddings'),
      ((m.normalization, m.mlp) not in (('rms_norm', 'gated'), ('rms_norm', 'moe'),
                                        ('rms_norm', 'plain'),
                                        ('layer_norm', 'plain'),
                                        ('layer_norm', 'gated'), ('layer_norm_unbiased', 'plain'),
                                        ('layer_norm_unbiased', 'gated'),
                                        ('layer_norm_nonparametric', 'gated')),
       f'the block {m.normalization} with a {m.mlp} MLP (Llama pairs rms_norm with a gated MLP, '
       'Mixtral with a mixture of experts, Arcee with a plain one, '
       'GPT-NeoX layer_norm with a plain one, StableLM with a gated one, MPT '
       'layer_norm_unbiased with a plain one, Cohere with a gated one, OLMo 1 '
       'layer_norm_nonparametric with a gated one)'),
      (m.logits_multiplier != 1 and not hf_llama_export.cohere_block(m) and not granite,
       f'a multiplier of the output logits (logits_multiplier={m.logits_multiplier:g}) outside '
       "Cohere's block (layer_norm_unbiased with a gated MLP) and Granite's (Llama's block)"),
  )
  reason = hf_fields.first_failed(checks)
  if reason:
    return reason
  if latent_attention.enabled(m):  # DeepSeek-V3's and V2's classes alone compute it.
    return hf_deepseek.export_refusal(m, options)
  if hf_llama4.export_block(m):  # Chunks or Llama 4's routing: its class alone, whatever else.
    return hf_llama4.export_refusal(m, options)
  if _learned(m):
    return hf_classic.gpt2_refusal(m, options)
  if alibi:
    return hf_classic.alibi_refusal(m, options)
  sc = rope.scaling
  if (rope.fraction < 1 and sc.kind in positions.scaling.TEMPERED
      and sc.attention_factor_dims != 'rotated'):
    return (f"{sc.kind}'s attention factor on every dimension of q and k with partial rotary "
            "(transformers multiplies the rotated dimensions alone). Fix: train or continue with "
            "--config.model.position.rope.scaling.attention_factor_dims=rotated: the two give "
            'other logits, so a model trained with one is not the other')
  if (sc.kind != 'none' and sc.layers == 'global' and any(m.layer_windows)
      and m.norm not in ('sandwich', 'output')):
    return ("a RoPE scaling of the global layers alone (rope.scaling.layers='global') outside "
            "Gemma 3's and OLMo 3's blocks (norm='sandwich', 'output'): the other classes scale "
            'every layer')
  if m.normalization == 'layer_norm_nonparametric':
    return hf_llama_export.olmo1_refusal(m, options)
  if hf_llama_export.cohere_block(m):
    return hf_llama_export.cohere_refusal(m, options)
  if (m.normalization, m.mlp) == ('layer_norm', 'gated'):
    return hf_llama_export.stablelm_refusal(m, options)
  if (m.normalization, m.mlp) == ('rms_norm', 'plain'):
    return hf_llama_export.arcee_refusal(m, options)
  if granite:
    return hf_llama_export.granite_refusal(m, options)
  if m.normalization == 'rms_norm':
    windows = {w for w in m.layer_windows if w}
    if m.residual != 'sequential':
      return (f'a parallel residual (residual={m.residual!r}) in a Llama-family block '
              "(GPT-NeoX's and Phi's layouts have LayerNorm)")
    if len(windows) > 1:
      return (f'sliding windows of several sizes {sorted(windows)} (each of these classes has '
              'one). Fix: train with one window size')
    glm = hf_llama_export.glm_family(m)
    if glm:
      return hf_llama_export.glm_refusal(config, options, glm)
    if hf_llama_export.exaone4_block(m):
      return hf_llama_export.exaone4_refusal(config, options)
    if m.mlp == 'moe' and hf_moe.export_family(m) in hf_moe.PARTIAL_ROTARY:  # Checked there.
      return None
    if rope.fraction < 1 and m.norm != 'sandwich':  # Gemma's refusal says why for a sandwich.
      return hf_llama_export.phi3_refusal(config, options, windows)
    if not all(positions.rope_layers(m)):
      return hf_llama_export.smollm3_refusal(config, options)
    # The options on go to the one class that computes them: Gemma 3's for a sandwich block
    # with QK-norm, Gemma 2's for one without, OLMo's for output norms, else Qwen3's.
    family = {'sandwich': hf_llama_export.sandwich_family(m), 'output': 'olmo2'}.get(m.norm,
                                                                                     'qwen3')
    if m.mlp == 'moe':  # The mixture's class (hf_moe.export_family checked its block).
      family = hf_moe.export_family(m)
    missing = [o for o in options if family not in o.transformers_families]
    if missing:  # The option's own reason where it gives one (the class it needs), else this.
      return next((r for r in (o.transformers_refusal(m, att) for o in missing) if r), (
          f"attention.{', attention.'.join(o.field for o in missing)} in a "
          f'{hf_config.MODEL_TYPES[family]} block, whose class does not compute it'))
    for option in options:
      reason = option.transformers_refusal(m, att)
      if reason:
        return reason
    settings = [o.field for o in options if not o.transformers_computes(att, family)]
    if settings:  # Its class has the option with other settings (QK-norm's type or span).
      return (f"attention.{', attention.'.join(settings)} in a "
              f'{hf_config.MODEL_TYPES[family]} block, whose class computes it otherwise')
    if m.norm == 'sandwich':
      return hf_llama_export.gemma_refusal(config, family)
    if m.norm == 'output':
      return hf_llama_export.olmo_refusal(config, options)
    if options and m.biases not in ('none', 'attention'):
      return (f"{', '.join('attention.' + o.field for o in options)} with biases={m.biases!r} "
              '(Qwen3, the class with QK-norm, has biases on all four attention layers or none). '
              'Fix: train with --config.model.biases=attention or none')
    if windows and m.biases not in ('none', 'qkv') and not options:  # Qwen3 takes 'attention'.
      return (f"sliding windows with biases={m.biases!r} (Mistral has none, Qwen2 q/k/v's, "
              "Qwen3 the four attention layers'). Fix: train with --config.model.biases=none "
              'or qkv')
    return None
  name = 'GPT-NeoX' if m.residual != 'parallel_shared' else 'GPT-J' if m.biases == 'mlp' else (
      'Phi')
  name = 'Falcon' if hf_falcon.falcon_block(m) else name
  if not all(positions.rope_layers(m)):
    return f'layers without positions (layer_kinds) in a {name} block'
  if name == 'Falcon':
    return hf_falcon.refusal(m, options)
  if name == 'Phi':
    return hf_classic.phi_refusal(m, options)
  if name == 'GPT-J':
    return hf_classic.gptj_refusal(m, options)
  if hf_classic.nemotron_block(m):
    return hf_classic.nemotron_refusal(m, options)
  if hf_classic.starcoder2_block(m):
    return hf_classic.starcoder2_refusal(m, options)
  return hf_classic.classic_refusal(m, options, name)


def _learned(m) -> bool:
  """Whether every layer's positions come from one learned table (GPT-2's)."""
  return positions.learned_rows(m) is not None


def _layer_types(windows) -> list[str]:
  """transformers' `layer_types` of each layer's window (0: none)."""
  return ['sliding_attention' if w else 'full_attention' for w in windows]


def export_family(config) -> str:
  """The transformers family that computes `config`'s model, or ConfigError saying why none (a
  mixture of experts' block first, which the mixture classes share)."""
  llama4 = hf_llama4.export_block(config.model)
  family = (hf_deepseek.family(config.model) if latent_attention.enabled(config.model) else
            'llama4' if llama4 else
            hf_moe.export_family(config.model) if config.model.mlp == 'moe' else None)
  reason = _refusal(config)
  if reason:
    fix = '' if '. Fix: ' in reason else (
        '. Fix: export a model trained without it (docs/hf_checkpoints.md lists what each '
        'transformers class computes)')
    raise errors.ConfigError(f'no transformers class computes this model: {reason}{fix}.')
  m = config.model
  if family:
    return family
  if _learned(m):
    return 'gpt2'
  if positions.alibi_everywhere(m):
    return 'bloom' if m.embedding_norm else 'mpt'
  if (m.normalization, m.mlp) == ('layer_norm', 'gated'):
    return 'stablelm'
  if m.normalization == 'layer_norm':  # GPT-J's MLP alone has biases.
    if hf_falcon.falcon_block(m):
      return 'falcon'
    if m.residual == 'parallel_shared':
      return 'gptj' if m.biases == 'mlp' else 'phi'
    if hf_classic.nemotron_block(m):
      return 'nemotron'
    return 'starcoder2' if hf_classic.starcoder2_block(m) else 'gpt_neox'
  if m.normalization == 'layer_norm_nonparametric':
    return 'olmo'
  if (m.normalization, m.mlp) == ('rms_norm', 'plain'):
    return 'arcee'
  if hf_llama_export.cohere_block(m):
    # Cohere 2 where any layer is windowed (every one too: its layer_types may hold no global).
    return 'cohere' if all(positions.rope_layers(m)) and not any(m.layer_windows) else 'cohere2'
  if hf_llama_export.granite_block(m):
    return 'granite'
  glm = hf_llama_export.glm_family(m)
  if glm:
    return glm
  if m.norm == 'sandwich':
    return hf_llama_export.sandwich_family(m)
  if hf_llama_export.exaone4_block(m):
    return 'exaone4'
  if m.norm == 'output':  # OLMo 3 where some layers are windowed.
    return 'olmo3' if any(m.layer_windows) else 'olmo2'
  if m.position.rope.fraction < 1:  # The Llama-family class with partial rotary.
    return 'phi3'
  if not all(positions.rope_layers(m)):
    return 'smollm3'
  if attention_options.enabled(m.attention):  # Options Qwen3 computes (_refusal checked).
    return 'qwen3'
  if any(m.layer_windows) and m.biases == 'none':
    return 'mistral' if all(m.layer_windows) and len(m.layer_windows) in (1, m.num_layers) else (
        'qwen2')
  return 'qwen2' if m.biases == 'qkv' else 'llama'


def _common_fields(fam: str, m, special_ids: dict) -> dict:
  """The fields every family's config.json holds under the same names: the class, the
  vocabulary, the special ids, the initialisation's std and whether the output layer is tied
  (a tied model of the classic initialisation goes out untied, its scale folded into
  lm_head)."""
  return {'architectures': [hf_config.MODEL_TYPES[fam]],
          'model_type': hf_config.HF_MODEL_TYPES[fam], 'vocab_size': m.vocab_size,
          'initializer_range': m.init_std,
          'tie_word_embeddings': bool(m.tie_embeddings and m.init == 'normal'),
          'bos_token_id': special_ids.get('bos'), 'eos_token_id': special_ids.get('eos'),
          'pad_token_id': special_ids.get('pad'), 'use_cache': True, 'torch_dtype': 'float32'}


def _gpt2_named(m) -> dict:
  """The block's fields under GPT2Config's names, which GPTJConfig shares (transformers'
  gelu_new is the tanh GELU), without dropout."""
  return {'n_embd': m.d_model, 'n_layer': m.num_layers, 'n_head': m.num_heads,
          'n_inner': m.d_ff, 'layer_norm_epsilon': m.layer_norm_eps,
          'activation_function': {'gelu_tanh': 'gelu_new'}.get(
              m.activation, hf_config.ACTIVATION_NAMES[m.activation]),
          'resid_pdrop': 0.0, 'embd_pdrop': 0.0, 'attn_pdrop': 0.0}


def _fraction(rotary: int, head_dim: int) -> float:
  """partial_rotary_factor for `rotary` of `head_dim` dimensions: transformers rotates
  int(head_dim * factor), so the exact ratio where that gives `rotary` back, else one half a
  dimension past it."""
  fraction = rotary / head_dim
  return fraction if int(head_dim * fraction) == rotary else (rotary + 0.5) / head_dim


def _rope_scaling(config) -> tuple[dict | None, int]:
  """(rope_scaling in transformers 4's form, max_position_embeddings)."""
  sc, trained = config.model.position.rope.scaling, config.data.seq_len
  if sc.kind == 'none':
    return None, trained
  if sc.kind == 'ntk':  # A static NTK is a larger base; export writes it as rope_theta.
    return None, trained
  if sc.kind == 'linear':  # The length it stretches to: a continuation's own seq_len.
    return {'rope_type': 'linear', 'factor': sc.factor}, int(
        (sc.original_length or trained) * sc.factor)
  if sc.kind == 'dynamic':
    return {'rope_type': 'dynamic', 'factor': sc.factor}, sc.original_length
  extended = int(sc.original_length * sc.factor)
  if sc.kind == 'longrope':
    out = {'rope_type': 'longrope', 'short_factor': list(sc.short_factor),
           'long_factor': list(sc.long_factor), 'factor': sc.factor,
           'original_max_position_embeddings': sc.original_length}
    if sc.attention_factor:
      out['attention_factor'] = sc.attention_factor
    return out, extended
  if sc.kind == 'llama3':
    return {'rope_type': 'llama3', 'factor': sc.factor, 'low_freq_factor': sc.low_freq_factor,
            'high_freq_factor': sc.high_freq_factor,
            'original_max_position_embeddings': sc.original_length}, extended
  out = {'rope_type': 'yarn', 'factor': sc.factor, 'beta_fast': sc.beta, 'beta_slow': sc.alpha,
         'original_max_position_embeddings': sc.original_length}
  if sc.ramp == 'index_unrounded':
    out['truncate'] = False
  if sc.attention_factor:
    out['attention_factor'] = sc.attention_factor
  return out, extended


def from_config(config, special_ids: dict, source: dict | None = None) -> dict:
  """The config.json of the transformers class that computes `config`'s model (transformers
  4's form: rope_theta and rope_scaling, which transformers 5 reads too). `special_ids`:
  bos/eos/pad token ids (None where the tokenizer has none); `source`: the config.json it was
  imported from, whose max_position_embeddings it keeps."""
  fam = export_family(config)
  m, rope = config.model, config.model.position.rope
  common = _common_fields(fam, m, special_ids)
  if fam == 'gpt2':  # GPT2Config's own names.
    return {**common, **_gpt2_named(m), 'n_positions': positions.learned_rows(m),
            'scale_attn_weights': True}
  if fam == 'gptj':  # GPT-2's names; n_positions the trained length, or the source's.
    # transformers' GPT-J reads positions from a table of n_positions rows.
    longest = max(config.data.seq_len, int((source or {}).get('n_positions') or 0))
    return {**common, **_gpt2_named(m), 'n_positions': longest,
            'rotary_dim': int(round(positions.head_dim(m) * rope.fraction))}
  if fam == 'mpt':  # MptConfig's own names; max_seq_len the trained length, or the source's.
    # transformers' MPT computes no position past max_seq_len; a longer one changes no logit.
    longest = max(config.data.seq_len, int((source or {}).get('max_seq_len') or 0))
    attn = dict(alibi=True, alibi_bias_max=8, clip_qkv=None, softmax_scale=None, qk_ln=False,
                attn_pdrop=0, attn_type='multihead_attention', attn_impl='torch',
                prefix_lm=False, attn_uses_sequence_id=False)
    for option in attention_options.enabled(m.attention):  # qkv_clip's clip_qkv.
      attn.update(option.transformers_fields(m.attention, fam))
    return {
        **common, 'd_model': m.d_model, 'n_heads': m.num_heads, 'n_layers': m.num_layers,
        'expansion_ratio': 4, 'max_seq_len': longest, 'layer_norm_epsilon': m.layer_norm_eps,
        'no_bias': True, 'logit_scale': None, 'resid_pdrop': 0.0, 'emb_pdrop': 0.0,
        'learned_pos_emb': False, 'attn_config': attn}
  if fam == 'bloom':  # BloomConfig's own names; seq_length is read back as data.seq_len.
    return {
        **common, 'hidden_size': m.d_model, 'n_layer': m.num_layers, 'n_head': m.num_heads,
        'layer_norm_epsilon': m.layer_norm_eps, 'seq_length': config.data.seq_len,
        'hidden_dropout': 0.0, 'attention_dropout': 0.0,
        'apply_residual_connection_post_layernorm': False, 'pretraining_tp': 1,
        'slow_but_exact': False}
  scaling, max_len = _rope_scaling(config)
  if source and 'max_position_embeddings' in source:
    max_len = int(source['max_position_embeddings'])
  head_dim = positions.head_dim(m)
  # Phi's, StableLM's and Cohere's switch of QK-norm, the one option they compute (_refusal).
  qk_norm = bool(attention_options.enabled(m.attention))
  rotary = int(round(head_dim * rope.fraction))
  base = positions.layer_rope_bases(m)[0]  # One base (refused otherwise but for Gemma 3's).
  if rope.scaling.kind == 'ntk':
    base = base * rope.scaling.factor ** (rotary / (rotary - 2))
  out = {
      **common, 'hidden_size': m.d_model, 'intermediate_size': m.d_ff,
      'num_hidden_layers': m.num_layers, 'num_attention_heads': m.num_heads,
      'hidden_act': hf_config.ACTIVATION_NAMES[m.activation], 'max_position_embeddings': max_len,
      'rope_scaling': scaling,
  }
  if fam == 'gpt_neox':
    out.update(layer_norm_eps=m.layer_norm_eps, rotary_pct=(rotary + 0.5) / head_dim,
               rotary_emb_base=base, use_parallel_residual=m.residual == 'parallel',
               attention_bias=True, hidden_dropout=0.0, attention_dropout=0.0)
    return out
  if fam == 'falcon':  # FalconConfig's own names for its block; RoPE's as the others'.
    out.update(rope_theta=base, activation=out.pop('hidden_act'), **hf_falcon.config_fields(m))
    out.pop('intermediate_size')
    return out
  if fam == 'starcoder2':  # use_bias: every dense layer's or none; one window on all layers.
    out.update(num_key_value_heads=m.num_kv_heads or m.num_heads, norm_epsilon=m.layer_norm_eps,
               head_dim=head_dim, rope_theta=base, use_bias=m.biases == 'all',
               sliding_window=max(positions.layer_windows(m)) or None, attention_dropout=0.0,
               residual_dropout=0.0, embedding_dropout=0.0)
    return out
  if fam == 'stablelm':  # Its parallel branches share one norm; partial_rotary_factor as Phi's.
    out.update(num_key_value_heads=m.num_kv_heads or m.num_heads, layer_norm_eps=m.layer_norm_eps,
               rope_theta=base, use_qkv_bias=m.biases == 'qkv', qk_layernorm=qk_norm,
               use_parallel_residual=m.residual == 'parallel_shared', hidden_dropout=0.0,
               attention_dropout=0.0,
               partial_rotary_factor=_fraction(rotary, head_dim))
    return out
  if fam == 'phi':  # PhiConfig reads head_dim, and partial_rotary_factor at the top level.
    out.update(num_key_value_heads=m.num_kv_heads or m.num_heads, head_dim=head_dim,
               layer_norm_eps=m.layer_norm_eps, rope_theta=base, qk_layernorm=qk_norm,
               partial_rotary_factor=_fraction(rotary, head_dim),
               resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)
    return out
  out.update(num_key_value_heads=m.num_kv_heads or m.num_heads, rms_norm_eps=m.layer_norm_eps,
             rope_theta=base, attention_dropout=0.0, head_dim=head_dim)
  windows = positions.layer_windows(m)
  if fam in hf_config.GEMMA:
    out.pop('hidden_act')
    out.update(hidden_activation=hf_config.ACTIVATION_NAMES[m.activation],
               attention_bias=m.biases == 'attention', query_pre_attn_scalar=head_dim,
               layer_types=_layer_types(windows),
               final_logit_softcapping=m.logits_softcap or None, attn_logit_softcapping=None)
    if any(windows):  # Without windowed layers, the class default (its mask is built anyway).
      out['sliding_window'] = max(windows)
    if fam == 'gemma3':  # Local (windowed) and global layers, each kind with its RoPE base.
      bases = positions.layer_rope_bases(m)
      base_of = lambda local: next((b for w, b in zip(windows, bases) if bool(w) == local),
                                   rope.base)
      out.update(rope_theta=base_of(False), rope_local_base_freq=base_of(True))
      # transformers before 4.53 reads the layer kinds from this pattern alone (every p-th layer
      # global; 1: all global), which some layouts have.
      pattern = next((p for p in range(1, m.num_layers + 2)
                      if all(bool(w) == bool((i + 1) % p) for i, w in enumerate(windows))), None)
      if pattern:
        out['sliding_window_pattern'] = pattern
  elif fam == 'nemotron':  # LayerNorm1P's epsilon; partial_rotary_factor at the top level.
    out['norm_eps'] = out.pop('rms_norm_eps')
    out.update(attention_bias=m.biases in ('attention', 'all'), mlp_bias=m.biases in ('all', 'mlp'),
               partial_rotary_factor=_fraction(rotary, head_dim))
  elif fam in ('llama', 'smollm3', 'granite', 'arcee'):  # attention_bias and mlp_bias apart.
    out.update(attention_bias=m.biases in ('attention', 'all'),
               mlp_bias=m.biases in ('all', 'mlp'))
    if fam == 'granite':  # q.k's factor is 1/sqrt(head_dim) unless attention.softmax_scale's.
      out.update(embedding_multiplier=m.embedding_multiplier,
                 residual_multiplier=m.residual_multiplier,
                 logits_scaling=1.0 / m.logits_multiplier, attention_multiplier=head_dim ** -0.5)
    if fam == 'smollm3':  # 1: the layer rotates; windows on its NoPE layers only.
      out.update(no_rope_layers=[int(r) for r in positions.rope_layers(m)],
                 use_sliding_window=any(windows), sliding_window=max(windows) or None,
                 layer_types=_layer_types(windows))
  elif fam in ('cohere', 'cohere2'):  # Its logits multiplier; Cohere 2's RoPE layers slide.
    out.pop('rms_norm_eps')
    out.update(layer_norm_eps=m.layer_norm_eps, logit_scale=m.logits_multiplier,
               attention_bias=m.biases == 'attention')
    if fam == 'cohere':
      out.update(use_qk_norm=qk_norm)
    else:
      out.update(sliding_window=max(windows), layer_types=_layer_types(windows))
  elif fam == 'olmo':  # OlmoLayerNorm's epsilon is 1e-5 (_olmo1_refusal_of checked).
    out.pop('rms_norm_eps')
    out.update(attention_bias=m.biases == 'attention')
  elif fam in ('olmo2', 'olmo3'):
    out.update(attention_bias=m.biases == 'attention')
    if fam == 'olmo3':
      # Its scaling is the global layers' (rope_scaling, as transformers 4). transformers 5.24
      # reads transformers 4's form with the class's base (500,000) on the sliding layers
      # whatever rope_theta says, so the settings per layer type go beside it in its own form.
      full = {'rope_type': 'default', **(scaling or {}), 'rope_theta': base}
      out.update(sliding_window=max(windows), layer_types=_layer_types(windows),
                 rope_parameters={'full_attention': full, 'sliding_attention': {
                     'rope_type': 'default', 'rope_theta': base}})
  elif fam == 'mistral':
    out.update(sliding_window=windows[0])
  elif fam in hf_moe.FAMILIES:
    out.update(hf_moe.config_fields(fam, m))
    if fam in hf_moe.PARTIAL_ROTARY:  # Part of each head rotated, as GLM's.
      out['partial_rotary_factor'] = _fraction(rotary, head_dim)
    if fam in ('gpt_oss', 'llama4', *hf_deepseek.LATENT):  # Their own where it is absent.
      out['rope_parameters'] = {'rope_type': 'default', **(out['rope_scaling'] or {}),
                                'rope_theta': base}
  elif fam == 'exaone4':  # Its RoPE layers slide, its global ones have no positions.
    out.update(sliding_window=max(windows) or None, layer_types=_layer_types(windows))
  elif fam in hf_config.GLM:  # Its q, k and v biases or none; partial rotary as Phi-3's.
    out.update(attention_bias=m.biases == 'qkv', partial_rotary_factor=_fraction(rotary, head_dim))
  elif fam == 'phi3':  # Phi3Config reads its own original length (4096 where absent).
    out.update(sliding_window=windows[0] or None, resid_pdrop=0.0, embd_pdrop=0.0,
               partial_rotary_factor=_fraction(rotary, head_dim),
               original_max_position_embeddings=(rope.scaling.original_length
                                                 if scaling else max_len))
  else:  # qwen2, qwen3
    if fam == 'qwen3':
      out.update(attention_bias=m.biases == 'attention')
    window = max(windows)
    # transformers 5 reads layer_types; transformers 4 slides the layers from max_window_layers
    # on, which says the same where the global layers come first (other layouts: 5 only).
    first = next((i for i, w in enumerate(windows) if w), m.num_layers)
    out.update(use_sliding_window=bool(window), sliding_window=window or None,
               max_window_layers=first,
               layer_types=_layer_types(windows))
  for option in attention_options.enabled(m.attention):  # Their own fields (logit_scale's).
    out.update(option.transformers_fields(m.attention, fam))
  if fam in hf_deepseek.LATENT:  # Its softmax scale goes with its scaling.
    hf_deepseek.scale_softmax(out, m)
  return out
