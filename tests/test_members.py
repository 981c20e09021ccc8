"""Runs that differ only in their seed, trained by one program (train.py --seeds): each member
ends where the same run on its own ends and writes what it writes; an interrupted group resumes;
a member that fails is named and does not take the others with it."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import processes
import pytest

from configs import synthetic
from roformer import checkpoint as checkpoint_lib
from roformer import cli
from roformer import config_args
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import metrics
from roformer import members as members_lib
from roformer import reliability
from roformer import resolve
from roformer import saved_config
from roformer import sharding
from roformer import sweeps
from roformer import trainer as trainer_lib
from roformer.data import mixture

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 6


def tiny(kind='rope', **train):
  """configs/synthetic.py:copy at a few steps: rows generated from a seed, no files."""
  config = synthetic.get_config(f'copy,{kind}')
  config.data.seq_len = 16
  config.data.synthetic.eval_examples = 16
  config.model.update(d_model=32, d_ff=64)
  config.train.update(batch_size=8, steps=STEPS, warmup_steps=1, log_every=1, eval_every=3,
                      checkpoint_every=3, eval_batches=1, **train)
  config.eval.update(batch_size=8, length_multipliers=(1,))  # Validation's program again.
  return config


def outputs(workdir: str) -> dict:
  """What a run leaves behind: its train and validation metrics, its evaluation, and its final
  parameters."""
  records = metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  saved = saved_config.load(workdir)
  trainer = trainer_lib.Trainer(saved, sharding.make_mesh(saved.mesh))
  params = trainer_lib.restore_params(trainer, workdir, STEPS)
  with open(os.path.join(workdir, 'eval_results.json'), encoding='utf-8') as f:
    evaluation = json.load(f)
  return {'train': {r['step']: (r['loss'], r['grad_norm']) for r in records
                    if r['split'] == 'train'},
          'validation': {r['step']: r['loss'] for r in records if r['split'] == 'validation'},
          'eval': [(row['loss'], row['accuracy'])
                   for row in evaluation['splits']['validation']['lengths']],
          'params': {sharding.path_str(path): np.asarray(value) for path, value in
                     jax.tree_util.tree_flatten_with_path(params)[0]}}


def assert_same(got: dict, want: dict, rtol: float) -> None:
  assert sorted(got['train']) == list(range(1, STEPS + 1)) == sorted(want['train'])
  for step in want['train']:
    np.testing.assert_allclose(got['train'][step], want['train'][step], rtol=rtol, atol=1e-6)
  assert sorted(got['validation']) == sorted(want['validation']) == [3, 6]
  np.testing.assert_allclose(list(got['validation'].values()),
                             list(want['validation'].values()), rtol=rtol)
  np.testing.assert_allclose(got['eval'], want['eval'], rtol=rtol, atol=1e-6)
  # Parameters: equal to float rounding, except that Adam turns the rounding-level gradient of
  # a parameter whose exact gradient is zero (a key bias under softmax adds the same q . b to
  # every logit of a row) into steps of the learning rate: such a parameter may differ by up to
  # a step while everything the model computes agrees (the losses above).
  # With rtol=0 (the same program), a parameter may still differ by a rounding step of its own
  # float32 value: the embedding's gradient is a scatter-add, whose order of addition XLA:CPU
  # does not promise.
  step = tiny().train.learning_rate if rtol else 0.0
  assert sorted(got['params']) == sorted(want['params'])
  for path, value in want['params'].items():
    if rtol:
      np.testing.assert_allclose(got['params'][path], value, rtol=rtol, atol=step, err_msg=path)
    else:
      np.testing.assert_array_max_ulp(got['params'][path], value, maxulp=2)


class _Alone(dict):
  """(kind, seed) -> the outputs of that point trained and evaluated on its own, as a sweep's
  points were before (train.py, then eval.py's evaluation); each trained when first asked for."""

  def __init__(self, root):
    super().__init__()
    self.root = root

  def __missing__(self, key):
    kind, seed = key
    config = tiny(kind)
    config.seed = seed
    workdir = str(self.root / f'{kind},seed={seed}')
    loop.train_and_evaluate(config, workdir, eval_splits=('validation',))
    self[key] = outputs(workdir)
    return self[key]


@pytest.fixture(scope='module')
def alone(tmp_path_factory):
  return _Alone(tmp_path_factory.mktemp('alone'))


@pytest.mark.parametrize('kind', ['rope', pytest.param('alibi', marks=pytest.mark.slow)])
def test_each_vmapped_member_ends_where_its_run_alone_ends(alone, tmp_path, kind):
  """Vmapped, the members' arithmetic is batched: equal to float rounding. (Stepped one by one
  they run the very program of a run alone: test_an_interrupted_group_resumes_... .) The
  group's validation pass compiled ahead (train.compile_ahead) changes nothing."""
  lasts = loop.train_seeds(tiny(kind, compile_ahead='on'), str(tmp_path / 'seed={seed}'), [0, 1],
                           eval_splits=('validation',), vmapped=True)
  assert [sorted(last) for last in lasts] == [['eval', 'train', 'validation']] * 2
  for seed in (0, 1):
    got = outputs(str(tmp_path / f'seed={seed}'))
    assert_same(got, alone[kind, seed], rtol=1e-5)
    with open(tmp_path / f'seed={seed}' / 'config.json', encoding='utf-8') as f:
      assert json.load(f)['seed'] == seed
    with open(tmp_path / f'seed={seed}' / 'eval_results.json', encoding='utf-8') as f:
      [ran_on] = json.load(f)['environments']  # Each member's evaluation, recorded.
    assert ran_on['splits'] == ['validation'] and ran_on['devices'] == f'{jax.device_count()} x cpu'
  # The two seeds really differ (initialisation and data order).
  assert alone[kind, 0]['train'][1] != alone[kind, 1]['train'][1]


def test_the_evaluation_in_process_is_eval_pys(alone, tmp_path):
  """`train.py --eval_splits` writes the eval_results.json that eval.py writes afterwards, also
  with its evaluation passes compiled ahead in the background (train.compile_ahead)."""
  workdir = str(tmp_path / 'rope,seed=0')
  config = tiny('rope', compile_ahead='on')
  loop.train_and_evaluate(config, workdir, eval_splits=('validation',))
  with open(os.path.join(workdir, 'eval_results.json'), encoding='utf-8') as f:
    in_process = json.load(f)
  processes.run(['eval.py', f'--workdir={workdir}', '--splits=validation',
                 '--out=eval_again.json'], cwd=REPO, check=True)  # Same devices.
  with open(os.path.join(workdir, 'eval_again.json'), encoding='utf-8') as f:
    again = json.load(f)
  for results in (again, in_process):  # When each started: all they may differ in.
    [ran_on] = results['environments']
    ran_on['started'] = ''
  assert again == in_process


def test_an_interrupted_group_resumes_where_it_stopped(alone, tmp_path):
  """Stepped one by one (the CPU's default), members run the program of a run alone: after a
  stop and a resume each equals its run alone, every metric to the bit."""
  template = str(tmp_path / 'seed={seed}')
  lasts = loop.train_seeds(tiny('rope'), template, [0, 1], stop_at=3, vmapped=False)
  assert all('eval' not in last for last in lasts)  # Not at its last step: no evaluation.
  for seed in (0, 1):
    assert checkpoint_lib.latest_step(os.path.join(template.format(seed=seed),
                                                   'checkpoints')) == 3
  loop.train_seeds(tiny('rope'), template, [0, 1], eval_splits=('validation',), vmapped=False)
  for seed in (0, 1):
    assert_same(outputs(template.format(seed=seed)), alone['rope', seed], rtol=0)


@pytest.mark.slow  # A group's resume by default: test_an_interrupted_group_resumes_...
def test_members_at_different_steps_are_trained_one_by_one(alone, tmp_path):
  """A stop between the members' saves leaves them at different steps: each then resumes on
  its own, and both end as their runs alone."""
  template = str(tmp_path / 'seed={seed}')
  loop.train_seeds(tiny('rope'), template, [0, 1], stop_at=3)
  config = tiny('rope')
  config.seed = 1
  loop.train_and_evaluate(config, template.format(seed=1))  # Seed 1 goes on alone.
  loop.train_seeds(tiny('rope'), template, [0, 1], eval_splits=('validation',))
  for seed in (0, 1):
    assert_same(outputs(template.format(seed=seed)), alone['rope', seed], rtol=1e-6)


def _group_of_three(tmp_path, kind='rope', eval_examples=20, data_seeds=(0, 1, 2)):
  """Three members' runs (seeds 0-2, each reading the validation rows of its own data seed),
  their trainer, and their vmapped group; the split's 20 rows are batches of 8, 8 and 4
  (padded)."""
  config = tiny(kind)
  config.data.synthetic.eval_examples = eval_examples
  config.train.eval_batches = 3
  runs = []
  for seed, data_seed in zip((0, 1, 2), data_seeds):
    member = config.copy_and_resolve_references()
    member.seed, member.data.synthetic.seed = seed, data_seed
    runs.append(resolve.for_training(member, str(tmp_path / f'seed={seed}')))
  trainer = trainer_lib.Trainer(config, runs[0].mesh)
  states = [trainer.init_state(seed) for seed in (0, 1, 2)]
  return runs, trainer, states, members_lib.Members(trainer, [0, 1, 2], states, vmapped=True)


def _group_validation(trainer, group, runs):
  return evaluate.group_validation(trainer, group, [r.sources['validation'] for r in runs],
                                   [r.tokenizer for r in runs])


@pytest.mark.parametrize('kind', ['rope', 'alibi'])
def test_a_vmapped_groups_validation_is_each_members_in_one_launch_per_batch(tmp_path, kind,
                                                                            monkeypatch):
  """evaluate.group_validation gives each member what `validation` gives its parameters on its
  own split (a short last batch padded), from one launch per batch for the whole group and no
  launch of the one-member program."""
  runs, trainer, states, group = _group_of_three(tmp_path, kind)
  alone = [evaluate.validation(trainer, state['params'], run.sources['validation'], run.tokenizer)
           for state, run in zip(states, runs)]
  launches = []
  eval_sums = group.eval_sums
  monkeypatch.setattr(group, 'eval_sums', lambda batches: launches.append(
      [len(b['inputs']) for b in batches]) or eval_sums(batches))
  monkeypatch.setattr(trainer, 'eval_step', None)  # The one-member program is not called.
  together = _group_validation(trainer, group, runs)
  assert launches == [[8] * 3] * 3  # Batches of 8, 8 and 4 rows, the last padded to 8.
  assert [sorted(r) for r in together] == [sorted(r) for r in alone]
  for got, want in zip(together, alone):
    assert got['tokens'] == want['tokens'] > 0
    np.testing.assert_allclose([got['loss'], got['accuracy']], [want['loss'], want['accuracy']],
                               rtol=1e-5)
  # Each member's parameters and rows differ, and so do their metrics: each got its own.
  assert len({round(r['loss'], 6) for r in together}) == 3


def test_group_validation_leaves_to_each_member_what_it_does_not_batch(tmp_path, monkeypatch):
  """None (then `validation` member by member) for a group stepped one by one, a task that
  decodes or scores per example, a mixture, and members' splits of different lengths."""
  runs, trainer, states, group = _group_of_three(tmp_path)
  one_by_one = members_lib.Members(trainer, [0, 1, 2], states, vmapped=False)
  assert _group_validation(trainer, one_by_one, runs) is None
  for attribute in ('decodes', 'per_example'):
    with monkeypatch.context() as patch:
      patch.setattr(trainer.task, attribute, True)
      assert _group_validation(trainer, group, runs) is None
  blend = object.__new__(mixture.Mixture)
  assert evaluate.group_validation(trainer, group, [blend] * 3, [runs[0].tokenizer] * 3) is None
  config = tiny('rope')
  config.data.synthetic.eval_examples = 12  # Two batches where the others have three.
  config.seed = 2
  shorter = resolve.for_training(config, str(tmp_path / 'shorter'))
  assert _group_validation(trainer, group, runs[:2] + [shorter]) is None


def test_a_member_that_diverges_is_named_and_the_others_finish(tmp_path, monkeypatch):
  """Member 1's third step is made non-finite: it stops with its batch saved and its last
  checkpoint kept; member 0 trains to the end and is evaluated; the error names member 1."""
  split = members_lib.Members.split
  calls = {'n': 0}

  def poisoned(self, fetched):
    out = split(self, fetched)
    calls['n'] += 1
    if calls['n'] == 3 and out[1] is not None:
      out[1] = {**out[1], 'nonfinite': np.int32(1)}
    return out
  monkeypatch.setattr(members_lib.Members, 'split', poisoned)
  template = str(tmp_path / 'seed={seed}')
  with pytest.raises(reliability.MembersFailed, match=r"1 of 2 runs failed: .*seed=1: step 3: "
                     r"the loss or gradient norm is not finite.*The others finished: .*seed=0"):
    loop.train_seeds(tiny('rope'), template, [0, 1], eval_splits=('validation',))
  zero, one = template.format(seed=0), template.format(seed=1)
  assert os.path.exists(os.path.join(zero, 'eval_results.json'))
  assert checkpoint_lib.latest_step(os.path.join(zero, 'checkpoints')) == STEPS
  assert not os.path.exists(os.path.join(one, 'eval_results.json'))
  assert os.path.exists(os.path.join(one, 'nonfinite_step_3.npz'))
  assert checkpoint_lib.latest_step(os.path.join(one, 'checkpoints')) is None  # Step 3 unsaved.


def test_a_vmapped_groups_living_member_is_validated_as_its_own_after_another_fails(
    alone, tmp_path, monkeypatch):
  """Member 0 of a vmapped group is made to diverge at its second step: member 1 still ends
  where its run alone ends, its validations included (its own metrics, not member 0's)."""
  split = members_lib.Members.split
  calls = {'n': 0}

  def poisoned(self, fetched):
    out = split(self, fetched)
    calls['n'] += 1
    if calls['n'] == 2:
      out[0] = {**out[0], 'nonfinite': np.int32(1)}
    return out
  monkeypatch.setattr(members_lib.Members, 'split', poisoned)
  template = str(tmp_path / 'seed={seed}')
  with pytest.raises(reliability.MembersFailed, match=r'1 of 2 runs failed: .*seed=0: step 2'):
    loop.train_seeds(tiny('rope'), template, [0, 1], eval_splits=('validation',), vmapped=True)
  assert_same(outputs(template.format(seed=1)), alone['rope', 1], rtol=1e-5)


def test_a_member_whose_workdir_is_unusable_is_named_and_the_others_finish(tmp_path):
  template = str(tmp_path / 'seed={seed}')
  with open(template.format(seed=1), 'w', encoding='utf-8') as f:
    f.write('not a directory')
  with pytest.raises(reliability.MembersFailed, match=r'1 of 2 runs failed: .*seed=1: '
                     r'--workdir=.* is a file.*The others finished: .*seed=0'):
    loop.train_seeds(tiny('rope'), template, [0, 1], eval_splits=('validation',))
  assert os.path.exists(os.path.join(template.format(seed=0), 'eval_results.json'))


def test_bad_group_arguments_are_one_clear_error(tmp_path):
  with pytest.raises(errors.ConfigError, match=r'each needs its own. Fix: put \{seed\}'):
    loop.train_seeds(tiny(), str(tmp_path / 'shared'), [0, 1])
  with pytest.raises(errors.ConfigError, match='distinct seeds'):
    loop.train_seeds(tiny(), str(tmp_path / '{seed}'), [1, 1])
  with pytest.raises(errors.ConfigError, match=r"'tset' is not a split"):
    loop.train_seeds(tiny(), str(tmp_path / '{seed}'), [0, 1], eval_splits=('tset',))
  assert not os.listdir(tmp_path)


def test_a_sweep_groups_exactly_the_points_that_differ_only_in_their_seed():
  sweep = sweeps.load('configs/sweeps/length.py:passkey,copy,rope,alibi')
  groups = sweeps.seed_groups(sweep, sweep.points)
  assert [g.name for g in groups] == ['passkey,rope,seed={seed}', 'passkey,alibi,seed={seed}',
                                      'copy,rope,seed={seed}', 'copy,alibi,seed={seed}']
  assert all([p.fields['seed'] for p in g.points] == [0, 1, 2, 3, 4] for g in groups)
  context = sweeps.load('configs/sweeps/context_extension.py')  # Points that start from others.
  assert all(len(g.points) == 1 for g in sweeps.seed_groups(context, context.points))


def _copy_flags(workdir, extra) -> list[str]:
  return [f'--workdir={workdir}', '--config.train.steps=3', '--config.model.d_model=32',
          '--config.train.batch_size=8', '--config.train.warmup_steps=1',
          '--config.train.log_every=1', '--config.data.seq_len=16'] + list(extra)


def _losses(workdir) -> list[float]:
  return [r['loss'] for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] == 'train']


