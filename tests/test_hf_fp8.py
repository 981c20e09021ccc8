"""Block-scaled FP8 checkpoints (roformer/hf_fp8.py): the bytes of a .safetensors file read by
hand-encoded values, the blocks expanded against a loop written out, and the refusals. The
fixture qwen3_fp8_blocks (tests/test_hf_checkpoints.py) checks a whole model against
transformers' own dequantization."""

import json
import struct

import numpy as np
import pytest

from roformer import errors
from roformer import hf_fp8


def _safetensors(path, entries: dict) -> None:
  """A .safetensors file of `entries` {name: (dtype name, shape, raw bytes)}, written by hand."""
  header, data = {}, b''
  for name, (dtype, shape, raw) in entries.items():
    header[name] = {'dtype': dtype, 'shape': list(shape),
                    'data_offsets': [len(data), len(data) + len(raw)]}
    data += raw
  text = json.dumps(header).encode()
  path.write_bytes(struct.pack('<Q', len(text)) + text + data)


def test_float8_bytes_read_as_their_values_beside_other_dtypes(tmp_path):
  """e4m3 (bias 7): 0x38 is 1, 0x40 2, 0x3C 1.5, 0xB8 -1, 0x01 the smallest subnormal 2^-9, 0x7E
  the largest, 448; e5m2 (bias 15): 0x3C is 1, 0xC0 -2; bfloat16 0x3F80 is 1; float32 as is."""
  path = tmp_path / 'model.safetensors'
  _safetensors(path, {
      'e4m3': ('F8_E4M3', (2, 3), bytes([0x38, 0x40, 0x3C, 0xB8, 0x01, 0x7E])),
      'e5m2': ('F8_E5M2', (2,), bytes([0x3C, 0xC0])),
      'bf16': ('BF16', (1,), struct.pack('<H', 0x3F80)),
      'f32': ('F32', (2,), struct.pack('<2f', 0.25, -3.0))})
  assert hf_fp8.holds_float8(path)
  got = hf_fp8.read(path)
  np.testing.assert_array_equal(got['e4m3'], [[1, 2, 1.5], [-1, 2 ** -9, 448]])
  np.testing.assert_array_equal(got['e5m2'], [1, -2])
  np.testing.assert_array_equal(got['bf16'], [1])
  np.testing.assert_array_equal(got['f32'], [0.25, -3])
  assert all(a.dtype == np.float32 for a in got.values())


