"""Attention on the first token, by layer, for trained causal LMs (roformer/sinks.py).

  python scripts/attention_sinks.py --out OUT \\
      --workdir 'runs/options/passkey,rope,seed=0' --workdir 'runs/options/passkey,rope+gate,seed=0'

Each workdir's latest checkpoint (or --step) runs the task's evaluation pass on up to
--max_batches validation batches with every attention layer's weights recorded. Workdirs whose
names differ only in `,seed=N` (a sweep's points) are one label, reported as mean ± std over
them. Writes OUT/sinks.json (every run: per layer and per head), OUT/sinks.md (a table per
label and layer, with uniform attention's share over the same queries) and OUT/sinks.png.
Bad input prints one `error:` line and exits with status 1.
"""

import collections
import os
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# pylint: disable=wrong-import-position
import numpy as np
from absl import logging as absl_logging

from roformer import attention_options
from roformer import cli
from roformer import errors
from roformer import files
from roformer import model_types
from roformer import provenance
from roformer import resolve
from roformer import saved_config
from roformer import sinks
from roformer import trainer as trainer_lib
# pylint: enable=wrong-import-position



def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  p.add_argument('--workdir', dest='workdirs', action='append', default=[],
                 help="A causal LM run written by train.py; give several (a sweep's points) to "
                 'compare them.')
  p.add_argument('--out', type=cli.path_arg, required=True,
                 help='Directory for sinks.json, sinks.md and sinks.png.')
  p.add_argument('--step', type=int, default=None,
                 help="Checkpoint step (default: each run's latest).")
  p.add_argument('--max_batches', type=cli.positive_int, default=8,
                 help='Validation batches per run.')
  return p


def label_of(workdir: str) -> str:
  """A run's label: its directory's name without the sweep's `,seed=N`."""
  return re.sub(r',seed=\d+', '', os.path.basename(os.path.normpath(workdir)))


def check(workdir: str, step):
  """The run's saved config, refused before anything compiles where it cannot be measured."""
  if not os.path.isfile(os.path.join(workdir, 'config.json')):
    raise errors.ConfigError(f'--workdir={workdir!r} has no config.json. Fix: point it at a '
                             'directory that train.py wrote.')
  config = saved_config.load(workdir)
  if not model_types.of(config.model).decoder_only:
    raise errors.ConfigError(
        f'--workdir={workdir!r} holds a {config.model.type} model; the first token\'s share is '
        f"measured for {model_types.offering('decoder_only')}. Fix: give "
        f"{' or '.join(model_types.named('decoder_only'))} runs.")
  attention = config.model.attention
  why = sinks.unmeasurable(attention.kind, [o.field for o in attention_options.enabled(attention)],
                           causal=True)
  if why:
    raise errors.ConfigError(f'--workdir={workdir!r}: {why}')
  trainer_lib.checkpoint_step(workdir, step)  # No checkpoint: one error line.
  return config


def measure(workdir: str, config, passes: dict, step, max_batches: int) -> dict:
  """One run's measurement as the JSON record sinks.json keeps; `passes` holds the compiled
  evaluation passes by `sinks.same_model`, so that a sweep's seeds compile once."""
  run = resolve.for_evaluation(config, workdir, step, ('validation',))
  trainer = trainer_lib.Trainer(run.config, run.mesh)
  # Each layer apart: the blocks as a loop, whether or not the run scanned them.
  params = trainer.saved_params(trainer_lib.restore_params(trainer, run.workdir, run.step))
  batches = trainer.task.batches(run.config, run.sources['validation'], run.tokenizer,
                                 train=False, batch_size=run.config.eval.batch_size)
  key = sinks.same_model(run.config)
  try:
    if key not in passes:
      passes[key] = sinks.evaluation_pass(trainer.saved_graphdef, trainer.task)
    got = sinks.measure(trainer.saved_graphdef, params, trainer.task, batches, max_batches,
                        step=passes[key])
  except errors.ConfigError as e:
    raise errors.ConfigError(f'--workdir={workdir!r}: {e}') from None
  return {'workdir': workdir, 'label': label_of(workdir), 'step': run.step,
          'mass': got.mass.tolist(), 'per_head': got.per_head.tolist(),
          'uniform': got.uniform.tolist(), 'queries': got.queries.tolist()}


