"""Masked-LM pretraining: BERT's corruption, the loss on selected tokens only, a bidirectional
encoder that stays inside its packed segment, and a tiny run end to end."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import attention
from roformer import errors
from roformer import evaluate
from roformer import masking
from roformer import models
from roformer import resolve
from roformer import saved_config
from roformer import tasks
from roformer import workdir as workdir_lib
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import tokens as tokens_lib


def test_mask_tokens_follows_bert_proportions():
  rng = np.random.default_rng(0)
  inputs = rng.integers(tokenizer_lib.NUM_SPECIAL, 1000, (64, 512)).astype(np.int32)
  inputs[:, 0], inputs[:, 100] = tokenizer_lib.BOS_ID, tokenizer_lib.EOS_ID
  segments = np.ones_like(inputs)
  segments[:, 400:] = 0  # Padding.
  inputs[:, 400:] = 0
  corrupted, selected = map(np.asarray, masking.mask_tokens(
      jax.random.key(0), jnp.asarray(inputs), jnp.asarray(segments), mask_id=1000))
  real = (segments > 0) & (inputs > tokenizer_lib.BOS_ID)
  assert not selected[~real].any()  # Never padding, bos or eos.
  np.testing.assert_array_equal(corrupted[~selected], inputs[~selected])
  # Each share within 4 binomial standard errors of BERT's (25,472 real tokens, ~3,800 taken).
  near = lambda share, p, n: abs(share.mean() - p) < 4 * math.sqrt(p * (1 - p) / n)
  assert near(selected[real], 0.15, real.sum())
  masked = corrupted[selected] == 1000
  changed = (corrupted[selected] != inputs[selected]) & ~masked
  kept = corrupted[selected] == inputs[selected]
  taken = selected.sum()
  # A random replacement is the same token 1 time in 995 (ids 5-999).
  assert near(masked, 0.8, taken) and near(kept, 0.1 + 0.1 / 995, taken)
  assert near(changed, 0.1 - 0.1 / 995, taken)
  random_ids = corrupted[selected][~masked]
  assert random_ids.min() >= tokenizer_lib.NUM_SPECIAL and random_ids.max() < 1000


def _expected_excess(n, p, s):
  """E[(X - s)+] / E[X] for X ~ Binomial(n, p), every term from its closed form."""
  return sum((j - s) * math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                                + j * math.log(p) + (n - j) * math.log1p(-p))
             for j in range(s + 1, n + 1)) / (n * p)


def test_prediction_slots_by_hand():
  # One row of 128 at 15% (mean 19.2, std 4.04): E[(X - 32)+] = 1.0e-4 of the mean, 8e-8 past
  # 40 -> 40.
  assert masking.prediction_slots(-1, 0.15, 1, 128) == 40
  # Eight rows (mean 153.6, std 11.4): 1.1e-5 past 192, 8.0e-7 past 200 -> 200 of 1024.
  assert masking.prediction_slots(-1, 0.15, 8, 128) == 200
  assert masking.prediction_slots(20, 0.15, 8, 128) == 160  # BERT's 20 per row of 128.
  assert masking.prediction_slots(0, 0.15, 8, 128) is None  # Every position.
  assert masking.prediction_slots(-1, 0.5, 1, 16) is None  # The bound is all 16: nothing to save.
  assert masking.selection_bound(20, 1.0) == 24  # Every token, rounded up to a multiple of 8.


@pytest.mark.parametrize('rate', [0.01, 0.05, 0.15, 0.3, 0.7, 0.9])
def test_automatic_slots_are_the_smallest_multiple_of_8_losing_at_most_the_set_fraction(rate):
  for tokens in (1, 16, 20, 40, 128, 512, 1024, 4096):
    slots = masking.selection_bound(tokens, rate)
    assert slots % 8 == 0
    assert _expected_excess(tokens, rate, slots) <= masking.LOST_FRACTION
    if slots >= 8:
      assert _expected_excess(tokens, rate, slots - 8) > masking.LOST_FRACTION


def test_mask_cap_keeps_the_first_selections_of_each_block():
  inputs = jnp.asarray(np.arange(10, 34).reshape(4, 6), jnp.int32)
  segments = jnp.ones_like(inputs)
  corrupted, selected = map(np.asarray, masking.mask_tokens(
      jax.random.key(0), inputs, segments, mask_id=99, rate=1.0, mask_fraction=1.0,
      random_fraction=0.0, max_selected=4, groups=2))
  want = np.zeros((4, 6), bool)
  want[0, :4] = want[2, :4] = True  # Blocks of two rows (12 tokens); the first 4 of each.
  np.testing.assert_array_equal(selected, want)
  np.testing.assert_array_equal(corrupted, np.where(want, 99, np.asarray(inputs)))


def test_max_predictions_caps_each_row():
  """BERT's max_predictions_per_seq is per row: with every token selected (rate 1) and N = 3,
  a full row keeps 3 and a row with 2 real tokens keeps both: 5 in all (a cap on the whole
  batch's 6 slots would give the full row all 6)."""
  cfg = test_config.get_config('mlm')
  cfg.model.vocab_size = 64
  model = models.create(cfg.model, seed=1)
  segments = np.zeros((2, 32), np.int32)
  segments[0] = 1
  segments[1, :2] = 1
  batch = {'inputs': jnp.asarray(np.full((2, 32), 7) * (segments > 0), jnp.int32),
           'inputs_segment_ids': jnp.asarray(segments),
           'inputs_positions': jnp.broadcast_to(jnp.arange(32), (2, 32))}
  task = tasks.MaskedLanguageModeling(rate=1.0, max_predictions=3)
  assert masking.prediction_slots(3, 1.0, 2, 32) == 6  # The gathered path is taken.
  sums = nnx.jit(task.sums)(model, batch, jax.random.key(0))
  assert float(sums['weight']) == 5


def test_the_head_on_gathered_positions_or_in_chunks_equals_the_head_everywhere():
  """Sums and every parameter's gradient (label smoothing on, so the output bias gets the
  smoothing term too): the head at the gathered selections, and at every position chunk by
  chunk (5 positions per chunk: 32 in 7, the last padded), against the whole head; each with the
  logits' multiplier (model.logits_multiplier)."""
  cfg = test_config.get_config('mlm')
  cfg.model.vocab_size = 64
  cfg.model.logits_multiplier = 0.5
  model = models.create(cfg.model, seed=1)
  graphdef, params = nnx.split(model, nnx.Param)
  rng = np.random.default_rng(5)
  segments = np.ones((4, 32), np.int32)
  segments[1, 20:] = 2
  segments[3, 25:] = 0  # Padding.
  batch = {'inputs': jnp.asarray(rng.integers(5, 63, (4, 32)) * (segments > 0), jnp.int32),
           'inputs_segment_ids': jnp.asarray(segments),
           'inputs_positions': jnp.broadcast_to(jnp.arange(32), (4, 32))}
  key = jax.random.key(2)

  def loss_and_grads(max_predictions, loss_chunk=0):
    task = tasks.MaskedLanguageModeling(max_predictions=max_predictions, loss_chunk=loss_chunk)
    def loss(p):
      sums = task.sums(nnx.merge(graphdef, p), batch, key, label_smoothing=0.1)
      return 0.7 * sums['objective_sum'] + 0.2 * sums['loss_sum'], sums
    (_, sums), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return sums, grads

  assert masking.prediction_slots(-1, 0.15, 4, 32) == 40 < 128  # The gathered path is taken.
  everywhere, e_grads = loss_and_grads(0)
  assert float(everywhere['weight']) > 0
  assert np.abs(np.asarray(e_grads['output_bias'].value)).max() > 0
  for other in (loss_and_grads(-1), loss_and_grads(0, loss_chunk=5)):
    sums, grads = other
    assert float(sums['weight']) == float(everywhere['weight'])
    assert float(sums['tokens']) == float(everywhere['tokens'])
    for name in ('loss_sum', 'objective_sum', 'correct'):
      np.testing.assert_allclose(float(sums[name]), float(everywhere[name]), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(e_grads)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


@pytest.fixture(scope='module')
def tiny_mlm():
  cfg = test_config.get_config('mlm')
  cfg.model.vocab_size = 64
  return cfg, models.create(cfg.model, seed=0)


def test_encoder_is_bidirectional_within_its_segment(tiny_mlm):
  _, model = tiny_mlm
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(rng.integers(5, 63, (1, 12)), jnp.int32)
  segments = jnp.asarray([[1] * 6 + [2] * 6], jnp.int32)
  positions = jnp.asarray([list(range(6)) * 2], jnp.int32)
  base = np.asarray(model(tokens, positions, segments))
  changed = np.asarray(model(tokens.at[0, 4].set(7 if tokens[0, 4] != 7 else 8), positions,
                             segments))
  diff = np.abs(changed - base).max(-1)[0]
  assert (diff[:4] > 1e-6).all()  # Earlier tokens see a later one: not causal.
  assert (diff[6:] == 0).all()  # The next packed document does not.


def test_loss_counts_selected_tokens_only(tiny_mlm):
  cfg, model = tiny_mlm
  task = tasks.for_config(cfg)
  rng = np.random.default_rng(2)
  batch = {'inputs': jnp.asarray(rng.integers(5, 63, (4, 32)), jnp.int32),
           'inputs_segment_ids': jnp.ones((4, 32), jnp.int32),
           'inputs_positions': jnp.broadcast_to(jnp.arange(32), (4, 32))}
  key = jax.random.key(3)
  sums = nnx.jit(task.sums)(model, batch, key)
  mask_key, _ = jax.random.split(key)
  corrupted, selected = masking.mask_tokens(mask_key, batch['inputs'], batch['inputs_segment_ids'],
                                          mask_id=63)
  logits = np.asarray(model(corrupted, batch['inputs_positions'], batch['inputs_segment_ids']),
                      np.float64)
  logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)
                         ) - logits.max(-1, keepdims=True)
  ce = -np.take_along_axis(logp, np.asarray(batch['inputs'])[..., None], -1)[..., 0]
  sel = np.asarray(selected)
  assert float(sums['weight']) == sel.sum() > 0 and float(sums['tokens']) == 128
  np.testing.assert_allclose(float(sums['loss_sum']), ce[sel].sum(), rtol=1e-5)
  # Evaluation masks depend on the batch only: the same batch, the same loss.
  eval_sums = nnx.jit(task.sums)
  first, second = eval_sums(model, batch), eval_sums(model, batch)
  assert float(first['loss_sum']) == float(second['loss_sum'])
  # ... and other batches get other masks (counts of selected tokens differ somewhere).
  counts = {float(eval_sums(model, {**batch, 'inputs': batch['inputs'].at[0, 0].set(t)})[
      'weight']) for t in range(5, 10)}
  assert len(counts) > 1


