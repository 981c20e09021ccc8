"""Datasets by name and the grain pipeline that turns documents into packed LM batches.

`load_sources` opens any TFDS dataset in the ArrayRecord format (building the embedded ones on
first use) and returns random-access sources per split. `lm_dataset` then: shards documents across
data-parallel processes, shuffles them with a seed, tokenizes, cuts long documents into chunks of
at most `seq_len` predictions, packs several chunks into one row (positions restart at 0 and
segment ids count 1..n per row; 0 is padding) and batches.
"""

import contextlib
import dataclasses
import difflib
import functools
import importlib
import io
import json
import logging
import os
import pathlib
import re
from typing import Any, Sequence

import grain
import numpy as np
import tensorflow_datasets as tfds
from google.protobuf import json_format

from roformer.data import bible
from roformer.data import cache
from roformer.data import corpus
from roformer.data import mixture
from roformer.data import movie_reviews
from roformer.data import passkey_text
from roformer.data import ruler_text
from roformer.data import shakespeare
from roformer.data import synthetic
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import tokens
from roformer.data import vocabularies

from roformer import errors
from roformer import killpoints

log = logging.getLogger('roformer')

# Datasets defined in this project, built locally from pip-installed corpora.
EMBEDDED_BUILDERS = {'shakespeare': shakespeare.Shakespeare, 'bible_en_de': bible.BibleEnDe,
                     'rotten_tomatoes': movie_reviews.RottenTomatoes, 'imdb': movie_reviews.Imdb}
SPLITS = ('train', 'validation', 'test')
PACKING_BINS_PER_ROW = 4

# GLUE tasks in TFDS: (text features, number of classes (1: regression), metrics).
GLUE_TASKS = {
    'cola': (('sentence',), 2, ('mcc', 'accuracy')),
    'sst2': (('sentence',), 2, ('accuracy',)),
    'mrpc': (('sentence1', 'sentence2'), 2, ('accuracy', 'f1')),
    'stsb': (('sentence1', 'sentence2'), 1, ('pearson', 'spearman')),
    'qqp': (('question1', 'question2'), 2, ('accuracy', 'f1')),
    'mnli': (('premise', 'hypothesis'), 3, ('accuracy',)),
    'qnli': (('question', 'sentence'), 2, ('accuracy',)),
    'rte': (('sentence1', 'sentence2'), 2, ('accuracy',)),
}


def default_data_dir() -> str:
  return os.environ.get('ROFORMER_DATA_DIR',
                        os.path.join(os.path.expanduser('~'), '.cache', 'roformer', 'tfds'))


def data_dir(data_cfg) -> str:
  return os.path.abspath(os.path.expanduser(data_cfg.data_dir or default_data_dir()))


# TFDS datasets whose code registers only when its module is imported (no TensorFlow needed).
_TFDS_MODULES = {'wmt14_translate': 'tensorflow_datasets.translate.wmt14',
                 'wmt17_translate': 'tensorflow_datasets.translate.wmt17',
                 'glue': 'tensorflow_datasets.text.glue'}


def _builder(data_cfg):
  """The dataset's TFDS builder, an embedded dataset built on first use; its cache on disk
  checked (roformer/data/cache.py): a damaged one is a DamagedFileError naming the directory
  to delete."""
  name, ddir = data_cfg.name, data_dir(data_cfg)
  module = _TFDS_MODULES.get(name.split('/')[0])
  if module:
    importlib.import_module(module)
  embedded_cls = EMBEDDED_BUILDERS.get(name)
  if embedded_cls:
    directory = os.path.join(ddir, embedded_cls.name, str(embedded_cls.VERSION))
    make = lambda: _open_builder(embedded_cls, directory, True, data_dir=ddir,
                                 file_format='array_record')
    builder = make()
    if not builder.is_prepared():
      with cache.exclusive(os.path.join(ddir, f'.{name}.lock')):
        builder = make()
        if not builder.is_prepared():
          cache.check_not_half_written(directory, embedded=True)
          killpoints.reach('dataset.build')
          _build_quietly(builder, name, directory)
  else:
    try:
      builder = _open_builder(tfds.builder, os.path.join(ddir, name.replace(':', '/')), False,
                              name, data_dir=ddir, file_format='array_record')
    except (tfds.core.registered.DatasetNotFoundError, ValueError) as e:
      if isinstance(e, errors.ConfigError):
        raise
      raise errors.ConfigError(_unknown_dataset(name, e)) from e
    cache.check_not_half_written(str(builder.data_dir), embedded=False)
    if not builder.is_prepared():
      cache.check_can_download(name, str(builder.data_dir))
  cache.check_shards(builder, embedded=bool(embedded_cls))
  return builder


