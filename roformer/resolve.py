"""From a config and a workdir to a resolved run: every check, once, in one place.

`for_training` and `for_evaluation` run the checks in the order their inputs become known (the
fields alone; then, for a warm start, the settings taken from its source; the fields against
each other and the mesh; the workdir and the saved run; the data against the model) and open
what the run needs. Whatever they return is checked: the training loop (`roformer.loop`) and
evaluation (`roformer.evaluate`) consume it and check nothing again. Every check raises one
ConfigError naming the field or file and the fix, before anything is compiled.
"""

import dataclasses
import os
from typing import Any

import jax
import ml_collections
from jax.sharding import Mesh

from roformer import checkpoint as checkpoint_lib
from roformer import config_changes
from roformer import config_lib
from roformer import errors
from roformer import positions as positions_lib
from roformer import sharding
from roformer import tasks
from roformer import trainer as trainer_lib
from roformer import warm_start
from roformer import workdir as workdir_lib
from roformer.data import pipeline


@dataclasses.dataclass
class Run:
  """A checked run. `config` is complete and valid (config.model.vocab_size set from the
  tokenizer); `sources` are the dataset's splits that the run reads, `tokenizer` the one its
  model was (or will be) trained with.

  Training: `resume_step` is the newest checkpoint in the workdir (None for a fresh run);
  `init_from` is (the source's saved config, its step) for a fresh run that starts from
  config.init_from, else None. Evaluation: `step` is the checkpoint evaluated, `saved` the
  config the run was trained with, `splits` the splits to evaluate."""
  config: ml_collections.ConfigDict
  workdir: str
  mesh: Mesh
  sources: dict[str, Any]
  tokenizer: Any
  resume_step: int | None = None
  init_from: tuple[ml_collections.ConfigDict, int] | None = None
  step: int | None = None
  saved: ml_collections.ConfigDict | None = None
  splits: tuple[str, ...] = ()

  @property
  def ckpt_dir(self) -> str:
    return os.path.join(self.workdir, 'checkpoints')


def _mesh(config, trained: tuple[int, str] | None = None) -> Mesh:
  """The mesh of config.mesh, with the fields that relate to each other and to it checked
  (`trained`: config_lib.check_relations')."""
  mesh = sharding.make_mesh(config.mesh)
  config_lib.check_relations(config, sharding.data_parallel_size(mesh), jax.process_count(),
                             trained)
  return mesh


def for_training(config: ml_collections.ConfigDict, workdir: str) -> Run:
  """The run that `train.py` starts or resumes in `workdir`."""
  config_lib.check_fields(config)
  workdir = os.path.abspath(workdir)
  resume_step = checkpoint_lib.latest_step(os.path.join(workdir, 'checkpoints'))
  starting_from = bool(config.init_from) and resume_step is None
  if starting_from:  # Settings the config leaves to the source (its training length).
    warm_start.prepare(config)
  # Options the scheme derives from the positions trained on (`derived`): a resumed run's
  # saved values, or a new run's own.
  saved = (config_lib.load(workdir) if resume_step is not None
           and os.path.exists(os.path.join(workdir, 'config.json')) else None)
  with config.unlocked():
    if saved is not None:
      positions_lib.take_derived(config.model, saved.model)
    positions_lib.derive(config.model, config_lib.trained_positions(config)[0])
  mesh = _mesh(config)
  workdir_lib.check_workdir(config, workdir, resume_step)
  init_from = warm_start.check_init_from(config) if starting_from else None
  if resume_step is not None:  # Before any tokenizing of files whose text changed.
    workdir_lib.check_train_data(config, workdir)
  sources, tokenizer = workdir_lib.setup_data(
      config, splits=('train', 'validation'), workdir=workdir if resume_step is not None else '')
  tasks.for_config(config).check_data(config, sources)
  return Run(config, workdir, mesh, sources, tokenizer, resume_step=resume_step,
             init_from=init_from)


def for_evaluation(config: ml_collections.ConfigDict, workdir: str, step: int | None = None,
                   splits=('validation', 'test')) -> Run:
  """The run that `eval.py` evaluates: `workdir`'s checkpoint at `step` (default: the latest)
  under `config` (the saved config with the command line's overrides), on `splits` (a
  classifier's come from config.eval.splits)."""
  config_lib.check_fields(config)
  workdir = os.path.abspath(workdir)
  unknown = [s for s in splits if s not in pipeline.SPLITS]
  if unknown or not splits:
    raise errors.ConfigError(f'splits {list(splits)}: evaluate some of {list(pipeline.SPLITS)}. '
                             'Fix: e.g. --splits=validation,test.')
  step = trainer_lib.checkpoint_step(workdir, step)
  saved = config_lib.load(workdir)
  changed = config_changes.changed(saved, config, config_changes.EVALUATE)
  if changed:
    raise errors.ConfigError(
        f'the config does not match the model trained in {workdir}: {"; ".join(changed)} '
        f'(saved vs now). Of the model, only '
        f'{", ".join(config_changes.allowed(saved, config_changes.EVALUATE))} may change at '
        'evaluation. Fix: drop those --config.model/--config.data overrides.')
  _scale_from(config, saved)
  count, where = config_lib.trained_positions(saved)
  mesh = _mesh(config, (count, f"the saved {where.removeprefix('config.')}"))
  if tasks.per_example(config):
    splits = tuple(config.eval.splits)
  sources, tokenizer = workdir_lib.setup_data(config, splits=('train',) + tuple(splits),
                                              workdir=workdir)
  return Run(config, workdir, mesh, sources, tokenizer, step=step, saved=saved,
             splits=tuple(splits))


def _scale_from(config, saved) -> None:
  """What the position scheme takes from the checkpoint it evaluates (its `from_source`)."""
  with config.unlocked():
    positions_lib.model_scheme(config.model).from_source(
        config.model.position, saved.data.seq_len, config_changes.EVALUATE)


def evaluation_of(run: Run, step: int, splits) -> Run:
  """The evaluation that `eval.py --workdir=run.workdir --splits=...` resolves, for a run this
  process has just trained to `step`: the config it saved, with nothing overridden (so nothing
  to check again), and its sources opened for `splits`."""
  config = ml_collections.ConfigDict(run.config.to_dict())
  saved = ml_collections.ConfigDict(run.config.to_dict())
  _scale_from(config, saved)
  if tasks.per_example(config):
    splits = tuple(config.eval.splits)
  missing = [s for s in ('train',) + tuple(splits) if s not in run.sources]
  opened = pipeline.load_sources(config.data, splits=missing) if missing else {}
  if opened and config.data.token_cache:
    opened = pipeline.token_cached(config.data, opened, run.tokenizer)
  sources = {**run.sources, **opened}
  return Run(config, run.workdir, run.mesh, sources, run.tokenizer, step=step, saved=saved,
             splits=tuple(splits))
