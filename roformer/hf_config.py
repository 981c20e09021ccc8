"""A Hugging Face `config.json` as this project's config (roformer/hf_export_config.py writes
one back).

Forty-one architectures (`ARCHITECTURES`, and a multimodal one's language model) are read,
each as the block components and position settings that compute what its transformers class
computes: the Llama family's classes (Llama, Mistral, Ministral, Phi-3, Qwen2 and 3, Gemma 2 and
3, OLMo 1, 2 and 3, SmolLM3, Granite, GLM and GLM-4, EXAONE 4, Arcee, Seed-OSS, ERNIE 4.5), the
LayerNorm blocks' (GPT-NeoX, Phi, Cohere and Cohere 2, StableLM, StarCoder 2, Nemotron; GPT-2,
GPT-J, BLOOM and MPT in roformer/hf_classic.py, Falcon in roformer/hf_falcon.py) and the
mixtures of experts (roformer/hf_moe.py; DeepSeek-V2's and V3's latent attention in
roformer/hf_deepseek.py). docs/hf_checkpoints.md says, family by family, which field of the file
becomes which field here and what is refused. A `head_dim` other than hidden_size /
num_attention_heads is `model.head_dim` where the class reads it. Both forms of the rotary
settings that the Hub holds are read: transformers 4's `rope_theta` beside `rope_scaling` (keyed
by `type` or `rope_type`), and transformers 5's `rope_parameters` (with `rope_theta` inside).

The scalings map onto roformer/positions/scaling.py with transformers' semantics
(modeling_rope_utils): `linear` divides the frequencies; `dynamic` is NTK with the base grown
from `max_position_embeddings` at the input's length; `yarn` uses the ramp between the pair
indices of beta_fast and beta_slow rotations (`ramp='index'`, or `'index_unrounded'` for
`truncate: false`) and multiplies q and k by its
attention factor (given, from mscale and mscale_all_dim, or 0.1 ln(factor) + 1); `llama3` is
Llama 3.1's smooth band; `longrope` (Phi-3's; its older names `su` and `yarn` in a Phi-3
config) divides each pair by its short or long factor, the long ones for an input past
`original_max_position_embeddings`, and multiplies q and k by its attention factor (given, or
from factor = max_position_embeddings / original). With partial rotary, transformers multiplies
the rotated dimensions alone by an attention factor (`attention_factor_dims='rotated'`). Any
other scaling, and any setting this project does not compute, is refused in one line that
names it.
"""

import os

import ml_collections

from roformer import attention_options
from roformer import errors
from roformer import files
from roformer import hf_classic
from roformer import hf_deepseek
from roformer import hf_falcon
from roformer import hf_fields
from roformer import hf_layers
from roformer import hf_gpt_oss
from roformer import hf_llama4
from roformer import hf_moe
from roformer import positions

# The readers of a field, shared with roformer/hf_classic.py.
_read, _field, _positive = hf_fields.read, hf_fields.field, hf_fields.positive

ARCHITECTURES = {'LlamaForCausalLM': 'llama', 'MistralForCausalLM': 'mistral',
                 'Phi3ForCausalLM': 'phi3', 'Qwen2ForCausalLM': 'qwen2',
                 'Qwen3ForCausalLM': 'qwen3', 'Gemma2ForCausalLM': 'gemma2',
                 'Gemma3ForCausalLM': 'gemma3',
                 'OlmoForCausalLM': 'olmo', 'Olmo2ForCausalLM': 'olmo2',
                 'Olmo3ForCausalLM': 'olmo3',
                 'SmolLM3ForCausalLM': 'smollm3',
                 'GPTNeoXForCausalLM': 'gpt_neox', 'PhiForCausalLM': 'phi',
                 'CohereForCausalLM': 'cohere', 'Cohere2ForCausalLM': 'cohere2',
                 'GraniteForCausalLM': 'granite', 'StableLmForCausalLM': 'stablelm',
                 'GlmForCausalLM': 'glm', 'Glm4ForCausalLM': 'glm4',
                 'Starcoder2ForCausalLM': 'starcoder2', 'FalconForCausalLM': 'falcon',
                 'Exaone4ForCausalLM': 'exaone4', 'MinistralForCausalLM': 'ministral',
                 'NemotronForCausalLM': 'nemotron', 'ArceeForCausalLM': 'arcee',
                 'SeedOssForCausalLM': 'seed_oss', 'Ernie4_5ForCausalLM': 'ernie4_5',
                 'GPT2LMHeadModel': 'gpt2', 'GPTJForCausalLM': 'gptj',
                 'BloomForCausalLM': 'bloom', 'MptForCausalLM': 'mpt',
                 **{arch: fam for fam, arch in hf_moe.FAMILIES.items()}}
MODEL_TYPES = {family: arch for arch, family in ARCHITECTURES.items()}
# config.json's model_type of each family (its own name but Gemma 3's text model's).
HF_MODEL_TYPES = {family: {'gemma3': 'gemma3_text', 'llama4': 'llama4_text'}.get(family, family)
                  for family in MODEL_TYPES}
