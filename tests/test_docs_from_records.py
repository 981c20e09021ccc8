"""scripts/docs_from_records.py: the results blocks of the README and docs/ are what their kept
records give (regenerated here, the page must not differ), and each block kind computes its
cells from the seeds (scripts/seed_tables.py): mean ± sample std, the seed range, separations
with roformer/separations.py, the README summary's sides; a malformed block is one error naming
it."""

import os
import pathlib
import re

import pytest

from roformer import errors
from scripts import docs_from_records as docs
from scripts import run_tables
from scripts import seed_tables

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_results_block_in_the_docs_is_what_its_records_give():
  cache, blocks = {}, 0
  for page in docs.pages():
    text = page.read_text(encoding='utf-8')
    blocks += len(docs.BLOCK.findall(text))
    assert docs.regenerate(text, cache) == text, (
        f'{page}: a results block differs from its records. Fix: python '
        'scripts/docs_from_records.py')
  assert blocks >= 10


def _point(scheme, seed, task, values, curve=None):
  return {'scheme': scheme, 'options': '', 'seed': seed, 'task': 'synthetic/' + task,
          'status': 'done', 'steps': 100, 'answered_curve': curve or {},
          'evals': {'': {n: {'sequence_accuracy': v, 'accuracy': v} for n, v in values.items()}}}


POINTS = [_point('rope', 0, 'copy', {32: 0.5, 64: 0.1}, {20: 0.5, 40: 0.95}),
          _point('rope', 1, 'copy', {32: 0.7, 64: 0.3}, {20: 0.92}),
          _point('rope', 2, 'copy', {32: 0.6, 64: 0.2}, {20: 0.1}),
          _point('fox', 0, 'copy', {32: 0.9, 64: 0.8}),
          _point('fox', 1, 'copy', {32: 1.0, 64: 0.9}),
          _point('fox', 2, 'copy', {32: 0.8, 64: 0.85}),
          _point('none', 0, 'copy', {32: 0.1, 64: 0.0}),
          _point('none', 1, 'copy', {32: 0.2, 64: 0.0}),
          _point('none', 2, 'copy', {32: 0.6, 64: 0.3})]


def test_a_table_gives_mean_sample_std_and_range_best_line_first_and_the_learning_step():
  lines = seed_tables.table(POINTS, {'ranges': ['1'], 'learnt': ['0.9']}, 'spec')
  assert lines[0] == ('| line | seeds | 32 | 64 | first validation step at 0.9 of rows, by seed |')
  # fox: mean 0.9, sample std 0.1 (ddof 1: population std would be 0.082).
  assert lines[2] == ('| fox | 3 | 0.900 ± 0.100 (0.800-1.000) | 0.850 ± 0.050 (0.800-0.900) | '
                      '-, -, - |')
  assert lines[3] == ('| rope | 3 | 0.600 ± 0.100 (0.500-0.700) | 0.200 ± 0.100 (0.100-0.300) | '
                      '40, 20, - |')
  assert lines[4].startswith('| none | 3 | 0.300 ± 0.265 (0.100-0.600) |')
  chosen = seed_tables.table(POINTS, {'lines': ['none', 'rope']}, 'spec')
  assert [l.split(' | ')[0] for l in chosen[2:]] == ['| none', '| rope']


def test_separations_name_every_seed_above_with_the_interval_and_exact_p():
  lines = seed_tables.separations(POINTS, {'pairs': ['fox:rope', 'none:rope']}, 'spec')
  fox32, fox64, none32, none64 = lines[2:]
  # fox 0.8-1.0 against rope 0.5-0.7: apart; 2 of the C(6, 3) = 20 splits as extreme: p 0.1.
  assert fox32.startswith('| fox : rope | copy | 32 | 3 v 3 | 0.800-1.000 | 0.500-0.700 | '
                          'every seed above | +0.300 [+0.')
  assert fox32.endswith('| 0.100 |') and 'every seed above' in fox64
  assert '| no |' in none32 and '| no |' in none64  # none's 0.6 meets rope's range.
  assert [l.split(' | ')[2] for l in seed_tables.separations(
      POINTS, {'pairs': ['fox:rope'], 'at': ['2']}, 'spec')[2:]] == ['64']  # 2 x 32 only.
  low, high = map(float, re.search(r'\[([-+.\d]+), ([-+.\d]+)\]', fox32).groups())
  assert 0.1 <= low < 0.3 < high <= 0.5  # Means of resamples lie within each range.


