"""Train state, pure train/eval steps, evaluation and the training loop.

The train state is a plain dict {'params', 'opt_state', 'step'}; the step is a pure function of it
and a batch, jitted once with explicit shardings over the mesh and donating the old state.
"""

import contextlib
import functools
import itertools
import logging
import os
import shutil
import tempfile
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.experimental import multihost_utils

from roformer import checkpoint as checkpoint_lib
from roformer import config_lib
from roformer import errors
from roformer import logs
from roformer import metrics as metrics_lib
from roformer import models
from roformer import positions as positions_lib
from roformer import reliability
from roformer import sharding
from roformer import tasks
from roformer.data import pipeline
from roformer.data import tokenizer as tokenizer_lib

log = logging.getLogger('roformer')

# Fields that must not change when a run resumes from an existing workdir.
# The data pipeline's saved position only makes sense for the same pipeline and seed.
_FIXED_ON_RESUME = ('model', 'seed', 'init_from', 'train.batch_size', 'data.name',
                    'data.text_key', 'data.text_keys', 'data.label_key', 'data.source_key',
                    'data.target_key', 'data.reverse', 'data.vocab_size', 'data.seq_len',
                    'data.shuffle_window', 'data.splits', 'data.mask_rate',
                    'data.mask_fraction', 'data.random_fraction')


# ------------------------------------------------------------------------------ optimization


