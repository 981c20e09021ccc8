"""A sweep's kept timings: which runs they name, how they are kept and how the docs show them."""

import json
import pathlib

import pytest

from roformer import errors
from scripts import docs_from_records
from scripts import keep_records
from scripts import sweep_times


def _line(wall=1844.0, ran=126, groups=('passkey,rope,seed={seed}',), **extra) -> dict:
  return {'made_with': {'date': '2026-11-30', 'commit': 'abc1234',
                        'host': {'cpu': 'Some CPU', 'cores': 2, 'cores_used': 2}},
          'started': '2026-11-30T04:00:00+0000', 'ended': 'finished',
          'sweep': 'configs/sweeps/length.py:seed=0,seed=1,seed=2', 'config': 'configs/x.py',
          'points': 126, 'ran_here': ran, 'failed': [], 'processes': 2, 'pinned': True,
          'row_cache': True, 'rows_s': 18.25, 'wall_s': wall,
          'groups_s': {g: 10.0 for g in groups}, **extra}


def _write(path: pathlib.Path, lines) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(''.join(json.dumps(x) + '\n' for x in lines))


def test_a_group_of_seeds_stands_for_each_of_its_seeds_and_nothing_else():
  line = _line(groups=('copy,rope,seed={seed}', 'copy,xl,seed=3'))
  assert sweep_times.ran_any(line, {'copy,rope,seed=4'})
  assert sweep_times.ran_any(line, {'copy,xl,seed=3'})
  assert not sweep_times.ran_any(line, {'copy,xl,seed=4'})  # A lone point is itself only.
  assert not sweep_times.ran_any(line, {'passkey,rope,seed=0'})
  plus = _line(groups=('copy,rope+,seed={seed}',))
  assert not sweep_times.ran_any(plus, {'copy,ropeee,seed=0'})  # '+' is not a wildcard.
  assert sweep_times.ran_any(plus, {'copy,rope+,seed=0'})


def test_a_run_that_names_its_points_matches_those_points_only():
  """A line that names the points it ran (`ran`) is matched by them, not by its groups: a run
  of seeds 3 and 4 is not a run of seed 0."""
  line = _line(groups=('copy,rope,seed={seed}',), ran=2)
  line['ran'] = ['copy,rope,seed=3', 'copy,rope,seed=4']
  assert sweep_times.ran_any(line, {'copy,rope,seed=4', 'x'})
  assert not sweep_times.ran_any(line, {'copy,rope,seed=0'})


@pytest.mark.parametrize('seconds, text', [(44.4, '44 s'), (60, '1 min 00 s'),
                                           (1844, '30 min 44 s'), (7279, '2 h 01 min')])
def test_minutes_read_as_written_by_hand(seconds, text):
  assert sweep_times.minutes(seconds) == text


def test_the_table_gives_each_run_its_wall_time_per_point_and_how_it_ended():
  flagged = _line(wall=90.0, ran=3, ended='stopped by Ctrl-C', pinned=False,
                  rows_s=None, sweep='configs/sweeps/length.py:smoke')
  flagged['made_with']['variables'] = {'XLA_FLAGS': '--a=1', 'OMP_NUM_THREADS': '1'}
  lines = [_line(), flagged]
  rows = sweep_times.table(lines)
  assert 'smoke` | `OMP_NUM_THREADS=1`, `XLA_FLAGS=--a=1` | 3 of' in rows[3]
  assert rows[2] == ('| 2026-11-30 | `abc1234` | `configs/sweeps/length.py:seed=0,seed=1,seed=2` '
                     '| none | 126 of 126 | 2, each on its own cores | 18.2 s | **30 min 44 s** '
                     '(1,844 s) | 14.6 s | Some CPU, 2 cores |')  # 1844 / 126 = 14.63.
  assert '| 3 of 126 (stopped by Ctrl-C) | 2 | none | **1 min 30 s** (90 s) | 30.0 s |' in rows[3]
  only = sweep_times.table(lines, 'configs/sweeps/length.py:smoke')
  assert len([r for r in only if r.startswith('| 2026')]) == 1
  with pytest.raises(errors.ConfigError, match=r'^x.jsonl keep no run of other.py \(they keep '
                     r'configs/sweeps/length.py:seed=0,seed=1,seed=2, configs/sweeps/length.py:'
                     r'smoke\)\. Fix: name one of those in sweep=\.$'):
    sweep_times.table(lines, 'other.py', 'x.jsonl')


def test_a_missing_or_foreign_timings_file_is_one_error_naming_it(tmp_path):
  with pytest.raises(errors.ConfigError, match='timings.jsonl does not exist'):
    sweep_times.read(tmp_path)
  _write(tmp_path / 'timings.jsonl', [{'step': 3}])
  with pytest.raises(errors.ConfigError, match=r'record 1 is not a scripts/sweep.py timing '
                     r'\(no made_with'):
    sweep_times.read(tmp_path)


