"""Continue prompts with a trained causal LM, or translate with a trained translation run.

  python scripts/generate.py --workdir runs/lm --prompt "ROMEO:" [--prompt ...] [--step N]
      [--max_new_tokens 100] [--temperature 1.0] [--top_k 0] [--top_p 1.0] [--seed 0]
      [--num_samples 1]
  python scripts/generate.py --workdir runs/translate --prompt "In the beginning ..." |
      --input FILE

A causal LM prints one block per sample (the prompt, then its continuation); a translation run
prints one translation per line, with config.eval.beam_size and alpha. Bad inputs print
`error: ...` naming the flag and exit with status 1 (2 for a bad command line). The logic is
roformer/generation.py.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import flags  # pylint: disable=wrong-import-position
from absl import logging as absl_logging  # pylint: disable=wrong-import-position

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import generation  # pylint: disable=wrong-import-position

_DEFAULT = generation.Sampling()
_WORKDIR = cli.DEFINE_path('workdir', None, 'A causal_lm or encoder_decoder workdir written by '
                           'train.py.', required=True)
_PROMPT = flags.DEFINE_multi_string('prompt', [], 'Text to continue (causal LM) or translate; '
                                    'may be given several times.')
_INPUT = cli.DEFINE_path('input', None, 'A text file whose every line is a prompt.')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint step (default: the latest).')
_MAX_NEW_TOKENS = flags.DEFINE_integer('max_new_tokens', _DEFAULT.max_new_tokens,
                                       'Tokens to add to each prompt (causal LM).')
_TEMPERATURE = flags.DEFINE_float('temperature', _DEFAULT.temperature,
                                  'Sampling temperature; 0 decodes greedily (causal LM).')
_TOP_K = flags.DEFINE_integer('top_k', _DEFAULT.top_k,
                              'Sample from the k most likely tokens only; 0: all (causal LM).')
_TOP_P = flags.DEFINE_float('top_p', _DEFAULT.top_p,
                            'Sample from the smallest set of most likely tokens holding this '
                            'much probability (nucleus); 1: all (causal LM).')
_SEED = flags.DEFINE_integer('seed', _DEFAULT.seed, 'Sampling seed (causal LM).')
_NUM_SAMPLES = flags.DEFINE_integer('num_samples', _DEFAULT.num_samples,
                                    'Continuations per prompt (causal LM).')


def main(argv):
  cli.no_arguments(argv)
  absl_logging.set_verbosity(absl_logging.WARNING)  # Warnings go to stderr, text to stdout.
  sampling = generation.Sampling(
      max_new_tokens=_MAX_NEW_TOKENS.value, temperature=_TEMPERATURE.value, top_k=_TOP_K.value,
      top_p=_TOP_P.value, seed=_SEED.value, num_samples=_NUM_SAMPLES.value)
  print(generation.run(_WORKDIR.value, _PROMPT.value, input_file=_INPUT.value,
                       step=_STEP.value, sampling=sampling))


if __name__ == '__main__':
  cli.run(main)
