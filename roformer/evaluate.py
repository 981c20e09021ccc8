"""Evaluation: token-weighted loss and accuracy over a split, per-example metrics for
classifiers, BLEU for translation, and `evaluate_workdir`, what eval.py runs on a trained
run (every split at every evaluation length, RoPE scaling applied at evaluation time)."""

import itertools
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from roformer import compile_ahead
from roformer import config_schema
from roformer import errors
from roformer import files
from roformer import metrics as metrics_lib
from roformer import models
from roformer import positions as positions_lib
from roformer import provenance
from roformer import resolve
from roformer import saved_config
from roformer import sharding
from roformer import tasks
from roformer import trainer as trainer_lib
from roformer.data import mixture
from roformer.data import passkey_text
from roformer.data import pipeline
from roformer.data import synthetic
from roformer.data import tokens as tokens_lib
from roformer.data import vocabularies


def translation_scores(trainer: trainer_lib.Trainer, params, source, tokenizer, *, limit: int = -1):
  """Decodes up to `limit` pairs of `source` (-1: all) with beam search and scores them with
  sacreBLEU and chrF. Returns (scores, hypotheses, references)."""
  config = trainer.config
  (_, src_key), (_, tgt_key) = pipeline.text_fields(config.data)
  sources, references = [], []
  for i in range(len(source)):
    if 0 <= limit <= len(sources):
      break
    src, ref = (tokens_lib.as_text(source[i][k]) for k in (src_key, tgt_key))
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


# Running totals of evaluation sums, one launch per batch (eagerly, one per leaf: ten for a
# task with position buckets).
_added = jax.jit(lambda totals, sums: jax.tree.map(jnp.add, totals, sums))


def evaluate(trainer: trainer_lib.Trainer, params, dataset, *, batch_size: int,
             max_batches: int = -1, seq_len: int | None = None, scored: bool = False):
  """Token-weighted loss, accuracy and perplexity over a (finite) dataset of packed batches;
  for per-example tasks, `evaluate_examples`. `scored`: the batches carry sliding windows'
  `scored` feature (every process's batches must have the same features)."""
  local = batch_size // jax.process_count()
  template = _template(trainer, local, seq_len or trainer.config.data.seq_len, scored)
  if trainer.task.per_example:
    return evaluate_examples(trainer, params, dataset, template, max_batches)
  totals = None
  for batch in _eval_batches(dataset, max_batches, template):
    sums = trainer.eval_step(params, sharding.put_batch(pipeline.pad_batch(batch, local),
                                                        trainer.mesh))
    totals = sums if totals is None else _added(totals, sums)
  if totals is None:
    raise _no_batches()
  return trainer.task.summarize(jax.device_get(totals))


def _template(trainer: trainer_lib.Trainer, local: int, length: int, scored: bool = False):
  """This process's share of an evaluation batch of `length`, as zeros: what short batches are
  padded with (and the shapes the passes are compiled for ahead)."""
  template = trainer.task.feature_shapes(local, length)
  if scored:
    template['scored'] = np.zeros((local, length), np.int32)
  return template


def _no_batches() -> errors.ConfigError:
  return errors.ConfigError('the evaluation split produced no batches. Fix: check '
                            'config.data.splits and that the split has text.')


def validation(trainer: trainer_lib.Trainer, params, source, tokenizer) -> dict:
  """What the training loop logs on the validation split `source`: the task's metrics over up
  to config.train.eval_batches batches and, for a task that `decodes`, its BLEU and chrF on
  config.eval.bleu_sentences decoded sentences. A mixture's: each source's, and their mean
  weighted by the mixture's weights (roformer/data/mixture.py `weighted`) over the sources
  scored on every token, as training counts them (not passkey rows in text: see `scorer`)."""
  if isinstance(source, mixture.Mixture):
    return mixture.weighted(
        {name: _validation(trainer, params, member, tokenizer, source.config_for(
            trainer.config, name)) for name, member in source.members.items()}, source.weights,
        apart=frozenset(name for name, member in source.members.items()
                        if scored_on_answers(member)))
  return _validation(trainer, params, source, tokenizer, trainer.config)


