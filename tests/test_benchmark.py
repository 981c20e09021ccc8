"""scripts/benchmark.py and the analytic FLOP count behind its MFU."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import jax
import kinds
import ml_collections
import processes
import pytest
from flax import nnx
from configs import lm
from configs import mlm
from configs import translate
from roformer import errors
from roformer import flops
from roformer import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_flops_per_token_by_hand():
  cfg = lm.get_config().model
  cfg.update(num_layers=2, d_model=8, num_heads=2, d_ff=32, vocab_size=100)
  seq = 16
  # Per layer: qkv + out 2*4*64 = 512, MLP 2*2*8*32 = 1024, causal attention 2*2*16*8/2 = 256.
  # Output layer 2*8*100 = 1600. Training: 3 x (2 * 1792 + 1600) = 15552.
  assert flops.train_flops_per_token(cfg, seq) == 3 * (2 * (512 + 1024 + 256) + 1600)
  # Decoding's next token after 15 cached ones attends to all 16 (2*2*16*8 = 512), forward only.
  assert flops.decode_flops_per_token(cfg, seq) == 2 * (512 + 1024 + 512) + 1600
  # A prompt of 16: the causal pass's layers, the output layer at its last token alone.
  assert flops.prefill_flops_per_token(cfg, seq) == 2 * (512 + 1024 + 256) + 1600 / 16
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


def test_a_window_or_chunk_counts_the_keys_its_queries_see_by_hand():
  """The model of test_flops_per_token_by_hand, layers windowed (4, global) or chunked (4,
  global), 16 tokens. A causal pass: the window's queries see 1, 2, 3, then 4 keys, counted
  continuous as the causal L / 2 is (4 - 16 / 32 = 3.5, where the global layer's is 8); the
  chunk's C / 2 = 2. Decoding the 16th token: 4 keys, and 16 mod 4 = 0, so the chunk's 4."""
  cfg = lm.get_config().model
  cfg.update(num_layers=2, d_model=8, num_heads=2, d_ff=32, vocab_size=100, layer_windows=(4, 0))
  scores = lambda keys: 2 * 2 * keys * 8  # QK^T and PV over `keys` keys, 8 wide.
  rest = 512 + 1024
  assert flops.layer_spans(cfg, 16, True) == [(3.5, False), (16.0, True)]
  assert flops.train_flops_per_token(cfg, 16) == 3 * (2 * rest + scores(3.5) + scores(8) + 1600)
  assert flops.decode_flops_per_token(cfg, 16) == 2 * rest + scores(4) + scores(16) + 1600
  assert flops.decode_flops_per_token(cfg, 3) == 2 * rest + 2 * scores(3) + 1600  # Under W.
  cfg.update(layer_windows=(), layer_chunks=(4, 0))
  assert flops.train_flops_per_token(cfg, 16) == 3 * (2 * rest + scores(2) + scores(8) + 1600)
  assert flops.decode_flops_per_token(cfg, 16) == 2 * rest + scores(4) + scores(16) + 1600
  assert flops.decode_flops_per_token(cfg, 14) == 2 * rest + scores(2) + scores(14) + 1600


@pytest.mark.parametrize('preset,fields', [
    ('', {}), ('llama', {}), ('llama', {'head_dim': 12, 'attention.output_gate': True}),
    ('llama', {'num_kv_heads': 1, 'head_dim': 4}),
    ('llama', {'head_dim': 12, 'attention.kind': 'favor', 'attention.num_features': 6})])
def test_a_layers_flops_are_twice_its_matmul_weights_plus_attention(preset, fields):
  """Grouped-query attention, the gated MLP's third matrix, heads of their own width and the
  output gate: the count outside the scores and weighted values is 2 FLOPs per weight of the
  block's matrices, read off the parameters the model builds."""
  config = lm.get_config(preset)
  config.model.update(num_layers=1, d_model=32, num_heads=4, d_ff=48, vocab_size=50)
  if preset:
    config.model.num_kv_heads = 2
  kinds.set_fields(config.model, fields)
  block = nnx.state(models.create(config.model, seed=0).blocks[0], nnx.Param)
  weights = sum(leaf.size for leaf in jax.tree.leaves(block) if leaf.ndim == 2)
  seq = 64
  heads, width = config.model.num_heads, config.model.head_dim or 8
  attention = 2 * 2 * seq * heads * width / 2  # Causal: half.
  if config.model.attention.kind == 'favor':  # q, k features and the sums: 2 * 2 m h e each.
    attention = 2 * 2 * 2 * config.model.attention.num_features * heads * width
  assert flops.attention_flops_per_token(config.model, seq, True) == attention
  assert flops.layer_flops_per_token(config.model, seq, True) == 2 * weights + attention


def test_cross_attention_flops_are_twice_its_matmul_weights_plus_its_scores():
  """A translation model with heads 12 wide in a 32-wide model: per target token, the decoder's
  cross-attention adds 2 FLOPs per weight of its matrices and its scores over the source."""
  config = translate.get_config()
  config.model.update(num_layers=1, d_model=32, num_heads=4, d_ff=48, vocab_size=50,
                      head_dim=12)
  model = models.create(config.model, seed=0)
  cross = nnx.state(model.decoder_blocks[0].cross, nnx.Param)
  weights = sum(leaf.size for leaf in jax.tree.leaves(cross) if leaf.ndim == 2)
  seq, m = 64, config.model
  rest = (flops.layer_flops_per_token(m, seq, False) + flops.layer_flops_per_token(m, seq, True)
          + 2 * 32 * 50)
  forward = flops.train_flops_per_token(m, seq) / flops.TRAIN_MULTIPLIER
  assert forward - rest == 2 * weights + 2 * 2 * seq * 4 * 12


def _benchmark(*args) -> subprocess.CompletedProcess:
  env = processes.env(devices=1)
  return processes.run(['scripts/benchmark.py', '--config=configs/test.py', *args], cwd=ROOT,
                       env=env)


@pytest.mark.slow
def test_benchmark_reports_consistent_numbers(tmp_path):
  out = tmp_path / 'bench.json'
  done = _benchmark('--kinds=none,rope', '--steps=3', '--rounds=2', '--warmup=1',
                    '--peak_size=256', f'--out={out}')
  assert done.returncode == 0, done.stderr[-3000:]
  assert '| rope |' in done.stdout and '| none |' in done.stdout
  result = json.loads(out.read_text())
  assert [r['kind'] for r in result['rows']] == ['none', 'rope']
  made = result['made_with']  # What made the numbers: roformer/provenance.py's record.
  assert made['backend'] == result['backend'] and made['host']['cores']
  assert made['packages']['jax'] == importlib.metadata.version('jax')
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
    assert [len(r) for r in row['rounds']] == [2, 1] and row['steps'] == 3  # Interleaved.


@pytest.mark.slow
def test_benchmark_times_the_evaluation_step_at_a_third_of_the_training_flops(tmp_path):
  out = tmp_path / 'bench.json'
  # ReRoPE with a window of L - 1 leaves every distance of an L-token row as it is: the same
  # loss as plain RoPE, computed by the remap's two passes.
  done = _benchmark('--kinds=rope', '--step=eval', '--steps=2', '--rounds=2', '--warmup=1',
                    '--peak_size=256', '--config.model.position.rope.remap.window=31',
                    '--vary=model.position.rope.remap.method=none,rerope', f'--out={out}')
  assert done.returncode == 0, done.stderr[-3000:]
  assert 'eval step' in done.stdout and '| rope[method=rerope] |' in done.stdout
  result = json.loads(out.read_text())
  config = ml_collections.ConfigDict(result['config'])
  plain, remapped = result['rows']
  assert result['step'] == 'eval'
  assert plain['flops_per_token'] == remapped['flops_per_token'] == (
      flops.train_flops_per_token(config.model, config.data.seq_len) / 3)
  assert remapped['loss'] == pytest.approx(plain['loss'], rel=1e-5)
  assert 5.0 < plain['loss'] < 7.5  # About log(512) = 6.2 for random tokens at initialisation.


def _cache_record(done, out, step: str):
  """(the record, its config, rows, seq_len) of a benchmark of `step` that reports a cache,
  after checking that it ran and printed its table."""
  assert done.returncode == 0, done.stderr[-3000:]
  assert f'{step} step' in done.stdout and 'cache (MiB)' in done.stdout
  result = json.loads(out.read_text())
  config = ml_collections.ConfigDict(result['config'])
  return result, config, config.train.batch_size, config.data.seq_len


@pytest.mark.slow
def test_benchmark_times_decoding_over_either_cache_of_latent_attention(tmp_path):
  """--step=decode: one token a row over a cache of seq_len - 1 tokens; the heads' cache
  keeps 2 layers x (keys 8 + values 8) x 4 heads a slot, MLA's latent 2 x (8 + 4), in
  float32, beside the positions; the FLOPs are those of a token attending to seq_len."""
  out = tmp_path / 'bench.json'
  done = _benchmark('--kinds=rope', '--step=decode', '--steps=2', '--rounds=2', '--warmup=1',
                    '--peak_size=256', '--config.model.mla.kv_rank=8',
                    '--config.model.mla.rope_dim=4', '--config.model.position.rope.fraction=0.5',
                    '--config.model.biases=none', '--vary=model.mla.cache=heads,latent',
                    f'--out={out}')
  result, config, batch, length = _cache_record(done, out, 'decode')
  heads, latent = result['rows']
  slots = 4 * batch * length  # Bytes of a float32 number in every slot of every row.
  positions = slots + 4  # The slots' positions (int32) and the index.
  assert heads['cache_bytes'] == 2 * (8 + 8) * 4 * slots + positions
  assert latent['cache_bytes'] == 2 * (8 + 4) * slots + positions
  for row in result['rows']:
    assert row['flops_per_token'] == flops.decode_flops_per_token(config.model, length)
    assert row['tokens_per_s'] == pytest.approx(batch / row['step_s'])


@pytest.mark.slow
def test_benchmark_times_a_prompts_prefill_over_causal_blocks_or_whole(tmp_path):
  """--step=prefill: the prompt of seq_len tokens a row into a cache of its own, as generation
  starts; the cache holds 2 layers x (keys 8 + values 8) x 4 heads a slot; the FLOPs are the
  causal pass's with the output layer at the last token; causal blocks of 32 rows hold less
  than the whole [256, 256] logits."""
  out = tmp_path / 'bench.json'
  done = _benchmark('--kinds=rope', '--step=prefill', '--steps=2', '--rounds=2', '--warmup=1',
                    '--peak_size=256', '--config.data.seq_len=256', '--config.train.batch_size=2',
                    '--vary=model.causal_block=0,32', f'--out={out}')
  result, config, batch, length = _cache_record(done, out, 'prefill')
  whole, blocked = result['rows']
  assert whole['cache_bytes'] == 2 * (8 + 8) * 4 * 4 * batch * length + 4 * batch * length + 4
  for row in result['rows']:
    assert row['flops_per_token'] == flops.prefill_flops_per_token(config.model, length)
    assert row['tokens_per_s'] == pytest.approx(batch * length / row['step_s'])
  assert blocked['peak_bytes'] < whole['peak_bytes']


@pytest.mark.slow
def test_benchmark_refuses_a_bad_kind_before_compiling():
  done = _benchmark('--kinds=none,rotary')
  assert done.returncode == 1 and 'config.model.position.kind' in done.stderr
  assert '| none |' not in done.stdout


def test_a_decoding_or_prefill_step_of_a_model_that_is_no_causal_lm_is_refused_before_building():
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  config = mlm.get_config()
  for step in ('decode', 'prefill'):
    with pytest.raises(errors.ConfigError, match=f"--step={step} times a causal LM's .*'mlm'"):
      benchmark.check_step(config, step)
  benchmark.check_step(config, 'train')  # Any model trains.
  benchmark.check_step(lm.get_config(), 'prefill')


def test_the_command_lines_fields_win_over_the_preset():
  """--preset sets the shapes and --config.* overrides then replace any of them, so that a
  longer row or one layer of the preset's width can be timed."""
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  args = benchmark.parser().parse_args(['--preset', 'gpu_125m'])
  config = benchmark.load_config(args, [('model.num_layers', '1'), ('data.seq_len', '32768'),
                                        ('train.batch_size', '1')])
  assert (config.model.num_layers, config.data.seq_len, config.train.batch_size) == (1, 32768, 1)
  assert (config.model.d_model, config.model.dtype) == (768, 'bfloat16')  # The preset's.


def test_gpu_preset_is_a_125m_decoder():
  sys.path.insert(0, ROOT)
  from scripts import benchmark, timing  # pylint: disable=g-import-not-at-top
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
  assert timing.TORCH_PRESETS == ('small', 'medium')  # No PyTorch counterpart.


def test_rounds_split_the_steps_and_rotate_who_goes_first():
  sys.path.insert(0, ROOT)
  from scripts import timing  # pylint: disable=g-import-not-at-top
  assert timing.round_sizes(10, 4) == [3, 3, 2, 2]
  assert timing.round_sizes(5, 1) == [5]
  for bad in (0, 6):
    with pytest.raises(ValueError, match='--rounds'):
      timing.round_sizes(5, bad)
  with pytest.raises(ValueError, match='--steps=0 must be a positive number'):  # Not --rounds.
    timing.round_sizes(0, 12)
  calls = []
  def timer(name):
    def run(n):
      calls.append((name, n))
      return [float(len(calls))] * n
    return run
  timed = timing.interleave({'a': timer('a'), 'b': timer('b'), 'c': timer('c')}, 7, 3)
  assert calls == [('a', 3), ('b', 3), ('c', 3), ('b', 2), ('c', 2), ('a', 2),
                   ('c', 2), ('a', 2), ('b', 2)]
  assert timed['a'] == [[1.0] * 3, [6.0] * 2, [8.0] * 2]
  assert timing.round_ratios(timed['b'], timed['a']) == [2.0, 4 / 6, 9 / 8]


def test_compare_torch_summarizes_per_round_ratios():
  sys.path.insert(0, ROOT)
  from scripts import compare_torch  # pylint: disable=g-import-not-at-top
  timed = {'none': [[1.0, 1.0, 3.0], [2.0]], 'rope': [[1.1], [2.0, 2.2, 2.4]],
           'torch': [[2.0], [3.0, 3.0, 5.0]]}
  s = compare_torch.summarize(timed, tokens=100)
  # Medians over all steps: none 1.5 (of 1, 1, 2, 3), rope 2.1, torch 3.0.
  assert s['none']['step_s'] == 1.5 and s['torch']['tokens_per_s'] == pytest.approx(100 / 3)
  assert s['rope']['vs_torch'] == pytest.approx(3.0 / 2.1)
  assert s['rope']['vs_torch_rounds'] == pytest.approx([2.0 / 1.1, 3.0 / 2.2])
  assert s['rope']['vs_none_rounds'] == pytest.approx([1.1 / 1.0, 2.2 / 2.0])
  assert s['rope']['vs_none'] == pytest.approx(2.1 / 1.5)
  assert 'vs_torch' not in s['torch']
  assert '| JAX `rope` | 2100.0 | 48 | **1.43x** (1.59x, 1.36-1.82) | 1.400x (1.100x, ' \
      '1.100-1.100) |' in compare_torch.table(s)


@pytest.mark.slow
def test_benchmark_serves_timings_on_stdin():
  """The worker protocol of scripts/compare_torch.py, on the JAX side."""
  sys.path.insert(0, ROOT)
  from scripts import compare_torch  # pylint: disable=g-import-not-at-top
  worker = compare_torch.Worker([sys.executable, 'scripts/benchmark.py', '--config=configs/test.py',
                                 '--kinds=none,alibi', '--warmup=1', '--peak_size=128',
                                 '--serve'])
  try:
    assert worker.names == ['alibi', 'none']
    assert len(worker.timer('alibi')(3)) == 3 and len(worker.timer('none')(2)) == 2
    with pytest.raises(RuntimeError, match='unknown command'):
      worker.ask('time rope 1')
    report = worker.ask('report')
  finally:
    worker.close()
  assert worker.process.returncode == 0
  rows = {r['kind']: r for r in report['rows']}
  assert rows['alibi']['steps'] == 3 and rows['none']['steps'] == 2
  assert rows['none']['step_s_min'] <= rows['none']['step_s'] <= rows['none']['step_s_max']


def test_compare_torch_needs_torch_and_says_so():
  """Without torch installed (simulated: importlib finds no `torch`) the comparison stops
  before starting any worker, naming what to install."""
  code = ('import importlib.util, sys; real = importlib.util.find_spec\n'
          'importlib.util.find_spec = lambda n, *a: None if n == "torch" else real(n, *a)\n'
          'sys.argv = ["compare_torch.py"]; from scripts import compare_torch\n'
          'sys.exit(compare_torch.main())')
  done = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                        check=False, timeout=120)
  assert done.returncode == 2, done.stderr[-2000:]
  assert 'needs torch' in done.stderr and 'pip install torch transformers' in done.stderr


