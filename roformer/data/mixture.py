"""Several text sources trained on together, each by its weight (config.data.mixture).

  config.data.name = 'shakespeare'
  config.data.mixture = {'plays': {'weight': 0.8},
                         'keys': {'weight': 0.2, 'name': 'synthetic/passkey'}}

Each entry is a source of documents: config.data with the entry's fields over it (a dataset by
name, your own files, or a synthetic task whose rows are read as text), named in reports by its
key. Training reads each source's train split as a run on that source alone would (its own
shuffle, chunks and packed rows), and grain's `IterDataset.mix` interleaves the packed rows by
weight: a weight is a share of the training rows (each row holds seq_len tokens up to its
padding), and the data position saved with a checkpoint holds every source's own position.
Evaluation scores each source's splits on their own (`validation/plays`, `validation/keys`);
the validation that the training loop logs is the sources' mean weighted by the weights (of the
sources whose loss counts every token, as training does: not passkey rows in a corpus's text,
scored on their answer), with each source's own line beside it.

The tokenizer is config.data's own, whatever the entries read: trained on config.data.name's
train split unless data.tokenizer names one. A synthetic task's rows become documents in words
(`synthetic.TextRows`): a row of data.seq_len of the task's words, tokenized like any text (a
row that takes more tokens than a training row holds continues in the next chunk); its loss
counts every token, not only the answer.
"""

import contextlib
import re
import zlib

import ml_collections

from roformer import errors
from roformer import metrics
from roformer.data import corpus
from roformer.data import passkey_text
from roformer.data import ruler_text
from roformer.data import synthetic

WEIGHT = 'weight'
# The fields of config.data that an entry may set over config.data's: what picks a source and
# how its documents are read. Everything else (tokenizer, lengths, packing) is the run's.
ENTRY_FIELDS = ('name', 'text_key', 'splits', 'files', 'validation_files', 'test_files',
                'validation_fraction', 'test_fraction', 'skip_bad_documents')
_FILES_FIELDS = ('files', 'validation_files', 'test_files', 'validation_fraction',
                 'test_fraction', 'skip_bad_documents')


def is_mixture(data_cfg) -> bool:
  return bool(data_cfg.get('mixture'))


def entries(data_cfg) -> dict[str, dict]:
  """{source name: its entry}, by name (a config keeps its keys sorted)."""
  mixture = data_cfg.get('mixture') or {}
  return {name: dict(entry.to_dict() if hasattr(entry, 'to_dict') else entry)
          for name, entry in (mixture.items() if hasattr(mixture, 'items') else [])}


def base_config(data_cfg) -> ml_collections.ConfigDict:
  """config.data without its mixture: the source whose tokenizer the run uses."""
  base = ml_collections.ConfigDict(data_cfg.to_dict())
  base.mixture = {}
  return base


def member_config(data_cfg, entry: dict) -> ml_collections.ConfigDict:
  """config.data as a run on the entry's source alone reads it: the entry's fields over
  config.data's (a synthetic entry's fields of config.data.synthetic stay the run's)."""
  member = base_config(data_cfg)
  for key, value in entry.items():
    if key != WEIGHT:
      member[key] = value
  return member


def is_synthetic(entry: dict, data_cfg) -> bool:
  return synthetic.task_name(member_config(data_cfg, entry)) is not None


def has_synthetic(data_cfg) -> bool:
  """Whether an entry reads a synthetic task's rows (which read config.data.synthetic)."""
  return any(is_synthetic(e, data_cfg) for e in entries(data_cfg).values())


def validate(config, trained_tokenizer: bool) -> None:
  """The entries' fields against each other, the model and the evaluation lengths (their types
  and ranges are checked with every field, roformer/config_schema.py). `trained_tokenizer`:
  the run trains its tokenizer on config.data's own source, which an entry must then read."""
  data = config.data
  longest = data.seq_len * max(config.eval.length_multipliers)
  for name, entry in entries(data).items():
    where = f'config.data.mixture.{name}'
    member = member_config(data, entry)
    if not corpus.is_files(member):
      given = sorted(set(entry) & set(_FILES_FIELDS))
      if given:
        raise errors.ConfigError(
            f'{where}.{given[0]} is read only by a source of your own files, and this one is '
            f"{member.name!r}. Fix: add 'name': '{corpus.NAME}' to the entry, or drop "
            f"'{given[0]}'.")
    elif not member.files:
      raise errors.ConfigError(f"{where} reads your own files but names none. Fix: add 'files': "
                               "'GLOB' to the entry.")
    task = synthetic.task_name(member)
    if task:
      with named(name):
        synthetic.validate(task, member.synthetic, data.seq_len, longest)
        if member.synthetic.filler != 'words':
          ruler_text.validate(task, member.synthetic)
  base = base_config(data)
  if trained_tokenizer and not any(_same_source(member_config(data, e), base)
                                   for e in entries(data).values()):
    read = sorted({_source_words(member_config(data, e)) for e in entries(data).values()})
    raise errors.ConfigError(
        f'the tokenizer is trained on the train split of {_source_words(base)} (config.data\'s '
        'own source), which no entry of config.data.mixture reads with the same source fields '
        f'({", ".join(ENTRY_FIELDS)}; the entries read {"; ".join(read)}). Fix: set '
        'config.data.name (and its fields) to the source of one entry, or give '
        'config.data.tokenizer (bytes, or a tokenizer file).')


