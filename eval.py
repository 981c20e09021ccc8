"""Evaluate a training workdir: python eval.py --workdir runs/lm [--step N] [--config.a.b=v]
[--splits validation,test] [--out eval_results.json].

The config is the one saved in the workdir (config.json); `--config.*` flags override fields of
it, e.g. evaluation lengths. Results are printed and written to workdir/eval_results.json.
"""

import json
import os
import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from roformer import config_lib
from roformer import errors
from roformer import evaluate
from roformer import logs

_WORKDIR = flags.DEFINE_string('workdir', None, 'A workdir written by train.py.', required=True)
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint step (default: the latest).')
_SPLITS = flags.DEFINE_list('splits', ['validation', 'test'],
                            'Splits of a language-model or translation run to evaluate '
                            '(classification runs use config.eval.splits).')
_OUT = flags.DEFINE_string('out', 'eval_results.json',
                           'File name in the workdir for the results, e.g. '
                           'eval_results.rope_yarn.json for an evaluation-time variant.')


def _workdir_from_argv(argv) -> str | None:
  for i, arg in enumerate(argv):
    if arg.startswith('--workdir='):
      return arg.split('=', 1)[1]
    if arg == '--workdir' and i + 1 < len(argv):
      return argv[i + 1]
  return None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logs.setup()
  if os.path.basename(_OUT.value) != _OUT.value or not _OUT.value.endswith('.json'):
    sys.exit(f'error: --out={_OUT.value!r} must be a file name ending in .json (it is written '
             'inside --workdir).')
  try:
    results = evaluate.evaluate_workdir(flags.FLAGS.config, _WORKDIR.value, _STEP.value,
                                         splits=tuple(_SPLITS.value))
  except errors.ConfigError as e:
    sys.exit(f'error: {e}')
  print(evaluate.format_results(results))
  path = os.path.join(_WORKDIR.value, _OUT.value)
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    json.dump(results, f, indent=2)
  os.replace(path + '.tmp', path)
  print(f'wrote {path}')


if __name__ == '__main__':
  # The config comes from the workdir, so it is read before flags are parsed.
  workdir = _workdir_from_argv(sys.argv)
  try:
    saved = config_lib.load(workdir) if workdir else None
  except errors.ConfigError as e:
    sys.exit(f'error: {e}')
  config_flags.DEFINE_config_dict('config', saved or config_lib.ml_collections.ConfigDict(),
                                  'Overrides of the workdir config.')
  app.run(main)
