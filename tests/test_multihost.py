"""Multi-host training for real: several processes on this machine joined by
jax.distributed (CPU collectives over gloo), each with its own devices and its own share of
the data, as on a cluster of hosts."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import multihost_worker
import numpy as np
import processes
import pytest

from tests.test_reliability import _corrupt
from tests.test_reliability import _env
from tests.test_reliability import _losses

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def _processes(commands: list[list[str]], devices: int, log_dir):
  """One process per command (with `devices` CPU devices each), its output in
  log_dir/processI.log; any still running when the block ends, a failed test's included, is
  killed."""
  env = {**_env(), 'XLA_FLAGS': processes.xla_flags(devices)}
  log_dir.mkdir(parents=True, exist_ok=True)
  procs = []
  try:
    for i, command in enumerate(commands):
      with open(log_dir / f'process{i}.log', 'w', encoding='utf-8') as log:
        procs.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
      procs[-1].log = log_dir / f'process{i}.log'
    yield procs
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
      proc.wait()


def _finish(procs, timeout: float = 300) -> list[str]:
  """Waits until every process has exited 0 (at most `timeout` s) and returns their outputs;
  fails as soon as one exits otherwise, with every process's last lines."""
  deadline = time.time() + timeout
  while any(p.poll() is None for p in procs) and time.time() < deadline:
    if any(p.poll() not in (None, 0) for p in procs):
      break
    time.sleep(0.2)
  outputs = [p.log.read_text(encoding='utf-8') for p in procs]
  report = '\n'.join(f'process {i} ({"running" if p.poll() is None else f"exit {p.returncode}"})'
                     f':\n{out[-2000:]}' for i, (p, out) in enumerate(zip(procs, outputs)))
  assert all(p.poll() == 0 for p in procs), report
  return outputs


def _two_processes(tmp_path, mesh: tuple[int, int, int]) -> dict:
  out, port = str(tmp_path / 'two.json'), str(_free_port())
  commands = [[sys.executable, 'tests/multihost_worker.py', out, str(i), '2', port] +
              [str(n) for n in mesh] for i in range(2)]
  with _processes(commands, 2, tmp_path / 'logs') as procs:
    _finish(procs)
  with open(out, encoding='utf-8') as f:
    return json.load(f)


@pytest.mark.parametrize('mesh', [
    (2, 2, 1),  # Data parallel across the processes, FSDP within each.
    pytest.param((1, 2, 2), marks=pytest.mark.slow),  # FSDP across, tensor parallel within.
])
def test_two_processes_train_as_one_process_with_their_devices(tmp_path, mesh):
  """Two processes of 2 devices, each given only its rows of the batch, take the same steps
  (losses, gradient norms, parameters after 3 AdamW steps with dropout) as this process on 4
  of its devices."""
  two = _two_processes(tmp_path, mesh)
  one = multihost_worker.run(mesh, jax.devices()[:4])
  assert (two['processes'], two['devices'], one['processes'], one['devices']) == (2, 4, 1, 4)
  assert len(two['local_rows']) == 4 < len(one['local_rows'])  # Process 0's half of the batch.
  np.testing.assert_allclose(two['losses'], one['losses'], rtol=1e-6)
  np.testing.assert_allclose(two['grad_norms'], one['grad_norms'], rtol=1e-5)
  assert two['params'].keys() == one['params'].keys()
  for name in one['params']:
    np.testing.assert_allclose(two['params'][name], one['params'][name], rtol=1e-5, atol=1e-6,
                               err_msg=name)


@pytest.mark.slow  # Two processes train as one by default (the test above); the group: -m slow.
def test_a_vmapped_group_on_two_processes_is_the_group_on_one(tmp_path):
  """A vmapped group of two seeds over two processes of 2 devices (each with its share of
  every batch, validation batches included) trains, validates, checkpoints both members at the
  same steps and evaluates as the same group in one process of 4 devices."""
  roots = {n: tmp_path / f'{n}_processes' for n in (1, 2)}
  port = str(_free_port())
  with _processes([[sys.executable, 'tests/multihost_group.py', str(roots[2]), str(i), '2',
                    port] for i in range(2)], 2, tmp_path / 'logs2') as procs:
    _finish(procs)
  with _processes([[sys.executable, 'tests/multihost_group.py', str(roots[1]), '0', '1', '0']],
                  4, tmp_path / 'logs1') as procs:
    _finish(procs)
  for seed in (0, 1):
    two, one = (metrics_of(roots[n] / f'seed={seed}') for n in (2, 1))
    assert sorted(two) == sorted(one) and len(one['validation']) == 2, (two, one)
    for key in one:
      np.testing.assert_allclose(two[key], one[key], rtol=1e-5, err_msg=f'seed {seed} {key}')


def metrics_of(workdir) -> dict:
  """A run's train losses, validation losses and accuracies, and evaluation losses."""
  with open(workdir / 'metrics.jsonl', encoding='utf-8') as f:
    records = [json.loads(line) for line in f]
  with open(workdir / 'eval_results.json', encoding='utf-8') as f:
    evaluation = json.load(f)
  return {'train': [r['loss'] for r in records if r['split'] == 'train'],
          'validation': [(r['loss'], r['accuracy']) for r in records
                         if r['split'] == 'validation'],
          'eval': [row['loss'] for row in evaluation['splits']['validation']['lengths']]}


