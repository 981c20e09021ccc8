"""RULER's tasks in a corpus's own text and the run's tokenizer (config.data.synthetic.filler=
'text', as a source of a mixture): what a model imported from Hugging Face is asked in its own
vocabulary, with RULER's sentences (Hsieh et al. 2024).

The words version (roformer/data/ruler.py) writes keys and values as tokens of the synthetic
vocabulary; here a needle is RULER's sentence, a key a word, a value a number of `key_digits`
digits and a variable a name of five capital letters:

  ... text ... One of the special magic numbers for apple is: 4817302. ... text ...
  What are all the special magic numbers for apple mentioned in the provided text? The special
  magic numbers for apple mentioned in the provided text are 4817302

- `niah_multikey`: `needles` needles of distinct keys; one is asked, its value the answer.
- `niah_multivalue`: `needle_values` needles of one key; the answer is every value, in the order
  they appear, separated by commas (` 4817302, 5523091`).
- `niah_multiquery`: `needles` needles of distinct keys; `needle_queries` of them are asked, one
  question and answer after another.
- `variable_tracking`: `chains` chains of `hops` hops (` VAR QWERT = 4817302.`, then
  ` VAR ASDFG = VAR QWERT.`, ...), each chain in order at rising depths and the chains
  interleaved; RULER's question for one chain's value is answered by every name bound to it, in
  the order they were bound (` QWERT ASDFG ...`).
- `common_words`: RULER's numbered list of words (no text), in which `common_words` words
  appear `common_count` times each and the others fewer (once each while the pool lasts); the
  answer is the common ones in alphabetical order (one answer, whatever order they appeared
  in). The words are those of the split's text (and the keys above); a few tokens of text
  before the list make the row's length exact.

Every part is encoded on its own (a value's ids are the same in its needle and in the answer),
the needles go at random token depths of a window of the split's text (`needle_depth` places the
asked one, or the asked chain's first statement), and the row is exactly `length` predictions
long, like passkey's rows in text (roformer/data/passkey_text.py), whose machinery this shares.
Only the answers' ids are scored; the row's depth band is the asked needle's (0 for
common_words).
"""

import re

import numpy as np

from roformer import errors
from roformer.data import passkey_text
from roformer.data import ruler

TASKS = ('niah_multikey', 'niah_multivalue', 'niah_multiquery', 'variable_tracking',
         'common_words')
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
VARIABLE = (' VAR', ' =', '.')  # ' VAR QWERT = 4817302.' and ' VAR ASDFG = VAR QWERT.'
TRACE = (' Question: Find all variables that are assigned the value', ' in the text above.'
         ' Answer: According to the chain(s) of variable assignment in the text above,',
         ' variables are assigned the value', ', they are:')
LIST = (' Below is a numbered list of words. In these words, some appear more often than'
        ' others. Memorize the ones that appear most often.')
COUNT = ('\nQuestion: What are the', ' most common words in the above list? Answer: The top',
         ' words that appear most often in the list are:')
# Variable names: a fixed draw of five capital letters, so that the longest is known before
# any row is built.
NAMES = 1000
# The common-words pool: distinct words of three letters or more in this many of the split's
# tokens.
WORD_POOL_TOKENS = 300_000


def _names() -> tuple[str, ...]:
  rng, names = np.random.default_rng(2104_09864), {}
  while len(names) < NAMES:
    names.setdefault(''.join(chr(ord('A') + c) for c in rng.integers(0, 26, 5)), None)
  return tuple(names)


def rows(split: passkey_text.Split, tokenizer, length: int, run_seed: int = 0):
  """The random-access rows of `split`'s task in text: passkey's (passkey_text.Rows), or this
  module's for RULER's tasks."""
  cls = passkey_text.Rows if split.task == 'passkey' else Rows
  return cls(split, tokenizer, length, run_seed)


