"""RULER's needle-in-a-haystack tasks in a corpus's own text and the run's tokenizer
(config.data.synthetic.filler='text', as a source of a mixture): what a model imported from
Hugging Face is asked in its own vocabulary, with RULER's sentences (Hsieh et al. 2024).

The words version (roformer/data/ruler.py) writes keys and values as tokens of the synthetic
vocabulary; here a needle is RULER's sentence, a key a word and a value a number of
`key_digits` digits:

  ... text ... One of the special magic numbers for apple is: 4817302. ... text ...
  What are all the special magic numbers for apple mentioned in the provided text? The special
  magic numbers for apple mentioned in the provided text are 4817302

- `niah_multikey`: `needles` needles of distinct keys; one is asked, its value the answer.
- `niah_multivalue`: `needle_values` needles of one key; the answer is every value, in the order
  they appear, separated by commas (` 4817302, 5523091`).
- `niah_multiquery`: `needles` needles of distinct keys; `needle_queries` of them are asked, one
  question and answer after another.

Every part is encoded on its own (a value's ids are the same in its needle and in the answer),
the needles go at random token depths of a window of the split's text (`needle_depth` places the
asked one), and the row is exactly `length` predictions long, like passkey's rows in text
(roformer/data/passkey_text.py), whose machinery this shares. Only the answers' ids are scored;
the row's depth band is the asked needle's.
"""

import numpy as np

from roformer import errors
from roformer.data import passkey_text

TASKS = ('niah_multikey', 'niah_multivalue', 'niah_multiquery')
# The keys: common nouns, each one word in most tokenizers (RULER draws English words).
KEY_WORDS = tuple('''apple river garden window mountain candle silver forest pepper island
    violin marble thunder basket copper lantern meadow anchor falcon pillow rocket saddle tiger
    harbor velvet walnut ladder parrot orchard blanket compass dragon feather glacier hammer
    jacket kettle lemon mirror needle ocean pencil quartz ribbon shadow tunnel umbrella valley
    wagon yellow zebra bridge cactus desert engine fountain guitar helmet igloo jungle kitten
    lizard magnet nickel oyster puzzle quiver rabbit sandal tomato vessel whistle castle dolphin
    emerald ginger hollow iron juniper kayak legend maple nectar olive prism raven spider
    thistle walrus bamboo crystal drum'''.split())
NEEDLE = (' One of the special magic numbers for', ' is:', '.')
QUESTION = (' What are all the special magic numbers for', ' mentioned in the provided text? The'
            ' special magic numbers for', ' mentioned in the provided text are')
SEPARATOR = ','  # Between the values of one answer.


def validate(task: str, cfg) -> None:
  """The fields a row in text reads, before the tokenizer is known (Rows checks the length)."""
  where = 'config.data.synthetic'
  keys = 1 if task == 'niah_multivalue' else cfg.needles
  if keys > len(KEY_WORDS):
    raise errors.ConfigError(f'{task} rows in text draw {keys} distinct keys from '
                             f'{len(KEY_WORDS)} words. Fix: --config.data.synthetic.needles='
                             f'{len(KEY_WORDS)} or fewer.')
  if task == 'niah_multiquery' and cfg.needle_queries > cfg.needles:
    raise errors.ConfigError(f'{where}.needle_queries={cfg.needle_queries} asks more keys than '
                             f'the {cfg.needles} needles hold. Fix: needle_queries <= needles.')


