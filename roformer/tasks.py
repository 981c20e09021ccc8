"""What each model type trains on: its batches, its loss and its evaluation, behind one small
interface (`Task`).

`for_config(config)` picks the task from `config.model.type`; the training loop, evaluation and
checkpointing (`roformer.loop`, `roformer.evaluate`) are shared by all tasks and name none.
"""

import functools
import logging
import types

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import autodiff
from roformer import decode
from roformer import errors
from roformer import losses
from roformer import masking
from roformer import metrics as metrics_lib
from roformer import positions as positions_lib
from roformer import sharding
from roformer.data import pipeline
from roformer.data import synthetic
from roformer.data import tokenizer as tokenizer_lib

log = logging.getLogger('roformer')


@autodiff.custom_vjp('cross_entropy', nondiff_argnums=(2,), why='one pass over the log-probabilities, no scatter')
def cross_entropy(logits: jax.Array, targets: jax.Array, label_smoothing: float = 0.0):
  """Per-token cross-entropy -log p[target] and the label-smoothed objective
  (1 - e) CE + e mean_v(-log p_v), from float32 logits [..., V] and integer targets [...].

  Its backward is written out, d/dlogits = (g_ce + g_obj) p - (g_ce + (1 - e) g_obj) onehot -
  (e / V) g_obj, one elementwise pass over the saved log-probabilities: differentiating the
  gather of log p[target] would scatter into a zero [..., V] array and read it back.
  """
  (ce, objective), _ = _cross_entropy_fwd(logits, targets, label_smoothing)
  return ce, objective


def _cross_entropy_fwd(logits, targets, label_smoothing):
  logp = jax.nn.log_softmax(logits)
  ce = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  objective = ce if label_smoothing == 0 else (
      (1.0 - label_smoothing) * ce - label_smoothing * logp.mean(axis=-1))
  return (ce, objective), (logp, targets)


def _cross_entropy_bwd(label_smoothing, residuals, cotangents):
  logp, targets = residuals
  g_ce, g_objective = cotangents
  onehot = jax.lax.broadcasted_iota(targets.dtype, logp.shape, logp.ndim - 1) == targets[..., None]
  on_target = (g_ce + (1.0 - label_smoothing) * g_objective)[..., None]
  grad = ((g_ce + g_objective)[..., None] * jnp.exp(logp) - jnp.where(onehot, on_target, 0.0))
  if label_smoothing:
    grad = grad - (label_smoothing / logp.shape[-1]) * g_objective[..., None]
  return grad, None


cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def token_sums(logits, targets, weights, label_smoothing: float = 0.0, *,
               buckets: jax.Array | None = None, num_buckets: int = 0) -> dict[str, jax.Array]:
  """Summed cross-entropy (`loss_sum`), the label-smoothed training objective
  (`objective_sum`: (1 - e) CE + e mean_v(-log p_v)), right tokens (`losses.target_is_top`) and the
  number of weighted tokens. Logits are float32. With integer `buckets` (the same shape as
  targets, values in [0, num_buckets)), also the loss and weight summed per bucket
  (`bucket_loss_sum`, `bucket_weight`: [num_buckets])."""
  ce, objective = cross_entropy(logits.astype(jnp.float32), targets, float(label_smoothing))
  correct = losses.target_is_top(logits, targets).astype(jnp.float32)
  sums = {'loss_sum': (ce * weights).sum(), 'objective_sum': (objective * weights).sum(),
          'correct': (correct * weights).sum(), 'weight': weights.sum()}
  if buckets is not None:
    one_hot = jax.nn.one_hot(buckets, num_buckets, dtype=jnp.float32) * weights[..., None]
    sums['bucket_loss_sum'] = jnp.einsum('...b,...->b', one_hot, ce)
    sums['bucket_weight'] = one_hot.reshape(-1, num_buckets).sum(0)
  return sums