def test_the_pytorch_side_does_not_import_jax():
  """The PyTorch worker and the comparison's parent process share the host with the JAX worker
  being timed: neither loads JAX, also to record what made their numbers."""
  code = ('import sys; from scripts import benchmark_torch, compare_torch\n'
          'from roformer import provenance\n'
          'made = provenance.measurement((*benchmark_torch.PACKAGES, "no-such-package"))\n'
          'assert "numpy" in made["packages"] and "no-such-package" not in made["packages"]\n'
          'assert "devices" not in made, made\n'
          'assert made["commit"] and made["host"]["cores"], made\n'
          'assert "jax" not in sys.modules, "jax imported"')
  done = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                        check=False, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]


def test_the_pytorch_worker_refuses_malloc_reuse_it_cannot_set(monkeypatch, capsys):
  """--malloc=reuse (compare_torch.py --torch_malloc=reuse) with the setting turned off ends
  with one error line naming the flag, before torch is imported or anything is timed."""
  from scripts import benchmark_torch  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('ROFORMER_REUSE_FREED_MEMORY', '0')
  assert benchmark_torch.main(['--model=causal', '--malloc=reuse']) == 2
  err = capsys.readouterr().err
  assert err.startswith('error: --malloc=reuse') and 'Fix:' in err, err


