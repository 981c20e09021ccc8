"""Keep a sweep's results without its checkpoints, in a directory scripts/report.py reads.

  python scripts/keep_records.py runs/passkey_ext docs/results/passkey_extension/records
  python scripts/report.py docs/results/passkey_extension/records \\
      --out docs/results/passkey_extension/report.md

Copies what the report reads of each point (config.json and its config.resume-STEP.json,
metrics.jsonl, eval_results*.json, environment.jsonl: what each start ran on, and
train_data.json where the run trained on files of its own) into RECORDS/POINT, adds the lines of
the sweep's timings.jsonl (how long each run of the sweep took) that RECORDS/timings.jsonl lacks,
and merges the sweep's sweep.json into RECORDS/sweep.json: the points and labels already there
are kept, and a point kept again is replaced whole, its files and its entry, where that loses
nothing: a kept record of another config, or with more steps trained or evaluations than the new
run's, is refused unless --replace. Where a run lived is not its config: the data cache and the
folder of the run it started from may differ, and so may the globs of its own files where both
runs recorded the documents they held (train_data.json).
Checkpoints, TensorBoard events and the tokenizer stay behind: a kept record is a few tens of
kilobytes where a point's workdir is tens of megabytes. So the parts of one sweep run in
different places or at different times (passkey_extension.py:seed=1 here and :seed=2 there;
options.py a task at a time) join in one RECORDS directory and one report, and that directory
can be committed beside it. RECORDS must not be a sweep's --workdir.

  python scripts/keep_records.py runs/length docs/results/frontier/records \\
      --sweep configs/sweeps/frontier.py --sweep configs/sweeps/frontier.py:budget

With `--sweep` (repeatable), only the points those sweeps name are kept: a workdir that two
sweeps share (their common points trained once) gives each sweep's records their own folder.
"""

import glob
import json
import os
import shutil
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import sweeps  # pylint: disable=wrong-import-position
from scripts import sweep_points  # pylint: disable=wrong-import-position
from scripts import sweep_times  # pylint: disable=wrong-import-position


def point_records(workdir: str) -> list[str]:
  """The paths of `workdir`'s files that a report reads, and its record of the documents its
  own files held (files.TRAIN_DATA_FILE), sorted."""
  return sorted({path for pattern in sweep_points.READS + (files.TRAIN_DATA_FILE,)
                 for path in glob.glob(os.path.join(workdir, pattern))})


def _refuse(sweep_dir: str, records: str) -> None:
  """One error for a pair of directories that keeping would harm or that holds nothing."""
  if not os.path.exists(os.path.join(sweep_dir, 'sweep.json')):
    raise errors.ConfigError(f"{sweep_dir} has no sweep.json, so it is not a sweep's "
                             'directory. Fix: give the --workdir that scripts/sweep.py ran with.')
  if os.path.realpath(sweep_dir) == os.path.realpath(records):
    raise errors.ConfigError(f"{records} is the sweep's own directory. Fix: give another "
                             'directory to keep the records in.')
  if os.path.isdir(os.path.join(records, 'logs')) or glob.glob(
      os.path.join(records, '*', 'checkpoints')):
    raise errors.ConfigError(f"{records} holds a sweep's runs (logs/ or checkpoints), whose "
                             'results keeping would overwrite and which the sweep would then '
                             'retrain. Fix: keep the records in a directory of their own.')
  if not glob.glob(os.path.join(sweep_dir, '*', 'config.json')):
    raise errors.ConfigError(f'{sweep_dir} holds no run yet (no */config.json). Fix: keep its '
                             'records once scripts/sweep.py has started its points.')


def keep_point(workdir: str, target: str, extra: dict | None = None) -> None:
  """`workdir`'s records as `target`, whole: built beside it and then put in its place, so a
  point kept again holds only its new files, and a keep cut short leaves the old ones. `extra`
  ({name: path}) adds files from elsewhere under their names (relative paths, folders made)."""
  building = os.path.join(os.path.dirname(target), f'.{os.path.basename(target)}.partial')
  shutil.rmtree(building, ignore_errors=True)
  os.makedirs(building)
  try:
    for path in point_records(workdir):
      shutil.copyfile(path, os.path.join(building, os.path.basename(path)))
    for name, path in (extra or {}).items():
      os.makedirs(os.path.dirname(os.path.join(building, name)), exist_ok=True)
      shutil.copyfile(path, os.path.join(building, name))
    files.sync_tree(building)
  except BaseException:
    shutil.rmtree(building, ignore_errors=True)  # Nothing half built is left beside the records.
    raise
  if os.path.exists(target):
    shutil.rmtree(target)
  files.durable_replace(building, target)


def _flat(value, prefix: str = '') -> dict:
  """{dotted field: value} of a config's JSON."""
  if not isinstance(value, dict):
    return {prefix: value}
  return {k: v for key, inner in value.items()
          for k, v in _flat(inner, f'{prefix}.{key}' if prefix else key).items()}


def _meaning(workdir: str, by_documents: bool) -> dict:
  """A point's config.json, less where its run lived: the data cache and the directory of the
  run it started from (its name is kept). With `by_documents` (both runs recorded what their
  own files held: files.TRAIN_DATA_FILE), the globs of those files are compared by that record
  instead. A tokenizer file is compared by its path: two tokenizers of one name (every
  tokenizer.json) need not be the same."""
  flat = _flat(files.read_json(os.path.join(workdir, 'config.json')))
  flat.pop('data.data_dir', None)
  if flat.get('init_from'):
    flat['init_from'] = os.path.basename(str(flat['init_from']).rstrip('/'))
  if by_documents:
    recorded = files.read_json(os.path.join(workdir, files.TRAIN_DATA_FILE))
    for name, text in recorded.items():  # '' for config.data's own files, else a source's.
      flat.pop(f'data.mixture.{name}.files' if name else 'data.files', None)
      flat[f'train documents{" of " + name if name else ""}'] = text
  return flat