def _cached_losses(tmp_path, name: str, extra: list[str]) -> list[float]:
  """The train losses of a 3-step copy run in its own process (the test's devices), with
  tmp_path/cache as JAX's persistent compilation cache, small programs included (as a sweep's
  children have it)."""
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / 'cache'),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0')
  subprocess.run([sys.executable, 'train.py', '--config=configs/synthetic.py:copy'] +
                 _copy_flags(tmp_path / name, extra), cwd=REPO, env=env, check=True,
                 capture_output=True)
  return _losses(tmp_path / name)


def _losses_alone(tmp_path, name: str, extra: list[str]) -> list[float]:
  """The same run in this process, which has no persistent cache."""
  _, overrides = cli.split_argv(['train.py'] + _copy_flags(tmp_path / name, extra))
  config = config_args.load('configs/synthetic.py:copy', overrides)
  loop.train_and_evaluate(config, str(tmp_path / name))
  return _losses(tmp_path / name)


@pytest.mark.slow  # Two processes and one run here; the sweep test shares a cache by default.
def test_the_compilation_cache_serves_no_program_to_other_options(tmp_path):
  """Two runs of the same shapes that differ in one option (RoPE's base, a constant of the
  program) share the persistent cache: the second gets its own program, and ends as it does
  with no cache."""
  other = ['--config.model.position.rope.base=500.0']
  base = _cached_losses(tmp_path, 'base', [])
  with_cache = _cached_losses(tmp_path, 'other', other)
  assert os.listdir(tmp_path / 'cache') and with_cache != base
  assert with_cache == _losses_alone(tmp_path, 'other_alone', other)


@pytest.mark.slow
def test_the_compilation_cache_serves_a_program_only_to_its_own_shapes_and_options(tmp_path):
  variants = {'base': [], 'longer': ['--config.data.seq_len=24'],
              'other_base': ['--config.model.position.rope.base=500.0']}
  cached = {name: _cached_losses(tmp_path, name, extra) for name, extra in variants.items()}
  cached['base_again'] = _cached_losses(tmp_path, 'base_again', [])  # Served from it.
  assert cached['base_again'] == cached['base']
  assert cached['longer'] != cached['base'] != cached['other_base']
  for name, extra in variants.items():
    assert _losses_alone(tmp_path, f'{name}_alone', extra) == cached[name], name
