"""Synthetic length-generalization tasks, generated row by row from a seed (no files, no download).

Each task builds one row of exactly `seq_len` predictions from `np.random.default_rng(...)` keyed
by (data seed, split, run seed for training rows, row index), so a row can be rebuilt anywhere,
in any order, and the grain iterator's state is just an index: deterministic and resumable. A row
is a single document: `inputs` = [bos] + tokens, `targets` the same shifted by one, positions
0..L-1 and segment id 1 (0 on padding), plus `weights` (1.0 on the answer tokens only: the loss
and accuracy count nothing else) and `bucket` (the needle's depth bucket for passkey and RULER's
needle tasks; 0 elsewhere). The same
generator serves every evaluation length, so a model trained at L is scored on rows of 2L, 4L, 8L.

- `passkey` (Mohtashami & Jaggi 2023; Chen et al. 2023): "The pass key is 7 1 8 0 3 . Remember
  it . 7 1 8 0 3 is the pass key ." hidden at a random depth of a repeated filler ("The grass is
  green . The sky is blue . ..."), then "What is the pass key ? The pass key is" and the digits.
- `associative_recall`: distinct keys each followed by a value, then queries `? key` each
  followed by that key's value (the pairs fill the row, so longer rows hold more pairs).
- `copy`: random symbols, a separator, then the same symbols (reversed with `reverse`); the
  number of symbols is drawn per row, up to what fits.
- `flip_flop` (Liu et al. 2023, flip-flop language modelling): pairs of an instruction and a
  bit, `write b`, `ignore b` or `read b`; the first is a write, each is `ignore` with
  probability `flip_flop_ignore` (the paper's FFL(0.8) by default) and otherwise a write or a
  read alike; the bit after `read` is the last written bit, and only those bits are scored.
- RULER's `niah_multikey`, `niah_multivalue`, `niah_multiquery`, `variable_tracking` and
  `common_words` (Hsieh et al. 2024): roformer/data/ruler.py.

Tokens are words of a small fixed vocabulary (`Vocabulary`), one id per word, digit or symbol,
with the special ids of `roformer.data.tokenizer`; `Vocabulary` has the tokenizer's interface
(`encode`, `decode`, `vocab_size`), so generation and evaluation use it like a SentencePiece one.
"""

import dataclasses
import difflib
import types

import numpy as np

from roformer import errors
from roformer.data import ruler
from roformer.data import tokenizer as tokenizer_lib

TASKS = ('passkey', 'associative_recall', 'copy', 'flip_flop') + ruler.TASKS
DEPTH_TASKS = ('passkey',) + ruler.DEPTH_TASKS  # Rows scored per band of the needle's depth.
PREFIX = 'synthetic/'  # config.data.name = 'synthetic/TASK'.
SPLIT_IDS = {'train': 0, 'validation': 1, 'test': 2}
TRAIN_ROWS = 2**31 - 1  # Training rows are drawn without end (as many as steps ask for).

FILLER = ('The grass is green .', 'The sky is blue .', 'The sun is yellow .', 'Here we go .',
          'There and back again .')
KEY_SENTENCE = 'The pass key is {key} . Remember it . {key} is the pass key .'
QUESTION = 'What is the pass key ? The pass key is'
SEPARATOR, QUERY = '=>', '?'
# Flip-flop's instructions: words of its vocabulary only (the other tasks' ids stay as they were).
FLIP_FLOP_WORDS = ('write', 'ignore', 'read')
_WORDS = sorted({w for s in FILLER + (KEY_SENTENCE, QUESTION) for w in s.split()} - {'{key}'}
                | {SEPARATOR, QUERY})


# The tasks whose rows can hide their needles in a corpus's text (filler='text', in a mixture):
# roformer/data/passkey_text.py and ruler_text.py.
TEXT_TASKS = ('passkey', *ruler.TASKS)


def task_name(data_cfg) -> str | None:
  """'passkey', ... for a config.data.name of 'synthetic/TASK', else None."""
  name = data_cfg.name
  return name[len(PREFIX):] if name.startswith(PREFIX) else None


