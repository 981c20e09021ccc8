"""scripts/sweep.py and scripts/report.py: grids, names, resuming, failures, the report."""

import concurrent.futures
import json
import math
import re
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import hypothesis
import hypothesis.strategies
import processes
import pytest
from configs import synthetic as synthetic_config
from configs.sweeps import context_extension
from configs.sweeps import frontier as frontier_sweep
from configs.sweeps import options as options_sweep
from configs.sweeps import length as length_sweep
from configs.sweeps import positions as positions_sweep
from roformer import cli
from roformer import config_args
from roformer import config_schema
from roformer import errors
from roformer import metrics as metrics_lib
from roformer import provenance
from roformer import resolve
from roformer import saved_config
from roformer import sweeps
from roformer.data import row_cache
from roformer.data import synthetic
from scripts import keep_records
from scripts import report
from scripts import sweep as sweep_script
from scripts import sweep_plan
from scripts import sweep_points

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_sweep(tmp_path, body: str) -> str:
  path = tmp_path / 'my_sweep.py'
  path.write_text(body)
  return str(path)


def test_default_sweep_is_eleven_schemes_at_two_seeds():
  sweep = sweeps.load('configs/sweeps/positions.py', '')
  assert sweep.config == 'configs/lm.py'
  assert [p.name for p in sweep.points[:2]] == ['kind=none,seed=0', 'kind=sinusoidal,seed=0']
  assert sweep.points[11].name == 'kind=none,seed=1'
  assert len(sweep.points) == 22
  kinds = {p.fields['model.position.kind'] for p in sweep.points}
  assert kinds == {'none', 'sinusoidal', 'learned', 'shaw', 't5', 'alibi', 'xl', 'kerple', 'fire',
                   'cope', 'rope'}
  rope, alibi = sweep.points[-1], sweep.points[-6]  # Seed 1 of rope and alibi.
  assert rope.fields['model.position.kind'] == 'rope'
  evals_of = lambda p: sorted(n for n, ev in sweep.evals.items() if sweeps.applies(ev, p))
  assert evals_of(rope) == ['', 'rope_linear', 'rope_ntk', 'rope_yarn']
  assert evals_of(alibi) == ['']
  smoke = sweeps.load('configs/sweeps/positions.py:smoke,rope,alibi')
  assert [p.name for p in smoke.points] == ['kind=rope,seed=0', 'kind=alibi,seed=0']
  assert smoke.points[0].fields['train.steps'] < sweep.points[0].fields['train.steps']
  with pytest.raises(ValueError, match='unknown kinds'):
    positions_sweep.get_sweep('smoke,ropee')


def test_names_values_and_commands(tmp_path):
  assert sweeps.format_value((1, 2, 4)) == '(1,2,4)'
  assert sweeps.format_value((8,)) == '(8,)'
  assert sweeps.format_value(('rope', 'none')) == "('rope','none')"  # As the parser reads it.
  # Last components that clash keep enough of the path to tell them apart.
  keys = ['model.position.kind', 'model.attention.kind', 'seed']
  assert sweeps.point_name({'model.position.kind': 'rope', 'model.attention.kind': 'favor',
                            'seed': 1}, keys) == 'position.kind=rope,attention.kind=favor,seed=1'
  path = write_sweep(tmp_path, 'def get_sweep(arg=""):\n  return {"points": [{"train.learning_'
                     'rate": 1e-3}, {"train.learning_rate": 3e-4}], "overrides": {"train.steps"'
                     ': 5}}\n')
  sweep = sweeps.load(path, 'configs/lm.py')
  assert [p.name for p in sweep.points] == ['learning_rate=0.001', 'learning_rate=0.0003']
  cmd = sweeps.train_command(sweep, sweep.points[0], '/w/p')
  assert cmd[1:] == ['train.py', '--config=configs/lm.py', '--workdir=/w/p',
                     '--config.train.steps=5', '--config.train.learning_rate=0.001',
                     '--eval_splits=validation,test']  # The plain evaluation, in process.
  assert sweep.evals == {'': {}}  # One plain evaluation by default.
  assert sweeps.eval_command(sweep, sweep.points[0], '/w/p', '')[1:] == [
      'eval.py', '--workdir=/w/p', '--splits=validation,test', '--out=eval_results.json']


@pytest.mark.parametrize('body, match', [
    ('x = 1\n', 'no get_sweep'),
    ('def get_sweep(arg=""):\n  return {"points": []}\n', 'non-empty list'),
    ('def get_sweep(arg=""):\n  return {"points": [{"seed": 0}], "grid": 1}\n', 'unknown keys'),
    ('def get_sweep(arg=""):\n  return {"points": [{"seed": 0}, {"seed": 0}]}\n', 'same fields'),
    ('def get_sweep(arg=""):\n  return {"points": [{"seed": 0}], "evals": {"a b": {}}}\n',
     'plain name'),
    ('def get_sweep(arg=""):\n  return {"points": [{"model.position.kind": "rope"}], "evals": '
     '{"x": {"when": {"model.positon.kind": "rope"}}}}\n',
     "'model.positon.kind'.*never run.*did you mean 'model.position.kind'"),
    ('def get_sweep(arg=""):\n  return {"points": [{"seed": 0}], "overrides": {"model.position'
     '.kind": "rope"}, "evals": {"x": {"when": {"model.positon.kind": "rope"}}}}\n',
     "neither the sweep's overrides nor any point sets.*did you mean 'model.position.kind'"),
])
def test_bad_sweep_files(tmp_path, body, match):
  with pytest.raises(errors.ConfigError, match=match):
    sweeps.load(write_sweep(tmp_path, body), 'configs/lm.py')


def test_a_when_on_a_field_of_the_sweeps_overrides_matches_every_point(tmp_path):
  sweep = sweeps.load(write_sweep(tmp_path, 'def get_sweep(arg=""):\n  return {"points": ['
                                  '{"seed": 0}, {"seed": 1}], "overrides": {"model.position.kind":'
                                  ' "rope"}, "evals": {"x": {"when": {"model.position.kind": '
                                  '"rope"}}}}\n'), 'configs/lm.py')
  assert all(sweeps.applies(sweep.evals['x'], point) for point in sweep.points)


def test_bad_arguments_exit_before_running(tmp_path, capsys):
  assert sweep_script.main(['--sweep', str(tmp_path / 'none.py'), '--workdir',
                            str(tmp_path / 'w')]) == 2
  assert 'does not exist' in capsys.readouterr().err
  (tmp_path / 'file').write_text('')
  assert sweep_script.main(['--sweep', 'configs/sweeps/positions.py', '--workdir',
                            str(tmp_path / 'file')]) == 2
  assert 'is a file' in capsys.readouterr().err
  assert sweep_script.main(['--sweep', 'configs/sweeps/positions.py', '--config',
                            'configs/nope.py', '--workdir', str(tmp_path / 'w')]) == 2
  assert sweep_script.main(['--sweep', 'configs/sweeps/positions.py', '--workdir',
                            str(tmp_path / 'w'), "--extra_train_flags=--config.seed='1"]) == 2
  assert 'No closing quotation. Fix: close the quote.' in capsys.readouterr().err
  assert not (tmp_path / 'w').exists()
  assert report.main([str(tmp_path / 'w')]) == 2
  assert f'{tmp_path}/w does not exist.' in capsys.readouterr().err


def test_a_report_of_what_is_not_a_sweep_says_what_it_is_and_what_to_give(tmp_path, capsys):
  run = tmp_path / 'study' / 'records' / 'kind=rope,seed=0'
  run.mkdir(parents=True)
  (run / 'config.json').write_text('{}')
  (tmp_path / 'file').write_text('')
  single = tmp_path / 'single'  # A run of no sweep.
  single.mkdir()
  (single / 'config.json').write_text('{}')
  (run.parent / 'sweep.json').write_text('{}')
  for given, said in ((run, f'is one run of the sweep in {run.parent}. Fix: python '
                            f'scripts/report.py {run.parent}'),
                      (single, 'is one run, not a sweep (report.py compares the runs of a '
                       "sweep's --workdir). Fix: read its eval_results*.json, or plot its curves "
                       f'with python scripts/plot_curves.py {single} --out curves.png.'),
                      (tmp_path / 'file', 'is a file.'),
                      (tmp_path / 'study', 'holds no run itself, but records/ in it does. Fix: '
                       f'python scripts/report.py {tmp_path / "study" / "records"}')):
    assert report.main([str(given)]) == 2
    assert said in capsys.readouterr().err
  (single / 'eval_results.rope_yarn.json').write_text('{}')  # evaluate_extensions.sh's.
  assert report.main([str(single)]) == 2
  assert (f'table its evaluations under each scaling and remap with python '
          f'scripts/extension_table.py {single}') in capsys.readouterr().err


def test_dry_run_prints_one_command_per_group_of_seeds(tmp_path, capsys):
  assert sweep_script.main(['--sweep', 'configs/sweeps/positions.py', '--workdir',
                            str(tmp_path / 's'), '--dry_run',
                            '--extra_train_flags=--distributed']) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 11  # 11 schemes, each trained at seeds 0 and 1 by one train.py.
  rope = [line for line in lines if 'kind=rope,seed={seed}' in line][0]
  steps = [shlex.split(part) for part in rope.split(' && ')]
  # Training evaluates each seed as eval.py would; the three scaled evaluations run apart.
  assert [s[1] for s in steps] == ['train.py'] + ['eval.py'] * 6
  assert '--seeds=0,1' in steps[0] and '--eval_splits=validation' in steps[0]
  assert '--distributed' in steps[0] and '--config.model.position.kind=rope' in steps[0]
  assert not any(s.startswith('--config.seed') for s in steps[0])
  assert f'--workdir={tmp_path}/s/kind=rope,seed=1' in steps[6]
  assert '--out=eval_results.rope_yarn.json' in steps[6]
  assert sweep_script.main(['--sweep', 'configs/sweeps/positions.py', '--workdir',
                            str(tmp_path / 's'), '--dry_run', '--no_group_seeds']) == 0
  assert len(capsys.readouterr().out.strip().splitlines()) == 22
  assert not (tmp_path / 's').exists()  # A dry run writes nothing.
  # The driver checks every point without a JAX backend (on a GPU host, one would hold the
  # memory its runs need): a platform that does not exist is never started.
  done = subprocess.run([sys.executable, 'scripts/sweep.py', '--sweep',
                         'configs/sweeps/context_extension.py:smoke', '--workdir',
                         str(tmp_path / 's'), '--dry_run'], cwd=ROOT, capture_output=True,
                        text=True, check=False, env={**os.environ, 'JAX_PLATFORMS': 'nosuch'})
  assert done.returncode == 0 and 'train.py' in done.stdout, done.stderr[-2000:]


def test_a_sweep_that_asks_for_it_trains_each_seed_in_its_own_process(tmp_path, capsys):
  """passkey_extension.py says `group_seeds: False` (an hour-long base per seed): its seeds'
  bases run as separate processes, so two cores train two of them at once."""
  assert sweep_script.main(['--sweep', 'configs/sweeps/passkey_extension.py:base,seed=1,seed=2',
                            '--workdir', str(tmp_path / 's'), '--dry_run']) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 2
  for seed, line in zip((1, 2), lines):
    train = shlex.split(line.split(' && ')[0])
    assert f'--workdir={tmp_path}/s/base,seed={seed}' in train
    assert f'--config.seed={seed}' in train and not any(a.startswith('--seeds') for a in train)
  bad = write_sweep(tmp_path, "def get_sweep():\n  return {'config': 'configs/lm.py', "
                    "'points': [{'seed': 0}], 'group_seeds': 'no'}\n")
  with pytest.raises(errors.ConfigError, match="group_seeds is 'no'. Fix: True or False"):
    sweeps.load(bad)


