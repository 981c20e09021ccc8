"""Everything a run needs that follows from (config, mesh): the model graph, the optimizer,
the jitted steps with their shardings, a fresh state, and restoring parameters from a
checkpoint onto that state's shardings (the run's own, or another run's that it starts from:
`config.init_from`, checked by roformer/resolve.py)."""

import functools
import glob
import logging
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from roformer import attention_options
from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import model_types
from roformer import models
from roformer import moe
from roformer import optim
from roformer import self_attention
from roformer import sharding
from roformer import steps
from roformer import tasks
from roformer import variables

log = logging.getLogger('roformer')


def _redraw_interval(model_cfg) -> int:
  att = self_attention.attention_config(model_cfg)
  return attention_options.KINDS[att.kind].redraw_interval(att)


def dropout_seed(config) -> int:
  """The seed of a run's dropout keys (and of nothing else in the step)."""
  return config.seed + 1


class SeededStep:
  """The jitted train step called as step(state, batch), with the run's dropout seed, or as
  step(state, batch, dropout_seed) for another run of the same model."""

  def __init__(self, jitted: sharding.on_mesh, seed: int):
    self.jitted, self.seed = jitted, seed

  @property
  def fn(self):
    return self.jitted.fn

  def _seed(self, seed):
    return np.int32(self.seed if seed is None else seed)

  def __call__(self, state, batch, dropout_seed: int | None = None):
    return self.jitted(state, batch, self._seed(dropout_seed))

  def lower(self, state, batch, dropout_seed: int | None = None):
    return self.jitted.lower(state, batch, self._seed(dropout_seed))


class Trainer:
  """Everything a run needs that follows from (config, mesh): model graph, optimizer, jitted
  steps, and the state's shardings."""

  def __init__(self, config: ml_collections.ConfigDict, mesh):
    self.config, self.mesh = config, mesh
    self.task = tasks.for_config(config)
    # Trainers of the same model for sources another task scores (evaluate.scorer), kept so
    # that their programs compile once.
    self.scorers = {}
    # Shapes only, outside the mesh: the variables' logical axes are laid out below, by rules.
    abstract_model = nnx.eval_shape(lambda: models.create(config.model, seed=config.seed))
    # 'params' holds every variable of the model; the optimizer sees its trainable Params.
    self.graphdef, abstract_params = nnx.split(abstract_model)
    # A checkpoint path of an earlier parameter layout -> its path now (checkpoint.restore).
    self.rename = functools.partial(models.legacy_param_path, config.model)
    self.tx = optim.make_optimizer(config.train, moe.choice_bias_rate(config.model))
    self.schedule = optim.make_schedule(config.train)
    replicated = sharding.replicated(mesh)
    rules = sharding.rules_from_config(config.mesh)
    self.state_shardings, self.abstract_state = self._abstract(abstract_params, rules)
    # Checkpoints hold the per-block layout; a scanned stack's stacked parameters are converted
    # on saving and restoring (roformer/scanned.py, `saved` and `from_saved`).
    self.layout = models.layout(abstract_model)
    self.saved_abstract_state = self.abstract_state
    # The same model with its blocks as a loop, which holds the per-block layout (what reads
    # each layer apart, such as roformer/sinks.py, runs it).
    self.saved_graphdef = self.graphdef
    if self.layout is not None:
      self.saved_graphdef, per_block = nnx.split(nnx.eval_shape(lambda: models.create(
          models.per_block_config(config.model), seed=config.seed)))
      saved_shardings, self.saved_abstract_state = self._abstract(per_block, rules)
      self._to_saved = jax.jit(
          functools.partial(self.layout.to_layers, target=self.saved_abstract_state),
          out_shardings=saved_shardings)
      self._from_saved = jax.jit(
          functools.partial(self.layout.to_stacked, target=self.abstract_state),
          out_shardings=self.state_shardings)
      self._params_to_saved = jax.jit(
          functools.partial(self.layout.to_layers, target=self.saved_abstract_state['params']),
          out_shardings=saved_shardings['params'])
      self._params_from_saved = jax.jit(
          functools.partial(self.layout.to_stacked, target=self.abstract_state['params']),
          out_shardings=self.state_shardings['params'])
    # The initial state (init_state), compiled once: the seed's key is an argument, so runs
    # that differ only in their seed share it (a program per seed took 2 s of a group's set-up).
    self._init = jax.jit(self._fresh_state, out_shardings=self.state_shardings)
    batch_sharding = sharding.batch_sharding(mesh)
    # The step as a pure function of (state, batch, dropout seed): the seed is an argument, so
    # one compiled program serves runs that differ only in their seed (roformer/members.py).
    self.step_fn = functools.partial(
        steps.train_step, graphdef=self.graphdef, tx=self.tx, schedule=self.schedule,
        task=self.task, label_smoothing=config.train.label_smoothing,
        redraw_interval=_redraw_interval(config.model),
        grad_accum_steps=config.train.grad_accum_steps)
    self.train_step = SeededStep(sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
        self.step_fn, in_shardings=(self.state_shardings, batch_sharding, replicated),
        out_shardings=(self.state_shardings, replicated), donate_argnums=0)),
                                 dropout_seed(config))
    # Evaluation sums of one batch as a pure function of (params, batch), which a vmapped
    # group evaluates for every member at once (roformer/members.py).
    self.eval_fn = functools.partial(steps.eval_step, graphdef=self.graphdef, task=self.task)
    self.eval_step = sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
        self.eval_fn, in_shardings=(self.state_shardings['params'], batch_sharding),
        out_shardings=replicated))
    if self.task.per_example:
      self.predict_step = sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
          functools.partial(steps.predict_step, graphdef=self.graphdef, task=self.task),
          in_shardings=(self.state_shardings['params'], batch_sharding),
          out_shardings=replicated))

  def _abstract(self, abstract_params, rules):
    """(shardings, abstract state with them) of a train state holding `abstract_params`."""
    abstract = {'params': abstract_params,
                'opt_state': jax.eval_shape(self.tx.init,
                                            variables.trainable(abstract_params)[0]),
                'step': jax.ShapeDtypeStruct((), jnp.int32)}
    shardings = sharding.state_shardings(abstract, self.mesh, rules)
    return shardings, jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)

  def saved(self, state):
    """A train state as checkpoints hold it (the per-block layout): `state` itself unless the
    stack is stored stacked."""
    return state if self.layout is None else self._to_saved(state)

  def saved_params(self, params):
    """A state's 'params' in the per-block layout of checkpoints."""
    return params if self.layout is None else self._params_to_saved(params)

  def params_from_saved(self, params):
    """Parameters in the per-block layout (`saved_params`) in this model's layout."""
    return params if self.layout is None else self._params_from_saved(params)

  def from_saved(self, state):
    """A train state restored from a checkpoint (`saved_abstract_state`) in this model's
    layout."""
    return state if self.layout is None else self._from_saved(state)

  def init_state(self, seed: int | None = None):
    """A fresh train state, its parameters drawn from `seed` (default: config.seed)."""
    seed = self.config.seed if seed is None else seed
    with jax.set_mesh(self.mesh):
      return self._init(jax.random.key(seed))

  def _fresh_state(self, key):
    params = nnx.state(models.create(self.config.model, seed=key))
    return {'params': params, 'opt_state': self.tx.init(variables.trainable(params)[0]),
            'step': jnp.int32(0)}

  def num_params(self) -> int:
    return models.parameter_count(variables.trainable(self.abstract_state['params'])[0])