def summary(runs: list[dict]) -> str:
  """The markdown tables: per label, the mean ± sample std over its runs of each layer's
  weight on the first token (mean over heads, then the largest head's), and uniform attention's
  share (one value per layer where windows make them differ)."""
  by_label = collections.defaultdict(list)
  for r in runs:
    by_label[r['label']].append(r)
  layers = max(len(r['mass']) for r in runs)
  head = ' | '.join(f'layer {i}' for i in range(layers))
  lines = ['Mean attention weight on the row\'s first token (queries from slot 1 that see it; '
           'mean over heads, then mean ± sample std over the runs of a label):', '',
           f'| label | runs | {head} | uniform attention |',
           '|' + '---|' * (layers + 3)]
  def uniform(group):  # One value, or one per layer where windows make them differ.
    shares = np.mean([r['uniform'] for r in group], axis=0)
    return (f'{shares[0]:.3f}' if np.allclose(shares, shares[0], atol=5e-4)
            else ' / '.join(f'{u:.3f}' for u in shares))

  def rows(value):
    for label, group in by_label.items():
      mass = np.array([value(r) for r in group])
      cells = [f'{m:.3f} ± {s:.3f}' if len(group) > 1 else f'{m:.3f}'
               for m, s in zip(mass.mean(0), mass.std(0, ddof=min(1, len(group) - 1)))]
      lines.append(f'| {label} | {len(group)} | {" | ".join(cells)} | {uniform(group)} |')
  rows(lambda r: r['mass'])
  lines += ['', 'The same for each layer\'s head with the most weight on the first token:', '',
            lines[2], lines[3]]
  rows(lambda r: np.max(r['per_head'], axis=1))
  return '\n'.join(lines) + '\n'


def plot(runs: list[dict], path: str) -> None:
  """Each label's weight on the first token by layer (mean and std over its runs), with
  uniform attention's share dashed."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  by_label = collections.defaultdict(list)
  for r in runs:
    by_label[r['label']].append(r)
  fig, ax = plt.subplots(figsize=(6, 4))
  for label, group in by_label.items():
    m = np.array([r['mass'] for r in group])
    line = ax.errorbar(np.arange(m.shape[1]), m.mean(0), yerr=m.std(0, ddof=min(1, len(m) - 1)),
                       marker='o', capsize=3,
                       label=f'{label} ({len(group)})')
    ax.plot(np.arange(m.shape[1]), np.mean([r['uniform'] for r in group], axis=0), '--',
            color=line[0].get_color(), alpha=0.6)
  ax.plot([], [], '--', color='gray', label='uniform attention (each label\'s colour)')
  ax.set_xlabel('layer')
  ax.set_ylabel('attention weight on the first token')
  ax.legend(fontsize=8)
  fig.tight_layout()
  files.save_figure_atomic(fig, path, dpi=120)
  plt.close(fig)


def main(args):
  """Checks every workdir, then measures each and writes the three files."""
  absl_logging.set_verbosity(absl_logging.WARNING)
  if not args.workdirs:
    raise errors.ConfigError('no --workdir given. Fix: pass one or more causal LM runs.')
  seen = {}
  for workdir in args.workdirs:  # One run given twice would count as two seeds.
    real = os.path.realpath(workdir)
    if real in seen:
      raise errors.ConfigError(f'--workdir={workdir!r} is the run --workdir={seen[real]!r} '
                               'names already: each run is one seed of its label. Fix: give '
                               'each run once.')
    seen[real] = workdir
  configs = [check(w, args.step) for w in args.workdirs]  # Every check before the first compile,
  os.makedirs(args.out, exist_ok=True)  # and the output directory before any measurement.
  runs, passes = [], {}
  for workdir, config in zip(args.workdirs, configs):
    runs.append({**measure(workdir, config, passes, args.step, args.max_batches),
                 'made_with': provenance.measurement()})
    print(f'{runs[-1]["label"]} ({workdir}): ' + ', '.join(f'{m:.3f}' for m in runs[-1]['mass']))
  files.write_json_atomic(os.path.join(args.out, 'sinks.json'), runs)
  table = summary(runs)
  files.write_text_atomic(os.path.join(args.out, 'sinks.md'), table)
  plot(runs, os.path.join(args.out, 'sinks.png'))
  print(table)


if __name__ == '__main__':
  cli.run(main, parser())
