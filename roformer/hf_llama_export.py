"""Which Llama-family transformers class computes a block with norms before or around its
branches and a gated MLP, and why each does not: the conditions of Phi-3 (partial rotary),
SmolLM3 (layers without positions), Cohere and Cohere 2 (unbiased LayerNorms shared by parallel
branches), OLMo 1 (norms without parameters), OLMo 2 and 3 (output norms), Gemma 2 and 3
(sandwich norms), Granite (muP's multipliers), StableLM (LayerNorms) and GLM and GLM-4 (partial
rotary with q, k and v biases, or sandwich norms without Gemma's multiplier), which
roformer/hf_export_config.py's `export_family` consults once the block says which class it is.
Each function returns the first condition that fails, in one line with its fix, or None.
"""

import numpy as np

from roformer import attention_options
from roformer import hf_classic
from roformer import hf_config
from roformer import hf_fields
from roformer import positions

AGAIN = hf_classic.AGAIN


def phi3_refusal(config, options, windows) -> str | None:
  """Why Phi3ForCausalLM, the Llama-family class with partial rotary, does not compute a
  Llama-family block that rotates part of each head, or None: it has no attention option, no
  biases, pre-norms, RoPE in every layer and one window (or none) on all of them."""
  m = config.model
  what = f'partial rotary (rope.fraction={m.position.rope.fraction}) with'
  kind = m.position.rope.scaling.kind
  checks = (
      (m.norm != 'pre', f"{what} norm={m.norm!r} (Phi-3, the Llama-family class with partial "
                        "rotary, normalises each branch's input)"),
      (bool(options), f"{what} attention.{', attention.'.join(o.field for o in options)} "
                      '(Phi-3 has no attention option)'),
      (kind not in ('none', 'ntk', 'longrope'),
       f"{what} the RoPE scaling {kind!r} (Phi-3's config takes longrope alone). Fix: export a "
       'model trained without it, and apply the scaling with eval.py'),
      (m.biases != 'none', f"{what} biases={m.biases!r} (Phi-3 has none). Fix: train with "
                           '--config.model.biases=none'),
      (not all(positions.rope_layers(m)), f'{what} layers without positions (Phi-3 rotates in '
                                          'every layer)'),
      (bool(windows) and not all(positions.layer_windows(m)),
       f'{what} sliding windows on some layers only (Phi-3 windows every layer or none). Fix: '
       'train with one window on every layer'),
      (kind == 'longrope' and m.head_dim not in (0, m.d_model // m.num_heads),
       f'{what} LongRoPE and heads of width head_dim={m.head_dim}: Phi3Config sizes the factor '
       f'lists from hidden_size / heads ({m.d_model // m.num_heads}), so transformers cannot '
       'load it'),
  )
  return hf_fields.first_failed(checks)


def glm_family(m) -> str | None:
  """GLM's class of a Llama-family block (RMSNorm, a gated MLP) with RoPE in every layer (layers
  without positions are SmolLM3's), or None: GLM-4's for sandwich norms without Gemma's
  multiplier of the embeddings; GLM's for norms before the branches with
  partial rotary, no windows and no attention option, where Phi-3, the other class with partial
  rotary, does not compute it (q, k and v biases, a scaling other than a static NTK or LongRoPE,
  or LongRoPE with heads whose width is not d_model / heads)."""
  if (m.normalization, m.mlp) != ('rms_norm', 'gated') or not all(positions.rope_layers(m)):
    return None
  if m.norm == 'sandwich':
    return 'glm4' if m.embedding_multiplier == 1 else None
  rope = m.position.rope
  if (m.norm != 'pre' or rope.fraction == 1 or any(m.layer_windows)
      or attention_options.enabled(m.attention)):
    return None
  phi3 = m.biases == 'none' and rope.scaling.kind in ('none', 'ntk', 'longrope') and not (
      rope.scaling.kind == 'longrope' and positions.head_dim(m) * m.num_heads != m.d_model)
  return None if phi3 else 'glm'


def glm_refusal(config, options, family: str) -> str | None:
  """Why GlmForCausalLM or Glm4ForCausalLM (`family`, which `glm_family` chose) does not compute
  a block of theirs, or None: biases on q, k and v or none (both rotate any part of each head,
  and transformers' rope functions compute every scaling here); GLM-4 has none of what
  Gemma's sandwich block has beside its multiplier (attention options, windows, a soft-cap of
  the logits, per-layer bases)."""
  m = config.model
  name = {'glm': 'GLM', 'glm4': 'GLM-4'}[family]
  block = f"in a {name} block ({'sandwich norms' if family == 'glm4' else 'partial rotary'})"
  root = m.d_model ** 0.5
  gemma = lambda what: (
      f"{what} in a sandwich block without Gemma's multiplier of the embeddings: GLM-4, the class "
      f'of that block, has none (Gemma 2 and 3 have it, with their multiplier sqrt(d_model) = '
      f'{root:g}). Fix: train without it, or for Gemma with '
      f'--config.model.embedding_multiplier={root!r}')
  glm4 = family == 'glm4'
  checks = (
      (glm4 and bool(options), gemma(', '.join('attention.' + o.field for o in options))),
      (glm4 and any(m.layer_windows), gemma('sliding windows')),
      (glm4 and m.logits_softcap > 0, gemma(f'a soft-cap of the logits (logits_softcap='
                                            f'{m.logits_softcap:g})')),
      (glm4 and len(set(positions.layer_rope_bases(m))) > 1,
       gemma('per-layer RoPE bases (layer_rope_bases)')),
      (m.biases not in ('qkv', 'none'), f'biases={m.biases!r} {block}, which has them on q, k and '
                                        'v or nowhere. Fix: train with '
                                        '--config.model.biases=qkv or none'),
  )
  return hf_fields.first_failed(checks)


def smollm3_refusal(config, options) -> str | None:
  """Why SmolLM3ForCausalLM, the class with layers that have no positions (NoPE), does not
  compute a Llama-family block with them, or None: it has no attention option, no sandwich
  norms, biases on all four attention layers or none (and on the MLP or not), and windows only
  on its NoPE layers."""
  m = config.model
  rotates = positions.rope_layers(m)
  windows = positions.layer_windows(m)
  checks = (
      (bool(options), f"attention.{', attention.'.join(o.field for o in options)} with layers "
                      'without positions (SmolLM3, the class with NoPE layers, has none). Fix: '
                      'train them without attention options'),
      (m.norm != 'pre', f'norm={m.norm!r} with layers without positions (SmolLM3 normalises '
                        "each branch's input alone). Fix: train them with "
                        '--config.model.norm=pre'),
      (m.biases == 'qkv', "biases='qkv' with layers without positions (SmolLM3 has biases on "
                          'all four attention layers or none). Fix: train them with '
                          '--config.model.biases=attention or none'),
      (any(w and r for w, r in zip(windows, rotates)),
       'sliding windows on RoPE layers with layers without positions (SmolLM3 windows only '
       'its NoPE layers). Fix: train with windows (layer_windows) on the NoPE layers only'),
  )
  return hf_fields.first_failed(checks)


def cohere_block(m) -> bool:
  """Whether the block is Cohere's (LayerNorms without a bias, a gated MLP)."""
  return (m.normalization, m.mlp) == ('layer_norm_unbiased', 'gated')


def cohere_refusal(m, options) -> str | None:
  """Why CohereForCausalLM and Cohere2ForCausalLM do not compute a block of theirs, or None:
  one norm before parallel branches, RoPE on whole heads, no attention option but Cohere's
  QK-norm (a LayerNorm per head), biases on the
  four attention layers or none; Cohere RoPE in every layer and no windows, Cohere 2 (any layer
  windowed or without positions: `export_family`) a window of one size on exactly its RoPE
  layers and heads that split d_model."""
  block = "in a Cohere block (LayerNorms without a bias, a gated MLP)"
  rotates = positions.rope_layers(m)
  windows = positions.layer_windows(m)
  cohere2 = any(windows) or not all(rotates)
  checks = (
      (m.residual != 'parallel_shared', f'residual={m.residual!r} {block}, which shares one norm '
                                        f"between parallel branches. Fix: train with "
                                        f"--config.model.residual=parallel_shared ({AGAIN})"),
      (m.norm != 'pre', f"norm={m.norm!r} {block}"),
      (m.position.rope.fraction < 1, f'partial rotary (rope.fraction={m.position.rope.fraction}) '
                                     f'{block}, which rotates whole heads'),
      hf_fields.options_check(m, options, 'cohere2' if cohere2 else 'cohere', block),
      (m.biases not in ('none', 'attention'),
       f"biases={m.biases!r} {block}, which has all four attention ones or none. Fix: train with "
       '--config.model.biases=attention or none'),
      (cohere2 and any(bool(w) != r for w, r in zip(windows, rotates)),
       f'windows on other layers than the RoPE ones {block}: Cohere 2, its class with windows or '
       'layers without positions, windows exactly its RoPE layers and leaves the others without '
       'positions'),
      (len({w for w in windows if w}) > 1,
       f'sliding windows of several sizes {sorted({w for w in windows if w})}'),
      (cohere2 and positions.head_dim(m) * m.num_heads != m.d_model,
       f'heads of width head_dim={m.head_dim} in a Cohere 2 block, which splits d_model '
       f'{m.d_model} into its {m.num_heads} heads'),
  )
  return hf_fields.first_failed(checks)


def olmo1_refusal(m, options) -> str | None:
  """Why OlmoForCausalLM, the class whose norms have no parameters, does not compute a model
  with them, or None: Llama's block (norms before the branches, added one after the other, a
  gated MLP, RoPE on whole heads in every layer) without windows, q, k and v clamped or not,
  biases on the four attention layers or none, and the norms' epsilon 1e-5."""
  block = 'in an OLMo 1 block (norms without parameters)'
  others = [o.field for o in options if 'olmo' not in o.transformers_families]
  checks = (
      (m.norm != 'pre', f"norm={m.norm!r} {block}, which normalises each branch's input alone"),
      (m.residual != 'sequential', f'residual={m.residual!r} {block}, which adds the branches '
                                   'one after the other'),
      (m.position.rope.fraction < 1, f'partial rotary (rope.fraction='
                                     f'{m.position.rope.fraction}) {block}, which rotates whole '
                                     'heads'),
      (not all(positions.rope_layers(m)), f'layers without positions (layer_kinds) {block}'),
      (any(m.layer_windows), f'sliding windows {block}'),
      (bool(others), f"attention.{', attention.'.join(others)} {block}, whose class clamps q, k "
                     'and v (attention.qkv_clip) and computes no other option'),
      (m.biases not in ('none', 'attention'),
       f"biases={m.biases!r} {block}, which has all four attention ones or none. Fix: train with "
       '--config.model.biases=attention or none'),
      (m.layer_norm_eps != 1e-5,
       f'layer_norm_eps={m.layer_norm_eps:g} {block}, whose norms take 1e-5. Fix: train with '
       f'--config.model.layer_norm_eps=1e-5 ({AGAIN})'),
  )
  return hf_fields.first_failed(checks)


def exaone4_block(m) -> bool:
  """Whether a block with output norms (OLMo 2's) is EXAONE 4's: attention options that its
  class computes (QK-norm over each head), or layers without positions (OLMo's rotate in every
  layer and norm the heads together)."""
  options = attention_options.enabled(m.attention)
  exaone4 = bool(options) and all(o.transformers_computes(m.attention, 'exaone4')
                                  for o in options)
  return m.norm == 'output' and (exaone4 or not all(positions.rope_layers(m)))


def exaone4_refusal(config, options) -> str | None:
  """Why Exaone4ForCausalLM does not compute a block `exaone4_block` chose, or None: QK-norm
  over each head (the option's own checks), no other option, no biases, RoPE on whole heads, and
  either RoPE in every layer without windows or a window of one size on exactly its RoPE layers
  (its sliding ones; the global ones without positions), with a scaling of every RoPE layer."""
  m = config.model
  block = "in an EXAONE 4 block (output norms with QK-norm over each head)"
  rotates, windows = positions.rope_layers(m), positions.layer_windows(m)
  listed = [o for o in options if 'exaone4' in o.transformers_families]  # QK-norm.
  others = [o.field for o in options if o not in listed]
  checks = (
      (not listed, 'layers without positions with output norms, without QK-norm (EXAONE 4, the '
                   'class of that block, has it over each head). Fix: train with '
                   '--config.model.attention.qk_norm=True'),
      (any(not o.transformers_computes(m.attention, 'exaone4') for o in listed),
       'QK-norm over all the heads with output norms and layers without positions: EXAONE 4, the '
       'class of that block, norms each head (OLMo 2 and 3, which norm them together, rotate '
       'every layer). Fix: train with --config.model.attention.qk_norm_over=head'),
      (bool(others), f"attention.{', attention.'.join(others)} {block}"),
      (m.biases != 'none', f'biases={m.biases!r} {block}, which has none. Fix: train with '
                           '--config.model.biases=none'),
      (m.position.rope.fraction < 1, f'partial rotary (rope.fraction={m.position.rope.fraction}) '
                                     f'{block}, which rotates whole heads'),
      (any(windows) and any(bool(w) != r for w, r in zip(windows, rotates)),
       f'windows on other layers than the RoPE ones {block}: EXAONE 4 windows exactly its RoPE '
       'layers and leaves the others without positions'),
      (not any(windows) and not all(rotates),
       f'layers without positions and no windows {block}, whose global layers go without '
       'positions only beside windowed RoPE ones'),
      (m.position.rope.scaling.layers == 'global' and m.position.rope.scaling.kind != 'none',
       f"a RoPE scaling of the global layers alone {block}, which scales every RoPE layer"),
  )
  return hf_fields.first_failed(checks) or next(
      (r for r in (o.transformers_refusal(m, m.attention) for o in options) if r), None)


def olmo_refusal(config, options) -> str | None:
  """Why Olmo2ForCausalLM and Olmo3ForCausalLM do not compute a block with output norms, or
  None: they have QK-norm over all heads with the blocks' epsilon (the option's own check), no
  other option, biases on all four attention layers or none, one RoPE base, and OLMo 3 windows
  on some layers with a scaling of its global layers alone."""
  m = config.model
  sc = m.position.rope.scaling
  checks = (
      (not options, 'output norms without QK-norm (OLMo 2 and 3 have it over all heads, '
                    'EXAONE 4 over each head). Fix: train with '
                    '--config.model.attention.qk_norm=True '
                    '--config.model.attention.qk_norm_over=heads'),
      (m.biases not in ('none', 'attention'),
       f"biases={m.biases!r} with output norms (OLMo has all four attention ones or none). "
       'Fix: train with --config.model.biases=attention or none'),
      (any(m.layer_windows) and sc.kind != 'none' and sc.layers != 'global',
       f"a RoPE scaling ({sc.kind!r}) of every layer with sliding windows and output norms: "
       "transformers' OLMo 3 scales its global layers alone. Fix: "
       '--config.model.position.rope.scaling.layers=global'),
      (any(m.layer_windows) and sc.kind not in TYPED_SCALINGS,
       f"the RoPE scaling {sc.kind!r} with sliding windows and output norms (OLMo 3's export "
       f"takes {', '.join(TYPED_SCALINGS[1:])}). Fix: export a model trained without it, and "
       'apply it with eval.py'),
  )
  return hf_fields.first_failed(checks)


# The scalings a Gemma 2, Gemma 3 or OLMo 3 export writes (Gemma 3's and OLMo 3's on their global
# layers, as transformers applies them; each read back by transformers in tests/test_hf_export.py
# or by hand).
TYPED_SCALINGS = ('none', 'linear', 'yarn', 'llama3')


def sandwich_family(m) -> str:
  """The Gemma class of a sandwich block: Gemma 2's where it computes every attention option on
  (it has no QK-norm), else Gemma 3's."""
  options = attention_options.enabled(m.attention)
  return 'gemma2' if all('gemma2' in o.transformers_families for o in options) else 'gemma3'


def gemma_refusal(config, family: str) -> str | None:
  """Why Gemma2ForCausalLM or Gemma3ForCausalLM (`family`) does not compute a sandwich block, or
  None: they have the embeddings times sqrt(hidden_size), no biases or all four attention ones
  and a scaling in TYPED_SCALINGS (or none); Gemma 3 scales its global layers alone, and has
  one RoPE base for its windowed layers and one for its global ones; Gemma 2 scales every layer
  and has one base."""
  m = config.model
  sc = m.position.rope.scaling
  name = hf_config.MODEL_TYPES[family].removesuffix('ForCausalLM').replace('Gemma', 'Gemma ')
  windows = positions.layer_windows(m)
  bases = positions.layer_rope_bases(m)
  by_kind = {bool(w): set() for w in windows}
  for w, b in zip(windows, bases):
    by_kind[bool(w)].add(b)
  multiplier = float(np.float32(m.embedding_multiplier))
  gemma3 = family == 'gemma3'
  checks = (
      (m.position.rope.fraction < 1,
       f'partial rotary (rope.fraction={m.position.rope.fraction}) in a sandwich block with the '
       f"embedding multiplier: {name} rotates whole heads (GLM-4, the sandwich block's class with "
       'partial rotary, has no multiplier)'),
      (multiplier != float(np.float32(m.d_model ** 0.5)),
       f'embedding_multiplier={m.embedding_multiplier:g} in a sandwich block: {name} '
       f'multiplies its embeddings by sqrt(d_model) = {m.d_model ** 0.5:g}. Fix: train it with '
       f'--config.model.embedding_multiplier={m.d_model ** 0.5!r}'),
      (m.biases not in ('none', 'attention'),
       f"biases={m.biases!r} in a sandwich block ({name} has all four attention ones or "
       'none). Fix: train it with --config.model.biases=attention or none'),
      (gemma3 and sc.kind != 'none' and any(windows) and sc.layers != 'global',
       f'a RoPE scaling ({sc.kind!r}) of every layer in a sandwich block with QK-norm: '
       "transformers' Gemma 3 scales its global layers alone. Fix: "
       '--config.model.position.rope.scaling.layers=global, or export a model trained without '
       'a scaling and apply one with eval.py'),
      (not gemma3 and sc.kind != 'none' and any(windows) and sc.layers == 'global',
       f'a RoPE scaling ({sc.kind!r}) of the global layers alone in a sandwich block without '
       "QK-norm: transformers' Gemma 2 scales every layer. Fix: export a model trained without "
       'a scaling and apply one with eval.py'),
      (sc.kind not in TYPED_SCALINGS,
       f"the RoPE scaling {sc.kind!r} in a sandwich block ({name}'s export takes "
       f"{', '.join(TYPED_SCALINGS[1:])}). Fix: export a model trained without it, and apply "
       'it with eval.py'),
      (gemma3 and any(len(b) > 1 for b in by_kind.values()),
       'RoPE bases that differ among the windowed layers or among the global ones (Gemma 3 '
       'has rope_local_base_freq and rope_theta). Fix: train with one base for the windowed '
       'layers and one for the global ones (layer_rope_bases)'),
      (not gemma3 and len(set(bases)) > 1,
       'per-layer RoPE bases (layer_rope_bases) in a sandwich block without QK-norm (Gemma 2 '
       'has one rope_theta; Gemma 3, with QK-norm, one per layer kind)'),
  )
  return hf_fields.first_failed(checks)


def granite_block(m) -> bool:
  """Whether Llama's block (RMSNorm before each branch, a gated MLP) has one of Granite's
  constants: a multiplier of the embeddings, the branches or the logits, or an attention option
  that Granite's class alone computes (its set factor of q.k)."""
  granite_only = [o for o in attention_options.enabled(m.attention)
                  if 'granite' in o.transformers_families]
  return ((m.normalization, m.mlp, m.norm) == ('rms_norm', 'gated', 'pre') and (
      m.embedding_multiplier != 1 or m.residual_multiplier != 1 or m.logits_multiplier != 1
      or bool(granite_only)))


def granite_refusal(m, options) -> str | None:
  """Why GraniteForCausalLM does not compute a Llama block with Granite's constants, or None:
  it adds the branches one after the other, rotates whole heads in every layer, has no windows,
  computes no attention option but its factor of q.k, and has biases on the four attention
  layers (and on the MLP's) or none."""
  block = "in a Granite block (Llama's with muP's multipliers)"
  others = [o.field for o in options if 'granite' not in o.transformers_families]
  checks = (
      (m.residual != 'sequential', f'residual={m.residual!r} {block}, which adds the branches '
                                   'one after the other'),
      (m.position.rope.fraction < 1, f'partial rotary (rope.fraction={m.position.rope.fraction}) '
                                     f'{block}, which rotates whole heads'),
      (not all(positions.rope_layers(m)), f'layers without positions (layer_kinds) {block}'),
      (any(m.layer_windows), f'sliding windows {block}, whose class has none'),
      (bool(others), f"attention.{', attention.'.join(others)} {block}, whose class computes "
                     'one attention option, a factor of q.k (attention.softmax_scale)'),
      (m.biases == 'qkv', f"biases='qkv' {block}, which has all four attention ones (and the "
                          "MLP's) or none. Fix: train with --config.model.biases=attention, all "
                          'or none'),
  )
  return hf_fields.first_failed(checks)


def arcee_refusal(m, options) -> str | None:
  """Why ArceeForCausalLM, Llama's block with a plain MLP, does not compute such a block, or
  None: RMSNorms before branches in sequence, biases on the attention, the MLP, both or neither,
  RoPE on whole heads in every layer, no windows and no attention option."""
  block = "in an Arcee block (Llama's with a plain MLP)"
  return hf_fields.first_failed(hf_classic.biases_apart_checks(m, options, block) + (
      (m.residual != 'sequential', f'residual={m.residual!r} {block}, whose branches follow one '
                                   'another'),
      (not all(positions.rope_layers(m)) or m.position.rope.fraction < 1,
       f'RoPE on part of the layers or of each head {block}, which rotates all of both')))


def stablelm_refusal(m, options) -> str | None:
  """Why StableLmForCausalLM, the class of LayerNorms with a gated MLP, does not compute such a
  block, or None: norms before the branches, added one after the other or in parallel after one
  norm (use_parallel_residual), biases on q, k and v or none, RoPE in every layer (on any part of
  each head), no windows, no attention option but its QK-norm (a LayerNorm per head), and heads
  that split d_model."""
  block = 'in a StableLM block (LayerNorms with a gated MLP)'
  checks = (
      (m.norm != 'pre', f"norm={m.norm!r} {block}, which normalises each branch's input alone"),
      (m.residual == 'parallel', f"residual='parallel' {block}, whose parallel branches share one "
                                 'norm. Fix: train with --config.model.residual=parallel_shared '
                                 f'({AGAIN})'),
      (m.biases not in ('qkv', 'none'), f'biases={m.biases!r} {block}, which has them on q, k and '
                                        'v or nowhere. Fix: train with '
                                        '--config.model.biases=qkv or none'),
      hf_fields.options_check(m, options, 'stablelm', block),
      (not all(positions.rope_layers(m)), f'layers without positions (layer_kinds) {block}'),
      (any(m.layer_windows), f'sliding windows {block}'),
      (positions.head_dim(m) * m.num_heads != m.d_model,
       f'heads of width head_dim={m.head_dim} {block}, which splits d_model {m.d_model} into '
       f'its {m.num_heads} heads'),
  )
  return hf_fields.first_failed(checks)
