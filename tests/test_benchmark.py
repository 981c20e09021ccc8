"""scripts/benchmark.py and the analytic FLOP count behind its MFU."""

import json
import os
import subprocess
import sys

import ml_collections
import pytest

from configs import lm
from configs import mlm
from roformer import flops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_flops_per_token_by_hand():
  cfg = lm.get_config().model
  cfg.update(num_layers=2, d_model=8, num_heads=2, d_ff=32, vocab_size=100)
  seq = 16
  # Per layer: qkv + out 2*4*64 = 512, MLP 2*2*8*32 = 1024, causal attention 2*2*16*8/2 = 256.
  # Output layer 2*8*100 = 1600. Training: 3 x (2 * 1792 + 1600) = 15552.
  assert flops.train_flops_per_token(cfg, seq) == 3 * (2 * (512 + 1024 + 256) + 1600)
  enc = mlm.get_config().model
  enc.update(num_layers=2, d_model=8, num_heads=2, d_ff=32, vocab_size=100)
  # Bidirectional attention counts whole (512), plus the head's dense 2*8*8 = 128.
  assert flops.train_flops_per_token(enc, seq) == 3 * (2 * (512 + 1024 + 512) + 128 + 1600)
  # Its head needed at the selected 15% only: (128 + 1600) * 0.15 = 259.2.
  assert flops.train_flops_per_token(enc, seq, 0.15) == pytest.approx(
      3 * (2 * (512 + 1024 + 512) + 259.2))
  enc.attention.update(kind='favor', num_features=4)
  # FAVOR+: 2*2*4*8 for the q and k features, 2*2*4*8 for the sums: 256, whatever L is.
  assert flops.train_flops_per_token(enc, 4096) == 3 * (2 * (512 + 1024 + 256) + 128 + 1600)


def _benchmark(*args) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}  # One CPU device.
  return subprocess.run([sys.executable, 'scripts/benchmark.py', '--config=configs/test.py',
                         *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_benchmark_reports_consistent_numbers(tmp_path):
  out = tmp_path / 'bench.json'
  done = _benchmark('--kinds=none,rope', '--steps=2', '--warmup=1', '--peak_size=256',
                    f'--out={out}')
  assert done.returncode == 0, done.stderr[-3000:]
  assert '| rope |' in done.stdout and '| none |' in done.stdout
  result = json.loads(out.read_text())
  assert [r['kind'] for r in result['rows']] == ['none', 'rope']
  config = ml_collections.ConfigDict(result['config'])
  tokens = config.train.batch_size * config.data.seq_len
  # configs/test.py: 2 layers, d 32, d_ff 64, vocab 512, L 32, causal. Per layer: projections
  # 2*4*32*32 = 8192, MLP 2*2*32*64 = 8192, half of 2*2*32*32 = 2048; logits 2*32*512 = 32768.
  assert (config.model.num_layers, config.model.d_model, config.model.d_ff,
          config.model.vocab_size, config.data.seq_len) == (2, 32, 64, 512, 32)
  assert result['rows'][0]['flops_per_token'] == 3 * (2 * (8192 + 8192 + 2048) + 32768)
  for row in result['rows']:
    assert row['tokens_per_s'] == pytest.approx(tokens / row['step_s'])
    assert row['flops_per_token'] == flops.train_flops_per_token(config.model,
                                                                 config.data.seq_len)
    assert row['tflops_per_s'] == pytest.approx(row['flops_per_token'] * tokens / row['step_s']
                                                / 1e12)
    assert row['mfu'] == pytest.approx(row['tflops_per_s'] * 1e12 / result['peak_flops'])
    assert 0 < row['mfu'] < 1.5 and row['peak_bytes'] > row['argument_bytes'] > 0
    assert row['step_s_min'] <= row['step_s'] <= row['step_s_max']


@pytest.mark.slow
def test_benchmark_refuses_a_bad_kind_before_compiling():
  done = _benchmark('--kinds=none,rotary')
  assert done.returncode == 1 and 'config.model.position.kind' in done.stderr
  assert '| none |' not in done.stdout


def test_gpu_preset_is_a_125m_decoder():
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  from roformer import models  # pylint: disable=g-import-not-at-top
  config = lm.get_config()
  benchmark.apply_preset(config, 'gpu_125m')
  assert config.model.dtype == 'bfloat16' and config.data.seq_len == 2048
  params = models.num_parameters(config.model)
  assert 120e6 < params < 130e6, params
  # Training FLOPs per token: 6 per weight of the matmuls (everything but the embedding table,
  # tied to the output layer, counted once; norms and biases are negligible) plus causal
  # attention 3 * 2 * 2 * L * d / 2 per layer.
  m, L = config.model, config.data.seq_len
  matmul_weights = m.num_layers * (4 * m.d_model ** 2 + 2 * m.d_model * m.d_ff)
  want = 6 * (matmul_weights + m.d_model * m.vocab_size) + m.num_layers * 6 * L * m.d_model
  assert flops.train_flops_per_token(m, L) == want
  assert benchmark.TORCH_PRESETS == ('small', 'medium')
