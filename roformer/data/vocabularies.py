"""Tokenizers besides the SentencePiece model trained on the data (roformer/data/tokenizer.py),
chosen by `config.data.tokenizer`:

  'sentencepiece'     a SentencePiece model trained on the train split (the default)
  'bytes'             UTF-8 bytes: 256 ids after the specials, nothing to train or keep
  PATH.model          an existing SentencePiece model
  PATH.json           a Hugging Face `tokenizer.json` (the `tokenizers` package)
  hf:DIR              a pretrained model's own tokenizer (DIR's tokenizer.json and
                      tokenizer_config.json), its ids unshifted: what an imported checkpoint
                      reads (scripts/convert_hf.py)

The first four keep the project's special ids (0 pad, 1 eos, 2 bos, 3 unk, 4 newline), which
the data pipeline, the masked LM and decoding rely on: a tokenizer from elsewhere has its own
ids shifted up by NUM_SPECIAL, so its id n becomes n + 5 and nothing of its own collides with
them. Its own special tokens (a `<s>`, an `[UNK]`) stay ordinary ids: the pipeline frames
documents with the project's. A pretrained tokenizer keeps its ids, since they index a trained
embedding, and frames documents with its own bos and eos (`framing`).
"""

import json
import os
import shutil

import numpy as np

from roformer import errors
from roformer import files
from roformer.data import cache
from roformer.data import tokenizer as tokenizer_lib

TRAINED = 'sentencepiece'
BYTES = 'bytes'
_SHIFT = tokenizer_lib.NUM_SPECIAL


def kind(name: str) -> str:
  """'sentencepiece', 'bytes', 'sentencepiece_file' or 'huggingface' for config.data.tokenizer;
  anything else is an error naming the field."""
  if name in (TRAINED, BYTES):
    return name
  if name.startswith(PRETRAINED_PREFIX):
    return 'pretrained'
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
    """The text of `ids`; the specials, and ids past the 256 bytes, stand for no byte."""
    return bytes(i for i in _unshift(ids) if i < 256).decode('utf-8', 'replace')


def _unreadable(path: str, what: str, e: BaseException, fix: str) -> errors.ConfigError:
  reason = cache.first_line(e)
  cls = errors.DamagedFileError if fix else errors.ConfigError
  return cls(f'{path} is not a readable {what} ({reason}). Fix: '
             f'{fix or "point config.data.tokenizer at one"}.')


def _open(path: str, what: str, load, fix: str, failures=(RuntimeError, OSError)):
  """load(path), a tokenizer file of kind `what`; a path that is not a file, or a file that
  does not load, is one error naming it (with `fix` for a run's damaged copy)."""
  if not os.path.isfile(path):
    raise errors.ConfigError(f'config.data.tokenizer: {path} does not exist. Fix: give the '
                             f'path of a {what}.')
  try:
    return load(path)
  except failures as e:
    raise _unreadable(path, what, e, fix) from None


class SentencePieceFile:
  """An existing SentencePiece model, applied line by line as the trained one is
  (tokenizer.encode_lines), its ids shifted past the project's."""
  workdir_file = 'tokenizer.sentencepiece.model'  # Not tokenizer.model: the trained kind's.

  def __init__(self, path: str, fix: str = ''):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    self.path = str(path)
    self.sp = _open(self.path, 'SentencePiece model',
                    lambda p: spm.SentencePieceProcessor(model_file=p), fix)
    self.vocab_size = self.sp.get_piece_size() + _SHIFT

  def encode(self, text: str) -> np.ndarray:
    return tokenizer_lib.encode_lines(self.sp, text, _SHIFT)

  def decode(self, ids) -> str:
    return tokenizer_lib.decode_lines(self.sp, ids, _SHIFT)


def _whole(tok):
  """`tok` with the truncation and padding a tokenizer.json may carry turned off: a document is
  encoded whole, and the pipeline chunks and pads it."""
  tok.no_truncation()
  tok.no_padding()
  return tok


class HuggingFace:
  """A Hugging Face `tokenizer.json` (any model, any pre-tokenizer), read by the `tokenizers`
  package; no special tokens are added (the pipeline adds the project's)."""
  workdir_file = 'tokenizer.json'

  def __init__(self, path: str, fix: str = ''):
    import tokenizers  # pylint: disable=g-import-not-at-top
    self.path = str(path)
    # The package raises plain Exception for a file that is not a tokenizer.
    self.tok = _whole(_open(self.path, 'Hugging Face tokenizer.json',
                            tokenizers.Tokenizer.from_file, fix, failures=(Exception,)))
    self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True) + _SHIFT

  def encode(self, text: str) -> np.ndarray:
    return _shift(self.tok.encode(text, add_special_tokens=False).ids)

  def decode(self, ids) -> str:
    return self.tok.decode(_unshift(ids), skip_special_tokens=False)


