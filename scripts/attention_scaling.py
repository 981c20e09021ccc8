"""Step time and memory of softmax vs FAVOR+ attention as the sequence length doubles.

  python scripts/attention_scaling.py [--lengths 512,1024,2048,4096,8192] [--repeats 3] \
      [--out RECORDS/attention_scaling.json] [--config.model.num_layers=4 ...]

For each attention kind and length, builds the train step of configs/performer.py (configs/lm.py
sizes; RoPE) at batch 1 on synthetic tokens, compiles it, and reports the compiled executable's
scratch memory (XLA's plan for intermediates: the L x L logits of softmax attention live here)
and the median wall time of `--repeats` steps after one warm-up step (blocking on the result).
Prints a Markdown table and writes the numbers as JSON, with the date and commit and what made
them (`made_with`: roformer/provenance.py) (scripts/docs_from_records.py's `scaling` blocks read
it).
"""

import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

from configs import performer  # pylint: disable=wrong-import-position
from roformer import attention_options  # pylint: disable=wrong-import-position
from roformer import cli  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import provenance  # pylint: disable=wrong-import-position
from roformer import config_args  # pylint: disable=wrong-import-position
from roformer import resolve  # pylint: disable=wrong-import-position
from roformer import sharding  # pylint: disable=wrong-import-position
from roformer import trainer as trainer_lib  # pylint: disable=wrong-import-position


def _config(kind: str, length: int, overrides: list):
  """The checked config of one row: one sequence of `length` tokens under attention `kind`."""
  config = performer.get_config('rope')
  att = config.model.attention
  att.kind = kind
  for field, spec in attention_options.SPECS.items():  # FAVOR+'s own fields, unread here.
    if not attention_options.reads(att, field):
      att[field] = spec.default
  config.data.seq_len = length
  config.train.batch_size = 1
  config.mesh.num_devices = 1
  resolve.validate(config_args.apply(config, overrides))
  return config


def measure(kind: str, length: int, repeats: int, overrides: list) -> dict:
  config = _config(kind, length, overrides)
  trainer = trainer_lib.Trainer(config, sharding.make_mesh(config.mesh))
  rng = np.random.default_rng(0)
  batch = {'inputs': rng.integers(5, config.model.vocab_size, (1, length)).astype(np.int32),
           'targets': rng.integers(5, config.model.vocab_size, (1, length)).astype(np.int32)}
  for name in ('inputs', 'targets'):
    batch[f'{name}_segment_ids'] = np.ones((1, length), np.int32)
    batch[f'{name}_positions'] = np.arange(length, dtype=np.int32)[None]
  batch = sharding.put_batch(batch, trainer.mesh)
  state = trainer.init_state()
  compiled = trainer.train_step.lower(state, batch).compile()
  memory = compiled.memory_analysis()
  state, metrics = trainer.train_step(state, batch)  # Warm-up.
  jax.block_until_ready(metrics)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = trainer.train_step(state, batch)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
  return {'attention': kind, 'length': length, 'step_seconds': statistics.median(times),
          'tokens_per_second': length / statistics.median(times),
          'temp_bytes': int(memory.temp_size_in_bytes),
          'argument_bytes': int(memory.argument_size_in_bytes),
          'loss': float(metrics['loss'])}


def main(argv=None):
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--lengths', default='512,1024,2048,4096,8192')
  parser.add_argument('--kinds', default='softmax,favor')
  parser.add_argument('--repeats', type=cli.positive_int, default=3)
  parser.add_argument('--out', default='')
  args, rest = parser.parse_known_args(argv)
  rest, overrides = cli.split_argv(['attention_scaling.py'] + rest)
  if rest[1:]:
    parser.error(f'unknown arguments {rest[1:]}; config fields are set with '
                 '--config.section.field=value')
  lengths, kinds = cli.int_list('lengths', args.lengths.split(',')), cli.comma_list(args.kinds)
  for length in lengths:  # Every row's config checked before the first compiles.
    for kind in kinds:
      _config(kind, length, overrides)
  rows = []
  for length in lengths:
    for kind in kinds:
      rows.append(measure(kind, length, args.repeats, overrides))
      r = rows[-1]
      print(f"{kind:>8} L={length:>5}: {r['step_seconds']:.3f} s/step, "
            f"{r['tokens_per_second']:,.0f} tok/s, scratch {r['temp_bytes'] / 2**20:,.1f} MiB",
            flush=True)
  print('\n| L | softmax s/step | favor s/step | softmax scratch MiB | favor scratch MiB |')
  print('|---|---|---|---|---|')
  by = {(r['attention'], r['length']): r for r in rows}
  for length in sorted({r['length'] for r in rows}):
    cells = []
    for key in ('step_seconds', 'temp_bytes'):
      for kind in ('softmax', 'favor'):
        r = by.get((kind, length))
        cells.append('' if r is None else (f'{r[key]:.3f}' if key == 'step_seconds'
                                           else f'{r[key] / 2**20:,.1f}'))
    print(f'| {length} | ' + ' | '.join(cells) + ' |')
  if args.out:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    made = provenance.measurement()
    files.write_json_atomic(args.out, {'device': str(jax.devices()[0]), 'rows': rows,
                                       'date': made['date'], 'commit': made['commit'],
                                       'made_with': made})
    print(f'wrote {args.out}')


if __name__ == '__main__':
  cli.guard(main)()
