"""A mixture-of-experts MLP (`model.mlp='moe'`, its options in `model.moe`): Mixtral's, OLMoE's,
Qwen2-MoE's, Qwen3-MoE's, gpt-oss's, Llama 4's and DeepSeek-V3's sparse block.

Each token's router logits r = x W_r (in float32, where transformers computes them in the
activations' dtype: a bfloat16 model may break a near tie between experts otherwise) give p =
softmax(r) over `num_experts` experts; the token goes to its `experts_per_token` (k) most probable
ones, weighted by their p (renormalized to sum to 1 where `renormalize`: Mixtral, Qwen3-MoE; as they
are: OLMoE, Qwen2-MoE), and the block returns the weighted sum of those experts' gated MLPs
down_e(act(gate_e x) * up_e x). A shared expert of width `shared_d_ff` (Qwen2-MoE) adds sigmoid(x
w_s) times a gated MLP of its own, for every token. gpt-oss's experts (`biases`, `swiglu_limit` > 0)
add a bias to the router's logits and to each projection, and clamp their SwiGLU: with g =
min(gate_e x, c) and u = clip(up_e x, -c, c) for c = `swiglu_limit`, the hidden units are g
sigmoid(alpha g) (u + 1), alpha = `swiglu_alpha`. Llama 4's (`router='sigmoid'`, `weight_inputs`,
`shared_gate` false) weights each of its k experts by sigmoid(r_e) instead of the softmax,
multiplies the expert's input by that weight rather than its output, and adds an ungated shared
expert. DeepSeek-V3's (`router='sigmoid'` renormalized, `choice_bias`, `groups`, `routed_scale`, an
ungated shared expert) chooses its k experts by sigmoid(r_e) + b_e among the best groups of experts,
and weights them by their sigmoids renormalized, times a constant; with `choice_bias_rate` the bias
follows DeepSeek-V3's auxiliary-loss-free balancing during training (`balancing`). The layers
`dense_layers` have a dense gated MLP of width `dense_d_ff` in place of the mixture (Qwen MoE's
`mlp_only_layers`, Llama 4 Maverick's alternate layers, DeepSeek's first layers).

Two computations of the same function (`impl`):
- 'dense': every expert on every token, the others weighted 0: num_experts / k times the
  experts' model FLOPs, in plain matmuls;
- 'ragged': the k (token, expert) pairs sorted by expert and multiplied per expert by
  `jax.lax.ragged_dot`, the experts' model FLOPs alone where the backend has a grouped matmul.
  XLA:CPU has none: there it took as long as 'dense' or longer, at 32 experts too
  (scripts/moe_impl.py; docs/hf_checkpoints.md), so 'dense' is the default.
No token is ever dropped (no capacity factor), so both equal the Hugging Face classes' output.
The mesh splits each expert's hidden width as it splits an MLP's, and its experts where
`config.mesh.rules.expert` names mesh axes (expert parallelism, roformer/sharding.py): 'dense'
through XLA's partitioning of its einsums, 'ragged' per device (roformer/expert_parallel.py).

Training adds, per layer, Switch Transformer's load-balancing loss (Fedus et al. 2021)
`balance_loss` * E sum_e f_e P_e, with f_e the share of the batch's (token, slot) pairs routed to
expert e times k and P_e its mean router probability (k at a uniform routing), and ST-MoE's router
z-loss `router_z_loss` * mean_t logsumexp(r_t)^2, through roformer/auxiliary.py. Both average over
every token of the batch, padding included, and are summed over the layers (Hugging Face's
`load_balancing_loss_func` pools the layers' tokens before the product instead).
"""

from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from roformer import auxiliary
from roformer import expert_parallel
from roformer import sharding
from roformer import variables
from roformer.specs import Bool, Float, Int, Seq, Str

IMPLEMENTATIONS = ('dense', 'ragged')
ROUTERS = ('softmax', 'sigmoid')
GROUP_SCORES = ('two_best', 'best')
BALANCE_OVER = ('batch', 'sequence')
BALANCE_SCORES = ('softmax', 'normalized')

