"""Time the compiled train (or evaluation) step of a config for each position scheme, against the
hardware.

  python scripts/benchmark.py --config configs/lm.py --kinds none,rope,alibi [--steps 20]
  python scripts/benchmark.py --config configs/mlm.py:roformer --preset small --kinds none,rope
  python scripts/benchmark.py --config configs/lm.py --config.model.dtype=bfloat16 \\
      --config.model.d_model=768 ... --out docs/bench.json
  python scripts/benchmark.py --config configs/lm.py --preset small --kinds rope \\
      --vary model.causal_block=0,128     # A/B of a config option, in turns
  python scripts/benchmark.py --config configs/lm.py --kinds rope \\
      --vary model.scan_layers=False,True --vary model.num_layers=4,12,24  # Compile and step
  python scripts/benchmark.py --config configs/lm.py --kinds rope --step eval \\
      --vary model.position.rope.remap.method=none,rerope \\
      --config.model.position.rope.remap.window=64  # An evaluation-time option's cost
  python scripts/benchmark.py --config configs/synthetic.py:copy \\
      --without all,dense,softmax_attention      # What each hand-written backward pass buys

For each kind (and each value of every `--vary` option, crossed with the kinds): builds the
train step (or with `--step eval`, the evaluation step: the forward pass and the loss, for the
options that act at evaluation only, such as RoPE's distance remaps) on all devices
(config.mesh), compiles it and runs `--warmup` steps; then they take
turns in `--rounds` rounds, each timing its share of `--steps` steps one by one (blocking on the
result), and each one's median step is reported (against `none`, or the first one without a
`none`, with the range of the per-round ratios), so that a shared host's changing load reaches
all of them alike.
Reports step time, tokens/s, model FLOPs per token (roformer/flops.py: matmuls, attention,
output layer; causal attention counted as half; a masked LM's head at its selected tokens only),
achieved TFLOP/s, MFU against a peak measured in the same run by a large matmul of the training
dtype on the same devices (the best of 5, before and after the timing), and the compiled
executable's memory (arguments + outputs - aliased + temporaries), and the process's minor page
faults per timed step (`getrusage`; see roformer/host_memory.py). Batches are random tokens of
the config's shapes (no data pipeline in the timing). As in train.py, host memory that a step
frees is kept for the next (roformer/host_memory.py; ROFORMER_REUSE_FREED_MEMORY=0 times the step
without, and the JSON's `malloc` says which).
"""

import contextlib
import difflib
import gc
import itertools
import json
import resource
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
from flax import nnx