def test_the_summary_names_the_lines_apart_from_the_reference_at_the_longest_length():
  [head, _, row] = seed_tables.summary(POINTS, {}, 'spec')
  assert '`rope` at 1x / the longest' in head
  assert row == ('| copy | 3 | 0.600 ± 0.100 / 0.200 ± 0.100 | `fox` 0.850 ± 0.050 | `fox` | '
                 'none |')


def test_seeds_keeps_the_named_seeds_points_alone_and_refuses_seeds_not_kept():
  two = seed_tables.seeded(POINTS, {'seeds': ['0', '1']}, 's')
  [_, _, fox, rope, none] = seed_tables.table(two, {}, 's')
  assert fox == '| fox | 2 | 0.950 ± 0.071 | 0.850 ± 0.071 |'  # Seeds 0 and 1: 0.9, 1.0.
  assert rope == '| rope | 2 | 0.600 ± 0.141 | 0.200 ± 0.141 |'
  assert none.startswith('| none | 2 | 0.150 ± 0.071 |')
  assert seed_tables.seeded(POINTS, {}, 's') is POINTS
  with pytest.raises(errors.ConfigError, match=r'no point of seed \[7\]'):
    seed_tables.seeded(POINTS, {'seeds': ['0', '7']}, 's')
  with pytest.raises(errors.ConfigError, match='seeds=0;a is not a list of whole numbers'):
    seed_tables.seeded(POINTS, {'seeds': ['0', 'a']}, 's')


@pytest.mark.parametrize('spec, match', [
    ('docs/results/x', 'a block is "PATH KIND'),
    ('docs/results/x plot', 'a block is "PATH KIND'),
    ('docs/results/x table measure=speed', "measure='speed' is not one of"),
    ('docs/results/x table tasks', "'tasks' is not key=value"),
    ('docs/results/x table lines="rope', 'close the quote'),
    ('docs/results/x table seed=0;1', 'a table block reads no seed= .it reads tasks=, lines='),
    ('docs/results/x rerun against=y seeds=0', 'a rerun block reads no seeds='),
    ('docs/results/x sinks seeds=0', r'a sinks block reads no seeds= \(it reads no option\)'),
])
def test_a_malformed_block_is_one_error_naming_it(spec, match):
  with pytest.raises(errors.ConfigError, match=match):
    docs.parse(spec)


def test_a_block_naming_what_the_records_lack_is_one_error():
  with pytest.raises(errors.ConfigError, match=r"no line \['xl'\] in the records"):
    seed_tables.table(POINTS, {'lines': ['xl']}, 'spec')
  with pytest.raises(errors.ConfigError, match=r"no records of \['passkey'\]"):
    seed_tables.table(POINTS, {'tasks': ['passkey']}, 'spec')
  with pytest.raises(errors.ConfigError, match='names pairs=a:b'):
    seed_tables.separations(POINTS, {}, 'spec')
  with pytest.raises(errors.ConfigError, match='holds no kept run'):
    seed_tables.read_points('/nonexistent')


