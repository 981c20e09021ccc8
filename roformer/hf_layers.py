"""Which layers of a Hugging Face config.json slide, and which rotate: the layouts of
transformers' classes (`layer_types`, `sliding_window`, `sliding_window_pattern`,
`max_window_layers`, SmolLM3's `no_rope_layers`, Cohere 2's global layers without positions) as
this project's per-layer fields (`model.layer_windows`, `model.layer_kinds`), each where the file
has none as the class lays it out. roformer/hf_config.py reads the rest of the config."""

from roformer import errors
from roformer import hf_fields

_read = hf_fields.read


def interval(hf: dict, name: str, default: int, where: str) -> int:
  """A layer interval of the config (`sliding_window_pattern`, `no_rope_layer_interval`), which
  must be a positive integer."""
  value = _read(hf, name, default)
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise errors.DamagedFileError(f'{where}: {name} is {value!r}, where transformers reads a '
                                  'positive integer. Fix: use the config.json that came with '
                                  'the weights.')
  return value


def rotating_layers(hf: dict, layers: int, where: str) -> tuple[bool, ...]:
  """Whether each layer of a SmolLM3 or Llama 4 config rotates: `no_rope_layers` (1: RoPE, 0:
  none), else every `no_rope_layer_interval`-th layer without (both configs' rule)."""
  every = interval(hf, 'no_rope_layer_interval', 4, where)
  flags = hf.get('no_rope_layers') or [int((i + 1) % every != 0) for i in range(layers)]
  return tuple(bool(f) for f in flags[:layers])


def windows_of(kinds, window: int) -> tuple[int, ...]:
  """layer_windows of transformers' `layer_types`: `window` on each sliding layer, () where none
  is windowed."""
  windows = tuple(int(window) if k == 'sliding_attention' else 0 for k in kinds)
  return windows if any(windows) else ()


LAYER_TYPES = ('sliding_attention', 'full_attention')  # transformers' layer_types we read.


def layer_types(hf: dict, layers: int, where: str, default,
                allowed: tuple[str, ...] = LAYER_TYPES) -> list[str]:
  """The config's `layer_types`, one of `allowed` per layer (as transformers' configs check
  them), or `default` (the class's layout, a list) where the file has none."""
  kinds = hf.get('layer_types')
  if not kinds:
    return list(default)
  if (not isinstance(kinds, list) or len(kinds) != layers
      or any(k not in allowed for k in kinds)):
    raise errors.DamagedFileError(
        f'{where}: layer_types is {kinds!r}, where transformers reads one of '
        f'{", ".join(allowed)} for each of the {layers} layers. Fix: use the config.json '
        'that came with the weights.')
  return kinds


def windows(hf: dict, fam: str, layers: int, where: str) -> tuple[int, ...]:
  """model.layer_windows of a config whose rotary settings are one for every layer: Mistral's,
  Phi-3's and StarCoder 2's window on every layer, SmolLM3's on its layers without positions,
  Cohere 2's, EXAONE 4's, Ministral's, Gemma 2's and gpt-oss's on their sliding layers,
  Qwen2's and Qwen3's from max_window_layers on; () where none slides."""
  window = _read(hf, 'sliding_window', 4096)  # MistralConfig's and Qwen2Config's default.
  if fam in ('phi3', 'starcoder2', 'mixtral'):  # Their configs' is None by default.
    window = hf.get('sliding_window')
  if fam in ('mistral', 'phi3', 'starcoder2', 'mixtral'):
    return (int(window),) if window else ()
  if fam == 'smollm3':  # On its NoPE layers; SmolLM3Config's window is None by default.
    window = hf.get('sliding_window')
  if fam == 'smollm3' and window and hf.get('use_sliding_window'):
    rotates = rotating_layers(hf, layers, where)
    return windows_of(layer_types(hf, layers, where, [
        'full_attention' if r else 'sliding_attention' for r in rotates]), window)
  if fam == 'ministral':  # layer_types, else every layer sliding where the window is set.
    kinds = layer_types(hf, layers, where, ['sliding_attention' if window else 'full_attention']
                        * layers)
    return windows_of(kinds, sliding_window(hf, kinds, where))
  if fam == 'exaone4':  # Its sliding layers'.
    return exaone4_layers(hf, layers, where)[0]
  if fam == 'cohere2':  # Its sliding layers rotate; the global ones have no positions.
    kinds = cohere2_kinds(hf, layers, where)
    return windows_of(kinds, sliding_window(hf, kinds, where))
  if fam in ('gemma2', 'gpt_oss'):  # Their layer_types: the even layers (from 0) slide.
    kinds = layer_types(hf, layers, where, [
        'sliding_attention' if (i + 1) % 2 else 'full_attention' for i in range(layers)])
    return windows_of(kinds, sliding_window(hf, kinds, where,
                                            128 if fam == 'gpt_oss' else 4096))
  if fam in ('qwen2', 'qwen3') and window and hf.get('use_sliding_window'):
    return windows_of(layer_types(hf, layers, where, [
        'sliding_attention' if i >= _read(hf, 'max_window_layers', 28) else 'full_attention'
        for i in range(layers)]), window)
  return ()


def exaone4_layers(hf: dict, layers: int, where: str) -> tuple[tuple[int, ...], tuple]:
  """(windows, whether each layer rotates) of an EXAONE 4 config, as its class computes them:
  its layer kinds are `layer_types`, else (Exaone4Config's rule) every `sliding_window_pattern`-th
  layer global (4 where absent) where `sliding_window` is set (4096 where absent) and every layer
  global where it is null; the sliding layers have the window, and RoPE is on every layer where
  the window is null, else on the sliding layers alone (its global layers without positions). A
  null window beside sliding layers, and a pattern of letters without layer_types, are configs
  transformers cannot run."""
  window = _read(hf, 'sliding_window', 4096)
  if hf.get('layer_types') or window is None:
    kinds = layer_types(hf, layers, where, ['full_attention'] * layers)
  else:
    if isinstance(_read(hf, 'sliding_window_pattern', 4), str):
      raise errors.ConfigError(
          f'{where}: sliding_window_pattern {hf["sliding_window_pattern"]!r} without '
          "layer_types, which transformers' EXAONE 4 fails on (it reads such a pattern only "
          'beside layer_types). Fix: use the config.json that came with the weights.')
    every = interval(hf, 'sliding_window_pattern', 4, where)
    kinds = [('sliding_attention' if (i + 1) % every else 'full_attention')
             for i in range(layers)]
  windows = windows_of(kinds, sliding_window(hf, kinds, where))
  return windows, tuple(window is None or k == 'sliding_attention' for k in kinds)


def cohere2_kinds(hf: dict, layers: int, where: str) -> list[str]:
  """A Cohere 2 config's layer_types, or Cohere2Config's from sliding_window_pattern (every
  p-th layer global; 4 where absent)."""
  every = interval(hf, 'sliding_window_pattern', 4, where)
  return layer_types(hf, layers, where, [
      'sliding_attention' if (i + 1) % every else 'full_attention' for i in range(layers)])


def sliding_window(hf: dict, kinds, where: str, default: int = 4096) -> int:
  """The window of the sliding layers among `kinds` (transformers' layer_types): the file's
  (the class's `default` where absent); a null one beside sliding layers is a config
  transformers cannot run."""
  window = _read(hf, 'sliding_window', default)
  if not window and 'sliding_attention' in kinds:
    raise errors.DamagedFileError(f'{where}: sliding_window is {window!r} while layers slide '
                                  '(sliding_attention), which transformers cannot run. Fix: use '
                                  'the config.json that came with the weights.')
  return int(window or 0)
