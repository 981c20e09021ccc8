"""Synthetic length-generalization tasks: rows against hand-worked examples, determinism, the
scored tokens, and accuracy against greedy decoding."""

import concurrent.futures
import functools
import hashlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import synthetic as synthetic_config
from roformer import decode
from roformer import errors
from roformer import models
from roformer import resolve
from roformer import tasks
from roformer.data import synthetic
from roformer.data import synthetic_batches
from roformer.data import tokenizer as tokenizer_lib

BOS, EOS = tokenizer_lib.BOS_ID, tokenizer_lib.EOS_ID


def options(**changes):
  cfg = synthetic_config.get_config().data.synthetic
  cfg.update(changes)
  return cfg


def source(task, split='validation', length=64, run_seed=0, **changes):
  return synthetic.Source(synthetic.Split(options(**changes), task, split), length, run_seed)


def words(vocab, ids):
  return [vocab.words[int(i)] for i in ids]


def test_a_row_scores_exactly_its_answer_tokens():
  """Hand-worked: tokens [bos a b => a b eos] of a copy, answer span [4, 6), in a row of 8
  predictions: inputs are the tokens but the last, targets the tokens but the first, and the
  targets 'a', 'b' of the second half are the only ones scored."""
  a, b, sep = 10, 11, 12
  row = synthetic.make_row(np.asarray([BOS, a, b, sep, a, b, EOS]), [(4, 6)], 3, 8)
  np.testing.assert_array_equal(row['inputs'], [BOS, a, b, sep, a, b, 0, 0])
  np.testing.assert_array_equal(row['targets'], [a, b, sep, a, b, EOS, 0, 0])
  np.testing.assert_array_equal(row['weights'], [0, 0, 0, 1, 1, 0, 0, 0])
  np.testing.assert_array_equal(row['inputs_segment_ids'], [1, 1, 1, 1, 1, 1, 0, 0])
  np.testing.assert_array_equal(row['inputs_positions'], [0, 1, 2, 3, 4, 5, 0, 0])
  assert row['bucket'] == 3


@pytest.mark.parametrize('length', [64, 200])
def test_passkey_answer_is_the_hidden_key_at_its_depth(length):
  src = source('passkey', length=length)
  vocab = src.vocab
  for i in range(20):
    row = src[i]
    text = words(vocab, row['inputs'][row['inputs_segment_ids'] > 0])
    assert text[0] == '<bos>' and len(row['inputs']) == length
    # The key sentence, once, somewhere in the filler; the question at the very end.
    start = next(j for j in range(len(text)) if text[j:j + 4] == ['The', 'pass', 'key', 'is'])
    key = text[start + 4:start + 9]
    assert all(w.isdigit() for w in key) and text[start + 9:start + 12] == ['.', 'Remember', 'it']
    question = 'What is the pass key ? The pass key is'.split()
    assert text[-len(question) - 5:-5] == question  # Then the 5 digits (the last input).
    answer = words(vocab, row['targets'][row['weights'] > 0])
    assert answer == key and row['targets'][-1] == EOS  # The row ends with the answer.
    filler = len(text) + 1 - synthetic.passkey_fixed_tokens(5)
    assert row['bucket'] == min(int((start - 1) / filler * 5), 4)


def test_associative_recall_answers_are_the_values_of_the_queried_keys():
  src = source('associative_recall', length=64, num_queries=4)  # 64 - 1 - 3 x 4 = 2 x 25 + 1.
  vocab = src.vocab
  for i in range(20):
    row = src[i]
    text = words(vocab, row['inputs'][row['inputs_segment_ids'] > 0]) + [
        vocab.words[row['targets'][row['inputs_segment_ids'] > 0][-1]]]
    pairs_end = text.index('?')
    pairs = dict(zip(text[1:pairs_end:2], text[2:pairs_end:2]))
    assert len(pairs) == (pairs_end - 1) // 2 == 25  # Distinct keys.
    queries = [text[j + 1] for j in range(pairs_end, len(text)) if text[j] == '?']
    answer = words(vocab, row['targets'][row['weights'] > 0])
    assert len(queries) == 4 and answer == [pairs[k] for k in queries]


