"""kill -9 inside every kind of write this project makes, then the same command again.

Each case arms one kill point (roformer/killpoints.py: a named place inside a write, with an
optional delay so that the kill lands inside orbax's, TFDS's or SentencePiece's own writing,
or inside the steps that follow), checks that the process really died there, records what
was complete at that instant, and runs the same command again without the kill. The second
run must finish with the metrics and evaluation results of a run never killed, resume from
the last checkpoint that was complete before the kill (so no complete checkpoint or result is
lost), and print no traceback (a half-written file read as whole would fail or differ).
The default suite runs one case (an asynchronous save cut, checked against the steps the
killed run had already computed); `-m slow` runs every case (docs/reliability.md counts them).
"""

import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import processes
import pytest
from roformer import checkpoint as checkpoint_lib
from roformer import cli
from roformer import config_args
from roformer import errors
from roformer import files
from roformer import killpoints
from roformer import loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, EVERY = 8, 2


def _train_command(workdir, data_dir) -> list[str]:
  """The tiny LM with a schedule that does not depend on the step count (a resumed run equals
  one straight through), a checkpoint every 2 steps, evaluation in the training process."""
  return [sys.executable, 'train.py', '--config=configs/test.py', f'--workdir={workdir}',
          f'--config.data.data_dir={data_dir}', '--config.mesh.num_devices=1',
          '--config.train.schedule=rsqrt', '--config.train.warmup_steps=2',
          f'--config.train.steps={STEPS}', f'--config.train.checkpoint_every={EVERY}',
          '--config.train.eval_every=4', '--config.train.log_every=1',
          '--eval_splits=validation']


def _run(command, kill_at: str = '', timeout: float = 300) -> subprocess.CompletedProcess:
  env = processes.env(devices=1)
  env.pop(killpoints.ENV, None)
  if kill_at:
    env[killpoints.ENV] = kill_at
  assert command[0] == sys.executable, command
  return processes.run(command[1:], cwd=REPO, env=env, timeout=timeout)


def _final_metrics(workdir) -> dict:
  """(split, step) -> the last record written for it (a resumed run writes the steps after
  its checkpoint again)."""
  out = {}
  for r in files.read_jsonl(os.path.join(workdir, 'metrics.jsonl')):
    out[r['split'], r['step']] = {k: v for k, v in r.items()
                                  if k in ('loss', 'accuracy', 'grad_norm')}
  return out


def _results(workdir) -> dict:
  return files.read_json(os.path.join(workdir, 'eval_results.json'))['splits']


def _assert_same_run(workdir, reference) -> None:
  got, want = _final_metrics(workdir), _final_metrics(reference)
  assert sorted(got) == sorted(want)
  for key, values in want.items():
    for name, value in values.items():
      np.testing.assert_allclose(got[key][name], value, rtol=1e-5, err_msg=str(key))
  got, want = _results(workdir), _results(reference)
  for split, result in want.items():
    for a, b in zip(got[split]['lengths'], result['lengths']):
      np.testing.assert_allclose(a['loss'], b['loss'], rtol=1e-5)
  assert checkpoint_lib.all_steps(os.path.join(workdir, 'checkpoints')) == (
      checkpoint_lib.all_steps(os.path.join(reference, 'checkpoints')))


def _is_temporary(folder: str) -> bool:
  """A directory that a writer fills before renaming it into place, never read as it is:
  orbax's STEP.orbax-checkpoint-tmp*, TFDS's incomplete.*, tempfile's tmp*."""
  return any('orbax-checkpoint-tmp' in part or part.startswith(('incomplete.', 'tmp'))
             for part in folder.split(os.sep))


def _assert_no_json_is_half_there(root) -> None:
  """Every JSON file under `root` parses whole (a cut write leaves at most a .tmp beside it),
  apart from those in a writer's temporary directories."""
  for folder, _, names in os.walk(root):
    for name in names:
      if name.endswith('.json') and not _is_temporary(os.path.relpath(folder, root)):
        files.read_json(os.path.join(folder, name))


