"""Classification and regression (`classifier`): one example per row, one scoring function
for training and evaluation."""

import jax
import jax.numpy as jnp
import numpy as np

from roformer import errors
from roformer.data import pipeline
from roformer.tasks import base


class Classification(base.Task):
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
      if not np.issubdtype(labels.dtype, np.number):
        held = 'text' if labels.dtype.kind in 'SUO' else str(labels.dtype)
        example = labels[0]
        if isinstance(example, bytes):
          example = example.decode('utf-8', 'replace')
        raise errors.ConfigError(
            f'config.data.label_key={config.data.label_key!r} of {config.data.name!r} holds '
            f'{held} (e.g. {example!r}), not class ids. Fix: name its field of integer '
            'labels, or use a dataset that has one (e.g. rotten_tomatoes).')
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
        batch_size=base.batch_size(config, batch_size), shuffle=train, repeat=train,
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
    ce, objective = base.cross_entropy(logits.astype(jnp.float32), labels, float(label_smoothing))
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