def _build_quietly(builder, name: str, directory: str) -> None:
  """Builds an embedded dataset with one line of ours in place of TFDS's: its banner says
  'Downloading and preparing dataset Unknown size' for a corpus that is installed, not
  downloaded, and its progress bars print a screenful for a few seconds' work."""
  log.info('Building the embedded dataset %s in %s (once; later runs read it).', name, directory)
  # TFDS keeps the switch in a module global with no getter; left as it was found (on, its
  # default, where that global is not there to read).
  shown = getattr(tfds.core.utils.tqdm_utils, '_active', True)
  tfds.display_progress_bar(False)
  try:
    with contextlib.redirect_stdout(io.StringIO()):  # TFDS's banners.
      builder.download_and_prepare()
  finally:
    tfds.display_progress_bar(shown)


def _unknown_dataset(name: str, error: Exception) -> str:
  """One line for a data.name that no builder knows: TFDS's own message lists every dataset it
  has (hundreds of lines), so only its guess is kept, after the closest embedded name."""
  text = str(error)
  close = difflib.get_close_matches(name, sorted(EMBEDDED_BUILDERS), n=1)
  guess = re.search(r'Did you mean: \S+ -> (\S+)', text)
  suggestion = close[0] if close else guess.group(1) if guess else None
  hint = f' Did you mean {suggestion!r}?' if suggestion else ''
  cause = ('' if isinstance(error, tfds.core.registered.DatasetNotFoundError)
           else f' ({text.strip().splitlines()[0] if text.strip() else type(error).__name__})')
  dataset, _, config = name.partition('/')
  if config and 'BuilderConfig' in text:  # A dataset TFDS has, with a config it has not.
    configs = sorted(_builder_configs(dataset))
    close = difflib.get_close_matches(config, configs, n=1)
    return (f'config.data.name={name!r}: the TFDS dataset {dataset!r} has no config {config!r}.'
            + (f' Did you mean {dataset + "/" + close[0]!r}?' if close else '')
            + (f' Fix: one of {", ".join(f"{dataset}/{c}" for c in configs)}.' if configs else
               f' Fix: a config of {dataset!r} (its TFDS catalog page lists them).'))
  return (f'config.data.name={name!r} is not an embedded dataset ({sorted(EMBEDDED_BUILDERS)}) '
          f'nor a TFDS dataset{cause}.{hint} Fix: one of the embedded names, files (your own, '
          'with config.data.files), synthetic/TASK, or the name of a TFDS dataset.')


def _builder_configs(dataset: str) -> list[str]:
  """The names of a TFDS dataset's configs (none where it cannot be found)."""
  try:
    return list(tfds.builder_cls(dataset).builder_configs)
  except Exception:  # pylint: disable=broad-except  # Only for a hint.
    return []


def _open_builder(make, directory: str, is_embedded: bool, *args, **kwargs):
  """make(*args, **kwargs), a builder; its dataset_info.json or features.json not reading back
  (truncated, overwritten) is a DamagedFileError naming `directory` (the dataset's cache)."""
  try:
    return make(*args, **kwargs)
  except (json_format.ParseError, json.JSONDecodeError, UnicodeDecodeError) as e:
    raise cache.damaged(directory, is_embedded, f'its metadata does not read back '
                        f'({type(e).__name__}: {str(e).splitlines()[0][:200]})') from None


