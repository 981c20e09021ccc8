"""The training loop: checks before anything is built, then train steps with periodic
logging, validation and checkpoints, resuming from the newest checkpoint that reads back and
stopping cleanly on preemption signals or a non-finite step."""

import contextlib
import logging
import os
import time

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import evaluate as evaluate_lib
from roformer import logs
from roformer import metrics as metrics_lib
from roformer import reliability
from roformer import resolve
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer import warm_start
from roformer import workdir as workdir_lib

log = logging.getLogger('roformer')


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       stop_at: int | None = None) -> dict:
  """Trains (resuming from the latest checkpoint in workdir if any) and evaluates on the
  validation split; returns the last train and eval metrics. With `stop_at`, the run
  checkpoints and returns after that step, as if interrupted. Every check runs first, in
  roformer/resolve.py."""
  run = resolve.for_training(config, workdir)
  os.makedirs(run.workdir, exist_ok=True)
  with contextlib.ExitStack() as stack:
    if jax.process_index() == 0:  # One writer per workdir.
      stack.enter_context(reliability.WorkdirLock(run.workdir))
    preempt = stack.enter_context(reliability.Preemption(
        run.config.train.grace_period_s, multihost=jax.process_count() > 1))
    try:
      return _train(run, stop_at, preempt, stack)
    except Exception as e:  # pylint: disable=broad-except  # Only storage failures, below.
      storage = errors.storage_problem(e)
      if storage is None or isinstance(e, errors.ConfigError):
        raise
      stack.close()  # Pending saves finish or fail, the writers close, the lock goes.
      raise errors.StorageError(storage_stop_message(storage, run.ckpt_dir)) from e


def storage_stop_message(storage: str, ckpt_dir: str) -> str:
  """What a run stopped by a failed write (a full disk, ...) says: what failed, what is kept
  and how to go on. Orbax writes each checkpoint into a temporary directory and renames it
  when complete, so a save cut short is never taken for a checkpoint."""
  last = checkpoint_lib.latest_step(ckpt_dir)
  kept = (f'the last complete checkpoint, step {last} in {ckpt_dir}, is kept and the run '
          f'resumes from it' if last is not None else
          'no checkpoint was complete yet, so the run starts again')
  return (f'a write failed ({storage}); training stopped. Nothing was deleted: {kept}. Fix: '
          f'{errors.storage_fix(storage)}, then rerun the same command.')


def restore_latest_readable(ckpt: checkpoint_lib.Checkpointer, trainer: trainer_lib.Trainer,
                            make_iter):
  """Restores the newest checkpoint that reads back (returns (step, state, data iterator)),
  or (None, None, a fresh iterator) if there is none. Newer ones that failed to read while an
  older one reads fine are broken themselves (truncated, files missing): each is named in a
  warning and moved aside to STEP.unreadable (by process 0), never deleted. If none reads,
  nothing is moved and the first error is raised (a fault outside the checkpoints, such as
  memory or a changed model, must not disown them all)."""
  failed = []
  for step in sorted(ckpt.all_steps(), reverse=True):
    train_iter = make_iter()
    try:
      state = ckpt.restore(step, trainer.abstract_state, train_iter, rename=trainer.rename)
    except Exception as e:  # pylint: disable=broad-except  # Orbax/TensorStore raise many kinds.
      log.warning('The checkpoint at step %d in %s cannot be read (%s: %s); trying the '
                  'previous one.', step, ckpt.directory, type(e).__name__,
                  str(e).splitlines()[0][:300] if str(e) else '')
      failed.append((step, e))
      continue
    if failed and jax.process_index() == 0:
      for bad, _ in failed:
        log.warning('Moved the unreadable checkpoint of step %d to %s (not deleted); resuming '
                    'from step %d.', bad, ckpt.set_aside(bad), step)
    if failed and jax.process_count() > 1:
      multihost_utils.sync_global_devices('checkpoints set aside')
    return step, state, train_iter
  if failed:
    step, error = failed[0]
    raise errors.ConfigError(
        f'no checkpoint in {ckpt.directory} can be read (step {step}: {type(error).__name__}: '
        f'{str(error).splitlines()[0][:300] if str(error) else ""}); none was moved. Fix: '
        'check memory and that the config matches the run, repair the checkpoints, or start in '
        'a new --workdir.') from error
  return None, None, make_iter()


