"""The mixture-of-experts MLP (roformer/moe.py) against a float64 formula token by token, its two
computations against each other, its training losses against theirs, and the train step that adds
them (roformer/auxiliary.py)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import auxiliary
from roformer import errors
from roformer import flops
from roformer import layers
from roformer import models
from roformer import moe
from roformer import resolve
from roformer import saved_config
from roformer import steps
from roformer import tasks
from tests import kinds

X = np.random.default_rng(0).normal(size=(2, 7, 32))


def _cfg(**moe_fields):
  cfg = test_config.get_config().model
  cfg.update(vocab_size=64, mlp='moe', activation='silu', biases='none', init='normal',
             init_std=0.3)
  cfg.moe.update({'num_experts': 5, 'experts_per_token': 2, **moe_fields})
  return cfg


def _layer(cfg, seed=0):
  return layers.mlp(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))


def _float64(layer, x, k, renormalize, limit=0.0, alpha=1.702, llama4=False):
  """Each token's experts chosen and weighted by hand, in float64; with biases where the layer
  has them, gpt-oss's clamped SwiGLU at `limit` > 0 (gain `alpha`), and Llama 4's routing
  (`llama4`: the chosen logits' sigmoids, weighting the experts' inputs; the shared expert
  ungated)."""
  names = ('router', 'gate', 'up', 'down')
  p = {n: np.asarray(getattr(layer, n)[...], np.float64) for n in names}
  b = {n: (np.asarray(getattr(layer, n + '_bias')[...], np.float64) if layer.biased
           else np.zeros(p[n].shape[::2] if n != 'router' else p[n].shape[-1:]))
       for n in names}
  silu = lambda v: v / (1 + np.exp(-v))

  def hidden(g, u):
    if not limit:
      return silu(g) * u
    g = np.minimum(g, limit)
    return g / (1 + np.exp(-alpha * g)) * (np.clip(u, -limit, limit) + 1)
  out = np.zeros_like(x)
  for index in np.ndindex(x.shape[:-1]):
    t = x[index]
    logits = t @ p['router'] + b['router']
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    top = np.argsort(-probs)[:k]
    w = 1 / (1 + np.exp(-logits[top])) if llama4 else probs[top]
    w = w / (w.sum() if renormalize else 1.0)
    for e, we in zip(top, w):
      u = we * t if llama4 else t
      h = hidden(u @ p['gate'][e] + b['gate'][e], u @ p['up'][e] + b['up'][e])
      out[index] += (1.0 if llama4 else we) * (h @ p['down'][e] + b['down'][e])
    if layer.shared is not None:
      s = {n: np.asarray(getattr(layer.shared, n).kernel[...], np.float64)
           for n in ('gate', 'up', 'down')}
      g = 1.0 if llama4 else 1 / (1 + np.exp(-(t @ np.asarray(layer.shared_gate[...],
                                                               np.float64))))
      out[index] += g * (silu(t @ s['gate']) * (t @ s['up'])) @ s['down']
  return out


@pytest.mark.parametrize('impl', moe.IMPLEMENTATIONS)
@pytest.mark.parametrize('renormalize,shared', [(True, 0), (False, 0), (False, 24)])
def test_each_token_is_the_weighted_sum_of_its_k_experts(impl, renormalize, shared):
  """Mixtral's renormalized top-k, OLMoE's softmax weights, Qwen2-MoE's gated shared expert."""
  layer = _layer(_cfg(impl=impl, renormalize=renormalize, shared_d_ff=shared))
  got = np.asarray(layer(jnp.asarray(X, jnp.float32)))
  np.testing.assert_allclose(got, _float64(layer, X, 2, renormalize), rtol=2e-5, atol=2e-6)


LLAMA4 = dict(router='sigmoid', weight_inputs=True, shared_gate=False, renormalize=False,
              shared_d_ff=24)


