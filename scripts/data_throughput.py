"""Tokens per second that the training data pipeline delivers, from text and from the token
cache (config.data.token_cache), or for a synthetic task from rows built in the loop and from
the row cache a sweep fills (roformer/data/row_cache.py), at the config's batch shape.

  python scripts/data_throughput.py --config configs/lm.py --config.data.seq_len=512 \\
      --config.train.batch_size=8     # The medium preset's rows
  python scripts/data_throughput.py --config configs/mlm.py --config.data.name=files \\
      --config.data.files='DIR/*.jsonl.gz' --batches 400
  python scripts/data_throughput.py --config configs/synthetic.py:niah_multikey

For each form the script opens the train split and builds its training batches as train.py
does (the task's own pipeline; the tokenizer and, for the token cache or the row cache, the
cached ids or rows built first and not timed), takes `--warmup` batches, then times
`--batches` more, in the calling thread as the training loop reads them: tokens/s counts the
tokens that are not padding. No model runs; compare with the step's tokens/s
(scripts/benchmark.py) to see how far ahead of the model the pipeline is.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
from roformer import cli
from roformer import files
from roformer import provenance
from roformer import config_args
from roformer import resolve
from roformer import tasks
from roformer import workdir as workdir_lib
from roformer.data import row_cache



def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  p.add_argument('--config', default='configs/lm.py',
                 help='Config file FILE[:ARG]; --config.a.b=VALUE overrides its fields.')
  p.add_argument('--batches', type=cli.positive_int, default=200,
                 help='Batches timed per form.')
  p.add_argument('--warmup', type=int, default=10, help='Batches taken before the timing.')
  p.add_argument('--out', default='', help='Also write the results as JSON here.')
  return p


def measure(config, form: str, args) -> dict:
  config.data.token_cache = form == 'token cache'
  sources, tokenizer = workdir_lib.setup_data(config, splits=('train',))
  with tempfile.TemporaryDirectory() as rows:
    if form == 'row cache':  # The training rows the timing reads, as a sweep builds them.
      train = row_cache.streams(config, ())[0][0]
      row_cache.build([(train, (args.warmup + args.batches) * config.train.batch_size)],
                      rows)
    with row_cache.reading(rows if form == 'row cache' else None):
      return _timed(config, form, sources, tokenizer, args)


def _timed(config, form: str, sources, tokenizer, args) -> dict:
  batches = iter(tasks.for_config(config).batches(config, sources['train'], tokenizer,
                                                   train=True))
  for _ in range(args.warmup):
    next(batches)
  tokens, started = 0, time.perf_counter()
  for _ in range(args.batches):
    batch = next(batches)
    segments = batch.get('targets_segment_ids', batch.get('inputs_segment_ids'))
    tokens += int((segments > 0).sum())
  seconds = time.perf_counter() - started
  return {'form': form, 'batches': args.batches, 'tokens': tokens,
          'seconds': round(seconds, 3), 'tokens_per_s': round(tokens / seconds),
          'ms_per_batch': round(1e3 * seconds / args.batches, 3)}


def main(args):
  config = config_args.load(args.config, cli.overrides())
  resolve.validate(config)
  forms = ('built', 'row cache') if row_cache.streams(config, ()) else ('text', 'token cache')
  results = [{**measure(config, form, args), 'made_with': provenance.measurement()}
             for form in forms]
  print(f'{config.data.name}, rows of {config.data.seq_len} x {config.train.batch_size}:')
  for r in results:
    print(f"  {r['form']:>11}: {r['tokens_per_s']:>9,} tokens/s, {r['ms_per_batch']:.3f} ms a "
          f"batch ({r['tokens']:,} tokens in {r['seconds']:.2f} s)")
  if args.out:
    files.write_json_atomic(args.out, results)


if __name__ == '__main__':
  cli.run(main, parser(), config_overrides=True)