from roformer import autodiff
from roformer import cli
from roformer import files
from roformer import provenance
from roformer import config_args
from roformer import config_checks
from roformer import config_schema
from roformer import decode
from roformer import errors
from roformer import flops as flops_lib
from roformer import host_memory
from roformer import models
from roformer import positions
from roformer import resolve
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer.data import synthetic
from scripts.timing import PRESETS, interleave, round_ratios, round_sizes
# pylint: enable=wrong-import-position


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=__doc__)
  p.add_argument('--config', default='configs/lm.py',
                 help='Training config file FILE[:ARG]; override its fields with '
                 '--config.a.b=VALUE.')
  p.add_argument('--kinds', type=cli.comma_list, default=[],
                 help="Position kinds to time, comma-separated (default: the config's own).")
  p.add_argument('--vary', action='append', default=[],
                 help='FIELD=V1,V2,...: also time every kind with each value of the config field '
                 "(e.g. model.causal_block=0,128), named KIND[NAME=V] after the field's last "
                 'part; repeat the flag to cross several fields. The variants take turns with '
                 'the kinds.')
  p.add_argument('--preset', choices=list(PRESETS), default=None,
                 help='Shapes from PRESETS (small, medium: the PyTorch comparison; gpu_125m: the '
                 "GPU target); they replace the config's sizes, and --config.* overrides "
                 'replace them.')
  p.add_argument('--steps', type=cli.positive_int, default=10,
                 help='Timed steps (median reported).')
  p.add_argument('--warmup', type=int, default=2, help='Untimed steps after compilation.')
  p.add_argument('--peak_size', type=int, default=0,
                 help='Matmul size n for the peak (n x n by n x n per device); 0: 2048 on CPU, '
                 '8192 on accelerators.')
  p.add_argument('--rounds', type=int, default=0,
                 help='The kinds take turns in this many rounds of --steps/--rounds steps each '
                 '(1: one kind after the other; 0: min(5, --steps)).')
  p.add_argument('--documents', type=cli.positive_int, default=1,
                 help='Documents packed in each row of the batch (1: one causal sequence per '
                 'row, which cuDNN runs with sequence lengths; more: with the segment mask).')
  p.add_argument('--step', choices=('train', 'eval', 'decode', 'prefill'), default='train',
                 help='The step to time: train (forward, backward and the update), eval (the '
                 'forward pass and the loss, on the same parameters each time; its FLOPs are '
                 'the forward third of the training count, which, like it, leaves out extra '
                 "passes such as a distance remap's) or decode (a causal LM's next token in "
                 'each row over a key/value cache of seq_len - 1 tokens, written in place: the '
                 "cache's bytes are reported, and the FLOPs are the plain form's of a token "
                 'attending to seq_len positions) or prefill (a causal LM\'s prompt of seq_len '
                 'tokens a row into a cache of its own, the output layer at its last token, as '
                 'generation starts: decode.causal_lm_start).')
  p.add_argument('--without', type=cli.comma_list, default=[],
                 help='Hand-written backward passes (roformer/autodiff.py names) to time '
                 'without, one at a time: every variant is also timed with each of them '
                 "differentiated by autodiff instead, named VARIANT-NAME; 'all': every one "
                 '(model.custom_gradients=False).')
  p.add_argument('--out', default='', help='Write the results as JSON here.')
  p.add_argument('--serve', action='store_true',
                 help='Compile and warm up, then take commands on stdin (the worker of '
                 'scripts/compare_torch.py).')
  return p


def apply_preset(config: ml_collections.ConfigDict, name: str) -> None:
  p = PRESETS[name]
  config.model.update(num_layers=p['num_layers'], d_model=p['d_model'],
                      num_heads=p['num_heads'], d_ff=p['d_ff'], vocab_size=p['vocab_size'],
                      dropout=0.0)
  if 'dtype' in p:
    config.model.dtype = p['dtype']
  config.data.update(seq_len=p['seq_len'], vocab_size=p['vocab_size'])
  config.train.batch_size = p['batch_size']


def load_config(args, overrides) -> ml_collections.ConfigDict:
  """--config's config with --preset's shapes, then the --config.* overrides, which win over
  the preset (`--preset gpu_125m --config.model.num_layers=1`: one layer of the preset's width)."""
  config = config_args.load_file(args.config)
  if args.preset:
    apply_preset(config, args.preset)
  return config_args.apply(config, overrides)


