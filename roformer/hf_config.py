"""A Hugging Face `config.json` as this project's config, and back.

Six architectures are read and written: LlamaForCausalLM, MistralForCausalLM (its sliding window
becomes `model.layer_windows`), Qwen2ForCausalLM (q/k/v biases, per-layer windows),
Qwen3ForCausalLM (QK-norm, `attention.qk_norm`), Gemma3ForCausalLM (Gemma 3's text model: sandwich
norms, `model.norm='sandwich'`, whose scales are 1 + the stored weight; QK-norm; the embeddings
times sqrt(hidden_size), `model.embedding_multiplier`; local and global layers, each kind with its
window and RoPE base, `model.layer_windows` and `model.layer_rope_bases`) and GPTNeoXForCausalLM
(partial rotary, parallel residual). A `head_dim` other than hidden_size / num_attention_heads
(Qwen3's 0.6B and 4B, Mistral NeMo) is `model.head_dim`, which the Llama family's classes read.
Both forms of the rotary settings that the Hub holds are read: transformers 4's `rope_theta` beside
`rope_scaling` (keyed by `type` or `rope_type`), and transformers 5's `rope_parameters` (with
`rope_theta` inside); an export is written in the first form, which both versions read.

The scalings map onto roformer/positions/scaling.py with transformers' semantics
(modeling_rope_utils): `linear` divides the frequencies; `dynamic` is NTK with the base grown
from `max_position_embeddings` at the input's length; `yarn` uses the ramp between the pair
indices of beta_fast and beta_slow rotations (`ramp='index'`) and multiplies q and k by its
attention factor (given, from mscale and mscale_all_dim, or 0.1 ln(factor) + 1); `llama3` is
Llama 3.1's smooth band. Any other scaling, and any setting this project does not compute,
is refused in one line that names it.
"""

import math
import os

import ml_collections
import numpy as np

from roformer import attention_options
from roformer import config_schema
from roformer import errors
from roformer import files
from roformer import model_types
from roformer import positions

ARCHITECTURES = {'LlamaForCausalLM': 'llama', 'MistralForCausalLM': 'mistral',
                 'Qwen2ForCausalLM': 'qwen2', 'Qwen3ForCausalLM': 'qwen3',
                 'Gemma3ForCausalLM': 'gemma3', 'GPTNeoXForCausalLM': 'gpt_neox'}
MODEL_TYPES = {family: arch for arch, family in ARCHITECTURES.items()}
# config.json's model_type of each family (its own name but Gemma 3's text model's).
HF_MODEL_TYPES = {family: {'gemma3': 'gemma3_text'}.get(family, family)
                  for family in MODEL_TYPES}
LLAMA_FAMILY = ('llama', 'mistral', 'qwen2', 'qwen3', 'gemma3')
# transformers' hidden_act -> model.activation, and back.
ACTIVATIONS = {'silu': 'silu', 'swish': 'silu', 'gelu': 'gelu', 'gelu_new': 'gelu_tanh',
               'gelu_pytorch_tanh': 'gelu_tanh', 'relu': 'relu'}
ACTIVATION_NAMES = {'silu': 'silu', 'gelu': 'gelu', 'gelu_tanh': 'gelu_pytorch_tanh',
                    'relu': 'relu'}
SCALINGS = ('default', 'linear', 'dynamic', 'yarn', 'llama3')


def read(directory: str) -> dict:
  """The parsed config.json of a Hugging Face model directory."""
  path = os.path.join(directory, 'config.json')
  if os.path.isfile(directory):
    raise errors.ConfigError(f'--from_hf={directory!r} is a file. Fix: --from_hf='
                             f'{os.path.dirname(directory) or "."}, the model\'s directory.')
  if not os.path.isfile(path):
    raise errors.ConfigError(f'--from_hf={directory!r} has no config.json. Fix: point at a '
                             'directory written by save_pretrained (config.json, *.safetensors, '
                             'tokenizer.json).')
  hf = files.read_json(path, 'copy it again from the model')
  if not isinstance(hf, dict):
    raise errors.DamagedFileError(f'{path} is not a JSON object. Fix: copy it again.')
  return hf


