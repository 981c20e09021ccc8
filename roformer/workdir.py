"""A run's directory: what it holds (config.json, the tokenizer, metrics) and the checks made
before a run writes into it or resumes from it."""

import logging
import math
import os
import tempfile

import ml_collections

from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import files
from roformer import metrics as metrics_lib
from roformer import saved_config
from roformer import tasks
from roformer.data import pipeline
from roformer.data import synthetic
from roformer.data import vocabularies

log = logging.getLogger('roformer')

TOKENIZER_FILE = 'tokenizer.model'
# Written by converters of foreign weights: the ids belong to a tokenizer this project lacks.
FOREIGN_VOCABULARY_FILE = 'FOREIGN_VOCABULARY'


def _check_own_vocabulary(*dirs) -> None:
  """Refuses runs whose ids belong to a tokenizer this project lacks (converted weights)."""
  for d in dirs:
    if d and os.path.exists(os.path.join(d, FOREIGN_VOCABULARY_FILE)) and (
        vocabularies.kept(d)[0] is None):
      raise errors.ConfigError(
          f'{d} holds weights converted from another library whose vocabulary is not a '
          'tokenizer of this project, so its data pipeline cannot feed it. Fix: tokenize with '
          'that library and call the model directly (see scripts/convert_hf_roformer.py).')


def _set_vocab_size(config: ml_collections.ConfigDict, tokenizer) -> None:
  with config.unlocked():
    config.model.vocab_size = tokenizer.vocab_size + tasks.for_config(config).extra_tokens


def setup_data(config: ml_collections.ConfigDict, splits=pipeline.SPLITS, workdir: str = ''):
  """Opens the dataset's splits and the tokenizer, and sets config.model.vocab_size from it.

  The tokenizer is the workdir's own copy if it has one (a fine-tuning run keeps its
  pretraining's), else that of the run in config.init_from, else the dataset's (trained on
  its train split on first use)."""
  _check_own_vocabulary(workdir, config.get('init_from'))
  path, cls = vocabularies.kept(workdir)
  if workdir and path is None:
    _refuse_lost_tokenizer(config, workdir)
  if path is None:
    path, cls = vocabularies.kept(config.get('init_from'))
  if path is None and not config.get('init_from'):
    vocabularies.check_given(config.data.tokenizer)  # Before any documents are read.
  sources = pipeline.load_sources(config.data, splits=splits)
  if path:
    tokenizer = cls(path, _restore_tokenizer_fix(config, path))
  elif config.get('init_from'):
    saved = saved_config.load(config.init_from)  # Its dataset's tokenizer, rebuilt if needed.
    tokenizer = pipeline.load_tokenizer(saved.data, None)  # Its data opened if it must train.
  else:
    tokenizer = pipeline.load_tokenizer(
        config.data, sources['train'] if 'train' in sources else next(iter(sources.values())))
  _set_vocab_size(config, tokenizer)
  if config.data.token_cache:
    sources = pipeline.token_cached(config.data, sources, tokenizer)
  return sources, tokenizer


def open_tokenizer(config: ml_collections.ConfigDict, workdir: str):
  """The tokenizer a trained run keeps in its workdir (see keep_tokenizer), without opening
  the dataset: a workdir copied to another machine still decodes. Sets
  config.model.vocab_size from it, as setup_data does."""
  _check_own_vocabulary(workdir)
  path, cls = vocabularies.kept(workdir)
  if path:
    tokenizer = cls(path, _restore_tokenizer_fix(config, path))
  else:
    _refuse_lost_tokenizer(config, workdir)
    if not (synthetic.task_name(config.data) or config.data.tokenizer == vocabularies.BYTES):
      raise errors.ConfigError(
          f'{workdir} has no tokenizer file (one of {", ".join(vocabularies.WORKDIR_FILES)}; '
          'train.py copies it there when a run starts). Fix: point --workdir at a trained run.')
    tokenizer = pipeline.load_tokenizer(config.data, None)  # Follows from the config.
  _set_vocab_size(config, tokenizer)
  return tokenizer