LLAMA_FAMILY = ('llama', 'mistral', 'phi3', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'smollm3',
                'olmo', 'olmo2', 'olmo3', 'granite', 'glm', 'glm4', 'exaone4', 'ministral',
                'nemotron', 'arcee', 'seed_oss', 'ernie4_5', *hf_moe.FAMILIES)
# Gemma 2 and 3: sandwich norms, the embeddings times sqrt(hidden_size), query_pre_attn_scalar and
# logit soft-capping.
GEMMA = ('gemma2', 'gemma3')
# OLMo 2 and 3: norms on the branches' outputs alone, QK-norm over all heads.
OLMO = ('olmo2', 'olmo3')
# GLM and GLM-4: RoPE on the interleaved pairs of half of each head by default, q, k and v biases
# by default, the MLP's gate and up in one weight; GLM-4's norms are sandwich norms.
GLM = ('glm', 'glm4')
# The families whose classes rotate partial_rotary_factor of each head (the others all of it).
PARTIAL_ROTARY = ('gpt_neox', 'phi3', 'phi', 'stablelm', 'nemotron', 'glm4_moe',
                  'minimax_m2') + GLM
# The families whose classes read head_dim (the others split hidden_size into the heads).
READS_HEAD_DIM = LLAMA_FAMILY + ('phi', 'cohere', 'starcoder2')
# Cohere's: one LayerNorm without a bias before parallel branches, RoPE on interleaved pairs.
COHERE = ('cohere', 'cohere2')
# transformers' hidden_act -> model.activation, and back.
ACTIVATIONS = hf_fields.ACTIVATIONS
ACTIVATION_NAMES = {'silu': 'silu', 'gelu': 'gelu', 'gelu_tanh': 'gelu_pytorch_tanh',
                    'relu': 'relu', 'relu_squared': 'relu2'}
SCALINGS = ('default', 'linear', 'dynamic', 'yarn', 'llama3', 'longrope')


# Multimodal classes whose language model is read: {class: its language model's class}. The
# import reads its text_config and its language model's weights, and leaves the vision tower out.
MULTIMODAL = {'Gemma3ForConditionalGeneration': 'Gemma3ForCausalLM',
              'Llama4ForConditionalGeneration': 'Llama4ForCausalLM'}
# The key of a text view (`read`) that names the multimodal class it came from.
TEXT_OF = 'text_of'
# Gemma3TextConfig's defaults, which the Hub's Gemma 3 4B-27B configs leave out of text_config.
GEMMA3_TEXT_DEFAULTS = {
    'vocab_size': 262_208, 'hidden_size': 2304, 'intermediate_size': 9216,
    'num_hidden_layers': 26, 'num_attention_heads': 8, 'num_key_value_heads': 4, 'head_dim': 256,
    'hidden_activation': 'gelu_pytorch_tanh', 'max_position_embeddings': 131_072,
    'rms_norm_eps': 1e-6, 'query_pre_attn_scalar': 256, 'sliding_window': 4096}


def read(directory: str) -> dict:
  """The parsed config.json of a Hugging Face model directory; for a multimodal class
  (`MULTIMODAL`), the view of its language model (`text_view`)."""
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
  archs = hf.get('architectures')
  if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in MULTIMODAL:
    return text_view(hf, path)
  return hf


def text_view(hf: dict, where: str) -> dict:
  """A multimodal config as its language model's: text_config (over Gemma3TextConfig's
  defaults, where the Hub's Gemma 3 files give few fields), the tie of the embeddings where
  text_config does not say it (the multimodal class's own default: Gemma 3 ties, Llama 4 does
  not), and the language model's class; `TEXT_OF` names the class it came from."""
  arch = hf['architectures'][0]
  text = hf.get('text_config')
  if not isinstance(text, dict):
    raise errors.DamagedFileError(f'{where} names {arch} but has no text_config. Fix: use the '
                                  'config.json that came with the weights.')
  fam = ARCHITECTURES[MULTIMODAL[arch]]
  view = {**(GEMMA3_TEXT_DEFAULTS if fam == 'gemma3' else {}), **text}
  view.setdefault('tie_word_embeddings', _read(hf, 'tie_word_embeddings', fam == 'gemma3'))
  view.update(architectures=[MULTIMODAL[arch]], model_type=HF_MODEL_TYPES[fam],
              **{TEXT_OF: arch})
  return view


def family(hf: dict, where: str) -> str:
  """The family ('llama', 'phi3', 'gemma3', 'gpt_neox', ...: `ARCHITECTURES`) of the config's
  architecture (or, where it names none, its model_type)."""
  by_type = {t: MODEL_TYPES[f] for f, t in HF_MODEL_TYPES.items()}
  archs = hf.get('architectures') or [by_type.get(hf.get('model_type'), '')]
  arch = archs[0] if archs else ''
  if arch not in ARCHITECTURES:
    raise errors.ConfigError(
        f'{where}: architecture {arch or hf.get("model_type")!r} is not one this project reads. '
        f'Fix: a checkpoint of {", ".join(ARCHITECTURES)}.')
  return ARCHITECTURES[arch]