def _train_commands(workdir, data_dir, steps, checkpoint_every=100_000) -> list[list[str]]:
  """README's multi-host command for each of two processes."""
  port = _free_port()
  return [[sys.executable, 'train.py', '--distributed', f'--coordinator_address=localhost:{port}',
           '--num_processes=2', f'--process_id={i}', '--config=configs/test.py',
           f'--workdir={workdir}', f'--config.data.data_dir={data_dir}',
           f'--config.train.steps={steps}', '--config.train.schedule=rsqrt',
           '--config.train.eval_every=100000',
           f'--config.train.checkpoint_every={checkpoint_every}'] for i in range(2)]


@pytest.mark.slow  # Two processes again: the test above trains two as one by default.
def test_the_readme_launch_trains_one_run_on_two_processes(data_dir, tmp_path):
  """Both processes of README's multi-host command finish the same run: one metrics file (by
  process 0) with every step, both logging the same final loss, and a checkpoint holding each
  process's data position."""
  workdir = str(tmp_path / 'run')
  with _processes(_train_commands(workdir, data_dir, 4, checkpoint_every=2), 1,
                  tmp_path / 'logs') as procs:
    outputs = _finish(procs)
  losses = _losses(workdir)
  assert sorted(losses) == [1, 2, 3, 4]
  for out in outputs:
    assert f'step 4/4 | loss {losses[4]:.4f}' in out
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints', '4', 'data'))) == [
      'commit_success.txt', 'process_0-of-2.json', 'process_1-of-2.json']


@pytest.mark.slow  # Two launches of two processes.
def test_an_unreadable_checkpoint_set_aside_on_two_processes_is_written_again(data_dir, tmp_path):
  """Two processes resume from step 2 past an unreadable step 4, which process 0 moves aside,
  and both save step 4 again: every process's checkpoint manager forgets the moved step."""
  workdir = str(tmp_path / 'run')
  with _processes(_train_commands(workdir, data_dir, 4, checkpoint_every=2), 1,
                  tmp_path / 'logs1') as procs:
    _finish(procs)
  ckpt_dir = os.path.join(workdir, 'checkpoints')
  _corrupt(os.path.join(ckpt_dir, '4'))
  with _processes(_train_commands(workdir, data_dir, 6, checkpoint_every=2), 1,
                  tmp_path / 'logs2') as procs:
    outputs = _finish(procs)
  assert 'cannot be read' in outputs[0] and 'cannot be read' in outputs[1]
  assert sorted(os.listdir(ckpt_dir)) == ['2', '4', '4.unreadable', '6']
  assert sorted(_losses(workdir)) == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_sigterm_on_one_host_stops_both_at_one_step_and_the_run_continues(data_dir, tmp_path):
  """README's per-process launch: SIGTERM to process 1 alone stops both processes after the
  same step with one checkpoint (each process's data position in it); rerunning both continues
  with the losses of a run that was never stopped."""
  workdir = str(tmp_path / 'run')
  with _processes(_train_commands(workdir, data_dir, 100_000), 1, tmp_path / 'logs') as procs:
    deadline = time.time() + 180
    while not (os.path.exists(os.path.join(workdir, 'metrics.jsonl')) and
               len(_losses(workdir)) >= 5):
      assert time.time() < deadline and all(p.poll() is None for p in procs), 'no progress'
      time.sleep(0.2)
    procs[1].send_signal(signal.SIGTERM)
    outputs = _finish(procs)
  stopped = int(os.listdir(os.path.join(workdir, 'checkpoints'))[0])
  assert f'stopped by a signal on another host at step {stopped}' in outputs[0]
  assert f'stopped by SIGTERM at step {stopped}' in outputs[1]
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints', str(stopped), 'data'))) == [
      'commit_success.txt', 'process_0-of-2.json', 'process_1-of-2.json']

  straight = str(tmp_path / 'straight')
  for run, logs in ((workdir, 'resumed'), (straight, 'straight')):
    with _processes(_train_commands(run, data_dir, stopped + 3), 1, tmp_path / logs) as procs:
      _finish(procs)
  resumed, expected = _losses(workdir), _losses(straight)
  assert sorted(resumed) == sorted(expected) == list(range(1, stopped + 4))
  np.testing.assert_allclose([resumed[s] for s in expected], list(expected.values()), rtol=1e-6)


@pytest.mark.parametrize('flags, message', [
    (['--num_processes=2', '--process_id=0'], '--num_processes, --process_id given without '
                                              '--distributed. Fix: add --distributed.'),
    pytest.param(['--distributed', '--num_processes=2'],
                 '--num_processes and --process_id go together.', marks=pytest.mark.slow),
    pytest.param(['--distributed', '--num_processes=2', '--process_id=2'],
                 '--process_id=2 is not in 0 .. 1. Fix: number the processes from 0.',
                 marks=pytest.mark.slow),
    pytest.param(['--distributed', '--num_processes=0', '--process_id=0'], 'at least 1.',
                 marks=pytest.mark.slow),
    (['--distributed'], 'No cluster environment was detected. Fix: give every process '
                        '--coordinator_address=HOST:PORT (of process 0), --num_processes=N'),
])
def test_bad_process_flags_are_refused_before_anything_starts(tmp_path, flags, message):
  workdir = tmp_path / 'run'
  done = processes.run(['train.py', f'--workdir={workdir}'] + flags, cwd=REPO, env=_env(),
                       timeout=120)
  assert done.returncode != 0 and message in done.stderr + done.stdout
  assert not workdir.exists()