def load_sources(data_cfg, splits: Sequence[str] = SPLITS) -> dict[str, Any]:
  """Random-access sources (sequences of feature dicts) for each split; for a synthetic task
  (`synthetic/TASK`), each split's generator, whose rows are built at the length asked for;
  for a mixture (config.data.mixture), each split's `mixture.Mixture` of its sources'."""
  if mixture.is_mixture(data_cfg):
    return mixture.load(data_cfg, splits, load_sources)
  task = synthetic.task_name(data_cfg)
  if task:
    return {split: synthetic.Split(data_cfg.synthetic, task, split) for split in splits}
  if corpus.is_files(data_cfg):
    return corpus.load_sources(data_cfg, data_dir(data_cfg), splits, log)
  builder = _builder(data_cfg)
  sources = {}
  for split in splits:
    name = data_cfg.splits.get(split, split)
    try:
      sources[split] = cache.CheckedSource(tfds.data_source(
          builder.name if data_cfg.name in EMBEDDED_BUILDERS else data_cfg.name, split=name,
          data_dir=data_dir(data_cfg), builder_kwargs={'file_format': 'array_record'}),
          str(builder.data_dir), data_cfg.name in EMBEDDED_BUILDERS, name)
    except (KeyError, ValueError) as e:
      known = sorted(builder.info.splits) if hasattr(builder, 'info') else []
      if split not in SPLITS:  # A misspelt split, not a dataset without it.
        raise errors.ConfigError(
            f'{split!r} is not a split this project evaluates. Fix: some of '
            f'{", ".join(SPLITS)}' + (" (several as a tuple: --config.eval.splits=\"('validation', "
                                      "'test')\")" if ',' in split else '') + '.') from e
      raise errors.ConfigError(
          f'{data_cfg.name!r} has no split {name!r} for {split}'
          + (f' (its splits: {", ".join(known)})' if known else f' ({e})') + '. Fix: map '
          f"one of its splits to it with --config.data.splits, e.g. \"{{'{split}': "
          f"'{known[-1] if known else 'test'}'}}\".") from e
  first = sources[splits[0]][0] if len(sources[splits[0]]) else {}
  fields = text_fields(data_cfg) + ([('label_key', data_cfg.label_key)]
                                    if data_cfg.get('label_key') else [])
  for field, key in fields:
    if key not in first:
      hint = {'source_key': ' The translation config needs a parallel dataset (e.g. '
                            'bible_en_de, wmt14_translate/de-en).',
              'label_key': ' A classifier needs a dataset with labels (e.g. rotten_tomatoes, '
                           'glue/sst2).'}.get(field, '')
      fix = (f'set --config.data.{field} to one of them' if not hint else
             f'set --config.data.{field} to one of them, or use such a dataset')
      raise errors.ConfigError(
          f'config.data.{field}={key!r} is not a feature of {data_cfg.name!r} (features: '
          f'{sorted(first)}).{hint} Fix: {fix}.')
  return sources


def split_content(data_cfg, split: str) -> dict[str, str]:
  """What `split` holds, for the sources whose documents can change under the same config
  (your own files, `corpus.content`): {'' or the mixture's source name: description}. A
  dataset by name, an embedded corpus and a synthetic task are fixed by the config: none."""
  if mixture.is_mixture(data_cfg):
    return {name: text for name, entry in mixture.entries(data_cfg).items()
            for text in split_content(mixture.member_config(data_cfg, entry), split).values()}
  if corpus.is_files(data_cfg):
    return {'': corpus.content(data_cfg, data_dir(data_cfg), split)}
  return {}


def text_fields(data_cfg) -> list[tuple[str, str]]:
  """(config field, feature) pairs of the text the task reads: the LM's text, a
  translation's source and target (swapped with config.data.reverse), or a classification
  example's one or two texts."""
  if data_cfg.get('text_keys'):
    return [('text_keys', key) for key in data_cfg.text_keys]
  if data_cfg.get('source_key'):
    fields = [('source_key', data_cfg.source_key), ('target_key', data_cfg.target_key)]
    return fields[::-1] if data_cfg.get('reverse') else fields
  return [('text_key', data_cfg.text_key)]


# A mixture's sources whose rows are generated, not read from a cache.
GENERATED = (synthetic.Split, passkey_text.Split)


def token_cached(data_cfg, sources: dict, tokenizer) -> dict:
  """`sources` with each split read from the token cache, written on first use (a mixture's
  sources each in its own cache; a synthetic task's rows are generated, not cached)."""
  out = {}
  for split, source in sources.items():  # Each split of load_sources knows its identity.
    if isinstance(source, mixture.Mixture):
      out[split] = mixture.Mixture(
          {name: member if isinstance(member, GENERATED) else token_cached(
              source.configs[name], {split: member}, tokenizer)[split]
           for name, member in source.members.items()}, source.configs, source.weights)
      continue
    out[split] = tokens.cached(
        source, tokenizer, lambda record: tokens.document_ids(record, tokenizer, data_cfg.text_key),
        data_dir=data_dir(data_cfg),
        split_identity=f'{data_cfg.name}:{source.identity}:{len(source)}',
        text_key=data_cfg.text_key, log=log)
  return out


