"""The training loop: checks before anything is built, then train steps with periodic
logging, validation and checkpoints, resuming from the newest checkpoint that reads back and
stopping cleanly on preemption signals or a non-finite step.

One loop serves one run and a group of runs that differ only in their seed (`train_seeds`:
one process, one compilation, the states advanced by `roformer.members.Members`). Each member
writes the workdir a run of its own writes (config, tokenizer, checkpoints, metrics, best
checkpoint, and with `eval_splits` the eval_results.json that eval.py would write), so
evaluation, reports and resuming cannot tell the difference. A member that fails (a non-finite
step, a workdir that does not fit it) stops alone: the others finish, and the failure is raised
at the end, naming it."""

import contextlib
import dataclasses
import logging
import os
import time

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from roformer import checkpoint as checkpoint_lib
from roformer import compile_ahead
from roformer import errors
from roformer import evaluate as evaluate_lib
from roformer import files
from roformer import logs
from roformer import members as members_lib
from roformer import metrics as metrics_lib
from roformer import model_types
from roformer import positions
from roformer import provenance
from roformer import reliability
from roformer import resolve
from roformer import saved_config
from roformer import trainer as trainer_lib
from roformer import workdir as workdir_lib
from roformer.data import mixture
from roformer.data import pipeline

log = logging.getLogger('roformer')

SEED_FIELD = '{seed}'  # In train_seeds' workdir: each member's seed.


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       stop_at: int | None = None, eval_splits=()) -> dict:
  """Trains (resuming from the latest checkpoint in workdir if any) and evaluates on the
  validation split; returns the last train and eval metrics. With `stop_at`, the run
  checkpoints and returns after that step, as if interrupted. With `eval_splits`, a run that
  reaches its last step is then evaluated on them as eval.py would (eval_results.json). Every
  check runs first, in roformer/resolve.py."""
  return train_members([config], [workdir], stop_at, eval_splits)[0]


def train_seeds(config: ml_collections.ConfigDict, workdir: str, seeds, stop_at=None,
                eval_splits=(), vmapped=None) -> list[dict]:
  """`config` at each of `seeds`, trained together (see the module docstring); `workdir`
  names each member's workdir with {seed} in place of its seed."""
  if SEED_FIELD not in workdir:
    raise errors.ConfigError(f'--workdir={workdir!r} is shared by the seeds {list(seeds)}: '
                             f'each needs its own. Fix: put {SEED_FIELD} in it, e.g. '
                             f'--workdir=runs/passkey/seed={SEED_FIELD}.')
  if len(set(seeds)) != len(seeds) or not seeds:
    raise errors.ConfigError(f'--seeds={list(seeds)}: give distinct seeds. Fix: e.g. '
                             '--seeds=0,1,2.')
  configs = []
  for seed in seeds:
    member = ml_collections.ConfigDict(config.to_dict())
    member.seed = seed
    configs.append(member)
  workdirs = [workdir.replace(SEED_FIELD, str(seed)) for seed in seeds]
  return train_members(configs, workdirs, stop_at, eval_splits, vmapped)


def _same_but_seed(configs) -> None:
  first = saved_config.without_seed(configs[0])
  if any(saved_config.without_seed(c) != first for c in configs[1:]):
    raise errors.ConfigError('the configs of one group differ in more than their seed. Fix: '
                             'train them as separate runs.')


