"""PoPE, DAPE, gated and differential attention beside the schemes they are compared with, on
the synthetic length tasks where their claims can show: passkey, RULER's multi-key needles and
variable tracking, and flip-flop; trained at one length, evaluated at 1x, 2x, 4x and 8x it, at
five seeds.

  python scripts/sweep.py --sweep configs/sweeps/options.py --workdir runs/options
  python scripts/report.py runs/options
  ...options.py:niah_multikey,pope,rope      # only those tasks / schemes
  ...options.py:smoke                        # a tiny model for a few steps: a pipeline check
  ...options.py:llama                        # every point with the Llama-family block
  ...options.py:passkey,seed=0,seed=1        # only those seeds (seed=N as often as wanted)

About 20 core-hours in all (10 hours on 2 cores) by rope's step rates before the 2025-26
lines joined (they add half as many points again, and TAPA's runs took over twice rope's
wall-clock time in the sweep below, two groups sharing the cores), most
of it multi-key retrieval's 6,000 steps (about 23 minutes a run on one core); run a task at a
time and join the runs with scripts/keep_records.py where one machine cannot hold it all.
`:new2026` (70 points, passkey and flip-flop) took about 22 minutes on 2 cores in two legs
(2026-11-28); passkey and flip-flop for the 12 schemes before it (120 points) 33 min 45 s
(2026-11-29); variable tracking for alibi, alibi+dape, none and none+diff (20 points) 68 min
50 s, DAPE's five seeds 67 min of it (2026-11-29).

Schemes (points are named TASK,SCHEME,seed=N):
- the new ones: `pope` (position kind), `alibi+dape` (DAPE's MLP over ALiBi's logits and bias),
  `rope+gate` (RoPE with gated attention), `rope+diff` and `none+diff` (differential
  attention with RoPE and without positions);
- the 2025-26 ones (`...options.py:new2026`: these and `rope` on passkey and flip-flop):
  `fope`, `rope_id`, `tapa`, `rope+float` (random float sampling), with `rope+random`
  (integer randomized positions) beside them, and `tapa_lr5` (TAPA at a fifth of the learning
  rate, the ratio its paper trained it at);
- the baselines: `rope`, `none`, `alibi`, `fire`, `fox`, `path`, `stick_breaking`; plain
  `rope`'s runs are evaluated again with YaRN at each length's factor (`eval_results.rope_yarn.json`),
  the baseline of PoPE's extrapolation claim.
The points that are frontier.py's (same task, scheme and seed) have the same names and fields,
so pointing both sweeps at one workdir shares their runs.
"""

from configs import synthetic
from configs.sweeps import frontier
from configs.sweeps import length

_kind = lambda kind: lambda length: {'model.position.kind': kind}
SCHEMES = {
    **{kind: _kind(kind) for kind in ('rope', 'none', 'alibi', 'fire', 'fox', 'path', 'pope')},
    'stick_breaking': frontier.SCHEMES['stick_breaking'],
    'alibi+dape': lambda length: {'model.position.kind': 'alibi', 'model.attention.dape': True},
    'rope+gate': lambda length: {'model.position.kind': 'rope',
                                 'model.attention.output_gate': True},
    'rope+diff': lambda length: {'model.position.kind': 'rope',
                                 'model.attention.differential': True},
    'none+diff': lambda length: {'model.position.kind': 'none',
                                 'model.attention.differential': True},
    # The 2025-26 schemes, each at its paper's settings: FoPE, RoPE-ID and TAPA as kinds
    # (FoPE's clipping length and RoPE-ID's training length are the run's own), random float
    # sampling on RoPE over the training length, beside integer randomized positions over 8x it
    # (length.py's rope+random), the sampling it is claimed against.
    **{kind: _kind(kind) for kind in ('fope', 'rope_id', 'tapa')},
    'rope+float': lambda length: {'model.position.kind': 'rope',
                                  'train.float_positions': length},
    'rope+random': lambda length: {'model.position.kind': 'rope',
                                   'train.random_positions': 8 * length},
    # TAPA at a fifth of the learning rate: its paper trained it at 2e-5 where RoPE had 1e-4.
    'tapa_lr5': lambda length: {'model.position.kind': 'tapa',
                                'train.learning_rate': synthetic.LEARNING_RATE / 5},
}
NEW_2026 = ('fope', 'rope_id', 'tapa', 'tapa_lr5', 'rope+float', 'rope+random')
TASKS = ('passkey', 'niah_multikey', 'variable_tracking', 'flip_flop')
SEEDS = (0, 1, 2, 3, 4)


def get_sweep(arg: str = ''):
  parts = [p for p in (arg or '').split(',') if p]
  chosen = [p for p in parts if p.startswith('seed=')]
  if not all(p[5:].isdigit() for p in chosen):
    raise ValueError(f'configs/sweeps/options.py:{arg}: seed=N takes a whole number (one '
                     'seed=N per seed), e.g. passkey,seed=0,seed=1.')
  parts = [p for p in parts if p not in chosen]
  smoke, llama = 'smoke' in parts, 'llama' in parts
  if 'new2026' in parts:  # The 2025-26 schemes beside RoPE on the two fastest tasks.
    parts = [p for p in parts if p != 'new2026'] + ['passkey', 'flip_flop', 'rope',
                                                      *NEW_2026]
  unknown = sorted(set(parts) - {'smoke', 'llama'} - set(TASKS) - set(SCHEMES))
  if unknown:
    raise ValueError(f'configs/sweeps/options.py:{arg}: unknown parts {unknown}; choose tasks '
                     f'{TASKS}, schemes {tuple(SCHEMES)}, new2026, llama (frontier.py:llama\'s '
                     'block), seed=N and/or smoke.')
  tasks = [p for p in parts if p in TASKS] or list(TASKS)
  schemes = [p for p in parts if p in SCHEMES] or list(
      ('rope', 'pope', 'rope+diff', 'alibi+dape') if smoke else SCHEMES)
  overrides = {'eval.length_multipliers': (1, 2, 4, 8)}
  seeds = tuple(int(p[5:]) for p in chosen) or SEEDS
  if smoke:
    overrides.update(length.SMOKE_OVERRIDES)
    seeds = tuple(int(p[5:]) for p in chosen) or (0,)
  points = [frontier._point(task, scheme, seed, smoke, schemes=SCHEMES, llama=llama)  # pylint: disable=protected-access
            for seed in seeds for task in tasks for scheme in schemes]
  # PoPE's extrapolation is claimed against RoPE with YaRN: plain RoPE's runs (the scheme
  # labelled `rope`, not rope+gate or rope+diff) are evaluated again with YaRN at each length's
  # factor.
  yarn = {'when': {'label': 'rope'},
          'overrides': {'model.position.rope.scaling.kind': 'yarn',
                        'eval.scale_rope_to_length': True}}
  return {'config': 'configs/synthetic.py', 'overrides': overrides, 'points': points,
          'evals': {'': {}, 'rope_yarn': yarn}, 'eval_splits': ('validation',)}
