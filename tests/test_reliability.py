"""Runs that survive: preemption signals, kill -9, unreadable checkpoints, non-finite losses,
another mesh at restore time, a second train.py on the same workdir, hostile arguments."""

import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import ml_collections
import numpy as np
import processes
import pytest
from configs import test as test_config
from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import metrics
from roformer import reliability
from roformer import saved_config
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer import workdir as workdir_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(data_dir, **train):
  """The tiny LM on one device with a schedule that does not depend on train.steps (rsqrt),
  so a run stopped early and continued equals one run straight through."""
  cfg = test_config.get_config()
  cfg.data.data_dir = data_dir
  cfg.mesh.num_devices = 1
  cfg.train.update({'schedule': 'rsqrt', 'warmup_steps': 2, 'log_every': 1,
                    'eval_every': 10_000, 'checkpoint_every': 10_000, **train})
  return cfg


def _cli_flags(cfg) -> list[str]:
  return ['--config=configs/test.py', f'--config.data.data_dir={cfg.data.data_dir}',
          '--config.mesh.num_devices=1'] + [
              f'--config.train.{k}={cfg.train[k]}' for k in (
                  'schedule', 'warmup_steps', 'log_every', 'eval_every', 'checkpoint_every',
                  'steps')]


def _losses(workdir) -> dict[int, float]:
  return {r['step']: r['loss'] for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] == 'train'}


def _env():
  return processes.env(devices=1)


def _start(cfg, workdir) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, 'train.py', f'--workdir={workdir}'] + _cli_flags(cfg),
                          cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def _wait_for_steps(workdir, count: int, proc, timeout=180.0) -> None:
  deadline = time.time() + timeout
  while time.time() < deadline:
    if os.path.exists(os.path.join(workdir, 'metrics.jsonl')) and len(_losses(workdir)) >= count:
      return
    if proc.poll() is not None:
      raise AssertionError(f'train.py ended early: {proc.stdout.read()[-3000:]}')
    time.sleep(0.2)
  raise AssertionError('train.py made no progress')


def test_sigterm_even_repeated_saves_and_exits_0_then_the_run_continues_the_same_losses(
    data_dir, tmp_path):
  cfg = _config(data_dir, steps=100_000)  # Far more than it will run.
  workdir = str(tmp_path / 'run')
  proc = _start(cfg, workdir)
  try:
    _wait_for_steps(workdir, 5, proc)
    # A second train.py on the same workdir refuses at once, naming the first.
    second = processes.run(['train.py', f'--workdir={workdir}'] + _cli_flags(cfg), cwd=REPO,
                           env=_env(), timeout=120)
    assert second.returncode == 1
    assert f'is in use by train.py (pid {proc.pid}' in second.stderr
    # Twice, as a job's kill of every process and the sweep driver's end deliver it (apart, so
    # that the run handles the first before the second arrives).
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=cfg.train.grace_period_s)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 0, out[-3000:]
  stopped = max(_losses(workdir))
  assert f'stopped by SIGTERM at step {stopped}' in out
  assert checkpoint_lib.latest_step(os.path.join(workdir, 'checkpoints')) == stopped
  # The same command (with a reachable end) continues; the losses after the stop equal an
  # uninterrupted run's.
  end = stopped + 4
  cfg.train.steps = end
  done = processes.run(['train.py', f'--workdir={workdir}'] + _cli_flags(cfg), cwd=REPO,
                       env=_env())
  assert done.returncode == 0, done.stderr[-3000:]
  straight = str(tmp_path / 'straight')
  loop.train_and_evaluate(cfg, straight)
  resumed, reference = _losses(workdir), _losses(straight)
  np.testing.assert_allclose([resumed[s] for s in range(stopped + 1, end + 1)],
                             [reference[s] for s in range(stopped + 1, end + 1)], rtol=1e-5)


