"""Evaluate a training workdir: python eval.py --workdir runs/lm [--step N] [--config.a.b=v]
[--splits validation,test] [--out eval_results.json].

The config is the one saved in the workdir (config.json); `--config.*` flags override fields of
it, e.g. evaluation lengths. Results are printed and written to workdir/eval_results.json. A bad
flag, override or workdir (a damaged config.json, tokenizer or checkpoint included) ends with
one line `error: ...` naming it and the fix (--debug shows the traceback).
"""

import os

from absl import flags

from roformer import cli
from roformer import config_args
from roformer import config_lib
from roformer import errors
from roformer import evaluate
from roformer import files
from roformer import logs

_WORKDIR = cli.DEFINE_path('workdir', None, 'A workdir written by train.py.', required=True)
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint step (default: the latest).')
_SPLITS = flags.DEFINE_list('splits', ['validation', 'test'],
                            'Splits of a language-model or translation run to evaluate '
                            '(classification runs use config.eval.splits).')
_OUT = flags.DEFINE_string('out', 'eval_results.json',
                           'File name in the workdir for the results, e.g. '
                           'eval_results.rope_yarn.json for an evaluation-time variant.')


def main(argv):
  cli.no_arguments(argv)
  logs.setup(tracebacks=cli.debug_requested())
  if os.path.basename(_OUT.value) != _OUT.value or not _OUT.value.endswith('.json'):
    raise errors.ConfigError(f'--out={_OUT.value!r} must be a file name ending in .json (it is '
                             'written inside --workdir).')
  config = config_args.apply(config_lib.load(_WORKDIR.value), cli.overrides())
  results = evaluate.evaluate_workdir(config, _WORKDIR.value, _STEP.value,
                                      splits=tuple(_SPLITS.value))
  print(evaluate.format_results(results))
  path = os.path.join(_WORKDIR.value, _OUT.value)
  files.write_json_atomic(path, results)
  print(f'wrote {path}')


if __name__ == '__main__':
  cli.run(main, config_overrides=True)