def test_compare_torch_refuses_torch_malloc_reuse_before_starting_a_worker(monkeypatch, capsys):
  """--torch_malloc=reuse that cannot be set stops with one line before the JAX worker starts
  compiling (the PyTorch worker, started after it, would refuse it minutes later)."""
  from scripts import compare_torch  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('ROFORMER_REUSE_FREED_MEMORY', '0')
  monkeypatch.setattr(compare_torch.importlib.util, 'find_spec', lambda name: object())
  started = []
  monkeypatch.setattr(compare_torch, 'Worker', lambda command: started.append(command))
  with pytest.raises(SystemExit) as exit_info:
    compare_torch.main(['--model=causal', '--torch_malloc=reuse'])
  assert exit_info.value.code == 2 and not started
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: --torch_malloc=reuse') and 'Fix:' in err and '\n' not in err, err


def test_neox_parameter_count_equals_the_jax_causal_lm_at_each_preset():
  """The GPT-NeoX config that compare_torch.py builds has, by hand, exactly as many parameters
  as configs/lm.py at the same shapes (no torch needed)."""
  sys.path.insert(0, ROOT)
  from scripts import benchmark, benchmark_torch, timing  # pylint: disable=g-import-not-at-top
  from roformer import models  # pylint: disable=g-import-not-at-top
  for preset in timing.TORCH_PRESETS:
    config = lm.get_config()
    benchmark.apply_preset(config, preset)
    config.model.vocab_size = config.data.vocab_size
    neox = benchmark_torch.neox_config(timing.PRESETS[preset])
    assert benchmark_torch.neox_parameters(neox) == models.num_parameters(config.model)
  small = benchmark_torch.neox_config(timing.PRESETS['small'])
  assert benchmark_torch.neox_parameters(small) == 3_628_032
  untied = {**small, 'tie_word_embeddings': False}
  assert benchmark_torch.neox_parameters(untied) == 3_628_032 + 8000 * 256