def summarize(totals: dict) -> dict:
  """Metrics from token sums added up over an evaluation: loss (nats per weighted token),
  accuracy, perplexity, tokens; with per-bucket sums, the loss per position bucket."""
  weight = max(float(totals['weight']), 1.0)
  loss = float(totals['loss_sum']) / weight
  out = {'loss': loss, 'accuracy': float(totals['correct']) / weight,
         'perplexity': metrics_lib.perplexity(loss), 'tokens': float(totals['weight'])}
  if 'bucket_weight' in totals:
    counts = np.asarray(totals['bucket_weight'], np.float64)
    losses = np.asarray(totals['bucket_loss_sum'], np.float64)
    out['position_loss'] = [float(l / c) if c else None for l, c in zip(losses, counts)]
    out['position_tokens'] = [float(c) for c in counts]
  return out


def _batch_size(config, batch_size):
  return (batch_size or config.train.batch_size) // jax.process_count()


def chunks(loss_chunk: int, length: int) -> bool:
  """Whether the output layer runs in chunks of `loss_chunk` positions (config.model.loss_chunk)
  for rows of `length`: only when a chunk is shorter than the row. A chunk as long as the row
  would be the whole logits in a loop of one step, and a longer one would pad the row (at the
  synthetic tasks' 16 positions, a chunk of 32 made the step 8% slower: docs/performance.md)."""
  return 0 < loss_chunk < length


class Task:
  """What the loop and evaluation ask of a task.

  Batches: `features`, `feature_shapes(batch_size, seq_len)` (the arrays of a batch, which
  evaluation pads a short last batch with) and `batches(config, source, tokenizer, *, train,
  seq_len=None, batch_size=None)` (an iterator of host batches; endless when training).
  Loss: `sums(model, batch, key, label_smoothing)` returns summed `objective_sum` (what is
  differentiated), `loss_sum`, `correct` and `weight` (and optionally `tokens`); the train step
  divides by the weight. Evaluation: `eval_sums(model, batch)` added up over a split, then
  `summarize(totals)`; a `per_example` task instead gives `predict(model, batch)` per example
  (F1, correlations). `check_data(config, sources)` checks the data against the model before
  anything is compiled. `decodes`: validation and the test split also decode and score text
  (BLEU). `best_metric`: the validation metric (higher is better) for which the loop keeps the
  best checkpoint apart, or None."""

  features: tuple[str, ...] = ()
  per_example = False  # Token-level loss and accuracy (not per-example predictions).
  extra_tokens = 0  # Ids the model has beyond the tokenizer's vocabulary.
  decodes = False
  best_metric: str | None = None

  def check_data(self, config, sources) -> None:
    del config, sources