def test_a_second_sigint_acts_at_once_and_a_later_sigterm_waits_for_the_save():
  """(A SIGTERM after a SIGTERM acts at once where no grace period bounds the wait.)"""
  calls = []
  previous = signal.signal(signal.SIGINT, lambda *_: calls.append('SIGINT'))
  previous_term = signal.signal(signal.SIGTERM, lambda *_: calls.append('SIGTERM'))
  try:
    with reliability.Preemption(grace_s=600) as preempt:
      os.kill(os.getpid(), signal.SIGTERM)
      os.kill(os.getpid(), signal.SIGTERM)  # Still here: the same stop, still saving.
      assert preempt.requested == 'SIGTERM' and not calls
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # A late repeat ends nothing.
    with reliability.Preemption(grace_s=600) as preempt:
      os.kill(os.getpid(), signal.SIGINT)
      assert preempt.requested == 'SIGINT' and not calls
      os.kill(os.getpid(), signal.SIGINT)  # Handed to the handler that was there before.
      assert calls == ['SIGINT']
    signal.signal(signal.SIGTERM, lambda *_: calls.append('SIGTERM'))  # Ignored after a stop.
    with reliability.Preemption(grace_s=0) as preempt:  # Ctrl-C, then a sweep's stop:
      os.kill(os.getpid(), signal.SIGINT)
      os.kill(os.getpid(), signal.SIGTERM)  # the same stop, still saving,
      assert preempt.requested == 'SIGINT' and calls == ['SIGINT']
    signal.signal(signal.SIGTERM, lambda *_: calls.append('SIGTERM'))
    with reliability.Preemption(grace_s=0) as preempt:  # but with no grace period to bound a
      os.kill(os.getpid(), signal.SIGTERM)            # wait, a repeated SIGTERM acts at once.
      os.kill(os.getpid(), signal.SIGTERM)
      assert preempt.requested == 'SIGTERM' and calls == ['SIGINT', 'SIGTERM']
  finally:
    signal.signal(signal.SIGINT, previous)
    signal.signal(signal.SIGTERM, previous_term)


@pytest.mark.slow
def test_kill_9_loses_at_most_the_steps_since_the_last_checkpoint(data_dir, tmp_path):
  cfg = _config(data_dir, steps=100_000, checkpoint_every=5)
  workdir = str(tmp_path / 'run')
  proc = _start(cfg, workdir)
  try:
    _wait_for_steps(workdir, 23, proc)
  finally:
    proc.kill()  # SIGKILL: no handler runs, possibly in the middle of a save.
    proc.communicate()
  ran = max(_losses(workdir))
  ckpt_dir = os.path.join(workdir, 'checkpoints')
  latest = checkpoint_lib.latest_step(ckpt_dir)
  assert latest is not None and ran - 5 <= latest + 5 and latest % 5 == 0
  cfg.train.steps = latest + 2
  last = loop.train_and_evaluate(cfg, workdir)  # Restores cleanly and continues.
  assert checkpoint_lib.latest_step(ckpt_dir) == latest + 2 and 'train' in last