def test_mlm_chunks_are_unshifted_and_packed(data_dir):
  cfg = test_config.get_config('mlm')
  cfg.data.data_dir = data_dir
  sources, tok = workdir_lib.setup_data(cfg, splits=('validation',))
  assert cfg.model.vocab_size == tok.vocab_size + 1  # The [MASK] id.
  batch = next(iter(tasks.for_config(cfg).batches(cfg, sources['validation'], tok,
                                                  train=False)))
  assert set(batch) == {'inputs', 'inputs_segment_ids', 'inputs_positions'}
  first = tokens_lib.as_text(sources['validation'][0]['text'])
  expected = np.concatenate([[tokenizer_lib.BOS_ID], tok.encode(first)])[:cfg.data.seq_len]
  np.testing.assert_array_equal(batch['inputs'][0, :len(expected)], expected)


def test_mlm_trains_and_evaluates(mlm_workdir):
  workdir, last = mlm_workdir
  cfg = saved_config.load(workdir)
  assert last['validation']['loss'] < np.log(cfg.model.vocab_size)  # Better than uniform.
  assert os.path.exists(os.path.join(workdir, workdir_lib.TOKENIZER_FILE))
  results = evaluate.evaluate_workdir(cfg, workdir)
  row = results['splits']['validation']['lengths'][0]
  assert row['loss'] == pytest.approx(last['validation']['loss'], rel=1e-5)  # Same masks.
  assert row['tokens'] == last['validation']['tokens'] > 0


