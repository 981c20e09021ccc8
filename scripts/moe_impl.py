"""Times the two computations of a mixture-of-experts MLP (`model.moe.impl`: 'dense' and
'ragged', roformer/moe.py) on this machine: one jitted forward and backward pass of the same
layer on the same tokens, the median of several. They compute the same outputs and gradients
(tests/test_moe.py); 'dense' runs every expert on every token (num_experts / k times the experts'
FLOPs), 'ragged' the k chosen ones through jax.lax.ragged_dot.

  python scripts/moe_impl.py                     # 8 experts, k 2, 4,096 tokens, d 256, f 512
  python scripts/moe_impl.py --experts 32 --k 4
"""

import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=wrong-import-position
import jax.numpy as jnp  # pylint: disable=wrong-import-position
from flax import nnx  # pylint: disable=wrong-import-position

from configs import test as test_config  # pylint: disable=wrong-import-position
from roformer import cli  # pylint: disable=wrong-import-position
from roformer import layers  # pylint: disable=wrong-import-position


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  for name, default in (('experts', 8), ('k', 2), ('tokens', 4096), ('d_model', 256),
                        ('d_ff', 512), ('repeats', 7)):
    p.add_argument(f'--{name}', type=cli.positive_int, default=default)
  return p


def main(args):
  if args.k > args.experts:
    raise cli.UsageError(f'--k={args.k} is more than --experts={args.experts}. Fix: at most '
                         'the number of experts.')
  x = jax.random.normal(jax.random.key(0), (1, args.tokens, args.d_model))
  print(f'{jax.devices()[0].device_kind}: {args.experts} experts, k {args.k}, {args.tokens} '
        f'tokens, d_model {args.d_model}, d_ff {args.d_ff}; forward and backward, median of '
        f'{args.repeats}')
  for impl in ('dense', 'ragged'):
    cfg = test_config.get_config().model
    cfg.update(mlp='moe', activation='silu', biases='none', d_model=args.d_model, d_ff=args.d_ff)
    cfg.moe.update(num_experts=args.experts, experts_per_token=args.k, impl=impl)
    graphdef, params = nnx.split(layers.mlp(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)))
    step = jax.jit(jax.grad(lambda p, g=graphdef: jnp.sum(nnx.merge(g, p)(x) ** 2)))
    jax.block_until_ready(step(params))  # Compiled.
    times = []
    for _ in range(args.repeats):
      start = time.perf_counter()
      jax.block_until_ready(step(params))
      times.append(time.perf_counter() - start)
    print(f'  {impl:6s} {1e3 * statistics.median(times):8.1f} ms')


if __name__ == '__main__':
  cli.run(main, parser())
