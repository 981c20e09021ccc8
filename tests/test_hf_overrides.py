"""`hf.load(path, overrides=...)`: the config fields that eval.py's flags may change, set from
Python on a restored causal LM and checked as eval.py checks them: how the model is computed
changes nothing it computes, a remap changes the logits only where it moves a distance, and a
field that decides what was trained is refused in one error naming it."""

import pathlib

import numpy as np
import pytest

from roformer import errors
from roformer import hf

FIXTURE = pathlib.Path(__file__).resolve().parent / 'data' / 'hf' / 'llama_gqa_llama3'
IDS = np.random.default_rng(0).integers(3, 90, (2, 24))  # Past its 16 trained positions.


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp('hf') / 'llama')
  hf.import_checkpoint(str(FIXTURE), path)
  return path


@pytest.fixture(scope='module')
def plain(workdir):
  return hf.load(workdir).logits(IDS)


def test_the_stack_as_one_scan_computes_the_loops_logits(workdir, plain):
  scanned = hf.load(workdir, overrides={'model.scan_layers': True})
  assert scanned.config.model.scan_layers
  np.testing.assert_allclose(scanned.logits(IDS), plain, rtol=0, atol=1e-5 * np.abs(plain).max())


def _self_extend_moves(i: int, window: int, group: int) -> bool:
  """Whether Self-Extend (Jin et al. 2024) gives query i a distance to some key j <= i other
  than i - j: distances from `window` on become i//G - j//G + W - W//G."""
  return any(i - j >= window and i // group - j // group + window - window // group != i - j
             for j in range(i + 1))


def test_a_remap_changes_the_logits_only_where_it_moves_a_distance(workdir, plain):
  window, group = 6, 2  # The group size as numpy's integer, which a notebook may hold.
  lm = hf.load(workdir, overrides={'model.position.rope.remap.method': 'self_extend',
                                   'model.position.rope.remap.neighbor_window': window,
                                   'model.position.rope.remap.group_size': np.int64(group)})
  remapped, scale = lm.logits(IDS), np.abs(plain).max()
  moved = np.array([_self_extend_moves(i, window, group) for i in range(IDS.shape[1])])
  assert not moved[:window + 1].any() and moved[window + 1:].all()  # Position 6 keeps all.
  np.testing.assert_allclose(remapped[:, ~moved], plain[:, ~moved], rtol=0, atol=1e-5 * scale)
  assert np.abs(remapped[:, moved] - plain[:, moved]).max(axis=-1).min() > 1e-4 * scale


@pytest.mark.parametrize('overrides, says', [
    ({'model.num_layers': 3}, r'model.num_layers: 2 vs 3 \(saved vs now\).* Fix: drop those '
                              'overrides'),
    ({'model.position.rope.remap.method': 'rerop'}, "remap.method='rerop' is unknown"),
    ({'model.no_such_field': 1}, "config.model has no field 'no_such_field'"),
    ({'model.position.rope.remap.method': 'self_extend',
      'model.position.rope.remap.neighbor_window': 64}, 'neighbor_window = 64 needs 65 trained'),
    ([('model.scan_layers', True)], 'overrides must be a dict'),
    ([], 'overrides must be a dict'),
    ({'eval.scale_rope_to_length': True, 'mesh.tensor': 2},
     "overrides 'eval.scale_rope_to_length', 'mesh.tensor': a loaded model reads only "
     'config.model'),
])
def test_a_bad_override_is_one_error_naming_it(workdir, overrides, says):
  with pytest.raises(errors.ConfigError, match=says):
    hf.load(workdir, overrides=overrides)