def _killed_then_again(command, kill_at, workdir, between=None) -> tuple[list[int], str]:
  """Runs `command` killed at `kill_at`, then again (calling `between()` in between). Returns
  the checkpoints complete at the kill and the second run's output."""
  killed = _run(command, kill_at)
  assert killed.returncode == -9, (kill_at, killed.returncode, killed.stderr[-3000:])
  complete = checkpoint_lib.all_steps(os.path.join(workdir, 'checkpoints'))
  _assert_no_json_is_half_there(workdir)
  if between:
    between()
  again = _run(command)
  out = again.stdout + again.stderr
  assert again.returncode == 0, (kill_at, out[-3000:])
  assert 'Traceback' not in out, out[-3000:]
  if complete:  # Resumed from the last checkpoint complete at the kill: none was lost.
    assert f'checkpoints step {complete[-1]}.' in out, (kill_at, complete, out[-3000:])
  return complete, out


@pytest.fixture(scope='module')
def reference(tmp_path_factory, data_dir):
  """The same training never killed (in this process: the same config, read from the same
  command line, on one device)."""
  workdir = str(tmp_path_factory.mktemp('reference') / 'run')
  _, overrides = cli.split_argv(_train_command(workdir, data_dir)[1:])
  loop.train_and_evaluate(config_args.load('configs/test.py', overrides), workdir,
                          eval_splits=('validation',))
  return workdir


# (kill point, visit, delay in seconds): the writes of a training run on built data.
TRAINING = [
    ('json.partial', 1, 0),  # config.json, first write.
    ('json.written', 1, 0),
    ('jsonl.partial', 3, 0),  # A train record, after the first checkpoint.
    ('checkpoint.save', 1, 0),
    ('checkpoint.save', 2, 0.01),  # Inside the asynchronous write.
    ('checkpoint.save', 3, 0.05),
    ('checkpoint.save', 4, 0),  # The last save, waited for before the evaluation.
    ('checkpoint.save', 4, 0.02),
    ('json.partial', 2, 0),  # eval_results.json (after config.json).
    ('json.written', 2, 0),
]


@pytest.mark.slow
@pytest.mark.parametrize('point,visit,delay', TRAINING)
def test_training_killed_inside_a_write_resumes_to_the_same_results(
    reference, data_dir, tmp_path, point, visit, delay):
  workdir = str(tmp_path / 'run')
  _killed_then_again(_train_command(workdir, data_dir), f'{point}:{visit}:{delay}', workdir)
  _assert_same_run(workdir, reference)
  assert not any(name.endswith('.tmp') for name in os.listdir(workdir))


def test_a_run_killed_inside_an_asynchronous_save_resumes_the_same_steps(data_dir, tmp_path):
  """The short version for the default suite, with no reference run: killed 10 ms into its
  second save (step 4, written in orbax's background threads), the run resumes from the last
  checkpoint complete at the kill and computes the steps after it again exactly as the
  killed run had computed them, then runs to the end."""
  workdir = str(tmp_path / 'run')
  metrics_file = os.path.join(workdir, 'metrics.jsonl')
  before = {}  # Step -> the train loss the killed run logged.

  def train_losses():
    return {r['step']: r['loss'] for r in files.read_jsonl(metrics_file) if r['split'] == 'train'}

  complete, _ = _killed_then_again(_train_command(workdir, data_dir), 'checkpoint.save:2:0.01',
                                   workdir, between=lambda: before.update(train_losses()))
  after = train_losses()  # The last record of each step.
  assert sorted(after) == list(range(1, STEPS + 1)) and len(before) < STEPS  # Killed midway.
  # Computed twice, before the kill and after it (the kill lands before step 4's save has
  # finished: orbax takes far longer than 10 ms to write a state).
  again = [s for s in before if s > (complete[-1] if complete else 0)]
  assert again, (complete, sorted(before))
  np.testing.assert_allclose([after[s] for s in again], [before[s] for s in again], rtol=1e-5)
  assert checkpoint_lib.all_steps(os.path.join(workdir, 'checkpoints')) == [4, 6, 8]
  assert os.path.exists(os.path.join(workdir, 'eval_results.json'))