def _param_shapes(abstract_params) -> dict[str, tuple[int, ...]]:
  return {sharding.path_str(path): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_flatten_with_path(abstract_params)[0]}


def check_checkpoint_matches(ckpt: checkpoint_lib.Checkpointer, step: int,
                             trainer: Trainer) -> None:
  """Compares saved parameter shapes with the model the config builds, from metadata only."""
  saved = {trainer.rename(k).removesuffix('/value'): v
           for k, v in ckpt.param_shapes(step).items()}
  expected = _param_shapes(trainer.saved_abstract_state['params'])
  problems = [f'{k}: checkpoint {saved.get(k)} vs config {expected.get(k)}'
              for k in sorted(set(saved) | set(expected)) if saved.get(k) != expected.get(k)]
  if problems:
    raise errors.ConfigError(
        f'the checkpoint at step {step} in {ckpt.directory} does not match the model that the '
        f'config builds ({len(problems)} parameters differ, e.g. {"; ".join(problems[:3])}). '
        'Fix: evaluate with the config.json the checkpoint was trained with.')


BEST = 'best'  # --step=best: the checkpoint that the task's best metric kept in workdir/best/.


def checkpoint_step(workdir: str, step: int | str | None = None) -> int:
  """`step` (default: the latest of checkpoints/; 'best': the one kept in best/) if `workdir`
  has a finished checkpoint of it, in checkpoints/ or best/; otherwise a ConfigError naming
  the steps there are."""
  workdir = os.path.abspath(workdir)
  available = checkpoint_lib.all_steps(os.path.join(workdir, 'checkpoints'))
  best = checkpoint_lib.all_steps(os.path.join(workdir, BEST))
  there = f'available: {available}' + (f', and {best[-1]} in best/ (--step=best)' if best else '')
  if step == BEST:
    if not best:
      raise errors.ConfigError(
          f'--step=best: {workdir} has no best checkpoint (best/ is kept by a run whose task has '
          f'a best metric, such as translation\'s BLEU, once validated); {there}. Fix: one of '
          'those, or no step for the latest.')
    return best[-1]
  if not available and not best:
    raise errors.ConfigError(f'{workdir} has no checkpoint. Fix: train first (python train.py '
                             f'--workdir {workdir} ...) or point --workdir at a trained run.')
  if step is None and not available:
    raise errors.ConfigError(f'{workdir} has no checkpoint in checkpoints/, only the best one '
                             f'in best/ (step {best[-1]}). Fix: --step=best.')
  if step is not None and step not in available + best:
    aside = sorted(glob.glob(os.path.join(workdir, 'checkpoints', f'{step}.unreadable*')))
    why = (f' (it was unreadable, and a resume set it aside as {aside[0]})' if aside else '')
    raise errors.ConfigError(f'--step={step} has no checkpoint in {workdir}{why}; {there}. Fix: '
                             'one of those, or no step for the latest.')
  return available[-1] if step is None else step


