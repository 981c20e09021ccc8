"""Evaluation metrics and the run's metric writers (JSON lines + TensorBoard)."""

import json
import math
import os

import numpy as np


def perplexity(loss: float) -> float:
  """exp(mean token cross-entropy in nats), inf when it overflows."""
  return math.exp(loss) if loss < 700 else float('inf')


def unigram_cross_entropy(train_counts: np.ndarray, eval_counts: np.ndarray) -> float:
  """Cross-entropy (nats/token) of eval tokens under the add-one-smoothed train unigram model:
  the loss a model that ignores context entirely would reach."""
  p = (train_counts + 1.0) / (train_counts.sum() + len(train_counts))
  return float(-(eval_counts * np.log(p)).sum() / eval_counts.sum())


def bleu_and_chrf(hypotheses: list[str], references: list[str]) -> dict:
  """Corpus sacreBLEU (13a tokenization on detokenized text) and chrF, with signatures."""
  import sacrebleu  # pylint: disable=g-import-not-at-top
  bleu = sacrebleu.metrics.BLEU()
  chrf = sacrebleu.metrics.CHRF()
  return {'bleu': bleu.corpus_score(hypotheses, [references]).score,
          'chrf': chrf.corpus_score(hypotheses, [references]).score,
          'bleu_signature': str(bleu.get_signature()),
          'chrf_signature': str(chrf.get_signature())}


class MetricsWriter:
  """Appends {'step', 'split', ...} records to workdir/metrics.jsonl and TensorBoard events."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self.tb = None
    if enabled:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self.tb = SummaryWriter(os.path.join(workdir, 'tensorboard'))

  def write(self, step: int, split: str, values: dict) -> None:
    if not self.enabled:
      return
    values = {k: float(v) for k, v in values.items()}
    with open(self.path, 'a', encoding='utf-8') as f:
      f.write(json.dumps({'step': int(step), 'split': split, **values}) + '\n')
    for k, v in values.items():
      self.tb.add_scalar(f'{split}/{k}', v, step)
    self.tb.flush()

  def close(self) -> None:
    if self.tb is not None:
      self.tb.close()


def read_jsonl(path: str) -> list[dict]:
  with open(path, encoding='utf-8') as f:
    return [json.loads(line) for line in f if line.strip()]