# config.model.moe (read by models with model.mlp='moe').
FIELDS = {
    'num_experts': Int(2, 2**16, default=8),
    # The experts each token is sent to (k); at most num_experts.
    'experts_per_token': Int(1, 2**16, default=2),
    # The k routing weights divided by their sum (Mixtral, Qwen3-MoE), or the softmax's own
    # (OLMoE, Qwen2-MoE).
    'renormalize': Bool(default=True),
    # > 0: a shared expert of this width for every token, gated by sigmoid(x w) (Qwen2-MoE).
    'shared_d_ff': Int(0, 2**18, default=0),
    # Training only: the load-balancing loss's and the router z-loss's coefficients.
    'balance_loss': Float(0, 1e3, default=0.01),
    'router_z_loss': Float(0, 1e3, default=0.0),
    # Training only: the balancing loss over the batch's tokens at once (Switch Transformer's),
    # or over each row's, averaged over the rows (DeepSeek-V3's sequence-wise one, with a packed
    # row's documents as one sequence); its P_e the
    # softmax of the logits, or the router's scores normalized to sum to 1 (DeepSeek-V3's, with
    # router='sigmoid').
    'balance_over': Str(BALANCE_OVER, default='batch'),
    'balance_scores': Str(BALANCE_SCORES, default='softmax'),
    # 'dense' (every expert on every token) or 'ragged' (jax.lax.ragged_dot): the same outputs.
    'impl': Str(IMPLEMENTATIONS, default='dense'),
    # A bias on the router's logits and on each expert's projections (gpt-oss).
    'biases': Bool(default=False),
    # > 0: gpt-oss's clamped SwiGLU (see above) at this limit, with its gain `swiglu_alpha`, in
    # place of the model's activation; 0: act(gate x) * up x.
    'swiglu_limit': Float(0, 1e6, default=0.0),
    'swiglu_alpha': Float(0, 1e3, min_open=True, default=1.702),
    # The k weights: the softmax's (renormalized or not), or each chosen logit's sigmoid
    # (Llama 4; `renormalize` must then be false).
    'router': Str(ROUTERS, default='softmax'),
    # The weight multiplies each expert's input (Llama 4) instead of its output.
    'weight_inputs': Bool(default=False),
    # The shared expert behind a sigmoid gate (Qwen2-MoE), or ungated (Llama 4).
    'shared_gate': Bool(default=True),
    # The layers (indices of the stack, from 0) whose MLP is a dense gated one in place of the
    # mixture: Qwen MoE's mlp_only_layers, DeepSeek's first layers, Llama 4 Maverick's every
    # other layer. Their width is `dense_d_ff` (0: d_ff, the experts' width).
    'dense_layers': Seq(Int(0, 2**16), default=()),
    'dense_d_ff': Int(0, 2**18, default=0),
    # DeepSeek-V3's routing (with router='sigmoid'): a per-expert bias added to the scores for
    # choosing the k experts alone, never to their weights (e_score_correction_bias; no gradient
    # of the loss reaches it: choice_bias_rate moves it by the experts' loads); the experts split
    # into `groups` groups, each token choosing among the experts of its `groups_per_token` best
    # groups (a group's score: the sum of its two best); the k weights times `routed_scale`
    # (routed_scaling_factor; not the shared expert's).
    'choice_bias': Bool(default=False),
    # Training only: > 0, the choice bias moves by this step each training step, up for the
    # experts that took fewer (token, slot) pairs than the mean and down for those that took
    # more (DeepSeek-V3's auxiliary-loss-free balancing: 0.001); 0: held at its value.
    'choice_bias_rate': Float(0, 1, default=0.0),
    'groups': Int(1, 2**16, default=1),
    'groups_per_token': Int(1, 2**16, default=1),
    # A group's score: the sum of its two best choice scores (DeepSeek-V3's), or its best
    # (DeepSeek-V2's group-limited greedy choice, with the softmax router).
    'group_score': Str(GROUP_SCORES, default='two_best'),
    'routed_scale': Float(0, 1e6, min_open=True, default=1.0),
}