def _steps_trained(workdir: str) -> int:
  """The last step metrics.jsonl records (0 without it)."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return 0
  return max((r.get('step', 0) for r in files.read_jsonl(path)), default=0)


def _evaluations(workdir: str) -> set[str]:
  return {os.path.basename(p) for p in glob.glob(os.path.join(workdir, sweep_points.EVAL_RESULTS))}


def lost_by_replacing(kept: str, incoming: str) -> str:
  """What keeping `incoming` (a point's workdir) in place of the record `kept` would lose:
  the record of a run of another config, steps trained or evaluations; '' if nothing."""
  by_documents = all(os.path.exists(os.path.join(d, files.TRAIN_DATA_FILE))
                     for d in (kept, incoming))
  old, new = _meaning(kept, by_documents), _meaning(incoming, by_documents)
  differ = [f'{k}: {old.get(k, "(none)")} vs {new.get(k, "(none)")}'
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
  if differ:
    return (f'a run of another config ({"; ".join(differ[:3])}'
            + (f'; {len(differ) - 3} more' if len(differ) > 3 else '') + '; kept vs new)')
  steps_kept, steps_new = _steps_trained(kept), _steps_trained(incoming)
  if steps_new < steps_kept:
    return f'{steps_kept} steps trained, where the new run has {steps_new}'
  missing = sorted(_evaluations(kept) - _evaluations(incoming))
  if missing:
    return f'the evaluations {", ".join(missing)}, which the new run lacks'
  return ''


def keep_times(sweep_dir: str, records: str, only: set[str] | None = None) -> None:
  """Adds to RECORDS/timings.jsonl the lines of the sweep's own (scripts/sweep.py's
  `record_time`: one per run of the sweep) that it does not hold yet, in their order; with
  `only`, the lines of the runs that trained or evaluated a point named in it."""
  path = os.path.join(sweep_dir, sweep_times.TIMES)
  if not os.path.exists(path):
    return
  kept_path = os.path.join(records, sweep_times.TIMES)
  kept = (sweep_times.checked(files.read_jsonl(kept_path), kept_path)
          if os.path.exists(kept_path) else [])
  new = []
  for line in sweep_times.checked(files.read_jsonl(path), path):
    if line not in kept + new and (only is None or sweep_times.ran_any(line, only)):
      new.append(line)
  if new:  # Written whole: a keep cut short leaves the kept lines as they were.
    files.write_text_atomic(kept_path, ''.join(json.dumps(x) + '\n' for x in kept + new))


def named_points(specs: list[str]) -> set[str]:
  """The names of the points the sweep files `specs` (FILE[:ARG]) define."""
  return {point.name for spec in specs for point in sweeps.load(spec).points}


def keep(sweep_dir: str, records: str, only: set[str] | None = None,
         replace: bool = False) -> list[str]:
  """Copies `sweep_dir`'s records into `records` (see the module's docstring), of the points
  named in `only` if given; returns the names of the points kept. A point kept already is
  replaced only where that loses nothing (`lost_by_replacing`), or with `replace`."""
  _refuse(sweep_dir, records)
  ours = files.read_json(os.path.join(sweep_dir, 'sweep.json'))
  kept_json = os.path.join(records, 'sweep.json')
  earlier = files.read_json(kept_json) if os.path.exists(kept_json) else {}
  names = sorted(name for name in os.listdir(sweep_dir)
                 if os.path.exists(os.path.join(sweep_dir, name, 'config.json'))
                 and (only is None or name in only))
  if only is not None:
    if not names:
      raise errors.ConfigError(f'{sweep_dir} holds none of the points --sweep names. Fix: name '
                               'the sweep that ran there.')
    ours = {**ours, **{key: {k: v for k, v in ours.get(key, {}).items() if k in only}
                       for key in ('points', 'labels')}}
  losses = [(name, lost) for name in names if os.path.exists(os.path.join(records, name,
                                                                          'config.json'))
            and (lost := lost_by_replacing(os.path.join(records, name),
                                           os.path.join(sweep_dir, name)))]
  if losses and not replace:
    name, lost = losses[0]
    raise errors.ConfigError(
        f'{os.path.join(records, name)} keeps {lost}: keeping {os.path.join(sweep_dir, name)} '
        f'would replace it' + (f' ({len(losses) - 1} more points likewise)' if len(losses) > 1
                               else '') + '. Fix: keep these records in another directory, or '
        'pass --replace to replace them whole.')
  os.makedirs(records, exist_ok=True)
  for name in names:
    keep_point(os.path.join(sweep_dir, name), os.path.join(records, name))
  keep_times(sweep_dir, records, only)
  files.write_json_atomic(kept_json, {
      **ours,
      'points': {**earlier.get('points', {}), **ours.get('points', {})},
      'labels': {**earlier.get('labels', {}), **ours.get('labels', {})}}, default=str)
  return names


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('sweep_dir', type=cli.path_arg, help="scripts/sweep.py's --workdir.")
  parser.add_argument('records', type=cli.path_arg, help='Where to keep the records.')
  parser.add_argument('--sweep', action='append', default=[], metavar='FILE[:ARG]',
                      help='Keep only the points this sweep names (repeatable).')
  parser.add_argument('--replace', action='store_true',
                      help='Replace a kept point whole even where its record holds more (steps, '
                      'evaluations) or is of another config.')
  args = parser.parse_args(argv)
  names = keep(args.sweep_dir, args.records, named_points(args.sweep) if args.sweep else None,
               args.replace)
  print(f'kept the records of {len(names)} points in {args.records}; report: '
        f'python scripts/report.py {args.records}')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
