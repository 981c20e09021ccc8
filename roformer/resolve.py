"""From a config and a workdir to a resolved run: every check, once, in one place.

`validate(config)` holds a config's fields to their specs (`check_fields`) and to each other
(`check_relations`), from roformer/config_checks.py and re-exported here. `for_training` and
`for_evaluation` run the checks in the order their inputs become known (the fields alone;
then, for a warm start from `config.init_from`, the settings taken from its source; the
fields against each other and the mesh; the workdir and the saved run; the source run; the
data against the model) and open what the run needs. Whatever they return is checked: the
training loop (`roformer.loop`) and evaluation (`roformer.evaluate`) consume it and check
nothing again. Every check raises one ConfigError naming the field or file and the fix,
before anything is compiled.
"""

import dataclasses
import logging
import os
from typing import Any

import jax
import ml_collections
from jax.sharding import Mesh

from roformer import attention_options
from roformer import checkpoint as checkpoint_lib
from roformer import config_schema
# Re-exported: resolution runs them, and callers read them here.
from roformer.config_checks import (  # pylint: disable=unused-import
    check_fields, check_relations, trained_positions, validate)
from roformer import errors
from roformer import model_types
from roformer import positions as positions_lib
from roformer import saved_config
from roformer import self_attention
from roformer import sharding
from roformer import tasks
from roformer import trainer as trainer_lib
from roformer import workdir as workdir_lib
from roformer.data import corpus
from roformer.data import mixture
from roformer.data import pipeline
from roformer.data import synthetic

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Run:
  """A checked run. `config` is complete and valid (config.model.vocab_size set from the
  tokenizer); `sources` are the dataset's splits that the run reads, `tokenizer` the one its
  model was (or will be) trained with.

  Training: `resume_step` is the newest checkpoint in the workdir (None for a fresh run);
  `init_from` is (the source's saved config, its step) for a fresh run that starts from
  config.init_from, else None. Evaluation: `step` is the checkpoint evaluated, `saved` the
  config the run was trained with, `splits` the splits to evaluate, `train_data_changed` how
  the files' train documents differ from those it was trained on (none if they do not)."""
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
  train_data_changed: tuple[str, ...] = ()

  @property
  def ckpt_dir(self) -> str:
    return os.path.join(self.workdir, 'checkpoints')


def _mesh(config, trained: tuple[int, str] | None = None) -> Mesh:
  """The mesh of config.mesh, with the fields that relate to each other and to it checked
  (`trained`: see check_relations)."""
  mesh = sharding.make_mesh(config.mesh)
  check_relations(config, sharding.data_parallel_size(mesh), jax.process_count(), trained)
  return mesh


def for_training(config: ml_collections.ConfigDict, workdir: str) -> Run:
  """The run that `train.py` starts or resumes in `workdir`."""
  followed = _followed(config, workdir)
  resumed = os.path.exists(os.path.join(workdir, 'config.json'))
  with config.unlocked():  # Saved as the files they name from here (a resumed run's as saved).
    corpus.make_absolute(config.data, followed.data if resumed else None)
  check_fields(config, followed)
  workdir = os.path.abspath(workdir)
  resume_step = checkpoint_lib.latest_step(os.path.join(workdir, 'checkpoints'))
  starting_from = bool(config.init_from) and resume_step is None
  _take_from_runs(config, workdir, resume_step)
  mesh = _mesh(config)
  workdir_lib.check_workdir(config, workdir, resume_step)
  init_from = check_init_from(config) if starting_from else None
  if resume_step is not None:  # Before any tokenizing of files whose text changed.
    workdir_lib.check_train_data(config, workdir)
  sources, tokenizer = workdir_lib.setup_data(
      config, splits=('train', 'validation'), workdir=workdir if resume_step is not None else '')
  tasks.for_config(config).check_data(config, sources)
  mixture.check_text_lengths(sources, tokenizer, config.data.seq_len)  # Rows in text, if any.
  return Run(config, workdir, mesh, sources, tokenizer, resume_step=resume_step,
             init_from=init_from)