def test_neox_parameter_count_equals_the_built_model():
  """The hand count against GPTNeoXForCausalLM itself, at a tiny shape (needs torch)."""
  pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  sys.path.insert(0, ROOT)
  from scripts import benchmark_torch  # pylint: disable=g-import-not-at-top
  shapes = {'num_layers': 2, 'd_model': 32, 'num_heads': 4, 'd_ff': 64, 'vocab_size': 100,
            'seq_len': 16}
  for bias in (True, False):
    config = {**benchmark_torch.neox_config(shapes), 'attention_bias': bias}
    model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**config))
    assert model.lm_head.weight is model.gpt_neox.embed_in.weight  # Tied.
    assert model.gpt_neox.layers[0].attention.rotary_ndims == 32 // 4  # The whole head.
    assert sum(p.numel() for p in model.parameters()) == benchmark_torch.neox_parameters(config)


def test_compare_torch_refuses_different_parameter_counts(monkeypatch, capsys):
  """Workers reporting different counts stop the comparison before any step is timed."""
  sys.path.insert(0, ROOT)
  from scripts import benchmark_torch, compare_torch  # pylint: disable=g-import-not-at-top
  assert benchmark_torch.check_parameters({'none': 5, 'rope': 5}, 5) == ''
  assert 'JAX rope 6' in benchmark_torch.check_parameters({'none': 5, 'rope': 6}, 5)
  asked = []

  class FakeWorker:
    def __init__(self, command):
      torch_side = 'benchmark_torch' in command[1]
      self.names = ['torch'] if torch_side else ['none', 'rope']
      self.parameters = {'torch': 3_628_032} if torch_side else {'none': 3_628_032,
                                                                 'rope': 3_628_033}
    def timer(self, name):
      return lambda n: asked.append(name) or [1.0] * n
    def ask(self, command):
      asked.append(command)
      return {}
    def close(self):
      pass

  monkeypatch.setattr(compare_torch, 'Worker', FakeWorker)
  monkeypatch.setattr(compare_torch.importlib.util, 'find_spec', lambda name: object())
  assert compare_torch.main(['--model=causal', '--steps=2', '--rounds=1']) == 1
  err = capsys.readouterr()
  assert 'parameters: PyTorch 3,628,032; JAX none 3,628,032, rope 3,628,033' in err.out
  assert 'the parameter counts differ (JAX rope 3,628,033; PyTorch 3,628,032)' in err.err
  assert not asked


