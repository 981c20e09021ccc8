"""Time the compiled train step of a config for each position scheme, against the hardware.

  python scripts/benchmark.py --config configs/lm.py --kinds none,rope,alibi [--steps 20]
  python scripts/benchmark.py --config configs/mlm.py:roformer --preset small --kinds none,rope
  python scripts/benchmark.py --config configs/lm.py --config.model.dtype=bfloat16 \\
      --config.model.d_model=768 ... --out docs/bench.json

For each kind: builds the train step on all devices (config.mesh), compiles it, runs `--warmup`
steps, then times `--steps` steps one by one (blocking on the result) and takes the median.
Reports step time, tokens/s, model FLOPs per token (roformer/flops.py: matmuls, attention,
output layer; causal attention counted as half; a masked LM's head at its selected tokens only),
achieved TFLOP/s, MFU against a peak measured in the same run by a large matmul of the training
dtype on the same devices, and the compiled executable's memory (arguments + outputs - aliased +
temporaries). Batches are random tokens of the config's shapes (no data pipeline in the timing).
"""

import json
import statistics
import sys
import time
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app
from absl import flags
from ml_collections import config_flags

from roformer import config_lib
from roformer import errors
from roformer import flops as flops_lib
from roformer import sharding
from roformer import train_lib
# pylint: enable=wrong-import-position

# Benchmark shapes. scripts/benchmark_torch.py takes the TORCH_PRESETS names.
PRESETS = {
    'small': {'num_layers': 2, 'd_model': 256, 'num_heads': 4, 'd_ff': 1024, 'vocab_size': 8000,
              'seq_len': 128, 'batch_size': 8},
    'medium': {'num_layers': 6, 'd_model': 512, 'num_heads': 8, 'd_ff': 2048,
               'vocab_size': 32000, 'seq_len': 512, 'batch_size': 8},
    # The GPU target: a GPT-2-small-sized decoder (124M parameters with configs/lm.py) in
    # bfloat16 at sequence 2048; no PyTorch counterpart.
    'gpu_125m': {'num_layers': 12, 'd_model': 768, 'num_heads': 12, 'd_ff': 3072,
                 'vocab_size': 50304, 'seq_len': 2048, 'batch_size': 16, 'dtype': 'bfloat16'},
}
TORCH_PRESETS = ('small', 'medium')

_CONFIG = config_flags.DEFINE_config_file('config', 'configs/lm.py', 'Training config file.',
                                          lock_config=False)
_KINDS = flags.DEFINE_list('kinds', [], 'Position kinds to time (default: the config\'s own).')
_PRESET = flags.DEFINE_enum('preset', None, list(PRESETS),
                            'Shapes from PRESETS (small, medium: the PyTorch comparison; '
                            'gpu_125m: the GPU target); they replace the config\'s sizes, '
                            '--config.* overrides included.')
_STEPS = flags.DEFINE_integer('steps', 10, 'Timed steps (median reported).')
_WARMUP = flags.DEFINE_integer('warmup', 2, 'Untimed steps after compilation.')
_PEAK_SIZE = flags.DEFINE_integer('peak_size', 0, 'Matmul size n for the peak (n x n by n x n '
                                  'per device); 0: 2048 on CPU, 8192 on accelerators.')
_OUT = flags.DEFINE_string('out', '', 'Write the results as JSON here.')


def apply_preset(config: ml_collections.ConfigDict, name: str) -> None:
  p = PRESETS[name]
  config.model.update(num_layers=p['num_layers'], d_model=p['d_model'],
                      num_heads=p['num_heads'], d_ff=p['d_ff'], vocab_size=p['vocab_size'],
                      dropout=0.0)
  if 'dtype' in p:
    config.model.dtype = p['dtype']
  config.data.update(seq_len=p['seq_len'], vocab_size=p['vocab_size'])
  config.train.batch_size = p['batch_size']


def synthetic_batch(trainer, batch_size: int, seq_len: int, seed: int = 0) -> dict:
  """Random tokens in the task's feature shapes: one document per row, no padding."""
  rng = np.random.default_rng(seed)
  vocab = trainer.config.model.vocab_size
  batch = {}
  for name, template in trainer.task.feature_shapes(batch_size, seq_len).items():
    if name.endswith('segment_ids') or name == 'weight':
      value = np.ones(template.shape, template.dtype)
    elif name.endswith('positions'):
      value = np.broadcast_to(np.arange(template.shape[-1]), template.shape).astype(
          template.dtype)
    elif name in ('label', 'token_types'):
      value = np.zeros(template.shape, template.dtype)
    else:
      value = rng.integers(5, vocab - 1, template.shape).astype(template.dtype)
    batch[name] = value
  return batch


def measure_peak(dtype: str, n: int, mesh) -> float:
  """FLOP/s of an n x n by n x n matmul per device, all devices at once (median of 5)."""
  devices = mesh.devices.size
  spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(sharding.AXES))
  key = jax.random.key(0)
  a = jax.device_put(jax.random.normal(key, (devices, n, n)).astype(dtype), spec)
  b = jax.device_put(jax.random.normal(jax.random.fold_in(key, 1), (devices, n, n)).astype(
      dtype), spec)
  matmul = jax.jit(lambda x, y: jnp.einsum('bij,bjk->bik', x, y,
                                           preferred_element_type=jnp.float32))
  jax.block_until_ready(matmul(a, b))
  times = []
  for _ in range(5):
    start = time.perf_counter()
    jax.block_until_ready(matmul(a, b))
    times.append(time.perf_counter() - start)
  return 2 * devices * n ** 3 / statistics.median(times)