def _take_from_runs(config: ml_collections.ConfigDict, workdir: str,
                    resume_step: int | None) -> None:
  """What `config` takes from the runs it follows, before its relations are checked: a
  continuation's settings that it leaves to its source (its training length), when it starts;
  the options the scheme derives from the positions trained on (`derived`), a resumed run's
  saved values or a new run's own; and what a resumed continuation took from its source when
  it started."""
  if config.init_from and resume_step is None:
    take_from_source(config)
  saved = (saved_config.load(workdir) if resume_step is not None
           and os.path.exists(os.path.join(workdir, 'config.json')) else None)
  with config.unlocked():
    if saved is not None:
      positions_lib.take_derived(config.model, saved.model)
      if config.init_from:
        positions_lib.take_filled(config.model, saved.model)
    positions_lib.derive(config.model, trained_positions(config)[0])


def _followed(config, workdir: str) -> ml_collections.ConfigDict | None:
  """The saved config of the run that `config` follows (the one it resumes in `workdir`, else
  config.init_from's), whose values it keeps where this version refuses them for a new run."""
  for run in (workdir, config.init_from):
    if run and os.path.exists(os.path.join(run, 'config.json')):
      return saved_config.load(run)
  return None


def check_rerun(config: ml_collections.ConfigDict, workdir: str,
                finished_records: bool = False) -> None:
  """What `for_training` checks before it opens any data, for `config` run in `workdir`, and
  without a device (a sweep's driver checks every point with it before any starts, and starts
  no JAX backend): the fields and their relations, and, where `workdir` exists, that it holds
  no other run. A continuation whose source is not trained yet is left to its own run. With
  `finished_records`, `workdir` holds a finished run whose checkpoints were deleted, which is
  not trained again: its config is compared with `config` as a resume's would be."""
  check_fields(config, _followed(config, workdir))
  config = ml_collections.ConfigDict(config.to_dict())
  workdir = os.path.abspath(workdir)
  steps = checkpoint_lib.steps_on_disk(os.path.join(workdir, 'checkpoints'))
  resume_step = steps[-1] if steps else None
  if (config.init_from and resume_step is None
      and not os.path.exists(os.path.join(config.init_from, 'config.json'))):
    return
  _take_from_runs(config, workdir, resume_step)
  check_relations(config, on_device=False)
  if finished_records:
    workdir_lib.check_finished_records(config, workdir)
  elif os.path.exists(workdir):
    workdir_lib.check_workdir(config, workdir, resume_step)


def for_evaluation(config: ml_collections.ConfigDict, workdir: str,
                   step: int | str | None = None, splits=('validation', 'test')) -> Run:
  """The run that `eval.py` evaluates: `workdir`'s checkpoint at `step` (default: the latest;
  'best': the one kept in best/) under `config` (the saved config with the command line's
  overrides), on `splits` (a classifier's come from config.eval.splits)."""
  workdir = os.path.abspath(workdir)
  unknown = [s for s in splits if s not in pipeline.SPLITS]
  if unknown or not splits:
    raise errors.ConfigError(f'splits {list(splits)}: evaluate some of {list(pipeline.SPLITS)}. '
                             'Fix: e.g. --splits=validation,test.')
  step = trainer_lib.checkpoint_step(workdir, step)
  saved = saved_config.load(workdir)
  with config.unlocked():  # Globs given here name the files from here; the saved ones as saved.
    corpus.make_absolute(config.data, saved.data)
  check_evaluation(config, saved, workdir)
  _fit_saved_mesh(config, saved)
  count, where = trained_positions(saved)
  mesh = _mesh(config, (count, f"the saved {where.removeprefix('config.')}"))
  if tasks.per_example(config):
    splits = tuple(config.eval.splits)
  sources, tokenizer = workdir_lib.setup_data(config, splits=('train',) + tuple(splits),
                                              workdir=workdir)
  scored = {s: sources[s] for s in splits if s in sources}  # Not the train split's text.
  mixture.check_text_lengths(  # Rows in text, if any, at the shortest length evaluated.
      scored, tokenizer, config.data.seq_len * min(config.eval.length_multipliers, default=1))
  data_changed = tuple(workdir_lib.train_data_changes(config, workdir))
  if data_changed:
    log.warning(
        "config.data's files now hold other train documents than %s was trained on (%s; "
        'saved vs now): the splits scored are those of the files now, which may differ from '
        "the ones validated during training. The results record each split's documents "
        "('data') and this change.",
        workdir, '; '.join(data_changed))
  return Run(config, workdir, mesh, sources, tokenizer, step=step, saved=saved,
             splits=tuple(splits), train_data_changed=data_changed)