def group_validation(trainer: trainer_lib.Trainer, group, sources: list, tokenizers: list):
  """`validation` of every member of a vmapped group (`members.Members`), member i's on
  sources[i] read with tokenizers[i], in one vmapped launch per batch for the whole group (and
  one to add it to the totals) and one fetch: each member's metrics are those `validation`
  gives its parameters, to float rounding. On a GPU that several processes share, each launch
  and fetch waits its turn, and a member at a time made the group's validation a quarter of
  its training time (docs/performance.md). None where the group is stepped one by one, the
  validation is not one source's token sums (a mixture, a task that decodes or scores per
  example, passkey rows in text) or the members' splits differ in length: then `validation`
  per member."""
  config = trainer.config
  if (not group.vmapped or trainer.task.decodes or trainer.task.per_example
      or any(isinstance(s, mixture.Mixture) or scored_on_answers(s) for s in sources)):
    return None
  local = config.eval.batch_size // jax.process_count()
  template = _template(trainer, local, config.data.seq_len)
  streams = [_eval_batches(_validation_batches(trainer, source, tokenizer, config),
                           config.train.eval_batches, template)
             for source, tokenizer in zip(sources, tokenizers)]
  totals = None
  for each in itertools.zip_longest(*streams):  # One batch of each member at a time.
    if any(batch is None for batch in each):
      return None  # Splits of different lengths: member by member instead.
    sums = group.eval_sums([pipeline.pad_batch(batch, local) for batch in each])
    totals = sums if totals is None else _added(totals, sums)
  if totals is None:
    raise _no_batches()
  totals = jax.device_get(totals)
  return [trainer.task.summarize(jax.tree.map(lambda x, i=i: x[i], totals))
          for i in range(len(sources))]


def scored_on_answers(source) -> bool:
  """Whether `source` is scored on its answers only (passkey rows in a corpus's text), not on
  every token as training counts it."""
  return isinstance(source, passkey_text.Split)


def scorer(trainer: trainer_lib.Trainer, source, config) -> trainer_lib.Trainer:
  """The trainer whose task scores `source` (read with `config`): the run's own, or for passkey
  rows in a corpus's text (a mixture's source, roformer/data/passkey_text.py) one of the same
  model whose task scores the answer as the synthetic passkey task does. Kept with `trainer`,
  so that its programs compile once."""
  if not scored_on_answers(source):
    return trainer
  kept = trainer.scorers
  if config.data.name not in kept:
    answers = ml_collections.ConfigDict(trainer.config.to_dict())
    answers.data = ml_collections.ConfigDict(config.data.to_dict())
    kept[config.data.name] = trainer_lib.Trainer(answers, trainer.mesh)
  return kept[config.data.name]


def _validation(trainer: trainer_lib.Trainer, params, source, tokenizer, config) -> dict:
  trainer = scorer(trainer, source, config)
  batches = _validation_batches(trainer, source, tokenizer, config)
  result = evaluate(trainer, params, batches, batch_size=config.eval.batch_size,
                    max_batches=config.train.eval_batches)
  if trainer.task.decodes:
    scores, _, _ = translation_scores(trainer, params, source, tokenizer,
                                      limit=config.eval.bleu_sentences)
    result.update(bleu=scores['bleu'], chrf=scores['chrf'], direction=scores['direction'])
  return result


def _validation_batches(trainer: trainer_lib.Trainer, source, tokenizer, config):
  """The batches validation reads from `source` (config.eval.batch_size rows each)."""
  return trainer.task.batches(config, source, tokenizer, train=False,
                              batch_size=config.eval.batch_size)


def evaluate_examples(trainer: trainer_lib.Trainer, params, dataset, template: dict,
                      max_batches: int = -1):
  """Loss and the config's metrics (config.eval.metrics: accuracy, f1, mcc, pearson,
  spearman) over every example of a classification or regression dataset."""
  local = next(iter(template.values())).shape[0]
  predictions, losses, labels, weights = [], [], [], []
  for batch in _eval_batches(dataset, max_batches, template):
    (prediction, loss), label, weight = jax.device_get(trainer.predict_step(
        params, sharding.put_batch(pipeline.pad_batch(batch, local), trainer.mesh)))
    predictions.append(prediction)
    losses.append(loss)
    labels.append(label)
    weights.append(weight)
  if not predictions:
    raise errors.ConfigError('the evaluation split produced no examples. Fix: check '
                             'config.data.splits.')
  keep = np.concatenate(weights) > 0
  labels = np.concatenate(labels)[keep]
  # The per-example losses and predictions that training sums (tasks.Classification.scored).
  result = {'loss': float(np.mean(np.concatenate(losses)[keep], dtype=np.float64)),
            'examples': float(len(labels))}
  result.update(metrics_lib.classification_report(trainer.config.eval.metrics, labels,
                                                  np.concatenate(predictions)[keep]))
  return result


