r"""Train a model: python train.py --config configs/lm.py --workdir runs/lm [--config.a.b=v].

  python train.py --config configs/synthetic.py:passkey --workdir 'runs/passkey/seed={seed}' \
      --seeds=0,1,2 --eval_splits=validation

trains the config at three seeds in one program (each its own workdir, as three runs would
write it), then evaluates each as eval.py would.

A bad flag, config file, override or workdir ends with one line `error: ...` naming it and the
fix (--debug shows the traceback); see roformer/cli.py. JAX and the model's modules are
imported once the command line has parsed, so that `--help` and a flag the parser refuses answer
at once.
"""

from roformer import cli


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=__doc__)
  p.add_argument('--config', default='configs/lm.py',
                 help='Training config file FILE[:ARG]; override its fields with '
                 '--config.a.b=VALUE.')
  p.add_argument('--workdir', type=cli.path_arg, required=True,
                 help='Directory for checkpoints and metrics.')
  p.add_argument('--seeds', type=cli.comma_list, default=[],
                 help='Train the config at each of these seeds in one program (one '
                 'compilation; vmapped on accelerators); --workdir names each run with {seed}.')
  p.add_argument('--eval_splits', type=cli.comma_list, default=[],
                 help='After the last step, evaluate on these splits as eval.py --splits=... '
                 'would (eval_results.json), in this process.')
  p.add_argument('--distributed', action='store_true',
                 help='Multi-host: call jax.distributed.initialize() first. On a cluster that '
                 'JAX detects (Slurm, Cloud TPU, GKE TPU, Open MPI 4) it finds the processes '
                 'itself; elsewhere give the three flags below in every process.')
  p.add_argument('--coordinator_address', default=None,
                 help='With --distributed: host:port of process 0, the same on every process '
                 '(or JAX_COORDINATOR_ADDRESS).')
  p.add_argument('--num_processes', type=int, default=None,
                 help='With --distributed: how many processes take part.')
  p.add_argument('--process_id', type=int, default=None,
                 help='With --distributed: this process, 0 .. num_processes - 1.')
  return p


def initialize_distributed(args) -> None:
  """jax.distributed.initialize() with the flags that were given (the others detected)."""
  given = [f'--{name}' for name in ('coordinator_address', 'num_processes', 'process_id')
           if getattr(args, name) is not None]
  if not args.distributed:
    if given:
      raise cli.UsageError(f'{", ".join(given)} given without --distributed. Fix: add '
                           '--distributed.')
    return
  count, index = args.num_processes, args.process_id
  if (count is None) != (index is None):
    raise cli.UsageError('--num_processes and --process_id go together. Fix: give both (or '
                         'neither, where the cluster environment provides them).')
  if count is not None and count < 1:
    raise cli.UsageError(f'--num_processes={count}. Fix: the number of processes taking part, '
                         'at least 1.')
  if count is not None and not 0 <= index < count:
    raise cli.UsageError(f'--process_id={index} is not in 0 .. {count - 1}. Fix: number the '
                         'processes from 0.')
  import jax  # pylint: disable=import-outside-toplevel  # After the flags: see the docstring.
  try:
    jax.distributed.initialize(args.coordinator_address, count, index)
  except ValueError as e:  # What no flag or detected cluster gave (JAX's message names it).
    raise cli.UsageError(f'--distributed: {e} No cluster environment was detected. Fix: give '
                         'every process --coordinator_address=HOST:PORT (of process 0), '
                         '--num_processes=N and --process_id=I.') from None


def main(args):
  # pylint: disable=import-outside-toplevel  # After the flags: see the docstring.
  from roformer import config_args
  from roformer import logs
  config_args.refuse_set_from_data(cli.overrides())
  config = config_args.load(args.config, cli.overrides())
  from roformer import loop  # The checkpoint and data libraries: after the config reads.
  from roformer import tasks
  logs.setup(tracebacks=cli.debug_requested())
  seeds = cli.int_list('seeds', args.seeds)
  if loop.SEED_FIELD in args.workdir and not seeds:
    raise cli.UsageError(
        f'--workdir={args.workdir} names each seed\'s run with {loop.SEED_FIELD}, which --seeds '
        f'fills in. Fix: add --seeds (e.g. --seeds={config.seed}), or give a plain --workdir.')
  eval_splits = tuple(args.eval_splits)
  if eval_splits and tasks.per_example(config) and eval_splits != tuple(config.eval.splits):
    raise cli.UsageError(
        f'--eval_splits={",".join(eval_splits)}: a {config.model.type} evaluates '
        f'config.eval.splits ({",".join(config.eval.splits)}), whatever the flag names. Fix: '
        f'add --config.eval.splits="{eval_splits!r}".')
  initialize_distributed(args)
  if seeds:
    lasts = loop.train_seeds(config, args.workdir, seeds, eval_splits=eval_splits)
  else:
    lasts = [loop.train_and_evaluate(config, args.workdir, eval_splits=eval_splits)]
  if 'preempted' in lasts[0]:
    print(f'stopped by {lasts[0]["preempted"]["signal"]} at step '
          f'{lasts[0]["preempted"]["step"]} with a checkpoint; rerun the same command to resume.')


if __name__ == '__main__':
  cli.run(main, parser(), config_overrides=True)
