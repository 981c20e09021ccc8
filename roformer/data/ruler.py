"""RULER's synthetic tasks (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your
Long-Context Language Models?"), generated row by row like the other synthetic tasks.

Passkey retrieval saturates: a model that finds one needle in uniform filler says little about
how much of its context it uses. RULER's harder retrieval, tracing and aggregation tasks do not.
Here they are written in the synthetic tasks' word vocabulary (keys k0.., values v0.., words
s0..) inside passkey's filler sentences; a needle is the four tokens `k is v .`, and a
question is `? k` followed at once by the answer, whose tokens alone are scored. The question
ends at the asked key so that the key is the token that predicts the answer: a 2-layer model
then retrieves with one move in its first layer (each needle's value seeing its key two tokens
back), where a separator after the key (`? k => v`) needs a second (the key moved onto the
separator) before retrieval pays, and stayed at chance for 3,000-4,000 steps at 32 and 64 tokens
(docs/length_generalization.md).

- `niah_multikey`: `needles` needles with distinct keys; one is asked.
- `niah_multivalue`: one key with `needle_values` distinct values, each its own needle; the
  answer is every value, in the order they appear.
- `niah_multiquery`: `needles` needles with distinct keys; `needle_queries` of them are asked,
  one question and answer after another.
- `variable_tracking`: `chains` chains of `hops` hops: `k_a is v .`, then `k_b is k_a .`, and so
  on, each chain's statements in order at rising depths and the chains interleaved; the question
  `? v` asks for every name bound to v, in the order they were bound.
- `common_words`: a list of words (no filler) in which `common_words` words appear
  `common_count` times each and every other word once; the question `? =>` asks for the common
  ones, in increasing id order (one answer, whatever order they appeared in).

Needles sit between filler sentences at uniform random depths; `needle_depth` in [0, 1] puts the
asked needle (multikey), the first value (multivalue), the first asked needle (multiquery) or
the asked chain's first statement (variable tracking) at that depth instead, and that needle's
depth is the row's depth bucket, scored per band like passkey's.
"""

import numpy as np

from roformer import errors
from roformer.data import tokenizer as tokenizer_lib

TASKS = ('niah_multikey', 'niah_multivalue', 'niah_multiquery', 'variable_tracking',
         'common_words')
# Those whose rows have a depth bucket (and read data.synthetic.needle_depth).
DEPTH_TASKS = ('niah_multikey', 'niah_multivalue', 'niah_multiquery', 'variable_tracking')


def answer_tokens(task: str, cfg) -> int:
  """The answer tokens of a row of `task` (the same at every length)."""
  return {'niah_multikey': 1, 'niah_multivalue': cfg.needle_values,
          'niah_multiquery': cfg.needle_queries, 'variable_tracking': cfg.hops + 1,
          'common_words': cfg.common_words}[task]


def fixed_tokens(task: str, cfg) -> int:
  """Tokens of a row of `task` besides the filler: bos, needles, questions, answers and eos."""
  needle = 4  # k is v .
  if task == 'niah_multikey':
    return 1 + needle * cfg.needles + 2 + 1 + 1
  if task == 'niah_multivalue':
    return 1 + needle * cfg.needle_values + 2 + cfg.needle_values + 1
  if task == 'niah_multiquery':
    return 1 + needle * cfg.needles + 3 * cfg.needle_queries + 1
  if task == 'variable_tracking':
    names = cfg.hops + 1
    return 1 + needle * cfg.chains * names + 2 + names + 1
  if task == 'common_words':
    return 1 + cfg.common_words * cfg.common_count + 2 + cfg.common_words + 1
  raise ValueError(f'{task!r} is not one of RULER\'s tasks {TASKS}.')