def family(hf: dict, where: str) -> str:
  """'llama', 'mistral', 'qwen2', 'qwen3', 'gemma3' or 'gpt_neox' from the config's
  architecture (or, where it names none, its model_type)."""
  by_type = {t: MODEL_TYPES[f] for f, t in HF_MODEL_TYPES.items()}
  archs = hf.get('architectures') or [by_type.get(hf.get('model_type'), '')]
  arch = archs[0] if archs else ''
  if arch not in ARCHITECTURES:
    raise errors.ConfigError(
        f'{where}: architecture {arch or hf.get("model_type")!r} is not one this project reads. '
        f'Fix: a checkpoint of {", ".join(ARCHITECTURES)}.')
  return ARCHITECTURES[arch]


def _read(hf: dict, name: str, default):
  """A transformers config's `name`, or `default`: the value transformers' class assumes when
  the file leaves it out."""
  return hf[name] if name in hf else default


def _field(hf: dict, name: str, where: str):
  if name not in hf:
    raise errors.DamagedFileError(f'{where} lacks {name!r}. Fix: use the config.json that came '
                                  'with the weights.')
  return hf[name]


def rope_settings(hf: dict, fam: str, where: str) -> dict:
  """The rotary settings of either form as one dict: rope_type, rope_theta,
  partial_rotary_factor and the scaling's own keys."""
  params = hf.get('rope_parameters')
  if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
    raise errors.ConfigError(f'{where}: rope_parameters differ per layer type '
                             f'({sorted(params)}), which this project does not read. Fix: a '
                             'checkpoint with one set of rotary settings.')
  # transformers takes rope_scaling over rope_parameters when a file has both.
  settings = dict(hf.get('rope_scaling') or params or {})
  settings['rope_type'] = _read(settings, 'rope_type', _read(settings, 'type', 'default'))
  settings.setdefault('rope_theta', _read(hf, 'rope_theta', _read(hf, 'rotary_emb_base', 10000.0)))
  default_partial = 0.25 if fam == 'gpt_neox' else 1.0  # transformers' class defaults.
  settings.setdefault('partial_rotary_factor',
                      _read(hf, 'partial_rotary_factor', _read(hf, 'rotary_pct', default_partial)))
  return settings


def _scaling(settings: dict, hf: dict, where: str) -> tuple[dict, int]:
  """(config.model.position.rope.scaling fields, the length the model was trained at)."""
  kind = settings['rope_type']
  max_len = int(_field(hf, 'max_position_embeddings', where))
  if kind not in SCALINGS:
    raise errors.ConfigError(f'{where}: rope scaling {kind!r} is not one this project computes. '
                             f'Fix: a checkpoint with one of {SCALINGS}.')
  if kind == 'default':
    return {'kind': 'none'}, max_len
  # A top-level original_max_position_embeddings (Phi-3's) wins over the scaling's own.
  original = int(hf.get('original_max_position_embeddings')
                 or settings.get('original_max_position_embeddings') or max_len)
  factor = settings.get('factor')
  if factor is None and kind == 'yarn':
    factor = max_len / original
  if factor is None or float(factor) < 1:
    raise errors.ConfigError(f'{where}: rope scaling {kind!r} has factor {factor!r}; this project '
                             'extends contexts with factors of 1 or more. Fix: a checkpoint '
                             'with such a factor.')
  factor = float(factor)
  if kind == 'linear':  # max_position_embeddings is the interpolated length.
    trained = max(1, int(max_len / factor))  # The length the factor stretches.
    return {'kind': 'linear', 'factor': factor, 'original_length': trained}, trained
  if kind == 'dynamic':  # transformers grows the base from max_position_embeddings.
    return {'kind': 'dynamic', 'factor': factor, 'original_length': max_len}, max_len
  if kind == 'llama3':
    return {'kind': 'llama3', 'factor': factor, 'original_length': original,
            'low_freq_factor': float(settings['low_freq_factor']),
            'high_freq_factor': float(settings['high_freq_factor'])}, original
  if not _read(settings, 'truncate', True):
    raise errors.ConfigError(f"{where}: yarn with truncate=false (an unrounded ramp) is not one "
                             'this project computes. Fix: a checkpoint with the rounded ramp.')
  attention = settings.get('attention_factor')
  mscale, mscale_all = settings.get('mscale'), settings.get('mscale_all_dim')
  if attention is None and mscale and mscale_all:
    grow = lambda m: 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
    attention = grow(mscale) / grow(mscale_all)
  return {'kind': 'yarn', 'factor': factor, 'original_length': original, 'ramp': 'index',
          'alpha': float(settings.get('beta_slow') or 1.0),
          'beta': float(settings.get('beta_fast') or 32.0),
          'attention_factor': float(attention or 0.0)}, original


