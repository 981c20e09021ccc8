"""How fast this host drives a group of seeds in one vmapped step, with the model made too small
to cost anything: the loop's ceiling, with the rows built in the loop and read from the row
cache (roformer/data/row_cache.py).

  python scripts/group_rate.py                                   # multi-key retrieval, 3 seeds
  python scripts/group_rate.py --config configs/synthetic.py:associative_recall --steps 400

A sweep's group on an accelerator runs at the least of its device step and this rate (the
batches, their transfer, the launch and the loop's bookkeeping, with one tiny model's step
beside them; on the CPU that model's step is computed here too, so the rate is a lower bound of
the ceiling). Each form trains `--seeds` as one group for `--steps` steps (vmapped, as on an
accelerator) in a temporary directory, with the model set to one layer of width 8, and prints
the group's steps per second over the log intervals after the first (its median and range). The
config's batch shape, task and steps between log lines are kept.
"""

import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
from roformer import cli
from roformer import files
from roformer import provenance
from roformer import config_args
from roformer import errors
from roformer import logs
from roformer import loop
from roformer import resolve
from roformer import sweeps
from roformer.data import row_cache



def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  p.add_argument('--config', default='configs/synthetic.py:niah_multikey',
                 help='Config file FILE[:ARG] of a synthetic task; --config.a.b=VALUE '
                 'overrides its fields.')
  p.add_argument('--seeds', type=cli.comma_list, default=['0', '1', '2'],
                 help="The group's seeds.")
  p.add_argument('--steps', type=int, default=600, help='Steps per form.')
  p.add_argument('--out', default='', help='Also write the results as JSON here.')
  return p

TINY = {'d_model': 8, 'num_heads': 1, 'd_ff': 8, 'num_layers': 1}


def measure(config, seeds, cached: bool) -> dict:
  with tempfile.TemporaryDirectory() as root:
    rows = os.path.join(root, 'rows') if cached else None
    streams = []
    if cached:
      for seed in seeds:
        member = config.copy_and_resolve_references()
        member.seed = seed
        streams += row_cache.streams(member, ())[:1]  # Its training rows.
      row_cache.build(streams, rows, len(sweeps.usable_cpus()))
    with row_cache.reading(rows):
      loop.train_seeds(config, os.path.join(root, 'seed={seed}'), seeds, vmapped=True)
    if cached and not any(os.path.basename(path) == row_cache.digest(s)
                          for s, _ in streams for path in row_cache.entries_read()):
      raise errors.DataError(f'the timed run read none of the rows built for it in {rows}: '
                             'its row cache entries did not open (see the warning above).')
    with open(os.path.join(root, f'seed={seeds[0]}', 'metrics.jsonl'), encoding='utf-8') as f:
      rates = [r['steps_per_sec'] for r in map(json.loads, f)
               if r.get('split') == 'train' and 'steps_per_sec' in r][1:]
  return {'form': 'row cache' if cached else 'built', 'steps_per_s': statistics.median(rates),
          'low': min(rates), 'high': max(rates), 'intervals': len(rates)}


def main(args):
  logs.setup(tracebacks=cli.debug_requested())  # The timed run's lines, the cache's included.
  try:
    seeds = [int(s) for s in args.seeds]
  except ValueError:
    seeds = []
  if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
    raise errors.ConfigError(f'--seeds={",".join(args.seeds)}: give distinct seeds, whole '
                             'numbers of 0 or more. Fix: e.g. --seeds=0,1,2.')
  config = config_args.load(args.config, cli.overrides())
  if args.steps < 3 * config.train.log_every:
    raise errors.ConfigError(f'--steps={args.steps} leaves fewer than two log intervals of '
                             f'config.train.log_every={config.train.log_every} steps after the '
                             f'first. Fix: --steps={3 * config.train.log_every} or more.')
  config.model.update(TINY)
  config.train.update(steps=args.steps, eval_every=10 * args.steps,
                      checkpoint_every=10 * args.steps,
                      warmup_steps=min(config.train.warmup_steps, args.steps))
  resolve.validate(config)
  if not row_cache.streams(config, ()):
    raise errors.ConfigError(f'--config={args.config} is not a synthetic task in its own '
                             "words (config.data.name='synthetic/TASK'): no rows to cache.")
  results = [{**measure(config, seeds, cached), 'made_with': provenance.measurement()}
             for cached in (False, True)]
  print(f'{config.data.name}: {len(seeds)} seeds of {config.train.batch_size} rows of '
        f'{config.data.seq_len}, vmapped, model {TINY}:')
  for r in results:
    print(f"  {r['form']:>9}: {r['steps_per_s']:.1f} group steps/s ({r['low']:.1f}-"
          f"{r['high']:.1f} over {r['intervals']} log intervals)")
  if args.out:
    files.write_json_atomic(args.out, results)


if __name__ == '__main__':
  cli.run(main, parser(), config_overrides=True)