def train_members(configs, workdirs, stop_at=None, eval_splits=(), vmapped=None) -> list[dict]:
  """Trains runs whose configs differ only in the seed in one program (see the module
  docstring); returns each one's last metrics. A single run's error is raised as it comes; in
  a group, each member that fails is named at the end, after the others have finished."""
  unknown = [s for s in eval_splits if s not in pipeline.SPLITS]
  if unknown:
    raise errors.ConfigError(f'--eval_splits={",".join(eval_splits)}: {unknown[0]!r} is not a '
                             f'split. Fix: some of {",".join(pipeline.SPLITS)}.')
  _same_but_seed(configs)
  group = len(configs) > 1
  startup, phases = logs.process_age(), logs.Phases()
  runs, failures = [], []  # failures: (workdir, why)
  for config, workdir in zip(configs, workdirs):
    try:
      with phases('setup'):
        runs.append(resolve.for_training(config, workdir))
    except errors.ConfigError as e:
      if not group:
        raise
      failures.append((os.path.abspath(workdir), str(e)))
      log.error('%s: %s', workdir, e)
  lasts = {}
  if runs:
    resumed = {checkpoint_lib.latest_step(r.ckpt_dir) for r in runs}
    # Members at different steps (a stop between their saves) are trained one by one.
    parts = [runs] if len(resumed) == 1 else [[r] for r in runs]
    while parts:
      part = parts.pop(0)
      try:
        done = _train_group(part, stop_at, eval_splits, vmapped, group, phases)
      except _StepsDiffer:  # A newer checkpoint of one did not read back.
        parts = [[r] for r in part] + parts
        continue
      lasts.update({run.workdir: last for run, last in zip(part, done)})
  log.info('Time: %s%s.', f'start-up {startup:.1f} s (to the first check), '
           if startup is not None else '', phases.line())
  diverged = [(w, last['failed']) for w, last in lasts.items() if last.get('failed')]
  if diverged and not group and not failures:
    raise reliability.Diverged(diverged[0][1])
  failures += diverged  # Each logged when it diverged; named again in the error below.
  if failures:
    finished = [w for w, last in lasts.items() if not last.get('failed')]
    named = '; '.join(f'{w}: {why.rstrip(".")}' for w, why in failures)
    raise reliability.MembersFailed(
        f'{len(failures)} of {len(configs)} runs failed: {named}. The others '
        f'finished: {", ".join(finished) or "none"}. Fix: as each message says (a config '
        'refused fails the same way until it is changed), then rerun the same command: the '
        'failed ones run again, from their last checkpoint if they have one, and the finished '
        'ones are kept.')
  return [lasts[os.path.abspath(w)] for w in workdirs]


class _StepsDiffer(Exception):
  """The members of a group restored different steps."""


def _train_group(runs, stop_at, eval_splits, vmapped, group: bool,
                 phases: logs.Phases) -> list[dict]:
  """Trains `runs` together inside their workdir locks and the signal handlers."""
  for run in runs:
    os.makedirs(run.workdir, exist_ok=True)
  with contextlib.ExitStack() as stack:
    if jax.process_index() == 0:  # One writer per workdir.
      for run in runs:
        stack.enter_context(reliability.WorkdirLock(run.workdir))
    preempt = stack.enter_context(reliability.Preemption(
        runs[0].config.train.grace_period_s, multihost=jax.process_count() > 1))
    try:
      return _train(runs, stop_at, preempt, stack, eval_splits, vmapped, group, phases)
    except Exception as e:  # pylint: disable=broad-except  # Only storage failures, below.
      storage = errors.storage_problem(e)
      if storage is None or isinstance(e, errors.ConfigError):
        raise
      stack.close()  # Pending saves finish or fail, the writers close, the lock goes.
      raise errors.StorageError(' '.join(storage_stop_message(storage, run.ckpt_dir)
                                         for run in runs)) from e


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
      state = ckpt.restore(step, trainer.saved_abstract_state, train_iter,
                           rename=trainer.rename)
    except Exception as e:  # pylint: disable=broad-except  # Orbax/TensorStore raise many kinds.
      log.warning('The checkpoint at step %d in %s cannot be read (%s); trying the '
                  'previous one.', step, ckpt.directory, errors.read_failure(e))
      failed.append((step, e))
      continue
    if failed and jax.process_index() == 0:
      for bad, _ in failed:
        log.warning('Moved the unreadable checkpoint of step %d to %s (not deleted); resuming '
                    'from step %d.', bad, ckpt.set_aside(bad), step)
    if failed and jax.process_count() > 1:
      multihost_utils.sync_global_devices('checkpoints set aside')
      ckpt.reload()  # Each process's manager forgets the moved steps, or saving one fails.
    # In the model's layout after the read, so that a failure here is not taken for damage.
    return step, trainer.from_saved(state), train_iter
  if failed:
    step, error = failed[0]
    raise errors.ConfigError(
        f'no checkpoint in {ckpt.directory} can be read (step {step}: '
        f'{errors.read_failure(error)}); none was moved. Fix: '
        'check memory and that the config matches the run, repair the checkpoints, or start in '
        'a new --workdir.') from error
  return None, None, make_iter()