def format_metrics(result: dict) -> str:
  names = {'loss': 'loss %.4f', 'perplexity': 'perplexity %.2f', 'accuracy': 'acc %.3f',
           'bleu': 'BLEU %.2f', 'f1': 'F1 %.3f', 'mcc': 'MCC %.3f', 'pearson': 'Pearson %.3f',
           'spearman': 'Spearman %.3f', 'sequence_accuracy': 'rows right %.3f'}
  return ' | '.join(fmt % result[k] for k, fmt in names.items() if k in result)


def unigram_baseline(tokenizer, train_source, eval_source, text_key, max_docs=20000) -> float:
  """Validation cross-entropy of a context-free unigram model fitted on the train split."""
  _, eos = vocabularies.framing(tokenizer)  # The id each document ends with (none or its own).

  def counts(source):
    c = np.zeros(tokenizer.vocab_size, np.float64)
    for i in range(min(len(source), max_docs)):
      ids = tokens_lib.document_ids(source[i], tokenizer, text_key)
      c += np.bincount(np.append(ids, eos).astype(np.int64), minlength=tokenizer.vocab_size)
    return c
  return metrics_lib.unigram_cross_entropy(counts(train_source), counts(eval_source))


def evaluate_workdir(config: ml_collections.ConfigDict, workdir: str,
                     step: int | str | None = None, splits=('validation', 'test')) -> dict:
  """Restores a checkpoint of `workdir` and evaluates loss/perplexity on `splits` at every
  length in config.eval.length_multipliers x config.data.seq_len. Every check runs first, in
  roformer/resolve.py."""
  return evaluate_resolved(resolve.for_evaluation(config, workdir, step, splits))


def evaluate_resolved(run: resolve.Run, results_name: str = 'eval_results.json') -> dict:
  """evaluate_workdir's results for the evaluation `run` that resolve.for_evaluation checked:
  its model built and its checkpoint restored. `results_name`: the file they go to (eval.py's
  --out), which names the translations beside them."""
  trainer = trainer_lib.Trainer(run.config, run.mesh)
  return evaluate_run(run, trainer, trainer_lib.restore_params(trainer, run.workdir, run.step),
                      results_name)


def results_header(run: resolve.Run) -> dict:
  """What an evaluation's results say besides its scores (every key but 'splits'), known
  before anything is computed: the checkpoint, the protocol, the scheme and its options, the
  training length, the overrides, the documents of the user's own files scored, and what the
  evaluation runs on (provenance.evaluation)."""
  config, saved = run.config, run.saved
  scheme = positions_lib.model_scheme(config.model)
  results = {'step': run.step,
             **({} if tasks.per_example(config) else {'protocol': _protocol(config)}),
             'position': scheme.kind, **scheme.results_fields(config.model.position),
             'train_seq_len': saved.data.seq_len,  # As trained, whatever the overrides.
             'overrides': saved_config.differences(saved, config)}
  # Your own files' documents in each split scored: the same config can read other text.
  data = {split: content for split in run.splits
          if (content := pipeline.split_content(config.data, split))}
  if data:
    results['data'] = data
  if run.train_data_changed:
    results['train_data_changed'] = list(run.train_data_changed)
  if config.eval.scale_rope_to_length and not tasks.per_example(config):
    factor, least, original = positions_lib.length_scaling(config.model, saved.data.seq_len)
    rule = ('length / train_seq_len' if (least, original) == (1, saved.data.seq_len)
            else f'max({least:g}, length / {original})')
    results['length_factor'] = f'model.position.{factor} = {rule}'
  # What this evaluation ran on (eval.py adds the entries of earlier evaluations it merges).
  lengths = ([] if tasks.per_example(config)
             else [config.data.seq_len * m for m in config.eval.length_multipliers])
  results['environments'] = [provenance.evaluation(run.splits, lengths)]
  return results


# results_header's keys that an evaluation's results hold after its scores ('splits').
_AFTER_SCORES = ('data', 'train_data_changed', 'length_factor', 'environments')


