"""`hf.load(path, overrides=...)` and scripts/generate.py's `--config.model.*` flags
(roformer/generation.py, `overridden_config`): the config.model fields that eval.py's flags may
change, set on a restored causal LM and checked as eval.py checks them: how the model is
computed changes nothing it computes, a remap changes the logits only where it moves a
distance, and a field that decides what was trained, or that decoding does not read, is refused
in one error naming it."""

import numpy as np
import pytest

from roformer import errors
from roformer import generation
from roformer import hf
from tests import hf_fixtures

FIXTURE = hf_fixtures.FIXTURES / 'llama_gqa_llama3'
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
     "overrides 'eval.scale_rope_to_length', 'mesh.tensor': decoding reads only config.model"),
])
def test_a_bad_override_is_one_error_naming_it(workdir, overrides, says):
  with pytest.raises(errors.ConfigError, match=says):
    hf.load(workdir, overrides=overrides)


def test_generate_takes_the_same_overrides_and_refuses_the_same_ones(workdir):
  """generation.run (scripts/generate.py) with --config.model.* overrides: one scan over the
  layers continues a prompt as the loop does; a remap is in effect; an eval.* field is
  refused, naming where it came from."""
  greedy = generation.Sampling(max_new_tokens=12)
  plain = generation.run(workdir, ['the'], sampling=greedy)
  assert generation.run(workdir, ['the'], sampling=greedy,
                        overrides=[('model.scan_layers', 'True')]) == plain
  remapped = generation.run(workdir, ['the'], sampling=greedy, overrides=[
      ('model.position.rope.remap.method', 'self_extend'),
      ('model.position.rope.remap.neighbor_window', '2'),
      ('model.position.rope.remap.group_size', '4')])
  assert remapped != plain  # From the prompt's third token on, the distances move.
  with pytest.raises(errors.ConfigError, match="--config overrides 'eval.batch_size': decoding "
                                               'reads only config.model'):
    generation.run(workdir, ['the'], sampling=greedy, overrides=[('eval.batch_size', '4')])
