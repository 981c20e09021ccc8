"""Hugging Face checkpoints in and out, and causal LMs from Python.

- `import_checkpoint(hf_dir, workdir)`: a local Hugging Face model directory (config.json,
  *.safetensors, tokenizer.json) as an ordinary workdir: config.json, the model's own tokenizer
  (its ids unshifted) and a checkpoint at step 0. eval.py, scripts/generate.py, every
  evaluation-time scaling and remap, and `train.py --config configs/continued.py:WORKDIR`
  (fine-tuning, or continuing at a longer length) read it like a run trained here.
- `export_checkpoint(workdir, hf_dir)`: a causal-LM workdir as a directory that
  `transformers.AutoModelForCausalLM.from_pretrained` loads with the same logits (Llama,
  Mistral, Phi-3, Qwen2, Qwen3, Gemma 2 or 3, OLMo 1, 2 or 3, SmolLM3, GPT-NeoX, Phi, Cohere,
  Cohere 2, Granite, StableLM, GPT-J, GPT-2, BLOOM or MPT, whichever computes the model;
  roformer/hf_export_config.py refuses, in one line, a model that none computes).
- `load(path)`: any causal-LM workdir (imported or trained here), or a Hugging Face directory
  converted in memory as its import would be, for a notebook:

    from roformer import hf
    lm = hf.load('runs/llama')
    ids = lm.encode('To be, or not to be')          # bos first, as the model was trained
    logits = lm.logits([ids])                       # float32 [1, len, vocab]
    out = lm.generate([ids], max_new_tokens=20)      # greedy at temperature 0
    deep = hf.load('runs/llama', overrides={'model.scan_layers': True})  # As eval.py's flags.

Neither torch nor transformers is imported here: weights are read and written with
`safetensors`, tokenizers with `tokenizers`.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import checkpoint as checkpoint_lib
from roformer import decode
from roformer import errors
from roformer import files
from roformer import generation
from roformer import hf_config
from roformer import hf_export_config
from roformer import hf_tokenizers
from roformer import hf_weights
from roformer import hf_weights_export
from roformer import model_types
from roformer import resolve
from roformer import saved_config
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer import variables
from roformer.data import vocabularies


def _check_new(directory: str, flag: str) -> str:
  directory = os.path.abspath(os.path.expanduser(directory))
  if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
    raise errors.ConfigError(f'{flag}={directory} exists. Fix: choose a new directory; nothing '
                             'was written.')
  return directory


def _tokenizer(hf_dir: str, vocab_size: int) -> vocabularies.Pretrained:
  if not os.path.isfile(os.path.join(hf_dir, 'tokenizer.json')):
    raise errors.ConfigError(
        f'--from_hf={hf_dir!r} has no tokenizer.json. Fix: write one with transformers '
        "(AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR) saves the fast tokenizer's "
        'tokenizer.json).')
  tokenizer = vocabularies.Pretrained(hf_dir, vocab_size=vocab_size)
  if tokenizer.token_count > vocab_size:
    raise errors.ConfigError(
        f'{os.path.join(hf_dir, "tokenizer.json")} has {tokenizer.token_count} tokens, but the '
        f'embedding has {vocab_size} rows (config.json vocab_size): ids past them would index '
        'nothing. Fix: use the tokenizer that came with the model.')
  return tokenizer


def import_checkpoint(hf_dir: str, workdir: str):
  """Writes `workdir` from the Hugging Face model directory `hf_dir`; every check (the
  architecture, the scaling, the weight files, each tensor's shape, the tokenizer) comes
  before anything is written. Returns the workdir's config."""
  workdir = _check_new(workdir, '--workdir')
  config, tokenizer, hf, trainer, params = _converted(hf_dir)
  # A fresh optimizer state (zeros): the state of a run at step 0, which every entry point reads.
  abstract = trainer.saved_abstract_state  # Checkpoints hold the per-block layout.
  state = {'params': params,
           'opt_state': jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), abstract['opt_state']),
           'step': jnp.int32(0)}
  with files.staged_directory(workdir) as staging:
    saved_config.save(config, staging)
    tokenizer.save(os.path.join(staging, tokenizer.workdir_file))
    files.write_json_atomic(os.path.join(staging, 'hf_config.json'), hf)  # What it came from.
    ckpt = checkpoint_lib.Checkpointer(os.path.join(staging, 'checkpoints'))
    try:
      ckpt.save(0, state)
    finally:
      ckpt.close()
  return config


def is_hf_directory(path: str) -> bool:
  """Whether `path` is a Hugging Face model directory (config.json beside safetensors weights)
  rather than a workdir (which has checkpoints/)."""
  path = os.path.expanduser(path)
  return (os.path.isfile(os.path.join(path, 'config.json'))
          and not os.path.isdir(os.path.join(path, 'checkpoints'))
          and any(n.endswith('.safetensors') or n == hf_weights.INDEX
                  for n in os.listdir(path)))