def make_schedule(tc: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warmup to the peak learning rate, then cosine decay (to end_lr_fraction of the
  peak at the last step) or reciprocal-square-root decay."""
  peak, warmup = tc.learning_rate, tc.warmup_steps
  warm = optax.linear_schedule(0.0, peak, max(warmup, 1))
  if tc.schedule == 'cosine':
    decay = optax.cosine_decay_schedule(peak, max(tc.steps - warmup, 1), alpha=tc.end_lr_fraction)
  else:
    decay = lambda s: peak * jnp.sqrt(max(warmup, 1) / (s + max(warmup, 1)))
  return optax.join_schedules([warm, decay], [warmup])


def make_optimizer(tc: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdamW with global-norm clipping; weight decay on matrices only, not on norms or biases
  (anything whose path names a bias: Linear biases, Transformer-XL's u/v, T5's bias tables)."""
  def decay_mask(params):
    def decay(path, p):
      return p.ndim >= 2 and not any('bias' in str(getattr(k, 'key', k)) for k in path)
    return jax.tree_util.tree_map_with_path(decay, params)
  return optax.chain(
      optax.clip_by_global_norm(tc.grad_clip),
      optax.adamw(make_schedule(tc), b1=tc.b1, b2=tc.b2, weight_decay=tc.weight_decay,
                  mask=decay_mask))


# ------------------------------------------------------------------------------ steps


def set_feature_draw(params, draw):
  """Sets FAVOR+'s feature-draw index (a parameter that is never trained) in every layer."""
  def set_leaf(path, p):
    named = any(str(getattr(k, 'key', k)) == 'feature_draw' for k in path)
    return jnp.asarray(draw, p.dtype) if named else p
  return jax.tree_util.tree_map_with_path(set_leaf, params)


def micro_batches(batch: dict, count: int) -> dict:
  """[rows, ...] -> [count, rows / count, ...]: micro-batch i takes rows i, i + count, ...,
  so each device's contiguous share of the rows splits into its share of every micro-batch."""
  def split(x):
    x = x.reshape((x.shape[0] // count, count) + x.shape[1:])
    return jnp.swapaxes(x, 0, 1)
  return jax.tree.map(split, batch)


def train_step(state, batch, *, graphdef, tx, schedule, task, dropout_seed, label_smoothing,
               redraw_interval: int = 0, grad_accum_steps: int = 1):
  """One optimizer update. Dropout keys derive from (seed, step), never from the data; so do
  FAVOR+'s random features, redrawn every `redraw_interval` steps. With `grad_accum_steps` > 1
  the batch is processed as that many micro-batches in a `lax.scan`, summing the gradients of the
  token-weighted loss sums, so the update equals the one of the whole batch."""
  key = jax.random.fold_in(jax.random.key(dropout_seed), state['step'])

  def sums_fn(params, micro, micro_key):
    sums = task.sums(nnx.merge(graphdef, params), micro, micro_key, label_smoothing)
    return sums['objective_sum'], sums

  params = state['params']
  if redraw_interval:  # This step's features; the saved params keep the draw used last.
    params = set_feature_draw(params, state['step'] // redraw_interval)
  grad_fn = jax.grad(sums_fn, has_aux=True)
  if grad_accum_steps == 1:
    grads, sums = grad_fn(params, batch, key)
  else:
    def accumulate(carry, inputs):
      i, micro = inputs
      grads, sums = grad_fn(params, micro, jax.random.fold_in(key, i))
      return jax.tree.map(jnp.add, carry, (grads, sums)), None
    micros = micro_batches(batch, grad_accum_steps)
    zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(
        grad_fn, params, jax.tree.map(lambda x: x[0], micros), key))
    (grads, sums), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(grad_accum_steps), micros))
  weight = jnp.maximum(sums['weight'], 1.0)
  grads = jax.tree.map(lambda g: g / weight, grads)
  grad_norm = optax.global_norm(grads)
  # A non-finite loss or gradient never reaches the state: that step leaves it unchanged, and
  # the loop stops or counts it (config.train.on_nonfinite). A `lax.cond` rather than a
  # `where` per leaf: selecting between the new and the old state makes XLA copy every donated
  # buffer first (4x the optimizer's time on CPU), while a branch updates them in place.
  finite = jnp.isfinite(sums['loss_sum']) & jnp.isfinite(grad_norm)

  def update(params, opt_state):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  params, opt_state = jax.lax.cond(finite, update, lambda p, o: (p, o), params,
                                   state['opt_state'])
  if redraw_interval:
    params = set_feature_draw(params, state['step'] // redraw_interval)
  metrics = {'loss': sums['loss_sum'] / weight, 'accuracy': sums['correct'] / weight,
             'grad_norm': grad_norm, 'learning_rate': schedule(state['step']),
             'nonfinite': jnp.logical_not(finite).astype(jnp.int32),
             'tokens': sums.get('tokens', sums['weight'])}
  return {'params': params, 'opt_state': opt_state, 'step': state['step'] + 1}, metrics


def eval_step(params, batch, *, graphdef, task):
  return task.sums(nnx.merge(graphdef, params), batch)


def predict_step(params, batch, *, graphdef, task):
  """Per-example outputs (classification logits or regression scores) with their labels and
  weights, for metrics that need every prediction (F1, correlations)."""
  return task.predict(nnx.merge(graphdef, params), batch), batch['label'], batch['weight']


# ------------------------------------------------------------------------------ state


def _redraw_interval(model_cfg) -> int:
  att = models.attention_config(model_cfg)
  return att.redraw_interval if att.kind == 'favor' else 0


class Trainer:
  """Everything a run needs that follows from (config, mesh): model graph, optimizer, jitted
  steps, and the state's shardings."""

  def __init__(self, config: ml_collections.ConfigDict, mesh):
    self.config, self.mesh = config, mesh
    self.task = tasks.for_config(config)
    with jax.set_mesh(mesh):
      abstract_model = nnx.eval_shape(lambda: models.create(config.model, seed=config.seed))
    self.graphdef, abstract_params = nnx.split(abstract_model, nnx.Param)
    self.tx = make_optimizer(config.train)
    self.schedule = make_schedule(config.train)
    replicated = sharding.replicated(mesh)
    abstract = {'params': abstract_params,
                'opt_state': jax.eval_shape(self.tx.init, abstract_params),
                'step': jax.ShapeDtypeStruct((), jnp.int32)}
    rules = sharding.rules_from_config(config.mesh)
    self.state_shardings = sharding.state_shardings(abstract, mesh, rules)
    self.abstract_state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract,
        self.state_shardings)
    batch_sharding = sharding.batch_sharding(mesh)
    self.train_step = sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
        functools.partial(train_step, graphdef=self.graphdef, tx=self.tx,
                          schedule=self.schedule, task=self.task, dropout_seed=config.seed + 1,
                          label_smoothing=config.train.label_smoothing,
                          redraw_interval=_redraw_interval(config.model),
                          grad_accum_steps=config.train.get('grad_accum_steps', 1)),
        in_shardings=(self.state_shardings, batch_sharding),
        out_shardings=(self.state_shardings, replicated), donate_argnums=0))
    self.eval_step = sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
        functools.partial(eval_step, graphdef=self.graphdef, task=self.task),
        in_shardings=(self.state_shardings['params'], batch_sharding), out_shardings=replicated))
    if self.task.per_example:
      self.predict_step = sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
          functools.partial(predict_step, graphdef=self.graphdef, task=self.task),
          in_shardings=(self.state_shardings['params'], batch_sharding),
          out_shardings=replicated))

  def init_state(self):
    def init():
      params = nnx.state(models.create(self.config.model, seed=self.config.seed), nnx.Param)
      return {'params': params, 'opt_state': self.tx.init(params), 'step': jnp.int32(0)}
    with jax.set_mesh(self.mesh):
      return jax.jit(init, out_shardings=self.state_shardings)()

  def num_params(self) -> int:
    return models.parameter_count(self.abstract_state['params'])


