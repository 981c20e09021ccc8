"""What each model type trains on: its batches, its loss and its evaluation, behind one small
interface (`base.Task`), one module per model type.

`for_config(config)` picks the task from `config.model.type`; the training loop, evaluation and
checkpointing (`roformer.loop`, `roformer.evaluate`) are shared by all tasks and name none.
"""

from roformer.tasks import base
from roformer.tasks import classification
from roformer.tasks import language_modeling
from roformer.tasks import masked_lm
from roformer.tasks import translation
from roformer.tasks.base import Task, chunks, cross_entropy, summarize, token_sums
from roformer.tasks.classification import Classification
from roformer.tasks.language_modeling import LanguageModeling, SyntheticTask
from roformer.tasks.masked_lm import EVAL_MASK_SEED, MaskedLanguageModeling
from roformer.tasks.translation import Translation

# Each model type's task, from the whole config.
TASKS = {
    'causal_lm': language_modeling.for_config,
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
