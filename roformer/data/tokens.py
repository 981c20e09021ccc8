"""The token cache (`config.data.token_cache`): a text split tokenized once, its documents'
ids stored in the smallest unsigned integer type the vocabulary fits, so that training and
evaluation read ids instead of encoding the text again every epoch.

Each split is one ArrayRecord file under DATA_DIR/tokens/KEY/, where KEY hashes what the ids
depend on: the split's identity (the dataset's name, its cache directory, the split's name and
length) and the tokenizer's (its kind and the bytes of its file, or the pipeline a Hugging Face
tokenizer encodes with). It is written as
KEY.partial/ and renamed at the end under a lock, as the converted corpus is
(roformer/data/corpus.py): a cut write leaves nothing to read, and the next run writes it
again. A record holds one document's ids; the source hands them back as int32 under TOKEN_IDS,
which the pipeline reads in place of the text.
"""

import hashlib
import json
import os
import shutil
import time

import numpy as np
from array_record.python import array_record_module

from roformer import errors
from roformer.data import cache

TOKEN_IDS = 'token_ids'  # The feature of a cached document: its ids, int32.
_LAYOUT = 1


def as_text(value) -> str:
  """Real TFDS data gives bytes, mock data gives str: normalise to str."""
  return value.decode('utf-8') if isinstance(value, (bytes, np.bytes_)) else str(value)


def document_ids(example, tokenizer, text_key: str) -> np.ndarray:
  """A document's token ids: read from the token cache (this module) when the source holds
  them, else encoded from its text."""
  ids = example.get(TOKEN_IDS) if isinstance(example, dict) else None
  return ids if ids is not None else tokenizer.encode(as_text(example[text_key]))


def id_dtype(vocab_size: int) -> np.dtype:
  """The smallest unsigned integer type that holds ids 0 .. vocab_size - 1."""
  for dtype in (np.uint8, np.uint16, np.uint32):
    if vocab_size <= np.iinfo(dtype).max + 1:
      return np.dtype(dtype)
  raise errors.ConfigError(f'a vocabulary of {vocab_size:,} ids does not fit the token cache\'s '
                           'largest type (uint32). Fix: set --config.data.token_cache=False.')


def tokenizer_identity(tokenizer) -> str:
  """What the ids depend on in the tokenizer: its class, and the `tokenizers` pipeline it
  encodes with (a Hugging Face tokenizer's, as read: its truncation and padding off) or else its
  file's bytes if it has one."""
  digest = hashlib.sha256(type(tokenizer).__name__.encode())
  if hasattr(tokenizer, 'tok'):  # A directory (hf:DIR) or a file whose settings are not all used.
    digest.update(tokenizer.tok.to_str().encode('utf-8'))
  elif tokenizer.path:
    with open(tokenizer.path, 'rb') as f:
      for block in iter(lambda: f.read(1 << 20), b''):
        digest.update(block)
  digest.update(str(tokenizer.vocab_size).encode())
  return digest.hexdigest()


def key(split_identity: str, tokenizer, text_key: str) -> str:
  text = json.dumps([_LAYOUT, split_identity, tokenizer_identity(tokenizer), text_key])
  return hashlib.sha256(text.encode('utf-8')).hexdigest()[:20]


def _write(source, encode, path: str, dtype: np.dtype, block: int = 512) -> dict:
  """Every document of `source`, encoded, as one record of `dtype` ids each."""
  writer = array_record_module.ArrayRecordWriter(path, 'group_size:1')
  documents = tokens = 0
  try:
    read_many = getattr(source, '__getitems__', None)
    for start in range(0, len(source), block):
      indices = list(range(start, min(start + block, len(source))))
      records = read_many(indices) if read_many else [source[i] for i in indices]
      for record in records:
        ids = np.asarray(encode(record))
        writer.write(ids.astype(dtype).tobytes())
        documents += 1
        tokens += ids.size
  finally:
    writer.close()
  return {'documents': documents, 'tokens': tokens}


class Source(cache.RecordFile):
  """A split of the token cache: random access to {TOKEN_IDS: int32 ids of document i}."""

  def __init__(self, path: str, dtype: np.dtype):
    self.dtype, directory = np.dtype(dtype), os.path.dirname(path)
    super().__init__(
        path, lambda record: {TOKEN_IDS: np.frombuffer(record, self.dtype).astype(np.int32)},
        lambda reason: errors.DamagedFileError(
            f'the token cache {directory} is damaged: {path} cannot be read ({reason}). Fix: '
            f"delete it (rm -rf '{directory}'); the next run tokenizes the split again."))


def cached(source, tokenizer, encode, *, data_dir: str, split_identity: str, text_key: str,
           log=None) -> Source:
  """The token-cache split of `source` (written now if no run has tokenized this split with
  this tokenizer): `encode(record)` gives a record's ids."""
  dtype = id_dtype(tokenizer.vocab_size)
  k = key(split_identity, tokenizer, text_key)
  root = os.path.join(data_dir, 'tokens')
  directory = os.path.join(root, k)
  info_path = os.path.join(directory, 'info.json')
  if not os.path.exists(info_path):
    with cache.exclusive(os.path.join(root, f'.{k}.lock')):
      if not os.path.exists(info_path):
        partial = directory + '.partial'
        shutil.rmtree(partial, ignore_errors=True)  # A write cut short: start again.
        try:
          os.makedirs(partial)
          started = time.time()
          info = _write(source, encode, os.path.join(partial, 'ids.array_record'), dtype)
          info.update(split=split_identity, dtype=dtype.name, vocab_size=tokenizer.vocab_size,
                      seconds=round(time.time() - started, 3))
          with open(os.path.join(partial, 'info.json'), 'w', encoding='utf-8') as f:
            json.dump(info, f, indent=1)
          shutil.rmtree(directory, ignore_errors=True)  # One left without its info.json.
          os.replace(partial, directory)
        except BaseException:
          shutil.rmtree(partial, ignore_errors=True)
          raise
        if log:
          log.info('Tokenized %s once into the token cache: %d documents, %d tokens (%s) in '
                   '%.1f s.', split_identity, info['documents'], info['tokens'], dtype.name,
                   info['seconds'])
  return Source(os.path.join(directory, 'ids.array_record'), dtype)
