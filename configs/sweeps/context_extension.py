"""Context extension at small scale, after Chen et al. 2023 (arXiv 2306.15595): a RoPE causal LM
trained at 256 tokens, then continued briefly at 1024 with each way of extending RoPE, next to
the same scalings applied at evaluation time only (no fine-tuning).

  python scripts/sweep.py --sweep configs/sweeps/context_extension.py --workdir runs/extension
  python scripts/report.py runs/extension
  python scripts/sweep.py --sweep configs/sweeps/context_extension.py:smoke --workdir runs/ext

Points: `base` (configs/lm.py: 600 steps at 256 tokens), then `continue_none` (plain
extrapolation: the same frequencies at 1024), `continue_linear` (position interpolation,
factor 4), `continue_ntk` and `continue_yarn` (factor 4), each `init_from` the base for
CONTINUE_STEPS steps at 1024 tokens with as many tokens per step as the base (batch 2). The base
is evaluated at 256, 1024 and 2048 as trained and with each scaling (factor 4) at 1024 and
2048; each continued run at 1024 and 2048. Validation split, perplexity per length and per
position bucket. `:smoke` runs the base and two continuations (none, linear) on a tiny model
for a few steps: a check that the pipeline runs, not a result.
"""

SCALINGS = ('none', 'linear', 'ntk', 'yarn')
FACTOR = 4.0  # 1024 / 256.
CONTINUE_STEPS = 200


def get_sweep(arg: str = ''):
  smoke = arg == 'smoke'
  if arg not in ('', 'smoke'):
    raise ValueError(f'configs/sweeps/context_extension.py:{arg}: use no argument or smoke.')
  short, long = (32, 128) if smoke else (256, 1024)
  overrides = {'model.position.kind': 'rope', 'eval.batch_size': 2, 'train.eval_batches': 20,
               'eval.position_bucket': 8 if smoke else 64}  # One width for every point.
  base = {'name': 'base', 'data.seq_len': short, 'eval.length_multipliers': (1, 4, 8)}
  continued = {'init_from': '{sweep}/base', 'data.seq_len': long, 'train.batch_size': 2,
               'train.steps': CONTINUE_STEPS, 'train.warmup_steps': 20,
               'train.learning_rate': 3e-4, 'train.eval_every': 100,
               'train.checkpoint_every': CONTINUE_STEPS, 'eval.length_multipliers': (1, 2)}
  if smoke:  # Tiny model, a few steps: seconds per point.
    overrides.update({'data.vocab_size': 512, 'model.num_layers': 2, 'model.d_model': 32,
                      'model.d_ff': 64, 'train.log_every': 5, 'train.eval_batches': 2,
                      'eval.max_batches': 2})
    base.update({'train.steps': 20, 'train.warmup_steps': 2, 'train.eval_every': 10,
                 'train.checkpoint_every': 10})
    continued.update({'train.steps': 6, 'train.warmup_steps': 1, 'train.eval_every': 6,
                      'train.checkpoint_every': 6})
  scalings = ('none', 'linear') if smoke else SCALINGS
  points = [base]
  for kind in scalings:
    scaling = {} if kind == 'none' else {'model.position.rope.scaling.kind': kind,
                                          'model.position.rope.scaling.factor': FACTOR}
    points.append({'name': f'continue_{kind}', **continued, **scaling})
  evals = {'': {}}
  for kind in scalings[1:]:
    evals[f'rope_{kind}'] = {'when': {'name': 'base'}, 'overrides': {
        'model.position.rope.scaling.kind': kind, 'model.position.rope.scaling.factor': FACTOR,
        'eval.length_multipliers': (4, 8)}}
  return {'config': 'configs/lm.py', 'overrides': overrides, 'points': points, 'evals': evals,
          'eval_splits': ('validation',)}