def test_mfu_is_model_flops_over_the_peak_measured_in_the_run(monkeypatch, capsys):
  """benchmark.py's report divides model FLOP/s by the better of the matmul peaks measured at
  the start and at the report; compare_torch.py uses that peak and the JAX rows' FLOP count
  for the PyTorch side as well."""
  sys.path.insert(0, ROOT)
  import io  # pylint: disable=g-import-not-at-top
  from scripts import benchmark, compare_torch  # pylint: disable=g-import-not-at-top
  assert benchmark.utilization(1e6, 1000, 0.5, 4e9) == {'tflops_per_s': 2e9 / 1e12, 'mfu': 0.5}

  class FakeRunner:
    class trainer:  # pylint: disable=invalid-name
      num_params = staticmethod(lambda: 7)
    def row(self, peak):
      return {'name': 'rope', 'flops_per_token': 1e6, 'peak_flops': peak,
              **benchmark.utilization(1e6, 1000, 0.5, peak)}
  peaks = iter([3e9, 4e9])
  monkeypatch.setattr(sys, 'stdin', io.StringIO('report\nquit\n'))
  benchmark.serve({'rope': FakeRunner()}, lambda: next(peaks), {})
  ready, report = (json.loads(line[len('BENCH '):])
                   for line in capsys.readouterr().out.splitlines())
  assert ready == {'ready': ['rope'], 'parameters': {'rope': 7}}
  assert report['peak_flops'] == 4e9 and report['rows'][0]['mfu'] == 0.5
  s = compare_torch.summarize({'rope': [[0.5]], 'torch': [[1.0]]}, 1000,
                              {r['name']: r for r in report['rows']})
  assert s['rope']['mfu'] == 0.5 and s['torch']['mfu'] == 0.25