class Rows(passkey_text.Rows):
  """Random-access rows of a RULER needle task in text (synthetic.make_row's features)."""

  def prepare(self, tokenizer, length: int) -> None:
    encode = lambda text: np.asarray(tokenizer.encode(text), np.int32)
    self.needle = [encode(part) for part in NEEDLE]
    self.question_parts = [encode(part) for part in QUESTION]
    self.separator = encode(SEPARATOR)
    self.key_ids = [encode(' ' + word) for word in KEY_WORDS]
    self.encode = encode
    longest_key = max(len(k) for k in self.key_ids)
    longest_value = len(encode(' ' + '9' * self.cfg.key_digits))
    needles, queries, values = self._counts()
    # The longest row's fixed tokens, with one of text.
    fixed = (len(self.bos) + len(self.eos) + needles * (sum(map(len, self.needle)) + longest_key
                                                         + longest_value)
             + queries * (sum(map(len, self.question_parts)) + 2 * longest_key)
             + values * (longest_value + len(self.separator)))
    if length < fixed:
      raise errors.ConfigError(
          f"{self.task} rows in text (config.data.synthetic.filler='text') of {length} tokens "
          f'cannot hold their needles, questions and answers ({fixed + 1} tokens of this '
          'tokenizer with one of text). Fix: --config.data.seq_len='
          f'{fixed} or more, or fewer needles, values or queries.')

  def _counts(self) -> tuple[int, int, int]:
    """(needles, questions, answer values) of a row."""
    cfg = self.cfg
    if self.task == 'niah_multivalue':
      return cfg.needle_values, 1, cfg.needle_values
    queries = cfg.needle_queries if self.task == 'niah_multiquery' else 1
    return cfg.needles, queries, queries

  def tokens(self, index: int):
    """Row `index`'s ids (length + 1 of them), its answers' spans and its depth band."""
    cfg, rng = self.cfg, np.random.default_rng(self.key + (int(index),))
    value = lambda: self.encode(' ' + ''.join(map(str, rng.integers(0, 10, cfg.key_digits))))
    if self.task == 'niah_multivalue':
      keys = [int(rng.integers(len(KEY_WORDS)))] * cfg.needle_values
      asked = [[0]]  # One question; its answer is every needle's value.
    else:
      keys = list(rng.choice(len(KEY_WORDS), cfg.needles, replace=False))
      count = cfg.needle_queries if self.task == 'niah_multiquery' else 1
      asked = [[int(a)] for a in rng.choice(cfg.needles, count, replace=False)]
    values = [value() for _ in keys]
    before, middle, after = self.needle
    needles = [np.concatenate([before, self.key_ids[k], middle, v, after])
               for k, v in zip(keys, values)]
    answers = [self._answer([values[i] for i in (range(len(keys)) if self.task ==
                                                  'niah_multivalue' else group)])
               for group in asked]
    questions = [self._question(self.key_ids[keys[group[0]]]) for group in asked]
    fixed = (len(self.bos) + len(self.eos) + sum(map(len, needles)) + sum(map(len, questions))
             + sum(map(len, answers)))
    count = self.length + 1 - fixed
    text = self.window(rng, count)
    first = asked[0][0]
    if self.task == 'niah_multivalue':  # The values in order, the first at the asked depth.
      low = max(cfg.needle_depth, 0.0)
      depths = np.sort(rng.uniform(low, 1, size=len(needles)))
      if cfg.needle_depth >= 0:
        depths[0] = cfg.needle_depth
    else:
      depths = rng.uniform(size=len(needles))
      if cfg.needle_depth >= 0:
        depths[first] = cfg.needle_depth
    cuts = np.minimum((depths * count).astype(np.int64), count)
    order = np.argsort(cuts, kind='stable')
    parts, last = [np.asarray(self.bos, np.int32)], 0
    for n in order:
      parts += [text[last:cuts[n]], needles[n]]
      last = cuts[n]
    parts.append(text[last:])
    spans, at = [], sum(map(len, parts))
    for question, answer in zip(questions, answers):
      parts += [question, answer]
      spans.append((at + len(question), at + len(question) + len(answer)))
      at += len(question) + len(answer)
    parts.append(np.asarray(self.eos, np.int32))
    ids = np.concatenate(parts).astype(np.int32)
    return ids, spans, self.bucket(cuts[first] / max(count, 1))

  def _answer(self, values) -> np.ndarray:
    pieces = []
    for i, v in enumerate(values):
      pieces += ([self.separator] if i else []) + [v]
    return np.concatenate(pieces)

  def _question(self, key) -> np.ndarray:
    first, second, third = self.question_parts
    return np.concatenate([first, key, second, key, third])
