"""Context extension as the papers measure it: perplexity and passkey retrieval beyond the
trained length, with extension at evaluation only and after a short continuation.

  python scripts/sweep.py --sweep configs/sweeps/passkey_extension.py --workdir runs/passkey_ext
  python scripts/report.py runs/passkey_ext
  ...passkey_extension.py:base          # the base models only, evaluated plainly
  ...passkey_extension.py:seed=1,seed=2 # only these seeds (seed=N as often as wanted; with base)
  ...passkey_extension.py:smoke         # a tiny model for a few steps: a pipeline check

The base (`base,seed=N`) is configs/lm.py's RoPE model trained at TRAIN_LENGTH tokens on
Shakespeare mixed with passkey rows hidden in Shakespeare's own text (a share KEY_WEIGHT of the
rows; roformer/data/passkey_text.py), for BASE_STEPS steps: a constant learning rate after the
warmup, then a decay over the last BASE_DECAY_STEPS (train.schedule='wsd'). A recipe meant to
retrieve at its training length at every seed, where a fifth of the rows and a cosine decay did
at one seed of three (docs/length_generalization.md says how far each seed has got). The
constant phase is the same computation for any BASE_STEPS, so a checkpoint from it resumes
into a longer base. Every run is
evaluated on the validation split's plays (perplexity, sliding windows: each token scored once
with at least half the window as context) and its passkey rows (the share answered in full, by
depth band of the key), at 1x-16x the training length:

- as trained (plain extrapolation) and, at evaluation only, with each RoPE scaling at the
  length's own factor (length / TRAIN_LENGTH: linear, NTK, YaRN, llama3) or dynamic NTK;
- with each training-free remap of the distances (ReRoPE and its leaky form, Self-Extend,
  STRING, Dual Chunk Attention, attention sinks with a window), sized by
  roformer/positions/remap.py's `fitted` as scripts/evaluate_extensions.sh sizes them, each
  keeping RoPE's distances within what the base was trained on up to 16x where the method can;
- after CONTINUE_STEPS steps at CONTINUE_FACTOR x the length with each scaling
  (`continue_KIND,seed=N`, `init_from` its seed's base, as many tokens per step, passkey rows
  too), evaluated at 4x-16x and at the original length (an extension that costs short-context
  quality shows it there);
- after CONTINUE_STEPS steps of PoSE (`continue_pose,seed=N`, Zhu et al. 2024,
  roformer/positions/randomized.py): rows of the trained length whose position ids skip to cover
  the longest evaluation length, evaluated at 1x-16x like the base.
"""

from roformer.positions import remap

TRAIN_LENGTH = 128
MULTIPLIERS = (1, 2, 4, 8, 16)
# Seeds 0-2. Measured on one core at seed 0 (docs/length_generalization.md): a base 68 minutes
# with its plain evaluation, its 11 other evaluations 3-4 minutes each, each of the 5
# continuations with its evaluations 6-7: 2 h 15 min per seed; about 3 h 25 min for the three
# on 2 cores (2 h 15 min for two). `:seed=N` runs only the seeds named.
SEEDS = (0, 1, 2)
BASE_STEPS = 4500
BASE_DECAY_STEPS = 500  # The base's last steps, decaying from 1e-3 to 1e-4 (1 - sqrt).
KEY_WEIGHT = 0.5  # The share of training rows that are passkey rows.
CONTINUE_FACTOR = 4
CONTINUE_STEPS = 200
CONTINUED = ('none', 'linear', 'ntk', 'yarn')
EVAL_SCALINGS = ('linear', 'ntk', 'yarn', 'llama3', 'dynamic')
POSE_CHUNKS = 2  # The paper's.


