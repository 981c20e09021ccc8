"""How a field of a Hugging Face config.json is read: as its transformers class's default where the
file leaves it out (`read`), or as a damaged file where it must be there (`field`); the first of
several refusals (`first_failed`); a positive number (`positive`) or an integer (`integer`);
the refusals of a Llama-shaped block (`llama_block_checks`); Seed-OSS's biases
(`seed_oss_biases`); and the config that every
imported family starts from (`decoder`). Shared by roformer/hf_config.py and
roformer/hf_classic.py."""

import os

import ml_collections

from roformer import config_schema
from roformer import errors
from roformer import model_types

# transformers' hidden_act -> model.activation.
ACTIVATIONS = {'silu': 'silu', 'swish': 'silu', 'gelu': 'gelu', 'gelu_new': 'gelu_tanh',
               'gelu_pytorch_tanh': 'gelu_tanh', 'relu': 'relu', 'relu2': 'relu_squared'}


def read(hf: dict, name: str, default):
  """A transformers config's `name`, or `default`: the value transformers' class assumes when
  the file leaves it out."""
  return hf[name] if name in hf else default


def field(hf: dict, name: str, where: str):
  """A transformers config's `name`, which the file must hold."""
  if name not in hf:
    raise errors.DamagedFileError(f'{where} lacks {name!r}. Fix: use the config.json that came '
                                  'with the weights.')
  return hf[name]


def integer(hf: dict, name: str, default, where: str, low: int = 1) -> int:
  """A count or size of the config (`default` where absent) of at least `low`, or a damaged
  file."""
  value = read(hf, name, default)
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise errors.DamagedFileError(f'{where}: {name} is {value!r}, where transformers reads an '
                                  f'integer of at least {low}. Fix: use the config.json that '
                                  'came with the weights.')
  return value


def llama_block_checks(m, what: str, family: str) -> tuple:
  """The (failed, reason) checks of a class whose block is Llama's pre-norm one without
  multipliers, soft-caps, an output bias or per-layer bases; `what` names the model's feature
  that picked the class, `family` the class in words."""
  return (((m.normalization, m.norm, m.residual) != ('rms_norm', 'pre', 'sequential'),
           f'normalization={m.normalization!r}, norm={m.norm!r}, residual={m.residual!r} with '
           f"{what} (its class is Llama's block: rms_norm, pre, sequential)"),
          ((m.embedding_multiplier, m.residual_multiplier, m.logits_multiplier) != (1, 1, 1)
           or m.logits_softcap or m.get('output_bias') or m.layer_rope_bases,
           f"a multiplier, a soft-cap, an output bias or per-layer RoPE bases, which {family}'s "
           'class does not have'))


def first_failed(checks) -> str | None:
  """The reason of the first (failed, reason) pair that failed, or None."""
  return next((reason for failed, reason in checks if failed), None)


def options_check(m, options, family: str, block: str) -> tuple[bool, str]:
  """A (failed, reason) check of the attention options on (`options`) against the class of
  `family`: the first that it does not compute as set, or whose own refusal says why (QK-norm's
  epsilon); `block` names the block in the reason."""
  missing = [o for o in options if not o.transformers_computes(m.attention, family)]
  if missing:  # Named with its settings where the class has the option but computes it otherwise.
    return True, ', '.join(
        f'attention.{o.field}' + (f" ({', '.join(f'{k}={m.attention[k]!r}' for k in o.reads)})"
                                  if family in o.transformers_families else '')
        for o in missing) + f' {block}'
  reason = next((r for r in (o.transformers_refusal(m, m.attention) for o in options) if r), '')
  return bool(reason), reason


def positive(value, name: str, where: str) -> float:
  """A positive number of the config (a soft-cap, clip_qkv; this project's fields take up to
  1e6), or a damaged file."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e6:
    raise errors.DamagedFileError(f'{where}: {name} is {value!r}, where transformers reads a '
                                  'positive number or null (this project: up to 1e6). Fix: use '
                                  'the config.json that came with the weights.')
  return float(value)


def decoder(hf: dict, directory: str, where: str, trained: int,
            **model) -> ml_collections.ConfigDict:
  """The config every imported family starts from, with `model`'s fields: transformers'
  causal-LM classes are the first decoder-only type declared, read without dropout, initialised
  (for continued training) from a normal at `initializer_range`, with the directory's tokenizer
  and `trained`, the length pretrained at, as data.seq_len."""
  config = config_schema.default_config()
  config.model.update(type=model_types.named('decoder_only')[0],
                      vocab_size=int(field(hf, 'vocab_size', where)), dropout=0.0,
                      init='normal', init_std=float(read(hf, 'initializer_range', 0.02)),
                      **model)
  config.data.seq_len = trained
  config.data.tokenizer = 'hf:' + os.path.abspath(directory)
  return config


def seed_oss_biases(hf: dict, where: str) -> str:
  """Seed-OSS's switches (attention_bias: q, k and v; attention_out_bias; mlp_bias) as one of
  this project's sets of biases, or one line naming what none of them is."""
  found = tuple(bool(read(hf, name, name == 'attention_bias'))
                for name in ('attention_bias', 'attention_out_bias', 'mlp_bias'))
  sets = {(1, 0, 0): 'qkv', (1, 1, 0): 'attention', (1, 1, 1): 'all', (0, 0, 1): 'mlp',
          (0, 0, 0): 'none'}
  if found not in sets:
    raise errors.ConfigError(
        f'{where}: attention_bias={found[0]}, attention_out_bias={found[1]} and mlp_bias='
        f'{found[2]} give biases to a set of layers this project has no setting for (q, k and '
        'v; those and the output; every layer; the MLP; none). Fix: one of those sets.')
  return sets[found]
