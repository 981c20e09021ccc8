"""Continue prompts with a trained causal LM, or translate with a trained translation run.

  python scripts/generate.py --workdir runs/lm --prompt "ROMEO:" [--prompt ...] [--step N|best]
      [--max_new_tokens 100] [--temperature 1.0] [--top_k 0] [--top_p 1.0] [--seed 0]
      [--num_samples 1]
  python scripts/generate.py --workdir runs/translate --prompt "In the beginning ..." |
      --input FILE
  python scripts/generate.py --workdir runs/llama --prompt "..." \
      --config.model.position.rope.remap.method=self_extend  # what eval.py's flags may set

A causal LM prints one block per sample (the prompt, then its continuation); a translation run
prints one translation per line, with config.eval.beam_size and alpha. `--config.model.*`
overrides set what eval.py's may (a remap, a scaling, the precision, one scan over the layers),
checked as eval.py checks them. Bad inputs print
`error: ...` naming the flag and exit with status 1 (2 for a bad command line). The logic is
roformer/generation.py.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import logging as absl_logging  # pylint: disable=wrong-import-position

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import generation  # pylint: disable=wrong-import-position

_DEFAULT = generation.Sampling()


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=__doc__)
  p.add_argument('--workdir', type=cli.path_arg, required=True,
                 help='A causal_lm or encoder_decoder workdir written by train.py.')
  p.add_argument('--prompt', action='append', default=[],
                 help='Text to continue (causal LM) or translate; may be given several times.')
  p.add_argument('--input', type=cli.path_arg, default=None,
                 help='A text file whose every line is a prompt.')
  p.add_argument('--step', type=cli.step_arg, default=None,
                 help="Checkpoint step (default: the latest), or 'best': the checkpoint that "
                 "the task's best metric kept in workdir/best/ (translation: BLEU).")
  p.add_argument('--max_new_tokens', type=int, default=_DEFAULT.max_new_tokens,
                 help='Tokens to add to each prompt (causal LM).')
  p.add_argument('--temperature', type=float, default=_DEFAULT.temperature,
                 help='Sampling temperature; 0 decodes greedily (causal LM).')
  p.add_argument('--top_k', type=int, default=_DEFAULT.top_k,
                 help='Sample from the k most likely tokens only; 0: all (causal LM).')
  p.add_argument('--top_p', type=float, default=_DEFAULT.top_p,
                 help='Sample from the smallest set of most likely tokens holding this much '
                 'probability (nucleus); 1: all (causal LM).')
  p.add_argument('--seed', type=int, default=_DEFAULT.seed, help='Sampling seed (causal LM).')
  p.add_argument('--num_samples', type=int, default=_DEFAULT.num_samples,
                 help='Continuations per prompt (causal LM).')
  return p


def main(args):
  absl_logging.set_verbosity(absl_logging.WARNING)  # Warnings go to stderr, text to stdout.
  sampling = generation.Sampling(
      max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
      top_p=args.top_p, seed=args.seed, num_samples=args.num_samples)
  # A decoding is one XLA program: Ctrl-C during it ends the process at once.
  print(cli.interruptible(lambda: generation.run(
      args.workdir, args.prompt, input_file=args.input, step=args.step, sampling=sampling,
      overrides=cli.overrides())))


if __name__ == '__main__':
  cli.run(main, parser(), config_overrides=True)
