"""The causal LM's tasks (`causal_lm`): next-token prediction over packed documents
(`LanguageModeling`, which the masked LM and translation build on), and the synthetic
length-generalization tasks scored on their answers (`SyntheticTask`)."""

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np

from roformer import losses
from roformer import positions as positions_lib
from roformer.data import pipeline
from roformer.data import synthetic
from roformer.data import synthetic_batches
from roformer.tasks import base


class LanguageModeling(base.Task):
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
    out = base.summarize(totals)
    if 'position_loss' in out:
      out['position_bucket'] = self.position_bucket
    return out

  def batches(self, config, source, tokenizer, *, train: bool, seq_len=None, batch_size=None,
              stride: int = 0):
    """`stride` > 0 (evaluation): overlapping windows, each token scored once
    (pipeline.SlidingWindowsForLM)."""
    return pipeline.lm_dataset(
        source, tokenizer, text_key=config.data.text_key, seq_len=seq_len or config.data.seq_len,
        batch_size=base.batch_size(config, batch_size), shuffle=train, repeat=train,
        seed=config.seed, shard_index=jax.process_index(), shard_count=jax.process_count(),
        shuffle_window=config.data.shuffle_window if train else 0,
        stride=0 if train else stride)

  def sums(self, model, batch, key=None, label_smoothing: float = 0.0, by_position=False):
    if base.chunks(self.loss_chunk, batch['inputs'].shape[1]) and not by_position:
      hidden = model.hidden(batch['inputs'], self.positions(batch, key),
                            batch['inputs_segment_ids'], key)
      return losses.chunked_token_sums(
          hidden, model.readout(), batch['targets'], self.loss_weights(batch),
          scale=model.logits_scale, label_smoothing=label_smoothing, chunk=self.loss_chunk,
          bias=model.output_bias[...] if hasattr(model, 'output_bias') else None,
          softcap=model.logits_softcap)
    return self.logits_and_sums(model, batch, key, label_smoothing, by_position)[1]

  def logits_and_sums(self, model, batch, key=None, label_smoothing: float = 0.0,
                      by_position: bool = False):
    positions = self.positions(batch, key)
    logits = model(batch['inputs'], positions, batch['inputs_segment_ids'], key)
    buckets, count = None, 0
    if by_position:
      buckets = batch['inputs_positions'] // self.position_bucket
      count = -(-batch['inputs'].shape[1] // self.position_bucket)
    return logits, base.token_sums(logits, batch['targets'], self.loss_weights(batch),
                              label_smoothing, buckets=buckets, num_buckets=count)


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
    return synthetic_batches.synthetic_dataset(
        source, seq_len=seq_len or config.data.seq_len,
        batch_size=base.batch_size(config, batch_size),
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
    return logits, targets, weights, base.token_sums(logits, targets, weights, label_smoothing,
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


def for_config(config) -> LanguageModeling:
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