def test_keeping_adds_only_the_runs_not_kept_and_with_named_points_only_theirs(tmp_path):
  first, second = _line(groups=('copy,rope,seed={seed}',)), _line(groups=('passkey,xl,seed=0',))
  _write(tmp_path / 'sweep' / 'timings.jsonl', [first, second])
  records = tmp_path / 'records'
  records.mkdir()
  keep_records.keep_times(str(tmp_path / 'sweep'), str(records), {'copy,rope,seed=1'})
  assert sweep_times.read(records) == [first]
  keep_records.keep_times(str(tmp_path / 'sweep'), str(records))
  keep_records.keep_times(str(tmp_path / 'sweep'), str(records))  # Kept again: no new line.
  assert sweep_times.read(records) == [first, second]


def test_a_sweep_times_block_renders_its_records_table(tmp_path, monkeypatch):
  _write(tmp_path / 'docs' / 'results' / 'x' / 'timings.jsonl', [_line()])
  monkeypatch.setattr(docs_from_records, 'ROOT', tmp_path)
  text = ('<!-- records: docs/results/x sweep_times '
          'sweep=configs/sweeps/length.py:seed=0,seed=1,seed=2 -->\nold\n<!-- end of records -->')
  new = docs_from_records.regenerate(text, {})
  assert '**30 min 44 s** (1,844 s)' in new and 'old' not in new


def test_a_spec_is_kept_relative_to_the_repository_wherever_the_sweep_started(tmp_path,
                                                                               monkeypatch):
  root = tmp_path / 'repo'
  (root / 'configs').mkdir(parents=True)
  monkeypatch.chdir(root / 'configs')
  assert sweep_times.relative('length.py:seed=0', root) == 'configs/length.py:seed=0'
  assert sweep_times.relative(str(tmp_path / 'mine.py'), root) == str(tmp_path / 'mine.py')


def test_paired_runs_compare_the_groups_both_timed():
  """Run 2 against run 1 by the ratio of each group's time: a group only one of them ran is
  left out."""
  first = _line(groups=('a', 'b', 'c'))
  first['groups_s'] = {'a': 10.0, 'b': 20.0, 'c': 40.0}
  second = _line(groups=())
  second['groups_s'] = {'a': 9.0, 'b': 21.0, 'c': 36.0, 'd': 1.0}
  rows = sweep_times.table([first, second], paired=True)
  # Ratios 0.9, 1.05, 0.9: median 0.9, two of three shorter.
  assert ('Run 2 against run 1, group by group (3 groups both ran): its time over run 1\'s is '
          '0.900x at the median (0.900-1.050x), 2 of 3 shorter.') in rows
  second['groups_s'] = {'d': 1.0}
  with pytest.raises(errors.ConfigError, match='runs 1 and 2 timed no group in common'):
    sweep_times.table([first, second], paired=True)


@pytest.mark.parametrize('key, value', [('made_with', 'abc'), ('wall_s', '30'),
                                        ('groups_s', {'a': 'x'}), ('rows_s', '1'),
                                        ('started', 3), ('made_with', {'host': 'x'}),
                                        ('made_with', {'variables': []}), ('ran', None)])
def test_a_timing_of_the_wrong_types_is_one_error_naming_the_field(tmp_path, key, value):
  _write(tmp_path / 'timings.jsonl', [_line(), {**_line(), key: value}])
  with pytest.raises(errors.ConfigError, match=rf'record 2 is not a scripts/sweep.py timing '
                     rf'\({key} of the wrong type\)'):
    sweep_times.read(tmp_path)


def test_a_paired_option_other_than_0_or_1_is_refused(tmp_path, monkeypatch):
  _write(tmp_path / 'docs' / 'results' / 'x' / 'timings.jsonl', [_line()])
  monkeypatch.setattr(docs_from_records, 'ROOT', tmp_path)
  text = '<!-- records: docs/results/x sweep_times paired=yes -->\n<!-- end of records -->'
  with pytest.raises(errors.ConfigError, match="paired='yes' is not 0 or 1"):
    docs_from_records.regenerate(text, {})


def test_keeping_a_foreign_or_mistyped_timing_is_one_error_and_keeps_nothing(tmp_path):
  """keep_records checks the sweep's lines as the docs read them, before writing any."""
  from scripts import keep_records  # pylint: disable=import-outside-toplevel
  sweep, records = tmp_path / 'sweep', tmp_path / 'records'
  sweep.mkdir()
  records.mkdir()
  _write(sweep / 'timings.jsonl', [_line(), {**_line(), 'ran': None}])
  with pytest.raises(errors.ConfigError, match=r'record 2 is not a scripts/sweep.py timing'):
    keep_records.keep_times(str(sweep), str(records), {'a'})
  assert not (records / 'timings.jsonl').exists()