@dataclasses.dataclass
class _Member:
  """One run of a group: what it writes and where its training stands."""
  run: resolve.Run
  ckpt: checkpoint_lib.Checkpointer
  writer: metrics_lib.MetricsWriter
  iterator: object = None
  best: checkpoint_lib.Checkpointer | None = None
  best_value: float = float('-inf')
  skipped: int = 0
  window: list = dataclasses.field(default_factory=list)  # Fetched steps since the last log.
  last: dict = dataclasses.field(default_factory=dict)
  failed: str = ''

  @property
  def name(self) -> str:
    return os.path.basename(self.run.workdir)


def _diverged(member: _Member, step: int, path: str) -> str:
  latest = member.ckpt.latest_step()
  return (f'step {step}: the loss or gradient norm is not finite; training stopped, and no '
          'update of that step or after it was saved ('
          + (f'last checkpoint: step {latest}' if latest is not None else 'no checkpoint yet')
          + f'); the batch is in {path}. Fix: lower config.train.learning_rate, raise '
          'warmup_steps or clip harder, then rerun to '
          + ('resume from the checkpoint' if latest is not None else 'start again')
          + "; or set config.train.on_nonfinite='skip' to drop such steps.")


def _train(runs, stop_at, preempt: reliability.Preemption, stack: contextlib.ExitStack,
           eval_splits, vmapped, group: bool, phases: logs.Phases) -> list[dict]:
  """The training loop of train_members, inside the workdir locks and signal handlers;
  `stack` closes the checkpointers and the metrics writers if the loop raises. `phases` gets
  the time of each part."""
  with phases('setup'):
    loop = _Loop(runs, stop_at, preempt, stack, vmapped, group, phases)
  return loop.run(eval_splits)


