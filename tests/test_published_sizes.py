"""configs/lm_125m.py and configs/lm_350m.py: GPT-3 Small's and Medium's shapes, batch and
schedule (Brown et al. 2020, Table 2.1); on CPU one step is built and compiled, never run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import lm_125m
from configs import lm_350m
from roformer import flops
from roformer import models
from roformer import resolve
from roformer import sharding
from roformer import trainer as trainer_lib

VOCAB = 50_304


def _config(size: str):
  config = lm_125m.get_config() if size == '125m' else lm_350m.get_config()
  config.model.vocab_size = VOCAB  # As the tokenizer of data.vocab_size pieces sets it.
  return config


@pytest.mark.parametrize('size, layers, d, heads, rate, count', [
    ('125m', 12, 768, 12, 6e-4, 123_689_472), ('350m', 24, 1024, 16, 3e-4, 353_822_720)])
def test_the_shapes_and_the_parameter_count_are_the_published_models(size, layers, d, heads,
                                                                     rate, count):
  config = _config(size)
  resolve.validate(config)
  m = config.model
  assert (m.num_layers, m.d_model, m.num_heads, m.d_ff, config.data.seq_len) == (
      layers, d, heads, 4 * d, 2048)
  # Per layer: fused qkv 3d^2+3d, output d^2+d, MLP 8d^2+5d, two LayerNorms 4d; a final
  # LayerNorm; the tied embedding. RoPE adds nothing.
  assert layers * (12 * d * d + 13 * d) + 2 * d + VOCAB * d == count
  assert models.num_parameters(m) == count
  assert config.train.learning_rate == rate


def test_the_batch_and_schedule_are_gpt3s():
  t, seq = _config('125m').train, 2048
  assert t.batch_size * seq == 524_288  # 0.5M tokens a step.
  assert t.batch_size % t.grad_accum_steps == 0
  assert abs(t.warmup_steps * t.batch_size * seq - 375e6) < t.batch_size * seq  # 375M tokens.
  assert abs(t.steps * t.batch_size * seq - 300e9) < t.batch_size * seq  # 300B tokens.
  assert (t.schedule, t.end_lr_fraction, t.b1, t.b2, t.weight_decay, t.grad_clip) == (
      'cosine', 0.1, 0.9, 0.95, 0.1, 1.0)


def test_flops_per_token_are_six_times_the_weights_plus_attention():
  """roformer/flops.py's count against the usual estimate: 6 N for the matmuls (the tied output
  layer included, the embedding lookup not) plus 6 L s d for causal attention."""
  for size in ('125m', '350m'):
    config = _config(size)
    m, s = config.model, config.data.seq_len
    matmul_weights = m.num_layers * 12 * m.d_model ** 2 + VOCAB * m.d_model
    estimate = 6 * matmul_weights + 6 * m.num_layers * s * m.d_model
    assert flops.train_flops_per_token(m, s) == pytest.approx(estimate, rel=0.01)


@pytest.mark.slow  # 134-140 s each on 2 CPU cores (2026-11-25): a full-size step compiled.
@pytest.mark.parametrize('size', ['125m', '350m'])
def test_one_step_builds_and_compiles_on_one_cpu_device(size):
  config = _config(size)
  config.mesh.num_devices = 1
  resolve.validate(config)
  trainer = trainer_lib.Trainer(config, sharding.make_mesh(config.mesh, jax.devices()[:1]))
  shape = (config.train.batch_size, config.data.seq_len)
  batch = {f'{name}{suffix}': jax.ShapeDtypeStruct(shape, jnp.int32)
           for name in ('inputs', 'targets') for suffix in ('', '_segment_ids', '_positions')}
  compiled = trainer.train_step.lower(trainer.abstract_state, batch).compile()
  memory = compiled.memory_analysis()
  assert memory is None or memory.argument_size_in_bytes >= 4 * trainer.num_params()
  assert trainer.num_params() == models.num_parameters(config.model)
  assert np.isfinite(flops.train_flops_per_token(config.model, config.data.seq_len))
