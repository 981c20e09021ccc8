"""Passkey rows hidden in a corpus's own text (config.data.synthetic.filler='text').

The synthetic passkey task (roformer/data/synthetic.py) hides its key in a few repeated
sentences of a 300-word vocabulary. A language model trained on a corpus is asked for the key
in that corpus's text instead: row i is a window of the split's tokens (config.data.name's own
source, the one the run's tokenizer is trained on) with the key sentence inserted at a random
depth, then the question and the answer,

  [bos] <text> The pass key is 71803. Remember it. 71803 is the pass key. <text> What is the
  pass key? The pass key is 71803 [eos]

all in the run's tokenizer's ids, exactly `length` predictions long (a window of the text
continues from its start when the split is shorter). The answer's ids are the same in the key
sentence and after the question (each part is encoded on its own). As in the synthetic task, a
row is built from `np.random.default_rng((data seed, split, run seed for training rows, i))`:
random access, deterministic, resumable.

A mixture entry reads these rows (`'keys': {'weight': 0.1, 'name': 'synthetic/passkey'}`):
training packs each row as one document of its source (its loss counts every token, like any
text), and evaluation scores it like the synthetic task (`tasks.SyntheticTask`: accuracy over
the answer's tokens, the share of rows answered in full, and by depth band of the key).
"""

import numpy as np

from roformer import errors
from roformer.data import ruler
from roformer.data import synthetic
from roformer.data import tokens as tokens_lib
from roformer.data import vocabularies

WORDS, TEXT = 'words', 'text'  # config.data.synthetic.filler
# Around the key's two copies; the key is encoded with a space before it (' 71803'). The
# spaces at the ends keep the parts apart from the text around them with any tokenizer.
KEY_PARTS = (' The pass key is', '. Remember it.', ' is the pass key. ')
QUESTION = ' What is the pass key? The pass key is'
# The filler is read from the split's first documents up to this many tokens: enough for
# windows of any evaluation length, without encoding a whole large corpus per run.
MAX_TEXT_TOKENS = 1_000_000


def reads_text(synthetic_cfg) -> bool:
  return synthetic_cfg.filler == TEXT


class Split:
  """A split of retrieval rows in text: the synthetic config, the split's name, that split of
  config.data's own source (documents under `text_key`) whose text fills the rows, and the task
  (passkey here; RULER's tasks: roformer/data/ruler_text.py)."""

  def __init__(self, cfg, split: str, text, text_key: str, task: str = 'passkey'):
    self.cfg, self.split, self.text, self.text_key = cfg, split, text, text_key
    self.task = task
    self._cached = {}

  def cached(self, tokenizer, name: str, build):
    """`build()`, computed once per tokenizer for this split (the text's ids, a task's pool of
    words): every length's rows share it."""
    key = (name, id(tokenizer))
    if key not in self._cached:
      self._cached[key] = build()
    return self._cached[key]

  def stream(self, tokenizer) -> np.ndarray:
    """The split's documents' ids, one after another (encoded once per tokenizer)."""
    return self.cached(tokenizer, 'stream', lambda: self._encoded(tokenizer))

  def _encoded(self, tokenizer) -> np.ndarray:
    parts, count = [], 0
    for i in range(len(self.text)):
      parts.append(np.asarray(tokens_lib.document_ids(self.text[i], tokenizer, self.text_key),
                              np.int32))
      count += len(parts[-1])
      if count >= MAX_TEXT_TOKENS:
        break
    if not count:
      raise errors.ConfigError(
          f'the {self.split} split of the passkey rows\' text (config.data.name) has no '
          "text. Fix: check config.data.splits, or set config.data.synthetic.filler='words'.")
    return np.concatenate(parts)


class Rows:
  """Random-access rows of `length` predictions (synthetic.make_row's features: `weights` on
  the answer's ids, `bucket` the key's depth band)."""

  def __init__(self, split: Split, tokenizer, length: int, run_seed: int = 0):
    self.cfg, self.length, self.tokenizer, self.split = split.cfg, length, tokenizer, split
    self.stream = split.stream(tokenizer)
    self.key = (int(self.cfg.seed), synthetic.SPLIT_IDS[split.split]) + (
        (int(run_seed),) if split.split == 'train' else ())
    self.rows = synthetic.TRAIN_ROWS if split.split == 'train' else int(self.cfg.eval_examples)
    self.task = split.task
    self.bos, self.eos = vocabularies.framing(tokenizer)
    self.prepare(tokenizer, length)

  def window(self, rng, count: int) -> np.ndarray:
    """`count` tokens of the text from a random start (continuing from its beginning)."""
    start = int(rng.integers(len(self.stream)))
    return np.take(self.stream, np.arange(start, start + count), mode='wrap')

  def prepare(self, tokenizer, length: int) -> None:
    """The task's fixed parts in `tokenizer`'s ids; a row too short for them is refused."""
    self.parts = [tokenizer.encode(part) for part in KEY_PARTS]
    self.question = tokenizer.encode(QUESTION)
    longest = self.fixed_tokens(tokenizer.encode(' ' + '9' * self.cfg.key_digits)) + 1
    if length + 1 < longest:
      raise errors.TooShort(
          f"passkey rows in text (config.data.synthetic.filler='text') of {length} tokens "
          f'cannot hold a key of config.data.synthetic.key_digits={self.cfg.key_digits} '
          f'({longest} tokens of this tokenizer with one of text, one more than its '
          'predictions). Fix: --config.data.seq_len='
          f'{longest - 1} or more, or fewer key_digits.', longest - 1)

  def fixed_tokens(self, answer) -> int:
    """Tokens of a row besides the text: bos, the key sentence, the question, the answer, eos."""
    return (len(self.bos) + len(self.eos) + sum(map(len, self.parts)) + len(self.question)
            + 3 * len(answer))

  def __len__(self) -> int:
    return self.rows

  def tokens(self, index: int):
    """Row `index`'s ids (length + 1 of them), its answers' [start, end) spans and its depth
    band."""
    rng = np.random.default_rng(self.key + (int(index),))
    digits = rng.integers(0, 10, self.cfg.key_digits)
    answer = np.asarray(self.tokenizer.encode(' ' + ''.join(map(str, digits))), np.int32)
    count = self.length + 1 - self.fixed_tokens(answer)
    text = self.window(rng, count)
    cut = int(rng.integers(count + 1))  # The key sentence goes before text token `cut`.
    before, middle, after = self.parts
    ids = np.concatenate([self.bos, text[:cut], before, answer, middle, answer, after,
                          text[cut:], self.question, answer, self.eos]).astype(np.int32)
    end = len(ids) - len(self.eos)
    return ids, [(end - len(answer), end)], self.bucket(cut / max(count, 1))

  def bucket(self, depth: float) -> int:
    """The depth band of a needle at `depth` in [0, 1] of the text."""
    return ruler.depth_bucket(self.cfg.depth_buckets, depth)

  def __getitem__(self, index: int) -> dict:
    ids, spans, bucket = self.tokens(index)
    return synthetic.make_row(ids, spans, bucket, self.length)


class Documents:
  """`rows` (a task's Rows, ruler_text.rows) as documents of token ids (without the bos and eos
  that packing adds): what a mixture trains on, each row exactly one packed row of its length's
  predictions."""

  def __init__(self, rows: Rows):
    self.rows = rows

  def __len__(self) -> int:
    return len(self.rows)

  def __getitem__(self, index: int) -> dict:
    ids = self.rows.tokens(index)[0]
    return {tokens_lib.TOKEN_IDS: ids[len(self.rows.bos):len(ids) - len(self.rows.eos)]}