def _source_words(member) -> str:
  """A source as its fields name it: the dataset, or your own files by their glob."""
  if corpus.is_files(member):
    return f'your own files {member.files!r}'
  return repr(member.name)


def check_text_lengths(sources: dict, tokenizer, length: int) -> None:
  """Rows of `length` hold the fixed parts of every mixture source of rows in text (passkey's
  and RULER's, the only place such rows come from) in `sources` (split name -> source): one
  refusal naming each source that is too short and the length that holds them all, instead of
  one per source as its rows are built."""
  short = {}  # Source name -> (its task, its TooShort).
  for source in sources.values():
    for name, member in (source.members.items() if isinstance(source, Mixture) else ()):
      if isinstance(member, passkey_text.Split) and name not in short:
        try:
          ruler_text.rows(member, tokenizer, length)
        except errors.TooShort as e:
          short[name] = member.task, e
  if len(short) == 1:
    raise next(iter(short.values()))[1]
  if short:
    longest = max(e.shortest for _, e in short.values())
    needs = ', '.join(f'{name} ({task}) {e.shortest}' for name, (task, e) in short.items())
    raise errors.TooShort(
        f"rows in text (config.data.synthetic.filler='text') of {length} tokens cannot hold "
        f'the fixed parts of several sources, whose shortest lengths are: {needs}. Fix: '
        f'--config.data.seq_len={longest} or more, or fewer needles, values, queries, chains, '
        'hops, common words or key_digits.', longest)


def _same_source(member, base) -> bool:
  return all(member[key] == base[key] for key in ENTRY_FIELDS)


@contextlib.contextmanager
def named(name: str):
  """A ConfigError raised for an entry's own data config names the entry first, and a fix that
  names a field of config.data that the entry sets for itself names the entry's."""
  try:
    yield
  except errors.ConfigError as e:
    text = re.sub(r'--config\.data\.(' + '|'.join(ENTRY_FIELDS) + r')\b',
                  lambda m: f"'{m.group(1)}' of config.data.mixture.{name}", str(e))
    raise type(e)(f'config.data.mixture.{name}: {text}') from e


class Mixture:
  """One split of a mixture: each source's own split (`members`), the data config a run on it
  alone reads (`configs`) and its share of the training rows (`weights`, summing to 1)."""

  def __init__(self, members: dict, configs: dict, weights: dict):
    self.members, self.configs = dict(members), dict(configs)
    total = sum(weights.values())
    self.weights = {name: weights[name] / total for name in self.members}

  def config_for(self, config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
    """The run's config with source `name`'s data config in place of the mixture's."""
    out = ml_collections.ConfigDict(config.to_dict())
    out.data = ml_collections.ConfigDict(self.configs[name].to_dict())
    return out


def load(data_cfg, splits, load_sources) -> dict[str, Mixture]:
  """{split: Mixture} of the entries' sources; `load_sources(member_cfg, splits)` opens one."""
  configs = {name: member_config(data_cfg, e) for name, e in entries(data_cfg).items()}
  weights = {name: float(e[WEIGHT]) for name, e in entries(data_cfg).items()}
  opened, text = {}, None
  for name, cfg in configs.items():
    with named(name):
      opened[name] = load_sources(cfg, splits)
      if synthetic.task_name(cfg) and passkey_text.reads_text(cfg.synthetic):
        # The key is hidden in config.data's own source: that split's text, opened once.
        text = text or load_sources(base_config(data_cfg), splits)
        opened[name] = {split: passkey_text.Split(cfg.synthetic, split, text[split],
                                                  data_cfg.text_key, synthetic.task_name(cfg))
                        for split in splits}
  return {split: Mixture({name: opened[name][split] for name in configs}, configs, weights)
          for split in splits}


def member_seed(seed: int, name: str) -> int:
  """Source `name`'s own shuffle seed within a run seeded `seed`: another order per source,
  the same one on every run and resume."""
  return (seed * 1_000_003 + zlib.crc32(name.encode('utf-8'))) % (2**31 - 1)


def mix(rows: dict, weights: dict) -> 'grain.IterDataset':
  """The sources' packed rows interleaved by weight. Keyed by name, so a checkpoint's data
  position restores each source's own.

  grain is imported here, not with the module: the config's schema reads this module's fields,
  and an entry point that refuses a config should answer without loading the data pipeline."""
  import grain  # pylint: disable=import-outside-toplevel
  return grain.IterDataset.mix(rows, {name: weights[name] for name in rows})


def weighted(results: dict[str, dict], weights: dict[str, float],
             apart: frozenset[str] = frozenset()) -> dict:
  """The mixture's validation: each metric's mean over the sources weighted by their weights
  (loss and accuracy; perplexity from the mean loss), with every source's result under
  'sources'. The sources in `apart` are scored on other tokens than training counts (passkey
  rows in a corpus's text: the answer only), so their loss is not the same quantity as the
  others'. They stay out of the mean (the other weights renormalised; no mean when none is
  left) and are reported under 'sources' only."""
  mean = {name: r for name, r in results.items() if name not in apart}
  total = sum(weights[name] for name in mean)
  out = {}
  for key in ('loss', 'accuracy'):
    if mean and all(key in r for r in mean.values()):
      out[key] = sum(weights[name] * float(r[key]) for name, r in mean.items()) / total
  if 'loss' in out:
    out['perplexity'] = metrics.perplexity(out['loss'])
  out['sources'] = results
  return out


def source_split(split: str, name: str) -> str:
  """How reports name source `name`'s `split`: 'validation/plays'."""
  return f'{split}/{name}'