def translation_scores(trainer: Trainer, params, source, tokenizer, *, limit: int = -1):
  """Decodes up to `limit` pairs of `source` (-1: all) with beam search and scores them with
  sacreBLEU and chrF. Returns (scores, hypotheses, references)."""
  config = trainer.config
  (_, src_key), (_, tgt_key) = pipeline.text_fields(config.data)
  sources, references = [], []
  for i in range(len(source)):
    if 0 <= limit <= len(sources):
      break
    src, ref = (pipeline.as_text(source[i][k]) for k in (src_key, tgt_key))
    if src.strip() and ref.strip():
      sources.append(src)
      references.append(ref)
  hypotheses = trainer.task.translate(
      trainer.graphdef, params, sources, tokenizer, max_len=config.data.seq_len,
      beam_size=config.eval.beam_size, alpha=config.eval.alpha,
      batch_size=config.eval.batch_size)
  scores = metrics_lib.bleu_and_chrf(hypotheses, references)
  scores.update(direction=f'{src_key}->{tgt_key}', sentences=len(sources),
                copy_source_bleu=metrics_lib.bleu_and_chrf(sources, references)['bleu'])
  return scores, hypotheses, references


def _eval_batches(dataset, max_batches: int, template: dict):
  """The dataset's batches (at most max_batches). With several processes, every process must
  run the same number of global steps: shorter shards are topped up with padding batches."""
  batches = itertools.islice(dataset, max_batches if max_batches >= 0 else None)
  if jax.process_count() == 1:
    yield from batches
    return
  batches = list(batches)
  count = int(np.max(multihost_utils.process_allgather(np.int32(len(batches)))))
  yield from batches
  for _ in range(count - len(batches)):
    yield {k: np.zeros_like(v) for k, v in template.items()}


def evaluate(trainer: Trainer, params, dataset, *, batch_size: int, max_batches: int = -1,
             seq_len: int | None = None):
  """Token-weighted loss, accuracy and perplexity over a (finite) dataset of packed batches;
  for per-example tasks, `evaluate_examples`."""
  local = batch_size // jax.process_count()
  length = seq_len or trainer.config.data.seq_len
  template = trainer.task.feature_shapes(local, length)
  if trainer.task.per_example:
    return evaluate_examples(trainer, params, dataset, template, max_batches)
  totals = None
  for batch in _eval_batches(dataset, max_batches, template):
    sums = trainer.eval_step(params, sharding.put_batch(pipeline.pad_batch(batch, local),
                                                        trainer.mesh))
    totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
  if totals is None:
    raise errors.ConfigError('the evaluation split produced no batches. Fix: check '
                             'config.data.splits and that the split has text.')
  totals = jax.device_get(totals)
  loss = float(totals['loss_sum'] / max(totals['weight'], 1.0))
  return {'loss': loss, 'accuracy': float(totals['correct'] / max(totals['weight'], 1.0)),
          'perplexity': metrics_lib.perplexity(loss), 'tokens': float(totals['weight'])}


def evaluate_examples(trainer: Trainer, params, dataset, template: dict, max_batches: int = -1):
  """Loss and the config's metrics (config.eval.metrics: accuracy, f1, mcc, pearson,
  spearman) over every example of a classification or regression dataset."""
  local = next(iter(template.values())).shape[0]
  outputs, labels, weights = [], [], []
  for batch in _eval_batches(dataset, max_batches, template):
    out, label, weight = jax.device_get(trainer.predict_step(
        params, sharding.put_batch(pipeline.pad_batch(batch, local), trainer.mesh)))
    outputs.append(out)
    labels.append(label)
    weights.append(weight)
  if not outputs:
    raise errors.ConfigError('the evaluation split produced no examples. Fix: check '
                             'config.data.splits.')
  keep = np.concatenate(weights) > 0
  outputs = np.concatenate(outputs)[keep].astype(np.float64)
  labels = np.concatenate(labels)[keep]
  if outputs.shape[1] == 1:
    loss = float(np.mean((outputs[:, 0] - labels) ** 2))
  else:
    shifted = outputs - outputs.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    loss = float(-np.mean(logp[np.arange(len(labels)), labels]))
  result = {'loss': loss, 'examples': float(len(labels))}
  result.update(metrics_lib.classification_report(trainer.config.eval.metrics, labels, outputs))
  return result


# ------------------------------------------------------------------------------ data


TOKENIZER_FILE = 'tokenizer.model'
# Written by converters of foreign weights: the ids belong to a tokenizer this project lacks.
FOREIGN_VOCABULARY_FILE = 'FOREIGN_VOCABULARY'