def _corrupt(step_dir: str) -> None:
  """Truncates every data file of a saved state (as a full disk or a copy cut short would)."""
  for root, _, files in os.walk(os.path.join(step_dir, 'state')):
    for name in files:
      with open(os.path.join(root, name), 'r+b') as f:
        f.truncate(max(os.path.getsize(f.name) // 3, 1))


def test_an_unreadable_latest_checkpoint_falls_back_and_is_kept(data_dir, tmp_path, caplog):
  cfg = _config(data_dir, steps=4, checkpoint_every=2)
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(cfg, workdir)
  ckpt_dir = os.path.join(workdir, 'checkpoints')
  _corrupt(os.path.join(ckpt_dir, '4'))
  with pytest.raises(errors.ConfigError, match=r'checkpoint at step 4 .* cannot be read.*--step '
                     r'\(available: \[2\]\)'):
    evaluate.evaluate_workdir(saved_config.load(workdir), workdir, step=4)
  cfg.train.steps = 6
  with caplog.at_level(logging.WARNING):
    loop.train_and_evaluate(cfg, workdir)
  assert any('step 4' in r.message and 'cannot be read' in r.message for r in caplog.records)
  assert os.path.isdir(os.path.join(ckpt_dir, '4.unreadable'))  # Kept, not deleted.
  # Step 4 was saved again as training went on; a step set aside and not saved again is named.
  os.rename(os.path.join(ckpt_dir, '4.unreadable'), os.path.join(ckpt_dir, '5.unreadable'))
  with pytest.raises(errors.ConfigError, match=r'--step=5 has no checkpoint in .* \(it was '
                     r'unreadable, and a resume set it aside as .*checkpoints/5.unreadable\)'):
    evaluate.evaluate_workdir(saved_config.load(workdir), workdir, step=5)
  assert checkpoint_lib.all_steps(ckpt_dir)[-1] == 6
  losses = metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  assert [r['step'] for r in losses if r['split'] == 'train'][-4:] == [3, 4, 5, 6]  # From 2.


def test_nonfinite_loss_stops_keeping_the_last_good_checkpoint(data_dir, tmp_path):
  cfg = _config(data_dir, steps=6, checkpoint_every=1, learning_rate=1e30, warmup_steps=0)
  workdir = str(tmp_path / 'run')
  with pytest.raises(reliability.Diverged, match=r'step (\d+): the loss or gradient norm is '
                     'not finite') as info:
    loop.train_and_evaluate(cfg, workdir)
  bad = int(info.value.args[0].split(':')[0].split()[1])
  assert checkpoint_lib.latest_step(os.path.join(workdir, 'checkpoints')) == bad - 1
  saved = np.load(os.path.join(workdir, f'nonfinite_step_{bad}.npz'))
  assert int(saved['step']) == bad and saved['inputs'].shape == (8, 32)


@pytest.mark.slow
def test_nonfinite_steps_can_be_skipped_and_counted(data_dir, tmp_path):
  cfg = _config(data_dir, steps=6, learning_rate=1e30, warmup_steps=0, on_nonfinite='skip')
  workdir = str(tmp_path / 'run')
  last = loop.train_and_evaluate(cfg, workdir)
  assert last['train']['skipped_steps'] >= 1
  trainer = trainer_lib.Trainer(cfg, sharding.make_mesh(cfg.mesh))
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  state = ckpt.restore(6, trainer.abstract_state)
  ckpt.close()
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state['params']))


def test_a_checkpoint_from_eight_devices_restores_on_one_and_on_a_4x2_mesh(data_dir, tmp_path):
  """Each restore scores the validation batches as the run that saved it did at its end."""
  cfg = _config(data_dir, steps=3, eval_batches=2)
  cfg.mesh.update(num_devices=-1, data=1, fsdp=8)  # Parameters split 8 ways.
  cfg.eval.update(max_batches=2, length_multipliers=(1,))
  workdir = str(tmp_path / 'run')
  last = loop.train_and_evaluate(cfg, workdir)
  for mesh in ({'num_devices': 1, 'data': -1, 'fsdp': 1}, {'data': 4, 'fsdp': 1, 'tensor': 2}):
    eval_cfg = saved_config.load(workdir)
    eval_cfg.mesh.update(mesh)
    out = evaluate.evaluate_workdir(eval_cfg, workdir, splits=('validation',))
    np.testing.assert_allclose(out['splits']['validation']['lengths'][0]['loss'],
                               last['validation']['loss'], rtol=1e-5, err_msg=str(mesh))


@pytest.mark.parametrize('flags, message', [
    (['--config.model.no_such_field=1'], 'no_such_field'),  # An unknown field.
    pytest.param(['--config.model.d_model=wide'], 'd_model', marks=pytest.mark.slow),  # Type.
    pytest.param(['--config=configs/missing.py'], 'missing.py', marks=pytest.mark.slow),
])
def test_hostile_command_lines_get_one_line_errors_and_leave_the_workdir(tmp_path, flags,
                                                                         message):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'keep.txt').write_text('results')
  done = processes.run(['train.py', f'--workdir={workdir}', '--config=configs/test.py'] + flags,
                       cwd=REPO, env=_env(), timeout=120)
  assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
  assert sorted(os.listdir(workdir)) == ['keep.txt']


def test_a_workdir_that_cannot_be_written_is_reported_first(config, tmp_path, monkeypatch):
  def refuse(*args, **kwargs):
    raise PermissionError(13, 'Permission denied')
  monkeypatch.setattr(workdir_lib, 'probe_writable', refuse)
  with pytest.raises(errors.ConfigError, match='cannot be written'):
    loop.train_and_evaluate(config, str(tmp_path / 'run'))


