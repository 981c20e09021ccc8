"""How long a sweep took, from the lines its runs kept (WORKDIR/timings.jsonl).

scripts/sweep.py appends one line per run of a sweep (`record_time`): the commit and host
(`made_with`, read as the runs start), the sweep and its config, how many points it holds and
which had a stage to run in that run (`ran`), the processes and whether each had cores of its
own, the seconds spent building the synthetic rows beforehand, the wall time from the end of the
driver's checks (every point's config built) to its end, and each group's. A resumed sweep adds
a line for what it ran; a run stopped part way says so (`ended`). A driver killed outright
(SIGKILL, out of memory) leaves no line: it is written as the run ends.
scripts/keep_records.py keeps the lines beside the points' records, and
scripts/docs_from_records.py renders them (`sweep_times` blocks) with `table`, so a sweep's
time in the docs is the one its run recorded.
"""

import os
import pathlib
import re
import statistics

from roformer import errors
from roformer import files
from roformer import sweeps

TIMES = 'timings.jsonl'
# What each line holds (record_time's keys that the table reads).
KEYS = ('made_with', 'started', 'ended', 'sweep', 'points', 'ran_here', 'processes', 'pinned',
        'rows_s', 'wall_s', 'groups_s')


def ran_any(line: dict, names: set[str]) -> bool:
  """Whether the run of the sweep that `line` records trained or evaluated a point named in
  `names`: by the points it names (`ran`), else by its groups, where a group of seeds is named
  with `{seed}` in place of the seed and stands for every seed."""
  if 'ran' in line:
    return bool(set(line['ran']) & set(names))
  for group in line.get('groups_s', {}):
    pattern = re.escape(group).replace(re.escape(sweeps.SEED_TEMPLATE), r'\d+')
    if any(re.fullmatch(pattern, name) for name in names):
      return True
  return False


def read(path: pathlib.Path) -> list[dict]:
  """The lines of a timings file, or of RECORDS/timings.jsonl when `path` is a folder; a file
  that is missing, or a line without record_time's keys, is one error naming it."""
  path = path / TIMES if path.is_dir() else path
  if not path.is_file():
    raise errors.ConfigError(f'{path} does not exist. Fix: name the timings.jsonl of a sweep '
                             'run by scripts/sweep.py, or a folder of kept records holding one.')
  lines = checked(files.read_jsonl(str(path)), path)
  if not lines:
    raise errors.ConfigError(f'{path} holds no timing. Fix: name the timings.jsonl of a sweep '
                             'that ran.')
  return lines


def checked(lines: list, path) -> list[dict]:
  """`lines` (read from `path`), each refused in one error naming it where it lacks one of
  record_time's keys or holds one of the wrong type."""
  number_or_none = lambda v: v is None or _number(v)
  made = lambda v: (isinstance(v, dict) and isinstance(v.get('host', {}), dict)
                    and isinstance(v.get('variables', {}), dict))
  types = {'made_with': made, 'groups_s': lambda v: isinstance(v, dict)
           and all(_number(x) for x in v.values()), 'wall_s': _number, 'points': _number,
           'ran_here': _number, 'processes': _number, 'rows_s': number_or_none,
           'started': lambda v: isinstance(v, str), 'ended': lambda v: isinstance(v, str),
           'sweep': lambda v: isinstance(v, str),
           'ran': lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)}
  for number, line in enumerate(lines, 1):
    missing = [k for k in KEYS if k not in line] if isinstance(line, dict) else list(KEYS)
    wrong = [k for k, ok in types.items() if k in line and not ok(line[k])] if not missing else []
    if missing or wrong:
      what = (f'no {", ".join(missing)}' if missing else
              f'{", ".join(wrong)} of the wrong type')
      raise errors.ConfigError(f'{path} record {number} is not a scripts/sweep.py timing '
                               f'({what}). Fix: name a sweep\'s timings.jsonl.')
  return lines


