"""Sentence and sentence-pair classification (or regression) with a pooled head.

  python train.py --config configs/classify.py --workdir runs/rt                  # rotten_tomatoes
  python train.py --config configs/classify.py:rotten_tomatoes \\
      --config.init_from=runs/mlm_roformer --workdir runs/rt_ft                   # fine-tune
  python train.py --config configs/classify.py:imdb --config.data.seq_len=1024 --workdir ...
  python train.py --config configs/classify.py:glue/mrpc --workdir ...            # TFDS GLUE

The argument is a task (`rotten_tomatoes`, `imdb`, or `glue/TASK` for TASK in cola, sst2, mrpc,
stsb, qqp, mnli, qnli, rte), optionally followed by `,KIND` for the position scheme (default
rope). The encoder's sizes equal configs/mlm.py's, so `--config.init_from` takes over a
pretrained encoder (its tokenizer too) and drops the MLM head.
"""

from configs import mlm
from roformer import positions
from roformer.data import pipeline

# (text features, classes, metrics, sequence length) of the embedded tasks. With the
# Shakespeare tokenizer of configs/mlm.py, 99% of rotten_tomatoes sentences fit in 96 tokens;
# 28% of IMDB reviews are longer than 512 tokens and 7% longer than 1024.
EMBEDDED = {
    'rotten_tomatoes': (('text',), 2, ('accuracy', 'f1'), 96),
    'imdb': (('text',), 2, ('accuracy', 'f1'), 512),
}


def get_config(arg: str = 'rotten_tomatoes'):
  parts = [p for p in (arg or 'rotten_tomatoes').split(',') if p]
  task, kinds = parts[0], parts[1:]
  if kinds and (len(kinds) > 1 or kinds[0] not in positions.kinds() + list(mlm.NAMED)):
    raise ValueError(f'configs/classify.py:{arg}: after the task, give one position kind '
                     f'{positions.kinds()} or a pretraining of configs/mlm.py '
                     f'{sorted(mlm.NAMED)}.')
  if task in EMBEDDED:
    keys, classes, metrics, seq_len = EMBEDDED[task]
    splits, eval_splits = {}, ('validation', 'test')
  elif task.startswith('glue/') and task[5:] in pipeline.GLUE_TASKS:
    keys, classes, metrics = pipeline.GLUE_TASKS[task[5:]]
    seq_len = 128
    splits, eval_splits = {}, ('validation', 'test')
    if task == 'glue/mnli':
      splits = {'validation': 'validation_matched', 'test': 'test_matched'}
      eval_splits = ('validation', 'validation_mismatched', 'test', 'test_mismatched')
  else:
    raise ValueError(f'configs/classify.py:{task}: unknown task; use one of {sorted(EMBEDDED)} '
                     f'or glue/{{{",".join(pipeline.GLUE_TASKS)}}}.')

  config = mlm.get_config(kinds[0] if kinds else 'roformer')
  config.model.type = 'classifier'
  config.model.update(num_classes=classes, pooling='first', dropout=0.1)
  config.data.update(name=task, text_key='', text_keys=keys, label_key='label', seq_len=seq_len,
                     splits=splits)
  # About 2 epochs of rotten_tomatoes' 6,883 training sentences.
  config.train.update(batch_size=32, steps=400, learning_rate=3e-4, warmup_steps=40,
                      eval_every=100, checkpoint_every=200, eval_batches=-1)
  config.eval.update(batch_size=32, metrics=metrics, splits=eval_splits)
  if task == 'imdb':  # Long reviews: fewer rows per step on a CPU.
    config.train.update(batch_size=8, steps=300, warmup_steps=30, eval_every=100,
                        eval_batches=50)  # 400 reviews during training; eval.py: all.
    config.eval.batch_size = 8
  if config.model.position.kind == 'learned' and seq_len > 512:
    config.model.position.learned.max_length = seq_len
  return config
