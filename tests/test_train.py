"""Training end to end on the tiny config: meshes, resume, evaluation of restored checkpoints."""

import json
import logging
import math
import os
import shutil
import subprocess

import numpy as np
import kinds
import processes
import pytest

from configs import test as test_config
from roformer import checkpoint
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import metrics
from roformer import optim
from roformer import provenance
from roformer import saved_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_losses(workdir):
  records = metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  return {r['step']: r['loss'] for r in records if r['split'] == 'train'}


def small_config(data_dir, **train):
  """8 steps with dropout on (its keys must follow the step across resumes and meshes) and an
  eval batch larger than the train batch."""
  cfg = test_config.get_config()
  cfg.data.data_dir = data_dir
  cfg.model.dropout = 0.1
  cfg.eval.batch_size = 16
  cfg.train.update(steps=8, eval_every=4, checkpoint_every=4, **train)
  return cfg


@pytest.fixture(scope='module')
def trained(tmp_path_factory, data_dir):
  """One uninterrupted 8-step run on all 8 devices."""
  workdir = str(tmp_path_factory.mktemp('run') / 'lm')
  cfg = small_config(data_dir)
  last = loop.train_and_evaluate(cfg, workdir)
  return cfg, workdir, last


def test_training_learns_and_writes_its_outputs(trained):
  _, workdir, last = trained
  losses = train_losses(workdir)
  assert sorted(losses) == list(range(1, 9))
  validation = {r['step']: r['loss'] for r in metrics.read_jsonl(
      os.path.join(workdir, 'metrics.jsonl')) if r['split'] == 'validation'}
  assert sorted(validation) == [4, 8] and validation[8] < validation[4] - 0.05  # It learns.
  for name in ('config.json', 'metrics.jsonl', 'tensorboard', 'checkpoints/8'):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert not os.path.exists(os.path.join(workdir, 'best'))  # Best-by-BLEU is translation's.
  saved = saved_config.load(workdir)
  assert saved.model.position.kind == 'rope' and saved.model.vocab_size > 0
  assert math.isfinite(last['validation']['loss'])


def test_eight_device_mesh_matches_one_device(trained, tmp_path, data_dir):
  cfg = small_config(data_dir)
  cfg.mesh.num_devices = 1
  loop.train_and_evaluate(cfg, str(tmp_path / 'one'))
  one, eight = train_losses(str(tmp_path / 'one')), train_losses(trained[1])
  np.testing.assert_allclose([one[s] for s in sorted(one)], [eight[s] for s in sorted(eight)],
                             rtol=2e-5)


@pytest.mark.slow  # The same property end to end: tests/test_kill_points.py, test_reliability.py.
def test_resume_continues_the_same_trajectory(trained, tmp_path, data_dir):
  workdir = str(tmp_path / 'resumed')
  loop.train_and_evaluate(small_config(data_dir), workdir, stop_at=3)
  assert sorted(train_losses(workdir)) == [1, 2, 3]
  loop.train_and_evaluate(small_config(data_dir), workdir)  # Same command again.
  resumed, straight = train_losses(workdir), train_losses(trained[1])
  assert sorted(resumed) == list(range(1, 9))
  np.testing.assert_allclose([resumed[s] for s in range(4, 9)],
                             [straight[s] for s in range(4, 9)], rtol=1e-5)


def test_a_run_resumed_at_or_past_its_last_step_says_it_has_nothing_to_train(
    trained, tmp_path, data_dir, caplog):
  workdir = str(tmp_path / 'finished')
  shutil.copytree(trained[1], workdir)
  before = train_losses(workdir)
  fewer = small_config(data_dir)
  fewer.train.steps = 6
  with caplog.at_level(logging.INFO, logger='roformer'):
    loop.train_and_evaluate(fewer, workdir)
  assert ('The run is trained to step 8, past config.train.steps=6: no step to train.'
          in caplog.text)
  assert train_losses(workdir) == before
  starts = metrics.read_jsonl(os.path.join(workdir, provenance.ENVIRONMENT_FILE))
  assert [start['step'] for start in starts] == [0]  # A start that trains nothing adds none.