@pytest.mark.parametrize('reverse', [False, True])
def test_copy_answer_is_the_sequence_again(reverse):
  src = source('copy', length=64, reverse=reverse)
  counts = set()
  for i in range(30):
    row = src[i]
    text = words(src.vocab, row['inputs'][row['inputs_segment_ids'] > 0])
    first = text[1:text.index('=>')]
    answer = words(src.vocab, row['targets'][row['weights'] > 0])
    assert answer == (first[::-1] if reverse else first)
    counts.add(len(first))
  assert len(counts) > 5 and max(counts) <= 31  # Lengths vary, up to what fits.


@pytest.mark.parametrize('length', [4, 31, 64, 257])
def test_flip_flop_scores_each_read_bit_and_it_is_the_last_written_bit(length):
  """Replays each row's instructions word by word: it starts with a write, every scored target
  is the bit after a `read` and equals the bit of the last `write` before it, every such bit
  is scored, nothing else is, and a row fills its length."""
  src = source('flip_flop', length=length)
  kinds, reads = {}, 0
  for i in range(40):
    row = src[i]
    real = row['inputs_segment_ids'] > 0
    tokens = words(src.vocab, np.append(row['inputs'][real][:1], row['targets'][real]))
    assert tokens[0] == '<bos>' and tokens[1] == 'write'
    assert real.sum() in (length, length - 1)  # Only the final eos may not fit.
    scored = np.flatnonzero(row['weights'] > 0) + 1  # Token index of each scored target.
    expected, memory = [], None
    for t in range(1, len(tokens) - 1, 2):
      instruction, bit = tokens[t], tokens[t + 1]
      if bit == '<eos>':
        break
      kinds[instruction] = kinds.get(instruction, 0) + 1
      assert bit in ('0', '1')
      if instruction == 'write':
        memory = bit
      elif instruction == 'read':
        assert bit == memory
        expected.append(t + 1)
    assert scored.tolist() == expected
    reads += len(expected)
  if length >= 64:  # FFL(0.8): about 80% ignores, writes and reads alike.
    total = sum(kinds.values())
    assert 0.7 < kinds['ignore'] / total < 0.9 and reads > 0
    assert set(kinds) == {'write', 'ignore', 'read'}


def test_only_flip_flop_adds_its_instruction_words_to_the_vocabulary():
  """The other tasks' ids (and so their models) are what they were without flip-flop."""
  plain, flip = synthetic.Vocabulary(options()), synthetic.Vocabulary(options(), 'flip_flop')
  assert flip.words[:plain.vocab_size] == plain.words
  assert flip.words[plain.vocab_size:] == ['write', 'ignore', 'read']
  assert synthetic.Vocabulary(options(), 'copy').words == plain.words


@pytest.mark.parametrize('task', synthetic.TASKS)
def test_rows_follow_from_the_seed_alone(task):
  a, b = source(task, 'train', run_seed=1), source(task, 'train', run_seed=1)
  for i in (0, 7, 1000):  # Any order, any index: the same row.
    for key in a[i]:
      np.testing.assert_array_equal(a[i][key], b[i][key])
  other_seed, validation = source(task, 'train', run_seed=2), source(task, 'validation')
  assert not np.array_equal(a[3]['inputs'], other_seed[3]['inputs'])
  assert not np.array_equal(a[3]['inputs'], validation[3]['inputs'])
  # Evaluation rows do not depend on the run's seed: every seed is scored on the same rows.
  np.testing.assert_array_equal(source(task, run_seed=5)[3]['inputs'], validation[3]['inputs'])