def rope_settings(hf: dict, fam: str, where: str) -> dict:
  """The rotary settings of either form as one dict: rope_type, rope_theta,
  partial_rotary_factor and the scaling's own keys."""
  params = hf.get('rope_parameters')
  if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
    raise errors.ConfigError(f'{where}: rope_parameters differ per layer type '
                             f'({sorted(params)}), which this project does not read. Fix: a '
                             'checkpoint with one set of rotary settings.')
  # transformers takes rope_scaling over rope_parameters when a file has both.
  settings = dict(hf.get('rope_scaling') or params or (
      hf_gpt_oss.DEFAULT_SCALING if fam == hf_gpt_oss.FAMILY else {}))
  settings['rope_type'] = _read(settings, 'rope_type', _read(settings, 'type', 'default'))
  if fam == 'phi3' and settings['rope_type'] in ('su', 'yarn'):  # Phi3Config's older names.
    settings['rope_type'] = 'longrope'
  default = {'smollm3': 2_000_000.0, 'cohere': 500_000.0, 'mixtral': 1_000_000.0,
             'gpt_oss': hf_gpt_oss.DEFAULT_THETA, 'llama4': hf_llama4.DEFAULT_THETA,
             'minimax_m2': 5_000_000.0, 'ernie4_5': 500_000.0}.get(
      fam, 10000.0)  # The classes' default_theta.
  neox = fam == 'gpt_neox'  # GPTNeoXConfig's own names, which the other classes ignore.
  settings.setdefault('rope_theta', _read(hf, 'rope_theta', _read(hf, 'rotary_emb_base', default)
                                          if neox else default))
  default_partial = {'gpt_neox': 0.25, 'phi': 0.5, 'stablelm': 0.25, 'glm': 0.5,
                     'glm4': 0.5, 'nemotron': 0.5, 'glm4_moe': 0.5}.get(fam, 1.0)  # The classes'.
  if fam == 'minimax_m2' and _read(hf, 'rotary_dim', None):  # The Hub's files give rotary_dim.
    default_partial = hf_fields.positive(hf['rotary_dim'], 'rotary_dim', where) / (
        hf_fields.integer(hf, 'head_dim', 128, where))  # The class's default head_dim.
  settings.setdefault('partial_rotary_factor',
                      _read(hf, 'partial_rotary_factor', _read(hf, 'rotary_pct', default_partial)
                            if neox else default_partial))
  return settings


def _scaling(settings: dict, hf: dict, fam: str, where: str) -> tuple[dict, int]:
  """(config.model.position.rope.scaling fields, the length the model was trained at)."""
  kind = settings['rope_type']
  max_len = int(_field(hf, 'max_position_embeddings', where))
  if kind not in SCALINGS:
    raise errors.ConfigError(f'{where}: rope scaling {kind!r} is not one this project computes. '
                             f'Fix: a checkpoint with one of {SCALINGS}.')
  if kind == 'default':
    return {'kind': 'none'}, max_len
  # A top-level original_max_position_embeddings (Phi-3's) wins over the scaling's own; Phi3Config
  # has one (4096) where the file does not.
  original = int(hf.get('original_max_position_embeddings')
                 or (4096 if fam == 'phi3' else None)
                 or settings.get('original_max_position_embeddings') or max_len)
  factor = settings.get('factor')
  if factor is None and kind in ('yarn', 'longrope'):
    factor = max_len / original
  if kind == 'longrope' and factor is not None and float(factor) < 1:
    factor = 1.0  # Its attention factor is 1 at any factor up to 1, and nothing else reads it.
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
  if kind == 'longrope':
    pairs = {n: settings.get(n) for n in ('short_factor', 'long_factor')}
    for name, value in pairs.items():
      if not (isinstance(value, list) and value and all(
          isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in value)):
        raise errors.DamagedFileError(
            f"{where}: longrope's {name} is {value!r}, where transformers reads a list of "
            'positive numbers, one per rotated pair. Fix: use the config.json that came with '
            'the weights.')
    return {'kind': 'longrope', 'factor': factor, 'original_length': original,
            'short_factor': tuple(float(x) for x in pairs['short_factor']),
            'long_factor': tuple(float(x) for x in pairs['long_factor']),
            'attention_factor': float(settings.get('attention_factor') or 0.0)}, original
  ramp = 'index' if _read(settings, 'truncate', True) else 'index_unrounded'
  attention = settings.get('attention_factor')
  mscale, mscale_all = settings.get('mscale'), settings.get('mscale_all_dim')
  if attention is None and mscale and mscale_all:
    grow = positions.scaling.yarn_mscale
    attention = grow(factor, mscale) / grow(factor, mscale_all)
  return {'kind': 'yarn', 'factor': factor, 'original_length': original, 'ramp': ramp,
          'alpha': float(settings.get('beta_slow') or 1.0),
          'beta': float(settings.get('beta_fast') or 32.0),
          'attention_factor': float(attention or 0.0)}, original