def _converted(hf_dir: str, mesh: dict | None = None):
  """(config, tokenizer, config.json as read, trainer, parameters in the per-block layout) of
  the Hugging Face model directory `hf_dir`, every check made; `mesh`: config.mesh's fields
  to set (the trainer's mesh), where not the default."""
  hf_dir = os.path.abspath(os.path.expanduser(hf_dir))
  hf = hf_config.read(hf_dir)
  try:
    config = hf_config.to_config(hf, hf_dir)
  except errors.ConfigError:  # Its own line: an architecture or scaling not read, ...
    raise
  except (TypeError, ValueError, ArithmeticError) as e:  # A list, Infinity, 0 heads, ...
    raise errors.DamagedFileError(
        f'{os.path.join(hf_dir, "config.json")} holds a value of the wrong type ({e}). Fix: use '
        'the config.json that came with the weights.') from None
  try:
    resolve.validate(config)
  except errors.ConfigError as e:  # A value out of range: the file's, not a flag to change.
    raise errors.DamagedFileError(
        f'{os.path.join(hf_dir, "config.json")} gives a model this project refuses: '
        f'{errors.without_fix(e)} Fix: use the config.json that came with the weights (where it '
        "names a limit of this project's, a checkpoint within it).") from None
  tokenizer = _tokenizer(hf_dir, config.model.vocab_size)
  fam = hf_config.family(hf, hf_dir)
  tensors = hf_weights.canonical(hf_weights.read(hf_dir), fam, hf,
                                 os.path.join(hf_dir, 'config.json'))
  if hf.get(hf_config.TEXT_OF):  # A multimodal checkpoint: its language model alone.
    tensors = hf_weights.language_model(tensors)
    if not config.model.tie_embeddings and not hf_weights.head_stored(tensors, fam):
      # Its flags disagree (transformers 5 reads the top level's, 4 text_config's), and the
      # one that ties is the one its weights were saved by.
      with config.unlocked():
        config.model.tie_embeddings = True
  if config.model.tie_embeddings and hf_weights.head_differs(tensors, fam):
    # transformers unties a checkpoint whose stored output layer is not its embedding.
    with config.unlocked():
      config.model.tie_embeddings = False
  params = hf_weights.to_params(tensors, fam, config.model, hf_dir)
  with config.unlocked():
    config.mesh.update(mesh or {})
  trainer = trainer_lib.Trainer(config, sharding.make_mesh(config.mesh))
  return (config, tokenizer, hf, trainer,
          _filled(trainer.saved_abstract_state['params'], params))


def _filled(abstract_params, params: dict):
  """The model's parameter state (abstract shapes) holding `params`' arrays (a nested dict of
  the same names), after checking that both name the same parameters with the same shapes."""
  want = dict(_flatten(abstract_params.to_pure_dict()))
  have = dict(_flatten(params))
  if set(want) != set(have):  # A mapping of hf_weights that disagrees with the model: a bug.
    raise ValueError(f'converted parameters missing {sorted(set(want) - set(have))[:3]}, '
                     f'extra {sorted(set(have) - set(want))[:3]}')
  for path, array in have.items():
    if tuple(array.shape) != tuple(want[path].shape):
      raise ValueError(f'converted parameter {path} has shape {array.shape}, the model '
                       f'{want[path].shape}')
  state = jax.tree.map(lambda a: a, abstract_params)
  nnx.replace_by_pure_dict(state, jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params))
  return state


def _flatten(tree, prefix=''):
  if isinstance(tree, dict):
    for key, value in tree.items():
      yield from _flatten(value, f'{prefix}/{key}' if prefix else str(key))
  else:
    yield prefix, tree


def _restored(workdir: str, step: int | None, overrides: dict | None = None, saved=None):
  """(opened workdir, trainer, parameters) of a causal-LM workdir, on one device, its saved
  config (`saved`, where the caller read it) with `overrides` (dotted field of config.model ->
  value) checked as eval.py checks its flags (generation.overridden_config)."""
  if saved is None:  # The model type first: generate.py's check names it.
    saved = saved_config.load(workdir)
  if not model_types.of(saved.model).decoder_only:
    raise errors.ConfigError(f'{workdir} holds a {saved.model.type} model, not a causal LM. '
                             'Fix: point at a causal_lm workdir.')
  if overrides is not None and not isinstance(overrides, dict):
    raise errors.ConfigError(f'overrides must be a dict of dotted fields to values (got '
                             f"{type(overrides).__name__}). Fix: e.g. overrides={{'model."
                             "position.rope.remap.method': 'self_extend'}.")
  config = generation.overridden_config(workdir, saved, [
      (str(field), value if isinstance(value, str) else repr(
          value.item() if isinstance(value, np.generic) else value))
      for field, value in overrides.items()], 'overrides') if overrides else saved
  opened = generation.open_workdir(workdir, step, config)
  trainer, params = generation.restore(opened)
  return opened, trainer, params


