"""One config pass: every field's default, type and range declared once; saved configs brought up
to date in one step; a field no part of the run reads refused when changed; the run checked
once, in roformer/resolve.py, before anything is built."""

import json
import os
import re

import ml_collections
import pytest

from configs import base
from configs import test as test_config
from roformer import config_schema
from roformer import errors
from roformer import files
from roformer import positions
from roformer import resolve
from roformer import saved_config
from roformer import tasks
from roformer import trainer as trainer_lib
from roformer import workdir as workdir_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(REPO, 'tests', 'data', 'legacy_layout')


def _leaves(tree, name='config'):
  for key, spec in tree.items():
    if isinstance(spec, dict):
      yield from _leaves(spec, f'{name}.{key}')
    else:
      yield f'{name}.{key}', spec


def test_every_field_declares_a_default_that_passes_its_own_spec():
  for name, spec in _leaves(config_schema.schema()):
    assert spec.has_default, name
    spec.check(spec.default, name)  # A default outside its own range would be a bug.


def test_the_base_config_is_every_field_at_its_default_and_passes():
  config = base.get_config()
  config_schema.check(config)
  resolve.validate(config)
  for name, spec in _leaves(config_schema.schema()):
    value = config
    for part in name.split('.')[1:]:
      value = value[part]
    value = value.to_dict() if hasattr(value, 'to_dict') else value
    assert (list(value) if isinstance(value, tuple) else value) == (
        list(spec.default) if isinstance(spec.default, tuple) else spec.default), name


def test_no_module_writes_a_config_fields_default_again():
  """The defaults live in roformer/config_schema.py only: no `cfg.get('field', default)` for a
  declared field anywhere in roformer/ (a config reaching the code is complete: built from
  configs/base.py or migrated when loaded)."""
  names = {name.rsplit('.', 1)[1] for name, _ in _leaves(config_schema.schema())}
  found = []
  for root, _, names_here in os.walk(os.path.join(REPO, 'roformer')):
    for file in names_here:
      if not file.endswith('.py'):
        continue
      path = os.path.join(root, file)
      text = open(path, encoding='utf-8').read()
      for match in re.finditer(r"\.get\('([a-z_]+)', ", text):
        if match.group(1) in names:
          found.append(f'{os.path.relpath(path, REPO)}: {match.group(0)}')
  assert not found


@pytest.mark.parametrize('run', sorted(os.listdir(LEGACY)))
def test_a_config_saved_by_an_earlier_version_loads_complete_and_valid(run):
  """tests/data/legacy_layout holds configs written by earlier code (before model.scan_layers,
  the classifier's and translation's fields in every config, ...): loading migrates them."""
  raw = json.load(open(os.path.join(LEGACY, run, 'config.json'), encoding='utf-8'))
  assert 'scan_layers' not in raw['model'] and 'beam_size' not in raw['eval']
  config = saved_config.load(os.path.join(LEGACY, run))
  config_schema.check(config)
  assert config.model.scan_layers is False and config.eval.beam_size == 4
  for section in ('model', 'data', 'train'):  # What it had is kept.
    for key, value in raw[section].items():
      if not isinstance(value, (dict, list)):
        assert config[section][key] == value, (section, key)


def test_a_missing_field_is_named_with_the_fix():
  config = test_config.get_config()
  del config.train['warmup_steps']
  with pytest.raises(errors.ConfigError, match=r'config.train.warmup_steps is missing. Fix: '
                     r'build the config from configs/base.py'):
    resolve.validate(config)


@pytest.mark.parametrize('arg,field,value,reader', [
    ('rope', 'data.mask_rate', 0.3, 'configs/mlm.py'),
    ('rope', 'data.synthetic.num_keys', 64, 'configs/synthetic.py'),
    ('rope', 'eval.beam_size', 8, 'configs/translate.py'),
    ('mlm', 'model.num_classes', 3, 'configs/classify.py'),
    ('classify', 'data.mask_fraction', 0.5, 'configs/mlm.py'),
])
def test_a_field_this_run_does_not_read_is_refused_when_changed(arg, field, value, reader):
  """As with another position kind's options: a setting the run would ignore is an error that
  names the field and the runs that read it, not a silent no-op."""
  config = test_config.get_config(arg)
  resolve.validate(config)  # At its default: fine.
  *parents, leaf = field.split('.')
  node = config
  for part in parents:
    node = node[part]
  node[leaf] = value
  with pytest.raises(errors.ConfigError, match=rf'config.{re.escape(field)}={value!r} is read '
                     rf'only by .*Fix: drop the override.*{re.escape(reader)}'):
    resolve.validate(config)