def checkpoint_directory(workdir: str, step: int) -> str:
  """The folder of `workdir` that holds `step`'s checkpoint: checkpoints/, or best/ for the
  best checkpoint once its step has rotated out of checkpoints/."""
  workdir = os.path.abspath(workdir)
  rotating = os.path.join(workdir, 'checkpoints')
  if step not in checkpoint_lib.steps_on_disk(rotating) and step in checkpoint_lib.steps_on_disk(
      os.path.join(workdir, BEST)):
    return os.path.join(workdir, BEST)
  return rotating


def restore_params(trainer: Trainer, workdir: str, step: int,
                   other_step: str = 'use another step with --step'):
  """The parameters of `workdir`'s checkpoint at `step` (see checkpoint_step), restored onto
  the trainer's shardings after checking their shapes against the model it builds (from
  metadata, before reading any array). Raises ConfigError naming the fix when the checkpoint
  holds another model or cannot be read; `other_step` says how the caller's user picks another
  step (eval.py and generate.py: --step)."""
  ckpt_dir = checkpoint_directory(workdir, step)
  ckpt = checkpoint_lib.Checkpointer(ckpt_dir)
  try:
    try:
      check_checkpoint_matches(ckpt, step, trainer)
      state = ckpt.restore(step, trainer.saved_abstract_state, rename=trainer.rename)
    except errors.ConfigError:
      raise
    except Exception as e:  # pylint: disable=broad-except  # Truncated or missing files.
      others = [s for s in ckpt.all_steps() if s != step]
      raise errors.DamagedFileError(
          f'the checkpoint at step {step} in {os.path.join(ckpt_dir, str(step))} cannot be '
          f'read ({errors.read_failure(e)}). Fix: '
          + (f'{other_step} (available: {sorted(others)}), or restore' if others else 'restore')
          + ' that directory from a copy.') from None
  finally:
    ckpt.close()
  return trainer.params_from_saved(state['params'])


# Parameters of a masked LM that a classifier does not take over.
_MLM_HEAD = ('head', 'head_ln', 'output_bias')


def restore_init_from(trainer: Trainer, state, init_from: str, saved, step: int):
  """The state of a fresh run started from `init_from`: a classifier takes over the pretrained
  encoder (its head keeps its initialisation), a continued causal LM every parameter. The
  optimizer starts afresh."""
  source_config = ml_collections.ConfigDict(saved.to_dict())
  source_config.model.vocab_size = trainer.config.model.vocab_size
  source_config.mesh = trainer.config.mesh
  source_trainer = Trainer(source_config, trainer.mesh)
  pretrained = source_trainer.saved_params(restore_params(
      source_trainer, init_from, step,
      other_step='config.init_from reads the latest step; to start from another, point it at a '
      'copy of the run without the later steps')).to_pure_dict()
  # Both in the per-block layout, whichever of them keeps its blocks stacked (scan_layers).
  params = trainer.saved_params(state['params'])
  target = params.to_pure_dict()
  skip = () if model_types.of(trainer.config.model).continues else _MLM_HEAD
  taken = sorted(k for k in target if k in pretrained and k not in skip)
  for key in taken:
    target[key] = pretrained[key]
  nnx.replace_by_pure_dict(params, target)
  params = trainer.params_from_saved(params)
  log.info('Initialised %s from %s step %d; new: %s.', ', '.join(taken), init_from, step,
           ', '.join(sorted(set(target) - set(taken))) or 'nothing')
  with jax.set_mesh(trainer.mesh):
    params = jax.device_put(params, trainer.state_shardings['params'])
    opt_state = jax.jit(trainer.tx.init, out_shardings=trainer.state_shardings['opt_state'])(
        variables.trainable(params)[0])
  return {'params': params, 'opt_state': opt_state, 'step': state['step']}