def _number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def minutes(seconds: float) -> str:
  """'30 min 44 s' or '1 min 05 s' (or '44 s' under a minute, '2 h 01 min' from an hour): the
  docs' long form of a duration, where progress lines use logs.duration's '30m44s'."""
  s = int(round(seconds))
  if s >= 3600:
    return f'{s // 3600} h {s // 60 % 60:02d} min'
  return f'{s // 60} min {s % 60:02d} s' if s >= 60 else f'{s} s'


def table(lines: list[dict], sweep: str = '', where: str = 'the kept timings',
          paired: bool = False) -> list[str]:
  """A row per kept run of a sweep (of `sweep` alone, if given: the spec as it was run): its
  date and commit, the points it ran of the sweep's, the processes, the rows built beforehand,
  its wall time and the mean over its points, the host; a run that did not finish says how it
  ended. With `paired`, each run after the first against it group by group: the groups both
  timed, the median and range of the second's time over the first's, and how many were
  shorter (the groups of one run take turns on the cores, so a whole sweep's wall time is one
  draw, where its groups are many)."""
  chosen = [line for line in lines if not sweep or line['sweep'] == sweep]
  if not chosen:
    raise errors.ConfigError(f'{where} keep no run of {sweep} (they keep '
                             f'{", ".join(sorted({x["sweep"] for x in lines}))}). Fix: name one '
                             'of those in sweep=.')
  out = ['| run | commit | sweep | variables set | points run | processes | rows built '
         'beforehand | wall time | per point | host |', '|---' * 10 + '|']
  for line in chosen:
    made = line['made_with']
    host = made.get('host', {})
    ran = line['ran_here']
    ended = '' if line['ended'] == 'finished' else f' ({line["ended"]})'
    processes = f"{line['processes']}" + (', each on its own cores' if line['pinned'] else '')
    rows = f"{line['rows_s']:.1f} s" if line['rows_s'] is not None else 'none'
    per_point = f"{line['wall_s'] / ran:.1f} s" if ran else ''
    variables = ', '.join(f'`{k}={v}`' for k, v in sorted(made.get('variables', {}).items()))
    out.append(
        f"| {line['started'][:10]} | `{made.get('commit') or '?'}` | `{line['sweep']}` | "
        f"{variables or 'none'} | {ran} of {line['points']}{ended} | {processes} | {rows} | "
        f"**{minutes(line['wall_s'])}** ({line['wall_s']:,.0f} s) | {per_point} | "
        f"{host.get('cpu', '?')}, {host.get('cores_used', '?')} cores |")
  if paired:
    first = chosen[0]['groups_s']
    for number, line in enumerate(chosen[1:], 2):
      both = sorted(set(first) & set(line['groups_s']))
      ratios = sorted(line['groups_s'][g] / first[g] for g in both if first[g] > 0)
      if not ratios:
        raise errors.ConfigError(f'{where}: runs 1 and {number} timed no group in common. '
                                 'Fix: pair runs of the same sweep (sweep=).')
      out += ['', f'Run {number} against run 1, group by group ({len(ratios)} groups both ran):'
              f' its time over run 1\'s is {statistics.median(ratios):.3f}x at the median '
              f'({ratios[0]:.3f}-{ratios[-1]:.3f}x), {sum(r < 1 for r in ratios)} of '
              f'{len(ratios)} shorter.']
  out += ['', 'Each row one run of `scripts/sweep.py` as its `timings.jsonl` kept it: wall time '
          "from the end of the driver's checks to its end (the rows built beforehand, every "
          'training process and evaluation included); per point is that time over the points '
          'the run trained or evaluated, with the processes running side by side.']
  return out


def relative(spec: str, root: pathlib.Path) -> str:
  """A sweep spec (FILE[:ARG]) with FILE relative to `root` where it lies under it, so that a
  record names the file as the docs' commands do wherever the sweep was started from."""
  path, sep, arg = spec.partition(':')
  full, root = os.path.realpath(path), os.path.realpath(root)  # Through symlinked checkouts.
  inside = full.startswith(root + os.sep)
  return (os.path.relpath(full, root) if inside else path) + sep + arg
