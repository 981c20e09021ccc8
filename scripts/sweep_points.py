"""A sweep's points as their workdirs' files say: read, checked, one dict per point.

Each point's config.json, the newest config.resume-STEP.json, metrics.jsonl, its
eval_results*.json and what each start ran on (environment.jsonl) (`READS`: what
scripts/keep_records.py keeps, so that kept records read as the workdirs did). A file that is
damaged or written by something else is one DamagedFileError naming it and the field.
scripts/report.py makes its tables and plots from these dicts, and
scripts/docs_from_records.py the docs' tables.
"""

import functools
import glob
import json
import os
import re
import statistics
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import metrics as metrics_lib  # pylint: disable=wrong-import-position
from roformer import positions as positions_lib  # pylint: disable=wrong-import-position
from roformer import provenance  # pylint: disable=wrong-import-position
from roformer import sweeps  # pylint: disable=wrong-import-position

SYNTHETIC = 'synthetic/'
# What a synthetic point's accuracy is measured in -> the evaluation metric holding it.
SYNTHETIC_MEASURES = {'rows': 'sequence_accuracy', 'tokens': 'accuracy'}
EVAL_RESULTS = 'eval_results*.json'  # eval_results.json and each eval_results.NAME.json.
# Every file of a point's workdir that read_point reads (scripts/keep_records.py keeps these).
READS = ('config.json', files.resume_config_name('*'), 'metrics.jsonl', EVAL_RESULTS,
         provenance.ENVIRONMENT_FILE)
# Point fields that group seeds into one line rather than naming a variant of a scheme.
_GROUPING = ('model.position.kind', 'seed', 'data.name', 'data.seq_len', 'init_from')


def _sweep_record(root: str) -> tuple[dict, dict]:
  """(each point's own overrides, each labelled point's label) from WORKDIR/sweep.json."""
  path = os.path.join(root, 'sweep.json')
  if not os.path.exists(path):
    return {}, {}
  record = files.read_json(path)
  return record.get('points', {}), record.get('labels', {})


def workdirs_of(root: str) -> list[str]:
  """The runs under a sweep's directory or its kept records (each a */config.json)."""
  return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, '*', 'config.json')))


def read_points(root: str, workdirs: list[str], on_damage=None) -> list[dict]:
  """`read_point` of each of `workdirs` with its sweep's overrides and label (root/sweep.json).
  A damaged point raises its DamagedFileError, or, with `on_damage(workdir, error)`, is handed
  to it and listed as damaged."""
  overrides, labels = _sweep_record(root)
  points = []
  for w in workdirs:
    try:
      points.append(read_point(w, overrides.get(os.path.basename(w), {}),
                               labels.get(os.path.basename(w), '')))
    except errors.ConfigError as e:
      if on_damage is None:
        raise
      on_damage(w, e)
      points.append(damaged_point(w))
  return points


