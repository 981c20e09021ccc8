"""Evaluation metrics and the run's metric writers (JSON lines + TensorBoard)."""

import math
import os
import time

import numpy as np

from roformer import files


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


def references_of(hypotheses: str) -> str:
  """The references file beside a decoded split's hypotheses (SPLIT-stepN[.NAME].hyp.txt, as
  evaluate.evaluate_run writes them): SPLIT-stepN[.NAME].ref.txt."""
  return hypotheses.removesuffix('.hyp.txt') + '.ref.txt'


def read_lines(path: str) -> list[str]:
  """The lines of a decoded split's file, one sentence each ending in a newline; a carriage
  return inside a sentence stays in it."""
  with open(path, encoding='utf-8', newline='') as f:
    return f.read().split('\n')[:-1]


def paired_bootstrap(systems: list[tuple[str, list[str]]], references: list[str],
                     samples: int = 1000, seed: int = 12345) -> list[dict]:
  """sacreBLEU's paired bootstrap (Koehn 2004) of corpus BLEU and chrF over the sentences: for
  each system, {system, bleu, chrf, and per metric its bootstrap mean, the half-width of its
  95% interval (`_ci`) and, for every system after the first (the baseline), the p-value of
  its difference from the baseline (`_p`: the share of resamples whose mean-shifted difference
  exceeds the observed one, plus one, over `samples` plus one; None for the baseline), and
  sacreBLEU's signature (`_signature`, naming the resamples and seed)}. The same `samples`
  resamples of sentence indices serve every system, drawn from `seed` (sacreBLEU reads it from
  SACREBLEU_SEED, which is set here for the call and then restored; it draws a system's
  resamples unseeded when the seed is 0, so the seed is at least 1)."""
  import sacrebleu  # pylint: disable=g-import-not-at-top
  from sacrebleu import significance  # pylint: disable=g-import-not-at-top
  if samples < 40 or seed < 1:
    raise ValueError(f'paired_bootstrap needs at least 40 resamples (a 95% interval drops '
                     f'1/40 at each end) and a seed of 1 or more; got {samples} and {seed}.')
  metrics = {'bleu': sacrebleu.metrics.BLEU(), 'chrf': sacrebleu.metrics.CHRF()}
  before = os.environ.get('SACREBLEU_SEED')
  os.environ['SACREBLEU_SEED'] = str(seed)
  try:
    signatures, scores = significance.PairedTest(systems, metrics, [references],
                                                 test_type='bs', n_samples=samples)()
  finally:
    if before is None:
      os.environ.pop('SACREBLEU_SEED')
    else:
      os.environ['SACREBLEU_SEED'] = before
  named = list(signatures)  # sacreBLEU's names of `metrics` (BLEU, chrF), in their order.
  rows = []
  for i, (name, _) in enumerate(systems):
    row = {'system': name}
    for metric, key in zip(metrics, named):
      result, baseline = scores[key][i], scores[key][0]
      # sacreBLEU counts resamples strictly over the observed difference, so a system that
      # scores the same as the baseline (every resample's difference then 0) would get the
      # smallest p; every resample differs at least as much as no difference: p = 1.
      p = (None if not i else 1.0 if float(result.score) == float(baseline.score)
           else float(result.p_value))
      row.update({metric: float(result.score), f'{metric}_mean': float(result.mean),
                  f'{metric}_ci': float(result.ci), f'{metric}_p': p,
                  f'{metric}_signature': str(signatures[key])})
    rows.append(row)
  return rows


def accuracy(labels, predictions) -> float:
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions, positive: int = 1) -> float:
  """F1 of the positive class (as GLUE reports it for MRPC and QQP)."""
  labels, predictions = np.asarray(labels) == positive, np.asarray(predictions) == positive
  tp = float(np.sum(labels & predictions))
  denominator = 2 * tp + np.sum(labels & ~predictions) + np.sum(~labels & predictions)
  return 2 * tp / denominator if denominator else 0.0


def matthews_correlation(labels, predictions) -> float:
  """Matthews correlation of binary labels (CoLA); 0 when a margin is empty."""
  y, p = np.asarray(labels) == 1, np.asarray(predictions) == 1
  tp, tn = float(np.sum(y & p)), float(np.sum(~y & ~p))
  fp, fn = float(np.sum(~y & p)), float(np.sum(y & ~p))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y) -> float:
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt((x * x).sum() * (y * y).sum())
  return float((x * y).sum() / denominator) if denominator else 0.0


def ranks(x) -> np.ndarray:
  """Ranks 1..n, ties sharing their average rank."""
  x = np.asarray(x)
  order = np.argsort(x, kind='stable')
  r = np.empty(len(x), np.float64)
  r[order] = np.arange(1, len(x) + 1)
  for value in np.unique(x):
    tied = x == value
    r[tied] = r[tied].mean()
  return r


def spearman(x, y) -> float:
  return pearson(ranks(x), ranks(y))


# What each classification metric reads: predicted classes, or raw scores (regression).
CLASSIFICATION_METRICS = {
    'accuracy': accuracy, 'f1': f1, 'mcc': matthews_correlation,
}
REGRESSION_METRICS = {'pearson': pearson, 'spearman': spearman}


def classification_report(names, labels, predictions) -> dict[str, float]:
  """The named metrics of `predictions` (classes [n], or a regression's scores [n]; see
  tasks.Classification.scored)."""
  report = {}
  for name in names:
    fn = CLASSIFICATION_METRICS.get(name) or REGRESSION_METRICS[name]
    report[name] = fn(labels, predictions)
  return report


class MetricsWriter:
  """Appends {'step', 'split', ...} records to workdir/metrics.jsonl and the same scalars as
  TensorBoard events to workdir/tensorboard/.

  Both are written and flushed in the calling thread (TensorBoard's usual writer does it in a
  background thread, where a full disk would go unnoticed and its queue would then block the
  run), so a failed write raises here and the training loop stops cleanly. A record cut short
  by such a failure is ended with a newline before the next one is appended: readers skip just
  that line (roformer/files.py)."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self.tb_dir = os.path.join(workdir, 'tensorboard')
    self._events = None

  def _events_writer(self):
    if self._events is None:
      from tensorboardX.event_file_writer import EventsWriter  # pylint: disable=g-import-not-at-top
      os.makedirs(self.tb_dir, exist_ok=True)
      self._events = EventsWriter(os.path.join(self.tb_dir, 'events'))
    return self._events

  def write(self, step: int, split: str, values: dict) -> None:
    """Writes the scalar values (per-bucket lists and other structures stay in eval_results)."""
    if not self.enabled:
      return
    from tensorboardX.proto import event_pb2, summary_pb2  # pylint: disable=g-import-not-at-top
    values = {k: float(v) for k, v in values.items() if np.ndim(v) == 0 and v is not None
              and not isinstance(v, (str, dict))}
    files.append_record(self.path, {'step': int(step), 'split': split, **values},
                        'jsonl.partial')
    summary = summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=f'{split}/{k}', simple_value=v) for k, v in values.items()])
    events = self._events_writer()
    events.write_event(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))
    events.flush()

  def close(self) -> None:
    if self._events is not None:
      events, self._events = self._events, None
      events.close()

  def close_quietly(self) -> None:
    """Closes after a failure (a full disk): nothing raises here."""
    try:
      self.close()
    except OSError:
      pass


def read_jsonl(path: str) -> list[dict]:
  """The records of metrics.jsonl, skipping (with a warning) a line a cut-short write left."""
  return files.read_jsonl(path)