def test_the_vocabulary_round_trips_words():
  vocab = synthetic.Vocabulary(options())
  text = 'The pass key is 0 4 2 . k3 v7 s15 =>'
  assert vocab.decode(vocab.encode(text)) == text
  assert vocab.encode('unknown')[0] == tokenizer_lib.UNK_ID


def _trained_like(task, seed=0, **synthetic_fields):
  """A tiny random model on the task's vocabulary, jitted forward and cached greedy decoding."""
  cfg = synthetic_config.get_config(task)
  cfg.data.synthetic.update(synthetic_fields)
  cfg.model.update(num_layers=1, d_model=32, num_heads=2, d_ff=64,
                   vocab_size=synthetic.Vocabulary(cfg.data.synthetic).vocab_size)
  return cfg, models.create(cfg.model, seed=seed)


def test_sequence_accuracy_is_greedy_decoding_exact_match():
  """A row counts as right exactly when greedy decoding from the question reproduces the answer.
  A random model whose output favours the 2 symbols of the alphabet (their embeddings scaled
  up) gets some of the 1-2 symbol copies right and some wrong."""
  cfg, model = _trained_like('copy', seed=0, num_symbols=2, min_length=1, num_keys=128,
                             num_values=16)
  vocab = synthetic.Vocabulary(cfg.data.synthetic)
  symbols = jnp.asarray([vocab.ids['s0'], vocab.ids['s1']])
  model.embed.embedding.value = model.embed.embedding.value.at[symbols].multiply(6.0)
  src = synthetic.Source(synthetic.Split(cfg.data.synthetic, 'copy', 'validation'), 6)
  rows = [src[i] for i in range(64)]
  batch = {k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0]}
  task = tasks.SyntheticTask('copy', 1)
  sums = nnx.jit(task.eval_sums)(model, batch)
  right = 0
  for r in rows:
    answer = np.flatnonzero(r['weights'])
    prompt = r['inputs'][:answer[0] + 1][None]  # Up to the token that predicts the answer.
    out = decode.generate(model, jnp.asarray(prompt), max_new_tokens=len(answer))
    right += np.array_equal(np.asarray(out)[0], r['targets'][answer])
  assert float(sums['rows']) == 64 and 0 < right < 64
  assert float(sums['rows_correct']) == right


def test_per_position_losses_average_to_the_loss():
  """The loss per position bucket, weighted by its tokens, is the overall loss."""
  cfg, model = _trained_like('copy')
  src = synthetic.Source(synthetic.Split(cfg.data.synthetic, 'copy', 'validation'), 40)
  rows = [src[i] for i in range(16)]
  batch = {k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0]}
  task = tasks.SyntheticTask('copy', 1, position_bucket=8)
  summary = task.summarize(jax.device_get(nnx.jit(task.eval_sums)(model, batch)))
  losses, counts = summary['position_loss'], summary['position_tokens']
  assert len(losses) == 5 and summary['position_bucket'] == 8
  mean = sum(l * c for l, c in zip(losses, counts) if c) / sum(counts)
  assert sum(counts) == summary['tokens'] and abs(mean - summary['loss']) < 1e-5


@pytest.mark.parametrize('changes, match', [
    ({'data.synthetic.key_digits': 0}, 'key_digits'),
    ({'data.synthetic.key_digits': 11}, 'key_digits'),
    ({'data.synthetic.depth_buckets': 0}, 'depth_buckets'),
    ({'data.seq_len': 30}, 'cannot hold a passkey row'),
    ({'data.name': 'synthetic/sorting'}, 'names no synthetic task'),
])
def test_bad_passkey_options_are_refused(changes, match):
  cfg = synthetic_config.get_config('passkey')
  for dotted, value in changes.items():
    node, leaf = cfg, dotted.split('.')
    for part in leaf[:-1]:
      node = node[part]
    node[leaf[-1]] = value
  with pytest.raises(errors.ConfigError, match=match):
    resolve.validate(cfg)