def _fit_saved_mesh(config, saved) -> None:
  """A run evaluated on other devices than it trained on: the mesh decides how the model is
  computed, not what, so a saved mesh that the devices here cannot hold (8 devices' worth on
  one) gives way to the default one (data parallel over every device), with a warning. A mesh
  given on the command line is the user's own, and is checked as given."""
  if config.mesh.to_dict() != saved.mesh.to_dict():
    return
  try:
    sharding.make_mesh(config.mesh)
    return
  except errors.ConfigError as e:
    reason = errors.without_fix(e).rstrip('.')
  default = config_schema.default_config().mesh
  with config.unlocked():
    for axis in (*sharding.AXES, 'num_devices'):
      config.mesh[axis] = default[axis]
  log.warning('the mesh the run trained on does not fit here (%s): evaluating on the default '
              'mesh, data parallel over all %d devices (the same results; give --config.mesh.* '
              'to choose another).', reason, len(jax.devices()))


def check_evaluation(config: ml_collections.ConfigDict, saved: ml_collections.ConfigDict,
                     workdir: str, overrides: str = '--config.model/--config.data overrides'
                     ) -> None:
  """Checks `config`, the config `saved` in `workdir` with `overrides` (named in the fix), for
  an evaluation of that run: every field, and only the fields that may change at evaluation
  changed (the rest decide what was trained); then fills in, in `config`, what the position
  scheme takes from the checkpoint."""
  check_fields(config, saved)
  changed = saved_config.changed(saved, config, saved_config.EVALUATE)
  if changed:
    unmet = {}  # A condition in words -> the fields that need it.
    for field, words in saved_config.conditions_unmet(saved, saved_config.EVALUATE):
      unmet.setdefault(words, []).append(field)
    raise errors.ConfigError(
        f'the config does not match the model trained in {workdir}: {"; ".join(changed)} '
        f'(saved vs now). Of the model and its data, only '
        f'{", ".join(saved_config.allowed(saved, saved_config.EVALUATE))} may change at '
        'evaluation' + ''.join(f'; {" and ".join(fields)} only {words}, which this run has not'
                               for words, fields in unmet.items())
        + f'. Fix: drop those {overrides}.')
  _scale_from(config, saved)


def _scale_from(config, saved) -> None:
  """What the scheme takes from the checkpoint (`from_source`); no factor given beside
  eval.scale_rope_to_length, which sets one at each length."""
  m = config.model
  with config.unlocked():
    positions_lib.model_scheme(m).from_source(m.position, saved.data.seq_len, saved_config.EVALUATE)
  if config.eval.scale_rope_to_length and not tasks.per_example(config):
    positions_lib.check_length_factor(config.model, saved.model)


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


# A run started from another run's weights (config.init_from): a classifier fine-tuned from a
# masked-LM encoder, or a causal LM continued at a new length or RoPE scaling (the context
# extension of Chen et al. 2023: train short, continue briefly at a longer length). The weights
# are taken over by trainer.restore_init_from.

