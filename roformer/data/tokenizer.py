"""SentencePiece tokenizer trained on a dataset's train split and cached beside the data.

Text is encoded line by line with an explicit newline piece between lines, so verse and speaker
lines survive a round trip. Ids: 0 pad, 1 eos, 2 bos, 3 unk, 4 newline.
"""

import os
import pathlib
import tempfile
from typing import Iterable

import numpy as np
import sentencepiece as spm

from roformer import errors
from roformer import files
from roformer import killpoints

PAD_ID, EOS_ID, BOS_ID, UNK_ID, NEWLINE_ID = 0, 1, 2, 3, 4
# The characters of its training text a tokenizer reads by default (config.data.tokenizer_chars).
MAX_CHARS = 20_000_000
# The documents it samples them from by default (config.data.tokenizer_documents): all of them.
EVERY_DOCUMENT = 0
NUM_SPECIAL = 5  # Ids below this are never drawn as BERT's random replacement tokens.
NEWLINE_PIECE = '<n>'


class Tokenizer:
  """Thin wrapper over a SentencePiece model with the project's special ids."""
  workdir_file = 'tokenizer.model'  # A run's copy (roformer/workdir.py).

  def __init__(self, model_path: str | os.PathLike,
               fix: str = 'delete it so that it is trained again'):
    """Opens the SentencePiece model at `model_path`. One that does not read back (truncated,
    overwritten, empty) or was not trained here is a DamagedFileError naming it and `fix`."""
    self.path = str(model_path)
    try:
      self.sp = spm.SentencePieceProcessor(model_file=self.path)
    except (RuntimeError, OSError) as e:
      reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise errors.DamagedFileError(f'{self.path} is not a readable SentencePiece model '
                                    f'({reason}). Fix: {fix}.') from None
    if self.sp.piece_to_id(NEWLINE_PIECE) != NEWLINE_ID or self.sp.pad_id() != PAD_ID:
      raise errors.DamagedFileError(f'{self.path} was not trained by roformer.data.tokenizer '
                                    f'(special ids differ). Fix: {fix}.')

  @property
  def vocab_size(self) -> int:
    return self.sp.get_piece_size()

  def encode(self, text: str) -> np.ndarray:
    """Token ids (int32) of text, newlines kept as NEWLINE_ID; no bos/eos added."""
    return encode_lines(self.sp, text)

  def decode(self, ids) -> str:
    return decode_lines(self.sp, ids)


def encode_lines(sp, text: str, shift: int = 0) -> np.ndarray:
  """SentencePiece `sp`'s ids (+ shift) of each line of `text`, NEWLINE_ID between lines:
  SentencePiece's normalisation would drop the newlines."""
  ids = []
  for i, line_ids in enumerate(sp.encode(text.split('\n'))):
    if i:
      ids.append(NEWLINE_ID - shift)
    ids.extend(line_ids)
  return np.asarray(ids, np.int32) + shift


def decode_lines(sp, ids, shift: int = 0) -> str:
  """The text of `encode_lines`' ids: pad, bos and eos (and, shifted, every id below `shift`:
  the project's specials before the model's own) dropped, lines joined by newlines."""
  lines, line = [], []
  for i in [int(i) for i in ids] + [NEWLINE_ID]:
    if i == NEWLINE_ID:
      lines.append(sp.decode(line))
      line = []
    elif i not in (PAD_ID, EOS_ID, BOS_ID) and i >= shift:
      line.append(i - shift)
  return '\n'.join(lines)


def train(texts: Iterable[str], model_path: str | os.PathLike, vocab_size: int,
          max_chars: int = MAX_CHARS) -> Tokenizer:
  """Trains a unigram SentencePiece model on the lines of `texts` (up to max_chars characters),
  writes it atomically to `model_path` and returns it. Deterministic for the same input."""
  model_path = pathlib.Path(model_path)
  model_path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=model_path.parent) as tmp:
    corpus = pathlib.Path(tmp) / 'corpus.txt'
    chars = 0
    with corpus.open('w', encoding='utf-8') as f:
      for text in texts:
        for line in text.split('\n'):
          if line.strip():
            f.write(line.strip() + '\n')
            chars += len(line)
        if chars >= max_chars:
          break
    if chars == 0:
      raise errors.ConfigError('cannot train a tokenizer on an empty train split. Fix: check '
                               'config.data.name, config.data.text_key and config.data.splits.')
    prefix = pathlib.Path(tmp) / 'spm'
    killpoints.reach('tokenizer.train')
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=vocab_size,
        model_type='unigram', character_coverage=1.0, pad_id=PAD_ID, eos_id=EOS_ID,
        bos_id=BOS_ID, unk_id=UNK_ID, user_defined_symbols=[NEWLINE_PIECE],
        input_sentence_size=2_000_000, shuffle_input_sentence=False, num_threads=2,
        hard_vocab_limit=False, minloglevel=2)
    killpoints.reach('tokenizer.written')
    files.sync_tree(f'{prefix}.model')
    files.durable_replace(f'{prefix}.model', model_path)  # Readers never see half a file.
  return Tokenizer(model_path)
