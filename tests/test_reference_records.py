"""The reference runs' records: scripts/keep_run.py keeps what a page reads of a run (not its
checkpoints) with its own timed commands, whole and never over a kept record, and
scripts/run_tables.py's blocks compute their cells from those records (values checked by hand
against the fabricated records below); the reference scripts refuse a run that exists before
anything runs."""

import json
import os
import pathlib
import re
import subprocess

import pytest

from roformer import errors
from scripts import docs_from_records as docs
from scripts import keep_run
from scripts import run_tables

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _write(path: pathlib.Path, value) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  if isinstance(value, list):
    path.write_text(''.join(json.dumps(v) + '\n' for v in value), encoding='utf-8')
  else:
    path.write_text(json.dumps(value), encoding='utf-8')


def _lm_run(workdir: pathlib.Path) -> None:
  _write(workdir / 'config.json', {'model': {'type': 'mlm'}})
  _write(workdir / 'metrics.jsonl', [
      {'step': 10, 'split': 'train', 'loss': 9.0},
      {'step': 10, 'split': 'validation', 'loss': 7.25, 'accuracy': 0.125},
      {'step': 20, 'split': 'validation', 'loss': 6.5, 'accuracy': 0.25}])
  _write(workdir / 'eval_results.json', {'step': 20, 'splits': {'test': {
      'lengths': [{'length': 64, 'multiplier': 1, 'loss': 6.4375, 'accuracy': 0.2625},
                  {'length': 128, 'multiplier': 2, 'loss': 8.0, 'accuracy': 0.1}],
      'unigram_loss': 5.96875}}})
  (workdir / 'checkpoints' / '20').mkdir(parents=True)


def _steps(path: pathlib.Path) -> None:
  line = lambda run, phase, start, end, *args: '\t'.join([run, phase, start, end,
                                                          '\x1f'.join(args)]) + '\n'
  path.write_text(line('lm', 'train', '100.0', '130.5', 'python', 'train.py', '--workdir', '/r/lm')
                  + line('other', 'train', '1', '2', 'python', 'train.py')
                  + line('lm', 'train', '200', '235', 'python', 'train.py', '--workdir', '/r/lm')
                  + line('lm', 'eval', '300', '302.25', 'python', 'eval.py', '--config=a,b c'),
                  encoding='utf-8')


