"""Position schemes own their life cycle (roformer/positions/base.py): what a run reading a
trained one may change of their options, what they take from that run, what an evaluation
records of them and what they set per layer, declared by each kind and read through the
registry, so that no module outside roformer/positions/ reads a scheme's option group."""

import pathlib
import re

import ml_collections
import pytest

from configs import test as test_config
from roformer import errors
from roformer import positions
from roformer import saved_config
from roformer import specs
from roformer.positions import base

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Modules that translate transformers' position settings and weights (`rope_theta`,
# `rope_scaling`, the rotated halves' layout, GPT-2's `n_positions`): the schemes those
# checkpoints compute, named by definition.
HF_TRANSLATION = ('hf_config.py', 'hf_classic.py', 'hf_deepseek.py', 'hf_export_config.py',
                  'hf_falcon.py', 'hf_llama4.py', 'hf_llama_export.py', 'hf_moe.py',
                  'hf_weights_export.py')


def _model(kind='rope', **position):
  config = test_config.get_config(kind)
  for path, value in position.items():
    node = config.model.position
    *groups, last = path.split('__')
    for group in groups:
      node = node[group]
    node[last] = value
  return config.model


def test_every_declared_change_is_an_option_of_its_scheme():
  specs_by_group = positions.field_specs()
  for kind in positions.kinds():
    cls = positions.scheme(kind)
    for option, occasions, why in cls.may_change:
      group = option.split('.')[0]
      assert group in cls.fields(), (kind, option)
      node = specs_by_group
      for part in option.split('.'):
        node = node[part]
      assert isinstance(node, (dict, specs.Spec)), (kind, option)
      assert set(occasions) <= {saved_config.CONTINUE, saved_config.EVALUATE} and why


def test_the_saved_config_rules_read_what_the_schemes_declare():
  """A kind registered with its own life cycle is read by saved_config with nothing else
  edited: its declared option may change at evaluation, and it fills what it takes from the
  checkpoint."""

  @positions.register('toy_life_cycle')
  class Toy(positions.PositionScheme):
    options = {'toy_life_cycle': {'reach': specs.Int(0, 100, default=0)}}
    may_change = (('toy_life_cycle.reach', ('evaluate',), 'how far it reaches at evaluation'),)

    @classmethod
    def from_source(cls, cfg, trained, occasion):
      cfg.toy_life_cycle.reach = trained

  try:
    assert 'model.position.toy_life_cycle.reach' in saved_config.may_change(
        saved_config.EVALUATE)
    assert 'model.position.toy_life_cycle.reach' not in saved_config.may_change(
        saved_config.CONTINUE)
    cfg = ml_collections.ConfigDict({'toy_life_cycle': {'reach': 0}})
    positions.scheme('toy_life_cycle').from_source(cfg, 64, saved_config.EVALUATE)
    assert cfg.toy_life_cycle.reach == 64 and Toy.results_fields(cfg) == {}
  finally:
    del base._REGISTRY['toy_life_cycle']  # pylint: disable=protected-access


@pytest.mark.parametrize('kind,layer_kinds', [('rope', ()), ('rope+fox', ()),
                                              ('rope', ('rope', 'none'))])
def test_a_scheme_and_its_composites_take_the_trained_length(kind, layer_kinds):
  """RoPE's scaling takes the trained length where it is unset: at evaluation for the kinds
  whose frequencies read it, on a continuation also for the stretching ones (whose factor is
  checked against it); a combination or a per-layer layout does what its parts do."""
  for scaling, occasion, filled in (('yarn', 'evaluate', True), ('dynamic', 'evaluate', True),
                                    ('linear', 'evaluate', False), ('linear', 'continue', True),
                                    ('none', 'continue', False)):
    m = _model(kind, rope__scaling__kind=scaling)
    m.layer_kinds = layer_kinds
    cls = positions.model_scheme(m)
    cls.from_source(m.position, 64, occasion)
    assert m.position.rope.scaling.original_length == (64 if filled else 0), (scaling, occasion)
  m = _model(kind, rope__scaling__kind='linear', rope__scaling__factor=2.0)
  m.layer_kinds = layer_kinds
  cls = positions.model_scheme(m)
  cls.from_source(m.position, 64, 'continue')
  cls.check_continuation(m.position, 64, 128, 'the source')  # 2 x 64 covers 128.
  with pytest.raises(errors.ConfigError, match='factor=2.0 stretches'):
    cls.check_continuation(m.position, 64, 256, 'the source')
  assert cls.length_factor(m.position) == 'rope.scaling.factor'
  assert cls.results_fields(m.position)['rope_scaling']['kind'] == 'linear'


def test_a_scheme_without_a_factor_refuses_scaling_to_length():
  for kind in ('alibi', 'rope'):  # rope with no scaling has no factor either.
    with pytest.raises(errors.ConfigError, match='scale_rope_to_length'):
      positions.model_scheme(_model(kind)).length_factor(_model(kind).position)
  assert positions.model_scheme(_model('alibi')).results_fields(_model('alibi').position) == {}