def test_a_benchmark_block_gives_each_pass_turned_off_against_all_on(tmp_path):
  """The ratio of the median steps and the range of the per-round ratios, computed by hand
  for a record of two rows."""
  import json  # pylint: disable=import-outside-toplevel
  config = {'model': {'type': 'causal_lm', 'num_layers': 2, 'd_model': 8, 'vocab_size': 10},
            'data': {'seq_len': 4}, 'train': {'batch_size': 2}}
  row = lambda name, without, step, rounds: {'name': name, 'without': without, 'step_s': step,
                                             'rounds': rounds, 'peak_bytes': 2**20}
  record = {'config': config, 'device_kind': 'cpu', 'backend': 'cpu', 'devices': 1,
            'date': '2026-11-28', 'steps': 4, 'rounds_count': 2,
            'rows': [row('rope', '', 0.010, [[0.010, 0.010], [0.010, 0.012]]),
                     row('rope-dense', 'dense', 0.013, [[0.012, 0.012], [0.015, 0.015]])]}
  (tmp_path / 'one.json').write_text(json.dumps(record), encoding='utf-8')
  lines = docs.benchmark(tmp_path)
  # Per round: 0.012 / 0.010 = 1.2 and 0.015 / 0.011 = 1.364; medians 0.013 / 0.010 = 1.3.
  assert lines[2] == ('| one | causal_lm L2 d8 V10 seq 4 batch 2 | rope | dense | 10.0 | '
                      '1.300x (1.200-1.364) | 1 / 1 |')
  assert len(lines) == 5 and '2026-11-28' in lines[-1]
  with pytest.raises(errors.ConfigError, match='no benchmark record'):
    docs.benchmark(tmp_path / 'missing')


def test_a_rows_block_computes_each_cell_from_its_records_and_ratios_within_one_run(tmp_path):
  """Rows from two records: the ratio against a row of the same record with its round range,
  MFU against the record's own peak, the share of the best peak of the records named and of a
  nominal figure, the peak memory; all by hand."""
  import json  # pylint: disable=import-outside-toplevel
  row = lambda name, step, rounds, tflops, mfu: {
      'name': name, 'step_s': step, 'rounds': rounds, 'tokens_per_s': 1000.0 / step,
      'tflops_per_s': tflops, 'mfu': mfu, 'peak_bytes': 3 * 2**20, 'compile_s': 2.25}
  record = lambda peak, rows: {'config': {}, 'device_kind': 'H', 'backend': 'gpu',
                               'devices': 1, 'date': '2026-11-26', 'steps': 4,
                               'rounds_count': 2, 'peak_flops': peak * 1e12, 'rows': rows}
  (tmp_path / 'a.json').write_text(json.dumps(record(400.0, [
      row('none', 0.100, [[0.100], [0.100]], 200.0, 0.5),
      row('rope', 0.110, [[0.105], [0.120]], 190.0, 0.475)])), encoding='utf-8')
  (tmp_path / 'b.json').write_text(json.dumps(record(500.0, [
      row('rope', 0.050, [[0.050], [0.050]], 250.0, 0.5)])), encoding='utf-8')
  spec = f'{tmp_path} rows rows=a.json:none;a.json:rope;b.json:rope labels="n;r;r, b"'
  _, _, options = docs.parse(spec)
  lines = docs.rows(tmp_path, dict(options, best_of=['a.json', 'b.json'], nominal=['1000'],
                                   compile=['1']), spec)
  assert lines[0] == ('| row | step (ms) | tokens/s | TFLOP/s | MFU (own peak) | of 500.0 | of '
                      '1000 | peak memory (MiB) | compile (s) |')
  assert lines[3] == '| r | 110.0 | 9,091 | 190.0 | 47.5% | 38.0% | 19.0% | 3 | 2.2 |'
  assert lines[4] == '| r, b | 50.0 | 20,000 | 250.0 | 50.0% | 50.0% | 25.0% | 3 | 2.2 |'
  lines = docs.rows(tmp_path, dict(options, rows=['a.json:none', 'a.json:rope'],
                                   labels=['n', 'r'], against=['none']), spec)
  assert lines[2].startswith('| n | 100.0 | 1.000x |')
  assert lines[3].startswith('| r | 110.0 | 1.100x (1.050-1.200) |')  # 0.105/0.1, 0.12/0.1.
  with pytest.raises(errors.ConfigError, match=r"b.json has no row of \['none'\] to compare"):
    docs.rows(tmp_path, dict(options, against=['none']), spec)
  lines = docs.rows(tmp_path, {'rows': ['a.json:*', 'b.json:rope'], 'against': ['none', 'rope']},
                    spec)  # Every row of a.json; b.json's rope against itself.
  assert [line.split(' | ')[0] for line in lines[2:5]] == ['| a: none', '| a: rope', '| b: rope']
  assert lines[4].startswith('| b: rope | 50.0 | 1.000x |')  # Rows of two files name theirs.
  with pytest.raises(errors.ConfigError, match=r"a.json has no row 'alibi' \(it has \['none', "
                     r"'rope'\]\)"):
    docs.rows(tmp_path, dict(options, rows=['a.json:alibi'], labels=['x']), spec)


