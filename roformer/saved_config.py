"""A run's saved config: written to its workdir and read back (brought up to date), compared
with the config that reads it, and what may differ from it on each of the three occasions that
read one, with the reason for every field, in one place.

- resume: `train.py` again in a workdir that holds a checkpoint of the run;
- continue: a causal LM trained on from another run's weights (`config.init_from`; the context
  extension of Chen et al. 2023);
- evaluate: `eval.py` restoring a checkpoint.

`fixed_rules()` lists the fields that must equal the saved run's on an occasion (each field
declares it beside its spec, for what it decides of a trained run: the meaning of ids, the rows,
the data stream); `may_change_rules()` the fields inside them that may differ anyway (`MAY_CHANGE`
and what each position scheme declares), and `MAY_CHANGE_IF` those that may differ when the
saved run allows it (another text to evaluate on, where the tokenizer was not trained on the
run's data). Fields outside those (the schedule, logging, evaluation settings, ...) may always
change. docs/configs_and_data.md shows this table (`table()`), and a test keeps the two equal.
The checks that refuse a change are in roformer/resolve.py (and the workdir's, for a resume).
"""

import copy
import json
import os

import ml_collections

from roformer import config_schema
from roformer import errors
from roformer import files
from roformer import positions
from roformer import specs
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
    ('model.mla.cache', _ALL,
     "what decoding caches of latent attention, each head's keys and values or the latent: "
     'the same outputs'),
    ('model.dtype', (CONTINUE, EVALUATE),
     'the compute precision, a choice of the study; one run keeps one precision'),
    ('model.dropout', (CONTINUE,), 'the regularisation of a new phase of training'),
    ('model.moe.impl', _ALL,
     "a mixture's experts on every token or on their own (ragged_dot): the same outputs"),
    ('model.moe.balance_loss', (CONTINUE,),
     "the router's training losses, which a new phase of training sets"),
    ('model.moe.balance_over', (CONTINUE,),
     "the router's training losses, which a new phase of training sets"),
    ('model.moe.balance_scores', (CONTINUE,),
     "the router's training losses, which a new phase of training sets"),
    ('model.moe.router_z_loss', (CONTINUE,),
     "the router's training losses, which a new phase of training sets"),
    ('model.moe.choice_bias_rate', (CONTINUE,),
     "how the experts' loads move the choice bias in training, which a new phase sets (its "
     'optimizer state is new)'),
)


# What an evaluation may change and still score the run as trained (eval.py's plain
# eval_results.json): how the model is computed (MAY_CHANGE's rows for every occasion), how
# much is evaluated and where from, and what only training reads. Anything else the
# evaluation reads (a scaling, a remap, the precision, other text, the protocol) is a variant.
SAME_SCORE = tuple(field for field, when, _ in MAY_CHANGE if when == _ALL) + (
    'eval.batch_size', 'eval.max_batches', 'eval.length_multipliers', 'eval.position_bucket',
    'eval.splits', 'data.data_dir', 'seed', 'init_from')
_TRAINING_ONLY = ('train.', 'mesh.')


def makes_a_variant(field: str) -> bool:
  """Whether changing `field` (dotted, without 'config.') at evaluation can make the results
  another quantity than the run's as trained (`SAME_SCORE`)."""
  return field not in SAME_SCORE and not field.startswith(_TRAINING_ONLY)


def variant(saved, config) -> list[str]:
  """The differences ('field: saved vs now') that make `config`'s evaluation a variant of the
  run `saved` trained: fields that make one (`makes_a_variant`) and that `config` reads; of
  the position scheme's, those its evaluations record (`results_fields`: RoPE's scaling and
  remap while one is on, not the options of one that is off)."""
  out = []
  for difference in differences(saved, config):
    field = difference.split(':', 1)[0]
    spec = config_schema.spec_at(field)
    reader = getattr(spec, 'reader', None)
    if (makes_a_variant(field) and not field.startswith('model.position.')
        and (reader is None or reader.reads(config))):
      out.append(difference)
  scheme = positions.model_scheme(config.model)
  if (scheme.results_fields(saved.model.position)
      != scheme.results_fields(config.model.position)):  # Named by the fields changed.
    out += [d for d in differences(saved.model.position, config.model.position, 'model.position')
            if makes_a_variant(d.split(':', 1)[0])]
  return out


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


def conditions_unmet(saved, occasion: str) -> tuple[tuple[str, str], ...]:
  """(field, its condition in words) for each field that may differ on `occasion` only under
  a condition that `saved` does not meet (data.name: with a given tokenizer)."""
  return tuple((field, words) for field, when, condition, words, _ in MAY_CHANGE_IF
               if occasion in when and not condition(saved))


def changed(saved, config, occasion: str) -> list[str]:
  """The differences ('field: saved vs now', as `differences` writes them) in the
  fields that `occasion` keeps fixed and does not let change."""
  allowed_fields = allowed(saved, occasion)
  out = []
  for field in fixed(occasion):
    out += differences({field: _get(saved, field)}, {field: _get(config, field)})
  return [d for d in out if not _within(d.split(':')[0], allowed_fields)]