def test_layer_options_give_each_block_its_rope_base():
  m = _model('rope')
  m.layer_kinds, m.layer_rope_bases = ('rope', 'none'), (10000.0, 500.0)
  m.num_layers = 4
  layers = [positions.layer_config(m, i) for i in range(4)]
  assert [c.position.kind for c in layers] == ['rope', 'none', 'rope', 'none']
  assert layers[0].position.rope.base == 10000.0 and layers[2].position.rope.base == 10000.0
  m.layer_kinds = ()
  assert [positions.layer_config(m, i).position.rope.base for i in range(4)] == [
      10000.0, 500.0, 10000.0, 500.0]
  m.layer_rope_bases = ()
  assert positions.layer_config(m, 1) is m  # Nothing per layer: the model's own config.


def test_no_module_outside_positions_reads_a_schemes_option_group():
  """Outside roformer/positions/, only the modules of HF_TRANSLATION read a scheme's option
  group, and each of them does (an exemption no longer needed is dropped)."""
  groups = sorted(positions.default_fields())
  pattern = re.compile(r'\.position\.(' + '|'.join(groups) + r')\b')
  readers = {}
  for p in (ROOT / 'roformer').rglob('*.py'):
    if 'positions' in p.parts:
      continue
    for n, line in enumerate(p.read_text().splitlines(), 1):
      if pattern.search(line.split('#')[0]) and not line.strip().startswith(('"', "'")):
        readers.setdefault(p.name, []).append(f'{p.relative_to(ROOT)}:{n}')
  assert not {name: lines for name, lines in readers.items() if name not in HF_TRANSLATION}
  assert sorted(readers) == sorted(HF_TRANSLATION)


def test_a_scheme_in_a_new_module_registers_with_no_other_edit(tmp_path):
  """A copy of the package with one more module in roformer/positions/ (a kind written there
  and nowhere else) offers that kind, in a fresh process."""
  import shutil  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  shutil.copytree(ROOT / 'roformer', tmp_path / 'roformer',
                  ignore=shutil.ignore_patterns('__pycache__'))
  (tmp_path / 'roformer' / 'positions' / 'toy_new_module.py').write_text(
      'from roformer.positions import base\n\n\n'
      "@base.register('toy_new_module')\n"
      'class Toy(base.PositionScheme):\n'
      '  """A kind written in a module of its own."""\n', encoding='utf-8')
  done = subprocess.run(
      [sys.executable, '-c', 'from roformer import positions; '
       "print('toy_new_module' in positions.kinds(), positions.__file__)"],
      cwd=tmp_path, env={'PYTHONPATH': str(tmp_path), 'JAX_PLATFORMS': 'cpu',
                         'PATH': '/usr/bin:/bin'},
      capture_output=True, text=True, check=False, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  found, where = done.stdout.split()
  assert found == 'True' and where.startswith(str(tmp_path))


@pytest.mark.parametrize('layer_kinds', [(), ('rope', 'none')])
def test_scaling_to_length_keeps_a_trained_factor_and_stretches_its_original_length(layer_kinds):
  """eval.scale_rope_to_length sets the factor at length L to max(least, L / length): for a
  model trained without a scaling, L / trained; for one trained with one (continued with YaRN
  at factor 4 from 64 to 256), its own factor up to the length it reaches, then L / 64."""
  m = _model('rope', rope__scaling__kind='yarn')
  m.layer_kinds = layer_kinds
  assert positions.length_scaling(m, 64) == ('rope.scaling.factor', 1.0, 64)
  m.position.rope.scaling.update(factor=4.0, original_length=64)
  assert positions.length_scaling(m, 256) == ('rope.scaling.factor', 4.0, 64)
  with pytest.raises(errors.ConfigError, match='scale_rope_to_length'):
    positions.length_scaling(_model('alibi'), 64)


def test_a_factor_given_with_scaling_to_length_is_refused():
  """A factor on the command line beside eval.scale_rope_to_length would be recorded as an
  override and replaced at every length; it is refused naming both fixes."""
  saved = _model('rope', rope__scaling__kind='linear')
  positions.check_length_factor(saved, saved)  # The trained factor itself: fine.
  given = _model('rope', rope__scaling__kind='linear', rope__scaling__factor=3.0)
  with pytest.raises(errors.ConfigError, match=r'config.model.position.rope.scaling.factor=3.0 '
                     r'is set at each evaluated length .*trained with 1.0\). Fix: drop '
                     r'--config.model.position.rope.scaling.factor .*or drop '
                     r'--config.eval.scale_rope_to_length'):
    positions.check_length_factor(given, saved)


def test_a_factor_without_the_length_it_stretches_is_refused_when_scaling_to_length():
  """A linear factor of 4 with no original_length stretches data.seq_len in an imported
  checkpoint and a quarter of it in a run trained from scratch at that factor: the saved config
  cannot tell, so scaling to length is refused, naming both values (an import now records
  its length)."""
  m = _model('rope', rope__scaling__kind='linear', rope__scaling__factor=4.0)
  with pytest.raises(errors.ConfigError, match=r'original_length=0\)\. Fix: .*original_length=N: '
                     r'the trained length 64 for a checkpoint that stretches it, 16 for one '
                     r'trained from scratch'):
    positions.length_scaling(m, 64)
  m.position.rope.scaling.original_length = 16
  assert positions.length_scaling(m, 64) == ('rope.scaling.factor', 4.0, 16)