def tokenizer_path(data_cfg, builder=None) -> pathlib.Path:
  """Where the dataset's tokenizer is cached: beside the data, keyed by the dataset's name,
  config and version (a new version of the data gets a new tokenizer) and the vocabulary size.
  Without `builder`, worked out without opening or building the dataset."""
  if corpus.is_files(data_cfg):  # Keyed by the files' cache key: changed files, new pieces.
    return pathlib.Path(data_dir(data_cfg), 'tokenizers', corpus.NAME, corpus.cache_key(data_cfg),
                        _tokenizer_file(data_cfg, data_cfg.text_key))
  if builder is None:
    builder = EMBEDDED_BUILDERS.get(data_cfg.name)
    if builder is None:
      builder = tfds.builder(data_cfg.name, data_dir=data_dir(data_cfg))
  if isinstance(builder, type):  # An embedded dataset's class: one config, one version.
    config, version = None, builder.VERSION
  else:
    config, version = builder.builder_config, builder.version
  parts = [builder.name] + ([config.name] if config else [])
  keys = sorted(key for _, key in text_fields(data_cfg))  # Shared by source and target.
  return pathlib.Path(data_dir(data_cfg), 'tokenizers', *parts, str(version),
                      _tokenizer_file(data_cfg, '_'.join(keys)))


def _tokenizer_file(data_cfg, keys: str) -> str:
  """The trained tokenizer's file name: what it was trained on and its size."""
  sample = ''
  # The default sample (every document, up to tokenizer.MAX_CHARS) keeps its old name.
  default = (tokenizer_lib.EVERY_DOCUMENT, tokenizer_lib.MAX_CHARS)
  if (data_cfg.tokenizer_documents, data_cfg.tokenizer_chars) != default:
    sample = f'_d{data_cfg.tokenizer_documents}_c{data_cfg.tokenizer_chars}'
  return f'spm_{keys}_{data_cfg.vocab_size}{sample}.model'


def load_tokenizer(data_cfg, train_source) -> tokenizer_lib.Tokenizer:
  """The dataset's SentencePiece model, trained on its train split on first use (a synthetic
  task's fixed word vocabulary; bytes or a file that config.data.tokenizer names). A damaged
  cached model is named with its fix: delete it, and the next run trains it again (the same
  pieces and scores: training is deterministic). `train_source` None: the train split is
  opened only if the model must be trained; a mixture's is config.data's own source."""
  if synthetic.task_name(data_cfg):
    return synthetic.Vocabulary(data_cfg.synthetic, synthetic.task_name(data_cfg))
  given = vocabularies.given(data_cfg.tokenizer)
  if given is not None:  # Bytes, or a file: nothing to train.
    return given
  if mixture.is_mixture(data_cfg):  # config.data's own, whatever the sources read.
    data_cfg, train_source = mixture.base_config(data_cfg), None  # Opened if it must train.
  path = tokenizer_path(data_cfg, None if corpus.is_files(data_cfg) else _builder(data_cfg))
  fix = (f"delete it (rm '{path}'); the next run trains it again from the same data (a run's "
         'workdir keeps its own copy)')
  if path.exists():
    return tokenizer_lib.Tokenizer(path, fix)
  with cache.exclusive(path.with_suffix('.lock')):  # Trained once by runs started together.
    if path.exists():
      return tokenizer_lib.Tokenizer(path, fix)
    if train_source is None:
      train_source = load_sources(data_cfg, splits=('train',))['train']
    log.info('Training a SentencePiece tokenizer of %d pieces on the train split of %s '
             '(once; kept as %s).', data_cfg.vocab_size, data_cfg.name, path)
    keys = sorted(key for _, key in text_fields(data_cfg))
    texts = (tokens.as_text(record[key]) for record in _records(
        _Evenly(train_source, data_cfg.tokenizer_documents)) for key in keys)
    return tokenizer_lib.train(texts, path, data_cfg.vocab_size,
                               max_chars=data_cfg.tokenizer_chars)