@pytest.mark.slow
@pytest.mark.parametrize('point,delay', [
    ('dataset.build', 0), ('dataset.build', 0.5), ('tokenizer.train', 0),
    ('tokenizer.train', 0.2), ('tokenizer.written', 0)])
def test_a_data_build_killed_midway_is_built_again(reference, tmp_path, point, delay):
  """The embedded dataset and the tokenizer built from nothing, killed while they are
  written: the same command builds them again and trains as on data built in one go."""
  data_dir, workdir = str(tmp_path / 'data'), str(tmp_path / 'run')

  def unfinished():  # The kill landed before the write it is inside of had finished.
    built = [f for _, _, names in os.walk(data_dir) for f in names if f == 'dataset_info.json']
    models = [f for f in os.listdir(data_dir) if f.endswith('.model')]
    assert not (models if point.startswith('tokenizer') else built), (point, delay)

  _killed_then_again(_train_command(workdir, data_dir), f'{point}:1:{delay}', workdir,
                     between=unfinished)
  _assert_same_run(workdir, reference)


@pytest.mark.slow
@pytest.mark.parametrize('point', ['json.partial', 'json.written'])
def test_eval_killed_while_writing_its_results_writes_them_again(reference, tmp_path, point):
  workdir = str(tmp_path / 'run')
  shutil.copytree(reference, workdir)
  os.remove(os.path.join(workdir, 'eval_results.json'))
  command = [sys.executable, 'eval.py', f'--workdir={workdir}', '--splits=validation']
  killed = _run(command, f'{point}:1:0')
  assert killed.returncode == -9, killed.stderr[-3000:]
  assert not os.path.exists(os.path.join(workdir, 'eval_results.json'))  # Never half there.
  again = _run(command)
  assert again.returncode == 0 and 'Traceback' not in again.stderr, again.stderr[-3000:]
  assert _results(workdir) == _results(reference)