@pytest.mark.parametrize('field,value,task', [
    ('needles', 6, 'niah_multikey'), ('needle_values', 3, 'niah_multivalue'),
    ('hops', 2, 'variable_tracking'), ('common_count', 5, 'common_words'),
    ('depth_buckets', 4, 'passkey'), ('key_digits', 4, 'passkey'),
    ('num_queries', 3, 'associative_recall'), ('flip_flop_ignore', 0.5, 'flip_flop'),
    ('min_length', 3, 'copy')])
def test_a_synthetic_tasks_own_field_is_refused_for_the_other_tasks(field, value, task):
  """data.synthetic holds every task's sizes; one that only some tasks read, changed for a
  task that ignores it, is refused naming the tasks that read it."""
  from configs import synthetic as synthetic_config  # pylint: disable=import-outside-toplevel
  config = synthetic_config.get_config(task)
  config.data.synthetic[field] = value
  resolve.validate(config)  # Its own task reads it.
  other = 'passkey' if task == 'copy' else 'copy'
  config = synthetic_config.get_config(other)
  config.data.synthetic[field] = value
  with pytest.raises(errors.ConfigError, match=rf"config.data.synthetic.{field}={value!r} is read "
                     rf"only by the synthetic tasks? .*{task}.*data.name='synthetic/{other}'"):
    resolve.validate(config)


def test_key_digits_is_read_by_ruler_tasks_only_in_text():
  """A RULER task's value is a number of key_digits digits only with filler='text'; with the
  task's own words a value is one word, so key_digits is refused there (passkey reads it with
  either filler)."""
  from configs import synthetic as synthetic_config  # pylint: disable=import-outside-toplevel
  config = synthetic_config.get_config('niah_multikey')
  config.data.synthetic.key_digits = 3
  with pytest.raises(errors.ConfigError, match=r"key_digits=3 is read only by the synthetic "
                     r"task passkey, and RULER's tasks with filler='text'.*filler=text"):
    resolve.check_fields(config)
  config.data.synthetic.filler = 'text'
  resolve.check_fields(config)


def test_an_unread_value_a_run_was_trained_with_does_not_stop_its_evaluation():
  """A run trained with a field its task ignores (before such fields were refused) is still
  evaluated: the value saved with it is not a change; another value given now is."""
  from configs import synthetic as synthetic_config  # pylint: disable=import-outside-toplevel
  saved = synthetic_config.get_config('copy')
  saved.data.synthetic.needles = 8
  config = ml_collections.ConfigDict(saved.to_dict())
  with pytest.raises(errors.ConfigError, match='needles=8 is read only by'):
    resolve.check_fields(config)  # A new run.
  resolve.check_fields(config, saved)  # The trained run's own value.
  config.data.synthetic.needles = 9
  with pytest.raises(errors.ConfigError, match='needles=9 is read only by'):
    resolve.check_fields(config, saved)


def test_a_changed_field_the_run_reads_is_accepted_and_reaches_its_reader():
  config = test_config.get_config('mlm')
  config.data.mask_rate = 0.3
  resolve.validate(config)
  assert tasks.for_config(config).rate == 0.3


def test_a_training_run_is_checked_once_before_anything_is_built(tmp_path, monkeypatch,
                                                                 data_dir):
  """Every field's spec and the position scheme's checks run once per training run, in
  roformer/resolve.py; building the model checks nothing again."""
  calls = {'schema': 0, 'positions': 0}
  schema_check, positions_validate = config_schema.check, positions.validate

  def counted(name, fn):
    def wrapped(*args, **kwargs):
      calls[name] += 1
      return fn(*args, **kwargs)
    return wrapped
  monkeypatch.setattr(config_schema, 'check', counted('schema', schema_check))
  monkeypatch.setattr(positions, 'validate', counted('positions', positions_validate))
  config = test_config.get_config()
  config.data.data_dir = data_dir
  run = resolve.for_training(config, str(tmp_path / 'run'))
  assert calls == {'schema': 1, 'positions': 1}  # One attention direction: causal.
  assert run.resume_step is None and run.init_from is None
  assert run.config.model.vocab_size == run.tokenizer.vocab_size
  trainer = trainer_lib.Trainer(run.config, run.mesh)  # What the loop builds from the run.
  trainer.init_state()
  assert calls == {'schema': 1, 'positions': 1}