class _Evenly:
  """At most `count` records of `source` (0: all), taken at even strides over the whole of it
  (a sample of a large corpus that is not just its first files)."""

  def __init__(self, source, count: int):
    self.source = source
    n = len(source)
    self.indices = range(n) if not count or count >= n else [i * n // count
                                                              for i in range(count)]

  def __len__(self):
    return len(self.indices)

  def __getitem__(self, i):
    return self.source[self.indices[i]]

  def __getitems__(self, positions, *args):
    read_many = getattr(self.source, '__getitems__', None)
    wanted = [self.indices[i] for i in positions]
    return read_many(wanted, *args) if read_many else [self.source[i] for i in wanted]


def _records(source, block: int = 1024):
  """Every record of a random-access source in order, read in blocks (one read per record:
  6x faster than indexing ArrayRecord records one by one, once per text field)."""
  read_many = getattr(source, '__getitems__', None)
  for start in range(0, len(source), block):
    indices = list(range(start, min(start + block, len(source))))
    if read_many:
      try:
        records = read_many(indices)
      except TypeError:  # TFDS's mock data (tests) takes other arguments: read one by one.
        read_many = None
    if not read_many:
      records = [source[i] for i in indices]
    yield from records


@dataclasses.dataclass(frozen=True)
class ChunkForLM(grain.experimental.FlatMapTransform):
  """Turns one token document into chunks of at most seq_len.

  The document is framed as [bos] + tokens + [eos]. With `shift` (causal LM), inputs are
  shifted right by one against targets, so each chunk predicts up to seq_len next tokens;
  without it (masked LM) a chunk is just `inputs`. Every chunk starts again at position 0.
  """
  seq_len: int
  shift: bool = True
  max_fan_out: int = 1 << 20  # Documents are never truncated.
  # The framing ids (vocabularies.framing: a pretrained tokenizer's own, or none).
  bos: tuple[int, ...] = (tokenizer_lib.BOS_ID,)
  eos: tuple[int, ...] = (tokenizer_lib.EOS_ID,)

  def flat_map(self, tokens):
    seq = np.concatenate([self.bos, tokens, self.eos]).astype(np.int32)
    if not self.shift:
      return [{'inputs': seq[s:s + self.seq_len]} for s in range(0, len(seq), self.seq_len)]
    inputs, targets = seq[:-1], seq[1:]  # Equal lengths: one target per input.
    return [{'inputs': inputs[s:s + self.seq_len], 'targets': targets[s:s + self.seq_len]}
            for s in range(0, len(inputs), self.seq_len)]


@dataclasses.dataclass(frozen=True)
class SlidingWindowsForLM(grain.experimental.FlatMapTransform):
  """One token document as overlapping causal-LM windows of at most seq_len, one every
  `stride` tokens, for evaluation: each target is scored (`scored` 1) in exactly one window,
  the first window's all of them and every later window's last `stride`, so that a scored
  target has at least seq_len - stride tokens of context (or all of the document before it).
  The document is framed as ChunkForLM frames it."""
  seq_len: int
  stride: int
  max_fan_out: int = 1 << 20
  bos: tuple[int, ...] = (tokenizer_lib.BOS_ID,)
  eos: tuple[int, ...] = (tokenizer_lib.EOS_ID,)

  def flat_map(self, tokens):
    seq = np.concatenate([self.bos, tokens, self.eos]).astype(np.int32)
    inputs, targets = seq[:-1], seq[1:]
    n, windows, end = len(inputs), [], self.seq_len
    first_scored = 0
    while True:
      start = max(0, end - self.seq_len)
      scored = (np.arange(start, min(end, n)) >= first_scored).astype(np.int32)
      windows.append({'inputs': inputs[start:end], 'targets': targets[start:end],
                      'scored': scored})
      if end >= n:
        return windows
      first_scored, end = end, end + self.stride


def lm_dataset(source, tokenizer, *, text_key: str, seq_len: int, batch_size: int,
               shuffle: bool, seed: int = 0, repeat: bool = False, shard_index: int = 0,
               shard_count: int = 1, shuffle_window: int = 0,
               shift: bool = True, stride: int = 0) -> grain.IterDataset:
  """Packed LM batches: dicts of int32 [batch_size, seq_len] arrays `inputs`, `targets`,
  `inputs_segment_ids`, `inputs_positions` (and the same for targets). With shift=False
  (masked LM), only the `inputs` features. With a `stride` (causal LM evaluation), the
  documents' overlapping windows of SlidingWindowsForLM, with their `scored` feature. A
  `mixture.Mixture` source gives each of its sources' packed rows (each with its own shuffle)
  interleaved by weight."""
  rows = functools.partial(
      _packed_rows, tokenizer=tokenizer, seq_len=seq_len, batch_size=batch_size,
      shuffle=shuffle, repeat=repeat, shard_index=shard_index, shard_count=shard_count,
      shuffle_window=shuffle_window, shift=shift, stride=stride)
  if isinstance(source, mixture.Mixture):
    it = mixture.mix({name: rows(member, text_key=source.configs[name].text_key,
                                 seed=mixture.member_seed(seed, name))
                      for name, member in source.members.items()}, source.weights)
  else:
    it = rows(source, text_key=text_key, seed=seed)
  return it.batch(batch_size, drop_remainder=repeat)


