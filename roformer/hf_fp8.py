"""Checkpoints stored in block-scaled FP8 (`quantization_config` with `quant_method: fp8`:
transformers' fine-grained FP8, as the Hub's DeepSeek-V3 and R1, Kimi K2 and Qwen3 "-FP8"
checkpoints are saved), expanded to float32.

Each quantized linear layer stores its weight W [out, in] in float8 (e4m3) beside `weight_scale_inv`
[ceil(out / b_0), ceil(in / b_1)] for blocks of `weight_block_size` (b_0, b_1): W = fp8 value times
its block's scale (float32, or E8M0 exponents, 2^(byte - 127), stored as float8_e8m0fnu or as
bytes), which this module computes in float32, the product transformers' dequantization computes. A
grid of partial blocks at the edges (ceil) is the FP8 kernels' semantics; transformers'
dequantization refuses such a grid, so no fixture checks that case against it (a unit test checks it
element by element). transformers' FP8 kernels also quantize each layer's input to FP8 as they run
('dynamic' activations); the float32 model read here does not, as transformers computes it with
`dequantize=True` (on a CPU, the only way it runs). A checkpoint whose activations carry stored
scales ('static') is refused.

The `safetensors` package's numpy reader (0.8.0) has no float8 type, so a file holding FP8 tensors
is read here from its own layout: a little-endian 8-byte header length, the JSON header (each
tensor's dtype, shape and byte offsets), then the bytes, viewed through ml_dtypes (a JAX
dependency).
"""

import json
import math
import os

import ml_dtypes
import numpy as np

from roformer import errors

_DTYPES = {'F8_E4M3': ml_dtypes.float8_e4m3fn, 'F8_E5M2': ml_dtypes.float8_e5m2,
           'F8_E8M0': ml_dtypes.float8_e8m0fnu,
           'BF16': ml_dtypes.bfloat16, 'F16': np.float16, 'F32': np.float32,
           'F64': np.float64, 'I8': np.int8, 'U8': np.uint8, 'I16': np.int16, 'I32': np.int32,
           'I64': np.int64, 'BOOL': np.bool_}
FLOAT8 = ('F8_E4M3', 'F8_E5M2', 'F8_E8M0')
SCALE = '_scale_inv'  # The suffix of a weight's block scales.


def header(path) -> tuple[dict, int]:
  """(a .safetensors file's header, the offset of its data), or DamagedFileError."""
  try:
    with open(path, 'rb') as f:
      size = int.from_bytes(f.read(8), 'little')
      if size > os.fstat(f.fileno()).st_size - 8:  # Never read past the file.
        raise ValueError(f'a header of {size} bytes')
      head = json.loads(f.read(size))
  except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
    raise errors.DamagedFileError(f'{path} is not a complete .safetensors file ({e}). Fix: '
                                  'download it again.') from None
  if not isinstance(head, dict):
    raise errors.DamagedFileError(f'{path}: its header is not a table of tensors. Fix: download '
                                  'it again.')
  head.pop('__metadata__', None)
  return head, 8 + size


def holds_float8(path) -> bool:
  """Whether a .safetensors file holds a float8 tensor (which the package's reader cannot read)."""
  return any(isinstance(entry, dict) and entry.get('dtype') in FLOAT8
             for entry in header(path)[0].values())