def setup_data(config: ml_collections.ConfigDict, splits=pipeline.SPLITS, workdir: str = ''):
  """Opens the dataset's splits and the tokenizer, and sets config.model.vocab_size from it.

  The tokenizer is the workdir's own copy if it has one (a fine-tuning run keeps its
  pretraining's), else that of the run in config.init_from, else the dataset's (trained on
  its train split on first use)."""
  for d in (workdir, config.get('init_from')):
    if d and os.path.exists(os.path.join(d, FOREIGN_VOCABULARY_FILE)) and not os.path.exists(
        os.path.join(d, TOKENIZER_FILE)):
      raise errors.ConfigError(
          f'{d} holds weights converted from another library whose vocabulary is not a '
          'tokenizer of this project, so its data pipeline cannot feed it. Fix: tokenize with '
          'that library and call the model directly (see scripts/convert_hf_roformer.py).')
  sources = pipeline.load_sources(config.data, splits=splits)
  candidates = [os.path.join(d, TOKENIZER_FILE) for d in (workdir, config.get('init_from'))
                if d]
  path = next((p for p in candidates if os.path.exists(p)), None)
  if path:
    tokenizer = tokenizer_lib.Tokenizer(path)
  elif config.get('init_from'):
    saved = config_lib.load(config.init_from)  # Its dataset's tokenizer, rebuilt if needed.
    tokenizer = pipeline.load_tokenizer(
        saved.data, pipeline.load_sources(saved.data, splits=('train',))['train'])
  else:
    tokenizer = pipeline.load_tokenizer(config.data, sources.get('train') or next(
        iter(sources.values())))
  with config.unlocked():
    config.model.vocab_size = tokenizer.vocab_size + tasks.for_config(config).extra_tokens
  return sources, tokenizer


def _keep_tokenizer(tokenizer, workdir: str, resumed: bool) -> None:
  """Copies the tokenizer into the workdir (evaluation and fine-tuning need exactly it); a
  new run replaces any copy left by an earlier attempt that saved no checkpoint."""
  path = os.path.join(workdir, TOKENIZER_FILE)
  if not resumed or not os.path.exists(path):
    shutil.copyfile(tokenizer.path, path + '.tmp')
    os.replace(path + '.tmp', path)


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


def restore_encoder(trainer: Trainer, state, init_from: str, saved, step: int):
  """Copies the pretrained encoder of `init_from` into a fresh classifier state; the
  classifier head keeps its initialisation and the optimizer starts afresh."""
  source_config = ml_collections.ConfigDict(saved.to_dict())
  source_config.model.vocab_size = trainer.config.model.vocab_size
  source_config.mesh = trainer.config.mesh
  source_trainer = Trainer(source_config, trainer.mesh)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(os.path.abspath(init_from), 'checkpoints'))
  try:
    check_checkpoint_matches(ckpt, step, source_trainer)
    pretrained = ckpt.restore(step, source_trainer.abstract_state)['params'].to_pure_dict()
  finally:
    ckpt.close()
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


def check_classification_data(config, sources) -> None:
  """Before anything is compiled: the labels fit the head, and a sentence-pair task gets
  both of its sentences."""
  pairs = {'glue/' + task for task, spec in pipeline.GLUE_TASKS.items() if len(spec[0]) == 2}
  keys = tuple(config.data.text_keys)
  if config.data.name in pairs and len(keys) != 2:
    raise errors.ConfigError(
        f'{config.data.name} is a sentence-pair task but config.data.text_keys={keys} names '
        f'{len(keys)} text(s). Fix: --config.data.text_keys="{pipeline.GLUE_TASKS[config.data.name[5:]][0]}"'
        ' (or use configs/classify.py:' + config.data.name + ').')
  if not 1 <= len(keys) <= 2:
    raise errors.ConfigError(f'config.data.text_keys={keys} must name one text or a pair.')
  if config.model.num_classes == 1:
    return
  for split in ('train', 'validation'):
    if split not in sources:
      continue
    labels = pipeline.labels(sources[split], config.data.label_key)
    labels = labels[labels != -1]  # Hidden labels.
    if len(labels) and (labels.min() < 0 or labels.max() >= config.model.num_classes):
      raise errors.ConfigError(
          f'the {split} split has labels {labels.min()}..{labels.max()}, outside [0, '
          f'config.model.num_classes={config.model.num_classes}). Fix: '
          f'--config.model.num_classes={int(labels.max()) + 1}.')




# ------------------------------------------------------------------------------ the loop

# Resuming may change these: they change how the model is computed, not what it computes.
_RESUME_MAY_CHANGE = ('model.vocab_size', 'model.remat', 'model.attention_impl')


def _with_new_defaults(saved: ml_collections.ConfigDict, config) -> ml_collections.ConfigDict:
  """`saved` plus every field it predates (added to the code later) where `config` keeps that
  field's default: such a run was trained with the behaviour the default names."""
  from configs import base  # pylint: disable=g-import-not-at-top
  default = base.get_config().to_dict()

  def fill(old: dict, new: dict, dflt: dict) -> dict:
    for key, value in new.items():
      if key not in old:
        if key in dflt and value == dflt[key]:
          old[key] = value
      elif isinstance(old[key], dict) and isinstance(value, dict) and isinstance(
          dflt.get(key), dict):
        fill(old[key], value, dflt[key])
    return old
  current = config.to_dict() if hasattr(config, 'to_dict') else dict(config)
  return ml_collections.ConfigDict(fill(saved.to_dict(), current, default))