def _train(run: resolve.Run, stop_at, preempt: reliability.Preemption,
           stack: contextlib.ExitStack) -> dict:
  """The training loop of train_and_evaluate, inside the workdir lock and signal handlers;
  `stack` closes the checkpointers and the metrics writer if the loop raises."""
  config, workdir, mesh, sources, tokenizer = (run.config, run.workdir, run.mesh, run.sources,
                                               run.tokenizer)
  pretrained = run.init_from
  trainer = trainer_lib.Trainer(config, mesh)
  tc = config.train
  make_iter = lambda: iter(trainer.task.batches(config, sources['train'], tokenizer,
                                                train=True))
  ckpt_dir = run.ckpt_dir
  ckpt = checkpoint_lib.Checkpointer(ckpt_dir, max_to_keep=tc.max_to_keep)
  stack.callback(ckpt.close_quietly)
  resumed_from, state, train_iter = restore_latest_readable(ckpt, trainer, make_iter)
  if resumed_from is not None:
    log.info('Resuming from %s step %d.', ckpt_dir, resumed_from)
  else:
    state = trainer.init_state()
    if pretrained is not None:
      state = warm_start.restore_from(trainer, state, config.init_from, *pretrained)
  is_chief = jax.process_index() == 0
  if is_chief:
    workdir_lib.save_config(config, workdir, resumed_from)
    workdir_lib.keep_tokenizer(tokenizer, workdir, resumed_from is not None)
  start = int(jax.device_get(state['step']))
  log.info('Model: %s, %d parameters, position=%s; mesh %s; %d steps from %d.',
           config.model.type, trainer.num_params(), config.model.position.kind,
           dict(mesh.shape), tc.steps, start)

  writer = metrics_lib.MetricsWriter(workdir, enabled=is_chief)
  stack.callback(writer.close_quietly)
  pending, window, last = [], [], {}  # (step, host batch, device metrics) not yet fetched.
  skipped = workdir_lib.skipped_so_far(workdir)
  best_metric = trainer.task.best_metric  # Its best checkpoint is kept apart, in best/.
  best = checkpoint_lib.Checkpointer(os.path.join(workdir, 'best'), max_to_keep=1) if (
      best_metric) else None
  if best is not None:
    stack.callback(best.close_quietly)
    best_value = workdir_lib.best_so_far(workdir, best_metric)

  def fetch() -> list[dict]:
    """The pending steps' metrics on the host; a non-finite step is recorded with its batch,
    then training stops or counts it (skip)."""
    nonlocal pending, skipped
    fetched = jax.device_get([metrics for _, _, metrics in pending])
    bad = [(s, b) for (s, b, _), m in zip(pending, fetched) if m['nonfinite']]
    pending = []
    for bad_step, host_batch in bad:
      path = reliability.save_batch(workdir, bad_step, host_batch) if is_chief else ''
      if tc.on_nonfinite == 'stop':
        ckpt.close()
        writer.close()
        raise reliability.Diverged(
            f'step {bad_step}: the loss or gradient norm is not finite; training stopped with '
            f'no update from that step on saved (last checkpoint: step {ckpt.latest_step()}); '
            f'the batch is in {path}. Fix: lower config.train.learning_rate, raise warmup_steps '
            'or clip harder, then rerun to resume from the checkpoint; or set '
            "config.train.on_nonfinite='skip' to drop such steps.")
      skipped += 1
      log.warning('step %d: non-finite loss or gradient norm; the update was skipped (%d so '
                  'far); batch saved to %s.', bad_step, skipped, path)
    return fetched

  def validate(step: int) -> dict:
    """The task's validation metrics of the current state, logged at `step`."""
    result = evaluate_lib.validation(trainer, state['params'], sources['validation'], tokenizer)
    writer.write(step, 'validation', result)
    log.info('step %d | validation %s', step, evaluate_lib.format_metrics(result))
    return result

  if pretrained is not None and warm_start.continues(config):
    # A continued model before any step at its new length or scaling: the extension without
    # training, against which the continued steps are measured.
    last['validation'] = validate(0)
  t_log, step_log = time.perf_counter(), start
  for step in range(start + 1, tc.steps + 1):
    host_batch = next(train_iter)
    state, metrics = trainer.train_step(state, sharding.put_batch(host_batch, mesh))
    pending.append((step, host_batch, metrics))
    if step == start + 1:  # Keep compilation out of the speed figures.
      jax.block_until_ready(metrics)
      t_log, step_log = time.perf_counter(), step
    if jax.process_count() > 1 and step % tc.log_every == 0:  # Every host stops together.
      preempt.agree()
    saving = step % tc.checkpoint_every == 0 or step in (tc.steps, stop_at) or bool(preempt.stop)
    if step % tc.log_every == 0 or step == tc.steps or saving:
      window += fetch()  # Every step since the last log line.
      if step % tc.log_every == 0 or step == tc.steps:
        now = time.perf_counter()
        fetched, window = window, []
        good = [m for m in fetched if not m['nonfinite']] or fetched
        avg = {k: float(np.mean([m[k] for m in good])) for k in good[0] if k != 'nonfinite'}
        avg['learning_rate'] = float(fetched[-1]['learning_rate'])
        if tc.on_nonfinite == 'skip':
          avg['skipped_steps'] = skipped
        speed = '(compiling)'
        if step > step_log:  # Not on the first step, whose time is mostly compilation.
          rate = (step - step_log) / (now - t_log)
          avg.update(steps_per_sec=rate, tokens_per_sec=rate * avg['tokens'])
          speed = (f'{rate:.2f} steps/s | {avg["tokens_per_sec"]:,.0f} tok/s | ETA '
                   f'{logs.duration((tc.steps - step) / rate)}')
        writer.write(step, 'train', avg)
        log.info('step %d/%d | loss %.4f | acc %.3f | lr %.2e | %s', step, tc.steps,
                 avg['loss'], avg['accuracy'], avg['learning_rate'], speed)
        last['train'] = avg
        t_log, step_log = now, step
    paused = time.perf_counter()  # Evaluation and checkpointing are not training time.
    # A stop request skips an intermediate evaluation (to save in time), never the final one.
    if step == tc.steps or (step % tc.eval_every == 0 and not preempt.stop):
      last['validation'] = result = validate(step)
      if best is not None and result[best_metric] > best_value:  # max_to_keep never drops it.
        best_value = result[best_metric]
        best.save(step, state)
        log.info('step %d | new best validation %s %.2f saved to %s', step, best_metric,
                 best_value, best.directory)
    if saving:
      ckpt.save(step, state, train_iter)
    t_log += time.perf_counter() - paused
    if step == stop_at:
      break
    if preempt.stop:
      if not saving:  # The signal came during this step's bookkeeping.
        window += fetch()
        ckpt.save(step, state, train_iter)
      ckpt.wait()
      log.warning('Stopped by %s after step %d; checkpoint saved. Rerun the same command to '
                  'resume.', preempt.stop, step)
      last['preempted'] = {'signal': preempt.stop, 'step': step}
      break
  ckpt.close()
  if best is not None:
    best.close()
  writer.close()
  return last