def export_checkpoint(workdir: str, hf_dir: str, step: int | None = None) -> str:
  """Writes `hf_dir` (config.json, model.safetensors and, where the run's tokenizer has a
  transformers form, tokenizer.json and tokenizer_config.json: roformer/hf_tokenizers.py) from
  `workdir`'s checkpoint at `step` (the latest by default). Returns the transformers
  architecture written."""
  hf_dir = _check_new(hf_dir, '--to_hf')
  config = saved_config.load(workdir)
  fam = hf_export_config.export_family(config)  # Refuses before anything is restored.
  opened, trainer, params = _restored(workdir, step, saved=config)
  model = nnx.merge(trainer.graphdef, params)
  per_block = variables.trainable(trainer.saved_params(params))[0]
  pure = jax.tree.map(np.asarray, per_block.to_pure_dict())
  tensors = hf_weights_export.from_params(pure, fam, config.model, float(model.tied_scale))
  source = os.path.join(workdir, 'hf_config.json')  # Where it was imported from, if it was.
  hf = hf_export_config.from_config(config, hf_tokenizers.special_ids(opened.tokenizer),
                                    files.read_json(source) if os.path.exists(source) else None)
  with files.staged_directory(hf_dir) as staging:
    hf_weights_export.write(tensors, staging)
    files.write_json_atomic(os.path.join(staging, 'config.json'), hf)
    hf_tokenizers.write(opened.tokenizer, staging)
  return hf['architectures'][0]


@nnx.jit
def _logits(model, ids, pos):
  """One full pass; a module-level function, so that two models of one structure (a workdir
  and its export read back, or one loaded twice) share its compiled program."""
  return model(ids, pos, jnp.ones_like(ids))