def evaluate_run(run: resolve.Run, trainer: trainer_lib.Trainer, params,
                 results_name: str = 'eval_results.json') -> dict:
  """What evaluate_workdir returns, for the resolved evaluation `run` with `params` (its
  checkpoint's) and `trainer` (built for its model: a training process passes its own, whose
  evaluation programs are compiled already). A translation decodes each split: the test split's
  first config.eval.bleu_sentences_test pairs (all by default), another's first
  config.eval.bleu_sentences (the ones training scores); each goes to
  translations/SPLIT-stepN[.NAME].{hyp,ref}.txt, NAME from `results_name`
  (eval_results.NAME.json), so that a variant's evaluation keeps the plain one's files."""
  config, workdir, mesh, sources, tokenizer = (run.config, run.workdir, run.mesh, run.sources,
                                               run.tokenizer)
  step, saved, splits = run.step, run.saved, run.splits
  classifying = tasks.per_example(config)
  protocol = _protocol(config)
  header = results_header(run)
  results = {**{k: v for k, v in header.items() if k not in _AFTER_SCORES}, 'splits': {},
             **{k: header[k] for k in _AFTER_SCORES if k in header}}
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
  # eval.scale_rope_to_length: the scheme's context-extension factor (an option under
  # model.position) set to each length over the one it stretches, recorded in each row.
  factor, least, original = (positions_lib.length_scaling(config.model, saved.data.seq_len)
                             if config.eval.scale_rope_to_length else (None, 1.0, 1))

  def at_length(mult):  # (trainer, config, row fields) for one length.
    if not factor:
      return trainer, config, {}
    scaled = ml_collections.ConfigDict(config.to_dict())
    value = max(least, config.data.seq_len * mult / original)
    positions_lib.set_option(scaled.model.position, factor, value)
    return trainer_lib.Trainer(scaled, mesh), scaled, {factor.replace('.', '_'): value}
  per_length = {mult: at_length(mult) for mult in config.eval.length_multipliers}
  for split, source, split_config in _each_source(config, splits, sources):
    rows = []
    for mult in config.eval.length_multipliers:
      length = config.data.seq_len * mult
      length_trainer, length_config, scaled = per_length[mult]
      # Of the length trained at (the same as `mult` unless data.seq_len is overridden here).
      times = length / saved.data.seq_len
      row = {'length': length, 'multiplier': int(times) if times == int(times) else times,
             **scaled}
      try:
        positions_lib.validate(length_config.model, length,
                               causal=models.is_causal(config.model))
      except errors.ConfigError as e:  # E.g. a learned table shorter than this length.
        # Why, without the fix for a new run: the trained model's sizes cannot change here.
        rows.append({**row, 'skipped': errors.without_fix(e)})
        continue
      length_trainer = scorer(length_trainer, source, split_config)
      stride = {}
      rows_of_a_task = isinstance(source, passkey_text.Split)  # Whole rows, no windows.
      if protocol == 'sliding' and not rows_of_a_task:
        stride = {'stride': config.eval.stride or length // 2}
        row.update(stride)
      batches = length_trainer.task.batches(split_config, source, tokenizer, train=False,
                                            seq_len=length, batch_size=config.eval.batch_size,
                                            **stride)
      rows.append({**row, **evaluate(length_trainer, params, batches,
                                     batch_size=config.eval.batch_size,
                                     max_batches=config.eval.max_batches, seq_len=length,
                                     scored=bool(stride))})
    results['splits'][split] = {'lengths': rows}
    if trainer.task.decodes:  # The test split whole by default; the others as training does.
      limit = (config.eval.bleu_sentences_test if split.split('/')[0] == 'test'
               else config.eval.bleu_sentences)
      scores, hyps, refs = translation_scores(trainer, params, source, tokenizer, limit=limit)
      out_dir = os.path.join(workdir, 'translations')
      os.makedirs(out_dir, exist_ok=True)
      stem = results_name.removesuffix('.json')  # eval_results[.NAME], or eval_OTHER.
      variant = ('' if stem == 'eval_results' else '.' + stem.removeprefix('eval_results.'))
      named = os.path.join('translations', f'{split}-step{step}{variant}.hyp.txt')
      for name, lines in ((named, hyps), (metrics_lib.references_of(named), refs)):
        files.write_text_atomic(os.path.join(workdir, name), ''.join(
            line.replace('\r', ' ').replace('\n', ' ') + '\n' for line in lines))
      results['splits'][split].update(scores)
      results['splits'][split]['hypotheses'] = named
    elif not synthetic.task_name(split_config.data):
      results['splits'][split]['unigram_loss'] = unigram_baseline(
          tokenizer, _source_of(sources['train'], split), source, split_config.data.text_key)
  return results


def _protocol(config) -> str:
  """How a text causal LM's longer lengths are read (eval.protocol); windows for the rest."""
  return config.eval.protocol if config_schema.TEXT_CAUSAL_LM.reads(config) else 'windows'


def programs_ahead(trainer: trainer_lib.Trainer, group, sources: list, final: bool) -> dict:
  """The evaluation passes that a training run of `trainer` (its members `group`, validated on
  `sources`) will call, as name -> (jitted pass, abstract arguments), for
  roformer/compile_ahead.py: validation's (the group's vmapped pass or the run's own) and, with
  `final`, the final evaluation's at each length of eval.length_multipliers. Passes that depend
  on more than shapes are left to compile when they run: a mixture's sources, passkey rows in
  text, translation's decoding, and lengths whose model eval.scale_rope_to_length rescales."""
  config = trainer.config
  if trainer.task.decodes or any(isinstance(s, mixture.Mixture) or scored_on_answers(s)
                                 for s in sources):
    return {}
  local = config.eval.batch_size // jax.process_count()
  params = trainer.abstract_state['params']
  step = trainer.predict_step if trainer.task.per_example else trainer.eval_step
  batch = lambda length, scored=False: compile_ahead.batch(
      _template(trainer, local, length, scored), sharding.batch_sharding(trainer.mesh))
  out = {}
  if group.vmapped and not trainer.task.per_example:  # group_validation's one launch.
    out['validation'] = group.eval_program(_template(trainer, local, config.data.seq_len))
  else:
    out['validation'] = (step, (params, batch(config.data.seq_len)))
  scheme = positions_lib.model_scheme(config.model)
  if (final and not trainer.task.per_example
      and not (config.eval.scale_rope_to_length and scheme.length_factor(config.model.position))):
    for mult in config.eval.length_multipliers:
      length = config.data.seq_len * mult
      out[f'evaluation at {length}'] = (step, (params, batch(length,
                                                             _protocol(config) == 'sliding')))
  return out


def _each_source(config, splits, sources):
  """(name in the results, source, the config that reads it) for each split: a mixture's
  sources each on their own, as `validation/NAME` (roformer/data/mixture.py)."""
  for split in splits:
    source = sources[split]
    if not isinstance(source, mixture.Mixture):
      yield split, source, config
      continue
    for name, member in source.members.items():
      yield mixture.source_split(split, name), member, source.config_for(config, name)


def _source_of(train, split_name: str):
  """The train split that goes with `split_name` ('validation/NAME': NAME's of a mixture)."""
  if isinstance(train, mixture.Mixture):
    return train.members[split_name.split('/', 1)[1]]
  return train


def format_results(results: dict) -> str:
  remap, scaling = results.get('rope_remap'), results.get('rope_scaling')
  factor = (results['length_factor'].split(' = ', 1)[1] if 'length_factor' in results
            else scaling and (f"{scaling['factor']:g}" if isinstance(scaling['factor'], float)
                              else scaling['factor']))
  lines = [f"step {results['step']}, position={results['position']}, trained at length "
           f"{results['train_seq_len']}" + ('' if not remap else ', distances remapped by ' +
                                            ', '.join(f'{k}={v}' for k, v in remap.items()))
           + (f", RoPE scaling {scaling['kind']} at factor {factor}" if scaling else '')
           + (', sliding windows (each token scored once, stride per length below)'
              if results.get('protocol') == 'sliding' else '')]
  if all('lengths' not in r for r in results['splits'].values()):  # Classification.
    for split, r in results['splits'].items():
      lines.append(f"{split:<22} " + (r['skipped'] if 'skipped' in r else
                                      f"{format_metrics(r)} | {r['examples']:.0f} examples"))
    return '\n'.join(lines)
  w = max([11] + [len(split) for split in results['splits']])  # A mixture's 'validation/NAME'.
  lines.append(f"{'split':<{w}} {'length':>7} {'loss':>8} {'ppl':>10} {'acc':>7} {'tokens':>9}")
  for split, r in results['splits'].items():
    for row in r['lengths']:
      if 'skipped' in row:
        lines.append(f"{split:<{w}} {row['length']:>7}   skipped: {row['skipped']}")
      else:
        lines.append(f"{split:<{w}} {row['length']:>7} {row['loss']:>8.4f} "
                     f"{row['perplexity']:>10.2f} {row['accuracy']:>7.3f} {row['tokens']:>9.0f}"
                     + (f"  rows right {row['sequence_accuracy']:.3f}"
                        if 'sequence_accuracy' in row else '')
                     + (f"  stride {row['stride']}" if 'stride' in row else ''))
    if 'unigram_loss' in r:
      lines.append(f"{split:<{w}} {'unigram':>7} {r['unigram_loss']:>8.4f} "
                   f"{metrics_lib.perplexity(r['unigram_loss']):>10.2f}")
    if 'bleu' in r:
      lines.append(f"{split:<{w}} {r['direction']}: BLEU {r['bleu']:.2f} (copying the source: "
                   f"{r['copy_source_bleu']:.2f}), chrF {r['chrf']:.2f} on {r['sentences']} "
                   f"sentences  [{r['bleu_signature']}]"
                   + (f"; hypotheses in {r['hypotheses']}" if 'hypotheses' in r else ''))
  return '\n'.join(lines)