def _refuse_scaled_part(settings: dict, scaling: dict, fam: str, where: str) -> None:
  """A class that rotates whole heads ignores partial_rotary_factor with the default rotary
  frequencies, but its scalings' frequencies (transformers' rope functions) cover that part of
  each head alone, which it then applies to all of it and fails: no model to read."""
  stated = settings.get('partial_rotary_factor')
  if (fam not in PARTIAL_ROTARY and scaling['kind'] != 'none' and stated is not None
      and float(stated) != 1.0):
    raise errors.ConfigError(
        f"{where}: partial_rotary_factor {stated} with rope_type {settings['rope_type']!r}: "
        f'{MODEL_TYPES[fam]} rotates whole heads, so transformers computes that scaling for '
        'part of each head and fails on it. Fix: a checkpoint without partial_rotary_factor '
        '(or 1.0).')


# The families whose configs hold rotary settings per layer type (sliding and full attention).
TYPED_LAYERS = {'gemma3': 'Gemma 3', 'olmo3': 'OLMo 3'}


def _typed_layers(hf: dict, fam: str, layers: int, where: str) -> tuple:
  """(layer_windows, layer_rope_bases, rope.base, rope.scaling fields, the trained length) of a
  Gemma 3 or OLMo 3 config: its sliding layers (`layer_types`, else Gemma 3's every
  `sliding_window_pattern`-th layer global, OLMo 3's every fourth) with their window and base
  (Gemma 3's `rope_local_base_freq`, OLMo 3's `rope_theta`), its global ones with `rope_theta`
  and the scaling (Gemma 3 4B-27B: linear, factor 8; OLMo 3: YaRN), which transformers applies
  to them alone (`rope.scaling.layers='global'`), in either form of the rotary settings. A
  scaling of the sliding layers is refused."""
  params = hf.get('rope_parameters')
  if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):
    full = dict(params.get('full_attention') or {})
    sliding = dict(params.get('sliding_attention') or {})
  else:  # transformers 4: rope_theta and rope_scaling (the global layers'), Gemma 3's
    # rope_local_base_freq; a flat rope_parameters is ignored, as transformers ignores it.
    full, sliding = {}, {}
  full.update(hf.get('rope_scaling') or {})  # transformers merges it into the global layers'.
  theta = _read(hf, 'rope_theta', 1_000_000.0 if fam == 'gemma3' else 500_000.0)
  full.setdefault('rope_theta', theta)
  sliding.setdefault('rope_theta', _read(hf, 'rope_local_base_freq', 10_000.0)
                     if fam == 'gemma3' else theta)
  kind = _read(sliding, 'rope_type', _read(sliding, 'type', 'default'))
  if kind != 'default':
    raise errors.ConfigError(
        f"{where}: rope scaling {kind!r} on {TYPED_LAYERS[fam]}'s sliding_attention layers; this "
        'project scales every layer or the global ones (full_attention). Fix: a checkpoint '
        f'that scales its global layers alone, as {TYPED_LAYERS[fam]} does.')
  full['rope_type'] = _read(full, 'rope_type', _read(full, 'type', 'default'))
  scaling, trained = _scaling(full, hf, fam, where)
  _refuse_scaled_part(full, scaling, fam, where)  # Its global layers' settings.
  pattern = hf_layers.interval(hf, 'sliding_window_pattern', 6, where) if fam == 'gemma3' else 4
  kinds = hf_layers.layer_types(hf, layers, where, [
      'sliding_attention' if (i + 1) % pattern else 'full_attention' for i in range(layers)])
  windows = hf_layers.windows_of(kinds, hf_layers.sliding_window(hf, kinds, where))
  # By layer type: a sliding layer keeps its local base where the file gives it no window.
  bases = tuple(float((sliding if k == 'sliding_attention' else full)['rope_theta'])
                for k in kinds)
  if scaling['kind'] != 'none' and windows and all(windows):  # No global layer to scale.
    scaling, trained = {'kind': 'none'}, int(_field(hf, 'max_position_embeddings', where))
  elif scaling['kind'] != 'none' and windows:
    scaling['layers'] = 'global'
  if len(set(bases)) == 1:
    return windows, (), bases[0], scaling, trained
  return windows, bases, None, scaling, trained