@pytest.mark.parametrize('impl', moe.IMPLEMENTATIONS)
@pytest.mark.parametrize('k', [1, 2])
def test_llama4_experts_take_their_sigmoid_weighted_inputs_beside_an_ungated_shared_one(impl, k):
  """Llama 4 routes each token to k (1 in its models) experts weighted by sigmoid(logit), the
  weight multiplying the expert's input (not its output), plus a shared expert without a gate:
  against float64; the output-weighted mixture is another function."""
  layer = _layer(_cfg(impl=impl, experts_per_token=k, **LLAMA4))
  assert not hasattr(layer, 'shared_gate')
  got = np.asarray(layer(jnp.asarray(X, jnp.float32)))
  np.testing.assert_allclose(got, _float64(layer, X, k, False, llama4=True), rtol=2e-5,
                             atol=2e-5)
  other = _layer(_cfg(impl=impl, experts_per_token=k, **dict(LLAMA4, weight_inputs=False)))
  assert np.abs(np.asarray(other(jnp.asarray(X, jnp.float32))) - got).max() > 1e-3


def test_llama4_experts_compute_the_same_dense_and_ragged_with_gradients():
  x = jnp.asarray(X, jnp.float32)

  def run(impl):
    loss = lambda m: jnp.sum(m(x) * jnp.cos(jnp.arange(x.size).reshape(x.shape)))
    return nnx.value_and_grad(loss)(_layer(_cfg(impl=impl, **LLAMA4)))
  (dense, dense_grads), (ragged, ragged_grads) = run('dense'), run('ragged')
  np.testing.assert_allclose(ragged, dense, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(ragged_grads), jax.tree.leaves(dense_grads)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_experts_are_chosen_by_their_logits_where_the_softmax_underflows():
  """Logits 150 above the rest: the softmax of the others is 0, and its ties would pick the
  lowest index; the k largest logits decide, as transformers' topk over the logits (Llama 4's
  sigmoid router then weights the second 0.5, not 4.5e-5)."""
  logits = jnp.asarray([[150.0, -10.0, 0.0, -20.0]])
  for router, want in (('sigmoid', [1.0, 0.5]), ('softmax', [1.0, 0.0])):
    _, chosen, weights = moe.route(logits, 2, False, router)
    assert chosen.tolist() == [[0, 2]], router
    np.testing.assert_allclose(np.asarray(weights)[0], want, atol=1e-7)


def _gpt_oss_layer(impl, limit=1.5):
  """gpt-oss's experts, their biases drawn (they start at 0) and a limit that binds."""
  layer = _layer(_cfg(impl=impl, biases=True, swiglu_limit=limit))
  rng = np.random.default_rng(1)
  for name in ('router_bias', 'gate_bias', 'up_bias', 'down_bias'):
    param = getattr(layer, name)
    param.value = jnp.asarray(rng.normal(size=param.value.shape), jnp.float32)
  return layer


@pytest.mark.parametrize('impl', moe.IMPLEMENTATIONS)
def test_gpt_oss_experts_are_their_formula_with_biases_and_the_clamp(impl):
  """A bias on the router's logits and on each projection, and the SwiGLU with the gate
  clamped above at c and the up projection to [-c, c], plus 1: against float64 token by token;
  the clamp binds (without it, another output)."""
  layer = _gpt_oss_layer(impl)
  got = np.asarray(layer(jnp.asarray(X, jnp.float32)))
  np.testing.assert_allclose(got, _float64(layer, X, 2, True, limit=1.5), rtol=2e-5, atol=2e-5)
  assert np.abs(_float64(layer, X, 2, True, limit=1e6) - got).max() > 1e-2


def test_gpt_oss_experts_compute_the_same_dense_and_ragged_with_gradients():
  x = jnp.asarray(X, jnp.float32)

  def run(impl):
    loss = lambda m: jnp.sum(m(x) * jnp.cos(jnp.arange(x.size).reshape(x.shape)))
    return nnx.value_and_grad(loss)(_gpt_oss_layer(impl))
  (dense, dense_grads), (ragged, ragged_grads) = run('dense'), run('ragged')
  np.testing.assert_allclose(ragged, dense, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(ragged_grads), jax.tree.leaves(dense_grads)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  assert all(np.abs(np.asarray(g)).max() > 0 for g in jax.tree.leaves(dense_grads))


def test_the_dense_and_ragged_computations_give_the_same_outputs_and_gradients():
  x = jnp.asarray(X, jnp.float32)

  def run(impl):
    layer = _layer(_cfg(impl=impl, experts_per_token=3, shared_d_ff=8))
    loss = lambda m: jnp.sum(m(x) * jnp.cos(jnp.arange(x.size).reshape(x.shape)))
    return nnx.value_and_grad(loss)(layer)
  (dense, dense_grads), (ragged, ragged_grads) = run('dense'), run('ragged')
  np.testing.assert_allclose(ragged, dense, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(ragged_grads), jax.tree.leaves(dense_grads)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_the_balance_loss_is_k_at_a_uniform_routing_and_the_formula_otherwise():
  rng = np.random.default_rng(1)
  probs = rng.dirichlet(np.ones(4), size=6)
  chosen = np.argsort(-probs, -1)[:, :2]
  counts = np.stack([np.bincount(c, minlength=4) for c in chosen])
  want = 4 * np.sum(counts.mean(0) * probs.mean(0))
  np.testing.assert_allclose(moe.balance(jnp.asarray(probs, jnp.float32), jnp.asarray(chosen)),
                             want, rtol=1e-6)
  uniform = jnp.full((6, 4), 0.25)
  assert float(moe.balance(uniform, jnp.asarray(chosen))) == pytest.approx(2.0)


def test_training_sows_the_weighted_losses_and_evaluation_sows_nothing():
  cfg = _cfg(balance_loss=0.1, router_z_loss=0.01)
  layer = _layer(cfg)
  x = jnp.asarray(X, jnp.float32)
  with auxiliary.collecting():
    out, aux = auxiliary.total(lambda m: m(x), layer)
  logits = X.reshape(-1, 32) @ np.asarray(layer.router[...], np.float64)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  chosen = np.argsort(-probs, -1)[:, :2]
  share = np.stack([np.bincount(c, minlength=5) for c in chosen]).mean(0)
  z = np.log(np.exp(logits).sum(-1))
  want = 0.1 * 5 * np.sum(share * probs.mean(0)) + 0.01 * np.mean(z ** 2)
  np.testing.assert_allclose(aux, want, rtol=1e-5)
  assert auxiliary.total(lambda m: m(x), layer)[1] is None  # Not collecting.
  np.testing.assert_array_equal(out, layer(x))


def _lm_config(**fields):
  config = kinds.tiny_config('rope', num_layers=3, mlp='moe', activation='silu', biases='none')
  config.model.moe.update(num_experts=4, experts_per_token=2, balance_loss=0.5,
                          router_z_loss=0.1, **fields)
  return config


def test_the_train_step_adds_the_auxiliary_losses_once_per_target_token():
  """The step's gradient is the loss's plus the layers' auxiliary losses' (summed over the
  layers), and `auxiliary_loss` logs their sum; evaluation's loss is the cross-entropy alone."""
  config = _lm_config()
  model = models.create(config.model, seed=0)
  graphdef, params = nnx.split(model)
  task = tasks.for_config(config)
  rng = np.random.default_rng(2)
  tokens = rng.integers(5, config.model.vocab_size, (2, 9)).astype(np.int32)
  ones = np.ones_like(tokens)
  batch = {'inputs': tokens, 'targets': np.roll(tokens, -1, 1), 'inputs_segment_ids': ones,
           'targets_segment_ids': ones, 'inputs_positions': np.arange(9)[None].repeat(2, 0),
           'targets_positions': np.arange(9)[None].repeat(2, 0)}

  def by_hand(params):
    m = nnx.merge(graphdef, params)
    with auxiliary.collecting():
      sums, aux = auxiliary.total(lambda m: task.sums(m, batch), m)
    return sums['loss_sum'] / sums['weight'] + aux, aux

  (want, aux), want_grads = jax.jit(jax.value_and_grad(by_hand, has_aux=True))(params)
  assert float(aux) > 0
  state = {'params': params, 'opt_state': None, 'step': jnp.int32(0)}
  grads = {}

  class Capture:
    def update(self, g, opt_state, params):
      grads['g'] = g
      return jax.tree.map(jnp.zeros_like, g), opt_state

  @jax.jit  # The gradient the optimizer is handed, as an output of the same program.
  def step(state):
    _, metrics = steps.train_step(state, batch, 0, graphdef=graphdef, tx=Capture(),
                                  schedule=lambda s: 0.0, task=task, label_smoothing=0.0)
    return metrics, grads.pop('g')
  metrics, handed = step(state)
  np.testing.assert_allclose(metrics['auxiliary_loss'], aux, rtol=1e-6)
  np.testing.assert_allclose(metrics['loss'] + metrics['auxiliary_loss'], want, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(handed), jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  eval_sums = jax.jit(lambda p: task.eval_sums(nnx.merge(graphdef, p), batch))(params)
  np.testing.assert_allclose(eval_sums['loss_sum'] / eval_sums['weight'], metrics['loss'],
                             rtol=1e-6)


def test_a_scanned_stack_collects_its_blocks_auxiliary_losses():
  """Three layers scanned (a period of one: two inside the scan's output and none after it would
  hide a lost layer, so a hybrid of period 2 leaves one after the scan) add the loop's total."""
  config = _lm_config()
  config.model.layer_windows = (0, 4)
  tokens = jnp.asarray(np.random.default_rng(3).integers(5, 50, (2, 8)), jnp.int32)
  pos, seg = jnp.broadcast_to(jnp.arange(8), (2, 8)), jnp.ones((2, 8), jnp.int32)

  def total(scan):
    config.model.scan_layers = scan
    model = models.create(config.model, seed=4)
    with auxiliary.collecting():
      return auxiliary.total(lambda m: m(tokens, pos, seg), model)[1]
  loop, scanned = total(False), total(True)
  assert float(loop) > 0
  np.testing.assert_allclose(scanned, loop, rtol=1e-5)


def test_a_mixture_decodes_with_its_cache_as_its_full_pass():
  model = models.create(_lm_config(impl='ragged').model, seed=1)
  tokens = jnp.asarray(np.random.default_rng(4).integers(5, 50, (2, 9)), jnp.int32)
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 4))


def test_flops_count_the_router_and_k_experts():
  cfg = _cfg(shared_d_ff=24)
  d, f = cfg.d_model, cfg.d_ff
  want = 2 * d * 5 + 2 * (2 * 3 * d * f) + 2 * 3 * d * 24 + 2 * d
  dense = flops.layer_flops_per_token(_cfg(shared_d_ff=24), 16, True)
  cfg.mlp = 'gated'
  assert dense - flops.layer_flops_per_token(cfg, 16, True) == want - 2 * 3 * d * f


@pytest.mark.parametrize('fields,named', [
    (dict(biases='all'), 'config.model.biases'),
    (dict(moe=dict(num_experts=2, experts_per_token=3)), 'config.model.moe.experts_per_token'),
    (dict(moe=dict(swiglu_alpha=2.0)), 'config.model.moe.swiglu_alpha'),
    (dict(moe=dict(groups=3)), 'config.model.moe.groups=3 does not split'),
    (dict(moe=dict(choice_bias_rate=0.001)), 'config.model.moe.choice_bias_rate=0.001 moves'),
    (dict(moe=dict(balance_scores='normalized')), "balance_scores='normalized' normalizes"),
    (dict(moe=dict(groups_per_token=2)), 'config.model.moe.groups_per_token=2 and group_score'),
    (dict(moe=dict(group_score='best')), "group_score='best' are read only with groups"),
    (dict(moe=dict(num_experts=8, groups=4, groups_per_token=5)),
     'config.model.moe.groups_per_token=5 of 4 groups'),
    (dict(moe=dict(num_experts=8, experts_per_token=3, groups=4)),
     'config.model.moe.groups_per_token=1 of 4 groups'),
    (dict(moe=dict(dense_layers=(0, 9))), 'config.model.moe.dense_layers=(0, 9) names a layer'),
    (dict(moe=dict(dense_layers=(1, 1))), 'config.model.moe.dense_layers=(1, 1) names a layer'),
    (dict(num_layers=2, moe=dict(dense_layers=(1, 0))), 'names every layer'),
    (dict(moe=dict(dense_d_ff=64)), 'config.model.moe.dense_d_ff=64 is the width')])
def test_bad_mixtures_are_refused_naming_the_field(fields, named):
  config = test_config.get_config()
  config.model.update(mlp='moe')
  config.model.biases = 'none'
  for key, value in fields.items():
    if isinstance(value, dict):
      config.model[key].update(value)
    else:
      config.model[key] = value
  with pytest.raises(errors.ConfigError, match=re.escape(named)):
    resolve.validate(config)


def test_a_mixture_may_change_its_computation_anywhere_and_its_losses_when_continued():
  """The experts' computation is the same function on any occasion, the router's losses a
  setting of the next training; the experts themselves are the trained model's."""
  saved = _lm_config()

  def changed(occasion, **fields):
    config = _lm_config()
    config.model.moe.update(fields)
    return saved_config.changed(saved, config, occasion)
  assert changed('evaluate', impl='ragged') == changed('resume', impl='ragged') == []
  assert changed('continue', balance_loss=0.1, router_z_loss=0.001) == []
  assert changed('resume', balance_loss=0.1)[0].startswith('model.moe.balance_loss')
  assert changed('continue', num_experts=8)[0].startswith('model.moe.num_experts')
  assert changed('continue', dense_layers=(0,))[0].startswith('model.moe.dense_layers')
  assert changed('evaluate', dense_d_ff=8)[0].startswith('model.moe.dense_d_ff')


def test_the_dense_layers_have_a_gated_mlp_of_their_width_and_the_others_the_mixture():
  """moe.dense_layers (0 and 2 of 3) hold down(silu(x W_g) * x W_u) of width dense_d_ff, in
  float64 from their kernels; the auxiliary losses come from layer 1 alone, and a scanned stack
  (period 2, layer 2 after the scan) adds the same outputs and losses as the loop."""
  config = _lm_config(dense_layers=(0, 2), dense_d_ff=24)
  model = models.create(config.model, seed=5)
  widths = [block.mlp.gate.kernel.shape[-1] if isinstance(block.mlp, layers.GatedMLP) else None
            for block in model.blocks]
  assert widths == [24, None, 24]
  assert isinstance(model.blocks[1].mlp, moe.MixtureOfExperts)
  x = np.random.default_rng(6).normal(size=(2, 5, config.model.d_model))
  mlp = model.blocks[2].mlp
  g, u, w = (np.asarray(getattr(mlp, n).kernel[...], np.float64) for n in ('gate', 'up', 'down'))
  gate = x @ g
  want = (gate / (1 + np.exp(-gate)) * (x @ u)) @ w
  np.testing.assert_allclose(mlp(jnp.asarray(x, jnp.float32)), want, rtol=1e-5, atol=1e-6)

  tokens = jnp.asarray(np.random.default_rng(7).integers(5, 50, (2, 8)), jnp.int32)
  pos, seg = jnp.broadcast_to(jnp.arange(8), (2, 8)), jnp.ones((2, 8), jnp.int32)
  with auxiliary.collecting():
    out, aux = auxiliary.total(lambda m: m(tokens, pos, seg), model)
    h = jnp.asarray(np.random.default_rng(8).normal(size=(2, 8, config.model.d_model)),
                    jnp.float32)
    one = auxiliary.total(lambda m: m(h), model.blocks[1].mlp)[1]
    assert auxiliary.total(lambda m: m(h), model.blocks[0].mlp)[1] is None
  assert float(aux) > 0 and float(one) > 0
  config.model.scan_layers = True
  scanned = models.create(config.model, seed=5)
  assert scanned.blocks.period == 2
  with auxiliary.collecting():
    scan_out, scan_aux = auxiliary.total(lambda m: m(tokens, pos, seg), scanned)
  np.testing.assert_allclose(scan_out, out, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(scan_aux, aux, rtol=1e-5)


def test_a_mixture_with_dense_layers_decodes_with_its_cache_as_its_full_pass():
  model = models.create(_lm_config(dense_layers=(1,), dense_d_ff=16).model, seed=1)
  tokens = jnp.asarray(np.random.default_rng(4).integers(5, 50, (2, 9)), jnp.int32)
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 4))


def test_flops_of_dense_layers_are_a_gated_mlps_in_the_mean_over_the_layers():
  cfg = _cfg(dense_layers=(0,), dense_d_ff=24)
  cfg.num_layers = 4
  d, f = cfg.d_model, cfg.d_ff
  sparse = 2 * d * 5 + 2 * (2 * 3 * d * f)
  assert moe.flops_per_token(cfg) == pytest.approx((3 * sparse + 2 * 3 * d * 24) / 4)


def test_deepseek_groups_choose_by_their_two_best_scores_and_the_bias_only_chooses():
  """Expert 0 scores best, but its group {0, 1} sums sigmoid(2) + sigmoid(-5) = 0.888 < the
  group {2, 3}'s 1.620: expert 2 is chosen, weighted sigmoid(1.5) times the routed scale. A
  choice bias of +1 on expert 3 makes it chosen, still weighted by its own sigmoid."""
  logits = jnp.asarray([[2.0, -5.0, 1.5, 1.4]])
  sigmoid = lambda v: 1 / (1 + np.exp(-v))
  _, chosen, weights = moe.route(logits, 1, False, 'sigmoid', None, 2, 1, 2.5)
  assert chosen.tolist() == [[2]]
  np.testing.assert_allclose(weights, [[2.5 * sigmoid(1.5)]], rtol=1e-6)
  _, chosen, weights = moe.route(logits, 1, False, 'sigmoid', jnp.asarray([0, 0, 0, 1.0]), 2, 1)
  assert chosen.tolist() == [[3]]
  np.testing.assert_allclose(weights, [[sigmoid(1.4)]], rtol=1e-6)
  _, chosen, weights = moe.route(logits, 2, True, 'sigmoid', None, 2, 2, 2.5)  # Both groups.
  assert sorted(chosen[0].tolist()) == [0, 2]
  np.testing.assert_allclose(np.sort(weights[0]), 2.5 * np.sort(
      [sigmoid(2.0), sigmoid(1.5)]) / (sigmoid(2.0) + sigmoid(1.5)), rtol=1e-6)


def test_deepseek_v2_groups_score_by_their_best_under_the_softmax():
  """The softmax of [2, -5, 1.5, 1.4]: group {0, 1}'s best (expert 0) beats group {2, 3}'s, so
  the one group kept is the first (where the sum of the two best keeps the second), and its best
  expert is weighted by its probability times the routed scale, not renormalized."""
  logits = jnp.asarray([[2.0, -5.0, 1.5, 1.4]])
  probs = np.exp([2.0, -5.0, 1.5, 1.4]) / np.exp([2.0, -5.0, 1.5, 1.4]).sum()
  _, chosen, weights = moe.route(logits, 1, False, 'softmax', None, 2, 1, 1.5, 'best')
  assert chosen.tolist() == [[0]]
  np.testing.assert_allclose(weights, [[1.5 * probs[0]]], rtol=1e-6)
  _, chosen, _ = moe.route(logits, 1, False, 'softmax', None, 2, 1, 1.5, 'two_best')
  assert chosen.tolist() == [[2]]


def _deepseek_float64(layer, x, k, groups, per_token, scale):
  """DeepSeek-V3's routing by hand in float64: sigmoid scores, chosen by score + bias among the
  experts of the best groups (each scored by its two best), weighted by the scores
  renormalized times `scale`; an ungated shared expert."""
  p = {n: np.asarray(getattr(layer, n)[...], np.float64) for n in ('router', 'gate', 'up',
                                                                    'down', 'choice_bias')}
  silu = lambda v: v / (1 + np.exp(-v))
  out = np.zeros_like(x)
  for index in np.ndindex(x.shape[:-1]):
    t = x[index]
    scores = 1 / (1 + np.exp(-(t @ p['router'])))
    choice = (scores + p['choice_bias']).reshape(groups, -1)
    group_score = np.sort(choice, axis=-1)[:, -2:].sum(-1)
    kept = np.argsort(-group_score)[:per_token]
    masked = np.full_like(choice, -np.inf)
    masked[kept] = choice[kept]
    top = np.argsort(-masked.reshape(-1))[:k]
    w = scores[top] / scores[top].sum() * scale
    for e, we in zip(top, w):
      out[index] += we * (silu(t @ p['gate'][e]) * (t @ p['up'][e])) @ p['down'][e]
    s = {n: np.asarray(getattr(layer.shared, n).kernel[...], np.float64)
         for n in ('gate', 'up', 'down')}
    out[index] += (silu(t @ s['gate']) * (t @ s['up'])) @ s['down']
  return out


@pytest.mark.parametrize('impl', moe.IMPLEMENTATIONS)
def test_deepseek_experts_are_their_routing_by_hand_and_the_bias_has_no_gradient(impl):
  cfg = _cfg(num_experts=8, experts_per_token=3, router='sigmoid', renormalize=True,
             choice_bias=True, groups=4, groups_per_token=2, routed_scale=2.5, shared_d_ff=24,
             shared_gate=False, impl=impl)
  layer = _layer(cfg, seed=3)
  layer.choice_bias[...] = jnp.asarray(np.random.default_rng(1).normal(0, 0.3, 8), jnp.float32)
  x = jnp.asarray(X, jnp.float32)
  np.testing.assert_allclose(layer(x), _deepseek_float64(layer, X, 3, 4, 2, 2.5), rtol=2e-5,
                             atol=2e-5)
  graphdef, state = nnx.split(layer)
  grads = jax.grad(lambda s: jnp.sum(nnx.merge(graphdef, s)(x) ** 2))(state)
  assert not np.any(grads['choice_bias'][...]) and np.any(grads['router'][...])


def test_the_choice_bias_moves_by_its_rate_against_each_experts_load_outside_adamw():
  """Every router weight 0 and the choice bias [0.5, 0, 0, 0]: each token's sigmoid scores tie
  at 0.5, so it chooses expert 0 (its bias) and expert 1 (the lower index of the ties), loads
  [T, T, 0, 0] against a mean of T / 2: one train step at rate 0.01 moves the bias by
  0.01 [-1, -1, 1, 1] in every layer (DeepSeek-V3's rule), and every other parameter as at rate
  0, where the bias is held (its signal reaches neither the clipping nor AdamW, nor the logged
  gradient norm)."""
  from roformer import optim  # pylint: disable=import-outside-toplevel
  from roformer import variables  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(5)
  tokens = rng.integers(5, 50, (2, 9)).astype(np.int32)
  ones, pos = np.ones_like(tokens), np.arange(9)[None].repeat(2, 0)
  batch = {'inputs': tokens, 'targets': np.roll(tokens, -1, 1), 'inputs_segment_ids': ones,
           'targets_segment_ids': ones, 'inputs_positions': pos, 'targets_positions': pos}

  def step(rate):
    config = _lm_config(router='sigmoid', renormalize=True, choice_bias=True,
                        choice_bias_rate=rate)
    model = models.create(config.model, seed=0)
    for block in model.blocks:
      block.mlp.router[...] = jnp.zeros_like(block.mlp.router[...])
      block.mlp.choice_bias[...] = jnp.asarray([0.5, 0.0, 0.0, 0.0])
    graphdef, params = nnx.split(model)
    tx = optim.make_optimizer(config.train, moe.choice_bias_rate(config.model))
    state = {'params': params, 'opt_state': tx.init(variables.trainable(params)[0]),
             'step': jnp.int32(0)}
    new, metrics = steps.train_step(state, batch, 0, graphdef=graphdef, tx=tx,
                                    schedule=optim.make_schedule(config.train),
                                    task=tasks.for_config(config), label_smoothing=0.0)
    return nnx.merge(graphdef, new['params']), metrics['grad_norm']
  (moved, norm), (held, held_norm) = step(0.01), step(0.0)
  np.testing.assert_allclose(norm, held_norm, rtol=1e-6)  # The loss's gradients alone.
  for block, kept in zip(moved.blocks, held.blocks):
    np.testing.assert_allclose(block.mlp.choice_bias[...], [0.49, -0.01, 0.01, 0.01], rtol=1e-6)
    np.testing.assert_array_equal(kept.mlp.choice_bias[...], [0.5, 0, 0, 0])
  without = lambda m: [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(m))
                       if 'choice_bias' not in jax.tree_util.keystr(path)]
  for a, b in zip(without(moved), without(held)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_the_sequence_wise_balance_is_each_rows_over_its_normalized_scores_averaged():
  """DeepSeek-V3's complementary loss: per row, E sum_e f_e P_e with f_e its (token, slot) pairs
  on e per token and P_e the mean of the sigmoid scores normalized to sum to 1, averaged over the
  rows; in float64 from the layer's router."""
  cfg = _cfg(router='sigmoid', renormalize=True, balance_loss=1.0, balance_over='sequence',
             balance_scores='normalized')
  layer = _layer(cfg, seed=4)
  scores = 1 / (1 + np.exp(-(X @ np.asarray(layer.router[...], np.float64))))  # [2, 7, 5]
  want = []
  for row in scores:
    top = np.argsort(-row, -1)[:, :2]
    share = np.stack([np.bincount(t, minlength=5) for t in top]).mean(0)
    want.append(5 * np.sum(share * (row / row.sum(-1, keepdims=True)).mean(0)))
  with auxiliary.collecting():
    _, aux = auxiliary.total(lambda m: m(jnp.asarray(X, jnp.float32)), layer)
  np.testing.assert_allclose(aux, np.mean(want), rtol=1e-5)
  batch = 5 * np.sum(np.stack([np.bincount(t, minlength=5) for t in np.argsort(
      -scores.reshape(-1, 5), -1)[:, :2]]).mean(0) * (scores / scores.sum(-1, keepdims=True)
                                                      ).reshape(-1, 5).mean(0))
  assert abs(np.mean(want) - batch) > 1e-4  # The rows' mean is not the batch's.


def test_an_optimizer_without_the_sign_rate_refuses_a_bias_that_moves_by_sign_descent():
  """A model whose choice bias is declared for sign descent (choice_bias_rate > 0) given an
  optimizer built without its rate would move the bias by AdamW on the balancing gradient:
  refused when the optimizer state is made."""
  from roformer import optim  # pylint: disable=import-outside-toplevel
  from roformer import variables  # pylint: disable=import-outside-toplevel
  config = _lm_config(router='sigmoid', renormalize=True, choice_bias=True, choice_bias_rate=0.01)
  params = variables.trainable(nnx.state(models.create(config.model, seed=0)))[0]
  with pytest.raises(ValueError, match='no sign_rate'):
    optim.make_optimizer(config.train).init(params)
  optim.make_optimizer(config.train, moe.choice_bias_rate(config.model)).init(params)