class LanguageModeling(Task):
  """Next-token prediction over packed documents (`causal_lm`).

  `position_bucket` > 0: evaluation also sums the loss per bucket of that many positions
  (tokens 0..b-1, b..2b-1, ...: where a scheme breaks down beyond the training length).
  `train` (config.train): training rows get the positions of the sampler it turns on, if any
  (randomized, PoSE's skipped chunks, random floats: `roformer.positions.training`), and
  evaluation the positions that sampler evaluates at (consecutive ones for the integer ones).
  `loss_chunk` > 0: `sums` computes the output layer and its cross-entropy that many sequence
  positions at a time (`roformer.losses`), never holding the whole [tokens, vocabulary] logits;
  what needs the logits themselves (per-position buckets, synthetic tasks' row accuracy) still
  computes them whole."""

  features = ('inputs', 'targets', 'inputs_segment_ids', 'targets_segment_ids',
              'inputs_positions', 'targets_positions')
  position_bucket = loss_chunk = 0
  train_config = None

  def __init__(self, position_bucket: int = 0, train=None, loss_chunk: int = 0):
    self.position_bucket, self.train_config, self.loss_chunk = position_bucket, train, loss_chunk

  def feature_shapes(self, batch_size: int, seq_len: int) -> dict:
    return {k: np.zeros((batch_size, seq_len), np.int32) for k in self.features}

  def positions(self, batch, key):
    """The positions the model reads: its sampler's while training (a key is given), its
    evaluation positions otherwise; the batch's own without one."""
    return positions_lib.training.positions(batch, key, self.train_config)

  def loss_weights(self, batch):
    """Which targets count: every real token, or with evaluation's sliding windows those
    the row scores (`scored`)."""
    weights = (batch['targets_segment_ids'] > 0).astype(jnp.float32)
    return weights * batch['scored'] if 'scored' in batch else weights

  def eval_sums(self, model, batch):
    """`sums` for evaluation, with the loss per position bucket if asked for."""
    if self.position_bucket:
      return self.sums(model, batch, by_position=True)
    return self.sums(model, batch)

  def summarize(self, totals: dict) -> dict:
    out = summarize(totals)
    if 'position_loss' in out:
      out['position_bucket'] = self.position_bucket
    return out

  def batches(self, config, source, tokenizer, *, train: bool, seq_len=None, batch_size=None,
              stride: int = 0):
    """`stride` > 0 (evaluation): overlapping windows, each token scored once
    (pipeline.SlidingWindowsForLM)."""
    return pipeline.lm_dataset(
        source, tokenizer, text_key=config.data.text_key, seq_len=seq_len or config.data.seq_len,
        batch_size=_batch_size(config, batch_size), shuffle=train, repeat=train,
        seed=config.seed, shard_index=jax.process_index(), shard_count=jax.process_count(),
        shuffle_window=config.data.shuffle_window if train else 0,
        stride=0 if train else stride)

  def sums(self, model, batch, key=None, label_smoothing: float = 0.0, by_position=False):
    if chunks(self.loss_chunk, batch['inputs'].shape[1]) and not by_position:
      hidden = model.hidden(batch['inputs'], self.positions(batch, key),
                            batch['inputs_segment_ids'], key)
      return losses.chunked_token_sums(
          hidden, model.readout(), batch['targets'], self.loss_weights(batch),
          scale=model.logits_scale, label_smoothing=label_smoothing, chunk=self.loss_chunk)
    return self.logits_and_sums(model, batch, key, label_smoothing, by_position)[1]

  def logits_and_sums(self, model, batch, key=None, label_smoothing: float = 0.0,
                      by_position: bool = False):
    positions = self.positions(batch, key)
    logits = model(batch['inputs'], positions, batch['inputs_segment_ids'], key)
    buckets, count = None, 0
    if by_position:
      buckets = batch['inputs_positions'] // self.position_bucket
      count = -(-batch['inputs'].shape[1] // self.position_bucket)
    return logits, token_sums(logits, batch['targets'], self.loss_weights(batch),
                              label_smoothing, buckets=buckets, num_buckets=count)


class Translation(LanguageModeling):
  """Teacher-forced translation of packed source/target pairs (`encoder_decoder`); validation
  also decodes with beam search and scores BLEU, and the best-BLEU checkpoint is kept."""

  decodes = True
  best_metric = 'bleu'

  features = ('inputs', 'decoder_inputs', 'targets', 'inputs_segment_ids',
              'decoder_inputs_segment_ids', 'targets_segment_ids', 'inputs_positions',
              'decoder_inputs_positions', 'targets_positions')

  def batches(self, config, source, tokenizer, *, train: bool, seq_len=None, batch_size=None):
    (_, source_key), (_, target_key) = pipeline.text_fields(config.data)
    return pipeline.translation_dataset(
        source, tokenizer, source_key=source_key, target_key=target_key,
        max_len=seq_len or config.data.seq_len, batch_size=_batch_size(config, batch_size),
        shuffle=train, repeat=train, seed=config.seed, shard_index=jax.process_index(),
        shard_count=jax.process_count())

  def sums(self, model, batch, key=None, label_smoothing: float = 0.0):
    logits = model(batch['inputs'], batch['inputs_positions'], batch['inputs_segment_ids'],
                   batch['decoder_inputs'], batch['targets_positions'],
                   batch['targets_segment_ids'], key)
    weights = (batch['targets_segment_ids'] > 0).astype(jnp.float32)
    return token_sums(logits, batch['targets'], weights, label_smoothing)


  def translate(self, graphdef, params, texts, tokenizer, *, max_len: int, beam_size: int = 4,
                alpha: float = 0.6, batch_size: int = 32) -> list[str]:
    """Beam-search translations (detokenized text) of raw source sentences. Sources longer
    than max_len - 1 tokens are cut, as in training, and counted in a warning."""
    if any(not t.strip() for t in texts):
      raise errors.ConfigError('cannot translate an empty source sentence (index '
                               f'{next(i for i, t in enumerate(texts) if not t.strip())}).')
    ids = [tokenizer.encode(t) for t in texts]
    cut = sum(len(x) > max_len - 1 for x in ids)
    if cut:
      log.warning('%d of %d source sentences are longer than %d tokens and were cut.', cut,
                  len(ids), max_len - 1)
    out = []
    for start in range(0, len(ids), batch_size):
      chunk = ids[start:start + batch_size]
      src = np.zeros((batch_size, max_len), np.int32)
      for row, x in enumerate(chunk):
        x = np.append(x[:max_len - 1], tokenizer_lib.EOS_ID)
        src[row, :len(x)] = x
      tokens = np.asarray(_beam_translate(graphdef, params, src, beam_size, alpha, max_len))
      out += [tokenizer.decode(row) for row in tokens[:len(chunk)]]
    return out


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5))
def _beam_translate(graphdef, params, src, beam_size, alpha, max_len):
  model = nnx.merge(graphdef, params)
  segments = (src > 0).astype(jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(src.shape[1]), src.shape)
  memory = model.encode_source(src, positions, segments)
  cache = model.init_cache(memory, segments, max_len)
  bos = jnp.full((src.shape[0], 1), tokenizer_lib.BOS_ID, jnp.int32)
  logits, cache = model.decode(bos, jnp.zeros_like(bos), cache)

  def step_fn(token, position, cache):
    logits, cache = model.decode(token, position, cache)
    return logits[:, -1], cache

  tokens, _ = decode.beam_search(step_fn, logits[:, -1], cache,
                                 jnp.ones((src.shape[0],), jnp.int32), beam_size=beam_size,
                                 max_len=max_len - 1, eos_id=tokenizer_lib.EOS_ID, alpha=alpha)
  return tokens[:, 0]