# Model fields that fix the encoder's parameters and what they compute.
# (Not vocab_size: it is set from the tokenizer, which comes from that run.)
_ENCODER_FIELDS = ('num_layers', 'd_model', 'num_heads', 'num_kv_heads', 'd_ff', 'norm',
                   'normalization', 'mlp', 'biases', 'residual', 'residual_multiplier',
                   'activation', 'layer_norm_eps',
                   'type_vocab_size', 'embedding_multiplier', 'embedding_norm')


def _encoder_fields(model_cfg) -> dict:
  """The model fields that decide what a pretrained encoder computes: the sizes, the position
  kind with the options that kind reads, and the attention fields that decide what it computes
  (attention_options.fields_read: the kind's own, the switches and those of the switches on)."""
  fields = {name: model_cfg.get(name) for name in _ENCODER_FIELDS}
  fields['head_dim'] = positions_lib.head_dim(model_cfg)  # Its width, whether set or derived.
  position = model_cfg.position
  fields['position'] = {'kind': position.kind,
                        **{name: position.get(name)
                           for name in positions_lib.scheme_fields(position.kind)}}
  fields['attention'] = attention_options.fields_read(self_attention.attention_config(model_cfg))
  return fields


def _source(config) -> ml_collections.ConfigDict:
  """config.init_from's saved config, or a ConfigError naming the fix."""
  source = os.path.abspath(config.init_from)
  fix = ('Fix: point it at a workdir of train.py (a masked-LM run to fine-tune a classifier, a '
         'causal-LM run to continue), the directory that holds its config.json and checkpoints/.')
  if not os.path.isdir(source):
    raise errors.ConfigError(f'config.init_from={config.init_from!r} is not a directory. {fix}')
  if not os.path.exists(os.path.join(source, 'config.json')):
    above = [d for d in (os.path.dirname(source), os.path.dirname(os.path.dirname(source)))
             if os.path.exists(os.path.join(d, 'config.json'))]
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} holds no config.json, so it is not the workdir '
        'of a run' + (f' ({above[0]} is: did you mean it?)' if above else '') + f'. {fix}')
  return saved_config.load(source)


def take_from_source(config: ml_collections.ConfigDict) -> None:
  """Before the config's own checks: the options the position scheme derived from the
  source's training (`derived`: FoPE's clipping length) take the source's values, whatever the
  model type; for a causal LM continued from another, the scheme takes what it needs from the
  source (its `from_source`: RoPE's scaling its original length); learned positions cannot go
  past the rows their table has (a longer table would change the parameters, and the rows past
  the old length would be untrained)."""
  saved = _source(config)
  with config.unlocked():  # What its scheme derived from the source's training (`derived`).
    positions_lib.take_derived(config.model, saved.model)
  if not (model_types.of(config.model).continues and saved.model.type == config.model.type):
    return
  with config.unlocked():  # What the scheme takes from its source (its `from_source`).
    positions_lib.model_scheme(config.model).from_source(
        config.model.position, saved.data.seq_len, saved_config.CONTINUE)
  longest = positions_lib.model_scheme(saved.model).max_length(saved.model.position)
  if longest is not None and config.data.seq_len > longest:
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} has {saved.model.position.kind} positions, '
        f'whose parameters cover {longest} positions, fewer than config.data.seq_len='
        f'{config.data.seq_len}: it cannot be continued past them (more rows would change the '
        'parameters, and they would be untrained). Fix: continue at a seq_len within them, or '
        'train the source with a scheme that has no length-dependent parameters (rope, alibi, '
        '...).')


