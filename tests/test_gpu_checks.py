"""scripts/gpu_checks.sh's `sweep` stage, run on the CPU: a sweep stopped at its time limit comes
back packed with each run's newest checkpoint alone, and that checkpoint restores elsewhere."""

import glob
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import processes
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _steps(directory: str) -> list[int]:
  return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


@pytest.mark.slow
def test_a_stopped_sweep_comes_back_with_each_runs_newest_checkpoint_which_restores(
    tmp_path, data_dir):
  spec = tmp_path / 'sweep.py'
  overrides = {'data.data_dir': data_dir, 'mesh.num_devices': 1, 'train.schedule': 'rsqrt',
               'train.warmup_steps': 2, 'train.steps': 10**6, 'train.checkpoint_every': 2,
               'train.max_to_keep': 3, 'train.eval_every': 10**6, 'train.log_every': 1}
  spec.write_text(textwrap.dedent(f'''
      def get_sweep(arg=''):
        return {{'config': 'configs/test.py', 'points': [{{'name': 'p', 'seed': 0}}],
                 'overrides': {overrides!r}, 'evals': {{'': {{}}}},
                 'eval_splits': ('validation',)}}
      '''))
  sweep_dir, out = tmp_path / 'sweep_gpu', tmp_path / 'out'
  env = processes.env(devices=1, STAGES='sweep', SWEEP=str(spec), SWEEP_DIR=str(sweep_dir),
                      SWEEP_LIMIT='40', SWEEP_GRACE='60', PYTHON=sys.executable,
                      JAX_PLATFORMS='cpu')
  done = subprocess.run(['bash', 'scripts/gpu_checks.sh', str(out)], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  assert 'stopping at the limit' in done.stdout, done.stdout[-3000:]
  kept = _steps(sweep_dir / 'p' / 'checkpoints')
  assert len(kept) > 1, f'the run kept {kept}: too few to tell the newest from the others'

  unpacked = tmp_path / 'unpacked'
  unpacked.mkdir()
  pieces = sorted(glob.glob(str(out / 'sweep.tgz.*')))
  with open(tmp_path / 'sweep.tgz', 'wb') as whole:
    for piece in pieces:
      with open(piece, 'rb') as f:
        whole.write(f.read())
  with tarfile.open(tmp_path / 'sweep.tgz') as tar:
    tar.extractall(unpacked, filter='data')
  assert _steps(unpacked / 'p' / 'checkpoints') == kept[-1:]
  assert not (unpacked / 'sweep.json').exists()  # It would replace a shared directory's record.
  for name in ('config.json', 'metrics.jsonl'):
    assert (unpacked / 'p' / name).read_bytes() == (sweep_dir / 'p' / name).read_bytes()

  evaluated = processes.run(['eval.py', f'--workdir={unpacked / "p"}', '--splits=validation'],
                            cwd=REPO, env=processes.env(devices=1))
  assert evaluated.returncode == 0, evaluated.stdout[-3000:] + evaluated.stderr[-3000:]
  with open(unpacked / 'p' / 'eval_results.json') as f:
    assert json.load(f)['step'] == kept[-1]


@pytest.mark.slow  # A stage of the GPU script, run on the CPU: the sweep stage's test stays.
def test_the_compile_stage_times_each_variant_and_reports_one_that_fails(tmp_path):
  """`compile` on the CPU with a tiny model: one line per variant with its time line and its
  steps/s; a variant XLA refuses gets its error line and the next variant still runs."""
  out = tmp_path / 'out'
  tiny = ' '.join(f'--config.model.{k}={v}'
                  for k, v in {'d_model': 8, 'num_heads': 1, 'd_ff': 8, 'num_layers': 1}.items())
  env = processes.env(devices=1, STAGES='compile', PYTHON=sys.executable, JAX_PLATFORMS='cpu',
                      COMPILE_TASK='passkey', COMPILE_STEPS='100', COMPILE_FLAGS=tiny,
                      COMPILE_VARIANTS='--xla_no_such_flag=1;default')
  done = subprocess.run(['bash', 'scripts/gpu_checks.sh', str(out)], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  refused, default = (out / 'compile.log').read_text().splitlines()
  assert refused.startswith('[--xla_no_such_flag=1] exit 1 |')
  assert 'Unknown flag in XLA_FLAGS: --xla_no_such_flag=1' in refused
  assert default.startswith('[default] exit 0 | start-up ')
  assert 'compilation and first step' in default and ', 100 steps ' in default
  assert default.endswith(' steps/s') and float(default.split()[-2]) > 0
