"""Starting a run from another run's weights (`config.init_from`): a classifier fine-tuned
from a masked-LM encoder."""

import logging
import os

import jax
import ml_collections
from flax import nnx

from roformer import checkpoint as checkpoint_lib
from roformer import config_lib
from roformer import errors
from roformer import positions as positions_lib
from roformer import trainer as trainer_lib

log = logging.getLogger('roformer')

# Parameters of a masked LM that a classifier does not take over.
_MLM_HEAD = ('head', 'head_ln', 'output_bias')
# Model fields that fix the encoder's parameters and what they compute.
# (Not vocab_size: it is set from the tokenizer, which comes from that run.)
_ENCODER_FIELDS = ('num_layers', 'd_model', 'num_heads', 'd_ff', 'norm', 'activation',
                   'layer_norm_eps', 'type_vocab_size')


def _encoder_fields(model_cfg) -> dict:
  """The model fields that decide what a pretrained encoder computes: the sizes, the position
  kind with the options that kind reads, and the attention kind (with the FAVOR+ options only
  when it is 'favor'; the chunk length only changes how the sums are computed)."""
  fields = {name: model_cfg.get(name) for name in _ENCODER_FIELDS}
  position = model_cfg.position
  fields['position'] = {'kind': position.kind,
                        **{name: position.get(name)
                           for name in positions_lib.scheme_fields(position.kind)}}
  attention = model_cfg.get('attention') or {'kind': 'softmax'}
  fields['attention'] = ({k: v for k, v in attention.items() if k != 'chunk'}
                         if attention['kind'] == 'favor' else {'kind': attention['kind']})
  return fields


def check_init_from(config: ml_collections.ConfigDict) -> tuple[ml_collections.ConfigDict, int]:
  """Checks that config.init_from is a masked-LM run whose encoder this model can take over;
  returns (its config, its latest step). Reads metadata only."""
  source = os.path.abspath(config.init_from)
  if not os.path.isdir(source):
    raise errors.ConfigError(f'config.init_from={config.init_from!r} is not a directory. Fix: '
                             'point it at a workdir of `train.py --config configs/mlm.py`.')
  saved = config_lib.load(source)
  if saved.model.type != 'mlm':
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} is a {saved.model.type!r} run, not a masked-LM '
        'pretraining run. Fix: pretrain with `python train.py --config configs/mlm.py '
        '--workdir runs/mlm` and pass --config.init_from=runs/mlm.')
  step = checkpoint_lib.latest_step(os.path.join(source, 'checkpoints'))
  if step is None:
    raise errors.ConfigError(f'config.init_from={config.init_from!r} has no checkpoint. Fix: '
                             'let the pretraining run save one first.')
  diffs = config_lib.differences(_encoder_fields(saved.model), _encoder_fields(config.model),
                                 'model')
  if diffs:
    raise errors.ConfigError(
        f'config.init_from={config.init_from!r} was pretrained with a different encoder '
        f'(pretrained vs now): {"; ".join(diffs)}. Fix: set those --config.model fields to the '
        'pretrained values (position kind and options included).')
  return saved, step


def restore_encoder(trainer: trainer_lib.Trainer, state, init_from: str, saved, step: int):
  """Copies the pretrained encoder of `init_from` into a fresh classifier state; the
  classifier head keeps its initialisation and the optimizer starts afresh."""
  source_config = ml_collections.ConfigDict(saved.to_dict())
  source_config.model.vocab_size = trainer.config.model.vocab_size
  source_config.mesh = trainer.config.mesh
  source_trainer = trainer_lib.Trainer(source_config, trainer.mesh)
  pretrained = trainer_lib.restore_params(source_trainer, init_from, step).to_pure_dict()
  params = state['params']
  target = params.to_pure_dict()
  taken = sorted(k for k in target if k in pretrained and k not in _MLM_HEAD)
  for key in taken:
    target[key] = pretrained[key]
  nnx.replace_by_pure_dict(params, target)
  log.info('Initialised %s from %s step %d; new: %s.', ', '.join(taken), init_from, step,
           ', '.join(sorted(set(target) - set(taken))))
  with jax.set_mesh(trainer.mesh):
    params = jax.device_put(params, trainer.state_shardings['params'])
    opt_state = jax.jit(trainer.tx.init, out_shardings=trainer.state_shardings['opt_state'])(
        params)
  return {'params': params, 'opt_state': opt_state, 'step': state['step']}