def test_resuming_with_another_model_size_is_refused(data_dir, tmp_path):
  cfg = _config(data_dir, steps=2)
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(cfg, workdir)
  before = sorted(os.listdir(workdir))
  cfg.model.d_model = 64
  with pytest.raises(errors.ConfigError, match='different run; changed fields .*model.d_model'):
    loop.train_and_evaluate(cfg, workdir)
  assert sorted(os.listdir(workdir)) == before
  shutil.rmtree(workdir)


def test_records_without_a_checkpoint_are_kept_from_a_new_training_run(data_dir, tmp_path):
  """A finished run whose checkpoints are gone: training there again is refused while its
  evaluations are there (they would describe another model), and leaves every file as it was;
  without them, another config is refused (its metrics would mix into the log) and the same
  command trains, as after an attempt stopped before its first save."""
  cfg = _config(data_dir, steps=2)
  workdir = tmp_path / 'run'
  loop.train_and_evaluate(cfg, str(workdir), eval_splits=('validation',))
  shutil.rmtree(workdir / 'checkpoints')
  (workdir / 'eval_passkey.json').write_text('{}')
  before = {p: p.read_bytes() for p in workdir.rglob('*') if p.is_file()}
  with pytest.raises(errors.ConfigError, match=r'evaluations of a finished run '
                     r'\(eval_passkey\.json, eval_results\.json\) but no checkpoint'):
    loop.train_and_evaluate(cfg, str(workdir))
  assert {p: p.read_bytes() for p in workdir.rglob('*') if p.is_file()} == before
  for name in ('eval_passkey.json', 'eval_results.json'):
    (workdir / name).unlink()
  other = _config(data_dir, steps=2)
  other.model.d_model = 64
  with pytest.raises(errors.ConfigError, match=r'metrics of another run .*model\.d_model.*Fix: '
                     'use a new --workdir'):
    loop.train_and_evaluate(other, str(workdir))
  loop.train_and_evaluate(cfg, str(workdir))  # The same command: trained again from step 0.
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['2']


def test_a_workdir_from_before_newer_fields_still_resumes(tmp_path):
  """A config.json written before fields existed resumes when they keep their defaults."""
  cfg = test_config.get_config()
  workdir = str(tmp_path / 'old')
  os.makedirs(workdir)
  saved_config.save(cfg, workdir)
  saved = saved_config.load(workdir).to_dict()
  del saved['model']['remat'], saved['model']['attention'], saved['train']['on_nonfinite']
  saved_config.save(ml_collections.ConfigDict(saved), workdir)
  workdir_lib.check_workdir(cfg, workdir, 5)  # pylint: disable=protected-access
  cfg.model.attention.kind = 'favor'  # Not what that run trained with.
  with pytest.raises(errors.ConfigError, match='model.attention'):
    workdir_lib.check_workdir(cfg, workdir, 5)  # pylint: disable=protected-access


def _no_space(path=''):
  return OSError(errno.ENOSPC, 'No space left on device', path)


@pytest.mark.slow
def test_a_failed_asynchronous_save_ends_with_one_error_line_and_nothing_after(data_dir,
                                                                             tmp_path):
  """A save that fails in orbax's background thread (no space left) stops train.py with one
  `error:` line naming it and the checkpoint kept, as its last line: no traceback from the
  background thread, nothing printed at exit."""
  cfg = _config(data_dir, steps=8, checkpoint_every=2)
  workdir = str(tmp_path / 'run')
  done = processes.run([os.path.join(REPO, 'tests', 'failing_save.py'),
                        f'--workdir={workdir}'] + _cli_flags(cfg), cwd=REPO, env=_env())
  out = (done.stdout + done.stderr).strip().splitlines()
  assert done.returncode == 1, out[-20:]
  assert not any('Traceback' in line or 'Exception in thread' in line for line in out), out
  errors_ = [line for line in out if line.startswith('error: ')]
  assert len(errors_) == 1 and out[-1] == errors_[0], out[-20:]
  assert 'no space left on device' in errors_[0] and 'step 2' in errors_[0]
  assert checkpoint_lib.all_steps(os.path.join(workdir, 'checkpoints')) == [2]