def synthetic_batch(trainer, batch_size: int, seq_len: int, seed: int = 0,
                    documents: int = 1) -> dict:
  """Random tokens in the task's feature shapes, no padding: `documents` equal documents
  packed in each row (positions restart at each), so that attention needs the segment mask
  instead of running as one causal sequence per row."""
  rng = np.random.default_rng(seed)
  vocab = trainer.config.model.vocab_size
  batch = {}
  for name, template in trainer.task.feature_shapes(batch_size, seq_len).items():
    length = template.shape[-1] if template.shape else 1
    document = -(-length // documents)  # The last may be shorter.
    if name.endswith('segment_ids'):
      value = np.broadcast_to(1 + np.arange(length) // document, template.shape).astype(
          template.dtype)
    elif name == 'weight':
      value = np.ones(template.shape, template.dtype)
    elif name.endswith('positions'):
      value = np.broadcast_to(np.arange(length) % document, template.shape).astype(
          template.dtype)
    elif name in ('label', 'token_types'):
      value = np.zeros(template.shape, template.dtype)
    else:
      value = rng.integers(5, vocab - 1, template.shape).astype(template.dtype)
    batch[name] = value
  return batch


def measure_peak(dtype: str, n: int, mesh, repeats: int = 5) -> float:
  """FLOP/s of an n x n by n x n matmul per device, all devices at once: the best of `repeats`
  (a peak is what the hardware reaches; on a shared host the median moves with the load)."""
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
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(matmul(a, b))
    times.append(time.perf_counter() - start)
  return 2 * devices * n ** 3 / min(times)


def memory_bytes(compiled) -> dict:
  stats = compiled.memory_analysis()
  if stats is None:
    return {}
  total = (stats.argument_size_in_bytes + stats.output_size_in_bytes
           - stats.alias_size_in_bytes + stats.temp_size_in_bytes)
  return {'peak_bytes': int(total), 'temp_bytes': int(stats.temp_size_in_bytes),
          'argument_bytes': int(stats.argument_size_in_bytes)}


def parse_value(text: str):
  """A --vary value: an int, float or bool if it reads as one, else the string."""
  if text in ('True', 'False'):
    return text == 'True'
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return text


def parse_vary(specs: list[str]) -> list[tuple[str, list]]:
  """['model.causal_block=0,128'] -> [('model.causal_block', [0, 128])]."""
  out = []
  for spec in specs:
    field, sep, values = spec.partition('=')
    if not sep or not field or not values:
      raise ValueError(f'--vary={spec!r}: write FIELD=V1,V2,... (e.g. model.causal_block=0,128).')
    out.append((field, [parse_value(v) for v in values.split(',')]))
  return out


def autodiff_passes(without: str):
  """The setting under which a variant is traced: every hand-written backward pass but
  `without` ('all': none of them; '': as declared)."""
  if not without:
    return contextlib.nullcontext()
  return autodiff.only(() if without == 'all' else set(autodiff.REGISTRY) - {without})


def without_variants(trials: dict, without: list[str]) -> dict[str, str]:
  """Every trial name, and for each name in `without` the trial named NAME-WITHOUT -> the
  backward pass it is timed without ('' for the trials as given)."""
  known = set(autodiff.REGISTRY) | {'all'}
  unknown = [w for w in without if w not in known]
  if unknown:
    close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
    raise errors.ConfigError(
        f'--without={",".join(without)}: {unknown[0]!r} is no hand-written backward pass'
        + (f' (did you mean {close[0]!r}?)' if close else '')
        + f'. Fix: names among {sorted(known)}.')
  if len(set(without)) != len(without):
    raise errors.ConfigError(f'--without={",".join(without)} names a pass twice. Fix: each once.')
  return {**{name: '' for name in trials},
          **{f'{name}-{w}': w for name in trials for w in without}}


def set_field(config: ml_collections.ConfigDict, field: str, value):
  """config.<field> = value for a dotted field that exists in the config; returns the value it
  had."""
  *parents, last = field.split('.')
  node = config
  for part in parents:
    node = node[part]
  if last not in node:
    raise ValueError(f'--vary: config.{field} does not exist.')
  before = node[last]
  node[last] = value
  return before


def variants(config: ml_collections.ConfigDict, kinds: list[str],
             vary: list[tuple[str, list]]) -> dict[str, ml_collections.ConfigDict]:
  """name -> config for every kind crossed with every combination of the --vary values; a
  name is the kind followed by [FIELD=VALUE] (the field's last part) for each varied field whose
  value is not the config's own, so the config as given keeps the kind's plain name.

  A setting given to every variant (not varied) that some variants read and others leave unread
  goes back to its default in the others, which would refuse it as changing nothing: a window
  given beside --vary model.position.rope.remap.method=none,rerope reaches the rerope variant.
  A varied setting, and one no variant reads, stay as given, for the checks to refuse where
  unread (so variants always differ in what they were asked to vary)."""
  out = {}
  for kind in kinds:
    for values in itertools.product(*(v for _, v in vary)):
      trial = ml_collections.ConfigDict(config.to_dict())
      trial.model.position.kind = kind
      name = kind
      for (field, _), value in zip(vary, values):
        if set_field(trial, field, value) != value:
          name += f'[{field.rsplit(".", 1)[-1]}={value}]'
      if name in out:
        raise errors.ConfigError(f'{name} is asked for twice (--kinds or --vary repeat a value).')
      out[name] = trial
  varied = {field for field, _ in vary} | {'model.position.kind'}
  unread = {name: config_checks.unread_fields(trial) - varied for name, trial in out.items()}
  for name, trial in out.items():
    for field in unread[name]:
      if any(field not in fields for fields in unread.values()):
        set_field(trial, field, config_schema.spec_at(field).default)
  return out


def utilization(flops_per_token: float, tokens: int, step_s: float, peak_flops: float) -> dict:
  """Achieved model FLOP/s of a step and its MFU: model FLOPs (roformer/flops.py) per second
  over `peak_flops`, the matmul peak measured on the same devices in the same run."""
  achieved = flops_per_token * tokens / step_s
  return {'tflops_per_s': achieved / 1e12, 'mfu': achieved / peak_flops}


# Decoding's cache is filled this many tokens at a time (a [batch, heads, chunk, seq_len] logits
# array at once, where one pass would hold seq_len^2).
FILL_CHUNK = 512


class Runner:
  """One configuration's compiled step (`step`: train or eval), its state and a fixed batch,
  ready to be timed."""

  def __init__(self, config: ml_collections.ConfigDict, mesh, name: str = '',
               step: str = 'train', documents: int = 1, without: str = ''):
    self.config = config
    self.name = name or config.model.position.kind
    self.step = step
    self.trainer = trainer_lib.Trainer(config, mesh)
    self.batch = sharding.put_batch(
        synthetic_batch(self.trainer, config.train.batch_size, config.data.seq_len,
                        documents=documents), mesh)
    self.state = self.trainer.init_state()
    jax.block_until_ready(self.state)
    # As each phase ends, so that a run stopped by a time limit says which phase it was in.
    if step == 'decode':  # Its cache filled first: the compile time is the step's alone.
      step_fn, self.cache, self.step_inputs = self._decoder()
    elif step == 'prefill':
      step_fn, self.step_inputs = self._prefill()
    print(f'[benchmark] {self.name}: built, compiling', file=sys.stderr, flush=True)
    start = time.perf_counter()
    self.seed = np.int32(trainer_lib.dropout_seed(config))
    with autodiff_passes(without):  # Traced (in lower) with them off.
      if step == 'decode':
        self.compiled = step_fn.lower(self.state['params'], self.cache, *self.step_inputs
                                      ).compile()
      elif step == 'prefill':
        self.compiled = step_fn.lower(self.state['params'], *self.step_inputs).compile()
      elif step == 'eval':
        self.compiled = self.trainer.eval_step.lower(self.state['params'], self.batch).compile()
      else:
        self.compiled = self.trainer.train_step.lower(self.state, self.batch,
                                                      self.seed).compile()
    self.compile_s = time.perf_counter() - start
    self.metrics = None
    self.times: list[float] = []  # Every timed step, in order.
    self.faults = 0  # The process's minor page faults while timed steps ran.

  @property
  def kind(self) -> str:
    return self.config.model.position.kind

  def _decoder(self):
    """The jitted decoding step (parameters, cache, token, position -> logits, cache), its
    cache filled with seq_len - 1 random tokens a row, and the next token and position: each
    step writes slot seq_len - 1 again, in the cache it is given (donated)."""
    batch, length = self.config.train.batch_size, self.config.data.seq_len
    graphdef = self.trainer.graphdef
    tokens, positions_ = self._prompt()

    def decode_at(params, cache, token, position, index):
      return nnx.merge(graphdef, params).decode(token, position, {**cache, 'index': index})

    def step(params, cache, token, position):
      return decode_at(params, cache, token, position, jnp.int32(length - 1))
    params = self.state['params']
    cache = jax.jit(lambda p: nnx.merge(graphdef, p).init_cache(batch, length))(params)
    fill = jax.jit(lambda *a: decode_at(*a)[1])  # Not timed; FILL_CHUNK tokens at a time.
    for start in range(0, length - 1, FILL_CHUNK):
      end = min(start + FILL_CHUNK, length - 1)
      cache = fill(params, cache, tokens[:, start:end], positions_[:, start:end],
                   jnp.int32(start))
    return jax.jit(step, donate_argnums=1), cache, (tokens[:, -1:], positions_[:, -1:])

  def _prefill(self):
    """The jitted prefill (parameters, prompt -> logits of the last token, the prompt's
    cache): decode.prefill, as generation starts, of seq_len random tokens a row, and its
    inputs."""
    graphdef = self.trainer.graphdef
    step = jax.jit(lambda params, tokens: decode.prefill(nnx.merge(graphdef, params), tokens))
    return step, self._prompt()[:1]

  def _prompt(self):
    """seq_len random tokens a row [batch, seq_len] and their positions 0..seq_len - 1: the
    prompt that decoding's cache is filled with, or that the prefill reads."""
    batch, length = self.config.train.batch_size, self.config.data.seq_len
    tokens = jnp.asarray(synthetic_batch(self.trainer, batch, length)['inputs'], jnp.int32)
    return tokens, jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))

  def _run(self) -> None:
    if self.step == 'prefill':
      self.metrics, self.cache = self.compiled(self.state['params'], *self.step_inputs)
    elif self.step == 'decode':
      self.metrics, self.cache = self.compiled(self.state['params'], self.cache,
                                               *self.step_inputs)
    elif self.step == 'eval':
      self.metrics = self.compiled(self.state['params'], self.batch)
    else:
      self.state, self.metrics = self.compiled(self.state, self.batch, self.seed)

  def warm(self, steps: int) -> None:
    for _ in range(steps):
      self._run()
    jax.block_until_ready((self.state, self.metrics))

  def time(self, steps: int) -> list[float]:
    """Runs `steps` steps one by one, blocking on each; returns (and records) their seconds."""
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
      start = time.perf_counter()
      self._run()
      jax.block_until_ready((self.state, self.metrics))
      times.append(time.perf_counter() - start)
    self.faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    self.times.extend(times)
    return times

  def loss(self) -> float:
    """The last step's loss (an evaluation step's: its summed loss over its weight; none for
    decoding)."""
    m = self.metrics
    if self.step in ('decode', 'prefill'):
      return float('nan')
    return float(m['loss']) if 'loss' in m else float(m['loss_sum'] / m['weight'])

  def row(self, peak: float) -> dict:
    config = self.config
    step_s = statistics.median(self.times)
    tokens = config.train.batch_size * config.data.seq_len
    per_token = flops_lib.train_flops_per_token(config.model, config.data.seq_len,
                                                flops_lib.predicted_fraction(config))
    extra = {}
    if self.step == 'eval':
      per_token /= flops_lib.TRAIN_MULTIPLIER
    elif self.step == 'decode':
      tokens = config.train.batch_size
      per_token = flops_lib.decode_flops_per_token(config.model, config.data.seq_len)
      extra = {'cache_bytes': sum(x.nbytes for x in jax.tree.leaves(self.cache))}
    elif self.step == 'prefill':
      per_token = flops_lib.prefill_flops_per_token(config.model, config.data.seq_len)
      extra = {'cache_bytes': sum(x.nbytes for x in jax.tree.leaves(self.cache))}
    return {'name': self.name, 'kind': self.kind, 'step_s': step_s,
            'step_s_min': min(self.times), 'step_s_max': max(self.times),
            'steps': len(self.times), 'tokens_per_s': tokens / step_s,
            'flops_per_token': per_token, **utilization(per_token, tokens, step_s, peak),
            'peak_flops': peak, 'parameters': self.trainer.num_params(),
            'compile_s': self.compile_s, 'loss': self.loss(),
            'minor_faults_per_step': self.faults / len(self.times),
            **memory_bytes(self.compiled), **extra}


