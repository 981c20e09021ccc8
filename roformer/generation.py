"""What scripts/generate.py runs: restore a trained workdir's checkpoint, then continue prompts
by sampling (a causal LM) or translate sentences with beam search (an encoder-decoder).

Bad inputs raise ConfigError naming the flag and the fix, before anything is restored or
compiled: the flags' values, the prompts, the workdir's model type and checkpoints, and (for
schemes with a longest position) whether the prompt plus --max_new_tokens fits the model.
"""

import copy
import dataclasses
from typing import Sequence

import jax
import ml_collections
import numpy as np
from flax import nnx

from roformer import config_args
from roformer import decode
from roformer import errors
from roformer import model_types
from roformer import positions as positions_lib
from roformer import resolve
from roformer import saved_config
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer import workdir as workdir_lib
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies

# The model types this serves, and what it does with each (as they declare it).
SERVED = {t.name: t.generates for t in model_types.TYPES.values() if t.generates}


@dataclasses.dataclass(frozen=True)
class Sampling:
  """How a causal LM continues a prompt (the flags of scripts/generate.py, same names)."""
  max_new_tokens: int = 100
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  seed: int = 0
  num_samples: int = 1  # Rows of one batch: one compiled program for all of a prompt's samples.

  def check(self) -> None:
    for name in ('max_new_tokens', 'num_samples'):
      if getattr(self, name) < 1:
        raise errors.ConfigError(f'--{name}={getattr(self, name)} must be >= 1. Fix: pass a '
                                 'positive number.')
    decode.check_sampling(self.temperature, self.top_k, self.top_p, prefix='--')


def read_prompts(prompts: Sequence[str], input_file: str | None = None) -> list[str]:
  """The --prompt values, then each line of --input FILE; refuses an empty one, none at all,
  and a file that cannot be read."""
  texts = [('--prompt', i + 1, text) for i, text in enumerate(prompts)]
  if input_file:
    try:
      with open(input_file, encoding='utf-8') as f:
        lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
      reason = e.strerror if isinstance(e, OSError) and e.strerror else e
      raise errors.ConfigError(f'--input={input_file!r} cannot be read ({reason}). Fix: pass '
                               'an existing UTF-8 text file, one prompt per line.') from None
    texts += [(f'--input={input_file!r} line', i + 1, line) for i, line in enumerate(lines)]
  if not texts:
    raise errors.ConfigError('nothing to generate from. Fix: pass --prompt "some text" (several '
                             'times for several prompts) or --input FILE (one per line).')
  for where, number, text in texts:
    if not text.strip():
      raise errors.ConfigError(f'{where} {number} is empty. Fix: give it some text (or remove '
                               'it).')
  return [text for _, _, text in texts]


# The mesh that decoding computes on (`restore`): one device.
ONE_DEVICE = dict(data=-1, fsdp=1, tensor=1, num_devices=1)


@dataclasses.dataclass
class Workdir:
  """A trained run as generation needs it: its config (vocab_size from its tokenizer), the
  checkpoint step to restore and its tokenizer."""
  path: str
  config: ml_collections.ConfigDict
  step: int
  tokenizer: tokenizer_lib.Tokenizer


def overridden_config(workdir: str, saved: ml_collections.ConfigDict, overrides,
                      named: str) -> ml_collections.ConfigDict:
  """`saved` (`workdir`'s config) with `overrides` ((field, text) pairs, as --config.FIELD=TEXT
  gives them) of config.model, checked as eval.py checks its flags (resolve.check_evaluation)
  and against the one device that `restore` computes on; `named` says in errors where the
  overrides came from."""
  unread = [field for field, _ in overrides if not field.startswith('model.')]
  if unread:
    raise errors.ConfigError(
        f'{named} {", ".join(map(repr, unread))}: decoding reads only config.model (eval.py '
        "reads the rest). Fix: give fields under 'model.', e.g. model.scan_layers.")
  config = config_args.apply(copy.deepcopy(saved), overrides)
  resolve.check_evaluation(config, saved, workdir, overrides=named)
  with config.unlocked():
    config.mesh.update(ONE_DEVICE)
  resolve.check_relations(config, 1, 1, resolve.trained_positions(saved))
  return config


def open_workdir(workdir: str, step: int | str | None = None,
                 config: ml_collections.ConfigDict | None = None) -> Workdir:
  """Reads config.json (or takes `config`, read from it, with any `overridden_config`), checks
  the model type and that the checkpoint exists, opens the tokenizer; restores nothing."""
  config = saved_config.load(workdir) if config is None else config
  kind = config.model.type
  if kind not in SERVED:
    served = '; '.join(f'{k} (it {v})' for k, v in SERVED.items())
    raise errors.ConfigError(
        f'--workdir={workdir!r} holds a {kind} model; scripts/generate.py serves {served}. '
        f'Fix: point --workdir at a {" or ".join(SERVED)} run (score a {kind} run with '
        'eval.py).')
  step = trainer_lib.checkpoint_step(workdir, step)
  return Workdir(workdir, config, step, workdir_lib.open_tokenizer(config, workdir))


def encode_prompt(tokenizer, text: str) -> np.ndarray:
  """Token ids as the causal LM was trained on them: documents start with [bos] (the
  tokenizer's own for a pretrained one, none where it has none)."""
  bos, _ = vocabularies.framing(tokenizer)
  return np.concatenate([bos, tokenizer.encode(text)]).astype(np.int32)


