"""Multi-host training for real: several processes on this machine joined by
jax.distributed (CPU collectives over gloo), each with its own devices and its own share of
the data, as on a cluster of hosts."""

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
import pytest

from roformer import metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def _env(devices: int) -> dict:
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  env['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={devices}'
  return env


def _wait_all(procs, timeout=300) -> list[str]:
  outputs = []
  for p in procs:
    try:
      out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      raise
    outputs.append(out)
    assert p.returncode == 0, out[-3000:]
  return outputs


def _two_processes(tmp_path, mesh: tuple[int, int, int]) -> dict:
  out = str(tmp_path / 'two.json')
  port = _free_port()
  procs = [subprocess.Popen(
      [sys.executable, 'tests/multihost_worker.py', out, str(i), '2', str(port)] +
      [str(n) for n in mesh], cwd=REPO, env=_env(2), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True) for i in range(2)]
  _wait_all(procs)
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


def _train(workdir, data_dir, steps, port, processes=2, checkpoint_every=100_000):
  """train.py started as README's multi-host command, once per process."""
  return [subprocess.Popen(
      [sys.executable, 'train.py', '--distributed', f'--coordinator_address=localhost:{port}',
       f'--num_processes={processes}', f'--process_id={i}', '--config=configs/test.py',
       f'--workdir={workdir}', f'--config.data.data_dir={data_dir}',
       f'--config.train.steps={steps}', '--config.train.schedule=rsqrt',
       '--config.train.eval_every=100000', f'--config.train.checkpoint_every={checkpoint_every}'],
      cwd=REPO, env=_env(1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for i in range(processes)]


def _losses(workdir) -> dict[int, float]:
  return {r['step']: r['loss'] for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] == 'train'}


def test_the_readme_launch_trains_one_run_on_two_processes(data_dir, tmp_path):
  """Both processes of README's multi-host command finish the same run: one metrics file (by
  process 0) with every step, both logging the same final loss, and a checkpoint holding each
  process's data position."""
  workdir = str(tmp_path / 'run')
  outputs = _wait_all(_train(workdir, data_dir, 4, _free_port(), checkpoint_every=2))
  losses = _losses(workdir)
  assert sorted(losses) == [1, 2, 3, 4]
  for out in outputs:
    assert f'step 4/4 | loss {losses[4]:.4f}' in out
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints', '4', 'data'))) == [
      'commit_success.txt', 'process_0-of-2.json', 'process_1-of-2.json']


@pytest.mark.slow
def test_sigterm_on_one_host_stops_both_at_one_step_and_the_run_continues(data_dir, tmp_path):
  """README's per-process launch: SIGTERM to process 1 alone stops both processes after the
  same step with one checkpoint (each process's data position in it); rerunning both continues
  with the losses of a run that was never stopped."""
  workdir = str(tmp_path / 'run')
  procs = _train(workdir, data_dir, 100_000, _free_port())
  deadline = time.time() + 180
  while not (os.path.exists(os.path.join(workdir, 'metrics.jsonl')) and len(_losses(workdir)) >= 5):
    assert time.time() < deadline and all(p.poll() is None for p in procs), (
        procs[0].communicate()[0][-3000:] if procs[0].poll() is not None else 'no progress')
    time.sleep(0.2)
  procs[1].send_signal(signal.SIGTERM)
  outputs = _wait_all(procs)
  stopped = int(os.listdir(os.path.join(workdir, 'checkpoints'))[0])
  assert f'stopped by a signal on another host at step {stopped}' in outputs[0]
  assert f'stopped by SIGTERM at step {stopped}' in outputs[1]
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints', str(stopped), 'data'))) == [
      'commit_success.txt', 'process_0-of-2.json', 'process_1-of-2.json']

  _wait_all(_train(workdir, data_dir, stopped + 3, _free_port()))
  straight = str(tmp_path / 'straight')
  _wait_all(_train(straight, data_dir, stopped + 3, _free_port()))
  resumed, expected = _losses(workdir), _losses(straight)
  assert sorted(resumed) == sorted(expected) == list(range(1, stopped + 4))
  np.testing.assert_allclose([resumed[s] for s in expected], list(expected.values()), rtol=1e-6)


@pytest.mark.parametrize('flags, message', [
    (['--num_processes=2', '--process_id=0'], '--num_processes, --process_id given without '
                                              '--distributed. Fix: add --distributed.'),
    (['--distributed', '--num_processes=2'], '--num_processes and --process_id go together.'),
    (['--distributed', '--num_processes=2', '--process_id=2'],
     '--process_id=2 is not in 0 .. 1. Fix: number the processes from 0.'),
])
def test_bad_process_flags_are_refused_before_anything_starts(tmp_path, flags, message):
  workdir = tmp_path / 'run'
  done = subprocess.run([sys.executable, 'train.py', f'--workdir={workdir}'] + flags, cwd=REPO,
                        env=_env(1), capture_output=True, text=True, timeout=120)
  assert done.returncode != 0 and message in done.stderr + done.stdout
  assert not workdir.exists()