def _packed_rows(source, *, tokenizer, text_key: str, seq_len: int, batch_size: int,
                 shuffle: bool, seed: int, repeat: bool, shard_index: int, shard_count: int,
                 shuffle_window: int, shift: bool, stride: int = 0) -> grain.IterDataset:
  """lm_dataset's rows before batching (a synthetic task's split: its rows as text; passkey
  rows in text: each row one document of its ids)."""
  if isinstance(source, synthetic.Split):
    source = synthetic.TextRows(source, seq_len, seed, text_key)
  elif isinstance(source, passkey_text.Split):
    source = passkey_text.Documents(ruler_text.rows(source, tokenizer, seq_len, seed))
  ds = grain.MapDataset.source(source)[shard_index::shard_count]
  if shuffle:
    ds = ds.shuffle(seed=seed)
  if repeat:
    ds = ds.repeat(None)  # After shuffle: every epoch is reshuffled.
  ds = ds.map(lambda ex: tokens.document_ids(ex, tokenizer, text_key))
  bos, eos = (tuple(ids) for ids in vocabularies.framing(tokenizer))
  chunk = (SlidingWindowsForLM(seq_len, stride, bos=bos, eos=eos) if stride else
           ChunkForLM(seq_len, shift, bos=bos, eos=eos))
  it = grain.experimental.FlatMapIterDataset(ds.to_iter_dataset(), chunk)
  if shuffle and shuffle_window > 1:
    it = grain.experimental.WindowShuffleIterDataset(it, window_size=shuffle_window, seed=seed)
  lengths = {'inputs': seq_len, 'targets': seq_len} if shift else {'inputs': seq_len}
  if stride:
    lengths['scored'] = seq_len
  # More bins than rows per batch: a document's short last chunk finds a partner more often.
  it = grain.experimental.FirstFitPackIterDataset(
      it, length_struct=lengths, num_packing_bins=PACKING_BINS_PER_ROW * batch_size,
      shuffle_bins=False)
  if stride:  # The packer numbers `scored` like a feature of its own: the targets' do.
    it = it.map(lambda row: {k: v for k, v in row.items()
                             if k not in ('scored_segment_ids', 'scored_positions')})
  return it


@dataclasses.dataclass(frozen=True)
class PairForTranslation(grain.transforms.Map):
  """Tokenizes a (source, target) pair: `inputs` = source + [eos], `decoder_inputs` =
  [bos] + target, `targets` = target + [eos], each cut to max_len (None for an empty side)."""
  tokenizer: Any
  source_key: str
  target_key: str
  max_len: int

  def map(self, example):
    src = self.tokenizer.encode(tokens.as_text(example[self.source_key]))[:self.max_len - 1]
    tgt = self.tokenizer.encode(tokens.as_text(example[self.target_key]))[:self.max_len - 1]
    if not len(src) or not len(tgt):
      return None
    eos, bos = [tokenizer_lib.EOS_ID], [tokenizer_lib.BOS_ID]
    as_ids = lambda *parts: np.concatenate(parts).astype(np.int32)
    return {'inputs': as_ids(src, eos), 'decoder_inputs': as_ids(bos, tgt),
            'targets': as_ids(tgt, eos)}