def test_a_compare_block_reads_the_varied_values_from_the_row_names(tmp_path):
  """Rows named as benchmark.variants names them (the config's own value left out of the name)
  pivot into one line per `by` value; the ratio and its round range by hand."""
  import json  # pylint: disable=import-outside-toplevel
  row = lambda name, step, rounds, compile_s: {
      'name': name, 'step_s': step, 'rounds': rounds, 'compile_s': compile_s,
      'peak_bytes': 3 * 2**20}
  record = {'config': {'model': {'num_layers': 4, 'scan_layers': False}},
            'device_kind': 'cpu', 'backend': 'cpu', 'devices': 1, 'date': '2026-11-28',
            'steps': 4, 'rounds_count': 2,
            'rows': [row('rope', 0.010, [[0.010], [0.010]], 4.0),
                     row('rope[num_layers=12]', 0.030, [[0.030], [0.030]], 9.0),
                     row('rope[scan_layers=True]', 0.009, [[0.008], [0.010]], 3.0),
                     row('rope[scan_layers=True][num_layers=12]', 0.024, [[0.024], [0.027]],
                         3.5)]}
  path = tmp_path / 'scan.json'
  path.write_text(json.dumps(record), encoding='utf-8')
  lines = docs.compare(path, {'field': ['scan_layers'], 'by': ['num_layers']}, 'spec')
  assert lines[0].startswith('| num_layers | compile, scan_layers=False | compile, '
                             'scan_layers=True |')
  assert lines[2] == '| 4 | 4.0 s | 3.0 s | 10 | 9 | 0.90x (0.80-1.00) | 3 / 3 |'
  assert lines[3] == '| 12 | 9.0 s | 3.5 s | 30 | 24 | 0.80x (0.80-0.90) | 3 / 3 |'
  with pytest.raises(errors.ConfigError, match='not two values of dtype'):
    docs.compare(path, {'field': ['dtype'], 'by': ['num_layers']}, 'spec')
  # Words as the `by` values (a remap's methods), in order, and an evaluation step's note.
  record['step'] = 'eval'
  for r, name in zip(record['rows'], ('rope[method=string]', 'rope[method=dca]',
                                      'rope[method=string][scan_layers=True]',
                                      'rope[method=dca][scan_layers=True]')):
    r['name'] = name
  path.write_text(json.dumps(record), encoding='utf-8')
  lines = docs.compare(path, {'field': ['scan_layers'], 'by': ['method']}, 'spec')
  assert [line.split(' |')[0] for line in lines[2:4]] == ['| dca', '| string']
  assert lines[-1].endswith("compile time is the whole evaluation step's.")


def test_a_phases_block_gives_the_median_and_range_of_each_phase(tmp_path):
  import json  # pylint: disable=import-outside-toplevel
  run = lambda value, wall, compile_s: {'value': value, 'wall_s': wall,
                                        'phases': {'setup': 1.0, 'compilation': compile_s}}
  record = {'date': '2026-11-28', 'config': 'configs/synthetic.py:copy', 'field': 'x',
            'values': ['False', 'True'], 'set': [], 'eval_splits': 'validation', 'cpus': 2,
            'runs': [run('False', 10.0, 4.0), run('True', 8.0, 2.0), run('False', 12.0, 6.0),
                     run('True', 9.0, 3.0)]}
  path = tmp_path / 'point.json'
  path.write_text(json.dumps(record), encoding='utf-8')
  lines = docs.phases(path)
  assert lines[0] == '| x | runs | wall (s) | setup (s) | compilation (s) |'
  assert lines[2] == '| False | 2 | 11.0 (10.0-12.0) | 1.0 (1.0-1.0) | 5.0 (4.0-6.0) |'
  assert lines[3] == '| True | 2 | 8.5 (8.0-9.0) | 1.0 (1.0-1.0) | 2.5 (2.0-3.0) |'