def out_of_memory(error: Exception) -> str | None:
  """The first line of an XLA error that says the device's memory ran out (at compilation or in
  a step), else None: such a variant is reported as not fitting and the others still run."""
  text = str(error).strip()
  if 'RESOURCE_EXHAUSTED' not in text and 'out of memory' not in text.lower():
    return None
  return text.splitlines()[0][:400]


def table(rows: list[dict]) -> str:
  """Markdown rows; `vs` is the ratio of median steps to `none`'s (or the first row's without
  one), with the range of the per-round ratios when they were timed in interleaved rounds."""
  base = next((r for r in rows if r['name'] == 'none'), rows[0])
  cache = any('cache_bytes' in r for r in rows)  # Decoding's key/value cache.
  lines = [f'| kind | step (ms) | vs {base["name"]} | tokens/s | GFLOPs/token | TFLOP/s | MFU | '
           'peak memory (MiB) | ' + ('cache (MiB) | ' if cache else '')
           + 'page faults / step | compile (s) |', '|---' * (10 + cache) + '|']
  for r in rows:
    rel = f'{r["step_s"] / base["step_s"]:.3f}x'
    ratios = round_ratios(r['rounds'], base['rounds'])
    if len(ratios) > 1 and r is not base:
      rel += f' ({min(ratios):.3f}-{max(ratios):.3f})'
    mem = f'{r["peak_bytes"] / 2**20:,.0f}' if 'peak_bytes' in r else '-'
    lines.append(f'| {r["name"]} | {1e3 * r["step_s"]:.1f} | {rel} | {r["tokens_per_s"]:,.0f} | '
                 f'{r["flops_per_token"] / 1e9:.4f} | {r["tflops_per_s"]:.3f} | '
                 f'{100 * r["mfu"]:.1f}% | {mem} | '
                 + (f'{r["cache_bytes"] / 2**20:,.1f} | ' if cache else '')
                 + f'{r["minor_faults_per_step"]:,.0f} | '
                 f'{r["compile_s"]:.1f} |')
  return '\n'.join(lines)