def _windows(hf: dict, fam: str, layers: int) -> tuple[int, ...]:
  window = _read(hf, 'sliding_window', 4096)  # MistralConfig's and Qwen2Config's default.
  if fam == 'mistral':
    return (int(window),) if window else ()
  if fam in ('qwen2', 'qwen3') and window and hf.get('use_sliding_window'):
    kinds = hf.get('layer_types') or [
        'sliding_attention' if i >= _read(hf, 'max_window_layers', 28) else 'full_attention'
        for i in range(layers)]
    windows = tuple(int(window) if k == 'sliding_attention' else 0 for k in kinds)
    return windows if any(windows) else ()
  return ()


def _gemma3_layers(hf: dict, layers: int, where: str) -> tuple[tuple, tuple, float]:
  """(layer_windows, layer_rope_bases, rope.base) of a Gemma 3 config: its sliding layers
  (`layer_types`, else every `sliding_window_pattern`-th layer global) with their window and
  `rope_local_base_freq`, its global ones with `rope_theta`, in either form of the rotary
  settings. A scaling is refused: transformers applies it to the global layers only, and this
  project scales every layer alike."""
  params = hf.get('rope_parameters')
  if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):
    full = dict(params.get('full_attention') or {})
    sliding = dict(params.get('sliding_attention') or {})
  else:  # transformers 4: rope_theta and rope_scaling (the global layers'), rope_local_base_freq;
    # a flat rope_parameters is ignored, as transformers' Gemma 3 ignores it.
    full, sliding = {}, {}
  full.update(hf.get('rope_scaling') or {})  # transformers merges it into the global layers'.
  full.setdefault('rope_theta', _read(hf, 'rope_theta', 1_000_000.0))
  sliding.setdefault('rope_theta', _read(hf, 'rope_local_base_freq', 10_000.0))
  for name, settings in (('full_attention', full), ('sliding_attention', sliding)):
    kind = _read(settings, 'rope_type', _read(settings, 'type', 'default'))
    if kind != 'default':
      raise errors.ConfigError(
          f"{where}: rope scaling {kind!r} on Gemma 3's {name} layers; transformers scales "
          'those layers only, this project every layer alike. Fix: a checkpoint without rope '
          'scaling (as Gemma 3 270M and 1B).')
  pattern = int(_read(hf, 'sliding_window_pattern', 6))
  kinds = hf.get('layer_types') or [
      'sliding_attention' if (i + 1) % pattern else 'full_attention' for i in range(layers)]
  window = int(_read(hf, 'sliding_window', 4096) or 0)
  windows = tuple(window if k == 'sliding_attention' else 0 for k in kinds)
  bases = tuple(float(sliding['rope_theta'] if w else full['rope_theta']) for w in windows)
  if len(set(bases)) == 1:
    return (windows if any(windows) else ()), (), bases[0]
  return windows, bases, None