def read_point(workdir: str, overrides: dict, label: str = '') -> dict:
  """What a point's files say: its scheme (its sweep's `label`, else its position kind with
  the options its overrides set), seed, curves and evaluations (each evaluation's rows keyed
  by evaluation length)."""
  from roformer import saved_config  # pylint: disable=g-import-not-at-top  # JAX: slow to import.
  config = saved_config.load(workdir).to_dict()  # A damaged config.json: one DamagedFileError.
  records = []
  if os.path.exists(os.path.join(workdir, 'metrics.jsonl')):
    records = checked_metrics(os.path.join(workdir, 'metrics.jsonl'))
  train = [r for r in records if r['split'] == 'train']
  validation = {r['step']: r['loss'] for r in records if r['split'] == 'validation'}
  answered = {r['step']: r['sequence_accuracy'] for r in records
              if r['split'] == 'validation' and 'sequence_accuracy' in r}
  evals, retrieval, evaluated_on = {}, {}, []
  for path in sorted(glob.glob(os.path.join(workdir, EVAL_RESULTS))):
    name = os.path.basename(path)[len('eval_results'):-len('.json')].lstrip('.')
    results = files.read_json(path)
    text, answers = _text_and_answers(checked_results(path, results))
    evaluated_on += evaluation_environments(path, results)
    evals[name] = _by_length(text)
    if answers:
      retrieval[name] = _by_length(answers)
  kept = [k for k in overrides
          if k not in _GROUPING and not k.startswith(('train.', 'eval.', 'data.'))]
  short = sweeps.short_names(kept)
  options = {short[k]: overrides[k] for k in kept}
  if config.get('init_from'):
    # The run it continues, without its seed: the continuations of each seed's run are seeds
    # of one line.
    options['continued from'] = re.sub(r',?seed=\d+', '',
                                       os.path.basename(config['init_from'].rstrip('/')))
  options.update(positions_lib.training.labels(config['train']))  # Training positions, as options.
  rates = [r['steps_per_sec'] for r in train if 'steps_per_sec' in r]
  steps = files.current_config(workdir)['train']['steps']  # With resumes' changes.
  done = max((r['step'] for r in records), default=0)
  # Its last checkpoint; kept records have none, and their metrics say how far it trained.
  trained_to_end = (sweeps.trained(workdir, steps)
                    if os.path.isdir(os.path.join(workdir, 'checkpoints')) else done >= steps)
  plain = evals.get('', {})
  return {
      'name': os.path.basename(workdir),
      'scheme': label or config['model']['position']['kind'],
      'options': '' if label else ', '.join(f'{k}={sweeps.format_value(v)}'
                                            for k, v in options.items()),
      'seed': config.get('seed', 0),
      'task': config['data']['name'],
      'seq_len': config['data']['seq_len'],
      'steps': steps,
      # The plain evaluation of the last step exists only once that step's checkpoint did, so
      # kept records (scripts/keep_records.py: no checkpoints) read as done too.
      'status': ('done' if sweeps.evaluated(workdir, '', steps)
                 else f'trained, not evaluated ({done}/{steps} steps)' if trained_to_end
                 else f'incomplete ({done}/{steps} steps)'),
      'train_loss': train[-1]['loss'] if train else None,
      'val_curve': validation,
      'answered_curve': answered,  # Synthetic tasks: rows answered exactly in training.
      'val_loss': (plain[config['data']['seq_len']]['loss'] if config['data']['seq_len'] in plain
                   else validation[max(validation)] if validation else None),
      'steps_per_sec': statistics.median(rates) if rates else None,
      'parameters': _parameters(config),
      'evals': evals,
      'retrieval': retrieval,
      'environments': environments(workdir),
      'evaluation_environments': evaluated_on,
  }


def environments(workdir: str) -> list[dict]:
  """Each start's line of the point's provenance.ENVIRONMENT_FILE ([] for a run trained before
  runs kept one)."""
  path = os.path.join(workdir, provenance.ENVIRONMENT_FILE)
  starts = metrics_lib.read_jsonl(path) if os.path.exists(path) else []
  for number, start in enumerate(starts, 1):
    bad = provenance.malformed(start)
    if bad or not isinstance(start.get('step'), int):
      raise errors.DamagedFileError(
          f'{path}: line {number} lacks its step or holds a non-mapping in {bad or "step"}. '
          'Fix: restore the file, or delete the line.')
  return starts


def evaluation_environments(path: str, results: dict) -> list[dict]:
  """What each evaluation whose scores an eval_results*.json holds ran on (its `environments`,
  roformer/provenance.py: evaluation); one provenance.UNRECORDED entry for a file written
  before evaluations recorded it."""
  if 'environments' not in results:
    return [{provenance.UNRECORDED: True}]
  entries = results['environments']
  fix = ('Fix: run eval.py on the point again (what it ran on is recorded anew), or delete the '
         'file.')
  if not isinstance(entries, list):
    raise errors.DamagedFileError(f'{path}: "environments" is not a list. {fix}')
  for number, entry in enumerate(entries, 1):
    if bad := provenance.malformed(entry):
      raise errors.DamagedFileError(
          f'{path}: "environments" entry {number} holds a non-mapping in {bad}. {fix}')
  return entries


# The fields of an evaluation row that tables and plots read, each a number.
_NUMBERS = ('length', 'loss', 'perplexity', 'accuracy', 'sequence_accuracy', 'tokens', 'rows')