def _probe_writable(directory: str) -> None:
  """Creates and removes a file in `directory` (raises OSError if it cannot)."""
  with tempfile.NamedTemporaryFile(dir=directory, prefix='.write-probe-'):
    pass


def _check_workdir(config, workdir, ckpt_step):
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise errors.ConfigError(f'--workdir={workdir!r} is a file. Fix: choose a directory path.')
  existing = workdir
  while not os.path.exists(existing):  # The directory it will be created in.
    existing = os.path.dirname(existing)
  try:
    _probe_writable(existing)
  except OSError as e:
    raise errors.ConfigError(f'--workdir={workdir!r} cannot be written ({existing}: '
                             f'{e.strerror or e}). Fix: choose a writable directory.') from None
  if ckpt_step is None or not os.path.exists(os.path.join(workdir, 'config.json')):
    return
  saved = _with_new_defaults(config_lib.load(workdir), config)
  diffs = []
  for field in _FIXED_ON_RESUME:
    a, b = saved, config
    for part in field.split('.'):
      a, b = a.get(part), b.get(part)
    diffs += config_lib.differences({field: a}, {field: b})
  # How the same model is computed may change (attention_impl, remat).
  diffs = [d for d in diffs if not d.startswith(_RESUME_MAY_CHANGE)]
  if diffs:
    raise errors.ConfigError(
        f'--workdir={workdir!r} holds a checkpoint (step {ckpt_step}) of a different run; '
        f'changed fields (saved vs now): {"; ".join(diffs)}. Fix: use a new --workdir, or the '
        'same config to resume.')


def _save_config(config, workdir, resumed_from):
  """Writes config.json for a new run; a resumed run keeps the original and records what
  changed (schedule fields, logging, ...) as config.resume-STEP.json."""
  if resumed_from is None or not os.path.exists(os.path.join(workdir, 'config.json')):
    config_lib.save(config, workdir)
    return
  changed = config_lib.differences(config_lib.load(workdir), config)
  if changed:
    log.warning('Resuming with changed settings (saved vs now): %s', '; '.join(changed))
    config_lib.save(config, workdir, f'config.resume-{resumed_from}.json')


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       stop_at: int | None = None) -> dict:
  """Trains (resuming from the latest checkpoint in workdir if any) and evaluates on the
  validation split; returns the last train and eval metrics. With `stop_at`, the run
  checkpoints and returns after that step, as if interrupted."""
  workdir = os.path.abspath(workdir)
  mesh = sharding.make_mesh(config.mesh)
  config_lib.validate(config, sharding.data_parallel_size(mesh), jax.process_count())
  ckpt_dir = os.path.join(workdir, 'checkpoints')
  _check_workdir(config, workdir, checkpoint_lib.latest_step(ckpt_dir))

  resuming = checkpoint_lib.latest_step(ckpt_dir) is not None
  if config.get('init_from') and not resuming:  # config_lib.validate: classifiers only.
    pretrained = check_init_from(config)
  sources, tokenizer = setup_data(config, splits=('train', 'validation'),
                                  workdir=workdir if resuming else '')
  if trainer_task_is_classifier(config):
    check_classification_data(config, sources)
  os.makedirs(workdir, exist_ok=True)
  with contextlib.ExitStack() as stack:
    if jax.process_index() == 0:  # One writer per workdir.
      stack.enter_context(reliability.WorkdirLock(workdir))
    preempt = stack.enter_context(reliability.Preemption(
        config.train.get('grace_period_s', 60), multihost=jax.process_count() > 1))
    return _train(config, workdir, mesh, sources, tokenizer,
                  pretrained if config.get('init_from') and not resuming else None,
                  stop_at, preempt)


def restore_latest_readable(ckpt: checkpoint_lib.Checkpointer, trainer: Trainer, make_iter):
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
      state = ckpt.restore(step, trainer.abstract_state, train_iter)
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


