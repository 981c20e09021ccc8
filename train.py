"""Train a model: python train.py --config configs/lm.py --workdir runs/lm [--config.a.b=v].

  python train.py --config configs/synthetic.py:passkey --workdir 'runs/passkey/seed={seed}' \
      --seeds=0,1,2 --eval_splits=validation

trains the config at three seeds in one program (each its own workdir, as three runs would
write it), then evaluates each as eval.py would.

A bad flag, config file, override or workdir ends with one line `error: ...` naming it and the
fix (--debug shows the traceback); see roformer/cli.py.
"""

import jax
from absl import app
from absl import flags

from roformer import cli
from roformer import config_args
from roformer import logs
from roformer import loop

_CONFIG = flags.DEFINE_string('config', 'configs/lm.py', 'Training config file FILE[:ARG]; '
                              'override its fields with --config.a.b=VALUE.')
_WORKDIR = cli.DEFINE_path('workdir', None, 'Directory for checkpoints and metrics.',
                           required=True)
_SEEDS = flags.DEFINE_list(
    'seeds', [], 'Train the config at each of these seeds in one program (one compilation; '
    'vmapped on accelerators); --workdir names each run with {seed}.')
_EVAL_SPLITS = flags.DEFINE_list(
    'eval_splits', [], 'After the last step, evaluate on these splits as eval.py --splits=... '
    'would (eval_results.json), in this process.')
_DISTRIBUTED = flags.DEFINE_bool(
    'distributed', False, 'Multi-host: call jax.distributed.initialize() first. On a cluster '
    'that JAX detects (Slurm, Cloud TPU, GKE TPU, Open MPI 4) it finds the processes itself; '
    'elsewhere give the three flags below in every process.')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None, 'With --distributed: host:port of process 0, the same on every '
    'process (or JAX_COORDINATOR_ADDRESS).')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None,
                                      'With --distributed: how many processes take part.')
_PROCESS_ID = flags.DEFINE_integer('process_id', None,
                                   'With --distributed: this process, 0 .. num_processes - 1.')


def initialize_distributed() -> None:
  """jax.distributed.initialize() with the flags that were given (the others detected)."""
  given = [f'--{f.name}' for f in (_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID)
           if f.value is not None]
  if not _DISTRIBUTED.value:
    if given:
      raise app.UsageError(f'{", ".join(given)} given without --distributed. Fix: add '
                           '--distributed.')
    return
  if (_NUM_PROCESSES.value is None) != (_PROCESS_ID.value is None):
    raise app.UsageError('--num_processes and --process_id go together. Fix: give both (or '
                         'neither, where the cluster environment provides them).')
  if _NUM_PROCESSES.value is not None and _NUM_PROCESSES.value < 1:
    raise app.UsageError(f'--num_processes={_NUM_PROCESSES.value}. Fix: the number of processes '
                         'taking part, at least 1.')
  if _NUM_PROCESSES.value is not None and not 0 <= _PROCESS_ID.value < _NUM_PROCESSES.value:
    raise app.UsageError(f'--process_id={_PROCESS_ID.value} is not in 0 .. '
                         f'{_NUM_PROCESSES.value - 1}. Fix: number the processes from 0.')
  try:
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  except ValueError as e:  # What no flag or detected cluster gave (JAX's message names it).
    raise app.UsageError(f'--distributed: {e} No cluster environment was detected. Fix: give '
                         'every process --coordinator_address=HOST:PORT (of process 0), '
                         '--num_processes=N and --process_id=I.') from None


def main(argv):
  cli.no_arguments(argv)
  config = config_args.load(_CONFIG.value, cli.overrides())
  logs.setup(tracebacks=cli.debug_requested())
  seeds = cli.int_list('seeds', _SEEDS.value)
  eval_splits = tuple(_EVAL_SPLITS.value)
  initialize_distributed()
  if seeds:
    lasts = loop.train_seeds(config, _WORKDIR.value, seeds, eval_splits=eval_splits)
  else:
    lasts = [loop.train_and_evaluate(config, _WORKDIR.value, eval_splits=eval_splits)]
  if 'preempted' in lasts[0]:
    print(f'stopped by {lasts[0]["preempted"]["signal"]} at step '
          f'{lasts[0]["preempted"]["step"]} with a checkpoint; rerun the same command to resume.')


if __name__ == '__main__':
  cli.run(main, config_overrides=True)
