"""Tokenizers besides the SentencePiece model trained on the data (roformer/data/tokenizer.py),
chosen by `config.data.tokenizer`:

  'sentencepiece'     a SentencePiece model trained on the train split (the default)
  'bytes'             UTF-8 bytes: 256 ids after the specials, nothing to train or keep
  PATH.model          an existing SentencePiece model
  PATH.json           a Hugging Face `tokenizer.json` (the `tokenizers` package)

Every tokenizer keeps the project's special ids (0 pad, 1 eos, 2 bos, 3 unk, 4 newline), which
the data pipeline, the masked LM and decoding rely on: a tokenizer from elsewhere has its own
ids shifted up by NUM_SPECIAL, so its id n becomes n + 5 and nothing of its own collides with
them. Its own special tokens (a `<s>`, an `[UNK]`) stay ordinary ids: the pipeline frames
documents with the project's.
"""

import os
import shutil

import numpy as np

from roformer import errors
from roformer.data import tokenizer as tokenizer_lib

TRAINED = 'sentencepiece'
BYTES = 'bytes'
_SHIFT = tokenizer_lib.NUM_SPECIAL


def kind(name: str) -> str:
  """'sentencepiece', 'bytes', 'sentencepiece_file' or 'huggingface' for config.data.tokenizer;
  anything else is an error naming the field."""
  if name in (TRAINED, BYTES):
    return name
  if name.endswith('.model'):
    return 'sentencepiece_file'
  if name.endswith('.json'):
    return 'huggingface'
  raise errors.ConfigError(
      f'config.data.tokenizer={name!r} is not a tokenizer. Fix: {TRAINED!r} (trained on the '
      f"data), {BYTES!r}, a SentencePiece model (PATH.model) or a Hugging Face tokenizer.json "
      '(PATH.json).')


def _shift(ids) -> np.ndarray:
  return np.asarray(ids, np.int32) + _SHIFT


def _unshift(ids) -> list[int]:
  return [int(i) - _SHIFT for i in ids if int(i) >= _SHIFT]


class Bytes:
  """UTF-8 bytes, each its own id (byte b is b + 5): 261 ids, no training; the usual vocabulary
  of length-generalization work, where a token is a character of ASCII text. A workdir keeps a
  one-line marker file, so that a run fine-tuned from this one finds its vocabulary there."""
  path = None
  workdir_file = 'tokenizer.bytes'
  vocab_size = 256 + _SHIFT

  def __init__(self, path: str | None = None, fix: str = ''):
    del path, fix  # The marker holds nothing to read.

  def encode(self, text: str) -> np.ndarray:
    return _shift(np.frombuffer(text.encode('utf-8', 'surrogatepass'), np.uint8))

  def decode(self, ids) -> str:
    return bytes(_unshift(ids)).decode('utf-8', 'replace')


def _unreadable(path: str, what: str, e: BaseException, fix: str) -> errors.ConfigError:
  reason = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
  cls = errors.DamagedFileError if fix else errors.ConfigError
  return cls(f'{path} is not a readable {what} ({reason}). Fix: '
             f'{fix or "point config.data.tokenizer at one"}.')


class SentencePieceFile:
  """An existing SentencePiece model: lines encoded one by one with the newline id between
  them (SentencePiece's default normalisation drops newlines), as the trained one does."""
  workdir_file = 'tokenizer.sentencepiece.model'  # Not tokenizer.model: the trained kind's.

  def __init__(self, path: str, fix: str = ''):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    self.path = str(path)
    if not os.path.isfile(self.path):
      raise errors.ConfigError(f'config.data.tokenizer: {self.path} does not exist. Fix: give '
                               'the path of a SentencePiece .model file.')
    try:
      self.sp = spm.SentencePieceProcessor(model_file=self.path)
    except (RuntimeError, OSError) as e:
      raise _unreadable(self.path, 'SentencePiece model', e, fix) from None
    self.vocab_size = self.sp.get_piece_size() + _SHIFT

  def encode(self, text: str) -> np.ndarray:
    ids = []
    for i, line in enumerate(self.sp.encode(text.split('\n'))):
      if i:
        ids.append(tokenizer_lib.NEWLINE_ID - _SHIFT)
      ids.extend(line)
    return _shift(ids)

  def decode(self, ids) -> str:
    lines, line = [], []
    for i in [int(i) for i in ids] + [tokenizer_lib.NEWLINE_ID]:
      if i == tokenizer_lib.NEWLINE_ID:
        lines.append(self.sp.decode(line))
        line = []
      elif i >= _SHIFT:
        line.append(i - _SHIFT)
    return '\n'.join(lines)


