"""Evaluate a training workdir: python eval.py --workdir runs/lm [--step N|best] [--config.a.b=v]
[--splits validation,test] [--out eval_results.json] [--replace].

The config is the one saved in the workdir (config.json); `--config.*` flags override fields of
it, e.g. evaluation lengths. Results are printed and written to workdir/eval_results.json, the
run as trained. An override that changes what is scored (a RoPE scaling or remap, the precision,
other text, the protocol: saved_config.variant) is a variant, which names its own file (--out
eval_results.NAME.json). Evaluating other splits or lengths of the same checkpoint with the
same settings adds them to the file, keeping the ones scored before; an evaluation of a later
checkpoint replaces one of an earlier checkpoint. Anything else that would replace the results
there (an earlier checkpoint's, or the same checkpoint's under other settings, such as fewer
batches) is refused before anything is computed, unless --replace. A bad flag, override or
workdir (a damaged config.json, tokenizer or checkpoint included) ends with one line `error:
...` naming it and the fix (--debug shows the traceback). JAX and the model's modules are imported
once the command line has parsed, so that `--help` and a flag the parser refuses (a bad --out
included) answer at once.
"""

import argparse
import copy
import json
import os

from roformer import cli
from roformer import errors
from roformer import files
from roformer import logs
from roformer import provenance

PLAIN_OUT = 'eval_results.json'
DEFAULT_SPLITS = ['validation', 'test']


def out_arg(text: str) -> str:
  """argparse `type=` for --out: a results file's name (files.EVALUATION_FILE), checked with
  the other flags, before JAX loads."""
  if not files.EVALUATION_FILE.fullmatch(text):
    raise argparse.ArgumentTypeError(
        f'{text!r} is not a results file name: give eval_*.json, e.g. eval_results.json or '
        "eval_results.NAME.json for a variant (it is written inside --workdir, beside the run's "
        'own files)')
  return text


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=__doc__)
  p.add_argument('--workdir', type=cli.path_arg, required=True,
                 help='A workdir written by train.py.')
  p.add_argument('--step', type=cli.step_arg, default=None,
                 help="Checkpoint step (default: the latest), or 'best': the checkpoint that "
                 "the task's best metric kept in workdir/best/ (translation: BLEU).")
  p.add_argument('--splits', type=cli.comma_list, default=DEFAULT_SPLITS,
                 help='Splits of a language-model or translation run to evaluate, '
                 'comma-separated (classification runs use config.eval.splits).')
  p.add_argument('--replace', action='store_true',
                 help='Replace the results in --out even where they are of a later checkpoint '
                 'or of the same checkpoint under other settings.')
  p.add_argument('--out', default=PLAIN_OUT, type=out_arg,
                 help='File name in the workdir for the results, e.g. '
                 'eval_results.rope_yarn.json for an evaluation-time variant.')
  return p


def main(args):
  # pylint: disable=import-outside-toplevel  # After the flags: see the docstring.
  from roformer import config_args
  from roformer import evaluate
  from roformer import resolve
  from roformer import saved_config
  from roformer import tasks
  logs.setup(tracebacks=cli.debug_requested())
  saved = saved_config.load(args.workdir)
  config = config_args.apply(copy.deepcopy(saved), cli.overrides())
  if tasks.per_example(saved) and args.splits != DEFAULT_SPLITS:
    raise cli.UsageError(
        f'--splits={",".join(args.splits)} is for language-model and translation runs: '
        f'{args.workdir} is a classifier, which evaluates config.eval.splits. Fix: '
        f'--config.eval.splits="{tuple(args.splits)!r}".')
  resolve.check_fields(config, saved)  # A bad value is named as such, not as a variant.
  changed = saved_config.variant(saved, config)
  # (A field that may not change at evaluation at all is refused by the evaluation itself.)
  if (changed and args.out == PLAIN_OUT
      and not saved_config.changed(saved, config, saved_config.EVALUATE)):
    raise errors.ConfigError(
        f'{"; ".join(changed)} (saved vs now) makes this evaluation a variant of the run, and '
        f'--out={PLAIN_OUT} holds the run as trained. Fix: name the variant, e.g. '
        '--out=eval_results.NAME.json.')
  run = resolve.for_evaluation(config, args.workdir, args.step, splits=tuple(args.splits))
  path = os.path.join(args.workdir, args.out)
  lost = lost_by_writing(path, evaluate.results_header(run))
  if lost and not args.replace:
    raise errors.ConfigError(
        f'{path} holds {lost}, which this evaluation would replace. Fix: --out='
        f'{args.out.removesuffix(".json")}.NAME.json to keep both, or --replace.')
  results = evaluate.evaluate_resolved(run, os.path.basename(args.out))
  print(evaluate.format_results(results))
  files.write_json_atomic(path, with_earlier_scores(path, results))
  print(f'wrote {path}')