def test_each_weight_is_its_values_times_its_blocks_scale_partial_blocks_included():
  """A 5 x 3 weight in blocks of 2 x 2 has 3 x 2 scales, the last row and column of blocks
  partial; element (i, j) is multiplied by scale (i // 2, j // 2)."""
  rng = np.random.default_rng(0)
  weight, scales = rng.normal(size=(5, 3)), rng.uniform(0.5, 2, size=(3, 2))
  got = hf_fp8.dequantized({'a.weight': weight, 'a.weight_scale_inv': scales,
                            'norm.weight': np.ones(3)}, (2, 2), 'config.json')
  want = np.array([[weight[i, j] * scales[i // 2, j // 2] for j in range(3)] for i in range(5)])
  np.testing.assert_allclose(got['a.weight'], want, rtol=1e-15)
  assert sorted(got) == ['a.weight', 'norm.weight']


@pytest.mark.parametrize('quantization,named', [
    ({'weight_block_size': None}, 'weight_block_size None'),
    ({'weight_block_size': [128]}, 'weight_block_size [128]'),
    ({'weight_block_size': [128, 128], 'activation_scheme': 'static'},
     "activation_scheme 'static'")])
def test_fp8_settings_this_project_does_not_read_are_refused(quantization, named):
  with pytest.raises(errors.ConfigError, match=named.replace('[', r'\[')):
    hf_fp8.quantized_blocks({'quantization_config': {'quant_method': 'fp8', **quantization}},
                            'config.json')
  assert hf_fp8.quantized_blocks({'quantization_config': {'quant_method': 'mxfp4'}}, 'c') is None


def test_scales_of_another_grid_or_without_their_weight_are_a_damaged_file(tmp_path):
  weight = np.ones((4, 4))
  with pytest.raises(errors.ConfigError, match=r'a.weight_scale_inv has shape \(1, 1\)'):
    hf_fp8.dequantized({'a.weight': weight, 'a.weight_scale_inv': np.ones((1, 1))}, (2, 2), 'c')
  with pytest.raises(errors.DamagedFileError, match='block scales without their weight'):
    hf_fp8.dequantized({'b.weight_scale_inv': np.ones((1, 1))}, (2, 2), 'c')
  path = tmp_path / 'cut.safetensors'
  _safetensors(path, {'w': ('F8_E4M3', (2, 2), bytes(4))})
  path.write_bytes(path.read_bytes()[:-1])  # One byte short.
  with pytest.raises(errors.DamagedFileError,
                     match=r'tensor w .F8_E4M3 \[2, 2\], bytes 0-4. cannot'):
    hf_fp8.read(path)


def test_e8m0_scales_are_powers_of_two_stored_as_float8_or_as_bytes(tmp_path):
  """An E8M0 scale byte b is 2^(b - 127), whether the file types it float8_e8m0fnu or uint8 (as
  transformers' dequantization reads a byte scale); other bytes stay integers."""
  path = tmp_path / 'model.safetensors'
  _safetensors(path, {
      'a.weight': ('F8_E4M3', (1, 2), bytes([0x38, 0x40])),
      'a.weight_scale_inv': ('F8_E8M0', (1, 1), bytes([0x80])),
      'b.weight': ('F8_E4M3', (1, 2), bytes([0x38, 0x40])),
      'b.weight_scale_inv': ('U8', (1, 1), bytes([0x7E])),
      'ids': ('U8', (2,), bytes([3, 200]))})
  got = hf_fp8.read(path)
  assert got['a.weight_scale_inv'].item() == 2.0 and got['b.weight_scale_inv'].item() == 0.5
  np.testing.assert_array_equal(got['ids'], [3, 200])
  weights = hf_fp8.dequantized(got, (2, 2), 'c')
  np.testing.assert_array_equal(weights['a.weight'], [[2, 4]])
  np.testing.assert_array_equal(weights['b.weight'], [[0.5, 1]])


def test_an_unknown_dtype_or_a_short_tensor_is_one_line(tmp_path):
  path = tmp_path / 'model.safetensors'
  _safetensors(path, {'w': ('F8_E4M3', (1,), bytes([0x38])), 'c': ('C64', (1,), bytes(8))})
  with pytest.raises(errors.ConfigError, match="tensor c is C64, a type this project"):
    hf_fp8.read(path)
  _safetensors(path, {'w': ('F8_E4M3', (2, 2), bytes(3))})  # 3 bytes for 4 values.
  with pytest.raises(errors.DamagedFileError, match=r'tensor w \(F8_E4M3 \[2, 2\], bytes 0-3\)'):
    hf_fp8.read(path)


def test_byte_scales_in_a_file_without_float8_are_still_exponents(tmp_path):
  """A shard holding only some layers' byte scales (their float8 weights in another file) reads
  them as 2^(b - 127) too, through the safetensors package's reader."""
  from roformer import hf_weights  # pylint: disable=import-outside-toplevel
  path = tmp_path / 'model-00002-of-00002.safetensors'
  _safetensors(path, {'l.weight_scale_inv': ('U8', (1, 1), bytes([120])),
                      'norm.weight': ('F32', (1,), struct.pack('<f', 1.5))})
  assert not hf_fp8.holds_float8(path)
  got = hf_weights.read_safetensors(path)
  assert got['l.weight_scale_inv'].item() == 2.0 ** -7 and got['norm.weight'].item() == 1.5


def test_a_damaged_header_is_one_line(tmp_path):
  """A header that is not a table, or a tensor's entry without its offsets, names the file."""
  path = tmp_path / 'model.safetensors'
  text = json.dumps([1, 2]).encode()
  path.write_bytes(struct.pack('<Q', len(text)) + text)
  with pytest.raises(errors.DamagedFileError, match='its header is not a table of tensors'):
    hf_fp8.read(path)
  text = json.dumps({'w': {'dtype': 'F8_E4M3', 'shape': [1]}}).encode()
  path.write_bytes(struct.pack('<Q', len(text)) + text + bytes(1))
  with pytest.raises(errors.DamagedFileError, match='the header of tensor w is'):
    hf_fp8.read(path)


def _header(table) -> bytes:
  """A .safetensors header of `table` with one byte of data after it."""
  text = json.dumps(table).encode()
  return struct.pack('<Q', len(text)) + text + bytes(1)


@pytest.mark.parametrize('raw', [
    struct.pack('<Q', 2**62) + b'{}',  # A header longer than the file.
    struct.pack('<Q', 2**64 - 1),
    _header({'w': ['x']}),  # An entry that is not a table.
    _header({'w': {'dtype': 'F8_E4M3', 'shape': [1], 'data_offsets': ['0', '1']}}),
    _header({'w': {'dtype': 'F8_E4M3', 'shape': [-1], 'data_offsets': [0, 1]}}),
    _header({'w': {'dtype': 'F8_E4M3', 'shape': [1], 'data_offsets': [1, 0]}})])
def test_any_damaged_weight_file_is_one_line_float8_or_not(tmp_path, raw):
  """Every .safetensors file passes through the float8 check first: a damaged header reaches
  the user as one DamagedFileError naming the file, whether or not the file holds float8."""
  from roformer import hf_weights  # pylint: disable=import-outside-toplevel
  path = tmp_path / 'model.safetensors'
  path.write_bytes(raw)
  with pytest.raises(errors.DamagedFileError, match='model.safetensors'):
    hf_weights.read_safetensors(path)


def test_block_scales_of_a_vector_are_a_damaged_file():
  tensors = {'b': np.ones(4, np.float32), 'b_scale_inv': np.ones((1, 1), np.float32)}
  with pytest.raises(errors.DamagedFileError, match=r'b \[4\] has block scales'):
    hf_fp8.dequantized(tensors, (2, 2), 'config.json')