def check_init_from(config: ml_collections.ConfigDict) -> tuple[ml_collections.ConfigDict, int]:
  """Checks that config.init_from is a run this model can start from: a masked-LM run whose
  encoder a classifier takes over, or a causal-LM run continued (every parameter) at another
  length or RoPE scaling. Returns (its config, its latest step). Reads metadata only."""
  saved = _source(config)
  wanted = model_types.of(config.model).starts_from
  if saved.model.type != wanted:
    start = model_types.TYPES[wanted].start
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} is a {saved.model.type!r} run; a '
        f'{config.model.type!r} model starts from a {wanted!r} run. Fix: point it at a '
        f'workdir of `python train.py --config {start}` (e.g. --workdir runs/{wanted}, then '
        f'--config.init_from=runs/{wanted}).')
  step = checkpoint_lib.latest_step(os.path.join(os.path.abspath(config.init_from),
                                                 'checkpoints'))
  if step is None:
    raise errors.ConfigError(f'config.init_from={config.init_from!r} has no checkpoint. Fix: '
                             'let that run save one first.')
  # The run takes the source's tokenizer whole: another value would be saved and ignored.
  for name in config_schema.taken_with_the_tokenizer():
    if config.data[name] != saved.data[name]:
      raise errors.ConfigError(
          f'config.data.{name}={config.data[name]!r}, but the run takes its tokenizer from '
          f'config.init_from={config.init_from!r} (its ids are the rows of the weights taken '
          f'over), made with data.{name}={saved.data[name]!r}. Fix: set --config.data.'
          f'{name}={saved.data[name]!r}, the source\'s.')
  if not model_types.of(config.model).continues:  # Fine-tuning: the pretrained encoder.
    diffs = saved_config.differences(_encoder_fields(saved.model),
                                     _encoder_fields(config.model), 'model')
    if any(d.startswith('model.position.kind:') for d in diffs):  # Not each kind's options.
      diffs = [d for d in diffs if not d.startswith('model.position.')
               or d.startswith('model.position.kind:')]
    if diffs:
      raise errors.ConfigError(
          f'config.init_from={config.init_from!r} was pretrained with a different encoder '
          f'(pretrained vs now): {"; ".join(diffs)}. Fix: set those --config.model fields to '
          'the pretrained values (position kind and options included; configs/classify.py:'
          'TASK,roformer or TASK,bert takes the encoder of configs/mlm.py:roformer or :bert).')
  else:
    _check_continuation(config, saved)
  return saved, step


def _ids_name(data_cfg) -> tuple[str, tuple[str, ...]]:
  """What a causal LM's ids name when it reads `data_cfg`, in words and as the word of each id:
  a synthetic task's words, or () for text through the tokenizer (a continuation keeps its
  source's)."""
  task = synthetic.task_name(data_cfg)
  if task:
    return (f'the words of {data_cfg.name}',
            tuple(synthetic.Vocabulary(data_cfg.synthetic, task).words))
  return 'text through its tokenizer', ()


def _check_continuation(config, saved) -> None:
  """The continued causal LM has the source's parameters, reads ids that name what they named
  in its source, and has a RoPE scaling that covers the new length (its original length is the
  source's training length)."""
  (before, words_before), (now, words_now) = _ids_name(saved.data), _ids_name(config.data)
  if words_before != words_now:
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} was trained on {saved.data.name} (its ids name '
        f'{before}), but config.data.name={config.data.name!r} gives ids that name {now}: the '
        'weights would read other tokens than they learned. Fix: continue on data whose ids '
        f'name the same (any text, with the source\'s tokenizer; or {saved.data.name} with the '
        "source's data.synthetic sizes), or train a new run without config.init_from.")
  diffs = saved_config.changed(saved, config, saved_config.CONTINUE)
  if diffs:
    allowed = [f for f in saved_config.may_change(saved_config.CONTINUE)
               if f != 'model.vocab_size']  # Set from the tokenizer, never by hand.
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} is a different model (source vs now): '
        f'{"; ".join(diffs)}. Continuing takes over every parameter, so only data.*, train.* '
        f'and {", ".join(allowed)} may change. Fix: set those --config.model fields to the '
        'source\'s values.')
  positions_lib.model_scheme(config.model).check_continuation(
      config.model.position, saved.data.seq_len, config.data.seq_len,
      f'config.init_from={config.init_from!r}')