@pytest.mark.slow
def test_data_failing_mid_run_ends_with_one_error_line_and_nothing_after(data_dir, tmp_path):
  """Reads of the data cache failing after the run has started (tests/failing_data.py: from the
  40th read on, while grain's iterators run) stop train.py with one `error:` line naming the
  cache and its fix, as its last line: no traceback, nothing printed at exit."""
  cfg = _config(data_dir, steps=30, checkpoint_every=10, eval_every=6)
  done = processes.run([os.path.join(REPO, 'tests', 'failing_data.py'),
                        f'--workdir={tmp_path / "run"}'] + _cli_flags(cfg), cwd=REPO,
                       env=processes.env(devices=1, FAIL_AFTER='40'))
  out = (done.stdout + done.stderr).strip().splitlines()
  assert done.returncode == 1, out[-20:]
  assert any(line.startswith('step 1') or ' step 1/' in line for line in out)  # It had started.
  assert not any('Traceback' in line or 'Exception in thread' in line for line in out), out
  errors_ = [line for line in out if line.startswith('error: ')]
  assert len(errors_) == 1 and out[-1] == errors_[0], out[-20:]
  assert 'DATA_LOSS' in errors_[0] and 'is damaged' in errors_[0]


def test_a_full_disk_stops_the_run_keeping_the_last_checkpoint_and_it_resumes_from_it(
    data_dir, tmp_path, monkeypatch):
  """The checkpoint writer, metrics.jsonl and TensorBoard each fail in turn with ENOSPC: each
  time the run stops with a StorageError naming the failure and the checkpoint kept, and the
  next run resumes from it (test_sigterm_... shows a resumed run's losses equal an
  uninterrupted run's); once writes succeed it runs to the end."""
  cfg = _config(data_dir, steps=8, checkpoint_every=2)
  workdir = str(tmp_path / 'run')
  ckpt_dir = os.path.join(workdir, 'checkpoints')
  real_save = checkpoint_lib.ocp.CheckpointManager.save

  def save(manager, step, *args, **kwargs):
    if step >= 4:
      raise _no_space(os.path.join(ckpt_dir, f'{step}.orbax-checkpoint-tmp'))
    return real_save(manager, step, *args, **kwargs)

  def stopped_at(step, what):
    with pytest.raises(errors.StorageError, match=f'no space left on device: .*{what}.*the last '
                       f'complete checkpoint, step {step} in {ckpt_dir}, is kept'):
      loop.train_and_evaluate(cfg, workdir)
    assert checkpoint_lib.latest_step(ckpt_dir) == step

  with monkeypatch.context() as patch:  # The checkpoint's writer, from step 4 on.
    patch.setattr(checkpoint_lib.ocp.CheckpointManager, 'save', save)
    stopped_at(2, 'orbax-checkpoint-tmp')
  real_write = metrics.MetricsWriter.write

  def write(writer, step, split, values):
    if step < 5:
      return real_write(writer, step, split, values)
    with open(writer.path, 'a', encoding='utf-8') as f:
      f.write('{"step": 5, "split": "tr')  # A record cut short, then the disk is full.
    raise _no_space(writer.path)

  with monkeypatch.context() as patch:  # metrics.jsonl, from step 5 on.
    patch.setattr(metrics.MetricsWriter, 'write', write)
    stopped_at(4, 'metrics.jsonl')
  from tensorboardX import event_file_writer  # pylint: disable=g-import-not-at-top

  def flush(events):
    raise _no_space(events._file_name)  # pylint: disable=protected-access

  with monkeypatch.context() as patch:  # TensorBoard's events.
    patch.setattr(event_file_writer.EventsWriter, 'flush', flush)
    stopped_at(4, 'tfevents')
  loop.train_and_evaluate(cfg, workdir)  # Space is back: it resumes from step 4 and ends.
  assert checkpoint_lib.latest_step(ckpt_dir) == 8
  with open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8') as f:
    assert '{"step": 5, "split": "tr' in f.read().splitlines()  # Ended, not merged into the next.
  records = metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))  # Skips the cut line.
  assert [r['step'] for r in records if r['split'] == 'train'][-4:] == [5, 6, 7, 8]