def read(path) -> dict[str, np.ndarray]:
  """Every tensor of a .safetensors file as float32, float8 ones included."""
  head, start = header(path)
  data = np.memmap(path, dtype=np.uint8, mode='r')
  out = {}
  for name, entry in head.items():
    counts = lambda x: isinstance(x, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in x)
    if not (isinstance(entry, dict) and counts(entry.get('shape'))
            and counts(entry.get('data_offsets')) and len(entry['data_offsets']) == 2):
      raise errors.DamagedFileError(f'{path}: the header of tensor {name} is {entry!r}, not a '
                                    'dtype, shape and data_offsets. Fix: download it again.')
    dtype = _DTYPES.get(entry.get('dtype'))
    if dtype is None:
      raise errors.ConfigError(f'{path}: tensor {name} is {entry.get("dtype")}, a type this '
                               'project does not read. Fix: a checkpoint in float32, 16 bits or '
                               'block-scaled FP8.')
    begin, end = entry['data_offsets']
    shape = tuple(entry['shape'])
    if (begin > end or start + end > data.size
        or end - begin != np.dtype(dtype).itemsize * math.prod(shape)):
      raise errors.DamagedFileError(f'{path}: tensor {name} ({entry.get("dtype")} {list(shape)}, '
                                    f'bytes {begin}-{end}) cannot be read. Fix: download it '
                                    'again.')
    out[name] = as_float32(name, np.asarray(data[start + begin:start + end]).view(dtype)
                           .reshape(shape))
  return out


def as_float32(name: str, array: np.ndarray) -> np.ndarray:
  """A tensor of a checkpoint as float32: block scales stored as bytes are E8M0 exponents,
  2^(b - 127), as transformers' dequantization reads them; any other tensor its value."""
  if name.endswith(SCALE) and array.dtype == np.uint8:
    return np.exp2(array.astype(np.float32) - 127.0)
  return array.astype(np.float32)


def quantized_blocks(hf: dict, where: str) -> tuple[int, int] | None:
  """The (rows, columns) of each scale's block of a config.json whose quantization_config is
  block-scaled FP8 (None for any other); a setting this project does not read is refused in one
  line."""
  quantization = hf.get('quantization_config')
  if not isinstance(quantization, dict) or quantization.get('quant_method') != 'fp8':
    return None
  block = quantization.get('weight_block_size')
  if (not isinstance(block, list) or len(block) != 2
      or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in block)):
    raise errors.ConfigError(
        f"{where}: quantization_config fp8 with weight_block_size {block!r}; this project reads "
        'block-scaled FP8 (two block sizes, as [128, 128]). Fix: a checkpoint with it, or the '
        'unquantized one.')
  if quantization.get('activation_scheme', 'dynamic') != 'dynamic':
    raise errors.ConfigError(
        f"{where}: quantization_config fp8 with activation_scheme "
        f"{quantization.get('activation_scheme')!r} (stored input scales), which this project "
        "does not read. Fix: a checkpoint with 'dynamic' activations, or the unquantized one.")
  return block[0], block[1]


def dequantized(tensors: dict, block: tuple[int, int], where: str) -> dict:
  """The checkpoint's tensors with every weight that has block scales (`NAME_scale_inv`) expanded
  to float32, the scales dropped; other tensors as they are."""
  out = {}
  for name, array in tensors.items():
    if name.endswith(SCALE):
      continue
    scales = tensors.get(name + SCALE)
    if scales is not None:
      if array.ndim < 2:
        raise errors.DamagedFileError(f'{where}: {name} {list(array.shape)} has block scales, '
                                      'which only matrices have. Fix: download the checkpoint '
                                      'again.')
      rows, cols = array.shape[-2:]
      want = array.shape[:-2] + (math.ceil(rows / block[0]), math.ceil(cols / block[1]))
      if scales.shape != want:
        raise errors.ConfigError(
            f'{where}: {name + SCALE} has shape {scales.shape}, where {name} {array.shape} in '
            f'blocks of {list(block)} (weight_block_size) has {want}: blocks of another size, '
            'which this project does not read (one block size for every weight), or a damaged '
            'file. Fix: the unquantized checkpoint, or download it again.')
      grown = np.repeat(np.repeat(scales, block[0], axis=-2), block[1], axis=-1)
      array = array * grown[..., :rows, :cols]
    out[name] = array
  stray = [n for n in tensors if n.endswith(SCALE) and n[:-len(SCALE)] not in tensors]
  if stray:
    raise errors.DamagedFileError(f'{where}: block scales without their weight ({stray[0]}). '
                                  'Fix: download the checkpoint again.')
  return out
