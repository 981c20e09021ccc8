"""Convert Hugging Face RoFormer weights (safetensors) into a roformer masked-LM workdir.

  python scripts/convert_hf_roformer.py --checkpoint path/to/hf_model_dir --workdir runs/hf

`--checkpoint` is a directory holding `config.json` and `model.safetensors` (as written by
`save_pretrained`, e.g. a downloaded `junnyu/roformer_chinese_base`), or the .safetensors file
itself with its config.json beside it. Parameter names may carry the `roformer.` prefix
(RoFormerForMaskedLM & co.) or not (RoFormerModel); the MLM head (`cls.predictions.*`) is taken
when present and initialised afresh otherwise.

The result is a workdir (config.json + checkpoint at step 0) whose encoder computes exactly what
`transformers.RoFormerModel` computes: post-LayerNorm blocks, exact GELU, token-type embeddings,
and RoPE on interleaved pairs (x1, x2), (x3, x4), ... with theta_i = 10000^(-2(i-1)/d), which is
this project's `rope` with `layout='interleaved'`; no permutation of the query/key columns is
needed. Its ids are the Hugging Face tokenizer's (WordPiece for the Chinese checkpoints), which
this project's SentencePiece pipeline cannot produce: the workdir is marked FOREIGN_VOCABULARY so
that train.py/eval.py refuse to feed it their own tokens. Use it from Python: restore the
checkpoint into `roformer.models.create(config.model)` and pass ids from the Hugging Face
tokenizer (as tests/test_hf_roformer.py does with the weights directly).
"""

import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer.hf_weights import read_safetensors  # pylint: disable=wrong-import-position

_ACTIVATIONS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh',
                'relu': 'relu'}


def locate(checkpoint: str) -> tuple[pathlib.Path, dict]:
  """The safetensors file and the parsed Hugging Face config of `checkpoint`."""
  path = pathlib.Path(checkpoint)
  weights = path / 'model.safetensors' if path.is_dir() else path
  config_path = weights.parent / 'config.json'
  if not weights.exists() or not config_path.exists():
    raise errors.ConfigError(f'--checkpoint={checkpoint!r}: expected model.safetensors and '
                             'config.json (save_pretrained writes both). Fix: point at that '
                             'directory.')
  return weights, files.read_json(str(config_path), 'download the checkpoint again')


def model_config(hf: dict):
  """This project's config (configs/mlm.py with the checkpoint's sizes) for a HF config."""
  from configs import mlm  # pylint: disable=g-import-not-at-top
  if hf.get('model_type', 'roformer') != 'roformer':
    raise errors.ConfigError(f'the checkpoint is a {hf.get("model_type")!r} model, not roformer.')
  hidden = hf['hidden_size']
  if hf.get('embedding_size') not in (None, hidden):
    raise errors.ConfigError(
        f'embedding_size={hf["embedding_size"]} differs from hidden_size={hidden}: the '
        'projected-embedding variant is not supported by this encoder.')
  activation = hf.get('hidden_act', 'gelu')
  if activation not in _ACTIVATIONS:
    raise errors.ConfigError(f'hidden_act={activation!r} is not supported; one of '
                             f'{sorted(_ACTIVATIONS)}.')
  config = mlm.get_config('roformer')
  config.model.update(
      num_layers=hf['num_hidden_layers'], d_model=hidden, num_heads=hf['num_attention_heads'],
      d_ff=hf['intermediate_size'], vocab_size=hf['vocab_size'], norm='post',
      activation=_ACTIVATIONS[activation], layer_norm_eps=hf.get('layer_norm_eps', 1e-12),
      type_vocab_size=hf.get('type_vocab_size', 2), dropout=hf.get('hidden_dropout_prob', 0.1))
  config.model.position.rope.rotate_values = bool(hf.get('rotary_value', False))
  config.data.vocab_size = hf['vocab_size'] - 1  # The model's last id is this project's [MASK].
  config.data.seq_len = min(config.data.seq_len, hf.get('max_position_embeddings', 512))
  return config


def _linear(tensors, name):
  return {'kernel': tensors[name + '.weight'].T, 'bias': tensors[name + '.bias']}


def _norm(tensors, name, scale: float = 1.0):
  return {'scale': tensors[name + '.weight'] * scale, 'bias': tensors[name + '.bias'] * scale}


