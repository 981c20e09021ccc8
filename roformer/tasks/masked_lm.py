"""Masked-LM pretraining (`mlm`): BERT-style masks drawn on the device, the loss over the
selected positions only."""

import jax
import jax.numpy as jnp

from roformer import losses
from roformer import masking
from roformer import sharding
from roformer.data import pipeline
from roformer.tasks import base
from roformer.tasks import language_modeling


# Evaluation batches are masked with a key derived from this seed and the batch's contents, so
# that every evaluation of the same data sees the same masks.
EVAL_MASK_SEED = 20210420


class MaskedLanguageModeling(language_modeling.LanguageModeling):
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
        batch_size=base.batch_size(config, batch_size), shuffle=train, repeat=train,
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
    if slots is None and base.chunks(self.loss_chunk, length):
      sums = losses.chunked_token_sums(
          model.transform(hidden), model.readout(), targets,
          weights.astype(jnp.float32), scale=model.logits_scale, label_smoothing=label_smoothing,
          chunk=self.loss_chunk, bias=model.output_bias.value, softcap=model.logits_softcap)
      return {**sums, **tokens}
    if slots is not None:
      block = lambda x: x.reshape((groups, rows // groups * length) + x.shape[2:])
      _, index = jax.lax.top_k(block(selected).astype(jnp.float32), slots)  # Every selection.
      take = lambda x: jnp.take_along_axis(block(x), index.reshape(index.shape + (1,) * (
          x.ndim - 2)), axis=1)
      hidden = sharding.constrain(take(hidden), ('batch', None, None))
      targets, weights = take(inputs), take(selected)
    sums = base.token_sums(model.predict(hidden), targets, weights.astype(jnp.float32),
                      label_smoothing)
    return {**sums, **tokens}