class HuggingFace:
  """A Hugging Face `tokenizer.json` (any model, any pre-tokenizer), read by the `tokenizers`
  package; no special tokens are added (the pipeline adds the project's)."""
  workdir_file = 'tokenizer.json'

  def __init__(self, path: str, fix: str = ''):
    import tokenizers  # pylint: disable=g-import-not-at-top
    self.path = str(path)
    if not os.path.isfile(self.path):
      raise errors.ConfigError(f'config.data.tokenizer: {self.path} does not exist. Fix: give '
                               "the path of a Hugging Face tokenizer.json.")
    try:
      self.tok = tokenizers.Tokenizer.from_file(self.path)
    except Exception as e:  # pylint: disable=broad-except  # The package raises plain Exception.
      raise _unreadable(self.path, 'Hugging Face tokenizer.json', e, fix) from None
    self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True) + _SHIFT

  def encode(self, text: str) -> np.ndarray:
    return _shift(self.tok.encode(text, add_special_tokens=False).ids)

  def decode(self, ids) -> str:
    return self.tok.decode(_unshift(ids), skip_special_tokens=False)


WORKDIR_FILES = ('tokenizer.model', 'tokenizer.sentencepiece.model', 'tokenizer.json',
                 'tokenizer.bytes')


def kept(directory: str):
  """The path of the tokenizer a run keeps in `directory` and its class ((None, None) if none):
  the file's name says which kind it is."""
  for name, cls in ((tokenizer_lib.Tokenizer.workdir_file, tokenizer_lib.Tokenizer),
                    (SentencePieceFile.workdir_file, SentencePieceFile),
                    (HuggingFace.workdir_file, HuggingFace), (Bytes.workdir_file, Bytes)):
    path = os.path.join(directory, name) if directory else ''
    if path and os.path.exists(path):
      return path, cls
  return None, None


def given(name: str):
  """The tokenizer config.data.tokenizer names without training (bytes, or a file), else None."""
  k = kind(name)
  if k == TRAINED:
    return None
  if k == BYTES:
    return Bytes()
  path = os.path.abspath(os.path.expanduser(name))
  return (SentencePieceFile if k == 'sentencepiece_file' else HuggingFace)(path)


def keep(tokenizer, workdir: str, resumed: bool) -> None:
  """Copies the tokenizer's file into the workdir under its kind's name, atomically; a new run
  replaces any copy left by an earlier attempt that saved no checkpoint. A vocabulary that
  follows from the config alone (bytes, the synthetic tasks') has no file to keep."""
  if not resumed:  # An earlier attempt's file of another kind would be read in its place.
    for name in WORKDIR_FILES:
      if name != tokenizer.workdir_file and os.path.exists(os.path.join(workdir, name)):
        os.remove(os.path.join(workdir, name))
  if tokenizer.workdir_file is None:  # A synthetic task's: it follows from the config.
    return
  path = os.path.join(workdir, tokenizer.workdir_file)
  if not resumed or not os.path.exists(path):
    if tokenizer.path is None:
      with open(path + '.tmp', 'w', encoding='utf-8') as f:
        f.write('UTF-8 bytes: byte b is id b + 5 (roformer/data/vocabularies.py).\n')
    else:
      shutil.copyfile(tokenizer.path, path + '.tmp')
    os.replace(path + '.tmp', path)
