"""Starting a run from another run's weights (`config.init_from`): a classifier fine-tuned
from a masked-LM encoder, or a causal LM continued at a new length or RoPE scaling (the
context extension of Chen et al. 2023: train short, continue briefly at a longer length)."""

import logging
import os

import jax
import ml_collections
from flax import nnx

from roformer import attention_options
from roformer import checkpoint as checkpoint_lib
from roformer import config_changes
from roformer import config_lib
from roformer import errors
from roformer import model_types
from roformer import positions as positions_lib
from roformer import self_attention
from roformer import trainer as trainer_lib
from roformer import variables

log = logging.getLogger('roformer')

# Parameters of a masked LM that a classifier does not take over.
_MLM_HEAD = ('head', 'head_ln', 'output_bias')
# Model fields that fix the encoder's parameters and what they compute.
# (Not vocab_size: it is set from the tokenizer, which comes from that run.)
_ENCODER_FIELDS = ('num_layers', 'd_model', 'num_heads', 'd_ff', 'norm', 'activation',
                   'layer_norm_eps', 'type_vocab_size')


def _encoder_fields(model_cfg) -> dict:
  """The model fields that decide what a pretrained encoder computes: the sizes, the position
  kind with the options that kind reads, and the attention fields that decide what it computes
  (attention_options.fields_read: the kind's own, the switches and those of the switches on)."""
  fields = {name: model_cfg.get(name) for name in _ENCODER_FIELDS}
  position = model_cfg.position
  fields['position'] = {'kind': position.kind,
                        **{name: position.get(name)
                           for name in positions_lib.scheme_fields(position.kind)}}
  fields['attention'] = attention_options.fields_read(self_attention.attention_config(model_cfg))
  return fields


def _source(config) -> ml_collections.ConfigDict:
  """config.init_from's saved config, or a ConfigError naming the fix."""
  source = os.path.abspath(config.init_from)
  if not os.path.isdir(source):
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} is not a directory. Fix: point it at a workdir '
        'of train.py (a masked-LM run to fine-tune a classifier, a causal-LM run to continue).')
  return config_lib.load(source)


def prepare(config: ml_collections.ConfigDict) -> None:
  """Before the config's own checks: the options the position scheme derived from the
  source's training (`derived`: FoPE's clipping length) take the source's values, whatever the
  model type; for a causal LM continued from another, the scheme takes what it needs from the
  source (its `from_source`: RoPE's scaling its original length); learned positions cannot go past the rows their table has (a longer table would change the parameters, and
  the rows past the old length would be untrained)."""
  saved = _source(config)
  with config.unlocked():  # What its scheme derived from the source's training (`derived`).
    positions_lib.take_derived(config.model, saved.model)
  if not (continues(config) and saved.model.type == config.model.type):
    return
  with config.unlocked():  # What the scheme takes from its source (its `from_source`).
    positions_lib.model_scheme(config.model).from_source(
        config.model.position, saved.data.seq_len, config_changes.CONTINUE)
  longest = positions_lib.model_scheme(saved.model).max_length(saved.model.position)
  if longest is not None and config.data.seq_len > longest:
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} has {saved.model.position.kind} positions, '
        f'whose parameters cover {longest} positions, fewer than config.data.seq_len='
        f'{config.data.seq_len}: it cannot be continued past them (more rows would change the '
        'parameters, and they would be untrained). Fix: continue at a seq_len within them, or '
        'train the source with a scheme that has no length-dependent parameters (rope, alibi, '
        '...).')


def continues(config: ml_collections.ConfigDict) -> bool:
  """Whether config.init_from is continued as the same model (every parameter taken over, at
  a new length or scaling), rather than its encoder fine-tuned under a new head."""
  return model_types.of(config.model).continues


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
  if not continues(config):  # Fine-tuning: the encoder must be the pretrained one.
    diffs = config_lib.differences(_encoder_fields(saved.model), _encoder_fields(config.model),
                                   'model')
    if diffs:
      raise errors.ConfigError(
          f'config.init_from={config.init_from!r} was pretrained with a different encoder '
          f'(pretrained vs now): {"; ".join(diffs)}. Fix: set those --config.model fields to '
          'the pretrained values (position kind and options included).')
  else:
    _check_continuation(config, saved)
  return saved, step


def _check_continuation(config, saved) -> None:
  """The continued causal LM has the source's parameters, and a RoPE scaling that covers the
  new length (its original length is the source's training length)."""
  diffs = config_changes.changed(saved, config, config_changes.CONTINUE)
  if diffs:
    allowed = [f for f in config_changes.may_change(config_changes.CONTINUE)
               if f != 'model.vocab_size']  # Set from the tokenizer, never by hand.
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} is a different model (source vs now): '
        f'{"; ".join(diffs)}. Continuing takes over every parameter, so only data.*, train.* '
        f'and {", ".join(allowed)} may change. Fix: set those --config.model fields to the '
        'source\'s values.')
  positions_lib.model_scheme(config.model).check_continuation(
      config.model.position, saved.data.seq_len, config.data.seq_len,
      f'config.init_from={config.init_from!r}')


def restore_from(trainer: trainer_lib.Trainer, state, init_from: str, saved, step: int):
  """The state of a fresh run started from `init_from`: a classifier takes over the pretrained
  encoder (its head keeps its initialisation), a continued causal LM every parameter. The
  optimizer starts afresh."""
  source_config = ml_collections.ConfigDict(saved.to_dict())
  source_config.model.vocab_size = trainer.config.model.vocab_size
  source_config.mesh = trainer.config.mesh
  source_trainer = trainer_lib.Trainer(source_config, trainer.mesh)
  pretrained = source_trainer.saved_params(trainer_lib.restore_params(
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
