"""Seconds to build a config's model abstractly (shapes only, as the trainer and the importer
do before anything is allocated) at several depths: whether start-up grows linearly with the
layers.

  python scripts/build_time.py --config configs/lm.py --layers 12,50,100,200

Prints one row per depth: the parameter count and the seconds of the build (the best of
--repeats, after one build at the config's own depth to warm the imports and caches).
"""

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from flax import nnx  # pylint: disable=wrong-import-position

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import config_args  # pylint: disable=wrong-import-position
from roformer import models  # pylint: disable=wrong-import-position
from roformer import resolve  # pylint: disable=wrong-import-position


def build_seconds(model_cfg, repeats: int) -> tuple[int, float]:
  """(parameter count, best seconds of `repeats` abstract builds) of `model_cfg`."""
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    abstract = nnx.eval_shape(lambda: models.create(model_cfg, seed=0))
    best = min(best, time.perf_counter() - start)
  return models.parameter_count(nnx.state(abstract, nnx.Param)), best


def main(argv):
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--config', default='configs/lm.py')
  parser.add_argument('--layers', default='12,50,100,200', help='comma-separated depths')
  parser.add_argument('--repeats', type=cli.positive_int, default=1)
  args = parser.parse_args(argv)
  depths = cli.int_list('layers', args.layers.split(','))
  if min(depths) < 1:
    raise cli.UsageError(f'--layers={args.layers}: give depths of 1 or more, e.g. --layers=12,50.')
  config = config_args.load(args.config, [])
  build_seconds(config.model, 1)
  print(f'{args.config}: abstract build of the model (nnx.eval_shape), best of {args.repeats}')
  print('| layers | parameters | seconds |')
  print('|---|---|---|')
  for depth in depths:
    with config.model.unlocked():
      config.model.num_layers = depth
    resolve.validate(config)
    count, seconds = build_seconds(config.model, args.repeats)
    print(f'| {depth} | {count:,} | {seconds:.2f} |')


if __name__ == '__main__':
  cli.guard(main)(sys.argv[1:])
