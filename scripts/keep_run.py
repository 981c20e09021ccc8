"""Keep one run's records, with the timed commands that made it, for a page's tables.

  python scripts/keep_run.py RUNS/NAME RECORDS/NAME --steps RUNS/NAME.steps.tsv [--commit C]

Copies what a page reads of the run (config.json, metrics.jsonl, eval_results*.json, and what
its starts ran on, environment.jsonl: keep_records.point_records, and a translation's decoded
splits, whose hypotheses and references an evaluation names, under the same relative paths) into
RECORDS/NAME, and writes RECORDS/NAME/steps.json: the lines of --steps whose run is NAME (`run`,
`phase`, start and end in seconds, the arguments joined by the unit separator:
scripts/reference_steps.sh's `step` writes them), each with its seconds and its command as a
shell reads it, and the commit and date. The commit is --commit (a reference script gives the
one it started at), or this checkout's, marked `+changes` where its code (docs/ aside)
differed from it. The folder is assembled beside its place and renamed into it, so a cut copy
leaves none half kept. A RECORDS/NAME that exists is refused: kept records are replaced only by
hand. scripts/lm_reference.sh, mlm_reference.sh and performer_reference.sh call it after each
run; scripts/docs_from_records.py's `runs` blocks read what it keeps.
"""

import glob
import os
import shlex
import sys
import time
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import metrics  # pylint: disable=wrong-import-position
from roformer import provenance  # pylint: disable=wrong-import-position
from scripts import keep_records  # pylint: disable=wrong-import-position
from scripts import sweep_points  # pylint: disable=wrong-import-position

STEPS_FILE = 'steps.json'


def read_steps(path: str, name: str) -> list[dict]:
  """The lines of a steps file (tab-separated run, phase, start, end, command) whose run is
  `name`, as {phase, seconds, command}."""
  steps = []
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, 1):
      fields = line.rstrip('\n').split('\t')
      if len(fields) != 5:
        raise errors.ConfigError(f'{path}:{number} holds {len(fields)} fields, not run, phase, '
                                 'start, end and command. Fix: give the file that '
                                 "scripts/reference_steps.sh's step writes.")
      run, phase, start, end, arguments = fields
      try:
        seconds = round(float(end) - float(start), 1)
      except ValueError:
        raise errors.ConfigError(f'{path}:{number} gives the times {start!r} and {end!r}, not '
                                 'seconds. Fix: give the file that scripts/reference_steps.sh\'s '
                                 'step writes.') from None
      if run == name:
        steps.append({'phase': phase, 'seconds': seconds,
                      'command': shlex.join(arguments.split('\x1f'))})
  return steps


def decoded(workdir: str) -> dict:
  """{relative path: path} of the hypotheses that `workdir`'s evaluations name
  (eval_results*.json, a split's `hypotheses`: a translation's decoded split) and of their
  references beside them, which a page's paired bootstrap reads."""
  found = {}
  for results in sorted(glob.glob(os.path.join(workdir, sweep_points.EVAL_RESULTS))):
    for split in files.read_json(results).get('splits', {}).values():
      hypotheses = split.get('hypotheses') if isinstance(split, dict) else None
      if not hypotheses:
        continue
      if os.path.isabs(hypotheses) or '..' in hypotheses.split('/'):
        raise errors.ConfigError(f'{results} names {hypotheses} as hypotheses, outside the '
                                 "run. Fix: give the file eval.py wrote, or the run's own.")
      for name in (hypotheses, metrics.references_of(hypotheses)):
        path = os.path.join(workdir, name)
        if not os.path.exists(path):
          raise errors.ConfigError(f'{results} names {name}, which {workdir} does not hold. '
                                   'Fix: rerun the eval.py command that wrote it (its --out '
                                   'and --step; RUN.steps.tsv has it), then keep the run.')
        found[name] = path
  return found


def keep(workdir: str, target: str, steps_file: str | None, made_at: str | None = None) -> None:
  """`workdir`'s records and its steps as `target` (made at commit `made_at`, this checkout's
  by default), refused where `target` exists or the run left nothing to keep."""
  name = os.path.basename(os.path.normpath(target))
  if os.path.exists(target):
    raise errors.ConfigError(f'{target} exists: kept records are not replaced. Fix: move it '
                             'aside, or keep the run under another name.')
  if not os.path.exists(os.path.join(workdir, 'config.json')):
    raise errors.ConfigError(f'{workdir} holds no run (no config.json). Fix: give the '
                             'workdir that train.py ran with.')
  steps = read_steps(steps_file, name) if steps_file else []
  if steps_file and not steps:
    raise errors.ConfigError(f'{steps_file} notes no step of the run {name!r}. Fix: name the '
                             'records after the run, as step RUN PHASE ... named it.')
  os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
  staged = os.path.join(os.path.dirname(os.path.abspath(target)), f'.{name}.steps')
  files.write_json_atomic(staged, {'date': time.strftime('%Y-%m-%d'),
                                   'commit': provenance.commit() if made_at is None else made_at,
                                   'steps': steps})
  try:
    keep_records.keep_point(workdir, target, extra={STEPS_FILE: staged, **decoded(workdir)})
  finally:
    if os.path.exists(staged):
      os.remove(staged)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('workdir', type=cli.path_arg, help="The run's train.py --workdir.")
  parser.add_argument('target', type=cli.path_arg, help='RECORDS/NAME, new.')
  parser.add_argument('--steps', type=cli.path_arg, default=None,
                      help="The reference script's steps file; its lines of run NAME are kept.")
  parser.add_argument('--commit', default=None,
                      help="The commit the run was made at (default: this checkout's).")
  args = parser.parse_args(argv)
  keep(args.workdir, args.target, args.steps, args.commit)
  print(f'kept: {args.target}')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
