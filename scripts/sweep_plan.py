"""What a sweep will run, settled before anything runs: each point's whole config and the
checks it must pass (`check_points`), the work of each group and the order that ends soonest
(`group_work`, `longest_first`), and how many processes share the machine (`default_parallel`).
scripts/sweep.py runs the plan."""

import dataclasses
import os

from roformer import cli
from roformer import config_args
from roformer import errors
from roformer import flops
from roformer import resolve
from roformer import sweeps
from roformer.data import passkey_text
from roformer.data import synthetic


def on_accelerator() -> bool:
  """Whether the children's runs will use an accelerator rather than the CPU."""
  return any(os.path.exists(p) for p in ('/dev/nvidia0', '/dev/accel0')) or any(
      name in os.environ.get('JAX_PLATFORMS', '') for name in ('cuda', 'gpu', 'tpu', 'rocm'))


def on_gpu() -> bool:
  """Whether that accelerator is a GPU, which several processes can share (a TPU chip is
  opened by one process at a time)."""
  platforms = os.environ.get('JAX_PLATFORMS', '')
  if platforms:
    return any(name in platforms for name in ('cuda', 'gpu', 'rocm'))
  return any(os.path.exists(p) for p in ('/dev/nvidia0', '/dev/kfd'))


# A step of fewer model FLOPs than this (all members together) is taken as too small for one
# group to keep a GPU busy: about 2.5 ms of arithmetic at 400 TFLOP/s. A rough bound: models
# this small run far below the peak. The one measured (a multi-key retrieval group, 1.8e10, 55
# times under it): 12 such groups at once kept an H200 running kernels all the time, at 65-70
# steps/s each, 29-35 for the heaviest two (docs/performance.md; fewer at once not tried).
HOST_BOUND_STEP_FLOPS = 1e12


def point_config(sweep, point, workdir: str = '/unused', extra=()):
  """The whole config `point` trains with in `workdir` (its train.py command's flags on the
  sweep's config, then the --config flags of `extra`; {sweep} in a value is the directory
  `workdir` is in)."""
  _, flags = cli.split_argv(sweeps.train_command(sweep, point, workdir, extra)[1:])
  return config_args.load(sweep.config, flags)


def with_extra_steps(sweep, extra):
  """`sweep` with the train.steps that `extra` (--extra_train_flags) gives its points in their
  fields, where they decide which points are finished (a point trained to its old last step
  would otherwise be taken as finished). Each point's steps are those of its whole config
  (`point_config`, which reads the flags as train.py does); a config that does not load is
  left to check_points to name."""
  _, flags = cli.split_argv(['train.py', *extra])
  if not any(field == 'train.steps' for field, _ in flags):
    return sweep
  points = []
  for p in sweep.points:
    try:
      steps = int(point_config(sweep, p, extra=extra).train.steps)
    except Exception:  # pylint: disable=broad-except  # check_points names it.
      return sweep
    points.append(dataclasses.replace(p, fields={**p.fields, 'train.steps': steps}))
  return dataclasses.replace(sweep, points=points)


def check_points(spec: str, sweep, root: str, extra=()) -> None:
  """Before any point runs: every point's config passes train.py's own checks, and a point
  started or finished in `root` was started with the config the sweep gives it now (a sweep
  file changed between two runs would otherwise leave runs of two configs side by side in one
  report). A finished point whose checkpoints were deleted is skipped when it has every
  evaluation that applies to it, and refused when it lacks one. One ConfigError naming the
  point and the sweep file. A directory of kept records (scripts/keep_records.py: finished
  points without checkpoints, and none of the logs/ that a sweep writes as its points run) is
  refused as a whole."""
  finished = [p.name for p in sweep.points if sweeps.finished_without_checkpoints(
      os.path.join(root, p.name), p.fields.get('train.steps'))]
  if finished and not os.path.isdir(os.path.join(root, 'logs')):
    raise errors.ConfigError(
        f'--workdir={root} holds kept records (finished points without checkpoints, such as '
        f'{finished[0]}, and no logs/), not a sweep\'s runs. Fix: give the sweep its own '
        f'--workdir; report the records with python scripts/report.py {root}.')
  for point in sweep.points:
    workdir = os.path.join(root, point.name)
    try:
      without = point.name in finished
      gone = [n for n in point.needs if n in finished]
      if gone and not sweeps.trained(workdir, point.fields.get('train.steps')):
        raise errors.ConfigError(
            f'it starts from {gone[0]}, whose checkpoints were deleted once it finished, so it '
            f'cannot start. Fix: restore {os.path.join(root, gone[0], "checkpoints")}, or move '
            f'{os.path.join(root, gone[0])} aside to train it again.')
      missing = [name or '(plain)' for name, ev in sweep.evals.items() if sweeps.applies(
          ev, point) and not sweeps.evaluated(workdir, name, point.fields.get('train.steps'))]
      if without and missing:
        raise errors.ConfigError(
            f'{workdir} finished training and its checkpoints were deleted, so its evaluations '
            f'{", ".join(missing)} can no longer be made. Fix: restore its checkpoints/, or '
            'move the workdir aside to train the point again.')
      resolve.check_rerun(point_config(sweep, point, workdir, extra), workdir,
                          finished_records=without)
    except errors.ConfigError as e:
      raise errors.ConfigError(
          f'{spec}, point {point.name} (the sweep\'s overrides and the point\'s fields on '
          f'{sweep.config}): {e}') from None