def validate(task: str, cfg, seq_len: int, max_seq_len: int) -> None:
  """The row's needles, questions and answers fit `seq_len` predictions; the vocabulary holds
  the distinct keys, values and words the longest evaluation length needs."""
  where = 'config.data.synthetic'
  if not (cfg.needle_depth == -1 or 0 <= cfg.needle_depth <= 1):
    raise errors.ConfigError(
        f'{where}.needle_depth={cfg.needle_depth} is neither a depth in [0, 1] nor -1 (uniform '
        'at random). Fix: one of those.')
  need = fixed_tokens(task, cfg)
  if need > seq_len + 1:
    raise errors.ConfigError(
        f'config.data.seq_len={seq_len} cannot hold a {task} row: its needles, questions and '
        f'answers take {need} tokens at the {where} sizes. Fix: --config.data.seq_len={need - 1} '
        'or more, or fewer needles, values, queries, chains, hops or common words.')
  if task == 'niah_multiquery' and cfg.needle_queries > cfg.needles:
    raise errors.ConfigError(
        f'{where}.needle_queries={cfg.needle_queries} asks more keys than the {cfg.needles} '
        f'needles hold. Fix: needle_queries <= needles.')
  keys = {'niah_multikey': cfg.needles, 'niah_multiquery': cfg.needles, 'niah_multivalue': 1,
          'variable_tracking': cfg.chains * (cfg.hops + 1)}.get(task, 0)
  values = {'niah_multivalue': cfg.needle_values, 'variable_tracking': cfg.chains}.get(task, 0)
  if keys > cfg.num_keys or values > cfg.num_values:
    field, have, want = (('num_keys', cfg.num_keys, keys) if keys > cfg.num_keys
                         else ('num_values', cfg.num_values, values))
    raise errors.ConfigError(
        f'a {task} row needs {want} distinct {field[4:]} but {where}.{field}={have}. Fix: '
        f'--config.data.synthetic.{field}={want} or more.')
  if task == 'common_words':
    words = cfg.common_words + (max_seq_len + 1 - need)
    if words > cfg.num_symbols:
      longest = cfg.num_symbols - cfg.common_words + need - 1  # The most num_symbols fills.
      raise errors.ConfigError(
          f'common_words rows of {max_seq_len} tokens (the longest evaluation length) list '
          f'{words} distinct words but {where}.num_symbols={cfg.num_symbols}. Fix: evaluation '
          f'lengths of at most {longest} tokens (config.eval.length_multipliers up to '
          f'{longest // seq_len}); or, for a new run, --config.data.synthetic.num_symbols='
          f'{words} or more (it is fixed once trained: which word each id names).')


def _haystack(rng, vocab, filler_count: int, needles: list, depths: np.ndarray):
  """Filler sentences of `filler_count` tokens with each needle (token arrays) inserted at the
  sentence boundary at or before its depth (in [0, 1]); needles at the same boundary keep
  their order. Returns the tokens and each needle's depth as placed (boundary / filler)."""
  filler, bounds = vocab.filler_run(int(rng.integers(len(vocab.filler))), filler_count)
  cuts = bounds[np.searchsorted(bounds, depths * filler_count, side='right') - 1]
  order = np.argsort(cuts, kind='stable')
  parts, last = [], 0
  for n in order:
    parts += [filler[last:cuts[n]], needles[n]]
    last = cuts[n]
  parts.append(filler[last:])
  return np.concatenate(parts), cuts / max(filler_count, 1)


def _depths(rng, cfg, count: int, first: int = 0) -> np.ndarray:
  """Uniform depths for `count` needles; needle `first` at cfg.needle_depth when set."""
  depths = rng.uniform(size=count)
  if cfg.needle_depth >= 0:
    depths[first] = cfg.needle_depth
  return depths


def rising_depths(rng, depth: float, count: int) -> np.ndarray:
  """`count` sorted uniform depths in [0, 1] (a chain's statements, a key's values, in order);
  when `depth` >= 0, drawn again with the first at `depth` and the others after it."""
  depths = np.sort(rng.uniform(size=count))
  if depth >= 0:
    depths = np.sort(np.r_[depth, rng.uniform(depth, 1, count - 1)])
  return depths


def depth_bucket(buckets: int, depth: float) -> int:
  """The band of `buckets` equal bands of [0, 1] that `depth` falls in."""
  return min(int(depth * buckets), buckets - 1)


def _bucket(cfg, depth: float) -> int:
  return depth_bucket(cfg.depth_buckets, depth)


def frame(body, questions, answers, bos=(tokenizer_lib.BOS_ID,), eos=(tokenizer_lib.EOS_ID,),
          dtype=np.int64):
  """bos, body, then each (question, answer) in turn, then eos (the project's ids by default, a
  pretrained tokenizer's own in text rows); the answers' [start, end) spans."""
  tokens, spans = [np.asarray(bos, dtype), np.asarray(body, dtype)], []
  at = len(bos) + len(body)
  for q, a in zip(questions, answers):
    tokens += [q, a]
    at += len(q)
    spans.append((at, at + len(a)))
    at += len(a)
  tokens.append(np.asarray(eos, dtype))
  return np.concatenate(tokens).astype(dtype), spans


