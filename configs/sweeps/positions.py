"""The default comparison of position schemes on the causal LM (configs/lm.py).

  python scripts/sweep.py --config configs/lm.py --sweep configs/sweeps/positions.py \\
      --workdir runs/sweep
  python scripts/sweep.py --config configs/lm.py --sweep configs/sweeps/positions.py:smoke \\
      --workdir runs/sweep_smoke                 # a few minutes on 2 CPU cores
  ...positions.py:smoke,rope,alibi               # only those schemes (also without smoke)

Eleven schemes at two seeds, trained at configs/lm.py's sizes for 200 steps, then evaluated on
the validation split at 1, 2, 4 and 8 times the training length; RoPE points are evaluated
again with linear, NTK and YaRN scaling set to each evaluation length (factor L / trained L).
"""

KINDS = ('none', 'sinusoidal', 'learned', 'shaw', 't5', 'alibi', 'xl', 'kerple', 'fire', 'cope',
         'rope')
SEEDS = (0, 1)
LENGTHS = (1, 2, 4, 8)
ROPE_SCALINGS = ('linear', 'ntk', 'yarn')


def get_sweep(arg: str = ''):
  parts = [p for p in (arg or '').split(',') if p]
  smoke = 'smoke' in parts
  kinds = [p for p in parts if p != 'smoke'] or list(KINDS)
  unknown = sorted(set(kinds) - set(KINDS))
  if unknown:
    raise ValueError(f'configs/sweeps/positions.py:{arg}: unknown kinds {unknown}; choose from '
                     f'{KINDS} and optionally smoke.')
  overrides = {'train.steps': 200, 'train.warmup_steps': 20, 'train.eval_every': 50,
               'train.checkpoint_every': 100, 'eval.length_multipliers': LENGTHS}
  seeds = SEEDS
  if smoke:  # Tiny model, short run, a few evaluation batches: seconds per point.
    overrides.update({
        'data.vocab_size': 512, 'data.seq_len': 64, 'model.num_layers': 2, 'model.d_model': 64,
        'model.num_heads': 4, 'model.d_ff': 128, 'train.steps': 30, 'train.warmup_steps': 3,
        'train.eval_every': 15, 'train.eval_batches': 4, 'train.checkpoint_every': 15,
        'train.log_every': 5, 'eval.max_batches': 4})
    seeds = (0,)
  rope_evals = {
      f'rope_{kind}': {
          'when': {'model.position.kind': 'rope'},
          'overrides': {'model.position.rope.scaling.kind': kind,
                        'eval.scale_rope_to_length': True}}
      for kind in ROPE_SCALINGS}
  return {
      'config': 'configs/lm.py',
      'overrides': overrides,
      # Seed-major: a sweep cut short has every scheme at the first seed.
      'points': [{'model.position.kind': kind, 'seed': seed} for seed in seeds for kind in kinds],
      'evals': {'': {}, **rope_evals},
      'eval_splits': ('validation',),
  }