def _refuse_lost_tokenizer(config, workdir: str) -> None:
  """A trained run (a checkpoint there) without the copy of its tokenizer that train.py made
  when it started: its ids belong to exactly that tokenizer, so it is refused with the copy to
  put back, rather than read with whatever the dataset's cache holds now. A synthetic task's
  words and bytes follow from the config: nothing is lost."""
  if (synthetic.task_name(config.data) or config.data.tokenizer == vocabularies.BYTES
      or not checkpoint_lib.steps_on_disk(
      os.path.join(workdir, 'checkpoints'))):
    return
  path = os.path.join(workdir, vocabularies.workdir_file(config.data.tokenizer))
  raise errors.ConfigError(f'{path} is missing: the run keeps there the tokenizer its '
                           f'checkpoints were trained with. Fix: '
                           f'{_restore_tokenizer_fix(config, path)}.')


def _restore_tokenizer_fix(config, path: str) -> str:
  """How to put back a run's damaged tokenizer.model: its checkpoints' ids belong to exactly
  the tokenizer it was trained with, which train.py copied from the dataset's cache, or from
  the run it started from (config.init_from), whose tokenizer it took."""
  source_run = config.get('init_from')
  if source_run:
    kept, _ = vocabularies.kept(source_run)
    return (f"copy it back from the run it started from (cp '{kept}' '{path}')" if kept else
            f'copy it back from a copy of {source_run}, the run it started from, whose '
            'tokenizer it took')
  try:
    name = config.data.tokenizer
    cached = (pipeline.tokenizer_path(config.data) if vocabularies.kind(name) ==
              vocabularies.TRAINED else os.path.abspath(os.path.expanduser(name)))
  except Exception:  # pylint: disable=broad-except  # Only a hint: any failure leaves it out.
    cached = None
  source = (f"copy the one it was made from back (cp '{cached}' '{path}')"
            if cached is not None and os.path.exists(cached) else
            f"copy it back from a copy of the run (the dataset's cache keeps it as "
            f"{cached or 'DATA_DIR/tokenizers/...'})")
  return (f'{source}; the checkpoints need exactly the tokenizer the run was trained with, '
          'so it is not trained again')


def keep_tokenizer(tokenizer, workdir: str, resumed: bool) -> None:
  """Copies the tokenizer into the workdir: evaluation and fine-tuning need exactly it
  (roformer/data/vocabularies.py `keep`)."""
  vocabularies.keep(tokenizer, workdir, resumed)


def probe_writable(directory: str) -> None:
  """Creates and removes a file in `directory` (raises OSError if it cannot)."""
  with tempfile.NamedTemporaryFile(dir=directory, prefix='.write-probe-'):
    pass


def check_workdir(config, workdir: str, ckpt_step: int | None) -> None:
  """Before a run starts: `workdir` is a directory (or can be made) that can be written; if
  it holds a checkpoint, of the same run (what saved_config fixes on resume unchanged); if it
  holds a run's records without one, none that training would replace or mix with another's."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise errors.ConfigError(f'--workdir={workdir!r} is a file. Fix: choose a directory path.')
  existing = workdir
  while not os.path.exists(existing):  # The directory it will be created in.
    existing = os.path.dirname(existing)
  try:
    probe_writable(existing)
  except OSError as e:
    raise errors.ConfigError(f'--workdir={workdir!r} cannot be written ({existing}: '
                             f'{e.strerror or e}). Fix: choose a writable directory.') from None
  if ckpt_step is None:
    _check_records_without_checkpoint(config, workdir)
    return
  if os.path.exists(os.path.join(workdir, 'config.json')):
    _refuse_another_run(config, workdir, f'a checkpoint (step {ckpt_step}) of a different run',
                        'use a new --workdir, or the same config to resume')


def check_finished_records(config, workdir: str) -> None:
  """A finished run whose checkpoints were deleted (its records kept, sweeps skip it): refuses
  `config` where it is not that run's config."""
  _refuse_another_run(config, workdir, "the records of a finished run (its checkpoints deleted)",
                      "give the point the config it was trained with, or move the workdir aside "
                      "to train it again")


def _refuse_another_run(config, workdir: str, holds: str, fix: str) -> None:
  """Refuses `config` where it differs from the run saved in `workdir` (config.json) in what
  a resume keeps (saved_config's RESUME), naming what the workdir `holds` of that run."""
  diffs = saved_config.changed(saved_config.load(workdir), config, saved_config.RESUME)
  if diffs:
    raise errors.ConfigError(f'--workdir={workdir!r} holds {holds}; changed fields (saved vs '
                             f'now): {"; ".join(diffs)}. Fix: {fix}.')