# The overrides that choose what is scored, not how: evaluations apart in these alone merge.
_CHOOSE = ('eval.splits', 'eval.length_multipliers')


def _settings(results: dict) -> str:
  """What an evaluation's results say besides its scores, as JSON (the splits and lengths it
  chose aside, and what it ran on: evaluations at another commit or on another device merge,
  each with its own entry under `environments`)."""
  text = json.loads(json.dumps(results, default=str))
  text['overrides'] = [o for o in text.get('overrides', []) if not o.startswith(_CHOOSE)]
  return json.dumps({k: v for k, v in text.items() if k not in ('splits', 'data', 'environments')},
                    sort_keys=True)


def _earlier(path: str) -> dict | None:
  """The evaluation in `path`, or None where there is none (or a damaged file)."""
  if not os.path.exists(path):
    return None
  try:
    earlier = files.read_json(path)
  except errors.ConfigError:
    return None
  return earlier if isinstance(earlier, dict) else None


def lost_by_writing(path: str, header: dict) -> str:
  """What writing an evaluation with results `header` (evaluate.results_header) over the
  evaluation in `path` would lose, in words: a later checkpoint's evaluation, or the same
  checkpoint's under other settings; '' where nothing (no file, a damaged one, the same
  settings, whose splits are merged, or an earlier checkpoint's, which the run trained past)."""
  earlier = _earlier(path)
  if earlier is None or _settings(earlier) == _settings({**header, 'splits': {}}):
    return ''
  step, before = header['step'], earlier.get('step')
  if not isinstance(before, int) or before < step:
    return ''
  scored = ', '.join(earlier.get('splits', {}))
  if before > step:
    return f'the evaluation of a later checkpoint (step {before}; {scored})'
  from roformer import saved_config  # pylint: disable=import-outside-toplevel  # JAX.
  old, new = (json.loads(_settings(r)) for r in (earlier, {**header, 'splits': {}}))
  return (f'the evaluation of the same checkpoint (step {step}; {scored}) under other settings '
          f'({"; ".join(saved_config.differences(old, new))}; there vs now)')


def _merged_split(earlier: dict, now: dict) -> dict:
  """One split's scores: `now`'s, with the lengths only `earlier` scored added in order."""
  if 'lengths' not in earlier or 'lengths' not in now:
    return now
  rows = {row['length']: row for row in earlier['lengths']}
  rows.update({row['length']: row for row in now['lengths']})
  return {**earlier, **now, 'lengths': [rows[n] for n in sorted(rows)]}


def with_earlier_scores(path: str, results: dict) -> dict:
  """`results` with the splits and lengths that the evaluation in `path` scored and this one
  did not, where that one is of the same checkpoint with the same settings (a damaged or other
  file is replaced). The overrides that chose them are left out of the merged results, whose
  rows say what was scored; what each evaluation that scored a row of them ran on is kept
  (`environments`: provenance.evaluations_merged)."""
  earlier = _earlier(path)
  if earlier is None or _settings(earlier) != _settings(results):
    return results
  splits = dict(earlier.get('splits', {}))
  for name, scores in results['splits'].items():
    splits[name] = _merged_split(splits.get(name, {}), scores)
  merged = {**results, 'splits': splits,
            'overrides': [o for o in results.get('overrides', []) if not o.startswith(_CHOOSE)]}
  if 'data' in earlier or 'data' in results:
    merged['data'] = {**earlier.get('data', {}), **results.get('data', {})}
  if 'environments' in results:
    merged['environments'] = provenance.evaluations_merged(earlier, results)
  return merged


if __name__ == '__main__':
  cli.run(main, parser(), config_overrides=True)