def _within(name: str, fields) -> bool:
  return any(name == f or name.startswith(f + '.') for f in fields)


def status(field: str, occasion: str) -> str:
  """'fixed' or 'may change': what `occasion` allows for `field`."""
  held = _within(field, fixed(occasion)) and not _within(field, may_change(occasion))
  return 'fixed' if held else 'may change'


def table() -> str:
  """The Markdown table of docs/configs_and_data.md: every field that is fixed or may change
  on some occasion, what each occasion allows (under a condition: MAY_CHANGE_IF), and why."""
  rows = ['| field | resume | continue (`init_from`) | evaluate | why |',
          '|---|---|---|---|---|']
  conditional = {field: (when, words, why) for field, when, _, words, why in MAY_CHANGE_IF}
  for field, _, why in fixed_rules() + may_change_rules():
    when, words, because = conditional.get(field, ((), '', ''))
    rows.append(f'| `{field}` | ' + ' | '.join(
        f'may change {words}' if o in when else status(field, o) for o in OCCASIONS)
                + f' | {why}{f"; {words}: {because}" if because else ""} |')
  return '\n'.join(rows)


def save(config: ml_collections.ConfigDict, workdir: str, name: str = 'config.json') -> None:
  files.write_text_atomic(os.path.join(workdir, name), config.to_json(indent=2, sort_keys=True))


def load(workdir: str, current: bool = False) -> ml_collections.ConfigDict:
  """The config a run saved in `workdir` (config.json; with `current`, the one it trains under
  now: files.current_config), brought up to date (`migrate`: a field added since
  the run was saved at its default). Raises ConfigError if there is none, and DamagedFileError
  naming the file and the fix if it does not read back as a config."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise errors.ConfigError(f'{path} does not exist: --workdir={workdir!r} is not the workdir '
                             'of a run. Fix: point --workdir at a directory made by train.py or '
                             'scripts/convert_hf.py.')
  fix = ('restore it from a copy of the run (a resumed run also wrote its config as '
         'config.resume-STEP.json there), or move it aside and rerun the train.py command '
         'that made the run: it resumes and writes config.json again')
  if current:
    path = files.current_config_path(workdir)
  saved = files.read_json(path, fix)
  missing = [k for k in ('model', 'data', 'train', 'eval') if not isinstance(saved.get(k), dict)]
  if missing:
    raise errors.DamagedFileError(f'{path} has no {missing[0]!r} section: it is damaged or not '
                                  f'a config written by train.py. Fix: {fix}.')
  tree = config_schema.schema()  # Built once for both: it is built on each call.
  config = migrate(_lists_to_tuples(saved), tree)  # Fields added since it was saved.
  try:
    config_schema.check(config, tree)
  except errors.ConfigError as e:
    raise errors.DamagedFileError(f'{path} holds a value train.py never writes ('
                                  f'{errors.without_fix(e)}): it was edited or damaged. Fix: '
                                  f'{fix}.') from None
  return config


def _lists_to_tuples(value):
  """JSON has no tuples; configs use tuples so that flags can override them."""
  if isinstance(value, dict):
    return {k: _lists_to_tuples(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(_lists_to_tuples(v) for v in value)
  return value


def _as_dict(value):
  if hasattr(value, 'to_dict'):
    value = value.to_dict()
  if isinstance(value, dict):
    return {k: _as_dict(v) for k, v in value.items()}
  return value


def without_seed(config: ml_collections.ConfigDict) -> str:
  """The whole config but its seed, as one canonical string: runs with equal keys differ only
  in their seed (a group that trains in one program, a compiled pass that serves them all)."""
  fields = config.to_dict()
  fields.pop('seed', None)
  return json.dumps(fields, sort_keys=True, default=repr)


def differences(a, b, prefix='') -> list[str]:
  """Fields whose values differ between two configs (as nested dicts)."""
  a, b = _as_dict(a), _as_dict(b)
  out = []
  for key in sorted(set(a) | set(b)):
    va, vb = a.get(key), b.get(key)
    name = f'{prefix}.{key}' if prefix else key
    if isinstance(va, dict) and isinstance(vb, dict):
      out += differences(va, vb, name)
    elif va != vb and not (isinstance(va, (list, tuple)) and list(va) == list(vb or [])):
      out.append(f'{name}: {va!r} vs {vb!r}')
  return out


def migrate(saved, tree: dict | None = None) -> ml_collections.ConfigDict:
  """A config saved by any earlier version (a dict or ConfigDict), brought up to date: every
  field added since it was saved at its default (the behaviour the code had before the field
  existed). Fields it has keep their values; nothing is checked here. `tree`: schema(), where
  the caller has built it already."""
  def fill(node: dict, tree: dict) -> dict:
    for key, spec in tree.items():
      if key not in node:
        node[key] = copy.deepcopy(specs.defaults(spec) if isinstance(spec, dict) else spec.default)
      elif isinstance(spec, dict) and isinstance(node[key], dict):
        fill(node[key], spec)
    return node
  plain = saved.to_dict() if hasattr(saved, 'to_dict') else copy.deepcopy(dict(saved))
  return ml_collections.ConfigDict(fill(plain, config_schema.schema() if tree is None else tree))