# Evaluation batches are masked with a key derived from this seed and the batch's contents, so
# that every evaluation of the same data sees the same masks.
EVAL_MASK_SEED = 20210420


class MaskedLanguageModeling(LanguageModeling):
  """BERT-style masked-LM pretraining (`mlm`) on packed documents: the loss and accuracy are
  over the selected positions only. Masks are drawn on the device from the step's key (a new
  draw every step, as in RoBERTa), and from the batch's contents during evaluation.

  With the head at every position (`max_predictions=0`) and `loss_chunk` > 0, the tied output
  layer and its cross-entropy run chunk by chunk (`roformer.losses`) as the causal LM's do."""

  features = ('inputs', 'inputs_segment_ids', 'inputs_positions')
  extra_tokens = 1  # The [MASK] id: tokenizer.vocab_size, the model's last id.

  def __init__(self, rate: float = 0.15, mask_fraction: float = 0.8,
               random_fraction: float = 0.1, max_predictions: int = -1, loss_chunk: int = 0):
    self.rate, self.mask_fraction, self.random_fraction = rate, mask_fraction, random_fraction
    self.max_predictions, self.loss_chunk = max_predictions, loss_chunk

  def batches(self, config, source, tokenizer, *, train: bool, seq_len=None, batch_size=None):
    return pipeline.lm_dataset(
        source, tokenizer, text_key=config.data.text_key, seq_len=seq_len or config.data.seq_len,
        batch_size=_batch_size(config, batch_size), shuffle=train, repeat=train,
        seed=config.seed, shard_index=jax.process_index(), shard_count=jax.process_count(),
        shuffle_window=config.data.shuffle_window if train else 0, shift=False)

  def sums(self, model, batch, key=None, label_smoothing: float = 0.0):
    inputs, segments = batch['inputs'], batch['inputs_segment_ids']
    if key is None:
      fingerprint = (inputs * (jnp.arange(inputs.shape[1]) + 1)).sum(dtype=jnp.uint32)
      mask_key, dropout_key = jax.random.fold_in(jax.random.key(EVAL_MASK_SEED), fingerprint), None
    else:
      mask_key, dropout_key = jax.random.split(key)
    # The head runs only where a prediction can be (the vocabulary-sized output layer is most
    # of a small model's cost), on `slots` gathered positions per block of rows; blocks follow
    # the batch's shards so the gather stays on each device.
    rows, length = inputs.shape
    groups = sharding.shards('batch', rows)
    slots = masking.prediction_slots(self.max_predictions, self.rate, rows // groups, length)
    # The cap on selections: N per row for max_predictions = N (a block of rows then never
    # holds more than its slots), the slots per block for the automatic count.
    cap, cap_groups = slots, groups
    if slots is not None and self.max_predictions > 0:
      cap, cap_groups = self.max_predictions, rows
    corrupted, selected = masking.mask_tokens(
        mask_key, inputs, segments, mask_id=model.embed.num_embeddings - 1, rate=self.rate,
        mask_fraction=self.mask_fraction, random_fraction=self.random_fraction,
        max_selected=cap, groups=cap_groups)
    hidden = model.encode_segments(corrupted, batch['inputs_positions'], segments, dropout_key)
    targets, weights = inputs, selected
    tokens = {'tokens': (segments > 0).sum().astype(jnp.float32)}  # Input tokens.
    if slots is None and chunks(self.loss_chunk, length):
      sums = losses.chunked_token_sums(
          model.transform(hidden), model.readout(), targets,
          weights.astype(jnp.float32), scale=model.logits_scale, label_smoothing=label_smoothing,
          chunk=self.loss_chunk, bias=model.output_bias.value)
      return {**sums, **tokens}
    if slots is not None:
      block = lambda x: x.reshape((groups, rows // groups * length) + x.shape[2:])
      _, index = jax.lax.top_k(block(selected).astype(jnp.float32), slots)  # Every selection.
      take = lambda x: jnp.take_along_axis(block(x), index.reshape(index.shape + (1,) * (
          x.ndim - 2)), axis=1)
      hidden = sharding.constrain(take(hidden), ('batch', None, None))
      targets, weights = take(inputs), take(selected)
    sums = token_sums(model.predict(hidden), targets, weights.astype(jnp.float32),
                      label_smoothing)
    return {**sums, **tokens}


class SyntheticTask(LanguageModeling):
  """A synthetic length-generalization task (`causal_lm` on `synthetic/TASK` data,
  `roformer.data.synthetic`): loss and token accuracy over the answer tokens only, and the
  share of rows whose answer is entirely right.

  A row is right when every answer token is right (`losses.target_is_top`, teacher forcing). Up
  to exact ties for the largest logit, that is whether greedy decoding from the question
  reproduces the answer: as long as every
  earlier answer token was right, greedy decoding sees the same inputs as teacher forcing, so the
  first wrong token is the same in both. `depth_accuracy` splits the rows of passkey and RULER's
  needle tasks by the depth of the key or asked needle (`data.synthetic.depth_buckets` equal
  bands of the filler)."""

  features = LanguageModeling.features + ('weights', 'bucket')

  def __init__(self, task: str, num_buckets: int, position_bucket: int = 0,
               train=None, loss_chunk: int = 0, answer_tokens=None):
    super().__init__(position_bucket, train, loss_chunk)
    self.task, self.num_buckets = task, num_buckets
    self.answer_tokens = answer_tokens

  def answer_slots(self, length: int) -> int | None:
    """How many positions of a row of `length` the output layer runs at: the most answer
    tokens such a row holds (`synthetic.answer_tokens`), or None for every position (when
    that is no fewer, or no bound was given)."""
    slots = self.answer_tokens(length) if self.answer_tokens else None
    return slots if slots is not None and 0 < slots < length else None

  def feature_shapes(self, batch_size: int, seq_len: int) -> dict:
    shapes = super().feature_shapes(batch_size, seq_len)
    return {**shapes, 'weights': np.zeros((batch_size, seq_len), np.float32),
            'bucket': np.zeros((batch_size,), np.int32)}

  def batches(self, config, source, tokenizer, *, train: bool, seq_len=None, batch_size=None):
    return pipeline.synthetic_dataset(
        source, seq_len=seq_len or config.data.seq_len, batch_size=_batch_size(config, batch_size),
        seed=config.seed, train=train, shard_index=jax.process_index(),
        shard_count=jax.process_count(), tokenizer=tokenizer)

  def loss_weights(self, batch):
    return batch['weights']

  def sums(self, model, batch, key=None, label_smoothing: float = 0.0, by_position=False):
    slots = self.answer_slots(batch['inputs'].shape[1])
    if slots is None:
      return super().sums(model, batch, key, label_smoothing, by_position)
    return self.answer_logits_and_sums(model, batch, slots, key, label_smoothing,
                                       by_position)[-1]

  def answer_logits_and_sums(self, model, batch, slots: int, key=None,
                             label_smoothing: float = 0.0, by_position: bool = False):
    """The logits, targets and weights at `slots` positions of each row that include every
    answer token, and `token_sums` over them. The loss and accuracy count the answer tokens
    alone, so the output layer runs there only: at the length sweep's shapes the
    vocabulary-sized layer and its cross-entropy at every position were about a tenth of the
    step (docs/performance.md)."""
    hidden = model.hidden(batch['inputs'], self.positions(batch, key),
                          batch['inputs_segment_ids'], key)
    # Every weighted position is among a row's `slots` largest weights (the data checks that
    # no row holds more answer tokens); the other slots hold weight 0.
    _, index = jax.lax.top_k(batch['weights'], slots)
    take = lambda x: jnp.take_along_axis(x, index.reshape(index.shape + (1,) * (x.ndim - 2)),
                                         axis=1)
    logits, targets, weights = model.logits(take(hidden)), take(batch['targets']), take(
        batch['weights'])
    buckets, count = None, 0
    if by_position:
      buckets = take(batch['inputs_positions']) // self.position_bucket
      count = -(-batch['inputs'].shape[1] // self.position_bucket)
    return logits, targets, weights, token_sums(logits, targets, weights, label_smoothing,
                                                buckets=buckets, num_buckets=count)

  def eval_sums(self, model, batch):
    by_position = self.position_bucket > 0
    slots = self.answer_slots(batch['inputs'].shape[1])
    if slots is None:
      logits, sums = self.logits_and_sums(model, batch, by_position=by_position)
      targets, weights = batch['targets'], batch['weights']
    else:
      logits, targets, weights, sums = self.answer_logits_and_sums(model, batch, slots,
                                                                   by_position=by_position)
    answer = weights > 0
    wrong = ~losses.target_is_top(logits, targets) & answer
    scored = answer.any(-1).astype(jnp.float32)  # Padding rows have no answer.
    right = scored * (~wrong.any(-1)).astype(jnp.float32)
    per_bucket = jax.nn.one_hot(batch['bucket'], self.num_buckets, dtype=jnp.float32)
    return {**sums, 'rows': scored.sum(), 'rows_correct': right.sum(),
            'depth_rows': scored @ per_bucket, 'depth_correct': right @ per_bucket}

  def summarize(self, totals: dict) -> dict:
    out = super().summarize(totals)
    rows = float(totals['rows'])
    out.update(sequence_accuracy=float(totals['rows_correct']) / max(rows, 1.0), rows=rows)
    if self.task in synthetic.DEPTH_TASKS:
      out['depth_accuracy'] = [float(c / n) if n else None for c, n in zip(
          np.asarray(totals['depth_correct']), np.asarray(totals['depth_rows']))]
    return out


class Classification(Task):
  """Sentence (or sentence-pair) classification and regression (`classifier`), one example per
  row. `num_classes=1` is regression with a squared-error loss (STS-B), which has no accuracy.

  Training and evaluation score an example with one function (`scored`): its prediction (the
  class of the largest logit, the first of tied ones, as an argmax takes it; a regression's
  score) and its loss (cross-entropy, or squared error). Training's accuracy and evaluation's
  metrics read the same predictions, and both losses are the same per-example values."""

  features = ('inputs', 'inputs_positions', 'inputs_segment_ids', 'token_types', 'label',
              'weight')
  per_example = True
  extra_tokens = 1  # Same vocabulary as the masked LM it is fine-tuned from.

  def __init__(self, regression: bool = False):
    self.regression = regression

  def check_data(self, config, sources) -> None:
    """The labels fit the head, and a sentence-pair task gets both of its sentences."""
    pairs = {'glue/' + task for task, spec in pipeline.GLUE_TASKS.items() if len(spec[0]) == 2}
    keys = tuple(config.data.text_keys)
    if config.data.name in pairs and len(keys) != 2:
      wanted = pipeline.GLUE_TASKS[config.data.name[5:]][0]
      raise errors.ConfigError(
          f'{config.data.name} is a sentence-pair task but config.data.text_keys={keys} names '
          f'{len(keys)} text(s). Fix: --config.data.text_keys="{wanted}" (or use '
          f'configs/classify.py:{config.data.name}).')
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

  def feature_shapes(self, batch_size: int, seq_len: int) -> dict:
    shapes = {k: np.zeros((batch_size, seq_len), np.int32) for k in self.features[:4]}
    label = np.float32 if self.regression else np.int32
    return {**shapes, 'label': np.zeros((batch_size,), label),
            'weight': np.zeros((batch_size,), np.float32)}

  def batches(self, config, source, tokenizer, *, train: bool, seq_len=None, batch_size=None,
              split: str = ''):
    return pipeline.classification_dataset(
        source, tokenizer, text_keys=config.data.text_keys, label_key=config.data.label_key,
        max_len=seq_len or config.data.seq_len, num_classes=config.model.num_classes,
        batch_size=_batch_size(config, batch_size), shuffle=train, repeat=train,
        seed=config.seed, shard_index=jax.process_index(), shard_count=jax.process_count(),
        split=split)

  def logits(self, model, batch, key=None):
    """The model's outputs [batch, num_classes] (regression: [batch, 1])."""
    return model(batch['inputs'], batch['inputs_positions'], batch['inputs_segment_ids'], key,
                 token_types=batch['token_types'])

  def scored(self, logits, labels, label_smoothing: float = 0.0):
    """Per example: (prediction, loss, objective): the class with the largest logit (the first
    of tied ones) or the regression's score, the cross-entropy or squared error, and the
    label-smoothed objective that training differentiates (the loss for regression)."""
    if self.regression:
      score = logits[:, 0]
      squared = (score - labels.astype(jnp.float32)) ** 2
      return score, squared, squared
    ce, objective = cross_entropy(logits.astype(jnp.float32), labels, float(label_smoothing))
    return jnp.argmax(logits, axis=-1), ce, objective

  def predict(self, model, batch):
    """Evaluation's per-example (prediction, loss), which its metrics read."""
    return self.scored(self.logits(model, batch), batch['label'])[:2]

  def eval_sums(self, model, batch):
    return self.sums(model, batch)

  def sums(self, model, batch, key=None, label_smoothing: float = 0.0):
    """Sums over examples (`weight` counts them); `tokens` counts their input tokens; no
    `correct` for regression."""
    weights = batch['weight']
    prediction, loss, objective = self.scored(self.logits(model, batch, key), batch['label'],
                                              label_smoothing)
    out = {'loss_sum': (loss * weights).sum(), 'objective_sum': (objective * weights).sum(),
           'weight': weights.sum(),
           'tokens': (batch['inputs_segment_ids'] > 0).sum().astype(jnp.float32)}
    if not self.regression:
      out['correct'] = ((prediction == batch['label']) * weights).sum()
    return out


def _language_modeling(config):
  """The causal LM's task: packed text, or a synthetic task named by config.data.name."""
  width = config.eval.position_bucket or max(config.data.seq_len // 4, 1)
  loss_chunk = config.model.loss_chunk
  task = synthetic.task_name(config.data)
  if task:
    answers = functools.partial(synthetic.answer_tokens, task,
                                types.SimpleNamespace(**config.data.synthetic.to_dict()))
    return SyntheticTask(task, config.data.synthetic.depth_buckets, width, config.train,
                         loss_chunk, answers)
  return LanguageModeling(width, config.train, loss_chunk)


TASKS = {
    'causal_lm': _language_modeling,
    'encoder_decoder': lambda config: Translation(),
    'mlm': lambda config: MaskedLanguageModeling(
        config.data.mask_rate, config.data.mask_fraction, config.data.random_fraction,
        config.data.max_predictions, config.model.loss_chunk),
    'classifier': lambda config: Classification(regression=config.model.num_classes == 1),
}


def for_config(config) -> Task:
  return TASKS[config.model.type](config)


def per_example(config) -> bool:
  """Whether the model's task scores whole examples (classification, regression) rather than
  tokens."""
  return config.model.type in TASKS and for_config(config).per_example