def validate(task: str, cfg) -> None:
  """The fields a row in text reads, before the tokenizer is known (Rows checks the length)."""
  where = 'config.data.synthetic'
  if task == 'variable_tracking':
    if cfg.chains > 10 ** cfg.key_digits:
      raise errors.ConfigError(
          f'variable_tracking rows in text give each of {where}.chains={cfg.chains} chains its '
          f'own value of key_digits={cfg.key_digits} digits, of which there are '
          f'{10 ** cfg.key_digits}. Fix: fewer chains or more key_digits.')
    if cfg.chains * (cfg.hops + 1) > NAMES:
      raise errors.ConfigError(
          f'variable_tracking rows in text bind {cfg.chains * (cfg.hops + 1)} distinct names '
          f'({where}.chains x (hops + 1)) from {NAMES}. Fix: fewer chains or hops.')
    return
  if task == 'common_words':
    return
  keys = 1 if task == 'niah_multivalue' else cfg.needles
  if keys > len(KEY_WORDS):
    raise errors.ConfigError(f'{task} rows in text draw {keys} distinct keys from '
                             f'{len(KEY_WORDS)} words. Fix: --config.data.synthetic.needles='
                             f'{len(KEY_WORDS)} or fewer.')
  if task == 'niah_multiquery' and cfg.needle_queries > cfg.needles:
    raise errors.ConfigError(f'{where}.needle_queries={cfg.needle_queries} asks more keys than '
                             f'the {cfg.needles} needles hold. Fix: needle_queries <= needles.')