def step_flops(sweep, group) -> float:
  """Model FLOPs of one training step of `group`'s members together (roformer/flops.py) from
  the first point's whole config, with the vocabulary the run will have: a synthetic task's
  own, else the tokenizer's size the data asks for (model.vocab_size is set from the
  tokenizer when the run starts), and the output layer at the tokens the model predicts (a
  masked LM's selection)."""
  config = point_config(sweep, group.points[0])
  model = config.model.copy_and_resolve_references()
  task = synthetic.task_name(config.data)
  if task and not passkey_text.reads_text(config.data.synthetic):
    model.vocab_size = synthetic.Vocabulary(config.data.synthetic, task).vocab_size
  elif config.data.get('vocab_size'):
    model.vocab_size = config.data.vocab_size
  seq_len, rows = config.data.seq_len, config.train.batch_size
  per_token = flops.train_flops_per_token(model, seq_len, flops.predicted_fraction(config))
  return per_token * seq_len * rows * len(group.points)


def default_parallel(sweep=None, groups=()) -> int:
  """One training process per CPU core when the runs use the CPU (a step of the sizes a sweep
  trains keeps to about one core). On a GPU, one per CPU core too when every group's step is
  under HOST_BOUND_STEP_FLOPS (docs/performance.md: 12 multi-key retrieval groups of 3 x 256
  rows at once ran 29-70 steps/s each on an H200, with a kernel running all the time); else,
  and on other accelerators, one, which a vmapped group of a larger model keeps busy. One also
  where a step's size cannot be worked out from the config."""
  cores = len(sweeps.usable_cpus())
  if not on_accelerator():
    return cores
  if not groups or not on_gpu():
    return 1
  try:
    small = all(step_flops(sweep, g) < HOST_BOUND_STEP_FLOPS for g in groups)
  except Exception:  # pylint: disable=broad-except  # Any config the count does not know.
    return 1
  return cores if small else 1


def share_accelerator(parallel: int) -> None:
  """Children that share one GPU allocate its memory as they need it: by default each JAX
  process takes 75% of it at start-up, and a second one would fail."""
  if parallel > 1 and on_gpu():
    os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')


def group_work(sweep, groups) -> dict[str, float]:
  """Each group's work, in tokens trained: steps x batch x length x members."""
  base = config_args.load_file(sweep.config)

  def work(group) -> float:
    fields = group.points[0].fields
    get = lambda key: fields.get(key, base[key.split('.')[0]][key.split('.')[1]])
    return float(get('train.steps')) * get('train.batch_size') * get('data.seq_len') * len(
        group.points)
  return {g.name: work(g) for g in groups}


def longest_first(groups, work: dict[str, float]) -> list:
  """The groups in the order that ends a sweep soonest on N processes: the most work first, so
  that the last to start are short; groups that start from another point keep their place
  after the ones they need."""
  free = [g for g in groups if not any(p.needs for p in g.points)]
  bound = [g for g in groups if any(p.needs for p in g.points)]
  return sorted(free, key=lambda g: work[g.name], reverse=True) + bound