def _gemma_attention(hf: dict, fam: str, head_dim: int, where: str) -> dict:
  """config.model.attention's fields for what a Gemma 2 or 3 config says of its attention:
  `query_pre_attn_scalar` other than head_dim (Gemma 2 27B, Gemma 3 27B) as
  `attention.logit_scale`, Gemma 2's `attn_logit_softcapping` as `attention.softcap`
  (Gemma2Config's defaults 256 and 50, Gemma3TextConfig's 256 and none); bidirectional
  attention, and a Gemma 3 attention soft-cap (which transformers' class does not apply), are
  refused."""
  if _read(hf, 'use_bidirectional_attention', None):
    raise errors.ConfigError(f'{where}: use_bidirectional_attention: this project reads causal '
                             'LMs. Fix: a causal checkpoint (use_bidirectional_attention false).')
  scalar = _read(hf, 'query_pre_attn_scalar', 256)
  if (isinstance(scalar, bool) or not isinstance(scalar, (int, float))
      or not 1 <= scalar <= 2**20 or scalar != int(scalar)):
    raise errors.DamagedFileError(f'{where}: query_pre_attn_scalar is {scalar!r}, where '
                                  'transformers reads a positive integer (this project: up to '
                                  '2**20). Fix: use the config.json that came with the weights.')
  att = {}
  if int(scalar) != head_dim:
    att.update(logit_scale=True, logit_scale_dim=int(scalar))
  cap = _read(hf, 'attn_logit_softcapping', 50.0 if fam == 'gemma2' else None)
  if cap is not None and fam == 'gemma3':
    raise errors.ConfigError(f"{where}: attn_logit_softcapping {cap!r}, which transformers' "
                             'Gemma 3 class reads and its attention does not apply. Fix: a '
                             'Gemma 3 checkpoint without it (null, as those on the Hub).')
  if cap is not None:
    att.update(softcap=True, softcap_value=_positive(cap, 'attn_logit_softcapping', where))
  return att


def _granite_multipliers(config, hf: dict, where: str) -> None:
  """Granite's four constants (its muP parametrization; GraniteConfig's 1 where absent): the
  embeddings times embedding_multiplier, each branch's output times residual_multiplier, q.k
  times attention_multiplier (in place of 1/sqrt(head_dim)), the logits divided by
  logits_scaling."""
  value = lambda name: _positive(_read(hf, name, 1.0), name, where)
  config.model.update(embedding_multiplier=value('embedding_multiplier'),
                      residual_multiplier=value('residual_multiplier'),
                      logits_multiplier=1.0 / value('logits_scaling'))
  config.model.attention.update(softmax_scale=True,
                                softmax_scale_value=value('attention_multiplier'))


def _biases(hf: dict, fam: str, where: str) -> str:
  if fam == 'qwen2':
    return 'qkv'
  if fam == 'qwen2_moe':  # qkv_bias: q, k and v, or none.
    return 'qkv' if _read(hf, 'qkv_bias', True) else 'none'
  if fam == 'stablelm':  # q, k and v, or none.
    return 'qkv' if _read(hf, 'use_qkv_bias', False) else 'none'
  if fam in GLM + ('glm4_moe',):  # attention_bias: q, k and v (o_proj has none).
    return 'qkv' if _read(hf, 'attention_bias', fam != 'glm4_moe') else 'none'
  if fam == 'ernie4_5':  # use_bias: every dense layer but lm_head, or none.
    return 'all' if _read(hf, 'use_bias', False) else 'none'
  if fam == 'seed_oss':  # q, k and v (attention_bias), o_proj and the MLP each apart.
    return hf_fields.seed_oss_biases(hf, where)
  if fam == 'phi':  # Every dense layer, whatever the file says.
    return 'all'
  if fam in ('mistral', 'ministral', 'phi3', 'mixtral'):
    return 'none'
  if fam == 'starcoder2':  # use_bias: every dense layer but lm_head, or none.
    return 'all' if _read(hf, 'use_bias', True) else 'none'
  attention, mlp = bool(_read(hf, 'attention_bias', fam in ('gpt_neox', 'gpt_oss'))), bool(
      _read(hf, 'mlp_bias', fam == 'gpt_neox'))
  return {(True, True): 'all', (True, False): 'attention', (False, True): 'mlp',
          (False, False): 'none'}[(attention, mlp)]


def _falcon_config(hf: dict, directory: str, where: str) -> ml_collections.ConfigDict:
  """A Falcon config (roformer/hf_falcon.py reads its block) with RoPE on the halves of whole
  heads, its settings and scaling read as the other families'."""
  settings = rope_settings(hf, 'falcon', where)
  scaling, trained = _scaling(settings, hf, 'falcon', where)
  _refuse_scaled_part(settings, scaling, 'falcon', where)
  config = hf_fields.decoder(hf, directory, where, trained, **hf_falcon.model_fields(hf, where))
  config.model.position.kind = positions.ROPE
  config.model.position.rope.update(layout='half', fraction=1.0,
                                    base=float(settings['rope_theta']))
  config.model.position.rope.scaling.update(scaling)
  return config