def evaluations(workdir: str) -> list[str]:
  """The names of the evaluation files in `workdir`, sorted."""
  names = os.listdir(workdir) if os.path.isdir(workdir) else []
  return sorted(n for n in names if files.EVALUATION_FILE.fullmatch(n))


def _check_records_without_checkpoint(config, workdir: str) -> None:
  """A workdir with a run's records but no checkpoint: an attempt stopped before its first
  save starts again there, but a finished run's evaluations (its checkpoints deleted, or its
  kept records) would no longer describe the model there, and another config's metrics would
  be mixed into its log."""
  found = evaluations(workdir)
  if found:
    raise errors.ConfigError(
        f'--workdir={workdir!r} holds the evaluations of a finished run ({", ".join(found)}) '
        'but no checkpoint to resume: training there would leave them describing another '
        'model. Fix: use a new --workdir (or move this one aside).')
  metrics = os.path.join(workdir, 'metrics.jsonl')
  if (os.path.exists(metrics) and os.path.getsize(metrics) > 0 and
      os.path.exists(os.path.join(workdir, 'config.json'))):
    _refuse_another_run(config, workdir, 'the metrics of another run (no checkpoint)',
                        'use a new --workdir (or move this one aside)')


TRAIN_DATA_FILE = files.TRAIN_DATA_FILE


def record_train_data(config, workdir: str) -> None:
  """Writes what the run's train split holds (`pipeline.split_content`: your own files' text)
  for a resumed run to check; nothing for data that the config fixes."""
  content = pipeline.split_content(config.data, 'train')
  if content:
    files.write_json_atomic(os.path.join(workdir, TRAIN_DATA_FILE), content)


def train_data_changes(config, workdir: str) -> list[str]:
  """How the train documents that config.data reads now differ from those the run in
  `workdir` recorded ('FIELD: saved vs now'); none where it recorded nothing (data fixed by
  its config, or a run of an earlier version)."""
  path = os.path.join(workdir, TRAIN_DATA_FILE)
  if not os.path.exists(path):
    return []
  saved = files.read_json(path, f'delete it (rm {path}): it records only what the run was '
                          'trained on, which is then no longer checked')
  now = pipeline.split_content(config.data, 'train')
  named = lambda content: {name or 'config.data.files': text for name, text in content.items()}
  return saved_config.differences(named(saved), named(now))


def check_train_data(config, workdir: str) -> None:
  """A resumed run reads the documents it started on: its saved data position counts batches
  of that stream, so files changed since (other text, not merely touched or copied) are
  refused."""
  changed = train_data_changes(config, workdir)
  if changed:
    raise errors.ConfigError(
        f'--workdir={workdir!r} was trained on other documents than the files hold now '
        f'({"; ".join(changed)}; saved vs now), so its saved data position would count batches '
        'of another stream. Fix: put the files back as they were to resume, or train on the '
        f'new files in a new --workdir (--config.init_from={workdir} continues its weights).')


def save_config(config, workdir, resumed_from):
  """Writes config.json for a new run; a resumed run keeps the original and records what
  changed (schedule fields, logging, ...) as config.resume-STEP.json."""
  if resumed_from is None or not os.path.exists(os.path.join(workdir, 'config.json')):
    saved_config.save(config, workdir)
    return
  changed = saved_config.differences(saved_config.load(workdir), config)
  if changed:
    log.warning('Resuming with changed settings (saved vs now): %s', '; '.join(changed))
  # Also when the settings went back to config.json's: the newest file is what the run is now.
  if changed or saved_config.differences(saved_config.load(workdir, current=True), config):
    saved_config.save(config, workdir, files.resume_config_name(resumed_from))


def skipped_so_far(workdir: str) -> int:
  """Non-finite steps skipped before this attempt (config.train.on_nonfinite='skip')."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return 0
  return int(max([r.get('skipped_steps', 0) for r in metrics_lib.read_jsonl(path)], default=0))


def best_so_far(workdir: str, metric: str) -> float:
  """The best (largest) value of validation `metric` logged so far (-inf if none): a resumed
  run keeps its best checkpoint only when it beats this."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return -math.inf
  return max([r[metric] for r in metrics_lib.read_jsonl(path)
              if r.get('split') == 'validation' and metric in r], default=-math.inf)