class Vocabulary:
  """Word-level vocabulary of the synthetic tasks: the tokenizer's special ids, then words and
  digits, then the keys, values and copy symbols the config asks for (k0.., v0.., s0..), then
  flip-flop's instructions when `task` is flip_flop."""

  path = workdir_file = None  # Nothing to keep in a workdir: it follows from the config.

  def __init__(self, cfg, task: str | None = None):
    specials = ['<pad>', '<eos>', '<bos>', '<unk>', '<n>']
    assert len(specials) == tokenizer_lib.NUM_SPECIAL
    digits = [str(d) for d in range(10)]
    self.words = (specials + _WORDS + digits + [f'k{i}' for i in range(cfg.num_keys)]
                  + [f'v{i}' for i in range(cfg.num_values)]
                  + [f's{i}' for i in range(cfg.num_symbols)]
                  + (list(FLIP_FLOP_WORDS) if task == 'flip_flop' else []))
    self.ids = {w: i for i, w in enumerate(self.words)}
    # The id of digit d, key k, value v and symbol s is the first one's plus d, k, v or s.
    self.digit0, self.key0 = self.ids['0'], self.ids['k0'] if cfg.num_keys else None
    self.value0 = self.ids['v0'] if cfg.num_values else None
    self.symbol0 = self.ids['s0'] if cfg.num_symbols else None
    self.separator, self.query = self.ids[SEPARATOR], self.ids[QUERY]
    self.write = self.ids.get('write')  # write, ignore, read: consecutive ids.
    self.filler = [self.encode(s) for s in FILLER]
    self._cycle = np.concatenate(self.filler)  # The sentences back to back, and their starts.
    self._starts = np.cumsum([0] + [len(s) for s in self.filler[:-1]])
    self._tiles = (np.zeros(0, np.int32), np.zeros(0, np.int64))  # See filler_run.
    self.question = self.encode(QUESTION)
    before, after = KEY_SENTENCE.split('{key}', 1)[0], KEY_SENTENCE.split('{key}')[1:]
    self.key_sentence = [self.encode(before)] + [self.encode(part) for part in after]

  @property
  def vocab_size(self) -> int:
    return len(self.words)

  def encode(self, text: str) -> np.ndarray:
    """Whitespace-separated words to ids (unknown words: the unk id); no bos/eos added."""
    return np.asarray([self.ids.get(w, tokenizer_lib.UNK_ID) for w in text.split()], np.int32)

  def filler_run(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` tokens of the filler sentences in turn from sentence `start` (cycling), and the
    offsets of the sentence starts among them, 0 to `count` inclusive: where a needle can go.

    One slice of the cycle repeated, where building each row's sentences one by one cost more
    than the row's random draws. The repeated cycle and its sentence starts are kept as one
    read-only pair, replaced whole when a longer run is asked for, so that threads reading
    rows at once (grain's readers of `TextRows`) never see one without the other."""
    offset = int(self._starts[start])
    tiled, starts = self._tiles
    if offset + count >= len(tiled):
      repeats = (offset + count) // len(self._cycle) + 2
      tiled = np.tile(self._cycle, repeats)
      starts = (self._starts[None, :] + len(self._cycle) * np.arange(repeats)[:, None]).ravel()
      tiled.flags.writeable = starts.flags.writeable = False
      self._tiles = (tiled, starts)
    first = np.searchsorted(starts, offset)
    last = np.searchsorted(starts, offset + count, side='right')
    return tiled[offset:offset + count], starts[first:last] - offset

  def decode(self, ids) -> str:
    skip = (tokenizer_lib.PAD_ID, tokenizer_lib.EOS_ID, tokenizer_lib.BOS_ID)
    return ' '.join(self.words[int(i)] for i in ids if int(i) not in skip)


def passkey_fixed_tokens(digits: int) -> int:
  """Tokens of a passkey row besides the filler: bos, the key sentence, the question, the
  answer digits and eos."""
  key = ' '.join(['0'] * digits)
  return 1 + len(KEY_SENTENCE.format(key=key).split()) + len(QUESTION.split()) + digits + 1


def recall_pairs(seq_len: int, num_queries: int) -> int:
  """Key-value pairs in an associative-recall row of seq_len predictions: [bos], the pairs,
  `? key value` per query, [eos] (a final pad when the count is odd)."""
  return (seq_len - 1 - 3 * num_queries) // 2


def answer_tokens(task: str, cfg, seq_len: int) -> int | None:
  """The most answer tokens (weighted targets) a row of `task` with `seq_len` predictions can
  hold: the loss needs the output layer at these positions only (tasks.SyntheticTask). None
  when no bound follows from the config: rows hidden in a corpus's text
  (roformer/data/passkey_text.py, ruler_text.py), whose answers are in the run's tokenizer's
  ids, as many as it makes of the digits."""
  if cfg.filler != 'words':
    return None
  if task == 'passkey':
    return cfg.key_digits
  if task == 'associative_recall':
    return cfg.num_queries
  if task == 'copy':
    return (seq_len - 2) // 2
  if task == 'flip_flop':
    return seq_len // 2 - 1  # Every pair but the first (a write) may be a read.
  return ruler.answer_tokens(task, cfg)


def validate(task: str, cfg, seq_len: int, max_seq_len: int) -> None:
  """Checks config.data.synthetic for `task` against the training length and the longest
  evaluation length (config.data.seq_len x the largest eval length multiplier)."""
  where = 'config.data.synthetic'  # Each field's range: roformer/config_schema.py.
  if task not in TASKS:  # First: the other checks would describe the task it is not.
    close = difflib.get_close_matches(task, TASKS, n=1)
    raise errors.ConfigError(f"config.data.name='synthetic/{task}' names no synthetic task"
                             + (f" (did you mean 'synthetic/{close[0]}'?)" if close else '')
                             + f". Fix: 'synthetic/TASK' for a TASK in {TASKS}.")
  if cfg.needle_depth != -1 and task not in ruler.DEPTH_TASKS:
    raise errors.ConfigError(
        f'{where}.needle_depth={cfg.needle_depth} places the asked needle of '
        f'{ruler.DEPTH_TASKS}, not of {task!r} (whose rows it would leave as they are). Fix: '
        'leave it at -1.')
  if cfg.filler != 'words' and task not in TEXT_TASKS:
    raise errors.ConfigError(
        f"{where}.filler={cfg.filler!r} hides the needles of {TEXT_TASKS} in text, and this "
        f"task is {task!r}. Fix: leave filler at 'words'.")
  if cfg.filler != 'words':
    return  # Rows in text: ruler_text.validate (mixture.validate calls it), and their lengths
    # in the run's tokenizer when rows are built (a bound in these words would mislead).
  if task == 'passkey':
    need = passkey_fixed_tokens(cfg.key_digits) + 1  # At least one filler token.
    if seq_len + 1 < need:  # A row of seq_len predictions holds seq_len + 1 tokens.
      raise errors.ConfigError(
          f'config.data.seq_len={seq_len} cannot hold a passkey row with {cfg.key_digits} '
          f'digits ({need} tokens, one more than its predictions). Fix: '
          f'--config.data.seq_len={need - 1} or more.')
  elif task == 'associative_recall':
    if recall_pairs(seq_len, cfg.num_queries) < cfg.num_queries:
      raise errors.ConfigError(
          f'config.data.seq_len={seq_len} holds {recall_pairs(seq_len, cfg.num_queries)} '
          f'key-value pairs, fewer than {where}.num_queries={cfg.num_queries}. Fix: a longer '
          'seq_len or fewer queries.')
    most = recall_pairs(max_seq_len, cfg.num_queries)
    if most > cfg.num_keys:
      longest = 2 * cfg.num_keys + 2 + 3 * cfg.num_queries  # The most that num_keys fills.
      raise errors.ConfigError(
          f'rows of {max_seq_len} tokens (the longest evaluation length) hold {most} pairs of '
          f'distinct keys, but {where}.num_keys={cfg.num_keys}. Fix: evaluation lengths of at '
          f'most {longest} tokens (config.eval.length_multipliers up to {longest // seq_len}); '
          f'or, for a new run, --config.{where[7:]}.num_keys={most} or more (it is fixed once '
          'trained: which word each id names).')
  elif task == 'copy':
    if (seq_len - 2) // 2 < cfg.min_length:
      raise errors.ConfigError(
          f'config.data.seq_len={seq_len} cannot hold a copy of {where}.min_length='
          f'{cfg.min_length} symbols (2 x symbols + 3 tokens). Fix: --config.data.seq_len='
          f'{2 * cfg.min_length + 2} or more, or a smaller min_length.')
  elif task == 'flip_flop':
    if seq_len < 4:
      raise errors.ConfigError(
          f'config.data.seq_len={seq_len} cannot hold a flip-flop row with a write and a read '
          '(bos and two pairs). Fix: --config.data.seq_len=4 or more.')
  elif task in ruler.TASKS:
    ruler.validate(task, cfg, seq_len, max_seq_len)


def _passkey(rng, cfg, vocab: Vocabulary, length: int):
  """Token ids of one passkey row (length + 1 tokens), its answer span and depth bucket."""
  digits = rng.integers(0, 10, cfg.key_digits)
  filler_count = length + 1 - passkey_fixed_tokens(cfg.key_digits)
  # From a random sentence of the cycle; the key goes between sentences.
  filler, bounds = vocab.filler_run(int(rng.integers(len(FILLER))), filler_count)
  depth = rng.uniform()
  cut = int(bounds[np.searchsorted(bounds, depth * filler_count, side='right') - 1])
  answer = (vocab.digit0 + digits).astype(np.int32)
  key_sentence = [vocab.key_sentence[0]]
  for part in vocab.key_sentence[1:]:  # The sentence with the key's digits in each gap.
    key_sentence += [answer, part]
  tokens = np.concatenate([[tokenizer_lib.BOS_ID], filler[:cut]] + key_sentence + [
      filler[cut:], vocab.question, answer, [tokenizer_lib.EOS_ID]])
  end = len(tokens) - 1
  actual = cut / max(filler_count, 1)
  return tokens, [(end - len(answer), end)], min(int(actual * cfg.depth_buckets),
                                                 cfg.depth_buckets - 1)


def _associative_recall(rng, cfg, vocab: Vocabulary, length: int):
  pairs = recall_pairs(length, cfg.num_queries)
  keys = rng.choice(cfg.num_keys, pairs, replace=False)
  values = rng.integers(0, cfg.num_values, pairs)
  asked = rng.choice(pairs, cfg.num_queries, replace=False)
  key_ids, value_ids = vocab.key0 + keys, vocab.value0 + values
  queries = len(asked)
  tokens = np.empty(2 + 2 * pairs + 3 * queries, np.int64)
  tokens[0], tokens[-1] = tokenizer_lib.BOS_ID, tokenizer_lib.EOS_ID
  tokens[1:1 + 2 * pairs:2], tokens[2:2 + 2 * pairs:2] = key_ids, value_ids
  asking = tokens[1 + 2 * pairs:-1].reshape(queries, 3)  # `? key value` per query.
  asking[:, 0], asking[:, 1], asking[:, 2] = vocab.query, key_ids[asked], value_ids[asked]
  ends = 1 + 2 * pairs + 3 * np.arange(1, queries + 1)
  return tokens, [(end - 1, end) for end in ends.tolist()], 0


def _copy(rng, cfg, vocab: Vocabulary, length: int):
  count = int(rng.integers(cfg.min_length, (length - 2) // 2 + 1))
  symbols = vocab.symbol0 + rng.integers(0, cfg.num_symbols, count)
  second = symbols[::-1] if cfg.reverse else symbols
  tokens = np.concatenate([[tokenizer_lib.BOS_ID], symbols, [vocab.separator], second,
                           [tokenizer_lib.EOS_ID]])
  return tokens, [(count + 2, 2 * count + 2)], 0


def _flip_flop(rng, cfg, vocab: Vocabulary, length: int):
  """[bos], (instruction, bit) pairs, [eos] when it fits: read bits copy the last write."""
  pairs = length // 2
  move = (1.0 - cfg.flip_flop_ignore) / 2
  instructions = rng.choice(3, pairs, p=[move, cfg.flip_flop_ignore, move])  # write, ignore, read
  instructions[0] = 0
  bits = rng.integers(0, 2, pairs)
  reads = np.flatnonzero(instructions == 2)
  last_write = np.maximum.accumulate(np.where(instructions == 0, np.arange(pairs), 0))
  bits[reads] = bits[last_write[reads]]
  tokens = np.empty(1 + 2 * pairs, np.int64)
  tokens[0] = tokenizer_lib.BOS_ID
  tokens[1::2], tokens[2::2] = vocab.write + instructions, vocab.digit0 + bits
  if len(tokens) <= length:
    tokens = np.append(tokens, tokenizer_lib.EOS_ID)
  return tokens, [(2 + 2 * r, 3 + 2 * r) for r in reads.tolist()], 0


_GENERATORS = {'passkey': _passkey, 'associative_recall': _associative_recall, 'copy': _copy,
               'flip_flop': _flip_flop, **ruler.GENERATORS}


def make_rows(rows, length: int) -> dict:
  """The features of rows of `length` predictions, stacked ([rows, length]; `bucket` [rows]),
  from each row's (token ids (at most length + 1, the rest padding), the [start, end) token
  spans of the answers (scored as targets), depth bucket). Filled in place: a batch built row
  by row and then stacked took about a tenth of its rows' building again."""
  count = len(rows)
  ids = np.zeros((2, count, length), np.int32)  # inputs, targets
  layout = np.zeros((2, count, length), np.int32)  # positions, segment ids
  weights = np.zeros((count, length), np.float32)
  buckets = np.zeros(count, np.int32)
  positions = np.arange(length, dtype=np.int32)
  for r, (tokens, spans, bucket) in enumerate(rows):
    n = len(tokens) - 1
    ids[0, r, :n], ids[1, r, :n] = tokens[:-1], tokens[1:]
    for start, end in spans:  # Token t is the target of input t - 1.
      weights[r, start - 1:end - 1] = 1.0
    layout[0, r, :n], layout[1, r, :n] = positions[:n], 1
    buckets[r] = bucket
  return {'inputs': ids[0], 'targets': ids[1], 'inputs_positions': layout[0],
          'targets_positions': layout[0].copy(), 'inputs_segment_ids': layout[1],
          'targets_segment_ids': layout[1].copy(), 'weights': weights, 'bucket': buckets}


def make_row(tokens, spans, bucket: int, length: int) -> dict:
  """One row's features (make_rows' for a single row, without the rows axis)."""
  return {key: value[0] for key, value in make_rows([(tokens, spans, bucket)], length).items()}


@dataclasses.dataclass(frozen=True)
class Split:
  """A split of a synthetic task before its length is chosen (what `load_sources` returns)."""
  cfg: object  # config.data.synthetic
  task: str
  split: str


class Source:
  """Random-access rows of one split at one length: row i is built from the rng keyed by
  (data seed, split, run seed (training rows only), i), never from any state."""

  def __init__(self, split: Split, length: int, run_seed: int = 0):
    # The fields as a plain object: a ConfigDict's attribute lookups cost more than a row's
    # arithmetic.
    self.cfg = types.SimpleNamespace(**split.cfg.to_dict()) if hasattr(
        split.cfg, 'to_dict') else split.cfg
    self.task, self.length = split.task, length
    self.vocab = Vocabulary(self.cfg, self.task)
    self.key = (int(split.cfg.seed), SPLIT_IDS[split.split]) + (
        (int(run_seed),) if split.split == 'train' else ())
    self.rows = TRAIN_ROWS if split.split == 'train' else int(split.cfg.eval_examples)

  def __len__(self) -> int:
    return self.rows

  def _generate(self, index: int):
    rng = np.random.default_rng(self.key + (int(index),))
    return _GENERATORS[self.task](rng, self.cfg, self.vocab, self.length)

  def __getitem__(self, index: int) -> dict:
    return self._checked(make_row(*self._generate(index), self.length))

  def stacked(self, indices) -> dict:
    """The rows at `indices`, stacked: the same arrays as stacking `self[i]` for each."""
    return self._checked(make_rows([self._generate(i) for i in indices], self.length))

  def _checked(self, features: dict) -> dict:
    """`features`, after checking that no row holds more answer tokens than `answer_tokens`
    says (the loss would leave the others out)."""
    most = answer_tokens(self.task, self.cfg, self.length)
    count = int(np.count_nonzero(features['weights'], axis=-1).max(initial=0))
    if most is not None and count > most:
      raise errors.DataError(
          f'a {self.task} row of {self.length} tokens holds {count} answer tokens, more than '
          f'the {most} that synthetic.answer_tokens allows: its bound is wrong for these '
          'settings. Fix: correct answer_tokens in roformer/data/synthetic.py.')
    return features


class TextRows:
  """Random-access documents of a split's rows in words (`{text_key: 'The grass is green .
  ...'}`): what a mixture of text sources (roformer/data/mixture.py) reads a synthetic task as.
  Row i is the row `Source(split, length, run_seed)[i]` holds, without its special ids."""

  def __init__(self, split: Split, length: int, run_seed: int = 0, text_key: str = 'text'):
    self.source, self.text_key = Source(split, length, run_seed), text_key

  def __len__(self) -> int:
    return len(self.source)

  def __getitem__(self, index: int) -> dict:
    row = self.source[index]
    tokens = np.append(row['inputs'][:1], row['targets'][row['targets_segment_ids'] > 0])
    return {self.text_key: self.source.vocab.decode(tokens)}