def _gemma3_refusal(hf: dict, head_dim: int, where: str) -> None:
  """What Gemma 3's text config may say that this project does not compute."""
  scalar = _read(hf, 'query_pre_attn_scalar', 256)
  checks = (
      (scalar != head_dim, f'query_pre_attn_scalar {scalar} scales the logits by '
                           f'1/sqrt({scalar}), and this project by 1/sqrt(head_dim {head_dim})'),
      (hf.get('final_logit_softcapping') is not None, 'final_logit_softcapping (tanh on the '
                                                      'logits) is not computed here'),
      (hf.get('attn_logit_softcapping') is not None, 'attn_logit_softcapping (tanh on the '
                                                     'attention logits) is not computed here'),
      (bool(hf.get('use_bidirectional_attention')), 'use_bidirectional_attention: this '
                                                    'project reads causal LMs'),
  )
  for failed, why in checks:
    if failed:
      raise errors.ConfigError(f'{where}: {why}. Fix: a Gemma 3 checkpoint without it (as '
                               'Gemma 3 270M and 1B).')


def _biases(hf: dict, fam: str, where: str) -> str:
  if fam == 'qwen2':
    return 'qkv'
  if fam == 'mistral':
    return 'none'
  attention, mlp = bool(_read(hf, 'attention_bias', fam == 'gpt_neox')), bool(
      _read(hf, 'mlp_bias', fam == 'gpt_neox'))
  if mlp and not attention:
    raise errors.ConfigError(f'{where}: biases on the MLP but not on attention is not a layout '
                             'this project builds. Fix: a checkpoint with attention_bias too.')
  return {(True, True): 'all', (True, False): 'attention', (False, False): 'none'}[
      (attention, mlp)]


