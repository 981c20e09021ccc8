"""Length generalization on the synthetic tasks: the position schemes of 2023 and before (with
randomized positions and p-RoPE), trained at one length and evaluated at 1x, 2x, 4x and 8x it
(configs/synthetic.py), at five seeds.

  python scripts/sweep.py --sweep configs/sweeps/length.py --workdir runs/length
  python scripts/report.py runs/length       # accuracy vs length per task, with seed ranges
  python scripts/sweep.py --sweep configs/sweeps/length.py:smoke --workdir runs/length_smoke
  ...length.py:associative_recall  ...length.py:smoke,xl,alibi  # only those tasks / schemes
  ...length.py:seed=0,seed=1,seed=2                         # only those seeds (126 points)

`:smoke` trains a tiny model for 10 steps at one seed (rope and alibi unless schemes are named):
a check that the whole pipeline runs, not a result.

Points are named TASK,SCHEME,seed=N. Besides the schemes, `rope+random` is RoPE trained with
randomized positions from [0, 8 x the training length) (Ruoss et al. 2023) and `p-rope` RoPE
with its lowest quarter of frequencies unrotated (Barbero et al. 2024). Evaluation rows are
the same for every run (config.data.synthetic.seed), so seeds differ only in initialisation and
training rows.
"""

from configs import synthetic

KINDS = ('none', 'sinusoidal', 'learned', 'shaw', 'xl', 't5', 'alibi', 'kerple', 'fire', 'cope',
         'rope', 'xpos')
# Variants: name -> (kind, extra fields given the training length).
VARIANTS = {
    'rope+random': ('rope', lambda length: {'train.random_positions': 8 * length}),
    'p-rope': ('rope', lambda length: {'model.position.rope.keep_fraction': 0.75}),
}
SEEDS = (0, 1, 2, 3, 4)
TASKS = synthetic.TASKS  # The tasks that can be named.
# Run unless tasks are named: flip_flop joins them once its training settings are tuned.
DEFAULT_TASKS = ('passkey', 'associative_recall', 'copy')
SMOKE_LENGTHS = {'passkey': 48, 'associative_recall': 24, 'copy': 16, 'flip_flop': 16,
                 'niah_multikey': 32, 'niah_multivalue': 32, 'niah_multiquery': 32,
                 'variable_tracking': 48, 'common_words': 32}
SMOKE_SCHEMES = ('rope', 'alibi')  # What `:smoke` runs unless schemes are named.
# `:smoke`: a tiny model for a few steps (frontier.py's smoke points use it too).
SMOKE_OVERRIDES = {'model.d_model': 32, 'model.num_heads': 2, 'model.d_ff': 64,
                   'train.batch_size': 8, 'train.warmup_steps': 2, 'train.log_every': 5,
                   'train.eval_every': 10, 'train.checkpoint_every': 10,
                   'train.eval_batches': 1, 'data.synthetic.eval_examples': 16,
                   'eval.batch_size': 8}


def _scheme(name: str, length: int) -> dict:
  kind, extra = VARIANTS.get(name, (name, lambda length: {}))
  return {'model.position.kind': kind, **extra(length)}


def get_sweep(arg: str = ''):
  parts = [p for p in (arg or '').split(',') if p]
  chosen = [p for p in parts if p.startswith('seed=')]
  if not all(p[5:].isdecimal() and p[5:].isascii() for p in chosen):
    raise ValueError(f'configs/sweeps/length.py:{arg}: seed=N takes a whole number (one '
                     'seed=N per seed), e.g. seed=0,seed=1,seed=2.')
  parts = [p for p in parts if p not in chosen]
  smoke = 'smoke' in parts
  tasks = [p for p in parts if p in TASKS] or list(DEFAULT_TASKS)
  schemes = [p for p in parts if p in KINDS or p in VARIANTS] or (
      list(SMOKE_SCHEMES) if smoke else list(KINDS) + list(VARIANTS))
  unknown = sorted(set(parts) - {'smoke'} - set(tasks) - set(schemes))
  if unknown:
    raise ValueError(f'configs/sweeps/length.py:{arg}: unknown parts {unknown}; choose tasks '
                     f'{tuple(TASKS)}, schemes {KINDS + tuple(VARIANTS)}, seed=N and/or smoke.')
  overrides = {'eval.length_multipliers': (1, 2, 4, 8)}
  seeds = tuple(int(p[5:]) for p in chosen) or ((0,) if smoke else SEEDS)
  if smoke:  # A tiny model for a few steps: seconds per point.
    overrides.update({'model.num_layers': 1, **SMOKE_OVERRIDES})
  points = []
  for seed in seeds:  # Seed-major: a sweep cut short has every scheme at the first seed.
    for task in tasks:
      length = SMOKE_LENGTHS[task] if smoke else TASKS[task]['seq_len']
      train = {'steps': 10} if smoke else synthetic.train_fields(task)
      train = {f'train.{k}': v for k, v in train.items()}
      data = {f'data.synthetic.{k}': v for k, v in synthetic.data_fields(task).items()}
      for scheme in schemes:
        points.append({'name': f'{task},{scheme},seed={seed}', 'label': scheme,
                       'data.name': 'synthetic/' + task, 'data.seq_len': length, **train, **data,
                       'seed': seed, **_scheme(scheme, length)})
  return {'config': 'configs/synthetic.py', 'overrides': overrides, 'points': points,
          'eval_splits': ('validation',)}