@pytest.mark.slow
@pytest.mark.parametrize('after', [1.0, 3.0, 5.0])
def test_generation_killed_at_any_instant_prints_the_same_when_run_again(reference, after):
  """Generation writes nothing: killed while it loads, compiles or samples, it leaves the
  workdir as it was, and the same command prints what a run never killed prints."""
  command = [sys.executable, 'scripts/generate.py', f'--workdir={reference}', '--prompt=ROMEO:',
             '--max_new_tokens=8']
  before = sorted(os.listdir(reference))
  proc = subprocess.Popen(command, cwd=REPO, env=processes.env(devices=1),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  time.sleep(after)
  proc.kill()
  proc.wait()
  assert sorted(os.listdir(reference)) == before
  first, second = _run(command), _run(command)
  assert first.returncode == 0 and first.stdout and first.stdout == second.stdout


def _processes_using(path: str) -> list[int]:
  """Pids of the processes whose command line names `path` (Linux's /proc)."""
  pids = []
  for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        if path.encode() in f.read():
          pids.append(int(pid))
    except OSError:
      pass
  return pids


def _all_gone(path: str, within: float = 2.0) -> bool:
  deadline = time.time() + within
  while _processes_using(path):
    if time.time() > deadline:
      return False
    time.sleep(0.05)
  return True


def _one_point_sweep(tmp_path, data_dir) -> tuple[list[str], str]:
  """(the command, the point's workdir) of a sweep of one point trained as _train_command."""
  spec = tmp_path / 'sweep.py'
  overrides = {'data.data_dir': data_dir, 'mesh.num_devices': 1, 'train.schedule': 'rsqrt',
               'train.warmup_steps': 2, 'train.steps': STEPS, 'train.checkpoint_every': EVERY,
               'train.eval_every': 4, 'train.log_every': 1}  # _train_command's.
  spec.write_text(textwrap.dedent(f'''
      def get_sweep(arg=''):
        return {{'config': 'configs/test.py', 'points': [{{'name': 'p', 'seed': 0}}],
                 'overrides': {overrides!r}, 'evals': {{'': {{}}}},
                 'eval_splits': ('validation',)}}
      '''))
  root = str(tmp_path / 'sweep')
  return [sys.executable, 'scripts/sweep.py', '--sweep', str(spec), '--workdir', root,
          '--parallel', '1'], os.path.join(root, 'p')


def _finishes_as_never_killed(command, point_dir, reference) -> None:
  again = _run(command)
  assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
  assert 'Traceback' not in again.stdout + again.stderr
  files.read_json(os.path.join(os.path.dirname(point_dir), 'sweep.json'))
  _assert_same_run(point_dir, reference)


@pytest.mark.slow
def test_a_sweep_killed_while_writing_its_record_finishes_when_run_again(reference, data_dir,
                                                                        tmp_path):
  command, point_dir = _one_point_sweep(tmp_path, data_dir)
  killed = _run(command, 'json.partial:1:0')  # sweep.json, before any point starts.
  assert killed.returncode == -9, killed.stdout[-3000:] + killed.stderr[-3000:]
  _assert_no_json_is_half_there(os.path.dirname(point_dir))
  _finishes_as_never_killed(command, point_dir, reference)


@pytest.mark.slow
def test_a_sweep_killed_while_its_point_trains_stops_that_run_and_finishes_when_run_again(
    reference, data_dir, tmp_path):
  """The driver killed with -9 once its point has logged a step: the kernel stops the point's
  training too (SIGTERM: it saves and exits), so no run is left holding the workdir, and the
  same command finishes the point with the results of a run never killed."""
  command, point_dir = _one_point_sweep(tmp_path, data_dir)
  env = processes.env(devices=1)
  env.pop(killpoints.ENV, None)
  driver = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 180
    while not os.path.exists(os.path.join(point_dir, 'metrics.jsonl')):
      assert driver.poll() is None and time.time() < deadline, 'the point never trained'
      time.sleep(0.02)
    assert _processes_using(point_dir)  # Training, when the driver is killed.
  finally:
    driver.kill()
    driver.wait()
  assert _all_gone(point_dir, within=30)
  _finishes_as_never_killed(command, point_dir, reference)


def test_a_kill_point_kills_at_its_visit_and_cuts_a_write_in_two(monkeypatch, tmp_path):
  killpoints.reach('checkpoint.save')  # Not armed: nothing happens.
  assert not killpoints.armed('checkpoint.save')
  for bad in ('nosuch:1', 'json.partial:x', 'json.partial:0', 'json.partial:1:inf',
              'json.partial:1:nan', 'json.partial:1:-1'):
    with pytest.raises(errors.ConfigError, match=f'{killpoints.ENV}='):
      killpoints._parse(bad)  # pylint: disable=protected-access
  path = tmp_path / 'f.txt'
  on_disk_at_kill = []  # What the file holds when the kill comes: the flushed first half.
  monkeypatch.setattr(killpoints.os, 'kill',
                      lambda pid, sig: on_disk_at_kill.append((pid, sig, path.read_text())))
  monkeypatch.setenv(killpoints.ENV, 'json.partial:2')
  monkeypatch.setattr(killpoints, '_ARMED', killpoints._UNREAD)  # pylint: disable=protected-access
  monkeypatch.setattr(killpoints, '_reached', {})
  for text in ('abcd', 'efghij'):
    with open(path, 'a', encoding='utf-8') as f:
      killpoints.write(f, text, 'json.partial')
  assert on_disk_at_kill == [(os.getpid(), killpoints.signal.SIGKILL, 'abcdefg')]  # Visit 2.
  assert path.read_text() == 'abcdefghij'  # (Here the kill was only recorded.)