def test_the_shortest_passkey_row_named_by_the_refusal_is_accepted():
  """A row of seq_len predictions holds seq_len + 1 tokens: the bound the refusal names is the
  shortest accepted, one below it is refused."""
  cfg = synthetic_config.get_config('passkey')
  shortest = synthetic.passkey_fixed_tokens(cfg.data.synthetic.key_digits)  # + 1 of filler - 1.
  cfg.data.seq_len = shortest
  resolve.validate(cfg)
  row = synthetic.Source(synthetic.Split(cfg.data.synthetic, 'passkey', 'validation'),
                         shortest)[0]  # And a row of that length holds the whole key:
  assert row['inputs'].shape == (shortest,)
  assert int(np.count_nonzero(row['weights'])) == cfg.data.synthetic.key_digits
  cfg.data.seq_len = shortest - 1
  with pytest.raises(errors.ConfigError, match=f'--config.data.seq_len={shortest} or more'):
    resolve.validate(cfg)


def test_recall_rows_longer_than_the_keys_allow_are_refused():
  cfg = synthetic_config.get_config('associative_recall')
  cfg.data.seq_len = 32
  cfg.data.synthetic.num_queries = 4
  cfg.data.synthetic.num_keys = 100  # 8 x 32 = 256 tokens hold (255 - 3 x 4) // 2 = 121 pairs.
  # The longest length 100 keys fill: 2 x 100 + 2 + 3 x 4 = 214 tokens, 6 x 32.
  with pytest.raises(errors.ConfigError, match=r'evaluation lengths of at most 214 tokens '
                     r'\(config.eval.length_multipliers up to 6\); or, for a new run, '
                     r'--config.data.synthetic.num_keys=121 or more'):
    resolve.validate(cfg)
  cfg.eval.length_multipliers = (1, 6)  # 192 tokens: 88 pairs fit.
  resolve.validate(cfg)
  cfg.eval.length_multipliers = (1, 7)  # 224 tokens: 105 pairs do not.
  with pytest.raises(errors.ConfigError, match='hold 105 pairs of distinct keys'):
    resolve.validate(cfg)


def test_copy_rows_too_short_for_min_length_are_refused():
  cfg = synthetic_config.get_config('copy')
  cfg.data.synthetic.min_length = 40
  with pytest.raises(errors.ConfigError, match='min_length'):
    resolve.validate(cfg)


@pytest.mark.parametrize('task', synthetic.TASKS)
def test_a_batch_is_its_rows_stacked(task):
  cfg = synthetic_config.get_config(task)
  source = synthetic.Source(synthetic.Split(cfg.data.synthetic, task, 'train'),
                            2 * cfg.data.seq_len, 5)
  indices = [3, 7, 100, 4]
  batch, rows = source.stacked(indices), [source[i] for i in indices]
  assert sorted(batch) == sorted(rows[0])
  for key, value in batch.items():
    expected = np.stack([row[key] for row in rows])
    assert value.dtype == expected.dtype and np.array_equal(value, expected), key