@pytest.mark.parametrize('field,value,match', [
    ('data.mask_rate', 0.0, 'mask_rate'),
    ('data.mask_fraction', 0.95, 'sum <= 1'),
    ('model.norm', 'middle', 'config.model.norm'),
    ('model.activation', 'swish', 'config.model.activation'),
    ('data.max_predictions', -2, 'config.data.max_predictions'),
])
def test_bad_mlm_options_are_refused(field, value, match):
  cfg = test_config.get_config('mlm')
  section, name = field.split('.')
  cfg[section][name] = value
  with pytest.raises(errors.ConfigError, match=match):
    resolve.validate(cfg)


def _f64(dense):
  """A dense layer's (kernel, bias) in float64."""
  return np.asarray(dense.kernel.value, np.float64), np.asarray(dense.bias.value, np.float64)


def _layer_norm(h, norm):
  """LayerNorm of h over its last axis with `norm`'s scale and bias, in float64."""
  mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
  return (h - mu) / np.sqrt(var + 1e-6) * np.asarray(norm.scale.value) + np.asarray(
      norm.bias.value)


def _attention(block, x):
  """The block's bidirectional self-attention of x [1, 5, 32] (12 heads of 8, no positions)
  through its projections, in float64."""
  w, b = _f64(block.attn.qkv)
  q, k, v = np.split((x @ w + b).reshape(1, 5, 12, 8), 3, axis=2)
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(8)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  wo, bo = _f64(block.attn.out)
  return np.einsum('bhqk,bkhd->bqhd', probs, v).reshape(1, 5, 32) @ wo + bo