def test_a_variant_that_does_not_fit_is_reported_and_the_others_still_run(
    monkeypatch, tmp_path, capsys):
  """An out-of-memory error while a variant compiles or warms up names that variant as not
  fitting; the other variants are timed and written. Any other error still stops the run."""
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top

  failing = {'rope': 'RESOURCE_EXHAUSTED: Out of memory while trying to allocate 51.5G\nmore',
             'alibi': 'RESOURCE_EXHAUSTED: Out of memory in a warm-up step'}

  class Runner(benchmark.Runner):
    def __init__(self, config, mesh, name='', *rest):
      if name == 'rope':  # While it is built and compiled.
        raise jax.errors.JaxRuntimeError(failing['rope'])
      super().__init__(config, mesh, name, *rest)

    def warm(self, steps):
      if self.name == 'alibi':  # In a step.
        raise jax.errors.JaxRuntimeError(failing['alibi'])
      super().warm(steps)
  monkeypatch.setattr(benchmark, 'Runner', Runner)
  out = tmp_path / 'bench.json'
  args = benchmark.parser().parse_args(['--config=configs/test.py', '--kinds=none,rope,alibi',
                                        '--steps=2', '--warmup=1', '--peak_size=64',
                                        f'--out={out}'])
  benchmark.main(args)
  result = json.loads(out.read_text())
  assert [r['name'] for r in result['rows']] == ['none']
  reason = 'RESOURCE_EXHAUSTED: Out of memory while trying to allocate 51.5G'
  assert result['unfit'] == {'rope': reason, 'alibi': failing['alibi']}
  assert f'rope: does not fit ({reason})' in capsys.readouterr().out
  failing['rope'] = 'INTERNAL: a kernel failed'  # Not memory: the run stops with it.
  with pytest.raises(jax.errors.JaxRuntimeError, match='INTERNAL'):
    benchmark.main(args)
  assert benchmark.out_of_memory(ValueError('INTERNAL: a bad kernel')) is None


def test_a_rows_flops_count_a_masked_lms_head_at_its_predicted_tokens_only():
  """A measured row of a masked LM (mask rate 0.3): the head (2 d^2) and output layer (2 d V)
  at 30% of the tokens, the encoder at all of them, 3x for training; its MFU from those."""
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  config = mlm.get_config()
  config.model.update(num_layers=1, d_model=32, num_heads=2, d_ff=64, vocab_size=512)
  config.data.update(seq_len=16, mask_rate=0.3)
  config.train.batch_size = 2

  class Compiled:
    memory_analysis = staticmethod(lambda: None)

  class Trainer:
    num_params = staticmethod(lambda: 7)

  runner = object.__new__(benchmark.Runner)
  runner.__dict__.update(config=config, name='mlm', step='train', times=[0.5, 0.25, 1.0],
                         trainer=Trainer(), compile_s=1.0, metrics={'loss': 2.0}, faults=0,
                         compiled=Compiled())
  row = runner.row(peak=1e9)
  d, f, length, vocab = 32, 64, 16, 512
  encoder = 2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * length * d  # Both ways: the whole L x L.
  assert row['flops_per_token'] == pytest.approx(
      3 * (encoder + 0.3 * (2 * d * d + 2 * d * vocab)), rel=1e-12)
  assert row['mfu'] == pytest.approx(row['flops_per_token'] * 2 * 16 / 0.5 / 1e9)


