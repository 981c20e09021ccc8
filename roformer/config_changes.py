"""What may differ between a saved run's config and the config that reads that run, on each of
the three occasions that read one, with the reason for every field, in one place.

- resume: `train.py` again in a workdir that holds a checkpoint of the run;
- continue: a causal LM trained on from another run's weights (`config.init_from`; the context
  extension of Chen et al. 2023);
- evaluate: `eval.py` restoring a checkpoint.

`fixed_rules()` lists the fields that must equal the saved run's on an occasion (each field
declares it beside its spec, for what it decides of a trained run: the meaning of ids, the rows,
the data stream); `may_change_rules()` the fields inside them that may differ anyway (`MAY_CHANGE`
and what each position scheme declares), and `MAY_CHANGE_IF` those that may differ when the
saved run allows it (another text to evaluate on, where the tokenizer was not trained on the run's data).
Fields outside those (the schedule, logging, evaluation settings, ...) may always change.
docs/configs_and_data.md shows this table (`table()`), and a test keeps the two equal.
"""

from roformer import config_lib
from roformer import config_schema
from roformer import positions
from roformer.data import synthetic

RESUME, CONTINUE, EVALUATE = 'resume', 'continue', 'evaluate'
OCCASIONS = (RESUME, CONTINUE, EVALUATE)
_ALL = OCCASIONS

_MODEL = 'the parameters and what they compute'


def fixed_rules() -> tuple:
  """(field, the occasions on which it must equal the saved run's, why): the model as a whole,
  and every field that declares it beside its spec (roformer/config_schema.py, `_kept`)."""
  return (('model', _ALL, _MODEL),) + tuple(config_schema.fixed_fields())


MAY_CHANGE = (  # (field inside a fixed one, the occasions on which it may differ, why)
    ('model.vocab_size', (RESUME, CONTINUE),
     "set from the tokenizer that comes with the run, never by hand"),
    ('model.attention_impl', _ALL,
     'which kernel computes attention (einsum, xla, cudnn, pallas): the same function'),
    ('model.remat', (RESUME, CONTINUE), 'what the backward pass recomputes: the same gradients'),
    ('model.scan_layers', _ALL,
     'the stack as a loop or one scan: the same outputs, and checkpoints of one layout'),
    ('model.custom_gradients', _ALL,
     'hand-written backward passes or autodiff: the same gradients to rounding'),
    ('model.loss_chunk', _ALL,
     'how many positions the output layer computes at a time: the same loss'),
    ('model.causal_block', _ALL, 'query rows per block of causal attention: the same outputs'),
    ('model.dtype', (CONTINUE, EVALUATE),
     'the compute precision, a choice of the study; one run keeps one precision'),
    ('model.dropout', (CONTINUE,), 'the regularisation of a new phase of training'),
)


def may_change_rules() -> tuple:
  """MAY_CHANGE and what each registered position scheme declares it lets change (its
  `may_change`: RoPE's base, scaling and remap)."""
  return MAY_CHANGE + positions.may_change()


def _tokenizer_given(saved) -> bool:
  """Whether the saved run's tokenizer was given rather than trained on its data (bytes, a
  tokenizer file, a pretrained model's own): its ids then mean the same on any text."""
  name, tokenizer = _get(saved, 'data.name'), _get(saved, 'data.tokenizer')
  return bool(tokenizer) and tokenizer != 'sentencepiece' and not str(name).startswith(
      synthetic.PREFIX)


# (field inside a fixed one, the occasions on which it may differ when `condition(saved)`
# holds, the condition in words, why)
MAY_CHANGE_IF = (
    ('data.name', (EVALUATE,), _tokenizer_given, 'with a given tokenizer',
     "a tokenizer that was not trained on the run's data (bytes, a file, a pretrained "
     "model's) reads other text with the same ids: the model is evaluated on that text"),
    ('data.text_key', (EVALUATE,), _tokenizer_given, 'with a given tokenizer',
     'the feature that holds the text of the data evaluated on'),
)


def fixed(occasion: str) -> tuple[str, ...]:
  return tuple(field for field, when, _ in fixed_rules() if occasion in when)


def may_change(occasion: str) -> tuple[str, ...]:
  return tuple(field for field, when, _ in may_change_rules() if occasion in when)


def _get(config, dotted: str):
  node = config
  for part in dotted.split('.'):
    node = node.get(part) if node is not None else None
  return node


def allowed(saved, occasion: str) -> tuple[str, ...]:
  """The fields inside fixed ones that may differ from `saved`'s on `occasion`."""
  return may_change(occasion) + tuple(
      field for field, when, condition, _, _ in MAY_CHANGE_IF
      if occasion in when and condition(saved))


def changed(saved, config, occasion: str) -> list[str]:
  """The differences ('field: saved vs now', as config_lib.differences writes them) in the
  fields that `occasion` keeps fixed and does not let change."""
  allowed_fields = allowed(saved, occasion)
  out = []
  for field in fixed(occasion):
    out += config_lib.differences({field: _get(saved, field)}, {field: _get(config, field)})
  return [d for d in out if not _within(d.split(':')[0], allowed_fields)]


def _within(name: str, fields) -> bool:
  return any(name == f or name.startswith(f + '.') for f in fields)


def status(field: str, occasion: str) -> str:
  """'fixed' or 'may change': what `occasion` allows for `field`."""
  held = _within(field, fixed(occasion)) and not _within(field, may_change(occasion))
  return 'fixed' if held else 'may change'


def table() -> str:
  """The Markdown table of docs/configuration.md: every field that is fixed or may change
  on some occasion, what each occasion allows, and why."""
  rows = ['| field | resume | continue (`init_from`) | evaluate | why |',
          '|---|---|---|---|---|']
  for field, _, why in fixed_rules() + may_change_rules():
    rows.append(f'| `{field}` | ' + ' | '.join(status(field, o) for o in OCCASIONS)
                + f' | {why} |')
  for field, when, _, words, why in MAY_CHANGE_IF:
    rows.append(f'| `{field}` | ' + ' | '.join(
        f'may change {words}' if o in when else status(field, o) for o in OCCASIONS)
                + f' | {why} |')
  return '\n'.join(rows)
