"""scripts/convert_hf_roformer.py's reading of safetensors files, without torch (the
conversion against transformers itself: tests/test_hf_roformer.py)."""

import ml_dtypes
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy

from roformer import errors
from scripts import convert_hf_roformer as convert


def test_each_stored_precision_reads_back_as_float32(tmp_path):
  rng = np.random.default_rng(0)
  tensors = {'a': rng.normal(size=(3, 4)).astype(np.float32),
             'b': rng.normal(size=(5,)).astype(np.float16),
             'c': rng.normal(size=(2, 2)).astype(ml_dtypes.bfloat16),
             'd': np.arange(6, dtype=np.int64).reshape(2, 3)}
  safetensors_numpy.save_file(tensors, str(tmp_path / 'model.safetensors'))
  read = convert.read_safetensors(tmp_path / 'model.safetensors')
  assert sorted(read) == sorted(tensors)
  for name, want in tensors.items():
    assert read[name].dtype == np.float32
    np.testing.assert_array_equal(read[name], want.astype(np.float32))


def test_a_cut_file_is_named_with_its_fix(tmp_path):
  safetensors_numpy.save_file({'a': np.ones((64, 64), np.float32)},
                              str(tmp_path / 'model.safetensors'))
  whole = (tmp_path / 'model.safetensors').read_bytes()
  (tmp_path / 'cut.safetensors').write_bytes(whole[:len(whole) // 2])
  with pytest.raises(errors.DamagedFileError, match=r'cut.safetensors is not a complete '
                     r'.safetensors file .*Fix: download it again'):
    convert.read_safetensors(tmp_path / 'cut.safetensors')