def get_sweep(arg: str = ''):
  parts = [part for part in arg.split(',') if part]
  chosen = [part for part in parts if part.startswith('seed=')]
  rest = sorted(set(parts) - set(chosen))
  if rest not in ([], ['base'], ['smoke']) or not all(
      part[5:].isdigit() for part in chosen):
    raise ValueError(f'configs/sweeps/passkey_extension.py:{arg}: use base or smoke, and '
                     'seed=N for each seed to run (default: SEEDS), e.g. base,seed=1.')
  arg = rest[0] if rest else ''
  smoke = arg == 'smoke'
  length = 80 if smoke else TRAIN_LENGTH
  seeds = tuple(int(part[5:]) for part in chosen) or ((0,) if smoke else SEEDS)
  overrides = {
      'model.position.kind': 'rope', 'data.seq_len': length,
      'data.mixture': {'plays': {'weight': 1.0 - KEY_WEIGHT},
                       'keys': {'weight': KEY_WEIGHT, 'name': 'synthetic/passkey'}},
      'data.synthetic.filler': 'text',
      'data.synthetic.eval_examples': 64,  # Passkey rows per length: a share to 1/64.
      'train.batch_size': 16, 'train.steps': BASE_STEPS, 'train.warmup_steps': 100,
      'train.schedule': 'wsd', 'train.decay_steps': BASE_DECAY_STEPS,
      'train.end_lr_fraction': 0.1,
      'train.eval_every': 250, 'train.checkpoint_every': 500, 'train.eval_batches': 8,
      'train.log_every': 50, 'train.pose_target_length': 0,
      'eval.length_multipliers': MULTIPLIERS, 'eval.protocol': 'sliding',
      'eval.batch_size': 16, 'eval.max_batches': 16, 'eval.position_bucket': length // 2}
  continued = {'init_from': '{sweep}/base,seed={seed}',
               'data.seq_len': length * CONTINUE_FACTOR,
               'train.batch_size': 16 // CONTINUE_FACTOR, 'train.steps': CONTINUE_STEPS,
               'train.warmup_steps': 20, 'train.learning_rate': 3e-4,
               'train.schedule': 'cosine', 'train.decay_steps': 0,  # Over all its steps.
               'train.eval_every': CONTINUE_STEPS, 'train.checkpoint_every': CONTINUE_STEPS,
               'eval.length_multipliers': (1, 2, 4)}
  if smoke:  # Tiny model, a few steps: seconds per point.
    overrides.update({'data.vocab_size': 512, 'model.num_layers': 2, 'model.d_model': 32,
                      'model.d_ff': 64, 'train.steps': 6, 'train.warmup_steps': 1,
                      'train.decay_steps': 2,
                      'train.eval_every': 6, 'train.checkpoint_every': 6,
                      'train.eval_batches': 1, 'train.log_every': 3, 'eval.max_batches': 1,
                      'eval.length_multipliers': (1, 4)})
    continued.update({'train.steps': 2, 'train.warmup_steps': 1, 'train.eval_every': 2,
                      'train.checkpoint_every': 2, 'eval.length_multipliers': (1,)})
  # PoSE continues at the trained length, as many rows per step as the base, with positions
  # covering the longest evaluation, and is evaluated at every multiple like the base.
  multipliers = overrides['eval.length_multipliers']
  posed = {**continued, 'data.seq_len': length, 'train.batch_size': overrides['train.batch_size'],
           'train.pose_target_length': length * max(multipliers),
           'train.pose_chunks': POSE_CHUNKS, 'eval.length_multipliers': multipliers}
  points = []
  for seed in seeds:
    points.append({'name': f'base,seed={seed}', 'seed': seed})
    if arg != 'base':
      for kind in (('none', 'linear') if smoke else CONTINUED):
        scaling = {} if kind == 'none' else {
            'model.position.rope.scaling.kind': kind,
            'model.position.rope.scaling.factor': float(CONTINUE_FACTOR),
            'model.position.rope.scaling.original_length': length}
        points.append({'name': f'continue_{kind},seed={seed}', 'seed': seed, **continued,
                       'init_from': continued['init_from'].format(sweep='{sweep}', seed=seed),
                       **scaling})
      points.append({'name': f'continue_pose,seed={seed}', 'seed': seed, **posed,
                     'init_from': continued['init_from'].format(sweep='{sweep}', seed=seed)})
  # `when`: the base models (the continued ones are longer, or PoSE's).
  base = {'data.seq_len': length, 'train.pose_target_length': 0}
  evals = {'': {}}
  if arg != 'base':
    evals['short'] = {'when': {'data.seq_len': length * CONTINUE_FACTOR}, 'overrides': {
        'data.seq_len': length, 'eval.length_multipliers': (1,)}}
    for kind in (EVAL_SCALINGS[:1] if smoke else EVAL_SCALINGS):
      scaled = {'model.position.rope.scaling.kind': kind}
      if kind != 'dynamic':
        scaled['eval.scale_rope_to_length'] = True
      evals[f'rope_{kind}'] = {'when': base, 'overrides': scaled}
    longest = length * max(overrides['eval.length_multipliers'])
    for method, options in remap.fitted(length, longest).items():
      evals[f'remap_{method}'] = {'when': base, 'overrides': {
          'model.position.rope.remap.method': method,
          **{f'model.position.rope.remap.{k}': v for k, v in options.items()}}}
  # Each seed's base is an hour of one core: grouped, the seeds would take turns in one process
  # while the other cores wait (sweeps.py, group_seeds).
  return {'config': 'configs/lm.py', 'overrides': overrides, 'points': points, 'evals': evals,
          'eval_splits': ('validation',), 'group_seeds': False}