def _smoke_sweep(tmp_path, data_dir, kinds: str, extra_points: str = '',
                 evals=('', 'rope_linear', 'rope_ntk', 'rope_yarn'),
                 lengths=positions_sweep.LENGTHS) -> str:
  """positions.py:smoke,KINDS on the session's data, with only `evals`, `extra_points` and
  evaluation at `lengths` times the training length."""
  return write_sweep(tmp_path, f'''
from configs.sweeps import positions
def get_sweep(arg=''):
  sweep = positions.get_sweep('smoke,{kinds}')
  sweep['overrides']['data.data_dir'] = {data_dir!r}
  sweep['overrides']['eval.length_multipliers'] = {tuple(lengths)!r}
  sweep['points'] += [{extra_points}]
  sweep['evals'] = {{k: v for k, v in sweep['evals'].items() if k in {tuple(evals)!r}}}
  return sweep
''')


def _run(args) -> subprocess.CompletedProcess:
  return processes.run(['scripts/sweep.py'] + args, cwd=ROOT, env=processes.env(devices=1))


@pytest.mark.parametrize('resume', [False, pytest.param(True, marks=pytest.mark.slow)])
def test_sweep_runs_resumes_reports_and_survives_a_failed_point(tmp_path, data_dir, resume,
                                                                capsys):
  """Two points, one failing: the other finishes and the report reads its files. Resuming an
  interrupted point (-m slow; the stages a point still needs: test_an_evaluation_of_a_stopped_
  run_is_redone) continues its training and redoes only the evaluation it lost."""
  spec = _smoke_sweep(tmp_path, data_dir, 'rope',
                      "{'model.position.kind': 'alibi', 'seed': 1, 'train.learning_rate': 1e30}",
                      evals=('', 'rope_yarn'), lengths=(1, 2))  # -m slow: all of them.
  root = str(tmp_path / 'sweep')
  first = _run(['--sweep', spec, '--workdir', root, '--parallel', '2'])
  assert first.returncode == 1, first.stdout + first.stderr  # One point failed ...
  failed = [line for line in first.stdout.splitlines() if 'FAILED' in line]
  assert len(failed) == 1 and failed[0].startswith(
      '[sweep] FAILED kind=alibi,seed=1,learning_rate=1e+30 at train (exit 1): ')
  assert 'not finite' in failed[0]  # ... naming the cause from its log,
  assert '1/2 points done, 1 failed' in first.stdout  # ... and the other finished.
  assert sorted(os.listdir(root)) == ['kind=alibi,seed=1,learning_rate=1e+30',
                                      'kind=rope,seed=0', 'logs', 'sweep.json', 'timings.jsonl']
  # The run's time is kept: one line, both groups timed, none longer than the whole.
  [timed] = metrics_lib.read_jsonl(os.path.join(root, 'timings.jsonl'))
  assert (timed['ended'], timed['points'], timed['ran_here'], timed['processes']) == (
      'failed', 2, 2, 2)
  assert timed['failed'] == ['kind=alibi,seed=1,learning_rate=1e+30']
  assert sorted(timed['groups_s']) == ['kind=alibi,seed=1,learning_rate=1e+30',
                                       'kind=rope,seed=0']
  assert 0 < max(timed['groups_s'].values()) <= timed['wall_s']
  assert sorted(timed['ran']) == timed['failed'] + ['kind=rope,seed=0']
  assert timed['made_with']['commit'] == provenance.commit() and 'jax' in timed['made_with'][
      'packages']
  rope = os.path.join(root, 'kind=rope,seed=0')
  assert sorted(f for f in os.listdir(rope) if f.startswith('eval_results')) == [
      'eval_results.json', 'eval_results.rope_yarn.json']
  with open(os.path.join(rope, 'eval_results.json')) as f:
    plain = json.load(f)['splits']['validation']['lengths']
  records = metrics_lib.read_jsonl(os.path.join(rope, 'metrics.jsonl'))
  train_loss = [r for r in records if r['split'] == 'train'][-1]['loss']

  # Report: the point's row from its own files, the scaled evaluation as its own curve.
  assert report.main([root]) == 0
  text = open(os.path.join(root, 'report.md')).read()
  loss = plain[0]['loss']
  row = [line for line in text.splitlines() if line.startswith('| kind=rope,seed=0 ')]
  assert row and f'| {train_loss:.4f} | {loss:.4f} | {math.exp(loss):.2f} |' in row[0]
  assert [m['multiplier'] for m in plain] == [1, 2]
  scaled = [line for line in text.splitlines() if line.startswith('| rope + yarn scaling |')]
  assert len(scaled) == 1 and len(scaled[0].split('|')) == 5  # 1x, 2x.
  for png in ('validation_loss.png', 'length_extrapolation.png'):
    with open(os.path.join(root, png), 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n'

  # The kept records (no checkpoints) make the same report.
  kept = str(tmp_path / 'kept')
  assert keep_records.main([root, kept]) == 0
  assert not os.path.exists(os.path.join(kept, 'kind=rope,seed=0', 'checkpoints'))
  assert report.main([kept]) == 0
  body = lambda report_text: [line for line in report_text.splitlines()
                              if not line.startswith('Generated ')]  # Its date.
  assert body(open(os.path.join(kept, 'report.md')).read()) == body(text.replace(root, kept))
  assert metrics_lib.read_jsonl(os.path.join(kept, 'timings.jsonl')) == [timed]
  kept_files = sorted(_files_under(kept))  # A sweep run there is refused, writing nothing.
  assert sweep_script.main(['--sweep', spec, '--workdir', kept]) == 2
  assert 'holds kept records (finished points without checkpoints' in capsys.readouterr().err
  assert sorted(_files_under(kept)) == kept_files

  # The sweep file changed since: refused before anything runs, naming the point and field.
  changed = str(tmp_path / 'changed.py')
  with open(spec) as f, open(changed, 'w') as out:
    out.write(f.read().replace("  sweep['points'] +=", "  sweep['overrides']['model.d_model'] "
                               "= 48\n  sweep['points'] +="))
  written = {path: os.path.getmtime(path) for path in _files_under(root)}
  assert sweep_script.main(['--sweep', changed, '--workdir', root]) == 2
  assert re.search(r'point kind=rope,seed=0 .*changed fields \(saved vs now\): '
                   r'model.d_model: 64 vs 48', capsys.readouterr().err)
  assert {path: os.path.getmtime(path) for path in _files_under(root)} == written

  # Its checkpoints deleted once finished, the point stands on its records: nothing left to
  # run, and the sweep is not refused; an evaluation it lacks can no longer be made: refused.
  aside = str(tmp_path / 'aside')
  os.makedirs(aside)
  shutil.move(os.path.join(rope, 'checkpoints'), aside)
  sweep = sweeps.load(spec)
  point = next(p for p in sweep.points if p.name == 'kind=rope,seed=0')
  assert sweeps.done(sweep, point, rope) and sweeps.stages(sweep, point, rope) == []
  assert sweep_script.main(['--sweep', spec, '--workdir', root, '--dry_run']) == 0
  shutil.move(os.path.join(rope, 'eval_results.rope_yarn.json'), aside)
  assert sweep_script.main(['--sweep', spec, '--workdir', root, '--dry_run']) == 2
  assert re.search(r'point kind=rope,seed=0 .*finished training and its checkpoints were '
                   r'deleted, so its evaluations rope_yarn can no longer be made',
                   capsys.readouterr().err)
  for name in ('checkpoints', 'eval_results.rope_yarn.json'):
    shutil.move(os.path.join(aside, name), rope)

  if not resume:
    return
  # An interrupted point (final checkpoint and plain evaluation gone) resumes from step 15;
  # the evaluation that still matches the final step is not redone.
  shutil.rmtree(os.path.join(rope, 'checkpoints', '30'))
  os.remove(os.path.join(rope, 'eval_results.json'))
  again = _run(['--sweep', _smoke_sweep(tmp_path, data_dir, 'rope', evals=('', 'rope_yarn'),
                                        lengths=(1, 2)), '--workdir', root])
  assert again.returncode == 0, again.stdout + again.stderr
  with open(os.path.join(root, 'logs', 'kind=rope,seed=0.log')) as f:
    log = f.read()
  assert 'checkpoints step 15.' in log  # 'Resuming from ... step 15.'
  assert log.count('--out=eval_results.rope_yarn.json') == 1
  assert os.path.exists(os.path.join(rope, 'eval_results.json'))
  times = os.path.join(root, 'timings.jsonl')
  resumed = metrics_lib.read_jsonl(times)[-1]  # A line of its own: the one point it ran.
  assert (resumed['ended'], resumed['points'], resumed['ran']) == ('finished', 1,
                                                                   ['kind=rope,seed=0'])
  finished = _run(['--sweep', _smoke_sweep(tmp_path, data_dir, 'rope', evals=('', 'rope_yarn'),
                                           lengths=(1, 2)), '--workdir', root]).stdout
  assert finished.endswith('[sweep] 1/1 points done\n[sweep] 1 point was already finished.\n'
                           f'[sweep] report: python scripts/report.py {root}\n'), finished
  assert metrics_lib.read_jsonl(times)[-1] == resumed  # Nothing ran: no line.


def test_the_check_before_a_sweep_takes_a_continuations_settings_from_its_source(tmp_path):
  """context_extension.py:smoke's linear continuation stopped before its first checkpoint
  (metrics and config.json written, the original length taken from its source) passes the
  check as train.py would resume it; with another model saved there it is refused; before its
  source has trained it is left to its own run."""
  sweep = sweeps.load('configs/sweeps/context_extension.py:smoke')
  points = {p.name: p for p in sweep.points}
  root = tmp_path / 'ext'
  sweep_plan.check_points('ext.py', sweep, str(root))  # Nothing trained yet.
  (root / 'base').mkdir(parents=True)
  saved_config.save(sweep_plan.point_config(sweep, points['base'], str(root / 'base')),
                    str(root / 'base'))
  workdir = root / 'continue_linear'
  workdir.mkdir()
  config = sweep_plan.point_config(sweep, points['continue_linear'], str(workdir))
  resolve.take_from_source(config)  # As train.py saved it when the continuation started.
  assert config.model.position.rope.scaling.original_length == 32
  saved_config.save(config, str(workdir))
  (workdir / 'metrics.jsonl').write_text('{"step": 5, "split": "train", "loss": 3.0}\n')
  sweep_plan.check_points('ext.py', sweep, str(root))
  config.model.d_ff = 96
  saved_config.save(config, str(workdir))
  with pytest.raises(errors.ConfigError, match=r'ext.py, point continue_linear .*holds the '
                     r'metrics of another run .*model.d_ff: 96 vs 64'):
    sweep_plan.check_points('ext.py', sweep, str(root))


def test_the_check_before_a_sweep_counts_the_extra_train_flags(tmp_path):
  """A point started with --extra_train_flags='--config.model.dtype=bfloat16' is the same run
  when the same command is given again; without the flag it is another."""
  from roformer import saved_config  # pylint: disable=import-outside-toplevel
  sweep = sweeps.load('configs/sweeps/context_extension.py:smoke')
  base = [p for p in sweep.points if p.name == 'base']
  sweep = sweeps.Sweep(sweep.config, base, sweep.overrides, sweep.evals, sweep.eval_splits)
  extra = ['--config.model.dtype=bfloat16', '--distributed']
  workdir = tmp_path / 'base'
  workdir.mkdir()
  saved_config.save(sweep_plan.point_config(sweep, base[0], str(workdir), extra), str(workdir))
  (workdir / 'metrics.jsonl').write_text('{"step": 5, "split": "train", "loss": 3.0}\n')
  sweep_plan.check_points('ext.py', sweep, str(tmp_path), extra)
  with pytest.raises(errors.ConfigError, match="model.dtype: 'bfloat16' vs 'float32'"):
    sweep_plan.check_points('ext.py', sweep, str(tmp_path))


def test_a_failed_points_message_is_its_own_stages_not_what_ran_after(tmp_path):
  """A group's log: seed=1 diverges while training, then seed=0's evaluation runs. The FAILED
  line of seed=1 is its own line of the training's output, not the evaluation's last line; a
  run alone gives its `error:` line."""
  log = tmp_path / 'group.log'
  train = ('\n$ python train.py --workdir=/r/p,seed={seed} --seeds=0,1\n'
           '06:00:01 /r/p,seed=0: step 3 | loss 2.0\n'
           '06:00:02 /r/p,seed=1: step 3: the loss is not finite. Fix: lower it.\n'
           'error: 1 of 2 runs failed: /r/p,seed=1: step 3: the loss is not finite\n')
  log.write_text(train + '\n$ python eval.py --workdir=/r/p,seed=0\nvalidation 256 3.1 22.1\n')
  start = len(train.split('\n', 2)[0]) + len(train.split('\n', 2)[1]) + 2  # After the command.
  assert sweep_script.failure_message(str(log), '/r/p,seed=1', start) == (
      'step 3: the loss is not finite. Fix: lower it.')
  assert sweep_script.failure_message(str(log), '/r/p,seed=1') == (  # From the log's start.
      'step 3: the loss is not finite. Fix: lower it.')
  alone = tmp_path / 'alone.log'
  alone.write_text('\n$ python train.py --workdir=/r/q\n06:00:01 step 1\nerror: '
                   + 'x' * 500 + '\n')
  assert sweep_script.failure_message(str(alone), '/r/q') == 'x' * 397 + '...'


def _files_under(root) -> list[str]:
  return [os.path.join(d, f) for d, _, names in os.walk(root) for f in names]


def test_a_point_that_train_py_would_refuse_stops_the_sweep_before_anything_runs(tmp_path,
                                                                                 capsys):
  spec = write_sweep(tmp_path, """
def get_sweep(arg=''):
  return {'config': 'configs/synthetic.py:passkey', 'overrides': {'train.steps': 100},
          'points': [{'seed': 0}, {'seed': 1, 'model.d_model': 30}]}
""")
  for dry_run in ([], ['--dry_run']):
    assert sweep_script.main(['--sweep', spec, '--workdir', str(tmp_path / 'w')] + dry_run) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: {spec}, point seed=1,d_model=30 ') and err.count('\n') == 1
    assert 'config.model.d_model=30' in err
  assert not (tmp_path / 'w').exists()


def _fake_sweep(root, seeds, resumed=True, label=''):
  """A sweep directory as scripts/sweep.py leaves it, with made-up file contents."""
  points = {}
  for seed in seeds:
    workdir = root / f'base,seed={seed}'
    (workdir / 'checkpoints' / '10').mkdir(parents=True)
    (workdir / 'checkpoints' / '10' / 'state').write_bytes(b'x' * 1000)
    (workdir / 'tokenizer.model').write_bytes(b'y' * 100)
    (workdir / 'config.json').write_text(json.dumps({'seed': seed, 'root': str(root)}))
    if resumed:
      (workdir / 'config.resume-10.json').write_text(json.dumps({'seed': seed, 'steps': 10}))
      (workdir / 'eval_results.rope_yarn.json').write_text(json.dumps({'seed': seed}))
    (workdir / 'metrics.jsonl').write_text(f'{{"step": 10, "root": "{root}"}}\n')
    (workdir / 'environment.jsonl').write_text('{"step": 0, "commit": "abc1234"}\n')
    points[f'base,seed={seed}'] = {'seed': seed, 'root': str(root)}
  (root / 'logs').mkdir()
  (root / 'sweep.json').write_text(json.dumps(
      {'config': 'c.py', 'sweep': 's.py', 'points': points,
       'labels': {name: label for name in points} if label else {}}))


def test_more_steps_given_as_extra_train_flags_make_a_finished_point_train_on(tmp_path):
  """--extra_train_flags=--config.train.steps=N reaches the points' last step: a point
  finished at its old last step is trained on, not skipped as finished."""
  sweep = sweeps.from_dict({'points': [{'seed': 0}], 'config': 'configs/test.py'},
                           'configs/sweeps/mine.py')
  point = sweep.points[0]
  workdir = tmp_path / point.name
  (workdir / 'checkpoints' / '10').mkdir(parents=True)
  (workdir / 'config.json').write_text(json.dumps({'train': {'steps': 10}}))
  (workdir / 'eval_results.json').write_text(json.dumps({'step': 10}))
  assert sweeps.stages(sweep, point, str(workdir)) == []  # Finished at its 10 steps.
  for extra in (['--distributed', '--config.train.steps=20'], ['--config.train.steps', '20']):
    longer = sweep_plan.with_extra_steps(sweep, extra)
    assert longer.points[0].fields['train.steps'] == 20
    assert [label for label, _ in sweeps.stages(sweep, longer.points[0], str(workdir))] == [
        'train']
  assert sweep_plan.with_extra_steps(sweep, ['--config.train.steps=x']) == sweep  # Named later.


def test_only_an_evaluated_run_without_checkpoints_counts_as_finished_and_it_feeds_no_point(
    tmp_path):
  """A run with no checkpoint counts as finished (its checkpoints deleted) only with an
  evaluation of its last step, written once its last checkpoint was: one killed before its
  first save, whose metrics reach the last step, trains again. A point that would start from a
  finished run without checkpoints is refused before anything runs, naming both."""
  sweep = sweeps.from_dict({'config': 'configs/test.py', 'evals': {}, 'points': [
      {'name': 'base'}, {'name': 'longer', 'init_from': '{sweep}/base', 'data.seq_len': 64}]},
      'configs/sweeps/mine.py')
  base, root = sweep.points[0], tmp_path / 'sweep'
  workdir = root / 'base'
  (root / 'logs').mkdir(parents=True)
  workdir.mkdir()
  saved_config.save(sweep_plan.point_config(sweep, base, str(workdir)), str(workdir))
  steps = saved_config.load(str(workdir)).train.steps
  (workdir / 'metrics.jsonl').write_text(json.dumps({'step': steps, 'split': 'train'}) + '\n')
  assert not sweeps.finished_without_checkpoints(str(workdir))  # Killed before its save.
  assert not sweeps.trained(str(workdir))
  (workdir / 'eval_results.json').write_text(json.dumps({'step': steps}))
  assert sweeps.finished_without_checkpoints(str(workdir)) and sweeps.trained(str(workdir))
  with pytest.raises(errors.ConfigError, match=r'point longer .*it starts from base, whose '
                     r'checkpoints were deleted once it finished, so it cannot start. Fix: '
                     r'restore .*base/checkpoints'):
    sweep_plan.check_points('configs/sweeps/mine.py', sweep, str(root))


def test_kept_records_of_two_sweeps_join_without_checkpoints(tmp_path):
  """Seeds swept in two places join in one records directory: each point's config, metrics
  and evaluations are copied byte for byte, nothing else is, sweep.json holds both sweeps'
  points and labels, and a point swept again replaces its earlier record whole (the files the
  new run lacks are gone)."""
  first, second, kept = tmp_path / 'first', tmp_path / 'second', tmp_path / 'kept'
  _fake_sweep(first, (0, 1), label='early')
  _fake_sweep(second, (1, 2), resumed=False)
  assert keep_records.keep(str(first), str(kept)) == ['base,seed=0', 'base,seed=1']
  assert sorted(os.listdir(kept / 'base,seed=1')) == [
      'config.json', 'config.resume-10.json', 'environment.jsonl', 'eval_results.rope_yarn.json',
      'metrics.jsonl']
  with pytest.raises(errors.ConfigError, match=r"base,seed=1 keeps a run of another config "
                     r"\(root: .*first vs .*second; kept vs new\).*Fix: .*--replace"):
    keep_records.keep(str(second), str(kept))  # Nothing kept of second: seed=2 neither.
  assert sorted(os.listdir(kept)) == ['base,seed=0', 'base,seed=1', 'sweep.json']
  assert keep_records.keep(str(second), str(kept), replace=True) == ['base,seed=1', 'base,seed=2']
  assert sorted(os.listdir(kept)) == ['base,seed=0', 'base,seed=1', 'base,seed=2', 'sweep.json']
  for seed, source in ((0, first), (1, second), (2, second)):
    name = f'base,seed={seed}'
    assert sorted(os.listdir(kept / name)) == sorted(
        f for f in os.listdir(source / name) if f.endswith(('.json', '.jsonl')))
    for file in os.listdir(kept / name):
      assert (kept / name / file).read_bytes() == (source / name / file).read_bytes()
  record = json.loads((kept / 'sweep.json').read_text())
  assert {name: point['root'] for name, point in record['points'].items()} == {
      'base,seed=0': str(first), 'base,seed=1': str(second), 'base,seed=2': str(second)}
  assert record['labels'] == {'base,seed=0': 'early', 'base,seed=1': 'early'}


def test_a_kept_record_is_replaced_by_a_run_that_holds_all_it_held_and_else_refused(tmp_path):
  """A point kept again replaces its record when the new run has its config, steps and
  evaluations (a run resumed to its end, kept again); a record of more steps or evaluations
  is refused, naming what would be lost, unless --replace."""
  sweep, kept = tmp_path / 'sweep', tmp_path / 'kept'
  _fake_sweep(sweep, (0,))
  point = sweep / 'base,seed=0'
  assert keep_records.main([str(sweep), str(kept)]) == 0
  with open(point / 'metrics.jsonl', 'a') as f:  # Resumed to step 20 and evaluated again.
    f.write('{"step": 20}\n')
  (point / 'eval_results.json').write_text('{}')
  assert keep_records.keep(str(sweep), str(kept)) == ['base,seed=0']
  assert (kept / 'base,seed=0' / 'eval_results.json').exists()
  os.remove(point / 'eval_results.json')
  with pytest.raises(errors.ConfigError, match='keeps the evaluations eval_results.json, which '
                     'the new run lacks'):
    keep_records.keep(str(sweep), str(kept))
  (point / 'metrics.jsonl').write_text('{"step": 5}\n')
  with pytest.raises(errors.ConfigError, match='keeps 20 steps trained, where the new run has 5'):
    keep_records.keep(str(sweep), str(kept))
  assert (kept / 'base,seed=0' / 'eval_results.json').exists()  # Nothing lost.
  assert keep_records.main([str(sweep), str(kept), '--replace']) == 0
  assert sorted(os.listdir(kept / 'base,seed=0')) == sorted(
      f for f in os.listdir(point) if f.endswith(('.json', '.jsonl')))


def test_a_kept_record_is_the_same_run_wherever_its_files_lived(tmp_path):
  """Keeping again the same run made on another machine (its own documents at other paths, the
  same documents as its train_data.json records) replaces the record; other documents under
  the same glob are another config, refused by their record, and so is another tokenizer file
  of the same name. Records without train_data.json compare the globs, as before."""
  sweep, kept = tmp_path / 'sweep', tmp_path / 'kept'
  _fake_sweep(sweep, (0,))
  point = sweep / 'base,seed=0'

  def ran_at(where: str, documents: str) -> None:
    config = json.loads((point / 'config.json').read_text())
    config['data'] = {'files': f'{where}/corpus/*.txt', 'tokenizer': '/shared/tok/piece.model',
                      'data_dir': f'{where}/cache'}
    (point / 'config.json').write_text(json.dumps(config))
    (point / 'train_data.json').write_text(json.dumps({'': documents}))

  ran_at('/home/a', '120 documents, sha256 0123456789abcdef0123')
  assert keep_records.keep(str(sweep), str(kept)) == ['base,seed=0']
  assert 'train_data.json' in os.listdir(kept / 'base,seed=0')
  ran_at('/scratch/b', '120 documents, sha256 0123456789abcdef0123')
  assert keep_records.keep(str(sweep), str(kept)) == ['base,seed=0']
  ran_at('/scratch/b', '121 documents, sha256 fedcba9876543210fedc')
  with pytest.raises(errors.ConfigError, match=r'keeps a run of another config \(train '
                     r'documents: 120 documents, sha256 0123.* vs 121 documents'):
    keep_records.keep(str(sweep), str(kept))
  ran_at('/home/a', '120 documents, sha256 0123456789abcdef0123')
  config = json.loads((point / 'config.json').read_text())
  config['data']['tokenizer'] = '/shared/other/piece.model'  # Another file of the same name.
  (point / 'config.json').write_text(json.dumps(config))
  with pytest.raises(errors.ConfigError, match=r'data.tokenizer: /shared/tok/piece.model vs '
                     r'/shared/other/piece.model'):
    keep_records.keep(str(sweep), str(kept))
  ran_at('/scratch/b', '120 documents, sha256 0123456789abcdef0123')  # As kept last.
  os.remove(point / 'train_data.json')  # Kept before runs recorded their documents: by glob.
  os.remove(kept / 'base,seed=0' / 'train_data.json')
  assert keep_records.keep(str(sweep), str(kept)) == ['base,seed=0']


def test_kept_records_of_one_sweep_leave_out_the_points_of_another_in_its_workdir(tmp_path):
  """A workdir two sweeps share keeps, with --sweep, only the points those sweeps name: their
  files and their entries in sweep.json."""
  sweep, kept = tmp_path / 'sweep', tmp_path / 'kept'
  _fake_sweep(sweep, (0, 1, 2), label='x')
  assert keep_records.keep(str(sweep), str(kept), {'base,seed=1', 'other,seed=0'}) == [
      'base,seed=1']
  assert sorted(os.listdir(kept)) == ['base,seed=1', 'sweep.json']
  record = json.loads((kept / 'sweep.json').read_text())
  assert set(record['points']) == set(record['labels']) == {'base,seed=1'}
  with pytest.raises(errors.ConfigError, match='none of the points --sweep names'):
    keep_records.keep(str(sweep), str(tmp_path / 'elsewhere'), {'other,seed=0'})
  names = keep_records.named_points(['configs/sweeps/frontier.py:smoke'])
  assert names == {p.name for p in sweeps.load('configs/sweeps/frontier.py:smoke').points}


@pytest.mark.parametrize('case', ['not a sweep', 'its own directory', "another sweep's runs",
                                  'no run yet'])
def test_keeping_records_refuses_what_it_would_harm_with_one_line(tmp_path, case):
  sweep, kept = tmp_path / 'sweep', tmp_path / 'kept'
  if case == 'not a sweep':
    sweep.mkdir()
    expected = f'error: {sweep} has no sweep.json'
  elif case == 'its own directory':
    _fake_sweep(sweep, (0,))
    kept, expected = sweep, f"error: {sweep} is the sweep's own directory"
  elif case == "another sweep's runs":
    _fake_sweep(sweep, (0,))
    _fake_sweep(kept, (0,))
    expected = f"error: {kept} holds a sweep's runs"
  else:
    sweep.mkdir()
    (sweep / 'sweep.json').write_text('{}')
    expected = f'error: {sweep} holds no run yet'
  before = {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file()}
  done = processes.run(['scripts/keep_records.py', str(sweep), str(kept)], cwd=ROOT)
  lines = done.stderr.strip().splitlines()
  assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith(expected), done.stderr
  assert {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file()} == before


def test_report_calls_a_point_done_only_once_its_last_step_is_evaluated(tmp_path):
  """With or without checkpoints: an evaluation of an earlier step (a run resumed for more
  steps) or none leaves the point incomplete; one trained to its last step but stopped before
  its evaluation says so."""
  workdir = tmp_path / 'p'
  workdir.mkdir()
  config = config_schema.default_config().to_dict()
  config['train']['steps'] = 10
  (workdir / 'config.json').write_text(json.dumps(config))
  (workdir / 'metrics.jsonl').write_text(
      json.dumps({'split': 'train', 'step': 10, 'loss': 1.0}) + '\n')
  status = lambda: sweep_points.read_point(str(workdir), {})['status']
  # Trained to its last step, stopped before its evaluation: kept records (no checkpoints)
  # read it from the metrics, a workdir from its last checkpoint.
  assert status() == 'trained, not evaluated (10/10 steps)'
  (workdir / 'checkpoints' / '5').mkdir(parents=True)
  assert status() == 'incomplete (10/10 steps)'
  (workdir / 'checkpoints' / '10').mkdir()
  assert status() == 'trained, not evaluated (10/10 steps)'
  (workdir / 'eval_results.json').write_text(json.dumps({'step': 10, 'splits': {}}))
  assert status() == 'done'
  config['train']['steps'] = 20
  (workdir / 'config.resume-10.json').write_text(json.dumps(config))
  assert status() == 'incomplete (10/20 steps)'


@pytest.mark.slow
def test_smoke_sweep_of_every_scheme(tmp_path, data_dir):
  root = str(tmp_path / 'sweep')
  done = _run(['--sweep', _smoke_sweep(tmp_path, data_dir, ''), '--workdir', root,
               '--parallel', '2'])
  assert done.returncode == 0, done.stdout + done.stderr
  assert '11/11 points done' in done.stdout
  assert report.main([root]) == 0
  text = open(os.path.join(root, 'report.md')).read()
  for kind in positions_sweep.KINDS:
    assert f'| {kind} | 1 |' in text
  for scaling in positions_sweep.ROPE_SCALINGS:
    assert f'| rope + {scaling} scaling |' in text


def test_an_evaluation_of_a_stopped_run_is_redone(tmp_path):
  workdir = tmp_path / 'p'
  (workdir / 'checkpoints' / '5').mkdir(parents=True)
  (workdir / 'config.json').write_text(json.dumps({'train': {'steps': 10}}))
  (workdir / 'eval_results.json').write_text(json.dumps({'step': 5}))
  sweep = sweeps.Sweep('configs/lm.py', [sweeps.Point('p', {}, {})], {}, {'': {}}, ('test',))
  assert not sweeps.trained(str(workdir))
  (label, train), = sweeps.stages(sweep, sweep.points[0], str(workdir))
  assert label == 'train' and '--eval_splits=test' in train  # Training evaluates again.
  (workdir / 'checkpoints' / '10').mkdir()
  assert [label for label, _ in sweeps.stages(sweep, sweep.points[0], str(workdir))] == [
      'eval (plain)']
  (workdir / 'eval_results.json').write_text(json.dumps({'step': 10}))
  assert sweeps.stages(sweep, sweep.points[0], str(workdir)) == []


def test_points_named_in_values_run_after_the_points_they_name(tmp_path):
  """A value '{sweep}/NAME' is that point's workdir: the runner substitutes the sweep's
  directory, and the point needs NAME (listed before it) to finish first."""
  path = write_sweep(tmp_path, """
def get_sweep(arg=''):
  return {'points': [{'name': 'base', 'seed': 0},
                     {'name': 'next', 'init_from': '{sweep}/base', 'data.seq_len': 64}],
          'evals': {'': {}, 'late': {'when': {'name': 'next'}}}}
""")
  sweep = sweeps.load(path, 'configs/lm.py')
  base, after = sweep.points
  assert (base.name, base.needs, after.name, after.needs) == ('base', (), 'next', ('base',))
  assert '--config.init_from=/runs/s/base' in sweeps.train_command(sweep, after, '/runs/s/next')
  assert [n for n, ev in sweep.evals.items() if sweeps.applies(ev, after)] == ['', 'late']
  assert [n for n, ev in sweep.evals.items() if sweeps.applies(ev, base)] == ['']
  for points, match in [("[{'name': 'a', 'init_from': '{sweep}/b'}, {'name': 'b'}]",
                         'not a point listed before it'),
                        ("[{'name': 'a b'}]", 'not a plain name'),
                        ("[{'name': 'a'}, {'name': 'a', 'seed': 1}]", 'repeated')]:
    bad = write_sweep(tmp_path, f"def get_sweep(arg=''):\n  return {{'points': {points}}}\n")
    with pytest.raises(errors.ConfigError, match=match):
      sweeps.load(bad, 'configs/lm.py')


def test_length_sweep_is_every_scheme_on_each_default_task_at_five_seeds():
  sweep = sweeps.load('configs/sweeps/length.py')
  schemes = length_sweep.KINDS + tuple(length_sweep.VARIANTS)
  assert sweep.config == 'configs/synthetic.py'
  assert len(sweep.points) == 3 * 5 * len(schemes)
  assert {p.fields['data.name'] for p in sweep.points} == {
      'synthetic/passkey', 'synthetic/associative_recall', 'synthetic/copy'}
  recall = sweeps.load('configs/sweeps/length.py:associative_recall,alibi')
  assert [p.name for p in recall.points] == [f'associative_recall,alibi,seed={s}'
                                             for s in range(5)]
  passkey = synthetic_config.get_config('passkey')
  for point in sweep.points:  # Each trains as the task's own config does.
    task = point.fields['data.name'].split('/')[1]
    own = synthetic_config.get_config(task)
    assert point.fields['data.seq_len'] == own.data.seq_len
    for field, value in point.fields.items():
      if field.startswith('train.') and field != 'train.random_positions':
        assert own.train[field[6:]] == value, (point.name, field)
    assert {f[6:] for f in point.fields if f.startswith('train.')} - {'random_positions'} >= {
        k for k in own.train if own.train[k] != passkey.train[k]}
    if point.fields['seed']:
      continue  # The seeds' command lines differ only in the seed.
    # What train.py builds from the point's command line: the task's own data and training
    # fields, whatever the sweep's config file gives by default.
    _, flags = cli.split_argv(sweeps.train_command(sweep, point, '/w/' + point.name)[1:])
    ran = config_args.load(sweep.config, flags)
    own.train.random_positions = ran.train.random_positions
    assert ran.train.to_dict() == own.train.to_dict(), point.name
    assert ran.data.to_dict() == own.data.to_dict(), point.name
  assert {p.fields['seed'] for p in sweep.points} == {0, 1, 2, 3, 4}
  assert {p.fields['model.position.kind'] for p in sweep.points} == set(length_sweep.KINDS)
  random = [p for p in sweep.points if p.name == 'copy,rope+random,seed=1'][0]
  assert random.fields['train.random_positions'] == 8 * random.fields['data.seq_len']
  assert random.fields['data.name'] == 'synthetic/copy'
  assert sweep.overrides['eval.length_multipliers'] == (1, 2, 4, 8)
  smoke = sweeps.load('configs/sweeps/length.py:smoke,passkey,xl')
  assert [p.name for p in smoke.points] == ['passkey,xl,seed=0']
  three = sweeps.load('configs/sweeps/length.py:seed=0,seed=1,seed=2')  # The 126-point sweep.
  assert [p.name for p in three.points] == [p.name for p in sweep.points
                                            if p.fields['seed'] < 3]
  assert len(three.points) == 126
  with pytest.raises(ValueError, match=r'seed=N takes a whole number'):
    length_sweep.get_sweep('copy,seed=first')
  with pytest.raises(ValueError, match='unknown parts'):
    length_sweep.get_sweep('smoke,sorting')


def test_frontier_sweep_is_the_new_schemes_and_their_baselines_on_four_tasks():
  """Every scheme on every task at five seeds, each point a config that passes the checks;
  the budget axis trains five schemes at half, once and twice each task's steps."""
  sweep = sweeps.load('configs/sweeps/frontier.py')
  assert len(sweep.points) == 4 * 5 * len(frontier_sweep.SCHEMES)
  assert {p.fields['data.name'] for p in sweep.points} == {
      'synthetic/' + t for t in ('passkey', 'associative_recall', 'copy', 'flip_flop')}
  for point in sweep.points[:len(sweep.points) // 5]:  # The first seed: every task and scheme.
    _, flags = cli.split_argv(sweeps.train_command(sweep, point, '/w/' + point.name)[1:])
    resolve.validate(config_args.load(sweep.config, flags))
  swa = [p for p in sweep.points if p.name == 'copy,rnope_swa,seed=2'][0]
  assert swa.fields['model.layer_windows'] == (8, 0)  # A quarter of copy's 32 tokens.
  budget = sweeps.load('configs/sweeps/frontier.py:budget,passkey,path')
  assert [(p.name, p.fields['train.steps']) for p in budget.points[:3]] == [
      ('passkey,path,steps=0.5x,seed=0', 200), ('passkey,path,seed=0', 400),
      ('passkey,path,steps=2x,seed=0', 800)]
  assert len(sweeps.load('configs/sweeps/frontier.py:budget').points) == 5 * 2 * 3 * 5
  assert not {p.fields.get('model.position.fox.gate_bias_init') for p in sweep.points} - {None}
  gate = sweeps.load('configs/sweeps/frontier.py:passkey,fox_gate5').points  # Only when named.
  assert [(p.name, p.fields['model.position.fox.gate_bias_init']) for p in gate] == [
      (f'passkey,fox_gate5,seed={s}', 5.0) for s in range(5)]
  _, flags = cli.split_argv(sweeps.train_command(sweep, gate[0], '/w/g')[1:])
  assert config_args.load(sweep.config, flags).model.position.fox.gate_bias_init == 5.0
  with pytest.raises(ValueError, match='unknown parts'):
    frontier_sweep.get_sweep('pathh')


def test_options_sweep_is_the_new_attention_options_beside_their_baselines():
  """Every scheme on passkey, two RULER tasks and flip-flop at five seeds, each a valid
  config; a point it shares with frontier.py has the same name and fields."""
  sweep = sweeps.load('configs/sweeps/options.py')
  assert len(sweep.points) == 4 * 5 * len(options_sweep.SCHEMES)
  for point in sweep.points[:len(sweep.points) // 5]:
    _, flags = cli.split_argv(sweeps.train_command(sweep, point, '/w/' + point.name)[1:])
    resolve.validate(config_args.load(sweep.config, flags))
  frontier = {p.name: p.fields for p in sweeps.load('configs/sweeps/frontier.py').points}
  shared = [p for p in sweep.points if p.name in frontier]
  assert {p.name.split(',')[1] for p in shared} == {'rope', 'none', 'alibi', 'fox', 'path',
                                                    'stick_breaking'}
  assert all(p.fields == frontier[p.name] for p in shared)
  diff = [p for p in sweep.points if p.name == 'niah_multikey,rope+diff,seed=1'][0]
  assert diff.fields['model.attention.differential'] is True
  yarn = sweep.evals['rope_yarn']  # RoPE with YaRN, for PoPE's claim: plain rope's runs only.
  assert {p.name.split(',')[1] for p in sweep.points
          if sweeps.applies(yarn, p)} == {'rope'}
  _, flags = cli.split_argv(sweeps.eval_command(
      sweep, [p for p in sweep.points if p.name == 'passkey,rope,seed=0'][0], '/w/p',
      'rope_yarn')[1:])
  evaluated = config_args.load(sweep.config, flags)
  assert evaluated.model.position.rope.scaling.kind == 'yarn'
  assert evaluated.eval.scale_rope_to_length


def test_report_gives_each_training_budget_of_a_scheme_its_own_line():
  points = [{**_synthetic_point('a', seed, (0.5, 0.1), (0.9, 0.4)), 'steps': steps}
            for seed in (0, 1) for steps in (200, 400)]
  points.append({**_synthetic_point('b', 0, (0.5, 0.1), (0.9, 0.4)), 'steps': 400})
  assert sorted(report.accuracy_table(points)['copy']) == ['a (steps=200)', 'a (steps=400)', 'b']


@pytest.mark.slow  # The sweep run above and the report's tables from hand-made points by default.
def test_length_sweep_smoke_runs_and_reports_accuracy_per_length(tmp_path):
  root = str(tmp_path / 'length')
  done = _run(['--sweep', 'configs/sweeps/length.py:smoke,passkey,rope', '--workdir', root])
  assert done.returncode == 0, done.stdout + done.stderr
  # Its rows were built once beforehand (training, and validation at each length), and read.
  assert 'synthetic rows built' in done.stdout
  assert len(os.listdir(os.path.join(root, '.rows'))) == 5
  log_text = open(os.path.join(root, 'logs', 'passkey,rope,seed=0.log')).read()
  assert log_text.count(f'read from {root}/.rows/') == 5
  assert report.main([root]) == 0
  text = open(os.path.join(root, 'report.md')).read()
  assert '## passkey: share of rows answered exactly' in text
  assert '| scheme | seeds | 48 | 96 | 192 | 384 |' in text
  assert 'Passkey accuracy per depth of the key' in text
  with open(os.path.join(root, 'accuracy_passkey.png'), 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'


@pytest.mark.slow  # test_context_extension.py continues a base by default.
def test_context_extension_smoke_continues_the_base_and_reports_each_length(tmp_path,
                                                                             data_dir):
  spec = write_sweep(tmp_path, f"""
from configs.sweeps import context_extension
from configs.sweeps import frontier as frontier_sweep
from configs.sweeps import options as options_sweep
def get_sweep(arg=''):
  sweep = context_extension.get_sweep('smoke')
  sweep['overrides']['data.data_dir'] = {data_dir!r}
  return sweep
""")
  root = str(tmp_path / 'extension')
  done = _run(['--sweep', spec, '--workdir', root])
  assert done.returncode == 0, done.stdout + done.stderr
  continued = metrics_lib.read_jsonl(os.path.join(root, 'continue_linear', 'metrics.jsonl'))
  assert min(r['step'] for r in continued if r['split'] == 'validation') == 0  # Before training.
  assert report.main([root]) == 0
  text = open(os.path.join(root, 'report.md')).read()
  assert '| scheme | 32 | 128 | 256 |' in text  # The base's and the continued runs' lengths.
  assert '| rope + linear scaling | - |' in text
  assert '| rope (kind=linear, factor=4.0, continued from=base) | - |' in text
  assert os.path.exists(os.path.join(root, 'position_loss.png'))
  assert context_extension.get_sweep('')['points'][1]['init_from'] == '{sweep}/base'


def _synthetic_point(scheme, seed, rows_exact, tokens_right):
  return {'scheme': scheme, 'options': '', 'seed': seed, 'task': 'synthetic/copy',
          'status': 'done', 'evals': {'': {
              n: {'sequence_accuracy': e, 'accuracy': t}
              for n, e, t in zip((32, 64), rows_exact, tokens_right)}}}


def test_report_separates_schemes_only_where_every_seed_is_apart_on_each_measure():
  """Hand-made copy results: `a` beats `b` on whole rows at 32 on every seed (0.5-0.6 against
  0.1-0.2) but their ranges overlap at 64; on answer tokens the ranges overlap at 32 and `a` is
  apart at 64. The tables show mean ± sample std over the seeds; the separations give the
  difference of means, its bootstrap interval and the exact p (1/3 at 2 against 2 seeds)."""
  points = [_synthetic_point('a', 0, (0.5, 0.1), (0.9, 0.40)),
            _synthetic_point('a', 1, (0.6, 0.3), (0.7, 0.45)),
            _synthetic_point('b', 0, (0.1, 0.2), (0.8, 0.30)),
            _synthetic_point('b', 1, (0.2, 0.0), (0.6, 0.35))]
  rows = report.accuracy_table(points)
  assert rows == {'copy': {'a': {32: [0.5, 0.6], 64: [0.1, 0.3]},
                           'b': {32: [0.1, 0.2], 64: [0.2, 0.0]}}}
  found = report.separations(rows)
  assert [(f[:4], f[4].apart) for f in found] == [(('copy', 32, 'a', 'b'), True),
                                                  (('copy', 64, 'a', 'b'), False)]
  assert found[0][4].difference == pytest.approx(0.4) and found[0][4].p == pytest.approx(1 / 3)
  tokens = report.separations(report.accuracy_table(points, 'accuracy'))
  assert [f[4].apart for f in tokens] == [False, True]
  assert tokens[1][4].difference == pytest.approx(0.1)
  # Lower is better (a perplexity): the same pair the other way round.
  assert report.separations(rows, higher_is_better=False)[0][2:4] == ('b', 'a')
  text = '\n'.join(report._synthetic_sections(points))  # pylint: disable=protected-access
  assert '## copy: share of answer tokens predicted right' in text
  assert '| a | 2 | 0.550 ± 0.071 | 0.200 ± 0.141 |' in text
  assert ('2 of 4 comparisons (a pair of lines at one task, measure and length) separate. Of '
          'the 2 that do not, 0 have a bootstrap interval') in text
  assert '2 against 2 seeds: 0.333' in text
  # Resampled means of a lie in 0.5-0.6 and of b in 0.1-0.2: the interval within 0.3-0.5.
  line = [l for l in text.splitlines() if l.startswith('| copy | rows exact | 32 | a | b |')]
  assert len(line) == 1 and '| 2 v 2 | 0.500-0.600 | 0.100-0.200 | 0.400 [0.3' in line[0]
  assert line[0].endswith('| 0.333 |')
  alone = '\n'.join(report._synthetic_sections([points[0], points[2]]))  # One seed each.
  assert 'No two lines have 2 or more seeds each' in alone and 'seed counts: .' not in alone
  assert '| copy | answer tokens | 64 | a | b | 2 v 2 | 0.400-0.450 | 0.300-0.350 | 0.100 [' in text


def test_the_eta_weighs_the_groups_left_by_their_work():
  """A group of work 1 took 10 s: the groups left (work 3 and 1) take 10 s per unit, on as
  many processes as there are groups left, up to --parallel."""
  progress = sweep_script.Progress(total=6, parallel=2, work={'a': 1.0, 'b': 3.0, 'c': 1.0,
                                                              'd': 2.0})
  assert 'ETA' not in progress.line()  # Nothing timed yet.
  progress.ended('d')  # Finished before this sweep started: it sets no rate.
  assert 'ETA' not in progress.line()
  progress.ended('a', seconds=10.0)
  assert progress.line().endswith('ETA 0m20s')  # (3 + 1) x 10 s over 2 processes.
  progress.ended('c', seconds=30.0)  # Now 40 s for work 2: 20 s per unit, one group left.
  assert progress.line().endswith('ETA 1m00s')
  progress.ended('b', seconds=1.0)
  assert 'ETA' not in progress.line()


def test_the_longest_work_starts_first_and_points_that_need_others_come_after_them():
  point = lambda name, needs=(): sweeps.Point(name, {}, {}, tuple(needs))
  groups = [sweeps.Group('short', (point('short'),)),
            sweeps.Group('after', (point('after', ['long']),)),
            sweeps.Group('long', (point('long'),)), sweeps.Group('mid', (point('mid'),))]
  order = sweep_plan.longest_first(groups, {'short': 1, 'after': 9, 'long': 5, 'mid': 3})
  assert [g.name for g in order] == ['long', 'mid', 'short', 'after']


def test_a_point_that_starts_from_another_trains_while_the_others_evaluations_run(
    tmp_path, monkeypatch):
  """The runner with its commands faked (each records when it ran): `cont` starts as soon as
  `base` has trained, while base's second evaluation still runs on the other process."""
  spec = write_sweep(tmp_path, """
def get_sweep(arg=''):
  return {'config': 'configs/test.py', 'overrides': {'train.steps': 3},
          'points': [{'name': 'base'}, {'name': 'cont', 'init_from': '{sweep}/base'}],
          'evals': {'': {}, 'slow': {'when': {'name': 'base'}}}}
""")
  spans = {}

  seen_env = []

  def fake_call(command, cores=None, **kwargs):
    del cores, kwargs
    seen_env.append(os.environ.get(row_cache.ENV))
    flag = lambda name: next(a.split('=', 1)[1] for a in command if a.startswith(name + '='))
    workdir = flag('--workdir')
    out = next((a.split('=', 1)[1] for a in command if a.startswith('--out=')), '')
    start = time.monotonic()
    time.sleep(1.0 if out == 'eval_results.slow.json' else 0.2)
    if command[1].endswith('train.py'):
      os.makedirs(os.path.join(workdir, 'checkpoints', '3'))
      out = 'eval_results.json'  # The plain evaluation runs in the training process.
    with open(os.path.join(workdir, out), 'w', encoding='utf-8') as f:
      f.write('{"step": 3}')
    spans[(os.path.basename(workdir), out, command[1])] = (start, time.monotonic())
    return 0

  monkeypatch.setattr(sweeps, 'call', fake_call)
  root = str(tmp_path / 'sweep')
  assert sweep_script.main(['--sweep', spec, '--workdir', root, '--parallel', '2',
                            '--no_pin']) == 0
  base_train = [v for k, v in spans.items() if k[0] == 'base' and k[2].endswith('train.py')]
  cont_train = [v for k, v in spans.items() if k[0] == 'cont' and k[2].endswith('train.py')]
  slow = spans[('base', 'eval_results.slow.json', 'eval.py')]
  assert base_train[0][1] <= cont_train[0][0] < slow[1]  # After base trained, before it ended.
  # The children are pointed to the sweep's rows; the caller's environment is left as it was.
  assert set(seen_env) == {os.path.join(root, '.rows')}
  assert row_cache.ENV not in os.environ


@pytest.mark.parametrize('parallel, cpus', [(2, [0, 1]), (2, [0, 1, 2, 3]), (3, [2, 5, 7, 8, 9]),
                                            (4, [0, 1, 2, 3])])
def test_each_parallel_run_gets_cores_of_its_own_and_every_core_is_used(parallel, cpus):
  sets = sweeps.core_sets(parallel, cpus)
  assert len(sets) == parallel and all(sets)
  assert sorted(c for s in sets for c in s) == sorted(cpus)  # Disjoint, and covering them all.
  assert max(map(len, sets)) - min(map(len, sets)) <= 1


def test_one_run_or_more_runs_than_cores_are_not_pinned():
  assert sweeps.core_sets(1, [0, 1]) is None
  assert sweeps.core_sets(3, [0, 1]) is None


def test_an_evaluations_when_can_name_the_points_label(tmp_path):
  sweep = sweeps.load(write_sweep(tmp_path, (
      "def get_sweep(arg=''):\n"
      "  return {'config': 'configs/lm.py', 'points': [\n"
      "      {'name': 'a', 'label': 'rope', 'model.position.kind': 'rope'},\n"
      "      {'name': 'b', 'label': 'rope+gate', 'model.position.kind': 'rope'}],\n"
      "    'evals': {'': {}, 'yarn': {'when': {'label': 'rope'}}}}\n")), '')
  assert [p.name for p in sweep.points if sweeps.applies(sweep.evals['yarn'], p)] == ['a']
  assert all(sweeps.applies(sweep.evals[''], p) for p in sweep.points)


def test_a_groups_step_flops_are_the_hand_count_of_its_members_step():
  sweep = sweeps.load('configs/sweeps/options.py:niah_multikey,rope', '')
  group, = sweeps.seed_groups(sweep, sweep.points)
  # d 64, d_ff 256, 2 layers, 32 positions, causal: per token and layer the projections 8 d^2,
  # the MLP 4 d f and half of attention's 4 L d; the tied output 2 d V over the task's own
  # vocabulary (not the config's placeholder, which the tokenizer replaces); 3x for training;
  # 256 rows of 32 tokens for each of 5 members.
  vocab = synthetic.Vocabulary(synthetic_config.get_config('niah_multikey').data.synthetic,
                               'niah_multikey').vocab_size
  assert 200 < vocab < 4096
  d, f, layers, length = 64, 256, 2, 32
  per_token = 3 * (layers * (8 * d * d + 4 * d * f + 2 * length * d) + 2 * d * vocab)
  assert sweep_plan.step_flops(sweep, group) == per_token * length * 256 * 5


def test_a_masked_lms_step_flops_count_its_output_layer_at_the_predicted_tokens_only(tmp_path):
  """The head (2 d^2) and the output layer (2 d V) run at the selected tokens: two sweeps that
  differ only in data.mask_rate differ by 3 (r1 - r2) (2 d^2 + 2 d V) per token."""
  def group_flops(rate, name):
    sweep = sweeps.load(write_sweep(tmp_path / name, (
        "def get_sweep(arg=''):\n"
        "  return {'config': 'configs/mlm.py', 'overrides': {'model.d_model': 64, "
        f"'model.d_ff': 128, 'model.num_layers': 1, 'data.mask_rate': {rate}}}, "
        "'points': [{'seed': 0}, {'seed': 1}]}\n")), '')
    group, = sweeps.seed_groups(sweep, sweep.points)
    config = sweep_plan.point_config(sweep, group.points[0])
    tokens = config.data.seq_len * config.train.batch_size * 2
    return sweep_plan.step_flops(sweep, group), tokens, config.data.vocab_size

  (tmp_path / 'a').mkdir()
  (tmp_path / 'b').mkdir()
  high, tokens, vocab = group_flops(0.5, 'a')
  low, _, _ = group_flops(0.1, 'b')
  d = 64
  assert high - low == pytest.approx(3 * 0.4 * (2 * d * d + 2 * d * vocab) * tokens, rel=1e-12)


def test_on_an_accelerator_host_bound_groups_run_one_process_per_core_and_large_ones_alone(
    tmp_path, monkeypatch):
  monkeypatch.setattr(sweeps, 'usable_cpus', lambda: list(range(16)))
  tiny = sweeps.load('configs/sweeps/options.py:niah_multikey', '')
  tiny_groups = sweeps.seed_groups(tiny, tiny.points)
  large = sweeps.load(write_sweep(tmp_path, (
      "def get_sweep(arg=''):\n"
      "  return {'config': 'configs/lm.py', 'overrides': {'model.d_model': 1024, "
      "'model.d_ff': 4096, 'model.num_layers': 24, 'data.seq_len': 2048, "
      "'train.batch_size': 64}, 'points': [{'seed': 0}, {'seed': 1}]}\n")), '')
  large_groups = sweeps.seed_groups(large, large.points)
  assert sweep_plan.step_flops(large, large_groups[0]) > sweep_plan.HOST_BOUND_STEP_FLOPS
  monkeypatch.setattr(sweep_plan, 'on_accelerator', lambda: True)
  monkeypatch.setattr(sweep_plan, 'on_gpu', lambda: True)
  assert sweep_plan.default_parallel(tiny, tiny_groups) == 16
  assert sweep_plan.default_parallel(large, large_groups) == 1
  assert sweep_plan.default_parallel(large, tiny_groups + large_groups) == 1
  monkeypatch.setattr(sweep_plan, 'on_gpu', lambda: False)  # A TPU: one process per chip.
  assert sweep_plan.default_parallel(tiny, tiny_groups) == 1
  monkeypatch.setattr(sweep_plan, 'on_accelerator', lambda: False)
  assert sweep_plan.default_parallel(large, large_groups) == 16


def test_processes_sharing_an_accelerator_allocate_its_memory_as_they_need_it(monkeypatch):
  monkeypatch.delenv('XLA_PYTHON_CLIENT_PREALLOCATE', raising=False)
  monkeypatch.setattr(sweep_plan, 'on_gpu', lambda: False)
  sweep_plan.share_accelerator(4)
  assert 'XLA_PYTHON_CLIENT_PREALLOCATE' not in os.environ  # The CPU preallocates nothing.
  monkeypatch.setattr(sweep_plan, 'on_gpu', lambda: True)
  sweep_plan.share_accelerator(1)
  assert 'XLA_PYTHON_CLIENT_PREALLOCATE' not in os.environ  # One process may take it all.
  sweep_plan.share_accelerator(4)
  assert os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] == 'false'
  monkeypatch.setenv('XLA_PYTHON_CLIENT_PREALLOCATE', 'true')  # The user's choice stands.
  sweep_plan.share_accelerator(4)
  assert os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] == 'true'


@pytest.mark.skipif(not hasattr(os, 'sched_setaffinity') or len(sweeps.usable_cpus()) < 2,
                    reason='no CPU affinity, or one core only (nothing to narrow)')
def test_a_pinned_child_and_the_threads_it_starts_run_on_its_cores_only(tmp_path):
  core = sweeps.usable_cpus()[-1]
  script = ('import os, threading\n'
            'seen = []\n'
            't = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))\n'
            't.start(); t.join()\n'
            'print(sorted(os.sched_getaffinity(0)), sorted(seen[0]))\n')
  out = tmp_path / 'out.txt'
  with open(out, 'w', encoding='utf-8') as f:
    assert sweeps.call([sys.executable, '-c', script], {core}, stdout=f) == 0
  assert out.read_text().split('\n')[0] == f'[{core}] [{core}]'
  with open(out, 'w', encoding='utf-8') as f:  # Unpinned: every core this process has.
    assert sweeps.call([sys.executable, '-c', script], None, stdout=f) == 0
  every = sweeps.usable_cpus()
  assert out.read_text().split('\n')[0] == f'{every} {every}'


def test_a_label_names_a_points_scheme_and_sweeps_sharing_a_workdir_keep_each_others_points(
    tmp_path):
  main = sweeps.load('configs/sweeps/frontier.py:smoke')
  assert {p.label for p in main.points} == {'rope', 'fox', 'path', 'stick_breaking', 'rnope_swa'}
  assert all('label' not in p.fields for p in main.points)  # Not a config field.
  budget = sweeps.load('configs/sweeps/frontier.py:budget,passkey,rnope')
  root = str(tmp_path)
  sweep_script.record_sweep(root, 'frontier.py:smoke', main)
  sweep_script.record_sweep(root, 'frontier.py:budget', budget)
  with open(os.path.join(root, 'sweep.json'), encoding='utf-8') as f:
    record = json.load(f)
  names = {p.name for p in main.points} | {p.name for p in budget.points}
  assert set(record['points']) == names and set(record['labels']) == names
  assert record['labels']['passkey,rnope,steps=2x,seed=1'] == 'rnope'
  assert record['sweep'] == 'frontier.py:budget'


def test_a_run_resumed_with_more_steps_is_finished_at_its_new_last_step(tmp_path):
  """config.json keeps the run as it started; the newest config.resume-STEP.json (by step, not
  by name: 500 before 3000) says how long it trains now, for the sweep and the report."""
  workdir = tmp_path / 'run'
  os.makedirs(workdir / 'checkpoints' / '4500')
  for name, steps in (('config.json', 500), ('config.resume-500.json', 3000),
                      ('config.resume-3000.json', 4500)):
    (workdir / name).write_text(json.dumps({'train': {'steps': steps}}))
  assert sweeps.final_step(str(workdir)) == 4500
  assert sweeps.trained(str(workdir))
  os.rename(workdir / 'checkpoints' / '4500', workdir / 'checkpoints' / '3000')
  assert not sweeps.trained(str(workdir))


@pytest.mark.parametrize('case', ['cache', 'no_row_cache', 'full_disk', 'build_fails'])
def test_a_sweeps_rows_are_built_once_beforehand_unless_told_not_to_or_short_of_disk(
    tmp_path, monkeypatch, capsys, case):
  """Two schemes of one task (the smoke's one seed) read the same five streams, training rows
  and validation rows at 1x-8x: each is built once before any run starts; not at all with
  --no_row_cache, or where they would take over half the free disk (said in one line), the
  children then building their own."""
  seen = []

  def fake_call(command, cores=None, **kwargs):
    del cores, kwargs
    seen.append(os.environ.get(row_cache.ENV))
    return 1  # Nothing trains: the rows are what is checked.

  monkeypatch.setattr(sweeps, 'call', fake_call)
  root = str(tmp_path / 'sweep')
  args = ['--sweep', 'configs/sweeps/length.py:smoke,copy,rope,alibi', '--workdir', root]
  sweep = sweeps.load('configs/sweeps/length.py:smoke,copy,rope,alibi')
  if case == 'build_fails':
    def fails(*args, **kwargs):
      raise RuntimeError('a worker could not start')
    monkeypatch.setattr(row_cache, 'build', fails)
  if case == 'full_disk':
    free = 20 * 2**10  # The five streams take 16.4 KiB.
    monkeypatch.setattr(sweep_script.shutil, 'disk_usage',
                        lambda path: shutil._ntuple_diskusage(10 * free, 9 * free, free))
  assert sweep_script.main(args + (['--no_row_cache'] if case == 'no_row_cache' else [])) == 1
  assert len(seen) == 2  # One training process per scheme.
  rows = os.path.join(root, '.rows')
  if case == 'no_row_cache':
    assert seen == [None, None] and not os.path.exists(rows)
    return
  if case in ('full_disk', 'build_fails'):  # The runs still go, building their own rows.
    assert seen == [rows, rows] and os.listdir(rows) == []
    assert ('the synthetic rows were not built beforehand: they would take' if case ==
            'full_disk' else 'not built beforehand (RuntimeError: a worker could not start); '
            'each run builds its own.') in capsys.readouterr().out
    return
  assert seen == [rows, rows]
  streams = [s for p in sweep.points
             for s in row_cache.streams(sweep_plan.point_config(sweep, p), sweep.eval_splits)]
  assert len(streams) == 10
  assert len({row_cache.digest(s) for s, _ in streams}) == len(os.listdir(rows)) == 5
  for s, count in streams:
    assert row_cache.read(s, rows).count == count


@pytest.mark.parametrize('no_row_cache', [False, True])
def test_a_point_whose_rows_cannot_be_built_stops_the_sweep_and_the_rows_reach_the_children(
    tmp_path, monkeypatch, no_row_cache):
  """One point's settings cannot make a row (copy's min_length over what a row holds): the
  sweep stops before it builds any rows or starts any run. Without it, the rows are built once
  for both points (they differ in their scheme alone), and a caller's ROFORMER_ROW_CACHE is
  what the children see unless --no_row_cache, which unsets it for them; either way
  os.environ is as it was afterwards."""
  def write(points):
    return write_sweep(tmp_path, f"""
def get_sweep(arg=''):
  return {{'config': 'configs/synthetic.py:copy', 'overrides': {length_sweep.SMOKE_OVERRIDES!r},
          'points': {points}}}
""")
  elsewhere = str(tmp_path / 'elsewhere')
  monkeypatch.setenv(row_cache.ENV, elsewhere)
  before = dict(os.environ)
  seen = []

  def fake_call(command, cores=None, **kwargs):
    del cores, kwargs
    seen.append((command[1], os.environ.get(row_cache.ENV)))
    return 1

  monkeypatch.setattr(sweeps, 'call', fake_call)
  root = str(tmp_path / 'sweep')
  flags = ['--no_row_cache'] if no_row_cache else []
  bad = write([{'name': 'good'}, {'name': 'bad', 'data.synthetic.min_length': 100}])
  assert sweep_script.main(['--sweep', bad, '--workdir', root] + flags) == 2
  assert not seen and not os.path.exists(elsewhere) and not os.path.exists(root)
  good = write([{'name': 'good'}, {'name': 'alibi', 'model.position.kind': 'alibi'}])
  assert sweep_script.main(['--sweep', good, '--workdir', root] + flags) == 1
  assert dict(os.environ) == before
  assert seen == [('train.py', None if no_row_cache else elsewhere)] * 2
  if not no_row_cache:  # The training rows; validation and test at 1x-8x: once for both.
    assert len(os.listdir(elsewhere)) == 9


def test_the_childrens_environment_is_undone_whole_whatever_the_sweep_set(monkeypatch):
  """What the sweep sets while it runs (its defaults, and a GPU's XLA_PYTHON_CLIENT_PREALLOCATE
  from share_accelerator) is gone afterwards, a caller's own values are kept, and an unset one
  is back."""
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', '/callers/cache')
  monkeypatch.setenv(row_cache.ENV, '/callers/rows')
  monkeypatch.delenv('XLA_PYTHON_CLIENT_PREALLOCATE', raising=False)
  monkeypatch.delenv('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', raising=False)
  before = dict(os.environ)
  with sweep_script.child_environment({'JAX_COMPILATION_CACHE_DIR': '/sweep/cache',
                                       'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'},
                                      unset=[row_cache.ENV]):
    assert os.environ['JAX_COMPILATION_CACHE_DIR'] == '/callers/cache'
    assert os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] == '0'
    assert row_cache.ENV not in os.environ
    os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'false'
  assert dict(os.environ) == before


def test_a_stopped_driver_signals_its_running_children_and_starts_no_more(tmp_path):
  """sweeps.Children: `stop` sends SIGTERM to each child that `call` has running (which then
  ends on its own terms: a run saves a checkpoint) and lets no further child start."""
  children = sweeps.Children()
  ready, got, later = tmp_path / 'ready', tmp_path / 'got', tmp_path / 'later'
  script = ('import pathlib, signal, sys, time\n'
            f'def stop(*_):\n  pathlib.Path({str(got)!r}).write_text("SIGTERM")\n  sys.exit(3)\n'
            'signal.signal(signal.SIGTERM, stop)\n'
            f'pathlib.Path({str(ready)!r}).touch()\n'
            'time.sleep(60)\n')
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    running = pool.submit(sweeps.call, [sys.executable, '-c', script], None, children)
    deadline = time.monotonic() + 60
    while not ready.exists():
      assert time.monotonic() < deadline and not running.done(), 'the child did not start'
      time.sleep(0.05)
    children.stop()
    assert running.result(timeout=60) == 3  # Its own exit, from its handler.
  assert got.read_text() == 'SIGTERM'
  with pytest.raises(sweeps.Stopped):
    sweeps.call([sys.executable, '-c', f'open({str(later)!r}, "w")'], None, children)
  assert not later.exists()


def _interrupt_when(process: subprocess.Popen, ready, sig=signal.SIGINT, limit_s=120) -> str:
  """Sends `sig` to `process`'s group (as a terminal's Ctrl-C reaches every process of the
  foreground job) once `ready()` holds, and returns its output once it has ended. Whatever
  fails, the group is killed before the test ends: a sweep left running would slow the rest
  of the suite."""
  deadline = time.monotonic() + limit_s
  try:
    while not ready():
      assert process.poll() is None, process.communicate()[0]
      assert time.monotonic() < deadline, 'never ready to be interrupted'
      time.sleep(0.1)
    os.killpg(process.pid, sig)
    return process.communicate(timeout=limit_s)[0]
  finally:
    try:  # The driver may have ended and left a run of its group behind.
      os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    process.wait()


def _spawned(parent: int) -> list[int]:
  """The processes that multiprocessing spawned for `parent` (its pool's workers)."""
  found = []
  for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
        ppid = int(f.read().rsplit(')', 1)[1].split()[1])
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        spawned = b'spawn_main' in f.read()
    except (OSError, IndexError, ValueError):  # It ended meanwhile.
      continue
    if ppid == parent and spawned:
      found.append(int(pid))
  return found


def _ignores_sigint(pid: int) -> bool:
  with open(f'/proc/{pid}/status', encoding='utf-8') as f:
    ignored = next(line for line in f if line.startswith('SigIgn:')).split()[1]
  return bool(int(ignored, 16) >> (signal.SIGINT - 1) & 1)


def _sweep_process(args) -> subprocess.Popen:
  """The sweep driver as a terminal's foreground job starts it: with SIGINT at its default
  (processes.interruptible_popen), in a session of its own. The sweep keeps an ignored SIGINT
  ignored on purpose (roformer/reliability.py), so without it the Ctrl-C tests of a suite
  launched in the background would wait for a reaction that the sweep rightly never has."""
  return processes.interruptible_popen(
      [sys.executable, 'scripts/sweep.py'] + args, cwd=ROOT, env=processes.env(devices=1),
      start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _log_has(root, pattern: str) -> bool:
  logs = os.path.join(root, 'logs')
  return os.path.isdir(logs) and any(
      re.search(pattern, open(os.path.join(logs, name), encoding='utf-8').read())
      for name in os.listdir(logs))


def test_ctrl_c_stops_a_sweep_with_its_runs_checkpoints_and_starts_nothing_more(
    tmp_path, data_dir):
  """Ctrl-C while a point trains: its run saves a checkpoint, no other point starts, the
  driver says how to go on in one line (exit status 130, no traceback), and the same command
  then resumes the point from that checkpoint."""
  spec = write_sweep(tmp_path, f'''
from configs.sweeps import positions
def get_sweep(arg=''):
  sweep = positions.get_sweep('smoke,rope,alibi')
  sweep['overrides'].update({{'data.data_dir': {data_dir!r}, 'train.steps': 100000,
                              'train.eval_every': 100000, 'train.checkpoint_every': 100000}})
  sweep['evals'] = {{'': {{}}}}
  return sweep
''')
  root = str(tmp_path / 'sweep')
  args = ['--sweep', spec, '--workdir', root, '--parallel', '1', '--no_pin']
  process = _sweep_process(args)
  out = _interrupt_when(process, lambda: _log_has(root, r'step \d+/100000'))
  assert process.returncode == 130, out
  assert 'stopped by Ctrl-C: 0/2 points finished. Rerun the same command to go on' in out, out
  assert 'Traceback' not in out and 'FAILED' not in out, out
  started = [name for name in os.listdir(root) if name.startswith('kind=')]
  assert len(started) == 1, started  # The other point never started.
  steps = [int(s) for s in os.listdir(os.path.join(root, started[0], 'checkpoints'))
           if s.isdigit()]
  assert steps and 0 < max(steps) < 100000
  process = _sweep_process(args)
  out = _interrupt_when(process, lambda: _log_has(root, rf'Resuming from .* step {max(steps)}\.'))
  assert process.returncode == 130 and 'stopped by Ctrl-C' in out, out
  # Each stopped run kept its time: the one point it ran, and how it ended.
  times = metrics_lib.read_jsonl(os.path.join(root, 'timings.jsonl'))
  assert [(t['ended'], t['ran']) for t in times] == [('stopped by Ctrl-C', started)] * 2


def test_ctrl_c_while_the_rows_are_built_leaves_no_partial_entry_and_no_traceback(tmp_path):
  """The sweep's rows are built by worker processes that leave Ctrl-C to the driver, from their
  start: it cancels the rest, waits for the chunks being built, removes the unfinished entries
  and ends with one line (exit status 130)."""
  root = tmp_path / 'sweep'
  rows = root / '.rows'
  building = lambda: rows.is_dir() and any('.tmp-' in name for name in os.listdir(rows))
  spec = write_sweep(tmp_path, '''
def get_sweep(arg=''):
  return {'config': 'configs/synthetic.py:niah_multikey', 'overrides': {'train.steps': 20000},
          'points': [{'seed': 0}]}
''')
  process = _sweep_process(['--sweep', spec, '--workdir', str(root), '--parallel', '1'])
  workers = len(sweeps.usable_cpus())  # The sweep's: one per core.
  # Once every worker exists and the driver heeds Ctrl-C again (it ignores it for the
  # milliseconds that starting them takes), while the workers still import (seconds).
  out = _interrupt_when(process, lambda: building() and len(_spawned(process.pid)) == workers
                        and not _ignores_sigint(process.pid))
  assert process.returncode == 130, out
  assert 'stopped by Ctrl-C: 0/1 points finished' in out and 'Traceback' not in out, out
  assert not building(), os.listdir(rows)


def test_sigterm_to_the_driver_alone_stops_its_runs_and_no_point_starts_after(tmp_path,
                                                                             monkeypatch,
                                                                             capsys):
  """The runner with its commands faked: SIGTERM reaches the driver only (as a scheduler may
  send it) while `base` and `other` train; the driver stops both, `cont` (which starts from
  base and was waiting for it) never starts, nothing is called failed or skipped, the exit
  status is 143 and the driver's SIGTERM handler is put back."""
  spec = write_sweep(tmp_path, """
def get_sweep(arg=''):
  return {'config': 'configs/test.py', 'overrides': {'train.steps': 3},
          'points': [{'name': 'base'}, {'name': 'cont', 'init_from': '{sweep}/base'},
                     {'name': 'other'}]}
""")
  started = []

  def fake_call(command, cores=None, children=None, **kwargs):
    del cores, kwargs
    workdir = next(a.split('=', 1)[1] for a in command if a.startswith('--workdir='))
    started.append(os.path.basename(workdir))
    deadline = time.monotonic() + 60
    if started[-1] == 'base':
      while len(started) < 2:  # Both runs started (and cont waiting for base).
        assert time.monotonic() < deadline
        time.sleep(0.01)
      # Trained (its last checkpoint): cont's wait ends well, after the stop.
      os.makedirs(os.path.join(workdir, 'checkpoints', '3'))
      os.kill(os.getpid(), signal.SIGTERM)  # To the driver, from inside its run.
    while not children.stopped:  # As a run goes on until its SIGTERM.
      assert time.monotonic() < deadline
      time.sleep(0.01)
    os.makedirs(os.path.join(workdir, 'checkpoints', '1'))  # Saved where it stopped.
    return 0

  monkeypatch.setattr(sweeps, 'call', fake_call)
  before = signal.getsignal(signal.SIGTERM)
  status = sweep_script.main(['--sweep', spec, '--workdir', str(tmp_path / 'sweep'),
                              '--parallel', '3', '--no_pin', '--no_row_cache'])
  out = capsys.readouterr().out
  assert status == 128 + signal.SIGTERM, out
  assert sorted(started) == ['base', 'other'], out
  assert 'stopped by SIGTERM: 0/3 points finished' in out, out
  assert 'FAILED' not in out and 'SKIPPED' not in out and 'running cont' not in out, out
  assert signal.getsignal(signal.SIGTERM) is before


def test_the_drivers_own_error_stops_the_other_runs_as_it_comes(tmp_path, monkeypatch, capsys):
  """An error of the driver in one group (not a failed run: the faked call itself raises)
  stops the runs of the others at once, with checkpoints, says so and is raised; a failed run
  would only be reported."""
  spec = write_sweep(tmp_path, """
def get_sweep(arg=''):
  return {'config': 'configs/test.py', 'overrides': {'train.steps': 3},
          'points': [{'name': 'slow'}, {'name': 'broken'}]}
""")
  stopped_after = []

  def fake_call(command, cores=None, children=None, **kwargs):
    del cores, kwargs
    if any(a.startswith('--workdir=') and a.endswith('broken') for a in command):
      time.sleep(0.2)  # The other one runs by now.
      raise OSError(28, 'No space left on device', 'the log of broken')
    start = time.monotonic()
    while not children.stopped:  # As a run goes on until its SIGTERM.
      assert time.monotonic() - start < 60
      time.sleep(0.01)
    stopped_after.append(time.monotonic() - start)
    return 0

  monkeypatch.setattr(sweeps, 'call', fake_call)
  with pytest.raises(OSError, match='No space left'):
    sweep_script.main(['--sweep', spec, '--workdir', str(tmp_path / 'sweep'), '--parallel', '2',
                       '--no_pin', '--no_row_cache'])
  out = capsys.readouterr().out
  assert 'stopping the runs after the error below (OSError)' in out, out
  assert len(stopped_after) == 1 and stopped_after[0] < 30, stopped_after


def test_the_progress_line_names_a_few_running_groups_and_counts_many():
  progress = sweep_script.Progress(total=36, parallel=12)
  progress.running.update({'b,seed={seed}', 'a,seed={seed}'})
  assert progress.line() == '[sweep] 0/36 points done | running a,seed={seed}, b,seed={seed}'
  progress.running.update(f'g{i},seed={{seed}}' for i in range(10))
  progress.done = 3
  assert progress.line() == '[sweep] 3/36 points done | 12 running'


@pytest.mark.parametrize('path', ['configs/sweeps/frontier.py', 'configs/sweeps/options.py'])
def test_the_frontier_and_options_sweeps_run_on_the_llama_block(path):
  """`:llama` gives every point the Llama-family block under its own name (the classic block's
  runs can share the workdir), and each scheme's point is a config that passes the checks."""
  sweep = sweeps.load(f'{path}:llama,passkey')
  classic = {p.name for p in sweeps.load(f'{path}:passkey').points}
  assert all(p.name.endswith(',block=llama') for p in sweep.points)
  assert not {p.name for p in sweep.points} & classic
  for point in sweep.points[:len(sweep.points) // 3]:  # Every scheme at the first seed.
    _, flags = cli.split_argv(sweeps.train_command(sweep, point, '/w/' + point.name)[1:])
    config = config_args.load(sweep.config, flags)
    resolve.validate(config)
    assert (config.model.normalization, config.model.mlp, config.model.num_kv_heads,
            config.model.d_ff) == ('rms_norm', 'gated', 2, 168)


def test_the_retrieval_plot_puts_each_line_in_the_panel_of_what_was_done_to_the_model():
  assert report.panel('rope') == 'as trained'
  assert report.panel('rope + yarn scaling') == 'RoPE scalings at evaluation'
  assert report.panel('rope + dca remap') == 'remaps at evaluation'
  assert report.panel('rope (kind=yarn, factor=4.0, continued from=base) + short') == (
      'continued training')


def test_a_point_shared_by_the_synthetic_sweeps_is_one_run():
  """length.py, frontier.py and options.py name a shared point alike with the same fields, so
  that one workdir serves all three and a shared point is trained once, not once per sweep."""
  loaded = {name: {p.name: p.fields for p in sweeps.load(f'configs/sweeps/{name}.py').points}
            for name in ('length', 'frontier', 'options')}
  for a, b in (('length', 'frontier'), ('length', 'options'), ('frontier', 'options')):
    shared = set(loaded[a]) & set(loaded[b])
    assert shared, (a, b)
    assert all(loaded[a][n] == loaded[b][n] for n in shared), (a, b)
  assert 'passkey,rope,seed=4' in set(loaded['length']) & set(loaded['frontier'])


@pytest.mark.parametrize('damage', ['no train section', 'config not an object', 'loss a string',
                                    'rows not a list', 'a row without length',
                                    'a metrics record without split'])
def test_the_report_names_a_damaged_point_and_reports_the_others(damage, tmp_path, capsys):
  """A point whose config.json lacks a section or whose evaluation holds a wrongly typed value
  is one warning naming the file and the fix, listed as damaged; the others are reported."""
  kept = os.path.join(ROOT, 'docs', 'results', 'options_2026-11-27', 'records')
  for seed in (0, 1, 2):
    shutil.copytree(os.path.join(kept, f'flip_flop,rope,seed={seed}'),
                    tmp_path / f'flip_flop,rope,seed={seed}')
  broken = tmp_path / 'flip_flop,rope,seed=0'
  config, results = broken / 'config.json', broken / 'eval_results.json'
  if damage == 'no train section':
    value = json.loads(config.read_text())
    del value['train']
    config.write_text(json.dumps(value))
  elif damage == 'config not an object':
    config.write_text('[1, 2]')
  elif damage == 'a metrics record without split':
    with open(broken / 'metrics.jsonl', 'a', encoding='utf-8') as f:
      f.write(json.dumps({'step': 3, 'loss': 1.0}) + '\n')
  else:
    value = json.loads(results.read_text())
    if damage == 'a row without length':
      del value['splits']['validation']['lengths'][0]['length']
    elif damage == 'loss a string':
      value['splits']['validation']['lengths'][0]['loss'] = 'abc'
    else:
      value['splits']['validation']['lengths'] = {'64': 1}
    results.write_text(json.dumps(value))
  assert report.main([str(tmp_path)]) == 0
  warnings = [l for l in capsys.readouterr().err.splitlines() if l.startswith('warning:')]
  assert len(warnings) == 1 and str(broken) in warnings[0] and 'Fix:' in warnings[0]
  text = (tmp_path / 'report.md').read_text()
  assert '| flip_flop,rope,seed=0 | - |' in text and 'damaged (see the warning)' in text
  assert '| rope | 2 |' in text  # The two readable seeds, as one line.


MALFORMED = {  # What a sweep file's get_sweep may return by mistake, and what the error names.
    'overrides as a list': ({'overrides': [('seed', 1)]}, 'overrides is list'),
    'evals as a list': ({'evals': ['rope_yarn']}, 'evals is list'),
    'a point named by a number': ({'points': [{'name': 5, 'seed': 0}]}, 'point 0 has name=5'),
    'a label that is no string': ({'points': [{'label': ['a'], 'seed': 0}]}, 'has label='),
    'a non-string key': ({'points': [{1: 'x'}]}, 'point 0 is dict'),
    'a point that is no dict': ({'points': [('seed', 0)]}, 'point 0 is tuple'),
    'a bad when': ({'evals': {'x': {'when': ['data.seq_len', 64]}}}, "eval 'x' when is list"),
    'eval overrides not a dict': ({'evals': {'x': {'overrides': 3}}}, "eval 'x' overrides is int"),
    'an eval that is no dict': ({'evals': {'x': 'yarn'}}, "eval 'x' needs a plain name"),
    'a numeric eval name': ({'evals': {1: {}}}, 'eval 1 needs a plain name'),
    'numeric eval_splits': ({'eval_splits': 3}, 'eval_splits is 3'),
    'eval_splits as a string': ({'eval_splits': 'validation'}, "eval_splits is 'validation'"),
    'a numeric config': ({'config': 7}, 'config is 7'),
    'points not a list': ({'points': {'seed': 0}}, 'points must be a non-empty list'),
}


@pytest.mark.parametrize('case', sorted(MALFORMED))
def test_a_sweep_file_of_the_wrong_types_is_one_error_naming_the_key(case):
  change, says = MALFORMED[case]
  raw = {'points': [{'seed': 0}, {'seed': 1}], 'config': 'configs/test.py', **change}
  with pytest.raises(errors.ConfigError, match=re.escape(says)):
    sweeps.from_dict(raw, 'configs/sweeps/mine.py')


_VALUES = hypothesis.strategies.recursive(
    hypothesis.strategies.none() | hypothesis.strategies.booleans()
    | hypothesis.strategies.integers() | hypothesis.strategies.text(max_size=8)
    | hypothesis.strategies.floats(allow_nan=True),
    lambda inner: hypothesis.strategies.lists(inner, max_size=3) | hypothesis.strategies.dictionaries(
        hypothesis.strategies.text(max_size=6) | hypothesis.strategies.integers(), inner,
        max_size=3), max_leaves=8)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(hypothesis.strategies.dictionaries(
    hypothesis.strategies.sampled_from(sweeps._KEYS), _VALUES, max_size=6))  # pylint: disable=protected-access
def test_any_malformed_sweep_file_is_a_sweep_or_one_config_error(raw):
  """Whatever get_sweep returns (generated: every key, any nesting of any value), reading it
  gives a Sweep or a ConfigError, never another exception."""
  try:
    sweeps.from_dict(raw, 'configs/sweeps/mine.py', 'configs/test.py')
  except errors.ConfigError:
    pass


def test_the_options_sweep_runs_only_the_seeds_named():
  """options.py:...,seed=N (as in passkey_extension.py) names the seeds that a section of the
  docs ran, so its command keeps to them as the sweep's seeds grow; a seed that is not a
  whole number is refused naming the form."""
  sweep = options_sweep.get_sweep('passkey,rope,seed=1,seed=3')
  assert sorted(p['name'] for p in sweep['points']) == ['passkey,rope,seed=1',
                                                        'passkey,rope,seed=3']
  assert len(options_sweep.get_sweep('passkey,rope')['points']) == len(options_sweep.SEEDS)
  with pytest.raises(ValueError, match=r'seed=N takes a whole number'):
    options_sweep.get_sweep('passkey,seed=one')