class _Loop:
  """The runs of one group trained step by step: `run` reads top to bottom (each step, then
  its logging, validation, checkpoints and stop requests); the methods below it are its parts.
  Setting up restores or initialises every member's state and opens what it writes."""

  def __init__(self, runs, stop_at, preempt, stack, vmapped, group: bool, phases):
    self.runs, self.stop_at, self.preempt, self.group, self.phases = (runs, stop_at, preempt,
                                                                       group, phases)
    self.config, mesh = runs[0].config, runs[0].mesh
    self.tc = self.config.train
    self.trainer = trainer_lib.Trainer(self.config, mesh)
    self.is_chief = jax.process_index() == 0
    self.members, states, starts = [], [], []
    for run in runs:
      member, state = self._open(run, stack)
      self.members.append(member)
      states.append(state)
      starts.append(int(jax.device_get(state['step'])))
    if len(set(starts)) > 1:
      raise _StepsDiffer(starts)
    self.start = starts[0]
    if self.is_chief and self.start < self.tc.steps:  # A start that trains: what it runs on.
      for member in self.members:
        provenance.record_start(member.run.workdir, self.start)
    self.states = members_lib.Members(
        self.trainer, [trainer_lib.dropout_seed(m.run.config) for m in self.members], states,
        vmapped)
    self.pending = []  # (step, host batches, device metrics) not yet fetched.
    # The evaluation passes, compiled in a background thread while the train step compiles
    # and the steps run (roformer/compile_ahead.py); `run` submits them.
    self.ahead = compile_ahead.Ahead(compile_ahead.enabled(self.tc.compile_ahead))
    stack.callback(self.ahead.close)
    log.info('Model: %s, %d parameters, position=%s; mesh %s; %d steps from %d%s.',
             self.config.model.type, self.trainer.num_params(),
             positions.model_scheme(self.config.model).kind, dict(mesh.shape), self.tc.steps,
             self.start,
             f'; {len(self.members)} runs (seeds '
             f'{", ".join(str(m.run.config.seed) for m in self.members)})'
             f', {"vmapped" if self.states.vmapped else "one by one"}' if group else '')
    if self.start >= self.tc.steps:  # Resumed at or past its last step: nothing to train.
      log.info('The run is trained to step %d%s: no step to train. (More steps: rerun with a '
               'larger --config.train.steps; results: python eval.py --workdir ...)',
               self.start, '' if self.start == self.tc.steps else
               f', past config.train.steps={self.tc.steps}')

  def _open(self, run, stack) -> tuple[_Member, dict]:
    """A member for `run`, with its state: resumed from its latest readable checkpoint, or
    fresh (from config.init_from if set); its config, data record and tokenizer written."""
    tc, trainer = self.tc, self.trainer
    member = _Member(run, checkpoint_lib.Checkpointer(run.ckpt_dir, max_to_keep=tc.max_to_keep),
                     metrics_lib.MetricsWriter(run.workdir, enabled=self.is_chief))
    stack.callback(member.ckpt.close_quietly)
    stack.callback(member.writer.close_quietly)
    make_iter = lambda: iter(trainer.task.batches(run.config, run.sources['train'],
                                                  run.tokenizer, train=True))
    resumed_from, state, member.iterator = restore_latest_readable(member.ckpt, trainer,
                                                                   make_iter)
    if resumed_from is not None:
      log.info('Resuming from %s step %d.', run.ckpt_dir, resumed_from)
    else:
      state = trainer.init_state(run.config.seed)
      if run.init_from is not None:
        state = trainer_lib.restore_init_from(trainer, state, run.config.init_from, *run.init_from)
    if self.is_chief:
      workdir_lib.save_config(run.config, run.workdir, resumed_from)
      if resumed_from is None:
        workdir_lib.record_train_data(run.config, run.workdir)
      workdir_lib.keep_tokenizer(run.tokenizer, run.workdir, resumed_from is not None)
    member.skipped = workdir_lib.skipped_so_far(run.workdir)
    if trainer.task.best_metric:  # Its best checkpoint is kept apart, in best/.
      member.best = checkpoint_lib.Checkpointer(os.path.join(run.workdir, 'best'), max_to_keep=1)
      stack.callback(member.best.close_quietly)
      member.best_value = workdir_lib.best_so_far(run.workdir, trainer.task.best_metric)
    return member, state

  def alive(self) -> list[int]:
    return [i for i, m in enumerate(self.members) if not m.failed]

  def run(self, eval_splits) -> list[dict]:
    tc, phases, preempt = self.tc, self.phases, self.preempt
    loop_start, others = time.perf_counter(), sum(phases.seconds.values())
    if self.ahead.enabled:
      for name, (jitted, args) in evaluate_lib.programs_ahead(
          self.trainer, self.states, [m.run.sources['validation'] for m in self.members],
          final=bool(eval_splits)).items():
        self.ahead.submit(name, jitted, *args)
    if self.runs[0].init_from is not None and model_types.of(self.config.model).continues:
      # A continued model before any step at its new length or scaling: the extension without
      # training, against which the continued steps are measured.
      for i, result in self.validate(0).items():
        self.members[i].last['validation'] = result
    t_log, step_log = time.perf_counter(), self.start
    reached = self.start  # The last step taken.
    for step in range(self.start + 1, tc.steps + 1):
      if not self.alive():
        break
      reached = step
      host_batches = [next(m.iterator) for m in self.members]
      metrics = self.states.step(host_batches)
      self.pending.append((step, host_batches, metrics))
      if step == self.start + 1:  # Keep compilation out of the speed figures.
        jax.block_until_ready(metrics)
        t_log, step_log = time.perf_counter(), step
        phases.seconds['compilation and first step'] += t_log - loop_start
      if jax.process_count() > 1 and step % tc.log_every == 0:  # Every host stops together.
        preempt.agree()
      saving = (step % tc.checkpoint_every == 0 or step in (tc.steps, self.stop_at)
                or bool(preempt.stop))
      if step % tc.log_every == 0 or step == tc.steps or saving:
        self.fetch()  # Every step since the last log line.
        if step % tc.log_every == 0 or step == tc.steps:
          now = time.perf_counter()
          rate = (step - step_log) / (now - t_log) if step > step_log else None
          for i in self.alive():
            _log_train(self.members[i], step, tc, rate, self.group)
          t_log, step_log = now, step
      paused = time.perf_counter()  # Evaluation and checkpointing are not training time.
      # A stop request skips an intermediate evaluation (to save in time), never the final one.
      if step == tc.steps or (step % tc.eval_every == 0 and not preempt.stop):
        self.validate_and_keep_best(step)
      if saving:
        self.save(step)
      t_log += time.perf_counter() - paused
      phases.seconds['validation and checkpoints'] += time.perf_counter() - paused
      if step == self.stop_at:
        break
      if preempt.stop:
        self.stop_for_signal(step, saved=saving)
        break
    jax.block_until_ready(self.states.state(0)['step'])
    # The steps: the loop's time but for the other phases (and the logging inside it).
    phases.seconds[f'{reached - self.start} steps'] += (
        time.perf_counter() - loop_start - (sum(phases.seconds.values()) - others))
    return self.finish(reached, eval_splits)

  def fetch(self) -> None:
    """The pending steps' metrics on the host, into each member's window; a non-finite step
    is recorded with its batch, then that member stops or counts it (skip)."""
    fetched = jax.device_get([metrics for _, _, metrics in self.pending])
    for (step, host_batches, _), result in zip(self.pending, fetched):
      for i, metrics in enumerate(self.states.split(result)):
        member = self.members[i]
        if member.failed or metrics is None:
          continue
        if metrics['nonfinite']:
          path = (reliability.save_batch(member.run.workdir, step, host_batches[i])
                  if self.is_chief else '')
          if self.tc.on_nonfinite == 'stop':
            member.failed = _diverged(member, step, path)
            self.states.failed[i] = True
            if self.group:  # When it happened, as the others train on; one run ends on it.
              log.error('%s: %s', member.name, member.failed)
            continue
          member.skipped += 1
          log.warning('step %d: non-finite loss or gradient norm; the update was skipped (%d '
                      'so far); batch saved to %s.', step, member.skipped, path)
        member.window.append(metrics)
    self.pending = []

  def validate(self, step: int) -> dict[int, dict]:
    """The living members' validation metrics (by member index), each logged at `step`."""
    if not self.alive():
      return {}
    self.ahead.wait('validation')  # Never compiled twice: its compilation ahead first.
    members, trainer = self.members, self.trainer
    together = evaluate_lib.group_validation(  # Every member's, a failed one's unused.
        trainer, self.states, [m.run.sources['validation'] for m in members],
        [m.run.tokenizer for m in members])
    return {i: self._log_validation(i, step, together[i] if together else evaluate_lib.validation(
        trainer, self.states.params(i), members[i].run.sources['validation'],
        members[i].run.tokenizer)) for i in self.alive()}

  def _log_validation(self, i: int, step: int, result: dict) -> dict:
    member = self.members[i]
    member.writer.write(step, 'validation', result)
    for name, own in result.get('sources', {}).items():  # A mixture's sources, each its own.
      member.writer.write(step, mixture.source_split('validation', name), own)
    log.info('%sstep %d | validation %s%s', f'{member.name}: ' if self.group else '', step,
             evaluate_lib.format_metrics(result),
             ''.join(f' | {name}: {evaluate_lib.format_metrics(own)}'
                     for name, own in result.get('sources', {}).items()))
    return result

  def validate_and_keep_best(self, step: int) -> None:
    """Validation at `step`, each member's best checkpoint (by the task's metric) kept apart."""
    for i, result in self.validate(step).items():
      member = self.members[i]
      member.last['validation'] = result
      metric = self.trainer.task.best_metric
      if member.best is not None and result[metric] > member.best_value:
        member.best_value = result[metric]  # Kept apart: max_to_keep never drops it.
        member.best.save(step, self.trainer.saved(self.states.state(i)))
        log.info('step %d | new best validation %s %.2f saved to %s', step, metric,
                 member.best_value, member.best.directory)

  def save(self, step: int) -> None:
    for i in self.alive():
      self.members[i].ckpt.save(step, self.trainer.saved(self.states.state(i)),
                                self.members[i].iterator)

  def stop_for_signal(self, step: int, saved: bool) -> None:
    """A stop request (preemption): this step saved (if the signal came during its
    bookkeeping, now), the saves finished, each member's results say so."""
    if not saved:
      self.fetch()
      self.save(step)
    for member in self.members:
      member.ckpt.wait()
      member.last['preempted'] = {'signal': self.preempt.stop, 'step': step}
    # The entry point says so in its last line (train.py), from member.last['preempted'].
    log.debug('Stopped by %s after step %d; checkpoint saved.', self.preempt.stop, step)

  def finish(self, reached: int, eval_splits) -> list[dict]:
    """Closes what the members write, evaluates the finished ones on `eval_splits` (after the
    last step, when no stop was asked), and returns each member's last results."""
    with self.phases('validation and checkpoints'):
      for member in self.members:
        member.ckpt.close()
        if member.best is not None:
          member.best.close()
        member.writer.close()
    if eval_splits and reached == self.tc.steps and not self.preempt.stop:
      with self.phases('evaluation'):
        self.ahead.wait_all()
        for i in self.alive():
          _evaluate_in_process(self.members[i], self.trainer, self.states.params(i), eval_splits)
    for member in self.members:
      if member.failed:
        member.last['failed'] = member.failed
    return [member.last for member in self.members]