def _block_output(model, block, x):
  """The block's output for x [1, 5, 32], bidirectional over the 5 positions."""
  mask = attention.make_mask(jnp.ones((1, 5), jnp.int32), jnp.ones((1, 5), jnp.int32),
                             causal=False)
  out, _ = block(jnp.asarray(x, jnp.float32), mask, jnp.arange(5)[None], model.position())
  return np.asarray(out)


def test_post_norm_block_matches_its_formula():
  """norm='post': LN(x + attn(x)) then LN(x + mlp(x)), checked against float64 numpy."""
  cfg = test_config.get_config('mlm')
  cfg.model.update(norm='post', activation='gelu', num_layers=1, vocab_size=40,
                   position=cfg.model.position)
  cfg.model.position.kind = 'none'
  model = models.create(cfg.model, seed=1)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(1, 5, 32))
  block = model.blocks[0]
  h = _layer_norm(x + _attention(block, x), block.ln_attn)
  (wu, bu), (wd, bd) = _f64(block.mlp.up), _f64(block.mlp.down)
  import math  # pylint: disable=g-import-not-at-top
  gelu = np.vectorize(lambda z: 0.5 * z * (1 + math.erf(z / math.sqrt(2))))
  expected = _layer_norm(h + gelu(h @ wu + bu) @ wd + bd, block.ln_mlp)
  np.testing.assert_allclose(_block_output(model, block, x), expected, atol=2e-5)


def test_sandwich_block_matches_its_formula():
  """norm='sandwich' (Gemma's): x + LN_2(attn(LN_1 x)), then h + LN_4(mlp(LN_3 h)), each norm
  with its own scale and bias drawn at random, checked against float64 numpy."""
  cfg = test_config.get_config('mlm')
  cfg.model.update(norm='sandwich', activation='relu', num_layers=1, vocab_size=40)
  cfg.model.position.kind = 'none'
  model = models.create(cfg.model, seed=1)
  block = model.blocks[0]
  rng = np.random.default_rng(0)
  for norm in (block.ln_attn, block.ln_attn_out, block.ln_mlp, block.ln_mlp_out):
    norm.scale.value = jnp.asarray(rng.uniform(0.5, 2.0, 32), jnp.float32)
    norm.bias.value = jnp.asarray(rng.normal(size=32) * 0.3, jnp.float32)
  x = rng.normal(size=(1, 5, 32))
  h = x + _layer_norm(_attention(block, _layer_norm(x, block.ln_attn)), block.ln_attn_out)
  (wu, bu), (wd, bd) = _f64(block.mlp.up), _f64(block.mlp.down)
  expected = h + _layer_norm(
      np.maximum(_layer_norm(h, block.ln_mlp) @ wu + bu, 0) @ wd + bd, block.ln_mlp_out)
  np.testing.assert_allclose(_block_output(model, block, x), expected, atol=2e-5)


def test_output_norm_block_matches_its_formula():
  """norm='output' (OLMo 2's): x + LN_a(attn(x)), then h + LN_m(mlp(h)), with no norm before
  either branch; each norm with its own scale and bias drawn at random, checked against float64
  numpy."""
  cfg = test_config.get_config('mlm')
  cfg.model.update(norm='output', activation='relu', num_layers=1, vocab_size=40)
  cfg.model.position.kind = 'none'
  model = models.create(cfg.model, seed=1)
  block = model.blocks[0]
  assert not hasattr(block, 'ln_attn') and not hasattr(block, 'ln_mlp')
  rng = np.random.default_rng(0)
  for norm in (block.ln_attn_out, block.ln_mlp_out):
    norm.scale.value = jnp.asarray(rng.uniform(0.5, 2.0, 32), jnp.float32)
    norm.bias.value = jnp.asarray(rng.normal(size=32) * 0.3, jnp.float32)
  x = rng.normal(size=(1, 5, 32))
  h = x + _layer_norm(_attention(block, x), block.ln_attn_out)
  (wu, bu), (wd, bd) = _f64(block.mlp.up), _f64(block.mlp.down)
  expected = h + _layer_norm(np.maximum(h @ wu + bu, 0) @ wd + bd, block.ln_mlp_out)
  np.testing.assert_allclose(_block_output(model, block, x), expected, atol=2e-5)