PRETRAINED_PREFIX = 'hf:'
_KEPT_FORMAT = 'roformer pretrained tokenizer 1'


def _special_token(value) -> str | None:
  """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
  if isinstance(value, dict):
    value = value.get('content')
  return value if isinstance(value, str) else None


def _model_special_ids(directory: str, tok, fix: str) -> dict:
  """Without tokenizer_config.json: the bos, eos and pad ids of the model's own config.json
  (transformers' `bos_token_id`, ...; the first of a list of eos ids), None where it has none
  (no field, null, an empty list, or a negative id such as early conversions' pad -1)."""
  path = os.path.join(directory, 'config.json')
  model = files.read_json(path, fix or 'copy it from the model') if os.path.exists(path) else {}
  ids = {}
  for key in ('bos', 'eos', 'pad'):
    given = model.get(f'{key}_token_id') if isinstance(model, dict) else None
    value = (given[0] if given else None) if isinstance(given, list) else given
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
      value = None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value >= tok.get_vocab_size(with_added_tokens=True)):
      raise errors.DamagedFileError(
          f'{path}: {key}_token_id={given!r} is not an id of its tokenizer.json, and there is '
          'no tokenizer_config.json to name the token instead. Fix: use the tokenizer files '
          'that came with the model.')
    ids[key] = value
  return ids


class Pretrained:
  """A pretrained model's own tokenizer: a Hugging Face model directory's `tokenizer.json`, with
  the bos, eos and pad tokens its `tokenizer_config.json` names (`data.tokenizer='hf:DIR'`;
  without that file, the ids its config.json gives).
  Its ids are used as they are, unshifted, so that they index the pretrained embedding; the
  data pipeline frames documents with its own bos and eos (`bos_id` None: a model without one,
  such as Qwen2, starts documents with their first token).

  A workdir keeps it as one file (`workdir_file`, JSON: the tokenizer.json, the special ids and
  `vocab_size`, the rows of the model's embedding, which may exceed the tokenizer's ids: Pythia
  has 50,304 rows for 50,277 ids)."""
  workdir_file = 'tokenizer.pretrained.json'

  def __init__(self, path: str, fix: str = '', vocab_size: int | None = None):
    import tokenizers  # pylint: disable=g-import-not-at-top
    self.path = str(path)
    if os.path.isdir(self.path):
      json_path = os.path.join(self.path, 'tokenizer.json')
      self.tok = _whole(_open(json_path, 'Hugging Face tokenizer.json',
                              tokenizers.Tokenizer.from_file, fix, failures=(Exception,)))
      config_path = os.path.join(self.path, 'tokenizer_config.json')
      if not os.path.exists(config_path):
        self.ids = _model_special_ids(self.path, self.tok, fix)
        names = {}
      else:
        config = files.read_json(config_path, fix or 'copy it from the model')
        names = {key: _special_token(config.get(f'{key}_token')) for key in ('bos', 'eos', 'pad')}
        self.ids = {}
      for key, name in names.items():
        token_id = None if name is None else self.tok.token_to_id(name)
        if name is not None and token_id is None:
          raise errors.DamagedFileError(
              f'{config_path}: its {key}_token {name!r} is not a token of {json_path}. Fix: '
              'use the tokenizer files that came with the model.')
        self.ids[key] = token_id
      self.vocab_size = vocab_size or self.tok.get_vocab_size(with_added_tokens=True)
    else:
      kept = files.read_json(self.path, fix or 'import the model again')
      keys = ('tokenizer', 'bos_id', 'eos_id', 'pad_id', 'vocab_size')
      if (not isinstance(kept, dict) or kept.get('format') != _KEPT_FORMAT
          or any(key not in kept for key in keys)):
        raise errors.DamagedFileError(f'{self.path} is not a kept pretrained tokenizer. Fix: '
                                      f'{fix or "import the model again"}.')
      try:
        self.tok = _whole(tokenizers.Tokenizer.from_str(json.dumps(kept['tokenizer'])))
      except Exception as e:  # pylint: disable=broad-except  # The package raises Exception.
        raise _unreadable(self.path, 'kept pretrained tokenizer', e,
                          fix or 'import the model again') from None
      self.ids = {key: kept[f'{key}_id'] for key in ('bos', 'eos', 'pad')}
      self.vocab_size = int(kept['vocab_size'])
    self.bos_id, self.eos_id, self.pad_id = self.ids['bos'], self.ids['eos'], self.ids['pad']
    self.token_count = self.tok.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str) -> np.ndarray:
    return np.asarray(self.tok.encode(text, add_special_tokens=False).ids, np.int32)

  def decode(self, ids) -> str:
    ids = [int(i) for i in ids]
    return self.tok.decode([i for i in ids if 0 <= i < self.token_count],
                           skip_special_tokens=True)

  def save(self, path: str) -> None:
    """Writes the kept form (one JSON file) to `path`."""
    files.write_json_atomic(path, {
        'format': _KEPT_FORMAT, 'tokenizer': json.loads(self.tok.to_str()),
        **{f'{key}_id': value for key, value in self.ids.items()},
        'vocab_size': self.vocab_size})