def _train(config, workdir, mesh, sources, tokenizer, pretrained, stop_at,
           preempt: reliability.Preemption) -> dict:
  """The training loop of train_and_evaluate, inside the workdir lock and signal handlers."""
  trainer = Trainer(config, mesh)
  tc = config.train
  make_iter = lambda: iter(trainer.task.batches(config, sources['train'], tokenizer,
                                                train=True))
  ckpt_dir = os.path.join(workdir, 'checkpoints')
  ckpt = checkpoint_lib.Checkpointer(ckpt_dir, max_to_keep=tc.max_to_keep)
  resumed_from, state, train_iter = restore_latest_readable(ckpt, trainer, make_iter)
  if resumed_from is not None:
    log.info('Resuming from %s step %d.', ckpt_dir, resumed_from)
  else:
    state = trainer.init_state()
    if pretrained is not None:
      state = restore_encoder(trainer, state, config.init_from, *pretrained)
  is_chief = jax.process_index() == 0
  if is_chief:
    _save_config(config, workdir, resumed_from)
    _keep_tokenizer(tokenizer, workdir, resumed_from is not None)
  start = int(jax.device_get(state['step']))
  log.info('Model: %s, %d parameters, position=%s; mesh %s; %d steps from %d.',
           config.model.type, trainer.num_params(), config.model.position.kind,
           dict(mesh.shape), tc.steps, start)

  writer = metrics_lib.MetricsWriter(workdir, enabled=is_chief)
  pending, window, last = [], [], {}  # (step, host batch, device metrics) not yet fetched.
  skipped = _skipped_so_far(workdir)
  translating = isinstance(trainer.task, tasks.Translation)
  best = checkpoint_lib.Checkpointer(os.path.join(workdir, 'best'), max_to_keep=1) if (
      translating) else None
  best_bleu = _best_bleu_so_far(workdir)

  def fetch() -> list[dict]:
    """The pending steps' metrics on the host; a non-finite step is recorded with its batch,
    then training stops or counts it (skip)."""
    nonlocal pending, skipped
    fetched = jax.device_get([metrics for _, _, metrics in pending])
    bad = [(s, b) for (s, b, _), m in zip(pending, fetched) if m['nonfinite']]
    pending = []
    for bad_step, host_batch in bad:
      path = reliability.save_batch(workdir, bad_step, host_batch) if is_chief else ''
      if tc.get('on_nonfinite', 'stop') == 'stop':
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
        if tc.get('on_nonfinite', 'stop') == 'skip':
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
      result = evaluate(trainer, state['params'],
                        trainer.task.batches(config, sources['validation'], tokenizer,
                                             train=False, batch_size=config.eval.batch_size),
                        batch_size=config.eval.batch_size, max_batches=tc.eval_batches)
      if translating:
        scores, _, _ = translation_scores(trainer, state['params'], sources['validation'],
                                          tokenizer, limit=config.eval.bleu_sentences)
        result.update(bleu=scores['bleu'], chrf=scores['chrf'])
        if scores['bleu'] > best_bleu:  # Kept apart, so max_to_keep never drops the latest.
          best_bleu = scores['bleu']
          best.save(step, state)
          log.info('step %d | new best validation BLEU %.2f (%s) saved to %s', step,
                   best_bleu, scores['direction'], best.directory)
      writer.write(step, 'validation', result)
      log.info('step %d | validation %s', step, _format_metrics(result))
      last['validation'] = result
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


def _skipped_so_far(workdir: str) -> int:
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return 0
  return int(max([r.get('skipped_steps', 0) for r in metrics_lib.read_jsonl(path)], default=0))


def trainer_task_is_classifier(config) -> bool:
  return config.model.type in models.MODELS and tasks.for_config(config).per_example


def _format_metrics(result: dict) -> str:
  names = {'loss': 'loss %.4f', 'perplexity': 'perplexity %.2f', 'accuracy': 'acc %.3f',
           'bleu': 'BLEU %.2f', 'f1': 'F1 %.3f', 'mcc': 'MCC %.3f', 'pearson': 'Pearson %.3f',
           'spearman': 'Spearman %.3f'}
  return ' | '.join(fmt % result[k] for k, fmt in names.items() if k in result)


def _best_bleu_so_far(workdir: str) -> float:
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return -1.0
  return max([r['bleu'] for r in metrics_lib.read_jsonl(path) if 'bleu' in r], default=-1.0)


# ------------------------------------------------------------------------------ evaluation


def _param_shapes(abstract_params) -> dict[str, tuple[int, ...]]:
  shapes = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(abstract_params)[0]:
    parts = [str(getattr(p, 'key', getattr(p, 'name', getattr(p, 'idx', p)))) for p in path]
    shapes['/'.join(p for p in parts if p != 'value')] = tuple(leaf.shape)
  return shapes


def check_checkpoint_matches(ckpt: checkpoint_lib.Checkpointer, step: int, trainer) -> None:
  """Compares saved parameter shapes with the model the config builds, from metadata only."""
  saved = {k.removesuffix('/value'): v for k, v in ckpt.param_shapes(step).items()}
  expected = _param_shapes(trainer.abstract_state['params'])
  problems = [f'{k}: checkpoint {saved.get(k)} vs config {expected.get(k)}'
              for k in sorted(set(saved) | set(expected)) if saved.get(k) != expected.get(k)]
  if problems:
    raise errors.ConfigError(
        f'the checkpoint at step {step} in {ckpt.directory} does not match the model that the '
        f'config builds ({len(problems)} parameters differ, e.g. {"; ".join(problems[:3])}). '
        'Fix: evaluate with the config.json the checkpoint was trained with.')