def validate(model_cfg, mlp_bias: bool) -> str | None:
  """What is wrong with `model_cfg.moe`, in one line naming the field and the fix, or None;
  `mlp_bias`: model.biases gives the MLP biases, which the experts do not have."""
  o = model_cfg.moe
  if mlp_bias:
    return (f'config.model.biases={model_cfg.biases!r} gives the MLP biases; the experts of '
            "model.mlp='moe' take theirs from model.moe.biases. Fix: "
            '--config.model.biases=attention, qkv or none (and --config.model.moe.biases=True).')
  if not o.swiglu_limit and o.swiglu_alpha != FIELDS['swiglu_alpha'].default:
    return (f'config.model.moe.swiglu_alpha={o.swiglu_alpha} is read only by the clamped SwiGLU '
            '(moe.swiglu_limit > 0), and the limit is 0. Fix: set --config.model.moe.'
            'swiglu_limit, or leave swiglu_alpha at its default.')
  dense = tuple(o.dense_layers)
  if any(i >= model_cfg.num_layers for i in dense) or len(set(dense)) < len(dense):
    return (f'config.model.moe.dense_layers={dense} names a layer twice or past the last '
            f'(num_layers={model_cfg.num_layers}). Fix: distinct indices from 0 to '
            f'{model_cfg.num_layers - 1}.')
  if len(dense) == model_cfg.num_layers:
    return ('config.model.moe.dense_layers names every layer, so no layer has the mixture. '
            "Fix: --config.model.mlp=gated (and d_ff the dense layers' width).")
  if o.dense_d_ff and not dense:
    return (f'config.model.moe.dense_d_ff={o.dense_d_ff} is the width of the dense layers, and '
            'moe.dense_layers names none. Fix: set moe.dense_layers, or leave dense_d_ff at 0.')
  if o.balance_scores == 'normalized' and o.router != 'sigmoid':
    return ("config.model.moe.balance_scores='normalized' normalizes the sigmoid router's scores; "
            "the softmax's already sum to 1. Fix: --config.model.moe.router=sigmoid, or "
            "balance_scores='softmax'.")
  if o.choice_bias_rate and not o.choice_bias:
    return (f'config.model.moe.choice_bias_rate={o.choice_bias_rate} moves the choice bias, and '
            'the mixture has none. Fix: --config.model.moe.choice_bias=True, or a rate of 0.')
  if o.experts_per_token > o.num_experts:
    return (f'config.model.moe.experts_per_token={o.experts_per_token} is more than '
            f'num_experts={o.num_experts}. Fix: at most num_experts.')
  smallest = 2 if o.group_score == 'two_best' else 1
  if o.num_experts % o.groups or (o.groups > 1 and o.num_experts // o.groups < smallest):
    return (f'config.model.moe.groups={o.groups} does not split num_experts={o.num_experts} '
            f'into groups of at least {smallest} (group_score={o.group_score!r}). Fix: a divisor '
            f'of num_experts leaving {smallest} or more in each, or 1.')
  if o.groups == 1 and (o.groups_per_token != 1 or o.group_score != 'two_best'):
    return (f'config.model.moe.groups_per_token={o.groups_per_token} and group_score='
            f'{o.group_score!r} are read only with groups (moe.groups > 1), and groups is 1. '
            'Fix: set moe.groups, or leave them at their defaults.')
  per_group = o.num_experts // o.groups
  if o.groups > 1 and (o.groups_per_token > o.groups
                       or o.groups_per_token * per_group < o.experts_per_token):
    return (f'config.model.moe.groups_per_token={o.groups_per_token} of {o.groups} groups: at '
            'most the groups, and holding at least experts_per_token experts. Fix: between '
            f'{-(-o.experts_per_token // per_group)} and {o.groups}.')
  return None


def choice_bias_rate(model_cfg) -> float:
  """The step by which training moves the model's choice biases (0: none moves)."""
  if model_cfg.mlp != 'moe' or not model_cfg.moe.choice_bias:
    return 0.0
  return float(model_cfg.moe.choice_bias_rate)


def dense_layer(model_cfg, layer: int) -> bool:
  """Whether layer `layer`'s MLP is the dense gated one (`moe.dense_layers`), not the mixture."""
  return layer in tuple(model_cfg.moe.dense_layers)


def dense_width(model_cfg) -> int:
  """The dense layers' hidden width (`moe.dense_d_ff`, else d_ff)."""
  return model_cfg.moe.dense_d_ff or model_cfg.d_ff


def flops_per_token(model_cfg) -> float:
  """Forward model FLOPs per token of one layer's MLP, the mean over the layers: the router, k
  gated experts and the shared expert with its gate (what 'ragged' computes; 'dense' computes
  num_experts experts) in the sparse layers, a gated MLP in the dense ones."""
  o, d, f = model_cfg.moe, model_cfg.d_model, model_cfg.d_ff
  shared = 2 * 3 * d * o.shared_d_ff + (2 * d if o.shared_gate else 0) if o.shared_d_ff else 0
  sparse = 2 * d * o.num_experts + o.experts_per_token * 2 * 3 * d * f + shared
  dense, layers = len(o.dense_layers), model_cfg.num_layers
  return ((layers - dense) * sparse + dense * 2 * 3 * d * dense_width(model_cfg)) / layers


def route(logits: jax.Array, k: int, renormalize: bool, router: str = 'softmax',
          choice_bias: jax.Array | None = None, groups: int = 1, groups_per_token: int = 1,
          scale: float = 1.0, group_score: str = 'two_best'
          ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(softmax probabilities [T, E], the k chosen experts [T, k], their weights [T, k]), in
  float32, from router logits [T, E]: the k best scores, weighted by their softmax probabilities
  (`router='softmax'`) or their logits' sigmoids ('sigmoid'), times `scale`. The scores for
  choosing are the weights plus `choice_bias` [E], among the experts of each token's
  `groups_per_token` best of `groups` groups (a group's score: its two best, or its best with
  `group_score='best'`)."""
  logits = logits.astype(jnp.float32)
  probs = jax.nn.softmax(logits, axis=-1)
  scores = jax.nn.sigmoid(logits) if router == 'sigmoid' else probs
  if choice_bias is None and groups == 1:
    choice = logits  # The same order, without the softmax's underflowed ties far below the top.
  else:
    choice = scores if choice_bias is None else scores + choice_bias.astype(jnp.float32)
  if groups > 1:
    tokens, experts = choice.shape
    grouped = choice.reshape(tokens, groups, experts // groups)
    scored = (grouped.max(-1) if group_score == 'best'
              else jax.lax.top_k(grouped, 2)[0].sum(-1))
    _, best = jax.lax.top_k(scored, groups_per_token)
    kept = jax.nn.one_hot(best, groups, dtype=jnp.float32).sum(1) > 0  # [T, groups]
    choice = jnp.where(jnp.repeat(kept, experts // groups, axis=1), choice, -jnp.inf)
  chosen = jax.lax.top_k(choice, k)[1]
  weights = jnp.take_along_axis(scores, chosen, -1)
  if renormalize:  # DeepSeek's classes' epsilon (the others add none): no 0/0 from underflow.
    weights = weights / (weights.sum(-1, keepdims=True) + 1e-20)
  return probs, chosen, weights * scale if scale != 1.0 else weights


def loads(chosen: jax.Array, num_experts: int) -> jax.Array:
  """Each expert's (token, slot) pairs among `chosen` [T, k]: [num_experts], float32."""
  return jax.nn.one_hot(chosen, num_experts, dtype=jnp.float32).sum((0, 1))


def balancing(bias: jax.Array, chosen: jax.Array) -> jax.Array:
  """A term of value 0 whose gradient with respect to the choice bias [E] is each expert's load
  (its (token, slot) pairs among `chosen` [T, k]) less the mean load: what DeepSeek-V3's rule
  moves the bias against, by the sign (roformer/optim.py's sign descent). The loads count every
  token of the batch, padding included, as the balancing loss does; with gradient accumulation
  the step takes the sign of the micro-batches' errors weighted by their target tokens (the
  whole batch's error where they hold as many)."""
  load = loads(chosen, bias.shape[0])
  error = jax.lax.stop_gradient(load - load.mean())
  return jnp.sum(error * (bias - jax.lax.stop_gradient(bias)))


def balance(probs: jax.Array, chosen: jax.Array) -> jax.Array:
  """E sum_e f_e P_e over a layer's tokens (k at a uniform routing)."""
  num_experts = probs.shape[-1]
  share = loads(chosen, num_experts) / chosen.shape[0]
  return num_experts * jnp.sum(share * probs.mean(0))


class MixtureOfExperts(nnx.Module):
  """The sparse MLP. `std(d_in, residual)` is the model's initialisation's standard deviation
  of a dense layer (roformer/layers.py), `activation` the experts' gate activation, `shared` the
  shared expert's gated MLP or None."""

  def __init__(self, cfg, *, dtype, rngs, std: Callable[[int, bool], float],
               activation: Callable, shared: nnx.Module | None = None):
    o = cfg.moe
    d, f, e = cfg.d_model, cfg.d_ff, o.num_experts
    self.k, self.renormalize, self.impl = o.experts_per_token, o.renormalize, o.impl
    self.balance_loss, self.router_z_loss = o.balance_loss, o.router_z_loss
    self.activation, self.dtype = activation, dtype
    self.limit, self.alpha = float(o.swiglu_limit), float(o.swiglu_alpha)
    self.router_kind, self.weight_inputs = o.router, bool(o.weight_inputs)
    self.groups, self.groups_per_token = int(o.groups), int(o.groups_per_token)
    self.balance_over, self.balance_scores = o.balance_over, o.balance_scores
    self.group_score = o.group_score
    self.routed_scale = float(o.routed_scale)

    def weight(shape, axes, stddev):
      value = stddev * jax.random.normal(rngs.params(), shape, jnp.float32)
      return variables.param(value, axes, decay=True)
    self.router = weight((d, e), ('embed', None), std(d, False))
    # The experts' axis: split over the devices with config.mesh.rules.expert (expert
    # parallelism; roformer/sharding.py), whole by default.
    self.gate = weight((e, d, f), ('expert', 'embed', 'mlp'), std(d, False))
    self.up = weight((e, d, f), ('expert', 'embed', 'mlp'), std(d, False))
    self.down = weight((e, f, d), ('expert', 'mlp', 'embed'), std(f, True))
    self.biased = bool(o.biases)
    if self.biased:  # Zero at the start, as a Linear's.
      zeros = lambda shape, axes: variables.param(jnp.zeros(shape, jnp.float32), axes,
                                                  decay=False)
      self.router_bias = zeros((e,), (None,))
      self.gate_bias = zeros((e, f), ('expert', 'mlp'))
      self.up_bias = zeros((e, f), ('expert', 'mlp'))
      self.down_bias = zeros((e, d), ('expert', 'embed'))
    self.biased_choice = bool(o.choice_bias)
    self.choice_bias_rate = float(o.choice_bias_rate)
    if self.biased_choice:  # Zero at the start; moved by the loads alone (`balancing`).
      self.choice_bias = variables.param(jnp.zeros((e,), jnp.float32), (None,), decay=False,
                                         sign_descent=self.choice_bias_rate > 0)
    self.shared = shared
    self.gated_shared = shared is not None and bool(o.shared_gate)
    if self.gated_shared:
      self.shared_gate = weight((d, 1), ('embed', None), std(d, False))

  def __call__(self, x):
    shape = x.shape
    tokens = x.reshape(-1, shape[-1])
    logits = tokens.astype(jnp.float32) @ self.router[...]
    if self.biased:
      logits = logits + self.router_bias[...]
    choice_bias = (jax.lax.stop_gradient(self.choice_bias[...]) if self.biased_choice
                   else None)
    probs, chosen, weights = route(logits, self.k, self.renormalize, self.router_kind,
                                   choice_bias, self.groups, self.groups_per_token,
                                   self.routed_scale, self.group_score)
    if auxiliary.active():
      aux = self.balance_loss * self._balance(logits, probs, chosen, shape) if (
          self.balance_loss) else 0.0
      if self.router_z_loss:
        aux += self.router_z_loss * jnp.mean(jax.nn.logsumexp(logits, axis=-1) ** 2)
      if self.choice_bias_rate:
        aux += balancing(self.choice_bias[...], chosen)
      auxiliary.add(self, aux)
    experts = self._ragged if self.impl == 'ragged' else self._dense
    out = experts(tokens, chosen, weights)
    if self.shared is not None:
      shared = self.shared(tokens[None])[0].astype(jnp.float32)
      if self.gated_shared:
        shared = shared * jax.nn.sigmoid(tokens.astype(jnp.float32) @ self.shared_gate[...])
      out = out + shared
    return out.astype(self.dtype).reshape(shape)

  def _balance(self, logits, probs, chosen, shape):
    """The balancing loss's E sum_e f_e P_e over the batch, or each row's averaged over the
    rows (`balance_over`), P from `balance_scores`."""
    if self.balance_scores == 'normalized':
      scores = jax.nn.sigmoid(logits)
      probs = scores / scores.sum(-1, keepdims=True)
    if self.balance_over == 'batch':
      return balance(probs, chosen)
    rows = lambda a: a.reshape(-1, shape[-2], a.shape[-1])  # [rows, length, .]
    return jnp.mean(jax.vmap(balance)(rows(probs), rows(chosen)))

  def _weights(self):
    return (self.gate[...].astype(self.dtype), self.up[...].astype(self.dtype),
            self.down[...].astype(self.dtype))

  def _biases(self):
    """(gate, up, down) biases [E, width] of every expert; zeros where the experts have none."""
    if not self.biased:
      return 0.0, 0.0, 0.0
    return tuple(b[...].astype(self.dtype) for b in (self.gate_bias, self.up_bias,
                                                     self.down_bias))

  def _hidden(self, gate, up):
    """The experts' hidden units from their gate and up projections."""
    if not self.limit:
      return self.activation(gate) * up
    gate = jnp.minimum(gate, self.limit)
    return gate * jax.nn.sigmoid(self.alpha * gate) * (jnp.clip(up, -self.limit, self.limit) + 1)

  def _dense(self, tokens, chosen, weights):
    """Every expert on every token; the combination weights are 0 off each token's k."""
    gate, up, down = self._weights()
    gate_bias, up_bias, down_bias = self._biases()
    per_expert = lambda b: b if isinstance(b, float) else b[:, None, :]
    picked = jax.nn.one_hot(chosen, gate.shape[0], dtype=jnp.float32)  # [T, k, E]
    combine = jnp.einsum('tk,tke->te', weights, picked)
    if self.weight_inputs:  # Each expert's own input, w x (0 off the token's k experts).
      x = (combine.T[:, :, None] * tokens.astype(jnp.float32)[None]).astype(self.dtype)
      combine = picked.sum(1)
      project = lambda w: jnp.einsum('etd,edf->etf', x, w)
    else:
      x = tokens.astype(self.dtype)
      project = lambda w: jnp.einsum('td,edf->etf', x, w)
    hidden = self._hidden(project(gate) + per_expert(gate_bias), project(up) + per_expert(up_bias))
    hidden = sharding.constrain(hidden, ('act_expert', 'batch', 'act_mlp'))
    outputs = jnp.einsum('etf,efd->etd', hidden, down) + per_expert(down_bias)
    if sharding.shards('act_expert', outputs.shape[0]) > 1:  # Split experts: summed per token.
      outputs = sharding.constrain(outputs, ('act_expert', 'batch', None))
    return jnp.einsum('etd,te->td', outputs.astype(jnp.float32), combine)

  def _ragged(self, tokens, chosen, weights):
    """The (token, slot) pairs sorted by expert, each expert's rows multiplied by its matrices
    alone (`jax.lax.ragged_dot`), and the weighted rows added back to their tokens; per device
    where the mesh splits the experts (roformer/expert_parallel.py)."""
    gate, up, down = self._weights()
    params = {'gate': gate, 'up': up, 'down': down}
    if self.biased:
      params.update(zip(('gate_bias', 'up_bias', 'down_bias'), self._biases()))
    layout = expert_parallel.plan(gate.shape[0], tokens, gate.shape[-1])
    if layout is None:
      return self._ragged_rows(tokens, chosen, weights, params, 0)
    return expert_parallel.run(self._ragged_rows, layout, tokens, chosen, weights, params)

  def _ragged_rows(self, tokens, chosen, weights, params, first):
    """`_ragged` for the experts first .. first + E' - 1 of `params` ([E', ...] each): the
    pairs of other experts (held by other devices) are sorted last, past the groups' sizes, and
    add nothing."""
    local = params['gate'].shape[0]
    flat = chosen.reshape(-1) - first
    here = (flat >= 0) & (flat < local)
    key = jnp.where(here, flat, local)
    order = jnp.argsort(key, stable=True)
    rows = order // self.k  # The token of each sorted pair.
    sizes = jnp.bincount(key, length=local + 1)[:local].astype(jnp.int32)
    expert = jnp.minimum(key[order], local - 1)
    bias = lambda name: params[name][expert] if name in params else 0.0
    kept = here[order][:, None]
    row_weights = jnp.where(kept, weights.reshape(-1)[order][:, None], 0.0)
    # Other devices' pairs as zeros: their rows' gradients then stay 0 whatever a grouped
    # matmul leaves past its groups.
    x = jnp.where(kept, tokens.astype(jnp.float32)[rows], 0.0)
    x = (x * row_weights if self.weight_inputs else x).astype(self.dtype)
    hidden = self._hidden(jax.lax.ragged_dot(x, params['gate'], sizes) + bias('gate_bias'),
                          jax.lax.ragged_dot(x, params['up'], sizes) + bias('up_bias'))
    outputs = (jax.lax.ragged_dot(hidden, params['down'], sizes) + bias('down_bias')).astype(
        jnp.float32)
    outputs = jnp.where(kept, outputs if self.weight_inputs else outputs * row_weights, 0.0)
    return jnp.zeros((tokens.shape[0], tokens.shape[1]), jnp.float32).at[rows].add(outputs)