def test_a_kept_run_holds_its_records_and_only_its_own_timed_steps_not_checkpoints(tmp_path):
  _lm_run(tmp_path / 'runs' / 'lm')
  _steps(tmp_path / 'steps.tsv')
  target = tmp_path / 'records' / 'lm'
  keep_run.keep(str(tmp_path / 'runs' / 'lm'), str(target), str(tmp_path / 'steps.tsv'))
  assert sorted(os.listdir(target)) == ['config.json', 'eval_results.json', 'metrics.jsonl',
                                        'steps.json']
  assert sorted(os.listdir(target.parent)) == ['lm']  # Nothing staged is left beside it.
  record = json.loads((target / 'steps.json').read_text(encoding='utf-8'))
  assert record['steps'] == [
      {'phase': 'train', 'seconds': 30.5, 'command': 'python train.py --workdir /r/lm'},
      {'phase': 'train', 'seconds': 35.0, 'command': 'python train.py --workdir /r/lm'},
      {'phase': 'eval', 'seconds': 2.2, 'command': "python eval.py '--config=a,b c'"}]
  assert record['commit'].split('+')[0] == subprocess.run(
      ['git', '-C', str(ROOT), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
      check=True).stdout.strip()
  assert len(record['date']) == 10


def test_a_kept_translation_holds_the_decoded_split_its_evaluation_names(tmp_path):
  run = tmp_path / 'runs' / 'tr'
  _write(run / 'config.json', {'model': {'type': 'seq2seq'}})
  _write(run / 'metrics.jsonl', [{'step': 4, 'split': 'validation', 'bleu': 1.5}])
  _write(run / 'eval_results.json', {'step': 4, 'splits': {'test': {
      'bleu': 2.0, 'hypotheses': 'translations/test-step4.hyp.txt'}}})
  (run / 'translations').mkdir()
  for name, text in (('hyp', 'ein Haus\n'), ('ref', 'das Haus\n')):
    (run / 'translations' / f'test-step4.{name}.txt').write_text(text, encoding='utf-8')
  (run / 'translations' / 'test-step2.hyp.txt').write_text('old\n', encoding='utf-8')
  keep_run.keep(str(run), str(tmp_path / 'rec' / 'tr'), None)
  kept = tmp_path / 'rec' / 'tr' / 'translations'
  assert sorted(os.listdir(kept)) == ['test-step4.hyp.txt', 'test-step4.ref.txt']
  assert (kept / 'test-step4.ref.txt').read_text(encoding='utf-8') == 'das Haus\n'
  (run / 'translations' / 'test-step4.ref.txt').unlink()
  with pytest.raises(errors.ConfigError, match='names translations/test-step4.ref.txt, which'):
    keep_run.keep(str(run), str(tmp_path / 'rec' / 'again'), None)
  _write(run / 'eval_results.json', {'splits': {'test': {'hypotheses': '../../secret.hyp.txt'}}})
  with pytest.raises(errors.ConfigError, match='as hypotheses, outside the run'):
    keep_run.keep(str(run), str(tmp_path / 'rec' / 'again'), None)
  assert not (tmp_path / 'rec' / 'again').exists()


def test_keeping_refuses_a_kept_record_a_run_without_steps_or_a_damaged_steps_file(tmp_path):
  _lm_run(tmp_path / 'lm')
  _steps(tmp_path / 'steps.tsv')
  (tmp_path / 'records' / 'lm').mkdir(parents=True)
  (tmp_path / 'records' / 'lm' / 'mine.txt').write_text('kept', encoding='utf-8')
  with pytest.raises(errors.ConfigError, match='exists: kept records are not replaced'):
    keep_run.keep(str(tmp_path / 'lm'), str(tmp_path / 'records' / 'lm'),
                  str(tmp_path / 'steps.tsv'))
  assert os.listdir(tmp_path / 'records' / 'lm') == ['mine.txt']
  with pytest.raises(errors.ConfigError, match="notes no step of the run 'bert'"):
    keep_run.keep(str(tmp_path / 'lm'), str(tmp_path / 'new' / 'bert'),
                  str(tmp_path / 'steps.tsv'))
  (tmp_path / 'cut.tsv').write_text('lm\ttrain\t1\n', encoding='utf-8')
  with pytest.raises(errors.ConfigError, match=r'cut.tsv:1 holds 3 fields'):
    keep_run.keep(str(tmp_path / 'lm'), str(tmp_path / 'new' / 'lm'), str(tmp_path / 'cut.tsv'))
  (tmp_path / 'comma.tsv').write_text('lm\ttrain\t1,5\t2,5\tpython\n', encoding='utf-8')
  with pytest.raises(errors.ConfigError, match=r"comma.tsv:1 gives the times '1,5' and '2,5'"):
    keep_run.keep(str(tmp_path / 'lm'), str(tmp_path / 'new' / 'lm'), str(tmp_path / 'comma.tsv'))
  with pytest.raises(errors.ConfigError, match='holds no run'):
    keep_run.keep(str(tmp_path / 'nowhere'), str(tmp_path / 'new' / 'lm'), None)
  assert not (tmp_path / 'new').exists() or not os.listdir(tmp_path / 'new')


def _classifier(run: pathlib.Path, accuracy: float) -> None:
  _write(run / 'config.json', {'model': {'type': 'classifier'}})
  _write(run / 'metrics.jsonl', [{'step': 5, 'split': 'validation', 'accuracy': accuracy}])
  _write(run / 'eval_results.json', {'splits': {'test': {'accuracy': accuracy, 'f1': 0.5}}})


def test_a_runs_block_reads_each_cell_from_the_records(tmp_path):
  _lm_run(tmp_path / 'runs' / 'lm')
  _steps(tmp_path / 'steps.tsv')
  keep_run.keep(str(tmp_path / 'runs' / 'lm'), str(tmp_path / 'rec' / 'lm'),
                str(tmp_path / 'steps.tsv'))
  spec = (f'{tmp_path}/rec runs runs=lm labels="masked lm" curve=validation:loss steps=10;20 '
          'eval=test:loss;test:unigram_loss;test:accuracy percent=accuracy digits=2 '
          'time=train;eval')
  path, kind, options = docs.parse(spec)
  assert kind == 'runs'
  lines = run_tables.runs(pathlib.Path(path), options, spec)
  assert lines[0] == ('| run | validation loss at step 10 | 20 | test loss | test unigram_loss | '
                      'test accuracy | train time | eval time |')
  # The length of multiplier 1 (not 2), the split's own unigram loss, 30.5 + 35 s of training.
  assert lines[2] == '| masked lm | 7.25 | 6.50 | 6.44 | 5.97 | 26.2% | 1m06s | 2s |'
  assert lines[4].startswith('Made at ' + subprocess.run(
      ['git', '-C', str(ROOT), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
      check=True).stdout.strip()) and lines[4].endswith('/rec/RUN/steps.json.')
  with pytest.raises(errors.ConfigError, match=r'no validation loss at steps \[30\] \(it does '
                     r'at \[10, 20\]\)'):
    run_tables.runs(pathlib.Path(path), dict(options, steps=['10', '30']), spec)
  with pytest.raises(errors.ConfigError, match=r"holds no 'f1' in 'test' \(it holds "
                     r"\['accuracy', 'length', 'loss', 'multiplier', 'unigram_loss'\]\)"):
    run_tables.runs(pathlib.Path(path), dict(options, eval=['test:f1']), spec)
  lines = run_tables.runs(pathlib.Path(path), dict(options, eval=['test:loss@2'], time=[]),
                         spec)
  assert lines[0].endswith('| test loss at 2x |') and lines[2].endswith('| 8.00 |')
  with pytest.raises(errors.ConfigError, match=r"no 'test' evaluation at 4x \(it does at "
                     r"\[1, 2\]\)"):
    run_tables.runs(pathlib.Path(path), dict(options, eval=['test:loss@4']), spec)
  with pytest.raises(errors.ConfigError, match="records no 'export' step"):
    run_tables.runs(pathlib.Path(path), dict(options, time=['export']), spec)
  with pytest.raises(errors.ConfigError, match='is not SPLIT:KEY'):
    run_tables.runs(pathlib.Path(path), dict(options, eval=['loss']), spec)
  _classifier(tmp_path / 'rec' / 'rt', 0.6875)
  lines = run_tables.runs(pathlib.Path(path), {'runs': ['rt'], 'eval': ['test:accuracy',
                                                                       'test:f1']}, spec)
  assert lines[2] == '| rt | 0.688 | 0.500 |'
  assert lines[4] == ('Made at an unknown commit (rt) (kept without their commands, which the '
                      'text gives).')  # Kept without its steps.


def test_a_scaling_block_gives_each_doubling_and_the_ratio_at_the_longest(tmp_path):
  row = lambda kind, length, seconds, mib: {'attention': kind, 'length': length,
                                            'step_seconds': seconds, 'temp_bytes': mib * 2**20}
  _write(tmp_path / 'scaling.json', {'device': 'cpu:0', 'date': '2026-11-29', 'rows': [
      row('softmax', 512, 0.5, 100), row('favor', 512, 1.0, 150),
      row('softmax', 1024, 2.0, 400), row('favor', 1024, 1.5, 300),
      row('softmax', 2048, 6.0, 1200), row('favor', 2048, 3.0, 600)]})
  lines = run_tables.scaling(tmp_path / 'scaling.json')
  assert lines[0] == '| L | softmax s/step | favor s/step | softmax scratch | favor scratch |'
  assert lines[2] == '| 512 | 0.50 | 1.00 | 100 MiB | 150 MiB |'
  assert lines[4] == '| 2048 | 6.00 | 3.00 | 1,200 MiB | 600 MiB |'
  assert lines[6] == ('Per doubling of L: softmax time x3.0-4.0 and scratch x3.0-4.0; favor '
                      'time x1.5-2.0 and scratch x2.0-2.0.')
  assert lines[7] == 'At L = 2048, favor over softmax: time 0.50x, scratch 0.50x.'
  assert lines[8] == 'cpu:0, 2026-11-29.'
  _write(tmp_path / 'other.json', {'rows': []})
  with pytest.raises(errors.ConfigError, match='is not a scripts/attention_scaling.py record'):
    run_tables.scaling(tmp_path / 'other.json')


@pytest.mark.parametrize('script,args,run', [
    ('mlm_reference.sh', ['1'], 'mlm_bert'), ('mlm_reference.sh', ['3'], 'rt_scratch'),
    ('performer_reference.sh', ['1'], 'softmax300'),
    ('performer_reference.sh', ['4'], 'performer_features'),
    ('lm_reference.sh', [], 'lm_sinusoidal'),
    ('translation_reference.sh', [], 'translate_sinusoidal')])
def test_a_reference_script_refuses_a_kept_run_before_anything_runs(tmp_path, script, args, run):
  (tmp_path / 'records' / run).mkdir(parents=True)
  done = subprocess.run(['bash', f'scripts/{script}', str(tmp_path / 'runs'),
                         str(tmp_path / 'records'), *args], cwd=ROOT, capture_output=True,
                        text=True, env=dict(os.environ, PYTHON='false'), check=False)
  assert done.returncode == 1, done.stderr
  assert done.stderr.startswith(f"error: {tmp_path}/runs/{run}, its steps file or "
                                f'{tmp_path}/records/{run} exists'), done.stderr
  assert not (tmp_path / 'runs').exists() and os.listdir(tmp_path / 'records') == [run]


def test_a_step_notes_its_command_and_returns_its_status_so_a_failure_stops_the_script(tmp_path):
  """scripts/reference_steps.sh's `step` times and notes every command, failed or not, and
  returns its status: under `set -e` a failed step ends the script, and `if step ...` lets a
  run that is expected to stop (performer_reference.sh's step 4) be kept."""
  script = ('set -euo pipefail; runs=$1 PY=false; source scripts/reference_steps.sh; '
            'if step r train false; then echo went on; else echo stopped; fi; '
            'step r eval true; step r eval false; echo never')
  done = subprocess.run(['bash', '-c', script, 'bash', str(tmp_path)], cwd=ROOT,
                        capture_output=True, text=True, check=False)
  assert done.returncode == 1, done.stderr
  assert [l for l in done.stdout.splitlines() if not l.startswith('===')] == ['stopped']
  noted = (tmp_path / 'r.steps.tsv').read_text().splitlines()
  assert [line.split('\t')[1::3] for line in noted] == [['train', 'false'], ['eval', 'true'],
                                                          ['eval', 'false']]


def test_the_hf_workflow_refuses_existing_runs_or_records_before_any_step(tmp_path):
  """scripts/hf_workflow.sh starts every step fresh and never writes over kept records: an
  existing RUNS or RECORDS, or a missing argument, is one error line before any step runs
  (PYTHON=false would fail the first)."""
  (tmp_path / 'runs').mkdir()
  (tmp_path / 'records').mkdir()
  for args, status, says in (
      (['runs', 'new'], 1, f'error: {tmp_path}/runs exists; every step starts fresh.'),
      (['new', 'records'], 1, f'error: {tmp_path}/records exists. Fix: give a new RECORDS'),
      (['new'], 2, 'error: give RUNS and RECORDS.')):
    done = subprocess.run(['bash', 'scripts/hf_workflow.sh', *(str(tmp_path / a) for a in args)],
                          cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHON='false'), check=False)
    assert done.returncode == status and done.stderr.startswith(says), done.stderr
    assert done.stderr.count('\n') == 1 and not done.stdout, done.stderr
    assert sorted(os.listdir(tmp_path)) == ['records', 'runs'] and not os.listdir(
        tmp_path / 'runs')


def test_a_sinks_block_gives_each_label_s_mean_and_sample_std_over_its_runs(tmp_path):
  run = lambda mass, heads: {'label': 'copy,rope', 'mass': mass, 'per_head': heads,
                             'uniform': [0.25, 0.25]}
  (tmp_path / 'sinks.json').write_text(json.dumps([
      run([0.1, 0.3], [[0.1, 0.2], [0.3, 0.5]]), run([0.2, 0.5], [[0.4, 0.1], [0.5, 0.6]])]),
                                       encoding='utf-8')
  lines = run_tables.sinks(tmp_path / 'sinks.json')
  # Layer 0: mean 0.15, sample std 0.0707; the largest heads 0.2 and 0.4: 0.3 +- 0.141.
  assert lines[4] == '| copy,rope | 2 | 0.150 ± 0.071 | 0.400 ± 0.141 | 0.250 |'
  assert lines[10] == '| copy,rope | 2 | 0.300 ± 0.141 | 0.550 ± 0.071 | 0.250 |'
  (tmp_path / 'cut.json').write_text('[{"label": ', encoding='utf-8')
  for name in ('cut.json', 'missing.json'):
    with pytest.raises(errors.ConfigError, match='is not a scripts/attention_sinks.py record'):
      run_tables.sinks(tmp_path / name)


@pytest.mark.parametrize('script', ['scheme_costs.sh', 'torch_reference.sh'])
def test_a_benchmark_script_refuses_kept_records_before_any_benchmark(tmp_path, script):
  (tmp_path / 'costs').mkdir()
  done = subprocess.run(['bash', f'scripts/{script}', str(tmp_path / 'costs')], cwd=ROOT,
                        capture_output=True, text=True, env=dict(os.environ, PYTHON='false'),
                        check=False)
  assert done.returncode == 1 and done.stderr.startswith(f'error: {tmp_path}/costs exists.')
  assert not (tmp_path / 'costs.partial').exists()


def test_a_step_run_through_bash_is_kept_with_its_arguments_quoted_once_and_never_twice(tmp_path):
  """reference_steps.sh end to end: `step` notes a command whose arguments hold a comma and a
  space, `keep` keeps it with the commit the script started at, and `fresh` then refuses the run
  while its steps file exists (a second run would add its steps to the first's)."""
  workdir = tmp_path / 'runs' / 'lm'
  _lm_run(workdir)
  script = ('runs=$1 records=$2 PY=python; cd "$3"; source scripts/reference_steps.sh; '
            'step lm train true "a,b" "c d"; keep lm; fresh lm')
  done = subprocess.run(['bash', '-c', f'set -euo pipefail; {script}', 'bash',
                         str(tmp_path / 'runs'), str(tmp_path / 'rec'), str(ROOT)], cwd=ROOT,
                        capture_output=True, text=True, check=False)
  assert done.returncode == 1, done.stderr
  assert 'its steps file or' in done.stderr and done.stderr.startswith('error: ')
  record = json.loads((tmp_path / 'rec' / 'lm' / 'steps.json').read_text(encoding='utf-8'))
  assert [s['command'] for s in record['steps']] == ["true a,b 'c d'"]
  assert record['commit'].split('+')[0] == subprocess.run(
      ['git', '-C', str(ROOT), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
      check=True).stdout.strip()


def test_a_keep_cut_short_leaves_nothing_beside_the_records(tmp_path, monkeypatch):
  _lm_run(tmp_path / 'lm')
  copies = []
  def copy(source, target):
    copies.append(source)
    if len(copies) == 2:
      raise OSError('disk full')
    pathlib.Path(target).write_bytes(pathlib.Path(source).read_bytes())
  monkeypatch.setattr(keep_run.keep_records.shutil, 'copyfile', copy)
  with pytest.raises(OSError, match='disk full'):
    keep_run.keep(str(tmp_path / 'lm'), str(tmp_path / 'rec' / 'lm'), None)
  assert os.listdir(tmp_path / 'rec') == []


def test_the_mlm_script_refuses_a_step_number_given_as_records(tmp_path):
  done = subprocess.run(['bash', 'scripts/mlm_reference.sh', str(tmp_path / 'runs'), '4'],
                        cwd=ROOT, capture_output=True, text=True,
                        env=dict(os.environ, PYTHON='false'), check=False)
  assert done.returncode == 2 and done.stderr.startswith('error: RECORDS is 4, a step number.')
  assert not (tmp_path / 'runs').exists()


def test_a_precision_block_gives_each_band_and_way_of_computing_the_angles(tmp_path):
  way = lambda top, mean, logit: {'max_rel_element': top, 'mean_rel_element': mean,
                                  'max_logit_error_over_sqrt_d': logit}
  _write(tmp_path / 'p.json', {'device': 'cpu', 'backend': 'cpu', 'jax': '0.10.2',
                               'head_dim': 64, 'bands': [
                                   {'positions': [0, 1024], 'f32': way(0.0038, 0.0009, 0.005),
                                    'bf16': way(2.0, 0.25, 1.5)}]})
  lines = run_tables.precision(tmp_path / 'p.json')
  assert lines[0] == '| positions | f32: max / mean, logit | bf16: max / mean, logit |'
  assert lines[2] == ('| 0-1,024 | 3.80e-03 / 9.00e-04, 5.00e-03 | 2.00e+00 / 2.50e-01, '
                      '1.50e+00 |')
  assert lines[4] == 'cpu (cpu, jax 0.10.2), head dimension 64.'
  _write(tmp_path / 'q.json', {'bands': []})
  with pytest.raises(errors.ConfigError, match='is not a scripts/rope_precision.py record'):
    run_tables.precision(tmp_path / 'q.json')


def test_a_torch_block_gives_each_record_s_sides_under_the_line_that_names_the_run(tmp_path):
  record = {'date': '2026-11-29', 'commit': 'abc1234', 'model': 'causal', 'preset': 'small',
            'steps': 4, 'rounds': 2,
            'jax': {'malloc': 'reuse', 'peak_flops': 2.0e11},
            'torch': {'model': 'GPTNeoXForCausalLM', 'framework': 'torch 2.13.0+cpu',
                      'threads': 2, 'attention': 'sdpa', 'malloc': 'default'},
            'summary': {
                'none': {'step_s': 0.1, 'tokens_per_s': 10240.0, 'mfu': 0.5, 'vs_torch': 1.2,
                         'vs_torch_rounds': [1.1, 1.3], 'vs_none': 1.0,
                         'vs_none_rounds': [1.0, 1.0]},
                'rope': {'step_s': 0.105, 'tokens_per_s': 9752.4, 'mfu': 0.476,
                         'vs_torch': 1.143, 'vs_torch_rounds': [1.0, 1.2], 'vs_none': 1.05,
                         'vs_none_rounds': [1.04, 1.06]},
                'torch': {'step_s': 0.12, 'tokens_per_s': 8533.3, 'mfu': 0.417}}}
  _write(tmp_path / 'small.json', record)
  lines = run_tables.torch_runs(tmp_path)
  assert lines[0] == ('`small`: causal at `small` against GPTNeoXForCausalLM (torch 2.13.0+cpu, '
                      '2 threads, sdpa attention); malloc JAX reuse, PyTorch default; 4 steps '
                      'per side in 2 rounds, taking turns; MFU against 200 GFLOP/s measured in '
                      'the run; 2026-11-29, at abc1234.')
  assert lines[5] == ('| JAX `rope` | 105.0 | 9,752 | **1.14x** (1.10x, 1.00-1.20) | 1.050x '
                      '(1.050x, 1.040-1.060) | 47.6% |')
  assert lines[6] == '| PyTorch | 120.0 | 8,533 | - | - | 41.7% |'
  del record['summary']
  _write(tmp_path / 'small.json', record)
  with pytest.raises(errors.ConfigError, match='is not a scripts/compare_torch.py record'):
    run_tables.torch_runs(tmp_path)


@pytest.mark.parametrize('option,value', [('steps', 'abc'), ('digits', 'x')])
def test_a_runs_block_option_that_is_not_a_number_is_one_error_naming_it(tmp_path, option,
                                                                         value):
  _lm_run(tmp_path / 'lm')
  options = {'runs': ['lm'], 'curve': ['validation:loss'], 'steps': ['10'], option: [value]}
  with pytest.raises(errors.ConfigError, match=f'{option}={value!r} is not a number'):
    run_tables.runs(tmp_path, options, 'spec')


def test_the_scheme_costs_script_times_every_attention_kind_and_option_it_does_not_exclude():
  """A new attention kind or option is timed by scripts/scheme_costs.sh, or named there as left
  out (FAVOR+, NoPE's temperature, Gemma's and Granite's query scales and the clamp of q, k and
  v, with the reason in its header)."""
  from roformer import attention_options  # pylint: disable=import-outside-toplevel
  text = (ROOT / 'scripts' / 'scheme_costs.sh').read_text(encoding='utf-8')
  # The baseline, and the five its header names.
  left_out = {'softmax', 'favor', 'nope_temperature', 'logit_scale', 'softmax_scale', 'qkv_clip'}
  registered = set(attention_options.KINDS) | set(attention_options.OPTIONS)
  missing = [n for n in sorted(registered - left_out) if not re.search(rf'\b{n}\b', text)]
  assert not missing, missing
  assert all(name in text for name in (
      'FAVOR+', "NoPE's temperature", "Gemma's query scale", "Granite's (softmax_scale",
      "MPT's clamp (qkv_clip"))


def _translation(run: pathlib.Path, hypotheses: list[str], references: list[str]) -> None:
  _write(run / 'config.json', {'model': {'type': 'seq2seq'}})
  _write(run / 'eval_results.json', {'splits': {'test': {
      'bleu': 1.0, 'hypotheses': 'translations/test-step9.hyp.txt'}}})
  for name, lines in (('hyp', hypotheses), ('ref', references)):
    path = run / 'translations' / f'test-step9.{name}.txt'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')


def test_a_bootstrap_block_scores_each_kept_translation_against_the_first(tmp_path):
  references = ['the cat sat on the mat today', 'a dog ran in the park quickly'] * 4
  _translation(tmp_path / 'poor', ['the cat', 'a dog'] * 4, references)
  _translation(tmp_path / 'good', references, references)
  spec = f'{tmp_path} bootstrap runs=poor;good labels=sin;rope samples=40 seed=3'
  lines = docs.render(spec, {}).split('\n')
  assert lines[0].startswith('| run | test BLEU (bootstrap mean ± 95% interval) |')
  # Every resample of the perfect run scores 100; none reaches its gap: p = 1 / (40 + 1).
  assert lines[3] == '| rope | 100.00 (100.00 ± 0.00) | 100.00 (100.00 ± 0.00) | 0.024 | 0.024 |'
  assert lines[2].startswith('| sin | ') and lines[2].endswith(' | - | - |')
  assert lines[5].startswith("sacreBLEU's paired bootstrap over the 8 test sentences, 40 "
                             'resamples drawn with seed 3') and 'bs:40|seed:3' in lines[5]
  _translation(tmp_path / 'other', references, references[::-1])
  with pytest.raises(errors.ConfigError, match='other was scored against other test references'):
    run_tables.bootstrap(tmp_path, {'runs': ['poor', 'other']}, 'spec')
  with pytest.raises(errors.ConfigError, match='names two runs or more'):
    run_tables.bootstrap(tmp_path, {'runs': ['poor']}, 'spec')
  with pytest.raises(errors.ConfigError, match='1 labels for 2 runs'):
    run_tables.bootstrap(tmp_path, {'runs': ['poor', 'good'], 'labels': ['a']}, 'spec')
  for option in ({'samples': ['9']}, {'seed': ['0']}):
    with pytest.raises(errors.ConfigError, match='at least 40 resamples .* a seed of 1 or more'):
      run_tables.bootstrap(tmp_path, {'runs': ['poor', 'good'], **option}, 'spec')
  with pytest.raises(errors.ConfigError, match='holds no eval_results.best.json'):
    run_tables.bootstrap(tmp_path, {'runs': ['poor', 'good'], 'file': ['eval_results.best.json']},
                         'spec')
  (tmp_path / 'good' / 'translations' / 'test-step9.ref.txt').unlink()
  with pytest.raises(errors.ConfigError, match='test-step9.ref.txt is missing'):
    run_tables.bootstrap(tmp_path, {'runs': ['poor', 'good']}, 'spec')