def test_a_run_written_before_a_field_existed_resumes(tmp_path):
  """A workdir whose config.json predates fields that exist now (here model.scan_layers,
  eval.beam_size and the synthetic group) is the same run as the command's: the saved config
  is brought up to date before the resume check compares them, and nothing is recorded as
  changed. A field that may not change on resume is still refused."""
  config = test_config.get_config()
  workdir = str(tmp_path)
  saved = config.to_dict()
  del saved['model']['scan_layers'], saved['eval']['beam_size'], saved['data']['synthetic']
  with open(os.path.join(workdir, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(saved, f)
  workdir_lib.check_workdir(config, workdir, ckpt_step=6)
  workdir_lib.save_config(config, workdir, resumed_from=6)
  assert sorted(os.listdir(workdir)) == ['config.json']  # No config.resume-6.json.
  config.seed = 3
  with pytest.raises(errors.ConfigError, match=r'seed: 0 vs 3'):
    workdir_lib.check_workdir(config, workdir, ckpt_step=6)


def test_a_resume_back_to_the_first_settings_is_what_the_run_trains_under(tmp_path):
  """Resumed with more steps, then with config.json's steps again: the run's current config
  (files.current_config, which the sweep and the report read) is config.json's again."""
  config = test_config.get_config()
  workdir = str(tmp_path)
  workdir_lib.save_config(config, workdir, resumed_from=None)
  first = config.train.steps
  config.train.steps = first + 10
  workdir_lib.save_config(config, workdir, resumed_from=2)
  assert files.current_config(workdir)['train']['steps'] == first + 10
  config.train.steps = first
  workdir_lib.save_config(config, workdir, resumed_from=4)
  assert files.current_config(workdir)['train']['steps'] == first
  assert sorted(os.listdir(workdir)) == ['config.json', 'config.resume-2.json',
                                         'config.resume-4.json']


@pytest.mark.parametrize('fields,said,other', [
    ({'model.layer_kinds': ('rope', 'none'), 'model.position.kind': 'alibi'},
     "position.kind='alibi' is not read", ('model.position.kind', 'xl')),
    ({'model.layer_rope_bases': (1e4, 1e6), 'model.position.rope.base': 500.0},
     'rope.base=500 is not read', ('model.position.rope.base', 700.0)),
    ({'model.position.rope.remap.window': 16}, 'remap.window=16 is read by the remap methods',
     ('model.position.rope.remap.window', 32)),
    ({'model.attention.kind': 'favor', 'model.attention.rope_mode': 'features',
      'model.position.kind': 'none'}, 'rope_mode=features rotates the random features', None),
])
def test_a_setting_left_unread_by_the_other_fields_is_refused_unless_the_run_was_saved_with_it(
    tmp_path, fields, said, other):
  """A setting that another field makes unread (a kind beside layer_kinds, a base beside
  layer_rope_bases, a remap option without its method, rope_mode=features without RoPE) is
  refused for a new run; a run saved with it before it was refused is still evaluated,
  resumed or continued (its own value, as it ran), and another value given now is refused."""
  import kinds  # pylint: disable=import-outside-toplevel
  config = test_config.get_config()
  kinds.set_fields(config, fields)
  with pytest.raises(errors.ConfigError, match=said):
    resolve.check_fields(config)
  saved = ml_collections.ConfigDict(config.to_dict())
  resolve.check_fields(config, saved)  # An evaluation of the run saved with it.
  workdir = tmp_path / 'run'
  workdir.mkdir()
  saved_config.save(saved, str(workdir))
  resolve.check_rerun(config, str(workdir))  # Its resume.
  follower = ml_collections.ConfigDict(config.to_dict())
  follower.init_from = str(workdir)
  resolve.check_fields(follower, resolve._followed(follower, str(tmp_path / 'new')))  # pylint: disable=protected-access
  if other:
    kinds.set_fields(config, dict([other]))
    with pytest.raises(errors.ConfigError, match='is not read|is read by'):
      resolve.check_fields(config, saved)


def test_a_classifier_refuses_lengths_it_would_not_score():
  """A classifier scores each example at data.seq_len: eval.length_multipliers set by hand
  would be recorded and ignored, so it is refused naming the way to score another length."""
  from configs import classify  # pylint: disable=import-outside-toplevel
  config = classify.get_config()
  resolve.validate(config)
  config.eval.length_multipliers = (1, 2)
  with pytest.raises(errors.ConfigError, match=r'length_multipliers=\(1, 2\): a classifier scores '
                     r'each example at data.seq_len.*--config.data.seq_len=N --out'):
    resolve.validate(config)


def test_an_unread_value_the_config_file_set_is_refused_with_the_flag_that_resets_it():
  """configs/performer.py sets FAVOR+'s redraw_interval; switched to softmax attention, that
  value is unread and refused, and since no override of the user's set it, the fix gives the
  flag that puts the default back (which then runs)."""
  from configs import performer  # pylint: disable=import-outside-toplevel
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  config = performer.get_config('rope')
  config.model.attention.kind = 'softmax'
  with pytest.raises(errors.ConfigError, match=r'where the config file sets it, '
                     r'--config.model.attention.redraw_interval=1000\)') as e:
    resolve.check_fields(config)
  flag = re.search(r'--config\.(\S+)=(\S+?)\)', str(e.value))
  config_args.apply(config, [(flag.group(1), flag.group(2))])
  resolve.validate(config)