def _log_train(member: _Member, step: int, tc, rate: float | None, group: bool) -> None:
  """Averages member's fetched steps since its last log line, and logs and writes them."""
  fetched, member.window = member.window, []
  if not fetched:
    return
  good = [m for m in fetched if not m['nonfinite']] or fetched
  avg = {k: float(np.mean([m[k] for m in good])) for k in good[0] if k != 'nonfinite'}
  avg['learning_rate'] = float(fetched[-1]['learning_rate'])
  if tc.on_nonfinite == 'skip':
    avg['skipped_steps'] = member.skipped
  speed = '(compiling)'
  if rate is not None:  # Not on the first step, whose time is mostly compilation.
    avg.update(steps_per_sec=rate, tokens_per_sec=rate * avg['tokens'],
               loss_tokens_per_sec=rate * avg['loss_tokens'])
    weighed = (f' ({avg["loss_tokens_per_sec"]:,.0f} in the loss)'
               if avg['loss_tokens'] != avg['tokens'] else '')
    speed = (f'{rate:.2f} steps/s | {avg["tokens_per_sec"]:,.0f} tok/s{weighed} | ETA '
             f'{logs.duration((tc.steps - step) / rate)}')
  member.writer.write(step, 'train', avg)
  accuracy = f' | acc {avg["accuracy"]:.3f}' if 'accuracy' in avg else ''  # None: regression.
  log.info('%sstep %d/%d | loss %.4f%s | lr %.2e | %s',
           f'{member.name}: ' if group else '', step, tc.steps, avg['loss'], accuracy,
           avg['learning_rate'], speed)
  member.last['train'] = avg


def _evaluate_in_process(member: _Member, trainer, params, splits) -> None:
  """What `eval.py --workdir=W --splits=...` writes (eval_results.json), from the parameters
  in memory and the programs this process compiled already."""
  run = resolve.evaluation_of(member.run, member.run.config.train.steps, splits)
  results = evaluate_lib.evaluate_run(run, trainer, params)
  path = os.path.join(run.workdir, 'eval_results.json')
  if jax.process_index() == 0:
    files.write_json_atomic(path, results)
  log.info('%s\nwrote %s', evaluate_lib.format_results(results), path)
  member.last['eval'] = results
