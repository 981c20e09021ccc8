"""Each fused attention kernel's Triton IR, lowered for CUDA on this machine (no GPU needed):
its size in lines, matmuls, loops and reductions per kind, so that a kernel can be compared with
RoPE's (the kernel with no bias) before a GPU compiles it.

  python scripts/kernel_ir.py                 # every kind that runs on the fused kernel
  python scripts/kernel_ir.py --kinds rope,alibi,kerple,fox
  python scripts/kernel_ir.py --kinds none,alibi --attention stick_breaking --length 4096
  python scripts/kernel_ir.py --kinds fire --dump /tmp/ir      # each kernel's IR as text too

The model is one layer of --d_model and --num_heads (the 125M preset's by default) on one row
of --length tokens in bfloat16, its gradient lowered with attention_impl='pallas' and
interpret mode off: the kernels of roformer/fused_bias.py and roformer/fused_stick_breaking.py
as a GPU run builds them. The IR is read where JAX's Pallas-to-Triton lowering makes it, a
function inside `jax._src` (this JAX version's); should a version move it, the script says so.
"""

import collections
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
from flax import nnx

from configs import lm
from roformer import attention_options
from roformer import cli
from roformer import errors
from roformer import files
from roformer import models
from roformer import positions
from roformer import resolve


def _pallas_kinds() -> list[str]:
  """The position kinds that declare the fused kernels (positions.capabilities)."""
  return [k for k in positions.kinds() if 'pallas' in positions.capabilities(k).implementations]


def _pallas_attention() -> list[str]:
  """The attention kinds that run on Pallas kernels (roformer/attention_options/)."""
  return [name for name, kind in attention_options.KINDS.items()
          if 'pallas' in (kind.implementations or ())]


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  p.add_argument('--kinds', type=cli.comma_list, default=[],
                 help='Position kinds, comma-separated (default: every kind whose '
                 'implementations include pallas).')
  p.add_argument('--attention', choices=_pallas_attention(),
                 default=_pallas_attention()[0],
                 help='config.model.attention.kind: the fused bias kernel (softmax) or an '
                 'attention kind with kernels of its own.')
  p.add_argument('--length', type=cli.positive_int, default=2048, help='Tokens in the row.')
  p.add_argument('--d_model', type=cli.positive_int, default=768)
  p.add_argument('--num_heads', type=cli.positive_int, default=12)
  p.add_argument('--dump', default='', help='Also write each kernel\'s IR to DIR/KIND.NAME.mlir.')
  return p


def _model_config(kind: str, args):
  config = lm.get_config()  # A decoder: causal attention, as the kernels' kinds need.
  config.model.update(num_layers=1, d_model=args.d_model,
                      num_heads=args.num_heads, d_ff=4 * args.d_model, dropout=0.0,
                      dtype='bfloat16', attention_impl='pallas', vocab_size=512)
  config.model.position.kind = kind
  config.model.attention.kind = args.attention
  config.data.update(seq_len=args.length, vocab_size=512)
  resolve.validate(config)  # The kind, the attention kind and pallas must fit together.
  return config.model


@contextlib.contextmanager
def _lowered_kernels():
  """The Triton modules that Pallas lowers inside the block, as (kernel name, IR text)."""
  try:
    from jax._src.pallas.triton import lowering  # pylint: disable=g-import-not-at-top
    original = lowering.lower_jaxpr_to_triton_module
  except (ImportError, AttributeError) as e:
    raise errors.ConfigError(
        f'this JAX ({jax.__version__}) has no jax._src.pallas.triton.lowering.'
        'lower_jaxpr_to_triton_module, where the script reads the IR. Fix: run it under '
        'the JAX of requirements.txt.') from e
  found = []

  def spy(jaxpr, *rest, **kwargs):
    result = original(jaxpr, *rest, **kwargs)
    name = jaxpr.debug_info.func_name if jaxpr.debug_info else 'kernel'
    found.append((name, result.module.operation.get_asm()))
    return result

  # The kernels choose interpret mode from the default backend: report a GPU while lowering.
  backend = jax.default_backend
  lowering.lower_jaxpr_to_triton_module, jax.default_backend = spy, lambda: 'gpu'
  try:
    yield found
  finally:
    lowering.lower_jaxpr_to_triton_module, jax.default_backend = original, backend


def kernel_ir(kind: str, args) -> list[tuple[str, str]]:
  """(kernel name, Triton IR) of each Pallas kernel in one layer's gradient for `kind`."""
  cfg = _model_config(kind, args)
  graphdef, params, rest = nnx.split(models.create(cfg, seed=0), nnx.Param, ...)
  tokens = jnp.zeros((1, args.length), jnp.int32)
  pos = jnp.arange(args.length)[None]
  segments = jnp.ones((1, args.length), jnp.int32)

  def loss(params):
    out = nnx.merge(graphdef, params, rest)(tokens, pos, segments)
    return jnp.sum(out.astype(jnp.float32))
  with _lowered_kernels() as found:
    jax.jit(jax.grad(loss)).trace(params).lower(lowering_platforms=('cuda',))
  return found


def _op(line: str) -> str:
  """The operation a line of MLIR text starts (after its results, if any), or ''."""
  text = line.split(' = ', 1)[1] if ' = ' in line else line.strip()
  if not (text[:1].isalpha() or text[:1] == '"'):
    return ''
  return text.split('(')[0].split(' ')[0].strip('"')


def counts(ir: str) -> dict:
  ops = collections.Counter(_op(line) for line in ir.splitlines())
  return {'lines': ir.count('\n'), 'dots': ops['tt.dot'], 'loops': ops['scf.for'],
          'reductions': ops['tt.reduce']}


def main(args):
  rows = []
  kinds = args.kinds or _pallas_kinds()
  for kind in kinds:  # Combined kinds (rope+fox) too, as the registry declares them.
    try:
      runs = 'pallas' in positions.capabilities(kind).implementations
    except (KeyError, ValueError) as e:
      raise errors.ConfigError(f'--kinds: {e}') from e
    if not runs:
      raise errors.ConfigError(f'--kinds: {kind} does not run on the fused kernels. Fix: name '
                               f'some of {_pallas_kinds()} (docs/positions.md).')
  for kind in kinds:
    try:
      _model_config(kind, args)  # The config's own checks, each one line; a bug keeps its trace.
    except errors.ConfigError as e:
      raise errors.ConfigError(f'{kind} with --attention={args.attention}: {e}') from e
    kernels = kernel_ir(kind, args)
    if not kernels:  # Every kind here declares the kernels: none lowered is a bug.
      raise RuntimeError(f'{kind} with --attention={args.attention} lowered no Pallas kernel.')
    rows += [(kind, name, ir) for name, ir in kernels]
  if args.dump:  # Only once every kind has lowered: a refused kind leaves nothing written.
    os.makedirs(args.dump, exist_ok=True)
    for kind, name, ir in rows:
      files.write_text_atomic(os.path.join(args.dump, f'{kind}.{name}.mlir'), ir)
  print(f'one layer, d_model {args.d_model}, {args.num_heads} heads, {args.length} tokens, '
        f'bfloat16, attention {args.attention}; Triton IR lowered for CUDA, JAX {jax.__version__}')
  print('\n| kind | kernel | IR lines | matmuls | loops | reductions |\n|---|---|---|---|---|---|')
  for kind, name, ir in rows:
    c = counts(ir)
    print(f'| {kind} | {name} | {c["lines"]} | {c["dots"]} | {c["loops"]} | {c["reductions"]} |')


if __name__ == '__main__':
  cli.run(main, parser())