def test_a_group_rate_block_gives_each_forms_rate_and_the_caches_ratio(tmp_path):
  import json  # pylint: disable=import-outside-toplevel
  record = [{'form': 'built', 'steps_per_s': 8.0, 'low': 4.5, 'high': 11.5, 'intervals': 9},
            {'form': 'row cache', 'steps_per_s': 200.0, 'low': 190.0, 'high': 280.0,
             'intervals': 9, 'made_with': {'commit': 'abc'}}]
  path = tmp_path / 'group_rate.json'
  path.write_text(json.dumps(record), encoding='utf-8')
  lines = run_tables.group_rate(path)
  assert lines[2:4] == ['| built | 8.0 | 4.5-11.5 | 9 |', '| row cache | 200.0 | 190.0-280.0 | 9 |']
  assert lines[-1].startswith("The row cache's rate over the rows built in the loop: 25.0x")
  path.write_text(json.dumps([{'form': 'built', 'steps_per_s': 8.0}]), encoding='utf-8')
  with pytest.raises(errors.ConfigError, match=r'group_rate\.json is not a scripts/group_rate'):
    run_tables.group_rate(path)
  for bad in ('8', 0.0):  # A rate that is not a number, or none to divide by.
    path.write_text(json.dumps([{**record[0], 'steps_per_s': bad}, record[1]]), encoding='utf-8')
    with pytest.raises(errors.ConfigError, match=r'the rates above 0'):
      run_tables.group_rate(path)


def test_a_block_naming_a_damaged_file_or_another_kind_of_record_is_one_error(tmp_path):
  """A truncated record, or a scripts/benchmark.py record named by a phases block (or a
  point_time.py one by a compare block), is one error naming the file and the script whose
  --out file the block needs."""
  (tmp_path / 'cut.json').write_text('{"rows": [', encoding='utf-8')
  with pytest.raises(errors.ConfigError, match=r'cut\.json cannot be read'):
    docs.phases(tmp_path / 'cut.json')
  (tmp_path / 'bench.json').write_text('{"config": {}, "rows": []}', encoding='utf-8')
  with pytest.raises(errors.ConfigError, match=r'bench\.json is not a scripts/point_time\.py '
                     r'record \(no runs, values, field, set, eval_splits, cpus, date\)'):
    docs.phases(tmp_path / 'bench.json')
  (tmp_path / 'point.json').write_text('{"runs": [], "values": []}', encoding='utf-8')
  with pytest.raises(errors.ConfigError, match=r'point\.json is not a scripts/benchmark\.py'):
    docs.compare(tmp_path / 'point.json', {'field': ['a'], 'by': ['b']}, 'spec')
  with pytest.raises(errors.ConfigError, match=r'missing\.json does not exist'):
    docs.phases(tmp_path / 'missing.json')


KEPT_REPORTS = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / 'docs' / 'results').glob(
    '**/records/sweep.json') if (p.parent.parent / 'report.md').is_file())


@pytest.mark.slow  # About a minute for all of them.
@pytest.mark.parametrize('records', KEPT_REPORTS)
def test_each_kept_report_is_what_its_records_give(records, tmp_path, monkeypatch):
  """A report.md committed beside its records is report.py's output on them now (its date
  line aside): regenerate it with the command its first lines give."""
  from scripts import report  # pylint: disable=import-outside-toplevel
  monkeypatch.chdir(ROOT)
  assert report.main([records, '--out', str(tmp_path / 'report.md')]) == 0
  body = lambda text: [line for line in text.splitlines() if not line.startswith('Generated ')]
  kept = (ROOT / os.path.dirname(records) / 'report.md').read_text(encoding='utf-8')
  assert body((tmp_path / 'report.md').read_text(encoding='utf-8')) == body(kept), (
      f'{os.path.dirname(records)}/report.md is stale. Fix: python scripts/report.py {records} '
      f'--out {os.path.dirname(records)}/report.md')