def unigram_baseline(tokenizer, train_source, eval_source, text_key, max_docs=20000) -> float:
  """Validation cross-entropy of a context-free unigram model fitted on the train split."""
  def counts(source):
    c = np.zeros(tokenizer.vocab_size, np.float64)
    for i in range(min(len(source), max_docs)):
      ids = tokenizer.encode(pipeline.as_text(source[i][text_key]))
      c += np.bincount(np.append(ids, tokenizer_lib.EOS_ID), minlength=tokenizer.vocab_size)
    return c
  return metrics_lib.unigram_cross_entropy(counts(train_source), counts(eval_source))


# Model fields an evaluation may override: how attention is computed, and RoPE context
# extension applied to a checkpoint trained without it.
_EVAL_MAY_CHANGE = ('model.attention_impl', 'model.dtype', 'model.position.rope.scaling')
# Data fields that fix the tokenizer (vocabulary) and the translation direction.
_EVAL_FIXED_DATA = ('data.name', 'data.vocab_size', 'data.text_key', 'data.text_keys',
                    'data.label_key', 'data.source_key', 'data.target_key', 'data.reverse')


def evaluate_workdir(config: ml_collections.ConfigDict, workdir: str, step: int | None = None,
                     splits=('validation', 'test')) -> dict:
  """Restores a checkpoint of `workdir` and evaluates loss/perplexity on `splits` at every
  length in config.eval.length_multipliers x config.data.seq_len."""
  workdir = os.path.abspath(workdir)
  unknown = [s for s in splits if s not in pipeline.SPLITS]
  if unknown or not splits:
    raise errors.ConfigError(f'splits {list(splits)}: evaluate some of {list(pipeline.SPLITS)}. '
                             'Fix: e.g. --splits=validation,test.')
  ckpt_dir = os.path.join(workdir, 'checkpoints')
  steps = checkpoint_lib.all_steps(ckpt_dir)
  if not steps:
    raise errors.ConfigError(f'{workdir} has no checkpoint. Fix: train first (python train.py '
                             f'--workdir {workdir} ...) or point --workdir at a trained run.')
  step = steps[-1] if step is None else step
  if step not in steps:
    raise errors.ConfigError(f'--step={step} has no checkpoint in {ckpt_dir}; available: {steps}.')
  saved = config_lib.load(workdir)
  changed = [d for d in config_lib.differences(saved.model, config.model, 'model')
             if not d.split(':')[0].startswith(_EVAL_MAY_CHANGE)]
  for field in _EVAL_FIXED_DATA:  # The tokenizer and the direction the model was trained on.
    changed += config_lib.differences({field: saved.data.get(field.split('.')[1])},
                                      {field: config.data.get(field.split('.')[1])})
  if changed:
    raise errors.ConfigError(
        f'the config does not match the model trained in {workdir}: {"; ".join(changed)} '
        f'(saved vs now). Only {", ".join(_EVAL_MAY_CHANGE)} may change at evaluation. Fix: '
        'drop those --config.model/--config.data overrides.')
  scaling = config.model.position.rope.scaling
  if scaling.kind == 'yarn' and scaling.original_length < 1:
    with config.unlocked():  # YaRN's ramp is relative to the length the model was trained at.
      scaling.original_length = saved.data.seq_len
  mesh = sharding.make_mesh(config.mesh)
  config_lib.validate(config, sharding.data_parallel_size(mesh), jax.process_count())
  classifying = trainer_task_is_classifier(config)
  if classifying:
    splits = tuple(config.eval.get('splits', splits))
  sources, tokenizer = setup_data(config, splits=('train',) + tuple(splits), workdir=workdir)
  trainer = Trainer(config, mesh)
  ckpt = checkpoint_lib.Checkpointer(ckpt_dir)
  try:
    try:
      check_checkpoint_matches(ckpt, step, trainer)
      params = ckpt.restore(step, trainer.abstract_state)['params']
    except errors.ConfigError:
      raise
    except Exception as e:  # pylint: disable=broad-except  # Truncated or missing files.
      others = [s for s in steps if s != step]
      raise errors.ConfigError(
          f'the checkpoint at step {step} in {ckpt_dir} cannot be read ({type(e).__name__}: '
          f'{str(e).splitlines()[0][:200] if str(e) else ""}). Fix: evaluate another step with '
          f'--step (available: {others}), or restore that directory.') from None
  finally:
    ckpt.close()
  results = {'step': step, 'position': config.model.position.kind,
             'rope_scaling': scaling.to_dict() if scaling.kind != 'none' else None,
             'train_seq_len': config.data.seq_len,
             'overrides': config_lib.differences(saved, config), 'splits': {}}
  if classifying:
    for split in splits:
      hidden = pipeline.labels(sources[split], config.data.label_key, limit=1000)
      if len(hidden) and (hidden == -1).all():
        results['splits'][split] = {'skipped': f'the labels of {split} are hidden (-1), as in '
                                               'GLUE test sets: submit predictions instead.'}
        continue
      batches = trainer.task.batches(config, sources[split], tokenizer, train=False,
                                     batch_size=config.eval.batch_size, split=split)
      results['splits'][split] = evaluate(trainer, params, batches,
                                          batch_size=config.eval.batch_size,
                                          max_batches=config.eval.max_batches)
    return results
  rescale = config.eval.get('scale_rope_to_length')

  def at_length(mult):  # (trainer, config) for one length: its own RoPE factor if rescaling.
    if not rescale:
      return trainer, config
    scaled = ml_collections.ConfigDict(config.to_dict())
    scaled.model.position.rope.scaling.factor = max(
        1.0, config.data.seq_len * mult / saved.data.seq_len)
    return Trainer(scaled, mesh), scaled
  per_length = {mult: at_length(mult) for mult in config.eval.length_multipliers}
  if rescale:
    results['rope_scaling']['factor'] = 'length / train_seq_len'
  for split in splits:
    rows = []
    for mult in config.eval.length_multipliers:
      length = config.data.seq_len * mult
      row = {'length': length, 'multiplier': mult}
      length_trainer, length_config = per_length[mult]
      if rescale:
        row['rope_scaling_factor'] = length_config.model.position.rope.scaling.factor
      try:
        positions_lib.validate(length_config.model, length,
                               causal=models.is_causal(config.model))
      except errors.ConfigError as e:  # E.g. a learned table shorter than this length.
        rows.append({**row, 'skipped': str(e)})
        continue
      batches = trainer.task.batches(config, sources[split], tokenizer, train=False,
                                     seq_len=length, batch_size=config.eval.batch_size)
      rows.append({**row, **evaluate(length_trainer, params, batches,
                                     batch_size=config.eval.batch_size,
                                     max_batches=config.eval.max_batches, seq_len=length)})
    results['splits'][split] = {'lengths': rows}
    if isinstance(trainer.task, tasks.Translation):
      if split != 'test':  # Decodes the test split; validation BLEU is reported in training.
        continue
      scores, hyps, refs = translation_scores(trainer, params, sources[split], tokenizer,
                                              limit=config.eval.bleu_sentences_test)
      out_dir = os.path.join(workdir, 'translations')
      os.makedirs(out_dir, exist_ok=True)
      for name, lines in (('hyp', hyps), ('ref', refs)):
        with open(os.path.join(out_dir, f'{split}-step{step}.{name}.txt'), 'w',
                  encoding='utf-8') as f:
          f.write(''.join(line.replace('\n', ' ') + '\n' for line in lines))
      results['splits'][split].update(scores)
    else:
      results['splits'][split]['unigram_loss'] = unigram_baseline(
          tokenizer, sources['train'], sources[split], config.data.text_key)
  return results


