"""Datasets by name and the grain pipeline that turns documents into packed LM batches.

`load_sources` opens any TFDS dataset in the ArrayRecord format (building the embedded ones on
first use) and returns random-access sources per split. `lm_dataset` then: shards documents across
data-parallel processes, shuffles them with a seed, tokenizes, cuts long documents into chunks of
at most `seq_len` predictions, packs several chunks into one row (positions restart at 0 and
segment ids count 1..n per row; 0 is padding) and batches.
"""

import dataclasses
import os
import pathlib
from typing import Any, Sequence

import grain
import numpy as np
import tensorflow_datasets as tfds

from roformer.data import bible
from roformer.data import embedded
from roformer.data import shakespeare
from roformer.data import tokenizer as tokenizer_lib

from roformer import errors

# Datasets defined in this project, built locally from pip-installed corpora.
EMBEDDED_BUILDERS = {'shakespeare': shakespeare.Shakespeare, 'bible_en_de': bible.BibleEnDe}
SPLITS = ('train', 'validation', 'test')
PACKING_BINS_PER_ROW = 4


def default_data_dir() -> str:
  return os.environ.get('ROFORMER_DATA_DIR',
                        os.path.join(os.path.expanduser('~'), '.cache', 'roformer', 'tfds'))


def data_dir(data_cfg) -> str:
  return os.path.abspath(os.path.expanduser(data_cfg.data_dir or default_data_dir()))


def _builder(data_cfg):
  name, ddir = data_cfg.name, data_dir(data_cfg)
  if name in EMBEDDED_BUILDERS:
    builder = EMBEDDED_BUILDERS[name](data_dir=ddir, file_format='array_record')
    if not builder.is_prepared():
      builder.download_and_prepare()
    return builder
  try:
    return tfds.builder(name, data_dir=ddir, file_format='array_record')
  except (tfds.core.registered.DatasetNotFoundError, ValueError) as e:
    raise errors.ConfigError(
        f'config.data.name={name!r} is not an embedded dataset ({sorted(EMBEDDED_BUILDERS)}) '
        f'nor a TFDS dataset ({e}). Fix: pick one of those names.') from e


def load_sources(data_cfg, splits: Sequence[str] = SPLITS) -> dict[str, Any]:
  """Random-access sources (sequences of feature dicts) for each split."""
  builder = _builder(data_cfg)
  sources = {}
  for split in splits:
    name = data_cfg.splits.get(split, split)
    try:
      sources[split] = tfds.data_source(
          builder.name if data_cfg.name in EMBEDDED_BUILDERS else data_cfg.name, split=name,
          data_dir=data_dir(data_cfg), builder_kwargs={'file_format': 'array_record'})
    except (KeyError, ValueError) as e:
      raise errors.ConfigError(
          f'{data_cfg.name!r} has no split {name!r} for {split} ({e}). Fix: map it with '
          f"--config.data.splits, e.g. \"{{'{split}': 'test'}}\".") from e
  first = sources[splits[0]][0] if len(sources[splits[0]]) else {}
  if data_cfg.text_key not in first:
    raise errors.ConfigError(
        f'config.data.text_key={data_cfg.text_key!r} is not a feature of {data_cfg.name!r} '
        f'(features: {sorted(first)}). Fix: set --config.data.text_key to its text feature.')
  return sources


def as_text(value) -> str:
  """Real TFDS data gives bytes, mock data gives str: normalise to str."""
  return value.decode('utf-8') if isinstance(value, (bytes, np.bytes_)) else str(value)


def load_tokenizer(data_cfg, train_source) -> tokenizer_lib.Tokenizer:
  """The dataset's SentencePiece model, trained on its train split on first use."""
  # Beside the data, keyed by the dataset's name, config and version: a new version of the data
  # gets a new tokenizer.
  builder = _builder(data_cfg)
  parts = [builder.name] + ([builder.builder_config.name] if builder.builder_config else [])
  path = pathlib.Path(data_dir(data_cfg), 'tokenizers', *parts, str(builder.version),
                      f'spm_{data_cfg.text_key}_{data_cfg.vocab_size}.model')
  if path.exists():
    return tokenizer_lib.Tokenizer(path)
  texts = (as_text(train_source[i][data_cfg.text_key]) for i in range(len(train_source)))
  return tokenizer_lib.train(texts, path, data_cfg.vocab_size)


@dataclasses.dataclass(frozen=True)
class ChunkForLM(grain.experimental.FlatMapTransform):
  """Turns one token document into (inputs, targets) chunks of at most seq_len.

  The document is framed as [bos] + tokens + [eos]; inputs are shifted right by one, so each
  chunk predicts up to seq_len next tokens. Every chunk starts again at position 0.
  """
  seq_len: int
  max_fan_out: int = 1 << 20  # Documents are never truncated.

  def flat_map(self, tokens):
    seq = np.concatenate([[tokenizer_lib.BOS_ID], tokens, [tokenizer_lib.EOS_ID]]).astype(np.int32)
    inputs, targets = seq[:-1], seq[1:]  # Equal lengths: one target per input.
    return [{'inputs': inputs[s:s + self.seq_len], 'targets': targets[s:s + self.seq_len]}
            for s in range(0, len(inputs), self.seq_len)]


def lm_dataset(source, tokenizer, *, text_key: str, seq_len: int, batch_size: int,
               shuffle: bool, seed: int = 0, repeat: bool = False, shard_index: int = 0,
               shard_count: int = 1, shuffle_window: int = 0) -> grain.IterDataset:
  """Packed LM batches: dicts of int32 [batch_size, seq_len] arrays `inputs`, `targets`,
  `inputs_segment_ids`, `inputs_positions` (and the same for targets)."""
  ds = grain.MapDataset.source(source)[shard_index::shard_count]
  if shuffle:
    ds = ds.shuffle(seed=seed)
  if repeat:
    ds = ds.repeat(None)  # After shuffle: every epoch is reshuffled.
  ds = ds.map(lambda ex: tokenizer.encode(as_text(ex[text_key])))
  it = grain.experimental.FlatMapIterDataset(ds.to_iter_dataset(), ChunkForLM(seq_len))
  if shuffle and shuffle_window > 1:
    it = grain.experimental.WindowShuffleIterDataset(it, window_size=shuffle_window, seed=seed)
  # More bins than rows per batch: a document's short last chunk finds a partner more often.
  it = grain.experimental.FirstFitPackIterDataset(
      it, length_struct={'inputs': seq_len, 'targets': seq_len},
      num_packing_bins=PACKING_BINS_PER_ROW * batch_size, shuffle_bins=False)
  return it.batch(batch_size, drop_remainder=repeat)


def pad_batch(batch: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
  """Pads a final short eval batch with padding rows (segment id 0) to a fixed shape."""
  n = next(iter(batch.values())).shape[0]
  if n > batch_size:
    raise ValueError(f'a batch of {n} rows cannot be padded to {batch_size}.')
  if n == batch_size:
    return batch
  return {k: np.concatenate([v, np.zeros((batch_size - n,) + v.shape[1:], v.dtype)])
          for k, v in batch.items()}