def stop_id(tokenizer) -> int:
  """The id that ends a continuation: the tokenizer's eos (-1, never drawn, where it has none)."""
  _, eos = vocabularies.framing(tokenizer)
  return eos[0] if eos else -1


def length_refusal(model_cfg, length: int) -> str:
  """Why the model's scheme cannot take `length` positions (e.g. past a `learned` table's
  max_length), without a fix; '' where it can, as most schemes take any length."""
  try:
    positions_lib.validate(model_cfg, length, causal=True)
  except errors.ConfigError as e:
    return errors.without_fix(e)
  return ''


def check_length(model_cfg, prompt_ids: Sequence[np.ndarray], max_new_tokens: int) -> None:
  """Refuses a prompt whose tokens plus max_new_tokens need positions the model's scheme
  cannot take (`length_refusal`)."""
  for i, ids in enumerate(prompt_ids):
    total = len(ids) + max_new_tokens
    reason = length_refusal(model_cfg, total)
    if reason:
      raise errors.ConfigError(
          f'prompt {i + 1} is {len(ids)} tokens (with [bos]); with --max_new_tokens='
          f'{max_new_tokens} that is {total} positions, more than the trained model takes: '
          f'{reason} Fix: lower --max_new_tokens or shorten the prompt.')


def restore(opened: Workdir):
  """(trainer, params): the run's model (trainer.graphdef, trainer.task) and its checkpoint's
  parameters on one device (decoding a few prompts needs no more), restored through
  trainer.restore_params and its shape checks."""
  config = opened.config
  with config.unlocked():
    config.mesh.update(ONE_DEVICE)
  trainer = trainer_lib.Trainer(config, sharding.make_mesh(config.mesh))
  return trainer, trainer_lib.restore_params(trainer, opened.path, opened.step)


def continue_prompt(graphdef, params, tokenizer, text: str, sampling: Sampling,
                    index: int = 0) -> list[str]:
  """num_samples continuations of `text`, each as the prompt text followed by the new text.
  The key is the seed's folded with the prompt's `index`, so that two prompts do not share
  their random draws."""
  ids = encode_prompt(tokenizer, text)
  prompt = np.repeat(ids[None], sampling.num_samples, axis=0)
  tokens = np.asarray(decode.generate(
      nnx.merge(graphdef, params), prompt, max_new_tokens=sampling.max_new_tokens,
      temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
      eos_id=stop_id(tokenizer),
      seed=jax.random.fold_in(jax.random.key(sampling.seed), index)))
  head = tokenizer.decode(ids)
  out = []
  stop = stop_id(tokenizer)
  for row in tokens:
    # A row ends at its eos; decode fills the rest with id 0, a real token of a pretrained
    # tokenizer's vocabulary.
    ended = np.flatnonzero(row == stop)
    row = row[:ended[0]] if len(ended) else row
    # Decoded together so that the piece joining prompt and continuation keeps its space.
    full = tokenizer.decode(np.concatenate([ids, row]))
    out.append(text + full[len(head):] if full.startswith(head) else full)
  return out


def format_samples(samples: list[list[str]]) -> str:
  """One block per sample under a header naming its prompt and sample number."""
  blocks = []
  for p, texts in enumerate(samples):
    for s, text in enumerate(texts):
      blocks.append(f'=== prompt {p + 1}/{len(samples)}, sample {s + 1}/{len(texts)} ===\n'
                    f'{text}')
  return '\n\n'.join(blocks)


def run(workdir: str, prompts: Sequence[str] = (), *, input_file: str | None = None,
        step: int | str | None = None, sampling: Sampling = Sampling(), overrides=()) -> str:
  """The text scripts/generate.py prints: for a causal LM, one block per sample of each prompt
  (`format_samples`); for a translation run, one translation per line (config.eval.beam_size
  and alpha; sampling settings given for it are refused: they would change nothing).
  `overrides`: its --config.model.FIELD=TEXT flags (`overridden_config`)."""
  sampling.check()
  texts = read_prompts(prompts, input_file)
  config = saved_config.load(workdir)
  if overrides:
    config = overridden_config(workdir, config, list(overrides), '--config overrides')
  opened = open_workdir(workdir, step, config)
  config, tokenizer = opened.config, opened.tokenizer
  if not model_types.of(config.model).decoder_only:  # A translation model.
    given = [f'--{f.name}={getattr(sampling, f.name)}' for f in dataclasses.fields(sampling)
             if getattr(sampling, f.name) != f.default]
    if given:
      raise errors.ConfigError(
          f'{" ".join(given)}: sampling flags are for a causal LM; a translation run decodes '
          f'with beam search (config.eval.beam_size={config.eval.beam_size}, alpha='
          f'{config.eval.alpha}). Fix: drop them.')
    trainer, params = restore(opened)
    lines = trainer.task.translate(
        trainer.graphdef, params, texts, tokenizer, max_len=config.data.seq_len,
        beam_size=config.eval.beam_size, alpha=config.eval.alpha,
        batch_size=min(len(texts), config.eval.batch_size))
    return '\n'.join(line.replace('\n', ' ') for line in lines)
  check_length(config.model, [encode_prompt(tokenizer, t) for t in texts],
               sampling.max_new_tokens)
  trainer, params = restore(opened)
  return format_samples([continue_prompt(trainer.graphdef, params, tokenizer, t, sampling, i)
                         for i, t in enumerate(texts)])