def memory_bytes(compiled) -> dict:
  stats = compiled.memory_analysis()
  if stats is None:
    return {}
  total = (stats.argument_size_in_bytes + stats.output_size_in_bytes
           - stats.alias_size_in_bytes + stats.temp_size_in_bytes)
  return {'peak_bytes': int(total), 'temp_bytes': int(stats.temp_size_in_bytes),
          'argument_bytes': int(stats.argument_size_in_bytes)}


def predicted_fraction(config) -> float:
  """The tokens a masked LM needs logits for (its selection rate); 1 for other models."""
  return config.data.mask_rate if config.model.type == 'mlm' else 1.0


def benchmark_kind(config, mesh, steps: int, warmup: int, peak: float) -> dict:
  trainer = train_lib.Trainer(config, mesh)
  batch = sharding.put_batch(
      synthetic_batch(trainer, config.train.batch_size, config.data.seq_len), mesh)
  state = trainer.init_state()
  start = time.perf_counter()
  compiled = trainer.train_step.lower(state, batch).compile()
  compile_s = time.perf_counter() - start
  for _ in range(warmup):
    state, metrics = compiled(state, batch)
  jax.block_until_ready(state)
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    state, metrics = compiled(state, batch)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - start)
  step_s = statistics.median(times)
  tokens = config.train.batch_size * config.data.seq_len
  per_token = flops_lib.train_flops_per_token(config.model, config.data.seq_len,
                                              predicted_fraction(config))
  achieved = per_token * tokens / step_s
  return {'kind': config.model.position.kind, 'step_s': step_s,
          'step_s_min': min(times), 'step_s_max': max(times), 'tokens_per_s': tokens / step_s,
          'flops_per_token': per_token, 'tflops_per_s': achieved / 1e12, 'mfu': achieved / peak,
          'parameters': trainer.num_params(), 'compile_s': compile_s,
          'loss': float(metrics['loss']), **memory_bytes(compiled)}


def table(rows: list[dict]) -> str:
  base = next((r['step_s'] for r in rows if r['kind'] == 'none'), None)
  lines = ['| kind | step (ms) | vs none | tokens/s | GFLOPs/token | TFLOP/s | MFU | peak '
           'memory (MiB) |', '|---' * 8 + '|']
  for r in rows:
    rel = f'{r["step_s"] / base:.3f}x' if base else '-'
    mem = f'{r["peak_bytes"] / 2**20:,.0f}' if 'peak_bytes' in r else '-'
    lines.append(f'| {r["kind"]} | {1e3 * r["step_s"]:.1f} | {rel} | {r["tokens_per_s"]:,.0f} | '
                 f'{r["flops_per_token"] / 1e9:.4f} | {r["tflops_per_s"]:.3f} | '
                 f'{100 * r["mfu"]:.1f}% | {mem} |')
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config = ml_collections.ConfigDict(_CONFIG.value.to_dict())
  if _PRESET.value:
    apply_preset(config, _PRESET.value)
  kinds = _KINDS.value or [config.model.position.kind]
  config.model.vocab_size = config.data.vocab_size  # No tokenizer here: the data's size.
  trials = []
  for kind in kinds:
    trial = ml_collections.ConfigDict(config.to_dict())
    trial.model.position.kind = kind
    trials.append(trial)
  try:
    mesh = sharding.make_mesh(config.mesh)
    for trial in trials:  # Every kind is checked before anything is compiled.
      config_lib.validate(trial, sharding.data_parallel_size(mesh), jax.process_count())
  except errors.ConfigError as e:
    sys.exit(f'error: {e}')
  n = _PEAK_SIZE.value or (2048 if jax.default_backend() == 'cpu' else 8192)
  peak = measure_peak(config.model.dtype, n, mesh)
  rows = []
  for trial in trials:
    rows.append(benchmark_kind(trial, mesh, _STEPS.value, _WARMUP.value, peak))
    print(f'{trial.model.position.kind}: {1e3 * rows[-1]["step_s"]:.1f} ms/step', flush=True)
  m = config.model
  print(f'\n{m.type} {m.num_layers} layers, d_model {m.d_model}, {m.num_heads} heads, d_ff '
        f'{m.d_ff}, vocab {m.vocab_size}, seq {config.data.seq_len}, batch '
        f'{config.train.batch_size}, {m.dtype}, remat {m.get("remat", "none")}; '
        f'{mesh.devices.size} x {jax.devices()[0].device_kind}; peak {peak / 1e12:.3f} TFLOP/s '
        f'({m.dtype} {n}x{n} matmul); median of {_STEPS.value} steps\n')
  print(table(rows))
  if _OUT.value:
    result = {'date': time.strftime('%Y-%m-%d'), 'backend': jax.default_backend(),
              'device_kind': jax.devices()[0].device_kind, 'devices': mesh.devices.size,
              'peak_flops': peak, 'peak_matmul_size': n, 'config': config.to_dict(),
              'rows': rows}
    pathlib.Path(_OUT.value).parent.mkdir(parents=True, exist_ok=True)
    with open(_OUT.value, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=2)
    print(f'wrote {_OUT.value}')


if __name__ == '__main__':
  app.run(main)