def serve(runners: dict[str, Runner], measure_peak_now, meta: dict) -> None:
  """The worker side of scripts/compare_torch.py: answers lines on stdin with `BENCH <json>`
  lines on stdout. `time KIND N` -> the N step times; `report` -> the rows (MFU against the
  better of `measure_peak_now()` then and at the start); `quit` (or EOF)."""
  def reply(obj):
    print('BENCH ' + json.dumps(obj), flush=True)
  start_peak = measure_peak_now()
  reply({'ready': sorted(runners),
         'parameters': {name: r.trainer.num_params() for name, r in runners.items()}})
  for line in sys.stdin:
    words = line.split()
    if not words or words[0] == 'quit':
      break
    if words[0] == 'time' and len(words) == 3 and words[1] in runners:
      reply({'times': runners[words[1]].time(int(words[2]))})
    elif words[0] == 'report':
      best = max(start_peak, measure_peak_now())
      reply({**meta, 'peak_flops': best, 'rows': [r.row(best) for r in runners.values()]})
    else:
      reply({'error': f'unknown command {line.strip()!r}'})


def check_step(config, step: str) -> None:
  """Refuses --step=decode or prefill for a model that is not a causal LM, before it is built."""
  if step in ('decode', 'prefill') and not issubclass(models.MODELS[config.model.type],
                                                       models.CausalLM):
    raise errors.ConfigError(f'--step={step} times a causal LM\'s '
                             f'{"decoding" if step == "decode" else "prompt"}; '
                             f'config.model.type={config.model.type!r}. Fix: a causal LM, or '
                             '--step=train or eval.')