def test_vary_names_each_variant_after_the_fields_it_changes():
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  config = mlm.get_config()
  vary = benchmark.parse_vary(['data.max_predictions=-1,0', 'train.label_smoothing=0.0,0.1'])
  assert vary == [('data.max_predictions', [-1, 0]), ('train.label_smoothing', [0.0, 0.1])]
  trials = benchmark.variants(config, ['none', 'rope'], vary)
  assert list(trials)[:4] == ['none', 'none[label_smoothing=0.1]', 'none[max_predictions=0]',
                              'none[max_predictions=0][label_smoothing=0.1]']
  assert trials['rope[max_predictions=0]'].data.max_predictions == 0
  assert trials['rope[max_predictions=0]'].model.position.kind == 'rope'
  assert config.data.max_predictions == -1  # The config itself is left as it was.
  for bad in (['data.max_predictions'], ['data.nothing=1']):
    with pytest.raises(ValueError, match='--vary'):
      benchmark.variants(config, ['rope'], benchmark.parse_vary(bad))
  from scripts import compare_torch  # pylint: disable=g-import-not-at-top
  assert compare_torch.base_of('rope[max_predictions=0]') == 'none[max_predictions=0]'
  assert compare_torch.base_of('rope') == 'none'


def test_a_setting_some_variants_read_goes_back_to_its_default_in_the_others_only():
  """A remap window given beside --vary of the remap method reaches the variant whose method
  reads it; the plain variant, which would refuse it as changing nothing, runs without it. A
  setting that no variant reads stays, for the checks to refuse."""
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  config = lm.get_config()
  config.model.position.rope.remap.window = 31
  config.model.attention.num_features = 16  # FAVOR+'s: softmax attention in every variant.
  trials = benchmark.variants(config, ['rope'], benchmark.parse_vary(
      ['model.position.rope.remap.method=none,rerope']))
  plain, remapped = trials['rope'], trials['rope[method=rerope]']
  assert (plain.model.position.rope.remap.window, remapped.model.position.rope.remap.window) == (
      256, 31)
  assert plain.model.attention.num_features == remapped.model.attention.num_features == 16
  assert config.model.position.rope.remap.window == 31  # The config itself is left as it was.
  # A varied setting stays as asked even where unread (the checks refuse rope[window=31]), and
  # so does the kind, which layer_kinds leaves unread.
  windows = benchmark.variants(lm.get_config(), ['rope'], benchmark.parse_vary(
      ['model.position.rope.remap.window=31,256']))
  assert windows['rope[window=31]'].model.position.rope.remap.window == 31
  layered = lm.get_config()
  layered.model.layer_kinds = ('rope', 'none', 'rope', 'none')
  kinds = benchmark.variants(layered, ['rope', 'alibi'], [])
  assert kinds['alibi'].model.position.kind == 'alibi'


def test_without_names_a_variant_per_backward_pass_and_refuses_unknown_ones():
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  from roformer import autodiff  # pylint: disable=g-import-not-at-top
  trials = {'rope': None, 'none': None}
  assert benchmark.without_variants(trials, ['all', 'dense']) == {
      'rope': '', 'none': '', 'rope-all': 'all', 'rope-dense': 'dense', 'none-all': 'all',
      'none-dense': 'dense'}
  for bad, said in ((['densest'], "'densest' is no hand-written backward pass (did you mean "
                                  "'dense'?)"),
                    (['dense', 'dense'], 'names a pass twice')):
    with pytest.raises(errors.ConfigError, match=re.escape(said)):
      benchmark.without_variants(trials, bad)
  # What each variant is traced with: every pass but the named one, none for 'all'.
  with benchmark.autodiff_passes('dense'):
    assert not autodiff.enabled('dense') and autodiff.enabled('softmax_attention')
  with benchmark.autodiff_passes('all'):
    assert not any(autodiff.enabled(name) for name in autodiff.REGISTRY)
  with benchmark.autodiff_passes(''):
    assert autodiff.enabled('dense')


def test_point_time_records_the_cores_its_runs_may_use():
  """A point timed pinned to one core (as a sweep pins each run) is recorded as one CPU."""
  if not hasattr(os, 'sched_setaffinity') or len(os.sched_getaffinity(0)) < 2:
    pytest.skip('needs CPU affinity and two cores')
  code = ('import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); '
          f'sys.path.insert(0, {ROOT!r}); from scripts import point_time; '
          'print(point_time.usable_cpus(), os.cpu_count())')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
  pinned, machine = map(int, done.stdout.split())
  assert pinned == 1 and machine >= 2


def test_point_time_names_a_run_past_its_timeout_and_makes_the_records_folder_first(tmp_path):
  """A train.py run past --timeout is one error naming the flag (not a traceback that loses
  the rounds), and --out's folder is made before any run, not after all of them."""
  from scripts import point_time  # pylint: disable=import-outside-toplevel
  out = tmp_path / 'new' / 'folder' / 'copy.json'
  args = point_time.parser().parse_args(['--config=configs/test.py', '--timeout=1',
                                         '--vary=train.compile_ahead=off,on', f'--out={out}'])
  with pytest.raises(errors.ConfigError, match=r'train.compile_ahead=off: train.py ran past '
                     r'--timeout=1 s\. Fix: raise --timeout'):
    point_time.main(args)
  assert out.parent.is_dir() and not out.exists()