def test_a_scanned_run_saves_the_loops_layout_and_resumes_as_a_loop(trained, tmp_path,
                                                                    data_dir):
  """Stored stacked, the parameters and AdamW's moments are saved per block: the checkpoint has
  the loop's paths and shapes, and the run resumed with the loop (scan_layers=False, which may
  change on resume) follows the uninterrupted loop run's losses, dropout included."""
  workdir = str(tmp_path / 'scanned')
  cfg = small_config(data_dir)
  cfg.model.scan_layers = True
  loop.train_and_evaluate(cfg, workdir, stop_at=4)

  def shapes(run):
    ckpt = checkpoint.Checkpointer(os.path.join(run, 'checkpoints'))
    try:
      return ckpt.param_shapes(4)
    finally:
      ckpt.close()
  assert shapes(workdir) == shapes(trained[1])
  loop.train_and_evaluate(small_config(data_dir), workdir)
  resumed, straight = train_losses(workdir), train_losses(trained[1])
  np.testing.assert_allclose([resumed[s] for s in range(1, 9)],
                             [straight[s] for s in range(1, 9)], rtol=1e-5)
  starts = metrics.read_jsonl(os.path.join(workdir, provenance.ENVIRONMENT_FILE))
  assert [start['step'] for start in starts] == [0, 4]  # Each start adds its line.


def _ran_here(record: dict) -> None:
  """A provenance record (a training start's, an evaluation's) is this process's: the checkout,
  the software, the devices and XLA_FLAGS (the tests force 8 CPU devices through it, which no
  config holds), and the host."""
  import jax  # pylint: disable=import-outside-toplevel
  head = subprocess.run(['git', '-C', REPO, 'rev-parse', '--short', 'HEAD'], capture_output=True,
                        text=True, check=True).stdout.strip()
  assert record['commit'].split('+')[0] == head  # +changes: edited.
  assert record['packages']['jax'] == jax.__version__ and 'flax' in record['packages']
  assert record['backend'] == 'cpu' and record['devices'] == f'{jax.device_count()} x cpu'
  assert record['variables']['XLA_FLAGS'] == os.environ['XLA_FLAGS']
  assert record['host']['cores'] == os.cpu_count() and record['host']['cpu']


def test_a_run_records_the_commit_software_devices_and_xla_flags_it_ran_with(trained):
  """A run's environment.jsonl: what decides its numbers beside its config, as this process
  has it."""
  _, workdir, _ = trained
  start, = metrics.read_jsonl(os.path.join(workdir, provenance.ENVIRONMENT_FILE))
  assert start['step'] == 0
  _ran_here(start)


def test_eval_restores_what_train_saved(trained):
  cfg, workdir, last = trained
  saved = saved_config.load(workdir)
  saved.eval.max_batches = cfg.train.eval_batches
  results = evaluate.evaluate_workdir(saved, workdir)
  at_1x = results['splits']['validation']['lengths'][0]
  assert results['step'] == 8 and at_1x['length'] == cfg.data.seq_len
  np.testing.assert_allclose(at_1x['loss'], last['validation']['loss'], rtol=1e-6)
  assert [r['length'] for r in results['splits']['test']['lengths']] == [32, 64]
  assert [r['multiplier'] for r in results['splits']['test']['lengths']] == [1, 2]
  np.testing.assert_allclose(at_1x['perplexity'], math.exp(at_1x['loss']), rtol=1e-9)
  # Evaluated with data.seq_len doubled: the rows' multipliers are of the trained length.
  longer = saved_config.load(workdir)
  longer.data.seq_len, longer.eval.max_batches = 64, 1
  rows = evaluate.evaluate_workdir(longer, workdir, splits=('test',))['splits']['test']['lengths']
  assert [(r['length'], r['multiplier']) for r in rows] == [(64, 2), (128, 4)]
  # An earlier checkpoint is a different model.
  earlier = evaluate.evaluate_workdir(saved, workdir, step=4)
  assert earlier['splits']['validation']['lengths'][0]['loss'] != at_1x['loss']