class CausalLM:
  """A causal-LM workdir's model restored for use from Python (see the module docstring), or a
  Hugging Face directory's converted in memory (`from_hf`)."""

  def __init__(self, workdir: str, step: int | None = None, overrides: dict | None = None):
    opened, trainer, params = _restored(workdir, step, overrides)
    self._set(workdir, opened.step, opened.config, opened.tokenizer,
              nnx.merge(trainer.graphdef, params))

  def _set(self, path, step, config, tokenizer, model) -> None:
    self.workdir, self.step, self.config, self.tokenizer = path, step, config, tokenizer
    self.vocab_size = int(config.model.vocab_size)
    self.model = model

  @classmethod
  def from_hf(cls, hf_dir: str) -> 'CausalLM':
    """The model of the Hugging Face directory `hf_dir`, converted as `import_checkpoint`
    converts it, without writing a workdir."""
    # On one device, as a workdir's model is restored (generation.restore).
    config, tokenizer, _, trainer, params = _converted(hf_dir, generation.ONE_DEVICE)
    params = trainer.params_from_saved(params)  # The model's own layout of them.
    lm = cls.__new__(cls)
    lm._set(os.path.abspath(os.path.expanduser(hf_dir)), 0, config, tokenizer,  # pylint: disable=protected-access
            nnx.merge(trainer.graphdef, params))
    return lm

  def _ids(self, ids) -> jax.Array:
    try:
      array = np.asarray(ids)
    except ValueError:  # Rows of different lengths.
      raise errors.ConfigError('ids must be integer [batch, length], and its rows have different '
                               'lengths. Fix: pass rows of one length (score each row on its '
                               'own, or cut them to the shortest; lm.generate takes a list of '
                               'id lists of different lengths).') from None
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
      raise errors.ConfigError(f'ids must be integer [batch, length] (got {array.dtype} '
                               f'{array.shape}). Fix: pass a list of equal-length id lists.')
    if not array.size:
      raise errors.ConfigError(f'ids must hold at least one position of one row (got shape '
                               f'{array.shape}). Fix: start the text with an id (lm.encode gives '
                               'the bos first where the tokenizer has one; without one, encode '
                               'some text).')
    if array.min() < 0 or array.max() >= self.vocab_size:
      raise errors.ConfigError(f'ids must be in [0, {self.vocab_size}) (got {array.min()}..'
                               f'{array.max()}). Fix: ids from lm.tokenizer.')
    return jnp.asarray(array, jnp.int32)

  def _fits(self, length: int, fix: str) -> None:
    """Refuses `length` positions where the model's scheme cannot take them (past a learned
    table's rows: their logits would be NaN)."""
    reason = generation.length_refusal(self.config.model, length)
    if reason:
      raise errors.ConfigError(f'{length} positions are more than this model takes: {reason} '
                               f'Fix: {fix}.')

  def encode(self, text: str) -> np.ndarray:
    """The ids of `text` as the model was trained on a document's start: the tokenizer's bos
    first (none where it has none), then the text's ids (`tokenizer.encode` adds no bos)."""
    return generation.encode_prompt(self.tokenizer, text)

  def logits(self, ids) -> np.ndarray:
    """float32 logits [batch, length, vocab] of int ids [batch, length] at positions 0.."""
    ids = self._ids(ids)
    self._fits(ids.shape[1], 'score shorter rows')
    pos = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
    return np.asarray(_logits(self.model, ids, pos), np.float32)

  def generate(self, ids, max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
               stop_at_eos: bool = True):
    """The prompt ids [batch, P] followed by max_new_tokens new ones: greedy at temperature 0,
    sampled above. With `stop_at_eos`, a row ends at the tokenizer's eos and continues with
    its pad id (its eos where it has none).

    Prompts of different lengths (a list of id lists) give a list of rows, each its prompt and
    max_new_tokens new ids: the model has no padding to align them, so the prompts of each
    length decode together, one program a length; greedy, each row is what it gets alone,
    and sampled, each group draws from `seed` (a row's draws depend on its group)."""
    groups = _length_groups(ids)
    if groups is not None:
      rows = {length: [ids[i] for i in group] for length, group in groups.items()}
      for length, prompts in rows.items():  # Every prompt checked before any decodes.
        self._ids(prompts)
        self._fits(length + max_new_tokens, 'a shorter prompt or fewer max_new_tokens')
      out = [None] * len(ids)
      for length, group in groups.items():
        for i, row in zip(group, self.generate(rows[length], max_new_tokens, temperature, seed,
                                               stop_at_eos)):
          out[i] = row
      return out
    ids = self._ids(ids)
    self._fits(ids.shape[1] + max_new_tokens, 'a shorter prompt or fewer max_new_tokens')
    eos = generation.stop_id(self.tokenizer) if stop_at_eos else -1
    new = np.asarray(decode.generate(self.model, ids, max_new_tokens=max_new_tokens,
                                     temperature=temperature, eos_id=eos, seed=seed))
    if eos >= 0:  # decode pads a finished row with id 0, a real token of most vocabularies.
      pad = hf_tokenizers.special_ids(self.tokenizer)['pad']
      ended = np.cumsum(new == eos, axis=1) - (new == eos) > 0
      new = np.where(ended, eos if pad is None else pad, new)
    return np.concatenate([np.asarray(ids), new], axis=1)


def _length_groups(ids) -> dict[int, list[int]] | None:
  """{length: the indices of the rows of `ids` of that length, in order} where `ids` is a list
  (or tuple) of id rows of more than one length, else None (one array [batch, length] is
  checked as such). An empty row is refused, as a prompt of no position."""
  if not isinstance(ids, (list, tuple)):
    return None
  try:
    lengths = [len(row) for row in ids]
  except TypeError:
    return None  # A row that is not one (a number): refused as ids.
  if len(set(lengths)) < 2:
    return None
  if 0 in lengths:
    raise errors.ConfigError(f'prompt {lengths.index(0) + 1} of ids is empty: each must hold at '
                             'least one position. Fix: start it with an id (lm.encode gives '
                             'the bos first where the tokenizer has one).')
  return {n: [i for i, length in enumerate(lengths) if length == n] for n in sorted(set(lengths))}


def load(path: str, step: int | None = None, overrides: dict | None = None) -> CausalLM:
  """The causal LM of the workdir `path` (imported or trained here) at `step` (latest), its
  saved config with `overrides`: dotted fields of config.model to values, those eval.py's
  `--config.FIELD=VALUE` may change (a RoPE scaling or remap, the precision, `model.scan_layers`
  for one scan over the layers, which compiles one layer rather than each). A Hugging Face
  directory (config.json and safetensors weights) loads as its import would, converted in
  memory; with a step or overrides, import it first."""
  if is_hf_directory(path):
    if step is not None or overrides:
      raise errors.ConfigError(
          f'{path} is a Hugging Face directory: it has one set of weights and its own config, '
          'so no step or overrides. Fix: import it once (hf.import_checkpoint(path, WORKDIR), '
          'or scripts/convert_hf.py --from_hf) and load the workdir with them.')
    return CausalLM.from_hf(path)
  return CausalLM(path, step, overrides)