def translation_dataset(source, tokenizer, *, source_key: str, target_key: str, max_len: int,
                        batch_size: int, shuffle: bool, seed: int = 0, repeat: bool = False,
                        shard_index: int = 0, shard_count: int = 1) -> grain.IterDataset:
  """Packed translation batches: `inputs` (source) with its own `inputs_segment_ids` and
  `inputs_positions`, and `decoder_inputs`/`targets` with `targets_segment_ids` and
  `targets_positions`; the k-th pair of a row has segment id k on both sides. Pairs with an
  empty side are dropped; longer sentences are cut to max_len tokens."""
  ds = grain.MapDataset.source(source)[shard_index::shard_count]
  if shuffle:
    ds = ds.shuffle(seed=seed)
  if repeat:
    ds = ds.repeat(None)
  ds = ds.map(PairForTranslation(tokenizer, source_key, target_key, max_len))
  ds = ds.filter(lambda ex: ex is not None)
  it = grain.experimental.FirstFitPackIterDataset(
      ds.to_iter_dataset(),
      length_struct={'inputs': max_len, 'decoder_inputs': max_len, 'targets': max_len},
      num_packing_bins=PACKING_BINS_PER_ROW * batch_size, shuffle_bins=False)
  return it.batch(batch_size, drop_remainder=repeat)


@dataclasses.dataclass(frozen=True)
class EncodeForClassification(grain.transforms.Map):
  """One example per row: [bos] text [eos] (or [bos] a [eos] b [eos] for a sentence pair),
  token types 0 for the first text and 1 for the second, padded to max_len; the longer text is
  cut first when the pair does not fit. Labels are checked against the task."""
  tokenizer: Any
  text_keys: tuple[str, ...]
  label_key: str
  max_len: int
  num_classes: int  # 1: regression.
  split: str = ''

  def map(self, example):
    texts = [self.tokenizer.encode(tokens.as_text(example[k])) for k in self.text_keys]
    budget = self.max_len - 1 - len(texts)
    while sum(map(len, texts)) > budget:
      longest = max(range(len(texts)), key=lambda i: len(texts[i]))
      texts[longest] = texts[longest][:-1]
    ids, types = [tokenizer_lib.BOS_ID], [0]
    for i, text in enumerate(texts):
      part = list(text) + [tokenizer_lib.EOS_ID]
      ids += part
      types += [i] * len(part)
    pad = self.max_len - len(ids)
    label = example[self.label_key]
    if self.num_classes == 1:
      label = np.float32(label)
    else:
      label = int(label)
      if not 0 <= label < self.num_classes and label != -1:  # -1: hidden (GLUE test sets).
        raise errors.ConfigError(
            f'{self.split or "an"} example has {self.label_key}={label}, outside [0, '
            f'config.model.num_classes={self.num_classes}). Fix: set --config.model.num_classes '
            'to the number of classes of this dataset.')
      label = np.int32(label)
    as_row = lambda values: np.asarray(values + [0] * pad, np.int32)
    return {'inputs': as_row(ids), 'inputs_positions': as_row(list(range(len(ids)))),
            'inputs_segment_ids': as_row([1] * len(ids)), 'token_types': as_row(types),
            'label': label, 'weight': np.float32(1.0)}


def classification_dataset(source, tokenizer, *, text_keys, label_key: str, max_len: int,
                           num_classes: int, batch_size: int, shuffle: bool, seed: int = 0,
                           repeat: bool = False, shard_index: int = 0, shard_count: int = 1,
                           split: str = '') -> grain.IterDataset:
  """Batches of single examples: int32 [batch, max_len] `inputs`, `inputs_positions`,
  `inputs_segment_ids` (1 on tokens, 0 on padding), `token_types`; [batch] `label` (int32, or
  float32 for regression) and `weight` (1.0; 0.0 on padding rows added by `pad_batch`)."""
  ds = grain.MapDataset.source(source)[shard_index::shard_count]
  if shuffle:
    ds = ds.shuffle(seed=seed)
  if repeat:
    ds = ds.repeat(None)
  ds = ds.map(EncodeForClassification(tokenizer, tuple(text_keys), label_key, max_len,
                                      num_classes, split))
  return ds.to_iter_dataset().batch(batch_size, drop_remainder=repeat)


def pad_batch(batch: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
  """Pads a final short eval batch with padding rows (segment id 0) to a fixed shape."""
  n = next(iter(batch.values())).shape[0]
  if n > batch_size:
    raise ValueError(f'a batch of {n} rows cannot be padded to {batch_size}.')
  if n == batch_size:
    return batch
  return {k: np.concatenate([v, np.zeros((batch_size - n,) + v.shape[1:], v.dtype)])
          for k, v in batch.items()}


def labels(source, label_key: str, limit: int = 100_000) -> np.ndarray:
  """The labels of the first `limit` examples (for checks before training)."""
  return np.asarray([source[i][label_key] for i in range(min(len(source), limit))])
