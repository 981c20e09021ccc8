"""The position schemes of 2025 beside the earlier ones, on the synthetic length tasks: trained at
one length and evaluated at 1x, 2x, 4x and 8x it, at five seeds (the sibling of length.py, with
flip-flop as a fourth task).

  python scripts/sweep.py --sweep configs/sweeps/frontier.py --workdir runs/frontier
  python scripts/report.py runs/frontier
  ...frontier.py:flip_flop,path,rope        # only those tasks / schemes
  ...frontier.py:budget                     # the training-budget axis (0.5x, 1x, 2x the steps)
  ...frontier.py:smoke                      # a tiny model for a few steps: a pipeline check
                                            # (SMOKE_SCHEMES: one scheme of each family)
  ...frontier.py:llama                      # every point with the Llama-family block

Schemes (points are named TASK,SCHEME,seed=N, with `,steps=Kx` on the budget axis):
- the data-dependent ones: `fox`, `rope+fox`, `path`, `path+fox` (position kinds), and
  `stick_breaking` (attention.kind=stick_breaking with no other positions);
- hybrid layouts over the two layers: `rnope` (a RoPE layer, then one without positions; Yang
  et al. 2025) and `rnope_swa` (the RoPE layer with a sliding window of a quarter of the training
  length, the other global);
- the baselines they are compared with: `rope`, `none`, `alibi`, `xl`;
- follow-ups run only when named: `fox_gate5` and `path+fox_gate5` (FoX's gate bias starting at
  5 instead of 0).
The earlier schemes on passkey, associative recall and copy are in length.py's sweep (the same
points, so their runs can be shared by pointing both sweeps at one workdir).

With `llama`, every point has the Llama-family block (configs/lm.py:llama_fields: RMSNorm, SwiGLU
at 2/3 of d_ff, two key/value heads for four query heads, no biases, untied output, Llama's
initialisation) in place of the classic one, and its name ends in `,block=llama`, so that both
blocks' runs can share one workdir.
"""

from configs import lm
from configs import synthetic
from configs.sweeps import length

BASELINES = ('rope', 'none', 'alibi', 'xl')
# Scheme name -> the fields it sets, given the training length.
SCHEMES = {
    **{kind: (lambda kind: lambda length: {'model.position.kind': kind})(kind)
       for kind in BASELINES + ('fox', 'rope+fox', 'path', 'path+fox')},
    'stick_breaking': lambda length: {'model.position.kind': 'none',
                                      'model.attention.kind': 'stick_breaking'},
    'rnope': lambda length: {'model.layer_kinds': ('rope', 'none')},
    'rnope_swa': lambda length: {'model.layer_kinds': ('rope', 'none'),
                                 'model.layer_windows': (max(length // 4, 2), 0)},
}
# Follow-ups, run only when named: FoX with its forget gates starting near 1 instead of 1/2
# (bias 5: sigmoid(5) = 0.993, a decay of exp(-0.0067) per token instead of 1/2), to tell the
# gate's starting point from the scheme where FoX fails to learn a task.
FOLLOW_UPS = {
    f'{kind}_gate5': (lambda kind: lambda length: {
        'model.position.kind': kind, 'model.position.fox.gate_bias_init': 5.0})(kind)
    for kind in ('fox', 'path+fox')}
TASKS = ('passkey', 'associative_recall', 'copy', 'flip_flop')
SEEDS = (0, 1, 2, 3, 4)
# The training-budget axis: these schemes on these tasks at each multiple of the task's steps.
BUDGET_SCHEMES = ('rope', 'fox', 'path', 'xl', 'rnope')
BUDGET_TASKS = ('passkey', 'associative_recall')
BUDGETS = (0.5, 1.0, 2.0)
SMOKE_LENGTHS = length.SMOKE_LENGTHS


def block_fields(smoke: bool) -> dict:
  """The Llama-family block's fields at the sweep's model sizes (the synthetic tasks', or the
  smoke model's)."""
  sizes = length.SMOKE_OVERRIDES if smoke else {
      f'model.{k}': v for k, v in synthetic.get_config('passkey').model.items()
      if k in ('d_ff', 'num_heads')}
  fields = lm.llama_fields(sizes['model.d_ff'], sizes['model.num_heads'])
  return {f'model.{k}': v for k, v in fields.items()}


def _point(task: str, scheme: str, seed: int, smoke: bool, budget: float = 1.0,
           schemes: dict | None = None, llama: bool = False) -> dict:
  """One point: `scheme`'s fields (from `schemes`, default this sweep's) on `task`, with the
  Llama-family block if `llama`."""
  length = SMOKE_LENGTHS[task] if smoke else synthetic.TASKS[task]['seq_len']
  train = {'steps': 10} if smoke else synthetic.train_fields(task)
  name = f'{task},{scheme},seed={seed}'
  if budget != 1.0:
    steps = int(round(train['steps'] * budget))
    train = {**train, 'steps': steps, 'checkpoint_every': steps}
    name = f'{task},{scheme},steps={budget:g}x,seed={seed}'
  block = block_fields(smoke) if llama else {}
  if llama:
    name += ',block=llama'
  return {'name': name, 'label': scheme, 'data.name': 'synthetic/' + task, **block,
          'data.seq_len': length, **{f'train.{k}': v for k, v in train.items()}, 'seed': seed,
          **{f'data.synthetic.{k}': v for k, v in synthetic.data_fields(task).items()},
          **(schemes or {**SCHEMES, **FOLLOW_UPS})[scheme](length)}


# :smoke checks the pipeline of each family the sweep adds beside a baseline: a data-dependent
# gate, a data-dependent rotation, stick-breaking attention and a hybrid layout.
SMOKE_SCHEMES = ('rope', 'fox', 'path', 'stick_breaking', 'rnope_swa')


def get_sweep(arg: str = ''):
  parts = [p for p in (arg or '').split(',') if p]
  smoke, budget, llama = 'smoke' in parts, 'budget' in parts, 'llama' in parts
  known = set(SCHEMES) | set(FOLLOW_UPS)
  unknown = sorted(set(parts) - {'smoke', 'budget', 'llama'} - set(TASKS) - known)
  if unknown:
    raise ValueError(f'configs/sweeps/frontier.py:{arg}: unknown parts {unknown}; choose tasks '
                     f'{TASKS}, schemes {tuple(SCHEMES) + tuple(FOLLOW_UPS)}, budget, llama '
                     'and/or smoke.')
  tasks = [p for p in parts if p in TASKS] or list(BUDGET_TASKS if budget else TASKS)
  schemes = [p for p in parts if p in known] or list(
      BUDGET_SCHEMES if budget else SMOKE_SCHEMES if smoke else SCHEMES)
  overrides = {'eval.length_multipliers': (1, 2, 4, 8)}
  seeds = SEEDS
  if smoke:  # length.py's tiny model, with both layers kept for the hybrid layouts.
    overrides.update(length.SMOKE_OVERRIDES)
    seeds = (0,)
  points = []
  for seed in seeds:  # Seed-major: a sweep cut short has every scheme at the first seed.
    for task in tasks:
      for scheme in schemes:
        for factor in (BUDGETS if budget else (1.0,)):
          points.append(_point(task, scheme, seed, smoke, factor, llama=llama))
  return {'config': 'configs/synthetic.py', 'overrides': overrides, 'points': points,
          'eval_splits': ('validation',)}