def test_point_time_keeps_each_runs_own_record_of_what_it_ran_on(tmp_path, monkeypatch):
  """Each run's `made_with` is the line its train.py wrote as it started (its environment.jsonl:
  its devices, its variables), not what the timing process would say of itself."""
  from scripts import point_time  # pylint: disable=import-outside-toplevel
  def train(command, env, **kwargs):
    workdir = next(a for a in command if a.startswith('--workdir=')).split('=', 1)[1]
    os.makedirs(workdir)
    with open(os.path.join(workdir, 'environment.jsonl'), 'w', encoding='utf-8') as f:
      f.write(json.dumps({'step': 0, 'devices': '1 x H200',
                          'cache': env['JAX_COMPILATION_CACHE_DIR']}) + '\n')
    return subprocess.CompletedProcess(command, 0, 'Time: 400 steps 2.5 s.', '')
  monkeypatch.setattr(subprocess, 'run', train)
  args = point_time.parser().parse_args(['--config=configs/test.py',
                                         '--vary=train.compile_ahead=off,on'])
  run = point_time.one_run(args, 'train.compile_ahead', 'on')
  assert run['made_with']['devices'] == '1 x H200' and run['phases'] == {'400 steps': 2.5}
  assert run['made_with']['cache'].endswith('jax_cache')  # The child's environment, not ours.


@pytest.mark.parametrize('vary, extra, message', [
    ('train.compile_ahead=off,maybe', [], r"--vary train.compile_ahead=maybe: .*'maybe' is "
     r"unknown"),
    ('train.compile_ahed=off,on', [], r'--vary train.compile_ahed=off: .*did you mean '
     r'config.train.compile_ahead\?'),
    ('train.steps=100,200', ['--set=train.batch=3'], r'did you mean config.train.batch_size'),
    ('train.steps=100,200', ['--set=train.batch_size'], r"--set='train.batch_size' is not "
     r'FIELD=VALUE'),
])
def test_point_time_checks_every_value_before_the_first_run(tmp_path, monkeypatch, vary, extra,
                                                             message):
  """A bad value, field or --set is named before any train.py process starts (a bad last
  value used to end the command after the other values' cold runs), and no record is made."""
  from scripts import point_time  # pylint: disable=import-outside-toplevel
  started = []
  monkeypatch.setattr(point_time, 'one_run', lambda *a: started.append(a))
  out = tmp_path / 'records' / 'copy.json'
  args = point_time.parser().parse_args(['--config=configs/test.py', f'--vary={vary}',
                                         f'--out={out}', *extra])
  with pytest.raises(errors.ConfigError, match=message):
    point_time.main(args)
  assert not started and not out.parent.exists()


def test_the_benchmark_times_the_model_a_run_would_train(monkeypatch):
  """What a run derives from its length before it builds the model (FoPE's clipping length,
  config.model.position.fope.clip_length, at 0 meaning the positions trained) is derived
  before the benchmark builds it too: unclipped, it timed a FoPE of every frequency."""
  sys.path.insert(0, ROOT)
  from scripts import benchmark  # pylint: disable=g-import-not-at-top
  built = []

  class Stop(Exception):
    pass

  def runner(trial, *args, **kwargs):
    del args, kwargs
    built.append(trial)
    raise Stop()

  monkeypatch.setattr(benchmark, 'Runner', runner)
  monkeypatch.setattr(sys, 'argv', ['benchmark.py'])
  args = benchmark.parser().parse_args(['--config=configs/test.py', '--kinds=fope',
                                        '--steps=1'])
  with pytest.raises(Stop):
    benchmark.main(args)
  assert built[0].model.position.fope.clip_length == built[0].data.seq_len > 0


def test_point_time_checks_a_continuation_as_train_py_does(tmp_path, monkeypatch):
  """A continuation's config takes what it needs from its source before its checks (YaRN's
  original length), as train.py's do: the pre-check accepts what train.py trains."""
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  from roformer import saved_config  # pylint: disable=import-outside-toplevel
  from scripts import point_time  # pylint: disable=import-outside-toplevel
  source = tmp_path / 'source'
  source.mkdir()
  saved_config.save(config_args.load_file('configs/test.py'), str(source))
  started = []
  monkeypatch.setattr(point_time, 'one_run', lambda *a: started.append(a[2]) or {
      'value': a[2], 'wall_s': 1.0, 'phases': {}})
  args = point_time.parser().parse_args([
      f'--config=configs/continued.py:{source}', '--vary=train.compile_ahead=off,on',
      '--set=model.position.rope.scaling.kind=yarn', '--set=model.position.rope.scaling.factor=4',
      '--rounds=1'])
  point_time.main(args)
  assert started == ['off', 'on']