def main(args):
  config = load_config(args, cli.overrides())
  kinds = args.kinds or [config.model.position.kind]
  # No tokenizer here: the data's size, or a synthetic task's vocabulary (it follows from the
  # config).
  config.model.vocab_size = (synthetic.Vocabulary(config.data.synthetic,
                                                  synthetic.task_name(config.data)).vocab_size
                             if synthetic.task_name(config.data) else config.data.vocab_size)
  rounds = args.rounds or min(5, args.steps)
  try:
    config_schema.check(config)  # Before the mesh reads config.mesh.
    round_sizes(args.steps, rounds)
    if len(set(kinds)) != len(kinds):
      raise errors.ConfigError(f'--kinds={",".join(kinds)} names a kind twice.')
    trials = variants(config, kinds, parse_vary(args.vary))
    mesh = sharding.make_mesh(config.mesh)
    for trial in trials.values():  # Every variant is checked before anything is compiled.
      with trial.unlocked():  # What a run derives from its length (FoPE's clipping).
        positions.derive(trial.model, resolve.trained_positions(trial)[0])
      resolve.validate(trial, sharding.data_parallel_size(mesh), jax.process_count())
      check_step(trial, args.step)
    passes = without_variants(trials, args.without)
  except (ValueError, KeyError, TypeError) as e:  # --vary's, round_sizes' and the mesh's.
    if isinstance(e, errors.ConfigError):
      raise
    raise errors.ConfigError(str(e)) from e
  n = args.peak_size or (2048 if jax.default_backend() == 'cpu' else 8192)
  measure = lambda: measure_peak(config.model.dtype, n, mesh)
  runners, unfit = {}, {}
  for name, without in passes.items():  # All compiled and warm first, then timed in turns.
    trial = trials[name.removesuffix(f'-{without}') if without else name]
    try:
      start = time.perf_counter()
      runner = Runner(trial, mesh, name, args.step, args.documents, without)
      print(f'[benchmark] {name}: built in {time.perf_counter() - start - runner.compile_s:.1f} '
            f's, compiled in {runner.compile_s:.1f} s', file=sys.stderr, flush=True)
      start = time.perf_counter()
      runner.warm(args.warmup)
    except jax.errors.JaxRuntimeError as e:
      if (reason := out_of_memory(e)) is None:
        raise
      unfit[name] = reason
      print(f'[benchmark] {name}: does not fit: {reason}', file=sys.stderr, flush=True)
      runner = None
      gc.collect()  # Its state and buffers go before the next variant is built.
      continue
    runners[name] = runner
    print(f'[benchmark] {name}: {args.warmup} warm-up steps in {time.perf_counter() - start:.2f} s',
          file=sys.stderr, flush=True)
  made = provenance.measurement()
  meta = {'date': made['date'], 'commit': made['commit'], 'made_with': made,
          'backend': jax.default_backend(),
          'device_kind': jax.devices()[0].device_kind, 'devices': mesh.devices.size,
          'peak_matmul_size': n, 'documents_per_row': args.documents, 'step': args.step,
          'config': config.to_dict(),
          'malloc': 'reuse' if host_memory.applied() else 'default',
          'unfit': unfit}  # Variant -> the error that said it does not fit.
  if args.serve:
    serve(runners, measure, meta)
    return
  start_peak = measure()
  timed = interleave({name: r.time for name, r in runners.items()}, args.steps, rounds)
  peak = max(start_peak, measure())  # The better of before and after the timing.
  rows = [{**r.row(peak), 'rounds': timed[name], 'without': passes[name]}
          for name, r in runners.items()]
  m = config.model
  print(f'\n{m.type} {m.num_layers} layers, d_model {m.d_model}, {m.num_heads} heads, d_ff '
        f'{m.d_ff}, vocab {m.vocab_size}, seq {config.data.seq_len}, batch '
        f'{config.train.batch_size}, {m.dtype}, remat {m.get("remat", "none")}, '
        f'{args.documents} document(s) per row; '
        f'{mesh.devices.size} x {jax.devices()[0].device_kind}; peak {peak / 1e12:.3f} TFLOP/s '
        f'({m.dtype} {n}x{n} matmul); median of {args.steps} steps each in '
        f'{rounds} interleaved rounds; {args.step} step\n')
  print(table(rows) if rows else '(no variant fitted)')
  for name, reason in unfit.items():
    print(f'{name}: does not fit ({reason})')
  if args.out:
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    files.write_json_atomic(args.out, {**meta, 'peak_flops': peak, 'steps': args.steps,
                                       'rounds_count': rounds, 'rows': rows})
    print(f'wrote {args.out}')


if __name__ == '__main__':
  cli.run(main, parser(), config_overrides=True)