def niah(task: str):
  """The generator of a needle-in-a-haystack task (multikey, multivalue or multiquery)."""

  def generate(rng, cfg, vocab, length):
    filler = length + 1 - fixed_tokens(task, cfg)
    is_, stop, ask = vocab.ids['is'], vocab.ids['.'], vocab.query
    if task == 'niah_multivalue':
      key = vocab.key0 + int(rng.integers(cfg.num_keys))
      values = vocab.value0 + rng.choice(cfg.num_values, cfg.needle_values, replace=False)
      depths = rising_depths(rng, cfg.needle_depth, len(values))  # The first at the depth.
      needles = [np.asarray([key, is_, v, stop]) for v in values]
      body, placed = _haystack(rng, vocab, filler, needles, depths)
      tokens, spans = frame(body, [np.asarray([ask, key])], [values])
      return tokens, spans, _bucket(cfg, placed[0])
    keys = vocab.key0 + rng.choice(cfg.num_keys, cfg.needles, replace=False)
    values = vocab.value0 + rng.integers(0, cfg.num_values, cfg.needles)
    asked = rng.choice(cfg.needles, 1 if task == 'niah_multikey' else cfg.needle_queries,
                       replace=False)
    needles = [np.asarray([k, is_, v, stop]) for k, v in zip(keys, values)]
    body, placed = _haystack(rng, vocab, filler, needles, _depths(rng, cfg, cfg.needles,
                                                                  asked[0]))
    if task == 'niah_multikey':
      tokens, spans = frame(body, [np.asarray([ask, keys[asked[0]]])],
                            [values[asked[:1]]])
    else:
      tokens, spans = frame(body, [np.asarray([ask, keys[a]]) for a in asked],
                            [values[a:a + 1] for a in asked])
    return tokens, spans, _bucket(cfg, placed[asked[0]])

  return generate


def variable_tracking(rng, cfg, vocab, length):
  filler = length + 1 - fixed_tokens('variable_tracking', cfg)
  is_, stop = vocab.ids['is'], vocab.ids['.']
  names = (vocab.key0 + rng.choice(cfg.num_keys, cfg.chains * (cfg.hops + 1), replace=False)
           ).reshape(cfg.chains, cfg.hops + 1)
  values = vocab.value0 + rng.choice(cfg.num_values, cfg.chains, replace=False)
  asked = int(rng.integers(cfg.chains))
  needles, depths = [], []
  for c in range(cfg.chains):
    # A chain binds in order; the asked one's first statement at the depth.
    chain = rising_depths(rng, cfg.needle_depth if c == asked else -1.0, cfg.hops + 1)
    needles.append(np.asarray([names[c, 0], is_, values[c], stop]))
    needles += [np.asarray([names[c, h], is_, names[c, h - 1], stop])
                for h in range(1, cfg.hops + 1)]
    depths.extend(chain)
  body, placed = _haystack(rng, vocab, filler, needles, np.asarray(depths))
  tokens, spans = frame(body, [np.asarray([vocab.query, values[asked]])],
                        [names[asked]])
  return tokens, spans, _bucket(cfg, placed[asked * (cfg.hops + 1)])


def common_words(rng, cfg, vocab, length):
  rare = length + 1 - fixed_tokens('common_words', cfg)
  words = rng.choice(cfg.num_symbols, cfg.common_words + rare, replace=False)
  common = np.sort(words[:cfg.common_words])
  listed = rng.permutation(np.r_[np.repeat(common, cfg.common_count), words[cfg.common_words:]])
  tokens, spans = frame(vocab.symbol0 + listed, [np.asarray([vocab.query, vocab.separator])],
                        [vocab.symbol0 + common])
  return tokens, spans, 0


GENERATORS = {'niah_multikey': niah('niah_multikey'), 'niah_multivalue': niah('niah_multivalue'),
              'niah_multiquery': niah('niah_multiquery'), 'variable_tracking': variable_tracking,
              'common_words': common_words}
