"""Keep a sweep's results without its checkpoints, in a directory scripts/report.py reads.

  python scripts/keep_records.py runs/pk_wsd docs/results/passkey_extension/records
  python scripts/report.py docs/results/passkey_extension/records \\
      --out docs/results/passkey_extension/report.md

Copies what the report reads of each point (config.json and its config.resume-STEP.json,
metrics.jsonl, eval_results*.json) into RECORDS/POINT, and merges the sweep's sweep.json into
RECORDS/sweep.json (the points and labels already there are kept, the sweep's own replace those
of the same name). Checkpoints, TensorBoard events and the tokenizer stay behind: a kept record
is a few tens of kilobytes where a point's workdir is tens of megabytes. So the seeds of one
sweep, run in different places or at different times (`:seed=1` here, `:seed=2` there), join
in one RECORDS directory and one report, and that directory can be committed beside it.
"""

import glob
import os
import shutil
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position

# What scripts/report.py reads of a point's workdir.
KEPT = ('config.json', 'config.resume-*.json', 'metrics.jsonl', 'eval_results*.json')


def point_records(workdir: str) -> list[str]:
  """The paths of `workdir`'s files that a report reads, sorted."""
  return sorted({path for pattern in KEPT for path in glob.glob(os.path.join(workdir, pattern))})


def _copy_atomic(source: str, target: str) -> None:
  """`source` to `target` through a temporary file, so a copy cut short never leaves a
  truncated record in place of a whole one."""
  temporary = target + '.partial'
  shutil.copyfile(source, temporary)
  os.replace(temporary, target)


def keep(sweep_dir: str, records: str) -> list[str]:
  """Copies `sweep_dir`'s records into `records` (see the module's docstring); returns the
  names of the points kept."""
  sweep_json = os.path.join(sweep_dir, 'sweep.json')
  if not os.path.exists(sweep_json):
    raise errors.ConfigError(f'{sweep_dir} has no sweep.json, so it is not a sweep\'s directory. '
                        'Fix: give the --workdir that scripts/sweep.py ran with.')
  if os.path.abspath(sweep_dir) == os.path.abspath(records):
    raise errors.ConfigError(f'{records} is the sweep\'s own directory. Fix: give another '
                        'directory to keep the records in.')
  ours = files.read_json(sweep_json)
  kept_json = os.path.join(records, 'sweep.json')
  earlier = files.read_json(kept_json) if os.path.exists(kept_json) else {}
  names = sorted(name for name in os.listdir(sweep_dir)
                 if os.path.exists(os.path.join(sweep_dir, name, 'config.json')))
  for name in names:
    os.makedirs(os.path.join(records, name), exist_ok=True)
    for path in point_records(os.path.join(sweep_dir, name)):
      _copy_atomic(path, os.path.join(records, name, os.path.basename(path)))
  # Written last: a records directory whose sweep.json names a point holds that point's files.
  files.write_json_atomic(kept_json, {
      **ours,
      'points': {**earlier.get('points', {}), **ours.get('points', {})},
      'labels': {**earlier.get('labels', {}), **ours.get('labels', {})}}, default=str)
  return names


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('sweep_dir', type=cli.path_arg, help="scripts/sweep.py's --workdir.")
  parser.add_argument('records', type=cli.path_arg, help='Where to keep the records.')
  args = parser.parse_args(argv)
  names = keep(args.sweep_dir, args.records)
  print(f'kept the records of {len(names)} points in {args.records}; report: '
        f'python scripts/report.py {args.records}')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