# Digests of each task's first 20 rows (seed 1) at its training length and 4x it, taken from
# the generators as recorded runs trained on them. A change that moves any row changes every
# result trained on that task since: it must be deliberate, with new digests and a note of it.
ROW_DIGESTS = {
    ('passkey', 1, 'train'): '19231c3b2abd92e9',
    ('passkey', 1, 'validation'): 'a9d4d230a6c78e47',
    ('passkey', 4, 'train'): 'fe25d609e4238a09',
    ('passkey', 4, 'validation'): 'bfdeac72252f2297',
    ('associative_recall', 1, 'train'): '00f071120a9d66ce',
    ('associative_recall', 1, 'validation'): '4cda2a4c335232cb',
    ('associative_recall', 4, 'train'): '8c66f1b14038ad74',
    ('associative_recall', 4, 'validation'): '106da2b639a5139e',
    ('copy', 1, 'train'): '02f693bde22ee2b8',
    ('copy', 1, 'validation'): '53f3adf3c1ccd528',
    ('copy', 4, 'train'): '9844f5a562ce2470',
    ('copy', 4, 'validation'): '5f44877032daec4a',
    ('flip_flop', 1, 'train'): '7fe55e0562535477',
    ('flip_flop', 1, 'validation'): '7c6bb42a2eb62e1d',
    ('flip_flop', 4, 'train'): 'f7bd93e4e10fc10e',
    ('flip_flop', 4, 'validation'): '7041d2d460070049',
    ('niah_multikey', 1, 'train'): '4b89e454a1f140f4',
    ('niah_multikey', 1, 'validation'): 'fc81ffbf9cd53e15',
    ('niah_multikey', 4, 'train'): '1bbef541f2630150',
    ('niah_multikey', 4, 'validation'): 'a4e16d30b5183c79',
    ('niah_multivalue', 1, 'train'): 'd9aba96b72cbcd6b',
    ('niah_multivalue', 1, 'validation'): 'c2635d83bd8447d2',
    ('niah_multivalue', 4, 'train'): 'e08977ad4185e25f',
    ('niah_multivalue', 4, 'validation'): '180b2d9996dd8251',
    ('niah_multiquery', 1, 'train'): '23e99a1a62e7b70c',
    ('niah_multiquery', 1, 'validation'): 'f5224b20dc2c9e73',
    ('niah_multiquery', 4, 'train'): '002b9e7ac5286f1b',
    ('niah_multiquery', 4, 'validation'): '3f961858bb80dad0',
    ('variable_tracking', 1, 'train'): '89cf3a0b376cf1d6',
    ('variable_tracking', 1, 'validation'): 'fdf0908f985bfbdb',
    ('variable_tracking', 4, 'train'): '8f1d6cc4ede5d5ff',
    ('variable_tracking', 4, 'validation'): '504d56b01fb26dc9',
    ('common_words', 1, 'train'): '7c7ac6cfb31d964e',
    ('common_words', 1, 'validation'): 'f37a326a791d3cc2',
    ('common_words', 4, 'train'): 'f4139ce8bcac6134',
    ('common_words', 4, 'validation'): '286a3ecdf5d919e0',
}


def rows_digest(rows, count: int = 20) -> str:
  """The digest ROW_DIGESTS holds: every feature's name, dtype, shape and bytes of the first
  `count` rows of `rows` (anything indexable by row)."""
  digest = hashlib.sha256()
  for i in range(count):
    row = rows[i]
    for key in sorted(row):
      value = np.asarray(row[key])
      digest.update(f'{key} {value.dtype} {value.shape}'.encode())
      digest.update(value.tobytes())
  return digest.hexdigest()[:16]


@pytest.mark.parametrize('task,multiple,split', sorted(ROW_DIGESTS))
def test_rows_are_the_rows_recorded_runs_trained_on(task, multiple, split):
  cfg = synthetic_config.get_config(task)
  source = synthetic.Source(synthetic.Split(cfg.data.synthetic, task, split),
                            multiple * cfg.data.seq_len, 1)
  assert rows_digest(source) == ROW_DIGESTS[task, multiple, split]


def test_threads_reading_rows_at_once_get_every_rows_filler():
  """The filler's cache is shared by a split's rows: readers on several threads (grain's, for
  TextRows) each get complete sentence starts while it grows."""
  cfg = synthetic_config.get_config('passkey').data.synthetic
  reference = synthetic.Vocabulary(cfg, 'passkey')
  expected = {count: reference.filler_run(3, count)[1].tolist() for count in range(0, 4000, 97)}
  interval = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)  # Threads switch between any two bytecodes, often.
  try:
    for _ in range(10):
      vocab = synthetic.Vocabulary(cfg, 'passkey')
      with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda c, v=vocab: (c, v.filler_run(3, c)[1].tolist()), expected))
      assert dict(got) == expected
  finally:
    sys.setswitchinterval(interval)