def checked_metrics(path: str) -> list[dict]:
  """metrics.jsonl's records, each with its step, split and numbers checked (a DamagedFileError
  naming the line otherwise)."""
  records = metrics_lib.read_jsonl(path)
  for number, record in enumerate(records, 1):
    bad = [key for key in ('step', 'loss', 'steps_per_sec', 'sequence_accuracy')
           if key in record and (isinstance(record[key], bool)
                                 or not isinstance(record[key], (int, float)))]
    if not isinstance(record.get('split'), str) or not isinstance(record.get('step'), int) or bad:
      raise errors.DamagedFileError(
          f'{path}: record {number} lacks a step and split or holds a non-number in '
          f'{bad or "step"}. Fix: restore the file, or delete the record.')
    if record['split'] in ('train', 'validation') and 'loss' not in record:
      raise errors.DamagedFileError(f'{path}: {record["split"]} record {number} has no loss. '
                                    'Fix: restore the file, or delete the record.')
  return records


def checked_results(path: str, results) -> dict:
  """The splits of `results` (what the eval_results*.json at `path` holds), each row's numbers
  checked: a file damaged or written by something else is one DamagedFileError naming it and
  the field, not a traceback later."""
  splits = results.get('splits') if isinstance(results, dict) else None
  fix = 'run eval.py on the point again (it rewrites the file whole)'
  if not isinstance(splits, dict):
    raise errors.DamagedFileError(f'{path} has no "splits" object. Fix: {fix}.')
  for name, split in splits.items():
    rows = split.get('lengths', []) if isinstance(split, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
      raise errors.DamagedFileError(f'{path}: split {name!r} has no list of rows per length. '
                                    f'Fix: {fix}.')
    for row in rows:
      if 'length' not in row:
        raise errors.DamagedFileError(f'{path}: split {name!r} has a row without its length. '
                                      f'Fix: {fix}.')
      for key in _NUMBERS:
        value = row.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
          raise errors.DamagedFileError(
              f'{path}: split {name!r}, length {row.get("length")!r}: {key}={value!r} is not a '
              f'number. Fix: {fix}.')
  return splits


def damaged_point(workdir: str) -> dict:
  """A point whose files could not be read: listed, in no table or plot."""
  return {'name': os.path.basename(workdir), 'scheme': '-', 'options': '', 'seed': '-',
          'task': '-', 'seq_len': None, 'steps': '-', 'status': 'damaged (see the warning)',
          'damaged': True, 'train_loss': None, 'val_curve': {}, 'answered_curve': {},
          'val_loss': None, 'steps_per_sec': None, 'parameters': None, 'evals': {},
          'retrieval': {}, 'environments': [], 'evaluation_environments': []}


def _by_length(split: dict) -> dict:
  return {row['length']: row for row in split.get('lengths', []) if 'loss' in row}


def _text_and_answers(splits: dict) -> tuple[dict, dict]:
  """(the validation split's results, {}); for a mixture (`validation/NAME` per source), its
  first text source's and its first source scored by answers (passkey rows in text), if any."""
  if 'validation' in splits or not splits:
    return splits.get('validation') or next(iter(splits.values()), {}), {}
  answered = lambda split: any('sequence_accuracy' in r for r in split.get('lengths', []))
  text = [v for _, v in sorted(splits.items()) if not answered(v)]
  answers = [v for _, v in sorted(splits.items()) if answered(v)]
  return (text or answers)[0], answers[0] if answers and text else {}


def _parameters(config: dict):
  """The parameter count of the point's model: counted once per distinct model config (the
  seeds of a point, and the points of a sweep that share a model, build the same one)."""
  return _count_parameters(json.dumps(config['model'], sort_keys=True))


@functools.lru_cache(maxsize=None)
def _count_parameters(model_json: str):
  try:
    import ml_collections  # pylint: disable=g-import-not-at-top
    from roformer import models  # pylint: disable=g-import-not-at-top
    return models.num_parameters(ml_collections.ConfigDict(json.loads(model_json)))
  except Exception:  # pylint: disable=broad-except  # A model this code no longer builds.
    return None


def is_synthetic(point: dict) -> bool:
  return point['task'].startswith(SYNTHETIC)
