"""The loss a model starts at, against ln V: each initialisation (`model.init`) of a preset at
step 0, over a few seeds, from a forward pass on token ids drawn uniformly (a model at step 0
has learned nothing of any text, so its loss is the same on any ids up to the noise shown).

  python scripts/init_loss.py --config configs/lm_125m.py --fields model.dtype=float32 \
      --batch 1 --seq_len 2048
  python scripts/init_loss.py --config configs/lm.py:llama

Prints one row per initialisation: the mean and the range over --seeds of the step-0 loss, and
ln V. With --runs, instead: the training loss at --steps of each kept run's metrics.jsonl (the
first steps of train.py runs that differ in model.init), one row per run.

  python scripts/init_loss.py --runs docs/results/init_2026-11-28/* --steps 1,10,25,50,100
"""

import math
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=wrong-import-position
import jax.numpy as jnp  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import config_args  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import layers  # pylint: disable=wrong-import-position
from roformer import models  # pylint: disable=wrong-import-position
from roformer import positions  # pylint: disable=wrong-import-position
from roformer import resolve  # pylint: disable=wrong-import-position


def step0_loss(model_cfg, seed: int, batch: int, seq_len: int) -> float:
  model = models.create(model_cfg, seed=seed)
  ids = jax.random.randint(jax.random.key(1000 + seed), (batch, seq_len + 1), 5,
                           model_cfg.vocab_size)
  pos = jnp.broadcast_to(jnp.arange(seq_len), (batch, seq_len))
  logits = jax.jit(lambda t, p: model(t, p, jnp.ones_like(t)))(ids[:, :-1], pos)
  logp = jax.nn.log_softmax(logits, axis=-1)
  return float(-jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1).mean())


def first_steps(runs, steps) -> str:
  """The Markdown table of each run's training loss at `steps`, from its kept metrics.jsonl."""
  from roformer import metrics  # pylint: disable=g-import-not-at-top
  from roformer import saved_config  # pylint: disable=g-import-not-at-top
  lines = ['| run | model.init | ' + ' | '.join(f'step {s}' for s in steps) + ' |',
           '|---|---|' + '---|' * len(steps)]
  for run in runs:
    config = saved_config.load(run)  # Migrated: records from before model.init read 'classic'.
    loss = {r['step']: r['loss'] for r in metrics.read_jsonl(f'{run}/metrics.jsonl')
            if r['split'] == 'train'}
    cells = [f'{loss[s]:.3f}' if s in loss else '' for s in steps]
    lines.append(f'| {pathlib.Path(run).name} | {config.model.init} | '
                 + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def main(argv):
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--config')
  parser.add_argument('--runs', nargs='*', default=[], help='kept runs to table instead')
  parser.add_argument('--steps', default='1,10,25,50,100')
  parser.add_argument('--fields', nargs='*', default=[], help='FIELD=VALUE overrides')
  parser.add_argument('--seeds', type=cli.positive_int, default=3, help='how many (0 to N-1)')
  parser.add_argument('--batch', type=cli.positive_int, default=4)
  parser.add_argument('--seq_len', type=int, default=0, help='0: data.seq_len')
  args = parser.parse_args(argv)
  if args.seq_len < 0:
    raise cli.UsageError(f'--seq_len={args.seq_len}: give a length, or 0 for data.seq_len.')
  for field in args.fields:
    if '=' not in field:
      raise cli.UsageError(f'--fields {field}: write FIELD=VALUE, e.g. --fields '
                           'model.dtype=float32.')
  if args.runs:
    for run in args.runs:
      if not os.path.isfile(os.path.join(run, 'config.json')):
        raise errors.ConfigError(f'--runs: {run} has no config.json. Fix: give kept runs '
                                 '(scripts/keep_records.py) or workdirs.')
    print(first_steps(args.runs, cli.int_list('steps', args.steps.split(','))))
    return
  config = config_args.load(args.config, [tuple(f.split('=', 1)) for f in args.fields])
  if args.seq_len:
    config.data.seq_len = args.seq_len
  with config.unlocked():  # What a run derives from its length (FoPE's clipping), as train.py.
    positions.derive(config.model, resolve.trained_positions(config)[0])
  resolve.validate(config)
  m = config.model
  seq_len = config.data.seq_len
  print(f'{args.config} {" ".join(args.fields)}: d_model {m.d_model}, {m.num_layers} layers, '
        f'vocabulary {m.vocab_size} (ln V = {math.log(m.vocab_size):.2f}), tied '
        f'{m.tie_embeddings}; {args.batch} x {seq_len} uniform ids, seeds 0-{args.seeds - 1}')
  print('| init | step-0 loss, mean | min - max | minus ln V |')
  print('|---|---|---|---|')
  configured = m.init
  for init in layers.INITS:
    with m.unlocked():
      m.init = init
    losses = [step0_loss(m, seed, args.batch, seq_len) for seed in range(args.seeds)]
    mean = float(np.mean(losses))
    print(f'| {init}{" (the config)" if init == configured else ""} | {mean:.2f} | '
          f'{min(losses):.2f} - {max(losses):.2f} | {mean - math.log(m.vocab_size):+.2f} |')


if __name__ == '__main__':
  cli.guard(main)(sys.argv[1:])