def test_a_filler_run_is_the_cycle_of_sentences_from_its_start():
  vocab = synthetic.Vocabulary(synthetic_config.get_config('passkey').data.synthetic, 'passkey')
  cycle = vocab.filler
  for start in range(len(cycle)):
    for count in (0, 1, 9, 40, 333, 2000):
      sentences, total, starts = [], 0, [0]  # One sentence after another from `start`.
      while total < count:
        sentences.append(cycle[(start + len(sentences)) % len(cycle)])
        total += len(sentences[-1])
        starts.append(total)
      tokens, bounds = vocab.filler_run(start, count)
      expected = np.concatenate(sentences)[:count] if sentences else np.zeros(0)
      assert np.array_equal(tokens, expected)
      assert bounds.tolist() == [b for b in starts if b <= count]


@pytest.mark.parametrize('split,train,batch,shard', [
    ('train', True, 8, (0, 1)), ('train', True, 4, (1, 2)), ('validation', False, 100, (0, 1)),
    ('validation', False, 30, (1, 2))])
def test_batches_are_grains_batches_of_the_same_rows_with_its_state(split, train, batch, shard):
  """synthetic_batches.synthetic_dataset builds batches itself (for speed): the same batches as
  grain's MapDataset -> batch of the same rows (this process's share, a short last evaluation batch),
  and the same iterator state, so a checkpoint of either resumes in the other."""
  import grain  # pylint: disable=import-outside-toplevel
  index, count = shard
  cfg = options(eval_examples=250)
  rows = synthetic.Source(synthetic.Split(cfg, 'associative_recall', split), 16, 3)
  reference = iter(grain.MapDataset.source(rows)[index::count].to_iter_dataset().batch(
      batch, drop_remainder=train))
  make = lambda: iter(synthetic_batches.synthetic_dataset(
      synthetic.Split(cfg, 'associative_recall', split), seq_len=16, batch_size=batch, seed=3,
      train=train, shard_index=index, shard_count=count))
  ours, seen = make(), 0
  for expected in reference:
    got = next(ours)
    assert sorted(got) == sorted(expected)
    assert all(np.array_equal(got[k], expected[k]) for k in expected)
    assert ours.get_state() == reference.get_state()
    seen += 1
    if train and seen == 5:
      break
  if not train:
    assert seen == -(-len(range(index, 250, count)) // batch)
    with pytest.raises(StopIteration):
      next(ours)
  resumed = make()
  resumed.set_state({'next_index': batch})  # Grain's state after one batch.
  reference = iter(grain.MapDataset.source(rows)[index::count].to_iter_dataset().batch(
      batch, drop_remainder=train))
  next(reference)
  got, expected = next(resumed), next(reference)
  assert all(np.array_equal(got[k], expected[k]) for k in expected)


# The lengths each task's answer bound is checked at: its training length (configs/synthetic.py)
# and 2x and 4x it, as evaluation builds them.
BOUND_LENGTHS = {task: [synthetic_config.TASKS[task]['seq_len'] * m for m in (1, 2, 4)]
                 for task in synthetic.TASKS}


@pytest.mark.parametrize('task', synthetic.TASKS)
def test_no_row_holds_more_answer_tokens_than_the_bound_and_fixed_answers_meet_it(task):
  """answer_tokens bounds every row's weighted targets (the gathered output layer leaves
  nothing out); the tasks whose answers have a fixed size meet it on every row, copy's on its
  longest copies."""
  for length in BOUND_LENGTHS[task]:
    src = source(task, 'train', length, run_seed=3,
                 **synthetic_config.TASKS[task].get('data', {}))
    bound = synthetic.answer_tokens(task, src.cfg, length)
    counts = np.count_nonzero(src.stacked(range(300))['weights'], axis=-1)
    assert counts.max() <= bound and counts.min() >= (task != 'flip_flop')  # It may read none.
    if task not in ('copy', 'flip_flop'):
      assert (counts == bound).all()
    if task == 'copy':  # The count is drawn up to what fits: some of 300 rows fill the row.
      assert counts.max() == bound
  assert synthetic.answer_tokens('copy', options(), 32) == 15  # A copy of 15 fills 32.
  row = synthetic.make_row(np.arange(33), [(17, 32)], 0, 32)  # 15 symbols copied.
  assert np.count_nonzero(row['weights']) == 15


def test_a_row_over_the_answer_bound_is_refused_by_name(monkeypatch):
  monkeypatch.setattr(synthetic, 'answer_tokens', lambda task, cfg, length: 1)
  with pytest.raises(errors.DataError, match='copy row of 32 tokens holds .* answer tokens'):
    source('copy', length=32).stacked(range(8))


# Two answer layouts by default (one answer at the end, an answer as long as the input); the
# other tasks' with -m slow.
GATHERED = [('passkey', 64), ('copy', 32)] + [
    pytest.param(task, length, marks=pytest.mark.slow) for task, length in (
        ('associative_recall', 16), ('flip_flop', 16), ('niah_multikey', 48),
        ('variable_tracking', 64))]


@pytest.mark.parametrize('task,length', GATHERED)
def test_the_output_layer_at_the_answers_only_gives_the_sums_and_gradients_of_every_position(
    task, length):
  """The loss, accuracy and evaluation counts (rows right, per depth band, per position
  bucket) with the output layer at the answer slots only equal those of the whole output
  layer, and so does the training objective's gradient."""
  cfg, model = _trained_like(task, **synthetic_config.TASKS[task].get('data', {}))
  src = synthetic.Source(synthetic.Split(cfg.data.synthetic, task, 'validation'), length)
  batch = {k: jnp.asarray(v) for k, v in src.stacked(range(24)).items()}
  bound = functools.partial(synthetic.answer_tokens, task, src.cfg)
  gathered = tasks.SyntheticTask(task, 4, position_bucket=8, answer_tokens=bound)
  whole = tasks.SyntheticTask(task, 4, position_bucket=8)
  assert gathered.answer_slots(length) == bound(length) < length
  assert whole.answer_slots(length) is None
  for fn in ('sums', 'eval_sums'):
    ours, theirs = (jax.device_get(nnx.jit(getattr(t, fn))(model, batch))
                    for t in (gathered, whole))
    assert ours.keys() == theirs.keys()
    for key in theirs:
      np.testing.assert_allclose(ours[key], theirs[key], rtol=2e-6, atol=2e-5, err_msg=key)
  grads = [nnx.jit(lambda m, t=t: nnx.state(nnx.grad(
      lambda m: t.sums(m, batch)['objective_sum'])(m), nnx.Param))(model)
           for t in (gathered, whole)]
  for a, b in zip(*(jax.tree.leaves(g) for g in grads)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_the_output_layer_runs_everywhere_when_answers_may_fill_the_row_or_have_no_bound():
  """answer_slots is None (every position) when the bound is no fewer than the positions, and
  when there is none: passkey in a corpus's text, whose key takes as many ids as the run's
  tokenizer makes of it."""
  task = tasks.SyntheticTask('copy', 1, answer_tokens=lambda length: length)
  assert task.answer_slots(8) is None
  assert tasks.for_config(synthetic_config.get_config('copy')).answer_slots(32) == 15
  config = synthetic_config.get_config('passkey')
  assert tasks.for_config(config).answer_slots(64) == 5
  config.data.synthetic.filler = 'text'
  assert synthetic.answer_tokens('passkey', config.data.synthetic, 64) is None
  assert tasks.for_config(config).answer_slots(64) is None