def to_config(hf: dict, directory: str) -> ml_collections.ConfigDict:
  """This project's config of a causal LM that computes what the checkpoint computes; the
  tokenizer is the directory's own (`data.tokenizer='hf:DIR'`), data.seq_len the length the
  model was pretrained at (before any context extension)."""
  where = os.path.join(directory, 'config.json')
  fam = family(hf, where)
  d, heads = int(_field(hf, 'hidden_size', where)), int(_field(hf, 'num_attention_heads', where))
  # The Llama family's classes read head_dim (hidden_size / heads where it is absent or null;
  # Qwen3Config's and Gemma3TextConfig's default, where absent, is 128 and 256); GPT-NeoX's
  # always split hidden_size.
  default_width = {'qwen3': 128, 'gemma3': 256}.get(fam)
  given = _read(hf, 'head_dim', default_width) if fam in LLAMA_FAMILY else None
  head_dim = int(given) if given else (d // heads if d % heads == 0 else None)
  if head_dim is None or (fam not in LLAMA_FAMILY and hf.get('head_dim') not in (None, head_dim)):
    raise errors.ConfigError(
        f'{where}: head_dim {hf.get("head_dim")} with hidden_size {d} and {heads} heads; '
        f'{MODEL_TYPES[fam]} splits hidden_size into the heads. Fix: a checkpoint whose heads '
        'are so.')
  act = (_read(hf, 'hidden_activation', 'gelu_pytorch_tanh') if fam == 'gemma3' else
         _read(hf, 'hidden_act', 'gelu' if fam == 'gpt_neox' else 'silu'))
  if act not in ACTIVATIONS:
    raise errors.ConfigError(f'{where}: hidden_act {act!r} is not one this project computes. Fix: '
                             f'a checkpoint with one of {sorted(ACTIVATIONS)}.')
  layers = int(_field(hf, 'num_hidden_layers', where))
  kv = int(hf.get('num_key_value_heads') or heads)
  if fam == 'gemma3':
    _gemma3_refusal(hf, head_dim, where)
    windows, bases, base = _gemma3_layers(hf, layers, where)
    settings = {'rope_theta': base}  # None: each layer's base is in layer_rope_bases.
    scaling = {'kind': 'none'}
    trained = int(_field(hf, 'max_position_embeddings', where))
  else:
    windows, bases = _windows(hf, fam, layers), ()
    settings = rope_settings(hf, fam, where)
    scaling, trained = _scaling(settings, hf, where)
  # transformers' rounding; Llama, Mistral and Qwen2 rotate whole heads whatever the file says.
  partial = float(settings['partial_rotary_factor']) if fam == 'gpt_neox' else 1.0
  rotary = int(head_dim * partial)
  if rotary < head_dim and scaling['kind'] == 'yarn':
    raise errors.ConfigError(
        f"{where}: yarn with partial rotary ({rotary} of {head_dim} dimensions): transformers "
        "multiplies only the rotated dimensions by YaRN's attention factor, this project the "
        'whole logits. Fix: a checkpoint that rotates whole heads, or another scaling.')
  if rotary < 2:
    raise errors.ConfigError(f'{where}: partial_rotary_factor {partial} rotates {rotary} of '
                             f'{head_dim} dimensions. Fix: a checkpoint that rotates at least one '
                             'pair.')
  config = config_schema.default_config()
  # What transformers' causal-LM classes are: the first decoder-only type declared.
  decoder = model_types.named('decoder_only')[0]
  config.model.update(
      type=decoder, vocab_size=int(_field(hf, 'vocab_size', where)), num_layers=layers,
      d_model=d, num_heads=heads, num_kv_heads=0 if kv == heads else kv,
      head_dim=0 if head_dim * heads == d else head_dim,
      d_ff=int(_field(hf, 'intermediate_size', where)), activation=ACTIVATIONS[act],
      dropout=0.0, init='normal', init_std=float(_read(hf, 'initializer_range', 0.02)),
      tie_embeddings=bool(_read(hf, 'tie_word_embeddings', fam == 'gemma3')),
      biases=_biases(hf, fam, where), layer_windows=windows, layer_rope_bases=bases)
  if fam == 'gpt_neox':
    config.model.update(normalization='layer_norm', mlp='plain',
                        layer_norm_eps=float(_read(hf, 'layer_norm_eps', 1e-5)),
                        residual='parallel' if _read(hf, 'use_parallel_residual', True)
                        else 'sequential')
  else:
    config.model.update(normalization='rms_norm', mlp='gated',
                        layer_norm_eps=float(_read(hf, 'rms_norm_eps', 1e-6)))
  if fam in ('qwen3', 'gemma3'):  # q_norm and k_norm: RMSNorm over each head, the blocks' eps.
    config.model.attention.update(qk_norm=True, qk_norm_eps=config.model.layer_norm_eps)
  if fam == 'gemma3':
    config.model.update(norm='sandwich', embedding_multiplier=d ** 0.5)  # transformers' value.
  rope = config.model.position.rope
  config.model.position.kind = positions.ROPE
  rope.update(layout='half', fraction=rotary / head_dim)
  if settings['rope_theta'] is not None:
    rope.base = float(settings['rope_theta'])
  rope.scaling.update(scaling)
  config.data.seq_len = trained
  config.data.tokenizer = 'hf:' + os.path.abspath(directory)
  return config


def _refusal(config) -> str | None:
  """Why no transformers class computes the model `config` builds, or None."""
  m = config.model
  att, rope = m.attention, m.position.rope
  options = attention_options.enabled(att)
  checks = (
      (not model_types.of(m).decoder_only,
       f"it is a {m.type} model; transformers' causal-LM classes take decoder-only models. "
       'Fix: export a causal LM'),
      (config.train.float_positions > 0,
       'it trained on real-valued positions (train.float_positions) and is evaluated on their '
       'grid; transformers feeds integer positions. Fix: export a model trained on integer '
       'positions'),
      (not positions.is_plain_rope(m),
       f'position.kind={m.position.kind!r}' + (f' with layer_kinds {tuple(m.layer_kinds)}'
                                               if m.layer_kinds else '') +
       ': the Llama, Mistral, Qwen2, Qwen3, Gemma 3 and GPT-NeoX classes compute RoPE in '
       'every layer and nothing else'),
      (bool(m.layer_rope_bases) and m.norm != 'sandwich',
       "per-layer RoPE bases (layer_rope_bases) outside Gemma 3's block (norm='sandwich')"),
      (m.embedding_multiplier != 1 and m.norm != 'sandwich',
       f"an embedding multiplier ({m.embedding_multiplier:g}) outside Gemma 3's block "
       "(norm='sandwich')"),
      (rope.keep_fraction < 1, f'p-RoPE (rope.keep_fraction={rope.keep_fraction})'),
      (rope.rotate_values, 'rotated values (rope.rotate_values)'),
      (rope.remap.method != 'none', f'the distance remap {rope.remap.method!r}, an evaluation-'
                                    'time change to attention. Fix: export a model whose saved '
                                    'config has remap.method=none, and apply the remap with '
                                    'eval.py'),
      (rope.scaling.kind == 'yarn' and rope.scaling.ramp != 'index',
       "YaRN's 'ratio' ramp (transformers computes the 'index' ramp). Fix: train or continue "
       "with --config.model.position.rope.scaling.ramp=index: the ramps give other "
       'frequencies, so a model trained on one is not the other'),
      (not attention_options.KINDS[att.kind].in_transformers, f'attention.kind={att.kind!r}'),
      (any(not o.in_transformers for o in options),
       'an attention option (' + ', '.join(o.field for o in options if not o.in_transformers)
       + ')'),
      (m.norm == 'post', "norm='post'"),
      (m.type_vocab_size > 0, 'token-type embeddings'),
      ((m.normalization, m.mlp) not in (('rms_norm', 'gated'), ('layer_norm', 'plain')),
       f'the block {m.normalization} with a {m.mlp} MLP (Llama pairs rms_norm with a gated MLP, '
       'GPT-NeoX layer_norm with a plain one)'),
  )
  for failed, reason in checks:
    if failed:
      return reason
  if m.normalization == 'rms_norm':
    windows = {w for w in m.layer_windows if w}
    if m.residual == 'parallel':
      return "a parallel residual in a Llama-family block (GPT-NeoX's layout has LayerNorm)"
    if rope.fraction < 1:
      return f'partial rotary (rope.fraction={rope.fraction}) in a Llama-family block'
    # The options on go to the one class that computes them: Gemma 3's for a sandwich block,
    # else Qwen3's.
    family = 'gemma3' if m.norm == 'sandwich' else 'qwen3'
    missing = [o.field for o in options if family not in o.in_transformers]
    if missing:
      return (f"attention.{', attention.'.join(missing)} in a {MODEL_TYPES[family]} block, "
              'whose class does not compute it')
    for option in options:
      if option.transformers_refusal(m, att):
        return option.transformers_refusal(m, att)
    if m.norm == 'sandwich':
      return _gemma3_refusal_of(config)
    if options and m.biases not in ('none', 'attention'):
      return (f"{', '.join('attention.' + o.field for o in options)} with biases={m.biases!r} "
              '(Qwen3, the class with QK-norm, has biases on all four attention layers or none)')
    if len(windows) > 1:
      return f'sliding windows of several sizes {sorted(windows)}'
    if windows and m.biases not in ('none', 'qkv') and not options:  # Qwen3 takes 'attention'.
      return (f"sliding windows with biases={m.biases!r} (Mistral has none, Qwen2 q/k/v's, "
              "Qwen3 the four attention layers')")
    return None
  if m.biases != 'all':
    return f"biases={m.biases!r} in a GPT-NeoX block, which has biases on every layer"
  if options:
    return f"{', '.join('attention.' + o.field for o in options)} in a GPT-NeoX block"
  if m.norm == 'sandwich':
    return 'sandwich norms in a GPT-NeoX block'
  if m.head_dim and m.head_dim * m.num_heads != m.d_model:
    return (f'heads of width head_dim={m.head_dim} in a GPT-NeoX block, which splits d_model '
            f'{m.d_model} into its {m.num_heads} heads')
  if rope.fraction < 1 and rope.scaling.kind == 'yarn':
    return ("yarn with partial rotary (transformers' GPT-NeoX multiplies only the rotated "
            "dimensions by YaRN's attention factor, this project the whole logits)")
  if m.num_kv_heads not in (0, m.num_heads):
    return 'grouped-query attention in a GPT-NeoX block'
  if any(m.layer_windows):
    return 'sliding windows in a GPT-NeoX block'
  return None


def _per_layer(values, layers: int, empty) -> tuple:
  """A per-layer setting cycled over the layers (`empty` for each where none is given)."""
  values = tuple(values)
  return tuple(values[i % len(values)] if values else empty for i in range(layers))


def _gemma3_refusal_of(config) -> str | None:
  """Why Gemma3ForCausalLM does not compute a sandwich block, or None: it has QK-norm with the
  blocks' epsilon, the embeddings times sqrt(hidden_size), no biases or all four attention
  ones, no scaling, one window size, and one RoPE base for its windowed layers and one for its
  global ones."""
  m = config.model
  options = attention_options.enabled(m.attention)
  windows = _per_layer(m.layer_windows, m.num_layers, 0)
  bases = _per_layer(m.layer_rope_bases, m.num_layers, m.position.rope.base)
  by_kind = {bool(w): set() for w in windows}
  for w, b in zip(windows, bases):
    by_kind[bool(w)].add(b)
  multiplier = float(np.float32(m.embedding_multiplier))
  checks = (
      (not any('gemma3' in o.in_transformers for o in options),
       'a sandwich block without QK-norm (Gemma 3 has it)'),
      (multiplier != float(np.float32(m.d_model ** 0.5)),
       f'embedding_multiplier={m.embedding_multiplier:g} in a sandwich block: Gemma 3 '
       f'multiplies its embeddings by sqrt(d_model) = {m.d_model ** 0.5:g}'),
      (m.biases not in ('none', 'attention'),
       f"biases={m.biases!r} in a sandwich block (Gemma 3 has all four attention ones or none)"),
      (m.position.rope.scaling.kind != 'none',
       f'a RoPE scaling ({m.position.rope.scaling.kind!r}) in a sandwich block: transformers\' '
       'Gemma 3 scales its global layers only, this project every layer. Fix: export a model '
       'trained without a scaling, and apply one with eval.py'),
      (len({w for w in windows if w}) > 1, f'sliding windows of several sizes '
                                           f'{sorted({w for w in windows if w})}'),
      (any(len(b) > 1 for b in by_kind.values()),
       'RoPE bases that differ among the windowed layers or among the global ones (Gemma 3 '
       'has rope_local_base_freq and rope_theta)'),
  )
  for failed, reason in checks:
    if failed:
      return reason
  return None


def export_family(config) -> str:
  """The transformers family that computes `config`'s model, or ConfigError saying why none."""
  reason = _refusal(config)
  if reason:
    fix = '' if '. Fix: ' in reason else (
        '. Fix: export a model trained without it: the Llama, Mistral, Qwen2, Qwen3, Gemma 3 '
        'and GPT-NeoX classes compute RoPE in every layer, in their blocks, with no scaling or '
        "a linear, ntk (as rope_theta), dynamic, yarn ('index' ramp) or llama3 one "
        '(docs/hf_checkpoints.md)')
    raise errors.ConfigError(f'no transformers class computes this model: {reason}{fix}.')
  m = config.model
  if m.normalization == 'layer_norm':
    return 'gpt_neox'
  if m.norm == 'sandwich':
    return 'gemma3'
  if attention_options.enabled(m.attention):  # Options Qwen3 computes (_refusal checked).
    return 'qwen3'
  if any(m.layer_windows) and m.biases == 'none':
    return 'mistral' if all(m.layer_windows) and len(m.layer_windows) in (1, m.num_layers) else (
        'qwen2')
  return 'qwen2' if m.biases == 'qkv' else 'llama'


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
  if sc.kind == 'llama3':
    return {'rope_type': 'llama3', 'factor': sc.factor, 'low_freq_factor': sc.low_freq_factor,
            'high_freq_factor': sc.high_freq_factor,
            'original_max_position_embeddings': sc.original_length}, extended
  out = {'rope_type': 'yarn', 'factor': sc.factor, 'beta_fast': sc.beta, 'beta_slow': sc.alpha,
         'original_max_position_embeddings': sc.original_length}
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
  scaling, max_len = _rope_scaling(config)
  if source and 'max_position_embeddings' in source:
    max_len = int(source['max_position_embeddings'])
  head_dim = positions.head_dim(m)
  rotary = int(round(head_dim * rope.fraction))
  base = rope.base
  if rope.scaling.kind == 'ntk':
    base = base * rope.scaling.factor ** (rotary / (rotary - 2))
  out = {
      'architectures': [MODEL_TYPES[fam]], 'model_type': HF_MODEL_TYPES[fam],
      'vocab_size': m.vocab_size,
      'hidden_size': m.d_model, 'intermediate_size': m.d_ff, 'num_hidden_layers': m.num_layers,
      'num_attention_heads': m.num_heads, 'hidden_act': ACTIVATION_NAMES[m.activation],
      'max_position_embeddings': max_len, 'initializer_range': m.init_std,
      'tie_word_embeddings': bool(m.tie_embeddings and m.init == 'normal'),
      'bos_token_id': special_ids.get('bos'), 'eos_token_id': special_ids.get('eos'),
      'pad_token_id': special_ids.get('pad'), 'use_cache': True, 'torch_dtype': 'float32',
      'rope_scaling': scaling,
  }
  if fam == 'gpt_neox':
    out.update(layer_norm_eps=m.layer_norm_eps, rotary_pct=(rotary + 0.5) / head_dim,
               rotary_emb_base=base, use_parallel_residual=m.residual == 'parallel',
               attention_bias=True, hidden_dropout=0.0, attention_dropout=0.0)
    return out
  out.update(num_key_value_heads=m.num_kv_heads or m.num_heads, rms_norm_eps=m.layer_norm_eps,
             rope_theta=base, attention_dropout=0.0, head_dim=head_dim)
  windows = tuple(m.layer_windows[i % len(m.layer_windows)] if m.layer_windows else 0
                  for i in range(m.num_layers))
  if fam == 'gemma3':  # Local (windowed) and global layers, each kind with its RoPE base.
    bases = _per_layer(m.layer_rope_bases, m.num_layers, rope.base)
    base_of = lambda local: next((b for w, b in zip(windows, bases) if bool(w) == local),
                                 rope.base)
    out.pop('hidden_act')
    out.update(hidden_activation=ACTIVATION_NAMES[m.activation], rope_theta=base_of(False),
               rope_local_base_freq=base_of(True), attention_bias=m.biases == 'attention',
               query_pre_attn_scalar=head_dim,
               layer_types=['sliding_attention' if w else 'full_attention' for w in windows],
               final_logit_softcapping=None, attn_logit_softcapping=None)
    if any(windows):  # Without windowed layers, the class default (its mask is built anyway).
      out['sliding_window'] = max(windows)
    # transformers before 4.53 reads the layer kinds from this pattern alone (every p-th layer
    # global; 1: all global), which some layouts have.
    pattern = next((p for p in range(1, m.num_layers + 2)
                    if all(bool(w) == bool((i + 1) % p) for i, w in enumerate(windows))), None)
    if pattern:
      out['sliding_window_pattern'] = pattern
  elif fam == 'llama':
    out.update(attention_bias=m.biases in ('attention', 'all'), mlp_bias=m.biases == 'all')
  elif fam == 'mistral':
    out.update(sliding_window=windows[0])
  else:  # qwen2, qwen3
    if fam == 'qwen3':
      out.update(attention_bias=m.biases == 'attention')
    window = max(windows)
    # transformers 5 reads layer_types; transformers 4 slides the layers from max_window_layers
    # on, which says the same where the global layers come first (other layouts: 5 only).
    first = next((i for i, w in enumerate(windows) if w), m.num_layers)
    out.update(use_sliding_window=bool(window), sliding_window=window or None,
               max_window_layers=first,
               layer_types=['sliding_attention' if w else 'full_attention' for w in windows])
  return out