def framing(tokenizer) -> tuple[list[int], list[int]]:
  """The ids a document starts and ends with: the project's bos and eos, or a pretrained
  tokenizer's own (none where it has none)."""
  bos = getattr(tokenizer, 'bos_id', tokenizer_lib.BOS_ID)
  eos = getattr(tokenizer, 'eos_id', tokenizer_lib.EOS_ID)
  return ([] if bos is None else [bos]), ([] if eos is None else [eos])


WORKDIR_FILES = ('tokenizer.model', 'tokenizer.sentencepiece.model', 'tokenizer.json',
                 'tokenizer.bytes', Pretrained.workdir_file)


def workdir_file(name: str) -> str:
  """The file name under which a run keeps the tokenizer config.data.tokenizer=`name` names."""
  return {TRAINED: tokenizer_lib.Tokenizer.workdir_file, BYTES: Bytes.workdir_file,
          'sentencepiece_file': SentencePieceFile.workdir_file,
          'huggingface': HuggingFace.workdir_file, 'pretrained': Pretrained.workdir_file}[
              kind(name)]


def kept(directory: str):
  """The path of the tokenizer a run keeps in `directory` and its class ((None, None) if none):
  the file's name says which kind it is."""
  for name, cls in ((tokenizer_lib.Tokenizer.workdir_file, tokenizer_lib.Tokenizer),
                    (SentencePieceFile.workdir_file, SentencePieceFile),
                    (HuggingFace.workdir_file, HuggingFace), (Bytes.workdir_file, Bytes),
                    (Pretrained.workdir_file, Pretrained)):
    path = os.path.join(directory, name) if directory else ''
    if path and os.path.exists(path):
      return path, cls
  return None, None


def check_given(name: str) -> str | None:
  """The absolute path of the file or directory config.data.tokenizer names (None for a
  trained or bytes tokenizer), refused if it does not exist: checked before any data is read,
  so that a wrong path is not found only after the documents are converted."""
  k = kind(name)
  if k in (TRAINED, BYTES):
    return None
  path = os.path.abspath(os.path.expanduser(
      name[len(PRETRAINED_PREFIX):] if k == 'pretrained' else name))
  if not (os.path.isdir(path) if k == 'pretrained' else os.path.isfile(path)):
    what = {'pretrained': 'a Hugging Face model directory (its tokenizer.json and '
                          'tokenizer_config.json)', 'huggingface': 'a Hugging Face tokenizer.json',
            'sentencepiece_file': 'a SentencePiece model'}[k]
    problem = ('does not exist' if not os.path.exists(path) else
               'is not a directory' if k == 'pretrained' else 'is not a file')
    raise errors.ConfigError(f'config.data.tokenizer={name!r}: {path} {problem}. Fix: give the '
                             f'path of {what}.')
  return path


def given(name: str):
  """The tokenizer config.data.tokenizer names without training (bytes, or a file), else None."""
  k = kind(name)
  if k == TRAINED:
    return None
  if k == BYTES:
    return Bytes()
  path = check_given(name)
  return {'pretrained': Pretrained, 'sentencepiece_file': SentencePieceFile,
          'huggingface': HuggingFace}[k](path)


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
    if hasattr(tokenizer, 'save'):  # A kept form of its own (Pretrained).
      tokenizer.save(path + '.tmp')
    elif tokenizer.path is None:
      with open(path + '.tmp', 'w', encoding='utf-8') as f:
        f.write('UTF-8 bytes: byte b is id b + 5 (roformer/data/vocabularies.py).\n')
    else:
      shutil.copyfile(tokenizer.path, path + '.tmp')
    files.sync_tree(path + '.tmp')
    files.durable_replace(path + '.tmp', path)