def test_eval_cli_writes_results(trained):
  _, workdir, _ = trained
  proc = processes.run(['eval.py', f'--workdir={workdir}',
                        '--config.eval.length_multipliers=(1,)'], cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'validation' in proc.stdout and 'unigram' in proc.stdout
  with open(os.path.join(workdir, 'eval_results.json'), encoding='utf-8') as f:
    results = json.load(f)
  assert [r['multiplier'] for r in results['splits']['validation']['lengths']] == [1]


def test_unigram_cross_entropy_by_hand():
  train, val = np.array([3.0, 1.0, 0.0]), np.array([1.0, 1.0, 0.0])
  p = np.array([4, 2, 1]) / 7  # Add-one smoothing.
  assert metrics.unigram_cross_entropy(train, val) == pytest.approx(
      -(np.log(p[0]) + np.log(p[1])) / 2)


def test_rsqrt_schedule():
  tc = test_config.get_config().train
  tc.update(steps=100, warmup_steps=10, learning_rate=1e-3, schedule='rsqrt')
  sched = optim.make_schedule(tc)
  assert float(sched(10)) == pytest.approx(1e-3)
  assert float(sched(40)) == pytest.approx(1e-3 * math.sqrt(10 / 40), rel=1e-5)


def test_schedule_warmup_and_cosine_endpoints():
  tc = test_config.get_config().train
  tc.update(steps=100, warmup_steps=10, learning_rate=2e-3, end_lr_fraction=0.1)
  sched = optim.make_schedule(tc)
  assert float(sched(0)) == 0.0 and float(sched(5)) == pytest.approx(1e-3)
  assert float(sched(10)) == pytest.approx(2e-3)
  mid = 10 + 45  # Half way through the decay: lr = end + (peak - end) / 2.
  assert float(sched(mid)) == pytest.approx(2e-4 + (2e-3 - 2e-4) / 2, rel=1e-4)
  assert float(sched(100)) == pytest.approx(2e-4, rel=1e-4)


def test_wsd_schedule_against_its_formula():
  tc = test_config.get_config().train
  tc.update(steps=100, warmup_steps=10, learning_rate=2e-3, end_lr_fraction=0.1,
            schedule='wsd', decay_steps=30)
  sched = optim.make_schedule(tc)
  def reference(s):  # float64: warmup, the peak held to step 70, then 1 - sqrt down to 2e-4.
    if s < 10:
      return 2e-3 * s / 10
    if s < 70:
      return 2e-3
    return 2e-3 * (0.1 + 0.9 * (1 - math.sqrt((s - 70) / 30)))
  for s in (0, 5, 10, 40, 69, 70, 71, 77.5, 85, 99, 100):
    assert float(sched(s)) == pytest.approx(reference(s), rel=1e-5, abs=1e-9), s
  # The last step (100) updates at count 99: its rate is 1 - sqrt(29/30) short of the end.
  last = 2e-4 + (2e-3 - 2e-4) * (1 - math.sqrt(29 / 30))
  assert float(sched(99)) == pytest.approx(last, rel=1e-5) and last > 2e-4


def test_wsd_stable_phase_is_a_constant_rate_run_continued():
  """A wsd run's steps before its decay are those of a constant-rate run of any length, so a
  constant-rate checkpoint resumes into it."""
  const = test_config.get_config().train
  const.update(steps=40, warmup_steps=10, learning_rate=1e-3, end_lr_fraction=1.0)
  wsd = test_config.get_config().train
  wsd.update(steps=90, warmup_steps=10, learning_rate=1e-3, schedule='wsd', decay_steps=30)
  a, b = optim.make_schedule(const), optim.make_schedule(wsd)
  for s in range(0, 41):
    assert float(a(s)) == pytest.approx(float(b(s)), rel=1e-6), s
  assert float(b(75)) < 1e-3


def test_eval_refuses_a_config_that_does_not_match_the_checkpoint(trained):
  from roformer import errors
  _, workdir, _ = trained
  saved = saved_config.load(workdir)
  saved.model.d_ff = 48
  with pytest.raises(errors.ConfigError, match=r'does not match.*model\.d_ff: 64 vs 48'):
    evaluate.evaluate_workdir(saved, workdir)
  saved = saved_config.load(workdir)
  saved.model.position.kind = 'none'  # Same shapes, different model: still refused.
  with pytest.raises(errors.ConfigError, match=r"model\.position\.kind: 'rope' vs 'none'"):
    evaluate.evaluate_workdir(saved, workdir)
  with pytest.raises(errors.ConfigError, match=r'--step=5 has no checkpoint'):
    evaluate.evaluate_workdir(saved_config.load(workdir), workdir, step=5)


@pytest.mark.parametrize('kind', [pytest.param('linear', marks=pytest.mark.slow),
                                  pytest.param('ntk', marks=pytest.mark.slow), 'yarn'])
def test_rope_scaling_applies_at_evaluation_time(trained, kind):
  _, workdir, _ = trained
  plain = saved_config.load(workdir)
  plain.eval.max_batches = 1
  scaled = saved_config.load(workdir)
  scaled.eval.max_batches = 1
  scaled.model.position.rope.scaling.kind = kind
  scaled.model.position.rope.scaling.factor = 2.0
  base = evaluate.evaluate_workdir(plain, workdir, splits=('validation',))
  got = evaluate.evaluate_workdir(scaled, workdir, splits=('validation',))
  assert got['rope_scaling']['kind'] == kind
  if kind == 'yarn':  # Filled in from the trained sequence length.
    assert got['rope_scaling']['original_length'] == plain.data.seq_len
  loss = lambda r: [row['loss'] for row in r['splits']['validation']['lengths']]
  assert all(math.isfinite(x) for x in loss(got)) and loss(got) != loss(base)


@pytest.mark.parametrize('scale_to_length', [False, True])
def test_what_an_evaluation_says_besides_its_scores_is_known_before_it_runs(trained,
                                                                            scale_to_length):
  """eval.py compares results_header with the results already written before it computes
  anything (eval.lost_by_writing): the results then hold exactly that header besides 'splits'
  (the time each says it started aside), with a scaling set to each length
  (eval.scale_rope_to_length) as without; it says what the evaluation ran on and scored."""
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  _, workdir, _ = trained
  config = saved_config.load(workdir)
  config.eval.update(max_batches=1, scale_rope_to_length=scale_to_length)
  if scale_to_length:
    config.model.position.rope.scaling.kind = 'linear'
  run = resolve.for_evaluation(config, workdir, splits=('test',))
  header = evaluate.results_header(run)
  results = evaluate.evaluate_resolved(run)
  # What it ran on: this process's software, devices and checkout, and what it scored.
  unstarted = lambda r: {**r, 'environments': [{k: v for k, v in e.items() if k != 'started'}
                                               for e in r['environments']]}
  assert {k: v for k, v in unstarted(results).items() if k != 'splits'} == unstarted(header)
  assert ('length_factor' in header) == scale_to_length
  [ran_on] = results['environments']
  assert ran_on['splits'] == ['test'] and ran_on['lengths'] == [
      config.data.seq_len * m for m in config.eval.length_multipliers]
  _ran_here(ran_on)


def test_scaling_to_length_keeps_the_factor_a_run_trained_with(trained, tmp_path):
  """A run trained with YaRN at factor 4 from a quarter of its length (a continuation's
  config; the weights need no other shape) is evaluated at factor 4 at its own length and 8
  at twice it, not 1 and 2 (which undid the trained scaling); a factor given beside
  eval.scale_rope_to_length is refused before anything runs."""
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  _, workdir, _ = trained
  scaled = str(tmp_path / 'yarn')
  shutil.copytree(workdir, scaled)
  config = saved_config.load(scaled)
  seq_len = config.data.seq_len
  config.model.position.rope.scaling.update(kind='yarn', factor=4.0,
                                            original_length=seq_len // 4)
  with open(os.path.join(scaled, 'config.json'), 'w') as f:
    json.dump(config.to_dict(), f)
  config.eval.update(max_batches=1, length_multipliers=(1, 2), scale_rope_to_length=True)
  got = evaluate.evaluate_workdir(config, scaled, splits=('validation',))
  rows = got['splits']['validation']['lengths']
  assert [r['rope_scaling_factor'] for r in rows] == [4.0, 8.0]
  assert got['length_factor'] == ('model.position.rope.scaling.factor = '
                                  f'max(4, length / {seq_len // 4})')
  assert (f'RoPE scaling yarn at factor max(4, length / {seq_len // 4})'
          in evaluate.format_results(got).splitlines()[0])  # eval.py's first line says it.
  config.model.position.rope.scaling.factor = 2.0
  with pytest.raises(errors.ConfigError, match=r'factor=2.0 is set at each evaluated length'):
    resolve.for_evaluation(config, scaled, splits=('validation',))


def test_a_distance_remap_applies_at_evaluation_and_is_named(trained):
  """ReRoPE at window 8 changes nothing within 8 tokens' distance and every longer one: the
  trained length's loss moves, and the results say which remap ran."""
  _, workdir, _ = trained
  plain, remapped = saved_config.load(workdir), saved_config.load(workdir)
  for c in (plain, remapped):
    c.eval.update(max_batches=1, length_multipliers=(1,))
  remapped.model.position.rope.remap.update(method='rerope', window=8)
  base = evaluate.evaluate_workdir(plain, workdir, splits=('validation',))
  got = evaluate.evaluate_workdir(remapped, workdir, splits=('validation',))
  assert base['rope_remap'] is None and got['rope_remap'] == {'method': 'rerope', 'window': 8}
  assert 'distances remapped by method=rerope, window=8' in evaluate.format_results(got)
  loss = lambda r: r['splits']['validation']['lengths'][0]['loss']
  assert math.isfinite(loss(got)) and loss(got) != loss(base)


@pytest.mark.slow  # The same windows from the pipeline: tests/test_protocols.py.
def test_sliding_windows_with_a_stride_of_the_length_are_the_plain_windows(trained):
  """eval.protocol=sliding scores each token once; with the stride equal to the length its
  windows are the plain ones, so the loss is the same, and the results name the protocol."""
  _, workdir, _ = trained
  plain, sliding = saved_config.load(workdir), saved_config.load(workdir)
  for c in (plain, sliding):
    c.eval.update(max_batches=2, length_multipliers=(1,))
  sliding.eval.update(protocol='sliding', stride=plain.data.seq_len)
  base = evaluate.evaluate_workdir(plain, workdir, splits=('validation',))
  got = evaluate.evaluate_workdir(sliding, workdir, splits=('validation',))
  row, base_row = (r['splits']['validation']['lengths'][0] for r in (got, base))
  assert got['protocol'] == 'sliding' and base['protocol'] == 'windows'
  assert row['stride'] == plain.data.seq_len and 'stride' not in base_row
  np.testing.assert_allclose(row['loss'], base_row['loss'], rtol=1e-6)
  assert row['tokens'] == base_row['tokens']


@pytest.mark.parametrize('kind', kinds.params())
def test_every_position_kind_trains_on_the_eight_device_mesh(tmp_path, data_dir, kind):
  cfg = test_config.get_config(kind)
  cfg.data.data_dir = data_dir
  cfg.train.update(steps=3, eval_every=3, checkpoint_every=3, eval_batches=1)
  last = loop.train_and_evaluate(cfg, str(tmp_path / kind))
  losses = train_losses(str(tmp_path / kind))
  assert sorted(losses) == [1, 2, 3] and all(math.isfinite(x) for x in losses.values())
  assert math.isfinite(last['validation']['loss'])


ROPE_VARIANTS = {
    'p_rope': {'keep_fraction': 0.5},
    'dynamic': {'scaling.kind': 'dynamic', 'scaling.factor': 2.0, 'scaling.original_length': 16},
    'llama3': {'scaling.kind': 'llama3', 'scaling.factor': 4.0, 'scaling.original_length': 16},
}


@pytest.mark.slow
@pytest.mark.parametrize('variant', list(ROPE_VARIANTS))
def test_rope_variants_train_on_the_eight_device_mesh(tmp_path, data_dir, variant):
  cfg = test_config.get_config('rope')
  cfg.data.data_dir = data_dir
  cfg.train.update(steps=3, eval_every=3, checkpoint_every=3, eval_batches=1)
  kinds.set_fields(cfg.model.position.rope, ROPE_VARIANTS[variant])
  last = loop.train_and_evaluate(cfg, str(tmp_path / variant))
  losses = train_losses(str(tmp_path / variant))
  assert sorted(losses) == [1, 2, 3] and all(math.isfinite(x) for x in losses.values())
  assert math.isfinite(last['validation']['loss'])


def test_the_loop_names_no_task_and_every_task_is_a_task():
  """The loop asks the task interface (batches, loss, evaluation, the best metric), so a new
  task is one class in roformer/tasks/: no task class or model type appears in the loop."""
  from roformer import tasks
  source = open(os.path.join(REPO, 'roformer', 'loop.py'), encoding='utf-8').read()
  named = [name for name in dir(tasks) if isinstance(getattr(tasks, name), type)
           and issubclass(getattr(tasks, name), tasks.Task) and f'tasks.{name}' in source]
  assert not named
  assert not [t for t in tasks.TASKS if f"'{t}'" in source]
  configs = {'mlm': 'mlm', 'classifier': 'classify'}
  for model_type in tasks.TASKS:
    cfg = test_config.get_config(configs.get(model_type, 'rope'))
    cfg.model.type = model_type
    task = tasks.for_config(cfg)
    assert isinstance(task, tasks.Task)
    assert set(task.feature_shapes(2, 8)) == set(task.features)


def test_a_remap_bound_reads_the_trained_length_from_the_saved_config(trained):
  """The remap's window is checked against the length the model was trained at, from its saved
  config: overriding data.seq_len at evaluation lifts nothing, and the results record the
  trained length, not the override."""
  _, workdir, _ = trained
  saved = saved_config.load(workdir)
  length = saved.data.seq_len
  lifted = saved_config.load(workdir)
  lifted.data.seq_len = 4 * length  # Evaluate at longer rows: allowed,
  lifted.model.position.rope.remap.update(method='rerope', window=2 * length)  # this is not.
  with pytest.raises(errors.ConfigError, match=rf'past the {length} positions the model was '
                     rf'trained on \(the saved data.seq_len={length}\)'):
    evaluate.evaluate_workdir(lifted, workdir, splits=('validation',))
  longer = saved_config.load(workdir)
  longer.data.seq_len = 2 * length
  longer.eval.update(max_batches=1, length_multipliers=(1,))
  got = evaluate.evaluate_workdir(longer, workdir, splits=('validation',))
  assert got['train_seq_len'] == length
  assert got['splits']['validation']['lengths'][0]['length'] == 2 * length