class Rows(passkey_text.Rows):
  """Random-access rows of a RULER task in text (synthetic.make_row's features)."""

  def prepare(self, tokenizer, length: int) -> None:
    self.encode = lambda text: np.asarray(tokenizer.encode(text), np.int32)
    encode_all = lambda parts: [self.encode(part) for part in parts]
    self.separator = self.encode(SEPARATOR)
    longest_value = len(self.encode(' ' + '9' * self.cfg.key_digits))
    frame = len(self.bos) + len(self.eos)
    if self.task == 'variable_tracking':
      self.variable, self.trace = encode_all(VARIABLE), encode_all(TRACE)
      self.names = [self.encode(' ' + name) for name in _names()]
      hops = self.cfg.hops
      longest_name = max(map(len, self.names))
      statement = sum(map(len, self.variable)) + longest_name
      fixed = (frame + self.cfg.chains * (statement + longest_value)
               + self.cfg.chains * hops * (statement + len(self.variable[0]) + longest_name)
               + sum(map(len, self.trace)) + 2 * longest_value
               + len(self.encode(f' {hops + 1}')) + (hops + 1) * longest_name)
    elif self.task == 'common_words':
      self.intro, self.count = self.encode(LIST), encode_all(COUNT)
      self.words, self.word_ids = self.split.cached(tokenizer, 'words', self._pool)
      self.numbers = {}
      common, repeats = self.cfg.common_words, self.cfg.common_count
      if len(self.words) < common + 1:
        raise errors.ConfigError(
            f'common_words rows in text draw {common} common words and at least one other '
            f'from the {len(self.words)} words of the split\'s text and the keys. Fix: '
            f'--config.data.synthetic.common_words={len(self.words) - 1} or fewer.')
      longest_word = max(map(len, self.word_ids))
      self.question_ids = np.concatenate(
          [self.count[0], self.encode(f' {common}'), self.count[1], self.encode(f' {common}'),
           self.count[2]])
      items = common * repeats
      if 2 * items > length:  # An item is a label and a word: two tokens at least.
        fixed = 2 * items
      else:
        fixed = (frame + len(self.intro) + self._labels(items) + items * longest_word
                 + len(self.question_ids) + common * longest_word)
      shortest = min(map(len, self.word_ids)) + len(self._label(1))
      # The rarer words appear at most common_count - 1 times each: enough for the longest row?
      room = (repeats - 1) * (len(self.words) - common)
      if length >= fixed and (length + 1 - fixed) // shortest > room:
        raise errors.ConfigError(
            f'common_words rows in text of {length} tokens may list more words than '
            f"{len(self.words) - common} rare words at {repeats - 1} times each (the split's "
            f'text has {len(self.words)} distinct words with the keys). Fix: a shorter '
            'length, or a larger --config.data.synthetic.common_count.')
    else:
      self.needle, self.question_parts = encode_all(NEEDLE), encode_all(QUESTION)
      self.key_ids = [self.encode(' ' + word) for word in KEY_WORDS]
      longest_key = max(len(k) for k in self.key_ids)
      needles, queries, values = self._counts()
      fixed = (frame + needles * (sum(map(len, self.needle)) + longest_key + longest_value)
               + queries * (sum(map(len, self.question_parts)) + 2 * longest_key)
               + values * (longest_value + len(self.separator)))
    if length < fixed:  # One token of text at least.
      raise errors.TooShort(
          f"{self.task} rows in text (config.data.synthetic.filler='text') of {length} tokens "
          f'cannot hold their needles, questions and answers ({fixed + 1} tokens of this '
          'tokenizer with one of text, one more than its predictions). Fix: '
          '--config.data.seq_len='
          f'{fixed} or more, or fewer needles, values, queries, chains, hops or common words.',
          fixed)

  def _counts(self) -> tuple[int, int, int]:
    """(needles, questions, answer values) of a needle task's row."""
    cfg = self.cfg
    if self.task == 'niah_multivalue':
      return cfg.needle_values, 1, cfg.needle_values
    queries = cfg.needle_queries if self.task == 'niah_multiquery' else 1
    return cfg.needles, queries, queries

  def tokens(self, index: int):
    """Row `index`'s ids (length + 1 of them), its answers' spans and its depth band."""
    rng = np.random.default_rng(self.key + (int(index),))
    if self.task == 'common_words':
      return self._common_words(rng)
    if self.task == 'variable_tracking':
      needles, depths, first, questions, answers = self._variables(rng)
    else:
      needles, depths, first, questions, answers = self._needles(rng)
    fixed = (len(self.bos) + len(self.eos) + sum(map(len, needles)) + sum(map(len, questions))
             + sum(map(len, answers)))
    count = self.length + 1 - fixed
    text = self.window(rng, count)
    cuts = np.minimum((depths * count).astype(np.int64), count)
    order = np.argsort(cuts, kind='stable')
    parts, last = [], 0
    for n in order:
      parts += [text[last:cuts[n]], needles[n]]
      last = cuts[n]
    parts.append(text[last:])
    ids, spans = self._frame(parts, questions, answers)
    return ids, spans, self.bucket(cuts[first] / max(count, 1))

  def _frame(self, parts, questions, answers):
    """The tokenizer's bos, `parts`, each question and its answer, its eos; the spans."""
    return ruler.frame(np.concatenate(parts), questions, answers, self.bos, self.eos, np.int32)

  def _value(self, rng) -> np.ndarray:
    return self.encode(' ' + ''.join(map(str, rng.integers(0, 10, self.cfg.key_digits))))

  def _needles(self, rng):
    """A needle task's needles, their depths, the asked one, the questions and the answers."""
    cfg = self.cfg
    if self.task == 'niah_multivalue':
      keys = [int(rng.integers(len(KEY_WORDS)))] * cfg.needle_values
      asked = [[0]]  # One question; its answer is every needle's value.
    else:
      keys = list(rng.choice(len(KEY_WORDS), cfg.needles, replace=False))
      count = cfg.needle_queries if self.task == 'niah_multiquery' else 1
      asked = [[int(a)] for a in rng.choice(cfg.needles, count, replace=False)]
    values = [self._value(rng) for _ in keys]
    before, middle, after = self.needle
    needles = [np.concatenate([before, self.key_ids[k], middle, v, after])
               for k, v in zip(keys, values)]
    answers = [self._list([values[i] for i in (range(len(keys)) if self.task ==
                                                'niah_multivalue' else group)], self.separator)
               for group in asked]
    questions = [self._question(self.key_ids[keys[group[0]]]) for group in asked]
    first = asked[0][0]
    if self.task == 'niah_multivalue':  # The values in order, the first at the asked depth.
      depths = ruler.rising_depths(rng, cfg.needle_depth, len(needles))
    else:
      depths = rng.uniform(size=len(needles))
      if cfg.needle_depth >= 0:
        depths[first] = cfg.needle_depth
    return needles, depths, first, questions, answers

  def _variables(self, rng):
    """variable_tracking's statements, their depths, the asked chain's first, its question and
    its answer."""
    cfg, hops = self.cfg, self.cfg.hops
    var, equals, stop = self.variable
    picked = rng.choice(NAMES, cfg.chains * (hops + 1), replace=False).reshape(cfg.chains, -1)
    values, seen = [], set()
    while len(values) < cfg.chains:  # Distinct values: each names one chain.
      value = self._value(rng)
      if value.tobytes() not in seen:
        seen.add(value.tobytes())
        values.append(value)
    asked = int(rng.integers(cfg.chains))
    needles, depths = [], []
    for c in range(cfg.chains):
      names = [self.names[n] for n in picked[c]]
      needles.append(np.concatenate([var, names[0], equals, values[c], stop]))
      needles += [np.concatenate([var, names[h], equals, var, names[h - 1], stop])
                  for h in range(1, hops + 1)]
      depth = cfg.needle_depth if c == asked else -1.0
      depths.extend(ruler.rising_depths(rng, depth, hops + 1))
    first, second, third, fourth = self.trace
    question = np.concatenate([first, values[asked], second, self.encode(f' {hops + 1}'), third,
                               values[asked], fourth])
    answer = np.concatenate([self.names[n] for n in picked[asked]])
    return needles, np.asarray(depths), asked * (hops + 1), [question], [answer]

  def _common_words(self, rng):
    """RULER's numbered list: the common words `common_count` times, the others fewer; text
    before the list to the exact length."""
    cfg = self.cfg
    drawn = rng.permutation(len(self.words))
    common, rare = drawn[:cfg.common_words], drawn[cfg.common_words:]
    answer = np.concatenate([self.word_ids[w] for w in sorted(common,
                                                               key=lambda w: self.words[w])])
    budget = (self.length + 1 - len(self.bos) - len(self.eos) - len(self.intro)
              - len(self.question_ids) - len(answer))
    listed = list(np.repeat(common, cfg.common_count))
    used = sum(len(self.word_ids[w]) for w in listed) + self._labels(len(listed))
    passes = [rare] + [rng.permutation(rare) for _ in range(cfg.common_count - 2)]
    for word in (w for p in passes for w in p):  # Rare words while they fit.
      more = len(self.word_ids[word]) + len(self._label(len(listed) + 1))
      if used + more > budget:
        break
      listed.append(word)
      used += more
    listed = rng.permutation(listed)
    items = [np.concatenate([self._label(i + 1), self.word_ids[w]]) for i, w in enumerate(listed)]
    text = self.window(rng, budget - used)
    ids, spans = self._frame([text, self.intro, *items], [self.question_ids], [answer])
    return ids, spans, 0

  def _label(self, number: int) -> np.ndarray:
    """A list item's label (`\\n12.`), encoded once."""
    if number not in self.numbers:
      self.numbers[number] = self.encode(f'\n{number}.')
    return self.numbers[number]

  def _labels(self, count: int) -> int:
    """The tokens of the first `count` items' labels."""
    return sum(len(self._label(i)) for i in range(1, count + 1))

  def _pool(self) -> tuple[tuple[str, ...], list[np.ndarray]]:
    """The common-words pool: distinct lower-case words of the split's text and the keys, and
    each one's ids (` word`)."""
    text = self.tokenizer.decode(self.stream[:WORD_POOL_TOKENS])
    words = tuple(sorted(set(re.findall(r'[a-z]{3,}', text.lower())) | set(KEY_WORDS)))
    return words, [self.encode(' ' + word) for word in words]

  def _list(self, values, separator) -> np.ndarray:
    pieces = []
    for i, v in enumerate(values):
      pieces += ([separator] if i else []) + [v]
    return np.concatenate(pieces)

  def _question(self, key) -> np.ndarray:
    first, second, third = self.question_parts
    return np.concatenate([first, key, second, key, third])