def convert(tensors: dict[str, np.ndarray], config) -> tuple[dict, list[str]]:
  """Maps HF tensors onto this project's MaskedLM parameters (a pure nested dict). Returns
  (params, names of parameters not found in the checkpoint)."""
  tensors = {k.removeprefix('roformer.'): v for k, v in tensors.items()}
  t = tensors
  params = {
      'embed': {'embedding': t['embeddings.word_embeddings.weight']},
      'token_type': {'embedding': t['embeddings.token_type_embeddings.weight']},
      'ln_embed': _norm(t, 'embeddings.LayerNorm'),
      'blocks': {},
  }
  for i in range(config.model.num_layers):
    p = f'encoder.layer.{i}.'
    q, k, v = (_linear(t, p + 'attention.self.' + n) for n in ('query', 'key', 'value'))
    params['blocks'][i] = {
        # Fused [q | k | v] columns; within each, head h owns columns h*head_dim.. as in HF.
        'attn': {'qkv': {'kernel': np.concatenate([q['kernel'], k['kernel'], v['kernel']], 1),
                         'bias': np.concatenate([q['bias'], k['bias'], v['bias']])},
                 'out': _linear(t, p + 'attention.output.dense')},
        'ln_attn': _norm(t, p + 'attention.output.LayerNorm'),
        'mlp': {'up': _linear(t, p + 'intermediate.dense'), 'down': _linear(t, p + 'output.dense')},
        'ln_mlp': _norm(t, p + 'output.LayerNorm'),
    }
  missing = []
  if 'cls.predictions.transform.dense.weight' in t:
    params['head'] = _linear(t, 'cls.predictions.transform.dense')
    # This project scales tied logits by d_model^-0.5; HF does not. Folding sqrt(d_model) into
    # the head's LayerNorm gives HF's logits exactly.
    params['head_ln'] = _norm(t, 'cls.predictions.transform.LayerNorm',
                              config.model.d_model ** 0.5)
    params['output_bias'] = t.get('cls.predictions.bias', t.get('cls.predictions.decoder.bias'))
  else:
    missing = ['head', 'head_ln', 'output_bias']
  return params, missing


def write_workdir(params: dict, config, workdir: str) -> None:
  """Writes config.json and a step-0 checkpoint (fresh optimizer state) that train.py/eval.py
  and --config.init_from read like any pretraining run. Refuses an existing workdir."""
  import jax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from roformer import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
  from roformer import resolve  # pylint: disable=g-import-not-at-top
  from roformer import saved_config  # pylint: disable=g-import-not-at-top
  from roformer import sharding  # pylint: disable=g-import-not-at-top
  from roformer import trainer as trainer_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  workdir = os.path.abspath(workdir)
  if os.path.exists(workdir) and os.listdir(workdir):
    raise errors.ConfigError(f'--workdir={workdir} exists and is not empty. Fix: choose a new '
                             'directory; nothing was written.')
  resolve.validate(config)
  trainer = trainer_lib.Trainer(config, sharding.make_mesh(config.mesh))
  state = trainer.saved(trainer.init_state())  # The per-block layout that checkpoints hold.
  target = state['params'].to_pure_dict()
  for key, value in params.items():
    target[key] = jax.tree.map(lambda old, new: np.asarray(new, old.dtype), target[key], value)
  nnx.replace_by_pure_dict(state['params'], target)
  with files.staged_directory(workdir) as staging:  # All of it, or nothing.
    saved_config.save(config, staging)
    files.write_text_atomic(
        os.path.join(staging, workdir_lib.FOREIGN_VOCABULARY_FILE),
        'Converted from Hugging Face RoFormer weights: token ids are those of the Hugging Face '
        'tokenizer, not of a SentencePiece model of this project.\n')
    ckpt = checkpoint_lib.Checkpointer(os.path.join(staging, 'checkpoints'))
    ckpt.save(0, state)
    ckpt.close()


def main(argv):
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--checkpoint', required=True, type=cli.path_arg)
  parser.add_argument('--workdir', required=True, type=cli.path_arg)
  args = parser.parse_args(argv)
  weights, hf = locate(args.checkpoint)
  try:
    config = model_config(hf)
    params, missing = convert(read_safetensors(weights), config)
  except KeyError as e:  # A field or tensor the file should have.
    raise errors.DamagedFileError(f'--checkpoint={args.checkpoint!r} lacks {e} (not a complete '
                                  'Hugging Face RoFormer checkpoint). Fix: point at a directory '
                                  'written by save_pretrained.') from None
  write_workdir(params, config, args.workdir)
  print(f'wrote {args.workdir}: {config.model.num_layers} layers, d_model '
        f'{config.model.d_model}' + (f'; initialised afresh: {missing}' if missing else ''))


if __name__ == '__main__':
  cli.guard(main)(sys.argv[1:])