def format_results(results: dict) -> str:
  lines = [f"step {results['step']}, position={results['position']}, trained at length "
           f"{results['train_seq_len']}"]
  if all('lengths' not in r for r in results['splits'].values()):  # Classification.
    for split, r in results['splits'].items():
      lines.append(f"{split:<22} " + (r['skipped'] if 'skipped' in r else
                                      f"{_format_metrics(r)} | {r['examples']:.0f} examples"))
    return '\n'.join(lines)
  lines.append(f"{'split':<11} {'length':>7} {'loss':>8} {'ppl':>10} {'acc':>7} {'tokens':>9}")
  for split, r in results['splits'].items():
    for row in r['lengths']:
      if 'skipped' in row:
        lines.append(f"{split:<11} {row['length']:>7}   skipped: {row['skipped'][:60]}")
      else:
        lines.append(f"{split:<11} {row['length']:>7} {row['loss']:>8.4f} "
                     f"{row['perplexity']:>10.2f} {row['accuracy']:>7.3f} {row['tokens']:>9.0f}")
    if 'unigram_loss' in r:
      lines.append(f"{split:<11} {'unigram':>7} {r['unigram_loss']:>8.4f} "
                   f"{metrics_lib.perplexity(r['unigram_loss']):>10.2f}")
    if 'bleu' in r:
      lines.append(f"{split:<11} {r['direction']}: BLEU {r['bleu']:.2f} (copying the source: "
                   f"{r['copy_source_bleu']:.2f}), chrF {r['chrf']:.2f} on {r['sentences']} "
                   f"sentences  [{r['bleu_signature']}]")
  return '\n'.join(lines)