def to_config(hf: dict, directory: str) -> ml_collections.ConfigDict:
  """This project's config of a causal LM that computes what the checkpoint computes; the
  tokenizer is the directory's own (`data.tokenizer='hf:DIR'`), data.seq_len the length the
  model was pretrained at (before any context extension)."""
  where = os.path.join(directory, 'config.json')
  fam = family(hf, where)
  hf_gpt_oss.check_quantization(hf, fam, where)
  if fam == 'gpt2':
    return hf_classic.gpt2_config(hf, directory, where)
  if fam == 'bloom':
    return hf_classic.bloom_config(hf, directory, where)
  if fam == 'mpt':
    return hf_classic.mpt_config(hf, directory, where)
  if fam == 'gptj':
    return hf_classic.gptj_config(hf, directory, where)
  if fam == 'falcon':
    return _falcon_config(hf, directory, where)
  d, heads = int(_field(hf, 'hidden_size', where)), int(_field(hf, 'num_attention_heads', where))
  # The Llama family's classes read head_dim (hidden_size / heads where it is absent or null;
  # Qwen3Config's, Gemma2Config's, Gemma3TextConfig's and GLM's default, where absent, is 128,
  # 256, 256 and 128; Seed-OSS's, ERNIE 4.5's and MiniMax-M2's 128), as Phi's does; GPT-NeoX's
  # always splits hidden_size.
  default_width = {'qwen3': 128, 'gemma2': 256, 'gemma3': 256, 'glm': 128, 'glm4': 128,
                   'seed_oss': 128, 'ernie4_5': 128, 'minimax_m2': 128,
                   'gpt_oss': hf_gpt_oss.DEFAULT_HEAD_DIM,
                   'llama4': hf_llama4.DEFAULT_HEAD_DIM}.get(fam)
  given = _read(hf, 'head_dim', default_width) if fam in READS_HEAD_DIM else None
  if fam in hf_deepseek.LATENT:  # Its head_dim is the rotary part alone.
    given = hf_deepseek.head_dims(hf, where)[0]
  head_dim = int(given) if given else (d // heads if d % heads == 0 else None)
  if head_dim is None or (fam not in READS_HEAD_DIM and hf.get('head_dim') not in (None,
                                                                                   head_dim)):
    raise errors.ConfigError(
        f'{where}: head_dim {hf.get("head_dim")} with hidden_size {d} and {heads} heads; '
        f'{MODEL_TYPES[fam]} splits hidden_size into the heads. Fix: a checkpoint whose heads '
        'are so.')
  act_field = 'hidden_activation' if fam in GEMMA else 'hidden_act'
  act = _read(hf, act_field, {'gpt_neox': 'gelu', 'gemma2': 'gelu_pytorch_tanh',
                              'starcoder2': 'gelu_pytorch_tanh',
                              'gemma3': 'gelu_pytorch_tanh', 'phi': 'gelu_new',
                              'nemotron': 'relu2', 'arcee': 'relu2'}.get(fam, 'silu'))
  if act not in ACTIVATIONS:
    raise errors.ConfigError(f'{where}: {act_field} {act!r} is not one this project computes. Fix: '
                             f'a checkpoint with one of {sorted(ACTIVATIONS)}.')
  layers = int(_field(hf, 'num_hidden_layers', where))
  # Starcoder2Config's, GlmConfig's and Ernie4_5Config's default is 2 key/value heads,
  # MinistralConfig's and SeedOssConfig's 8, Exaone4Config's 32; the others' all of them.
  kv = int(_read(hf, 'num_key_value_heads', {'starcoder2': 2, 'glm': 2, 'glm4': 2,
                                             'ministral': 8, 'exaone4': 32, 'mixtral': 8,
                                             'qwen2_moe': 16, 'qwen3_moe': 4,
                                             'gpt_oss': 8, 'llama4': 8,
                                             'glm4_moe': 8, 'seed_oss': 8, 'ernie4_5': 2,
                                             'minimax_m2': 8}.get(fam)) or heads)
  gemma_attention = _gemma_attention(hf, fam, head_dim, where) if fam in GEMMA else {}
  if fam in TYPED_LAYERS:
    windows, bases, base, scaling, trained = _typed_layers(hf, fam, layers, where)
    settings = {'rope_theta': base}  # None: each layer's base is in layer_rope_bases.
  else:
    windows, bases = hf_layers.windows(hf, fam, layers, where), ()
    settings = rope_settings(hf, fam, where)
    scaling, trained = _scaling(settings, hf, fam, where)
  # transformers' rounding; the other Llama-family classes rotate whole heads whatever the
  # file says.
  partial = float(settings['partial_rotary_factor']) if fam in PARTIAL_ROTARY else 1.0
  _refuse_scaled_part(settings, scaling, fam, where)
  rotary = (hf_deepseek.head_dims(hf, where)[1] if fam in hf_deepseek.LATENT
            else int(head_dim * partial))
  if rotary < head_dim and scaling['kind'] in positions.scaling.TEMPERED:
    scaling['attention_factor_dims'] = 'rotated'  # transformers multiplies cos and sin.
  if scaling['kind'] == 'longrope':
    lengths = {n: len(scaling[n]) for n in ('short_factor', 'long_factor')}
    if set(lengths.values()) != {rotary // 2}:
      raise errors.DamagedFileError(
          f"{where}: longrope's short_factor and long_factor have {lengths['short_factor']} and "
          f"{lengths['long_factor']} numbers, where the {rotary} rotated dimensions make "
          f'{rotary // 2} pairs. Fix: use the config.json that came with the weights.')
  if rotary % 2 and rotary > 2:
    raise errors.ConfigError(
        f'{where}: partial_rotary_factor {partial} rotates {rotary} of {head_dim} dimensions, an '
        'odd number, which this project does not compute (RoPE here rotates pairs). Fix: a '
        "checkpoint that rotates an even number of each head's dimensions.")
  if rotary < 2:
    raise errors.ConfigError(f'{where}: partial_rotary_factor {partial} rotates {rotary} of '
                             f'{head_dim} dimensions. Fix: a checkpoint that rotates at least one '
                             'pair.')
  config = hf_fields.decoder(
      hf, directory, where, trained, num_layers=layers, d_model=d, num_heads=heads,
      num_kv_heads=0 if kv == heads else kv, head_dim=0 if head_dim * heads == d else head_dim,
      d_ff=int(_field(hf, 'intermediate_size', where)), activation=ACTIVATIONS[act],
      # Tied where the file does not say, as the Gemma, SmolLM3 and Cohere classes default (the
      # Hub's Command R configs leave it out and store no lm_head).
      tie_embeddings=bool(_read(hf, 'tie_word_embeddings',
                                fam in GEMMA + ('smollm3', 'starcoder2', 'ernie4_5') + COHERE)),
      biases=_biases(hf, fam, where), layer_windows=windows, layer_rope_bases=bases)
  if fam == 'gpt_neox':
    config.model.update(normalization='layer_norm', mlp='plain',
                        layer_norm_eps=float(_read(hf, 'layer_norm_eps', 1e-5)),
                        residual='parallel' if _read(hf, 'use_parallel_residual', True)
                        else 'sequential')
  elif fam == 'starcoder2':  # The classic block with RoPE, GQA and windows.
    config.model.update(normalization='layer_norm', mlp='plain', residual='sequential',
                        layer_norm_eps=float(_read(hf, 'norm_epsilon', 1e-5)))
  elif fam == 'phi':  # One LayerNorm before both branches; fc1, fc2 and lm_head have biases.
    config.model.update(normalization='layer_norm', mlp='plain', residual='parallel_shared',
                        output_bias=True, layer_norm_eps=float(_read(hf, 'layer_norm_eps', 1e-5)))
  elif fam in COHERE:  # One LayerNorm without a bias before both branches; logits scaled.
    if fam == 'cohere2' and _read(hf, 'use_qk_norm', False):
      raise errors.ConfigError(f"{where}: use_qk_norm, which transformers' Cohere 2 class does "
                               'not apply. Fix: a Cohere 2 checkpoint without it (as Command R7B).')
    config.model.update(normalization='layer_norm_unbiased', mlp='gated',
                        residual='parallel_shared',
                        layer_norm_eps=float(_read(hf, 'layer_norm_eps', 1e-5)),
                        logits_multiplier=_positive(_read(hf, 'logit_scale', 0.0625),
                                                    'logit_scale', where))
  elif fam == 'stablelm':  # LayerNorms with a gated MLP; one norm for parallel branches.
    config.model.update(normalization='layer_norm', mlp='gated',
                        residual='parallel_shared' if _read(hf, 'use_parallel_residual', False)
                        else 'sequential',
                        layer_norm_eps=float(_read(hf, 'layer_norm_eps', 1e-5)))
  elif fam == 'nemotron':  # LayerNorm1P (the stored scale less 1) before a plain MLP.
    config.model.update(normalization='layer_norm', mlp='plain', residual='sequential',
                        layer_norm_eps=float(_read(hf, 'norm_eps', 1e-5)))
  elif fam == 'olmo':  # OlmoLayerNorm: no scale, no bias, and eps 1e-5 whatever the file says.
    config.model.update(normalization='layer_norm_nonparametric', mlp='gated', layer_norm_eps=1e-5)
  else:  # The classes' default epsilons.
    eps = {'phi3': 1e-5, 'olmo2': 1e-5, 'olmo3': 1e-5, 'exaone4': 1e-5, 'glm': 1.5625e-7,
           'glm4': 1.5625e-7, 'mixtral': 1e-5, 'olmoe': 1e-5, 'arcee': 1e-5, 'gpt_oss': 1e-5,
           'llama4': 1e-5, 'glm4_moe': 1e-5, 'ernie4_5': 1e-5}
    # Arcee's MLP is plain (up, squared ReLU, down); the others' gated.
    config.model.update(normalization='rms_norm', mlp='plain' if fam == 'arcee' else 'gated',
                        layer_norm_eps=float(_read(hf, 'rms_norm_eps', eps.get(fam, 1e-6))))
  if fam == 'olmo' and hf.get('clip_qkv') is not None:  # q, k and v clamped (OLMo 1.7, 0724).
    config.model.attention.update(qkv_clip=True,
                                  qkv_clip_value=_positive(hf['clip_qkv'], 'clip_qkv', where))
  if fam == 'granite':
    _granite_multipliers(config, hf, where)
  if fam in OLMO + ('exaone4',):  # Norms on the branches' outputs alone.
    config.model.update(norm='output')
  if fam in hf_moe.FAMILIES:  # The experts, and dense layers between them (or in every layer).
    config.model.update(hf_moe.model_fields(hf, fam, head_dim, layers, where))
  if fam in hf_deepseek.LATENT:  # Latent attention, and mscale_all_dim's softmax scale.
    config.model.update(hf_deepseek.model_fields(hf, heads, where))
    config.model.attention.update(hf_deepseek.softmax_fields(settings, head_dim))
  if fam == hf_llama4.FAMILY:  # Its layout: RoPE in chunks, and NoPE layers with a temperature.
    llama4 = hf_llama4.model_fields(hf, layers, where)
    config.model.attention.update(llama4.pop('attention', {}))
    config.model.update(llama4)
  for option in attention_options.OPTIONS.values():  # QK-norm as the class computes it.
    config.model.attention.update(option.from_transformers(fam, hf, config.model.layer_norm_eps))
  if fam == 'glm4':  # Sandwich norms with RMSNorm's own scales (not Gemma's 1 + weight).
    config.model.update(norm='sandwich')
  if fam in GEMMA:
    config.model.update(norm='sandwich', embedding_multiplier=d ** 0.5)  # transformers' value.
    config.model.attention.update(gemma_attention)
    final_cap = _read(hf, 'final_logit_softcapping', 30.0 if fam == 'gemma2' else None)
    if final_cap is not None and hf.get(TEXT_OF):
      raise errors.ConfigError(
          f"{where}: text_config's final_logit_softcapping {final_cap!r}, which "
          f'{hf[TEXT_OF]} does not apply (its language model class alone does). Fix: a '
          'checkpoint without it (null, as those on the Hub).')
    if final_cap is not None:
      config.model.logits_softcap = _positive(final_cap, 'final_logit_softcapping', where)
  if fam == 'smollm3':  # Its NoPE layers: no position information at all.
    rotates = hf_layers.rotating_layers(hf, layers, where)
    if not any(rotates):
      raise errors.ConfigError(f'{where}: no_rope_layers leaves no layer with RoPE; this '
                               'project reads SmolLM3 checkpoints with at least one. Fix: a '
                               'checkpoint with RoPE layers (as SmolLM3-3B, 3 in each 4).')
    config.model.layer_kinds = positions.layer_kinds_of(rotates)
  if fam == 'exaone4':  # With a window, RoPE on the sliding layers alone (its global NoPE).
    rotates = hf_layers.exaone4_layers(hf, layers, where)[1]
    if not any(rotates):
      raise errors.ConfigError(f'{where}: sliding_window set and no sliding layer, and so no '
                               'layer with RoPE; this project reads EXAONE 4 checkpoints with '
                               'some. Fix: a checkpoint with sliding layers (as EXAONE 4.0 32B, 3 '
                               'in each 4) or a null sliding_window.')
    config.model.layer_kinds = positions.layer_kinds_of(rotates)
  if fam == 'cohere2':  # RoPE on the sliding layers alone.
    rotates = [k == 'sliding_attention' for k in hf_layers.cohere2_kinds(hf, layers, where)]
    if not any(rotates):
      raise errors.ConfigError(f'{where}: no sliding layer, and so no layer with RoPE; this '
                               'project reads Cohere 2 checkpoints with some. Fix: a checkpoint '
                               'with sliding layers (as Command R7B, 3 in each 4).')
    config.model.layer_kinds = positions.layer_kinds_of(rotates)
  rope = config.model.position.rope
  config.model.position.kind = positions.ROPE
  # Cohere, GLM, Llama 4, ERNIE 4.5 and DeepSeek-V2 rotate interleaved pairs (x_2i, x_2i+1),
  # DeepSeek-V3 where rope_interleave, the others the halves.
  interleaved = fam in COHERE + GLM + ('llama4', 'ernie4_5') or (
      fam == hf_deepseek.FAMILY and _read(hf, 'rope_interleave', True)) or (
      fam == hf_deepseek.FAMILY_V2)
  rope.update(layout='interleaved' if interleaved else 'half',
              fraction=rotary / head_dim)
  if settings['rope_theta'] is not None:
    rope.base = float(settings['rope_theta'])
  rope.scaling.update(scaling)
  if fam == hf_llama4.FAMILY:
    rope.scaling.update(hf_llama4.scaling_fields(hf, rope.scaling.kind))
  return config
