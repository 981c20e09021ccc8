"""The position-scheme interface: what a kind declares, the modules it builds, and the registry.

A kind is described once, by a `PositionScheme` subclass registered under its name:
- `options`: its option groups under `config.model.position.<group>`, each option's type, range
  and default (`roformer/specs.py`); configs/base.py and the config check read them from here;
- `validate`: the checks that relate its options to the model and the sequence length;
- `capabilities`: what it can be combined with (`Capabilities`), which is all that code outside
  this package asks: no kind name appears in the stack, the config checks or the warm start;
- two module classes: `Shared`, built once per stack (the embedding hook and any parameters
  shared by the layers), and `Layer`, built by every block, which owns that layer's parameters.
  Every block of a stack holds a `Layer` of the same structure, so the blocks are uniform and the
  stack can be scanned (`roformer.stack`).

The stack calls the hooks at fixed points; every hook defaults to the identity:

| hook                                         | module | used by                | effect                          |
|----------------------------------------------|--------|------------------------|---------------------------------|
| `embed(x, positions)`                        | Shared | sinusoidal, learned    | adds an absolute code to x      |
| `__call__()`                                 | Shared | xl, t5, fire (shared)  | the arrays every layer reads    |
| `layer_input(x, positions, shared)`          | Layer  | learned (per layer)    | adds a code at a layer's input  |
| `prepare(x, positions, shared)`              | Layer  | (data-dependent ones)  | the context the hooks below get |
| `rotate(q, k, q_pos, k_pos, ctx)`            | Layer  | rope, xpos             | rotates queries and keys        |
| `rotate_value(v, k_pos, ctx)`                | Layer  | rope (rotate_values)   | rotates values                  |
| `rotate_features(qf, kf, q_pos, k_pos, ctx)` | Layer  | rope                   | FAVOR+'s rotation of features   |
| `logits_bias(q, k, q_pos, k_pos, mask, ctx)` | Layer  | the bias schemes (*)   | added to the attention logits   |
| `logits(q, k, q_pos, k_pos, mask, ctx)`      | Layer  | (none yet)             | replaces q.k/sqrt(d) itself     |
| `value_term(probs, q_pos, k_pos, ctx)`       | Layer  | shaw                   | added to the attention output   |
| `cache_state(batch, max_len)`                | Layer  | fox                    | its per-slot state in the cache |
| `extend_cache(ctx, state, index)`            | Layer  | fox                    | the context over every slot     |

(*) shaw, xl, t5, alibi, kerple, fire, cope. `prepare` receives the attention sublayer's input
(after the LayerNorm in the pre-norm stack) and returns the per-layer context `ctx` that the
other attention hooks receive; by default that context is `shared`, what the stack's `Shared`
module returns. `logits_bias` also receives the attention mask (bool, broadcastable to
[batch, heads, q_len, k_len]), which only CoPE reads: its positions count the gates of the keys
a query may see. Positions are always explicit integer arrays (they restart at 0 in every
packed segment and start at the cache index when decoding); angles are computed in float32 and
cast to the activation dtype only at the end.

With a key/value cache, a scheme whose context is computed from the tokens (FoX's cumulative
gates) keeps it per slot: `cache_state` allocates it with the cache (batch first, so that beam
search reorders it with the keys), and `extend_cache` receives `prepare`'s context for the new
tokens, writes them at slot `index` and returns the context over every slot with the new state.
"""

import copy
import dataclasses
import re
from typing import Any, Callable

import jax
import ml_collections
from flax import nnx

from roformer import errors
from roformer import specs

_REGISTRY: dict[str, type['PositionScheme']] = {}


@dataclasses.dataclass(frozen=True)
class Capabilities:
  """What a scheme can be combined with, declared by the scheme and read everywhere else.

  causal_only: it needs keys j <= i (FIRE's normaliser, CoPE's gate sums, xPos's decay), so
    encoders (bidirectional attention) refuse it.
  reads_positions: it reads the integer positions (randomised training positions change it).
  logits_term: '' if it leaves the L x L logits alone, else what it adds to them (in words,
    for the error): linear attention (FAVOR+) never forms the logits, so it cannot carry it.
  value_term: it adds to the attention output from the probabilities (einsum path only).
  computes_logits: its `logits` hook replaces q.k (einsum path only).
  bias_only: it changes attention only through `logits_bias` (and `prepare`, `cache_state`,
    `extend_cache`), so it can be added to another scheme: kind 'A+B' (see `scheme`).
  rotary: it rotates by RoPE's frequencies under config.model.position.rope, so RoPE's
    scalings (and their continuation checks) apply to it.
  feature_rotation: its `rotate_features` rotates FAVOR+'s random features (rope_mode
    'features', the RoFormer paper's linear attention); otherwise only rope_mode 'qk'.
  """
  causal_only: bool = False
  reads_positions: bool = True
  logits_term: str = ''
  value_term: bool = False
  computes_logits: bool = False
  bias_only: bool = False
  rotary: bool = False
  feature_rotation: bool = False

  @property
  def implementations(self) -> tuple[str, ...]:
    """The attention implementations that can run it (attention.IMPLEMENTATIONS less 'auto')."""
    if self.value_term or self.computes_logits:
      return ('einsum',)
    return ('einsum', 'xla', 'cudnn')

  @property
  def linear_attention(self) -> bool:
    return not (self.logits_term or self.value_term or self.computes_logits)


class Shared(nnx.Module):
  """A stack's scheme-wide module: the embedding hook and any parameters its layers share."""

  def __init__(self, model_cfg, *, causal: bool, rngs: nnx.Rngs):
    del model_cfg, causal, rngs

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """Added to the token embeddings at the bottom of the stack."""
    del positions
    return x

  def __call__(self) -> Any:
    """What every layer's hooks receive as `shared` (a pytree of arrays, or None): computed
    once per forward pass, and passed unchanged through a scanned stack."""
    return None


class Layer(nnx.Module):
  """One block's position module: its hooks leave attention untouched.

  Hooks receive queries/keys as [batch, len, heads, head_dim] and integer positions as
  [batch, len]; biases are [batch or 1, heads, q_len, k_len] in float32, already on the scale of
  the (1/sqrt(head_dim)-scaled) attention logits.
  """

  def __init__(self, model_cfg, *, causal: bool, rngs: nnx.Rngs):
    del model_cfg, causal, rngs

  def layer_input(self, x, positions, shared):
    """Added to the residual stream at the input of the layer."""
    del positions, shared
    return x

  def prepare(self, x, positions, shared):
    """The context of this layer's attention hooks, from its (normed) input x."""
    del x, positions
    return shared

  def rotate(self, q, k, q_pos, k_pos, ctx):
    del q_pos, k_pos, ctx
    return q, k

  def rotate_value(self, v, k_pos, ctx):
    del k_pos, ctx
    return v

  def rotate_features(self, qf, kf, q_pos, k_pos, ctx):
    """FAVOR+'s positive random features rotated like queries and keys (numerator only)."""
    raise NotImplementedError(f'{type(self).__name__} does not rotate random features.')

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    """Added to the logits. `mask` (bool, broadcastable to [batch, heads, q_len, k_len]) is the
    attention mask; schemes whose bias depends on which keys are visible (CoPE) read it."""
    del q, k, q_pos, k_pos, mask, ctx
    return None

  def logits(self, q, k, q_pos, k_pos, mask, ctx):
    """The attention logits [batch, heads, q_len, k_len] (float32, scaled) in place of
    q.k/sqrt(d), for schemes whose capabilities say `computes_logits`."""
    raise NotImplementedError(f'{type(self).__name__} does not compute logits.')

  def value_term(self, probs, q_pos, k_pos, ctx):
    del probs, q_pos, k_pos, ctx
    return None

  def cache_state(self, batch: int, max_len: int):
    """What this layer keeps per cache slot besides keys and values (arrays with the batch
    first), or None."""
    del batch, max_len
    return None

  def extend_cache(self, ctx, state, index):
    """Decoding: `ctx` is `prepare`'s context for the new tokens (at slots index..); returns the
    context over every slot and the updated `state`."""
    del index
    return ctx, state


class PositionScheme:
  """A registered kind: its options, checks, capabilities and modules (see the module
  docstring). Subclasses set the class attributes and override what they need."""

  kind = 'base'
  # The option groups of config.model.position that belong to this kind: {group: {option:
  # spec}}, each spec's type and range carrying its default (e.g. `specs.Int(1, default=16)`).
  # configs/base.py builds config.model.position from every registered kind's options, and the
  # config check holds each value to its spec. An option given as a plain value has a default
  # but no declared range: every config check then fails, naming it, until it is declared.
  options: dict = {}
  # Further option groups it reads that another kind introduced (xpos reads `rope`).
  reads: tuple[str, ...] = ()
  capabilities = Capabilities()
  causal_reason = ''  # With capabilities.causal_only: why, for the error.
  Shared: type[Shared] = Shared
  Layer: type[Layer] = Layer

  @classmethod
  def legacy_params(cls, cfg: ml_collections.ConfigDict) -> tuple[tuple[str, str], ...]:
    """Where the parameters of checkpoints written when every per-layer parameter lived in
    one module beside the blocks are now: (pattern, replacement) on the path below that
    module. A replacement that starts with 'layer:' names the layer (the pattern's first group)
    and the path in that layer's module; otherwise the path in the stack's `Shared` module."""
    del cfg
    return ()

  @classmethod
  def fields(cls) -> tuple[str, ...]:
    """The option groups of config.model.position that this kind reads."""
    return tuple(cls.reads) + tuple(cls.options)

  @classmethod
  def validate(cls, cfg: ml_collections.ConfigDict, model_cfg: ml_collections.ConfigDict,
               seq_len: int, causal: bool) -> None:
    """Raises ConfigError naming the field and the fix for inconsistent options."""
    del cfg, model_cfg, seq_len, causal

  @classmethod
  def max_length(cls, cfg: ml_collections.ConfigDict) -> int | None:
    """The longest sequence its parameters cover (a learned table's rows), or None: no bound."""
    del cfg
    return None


def register(kind: str) -> Callable[[type[PositionScheme]], type[PositionScheme]]:
  def wrap(cls):
    cls.kind = kind
    _REGISTRY[kind] = cls
    return cls
  return wrap


DEFAULT_KIND = 'rope'  # config.model.position.kind unless a config chooses another.


def kinds() -> list[str]:
  return sorted(_REGISTRY)


def scheme(kind: str, field: str = 'config.model.position.kind') -> type[PositionScheme]:
  """The description of `kind`: a registered kind, or 'A+B', kind A with the bias of a
  bias-only kind B added (`combine`). A ConfigError naming `field` and the choices if
  unknown."""
  if kind in _REGISTRY:
    return _REGISTRY[kind]
  if kind in combined_kinds():
    first, second = kind.split('+')
    return combine(_REGISTRY[first], _REGISTRY[second])
  raise errors.ConfigError(
      f'{field}={kind!r} is not a known position scheme. '
      f'Fix: choose one of {kinds()}, or A+B with B one of {bias_kinds()} (e.g. rope+fox).')


def layer_kinds(model_cfg) -> tuple[str, ...]:
  """Each layer's kind: `model.layer_kinds` cycled over the layers, or `model.position.kind`
  for every layer when that pattern is empty."""
  pattern = tuple(model_cfg.layer_kinds) if 'layer_kinds' in model_cfg else ()
  if not pattern:
    return (model_cfg.position.kind,) * model_cfg.num_layers
  return tuple(pattern[i % len(pattern)] for i in range(model_cfg.num_layers))


def model_scheme(model_cfg) -> type[PositionScheme]:
  """The description of a model's positions: its kind's, or with `model.layer_kinds` one made
  from the layers' kinds (`per_layer`)."""
  pattern = tuple(model_cfg.layer_kinds) if 'layer_kinds' in model_cfg else ()
  if not pattern:
    return scheme(model_cfg.position.kind)
  parts = {k: scheme(k, f'config.model.layer_kinds[{i}]') for i, k in enumerate(pattern)}
  return per_layer(tuple(parts[k] for k in dict.fromkeys(layer_kinds(model_cfg))),
                   ','.join(pattern))


_PER_LAYER: dict[tuple, type[PositionScheme]] = {}


def per_layer(parts: tuple, name: str) -> type[PositionScheme]:
  """The description of a stack whose layers use the kinds `parts` (a hybrid layout such as
  three RoPE layers and one without positions): the union of their options and checks, the
  capabilities any of them has (causal only if one is, FAVOR+ only if all can), and a `Shared`
  module holding each kind's (its `__call__` returns one value per layer). Each block builds
  its own kind's `Layer`; blocks of different kinds differ, so such a stack is not scanned."""
  key = (parts, name)
  if key in _PER_LAYER:
    return _PER_LAYER[key]
  caps = [p.capabilities for p in parts]

  class LayerShared(Shared):
    def __init__(self, model_cfg, *, causal, rngs):
      self.kinds = list(layer_kinds(model_cfg))
      self.parts = nnx.Dict({p.kind: p.Shared(model_cfg, causal=causal, rngs=rngs)
                             for p in parts})

    def __call__(self):
      values = {kind: self.parts[kind]() for kind in dict.fromkeys(self.kinds)}
      return [values[kind] for kind in self.kinds]

  class PerLayer(PositionScheme):
    options = {}
    reads = tuple(dict.fromkeys(f for p in parts for f in p.fields()))
    capabilities = Capabilities(
        causal_only=any(c.causal_only for c in caps),
        reads_positions=any(c.reads_positions for c in caps),
        logits_term='; '.join(dict.fromkeys(c.logits_term for c in caps if c.logits_term)),
        value_term=any(c.value_term for c in caps),
        computes_logits=any(c.computes_logits for c in caps),
        rotary=any(c.rotary for c in caps),
        feature_rotation=all(c.feature_rotation or not c.rotary for c in caps) and any(
            c.feature_rotation for c in caps))
    causal_reason = '; '.join(p.causal_reason for p in parts if p.capabilities.causal_only)
    Shared = LayerShared

    @classmethod
    def validate(cls, cfg, model_cfg, seq_len, causal):
      for part in parts:
        part.validate(cfg, model_cfg, seq_len, causal)

    @classmethod
    def max_length(cls, cfg):
      bounds = [n for n in (p.max_length(cfg) for p in parts) if n is not None]
      return min(bounds) if bounds else None

  PerLayer.kind = name
  _PER_LAYER[key] = PerLayer
  return PerLayer


def bias_kinds() -> list[str]:
  """The kinds that change attention only by a bias, so that any other kind can add them."""
  return [k for k in kinds() if _REGISTRY[k].capabilities.bias_only]


def combined_kinds() -> list[str]:
  """Every 'A+B': A a kind that is not bias-only (nor 'none': B alone is that), B bias-only."""
  return [f'{a}+{b}' for a in kinds() if a != 'none' and not _REGISTRY[a].capabilities.bias_only
          for b in bias_kinds()]


_COMBINED: dict[tuple, type[PositionScheme]] = {}


def combine(first: type[PositionScheme], second: type[PositionScheme]) -> type[PositionScheme]:
  """Kind `first` with the bias of the bias-only kind `second` added to its logits: one
  description, built from the two (their options, checks and capabilities), with modules that
  hold one of each. This is how a multiplicative scheme (a rotation, or logits computed by the
  scheme) takes an additive one, e.g. rope+fox, without a class per pair."""
  if (first, second) in _COMBINED:
    return _COMBINED[(first, second)]
  a, b = first.capabilities, second.capabilities
  assert b.bias_only and not a.bias_only, (first.kind, second.kind)

  class CombinedShared(Shared):
    def __init__(self, model_cfg, *, causal, rngs):
      self.first = first.Shared(model_cfg, causal=causal, rngs=rngs)
      self.second = second.Shared(model_cfg, causal=causal, rngs=rngs)

    def embed(self, x, positions):
      return self.first.embed(x, positions)

    def __call__(self):
      return (self.first(), self.second())

  class CombinedLayer(Layer):
    def __init__(self, model_cfg, *, causal, rngs):
      self.first = first.Layer(model_cfg, causal=causal, rngs=rngs)
      self.second = second.Layer(model_cfg, causal=causal, rngs=rngs)

    def layer_input(self, x, positions, shared):
      return self.first.layer_input(x, positions, shared[0])

    def prepare(self, x, positions, shared):
      return (self.first.prepare(x, positions, shared[0]),
              self.second.prepare(x, positions, shared[1]))

    def rotate(self, q, k, q_pos, k_pos, ctx):
      return self.first.rotate(q, k, q_pos, k_pos, ctx[0])

    def rotate_value(self, v, k_pos, ctx):
      return self.first.rotate_value(v, k_pos, ctx[0])

    def rotate_features(self, qf, kf, q_pos, k_pos, ctx):
      return self.first.rotate_features(qf, kf, q_pos, k_pos, ctx[0])

    def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
      biases = [self.first.logits_bias(q, k, q_pos, k_pos, mask, ctx[0]),
                self.second.logits_bias(q, k, q_pos, k_pos, mask, ctx[1])]
      biases = [x for x in biases if x is not None]
      return None if not biases else biases[0] if len(biases) == 1 else biases[0] + biases[1]

    def logits(self, q, k, q_pos, k_pos, mask, ctx):
      return (self.first.logits(q, k, q_pos, k_pos, mask, ctx[0])
              + self.second.logits_bias(q, k, q_pos, k_pos, mask, ctx[1]))

    def value_term(self, probs, q_pos, k_pos, ctx):
      return self.first.value_term(probs, q_pos, k_pos, ctx[0])

    def cache_state(self, batch, max_len):
      states = (self.first.cache_state(batch, max_len), self.second.cache_state(batch, max_len))
      return None if states[0] is None and states[1] is None else states

    def extend_cache(self, ctx, state, index):
      state = state or (None, None)
      (ctx_a, a), (ctx_b, b) = (self.first.extend_cache(ctx[0], state[0], index),
                                self.second.extend_cache(ctx[1], state[1], index))
      return (ctx_a, ctx_b), (None if a is None and b is None else (a, b))

  class Combined(PositionScheme):
    options = {}
    reads = tuple(first.fields()) + tuple(second.fields())
    capabilities = Capabilities(
        causal_only=a.causal_only or b.causal_only,
        reads_positions=a.reads_positions or b.reads_positions,
        logits_term='; '.join(t for t in (a.logits_term, b.logits_term) if t),
        value_term=a.value_term, computes_logits=a.computes_logits, rotary=a.rotary,
        feature_rotation=False)
    causal_reason = first.causal_reason if a.causal_only else second.causal_reason
    Shared = CombinedShared
    Layer = CombinedLayer

    @classmethod
    def validate(cls, cfg, model_cfg, seq_len, causal):
      first.validate(cfg, model_cfg, seq_len, causal)
      second.validate(cfg, model_cfg, seq_len, causal)

    @classmethod
    def max_length(cls, cfg):
      bounds = [n for n in (first.max_length(cfg), second.max_length(cfg)) if n is not None]
      return min(bounds) if bounds else None

  Combined.kind = f'{first.kind}+{second.kind}'
  Combined.__name__ = Combined.__qualname__ = f'{first.__name__}Plus{second.__name__}'
  _COMBINED[(first, second)] = Combined
  return Combined


def capabilities(kind: str) -> Capabilities:
  return scheme(kind).capabilities


def default_fields() -> dict:
  """Each kind's own sub-config with its defaults, collected from the registered classes. A
  sub-config changed from its defaults while another kind is selected is an error (`validate`),
  not silently ignored."""
  fields = {}
  for cls in _REGISTRY.values():
    fields.update(copy.deepcopy(specs.defaults(cls.options)))
  return fields


class _KindSpec(specs.Str):
  """config.model.position.kind: a registered kind or a combination, refused with the
  registry's message (the kinds, and how combinations are formed) rather than every name."""

  def check(self, value, name):
    if isinstance(value, str):
      scheme(value)
    super().check(value, name)


def field_specs() -> dict:
  """The spec of every field of config.model.position: `kind` and each registered scheme's
  options (an option without a spec becomes specs.Undeclared, which fails every check)."""
  def declared(tree, where):
    return {k: declared(v, where) if isinstance(v, dict) else
            (v if isinstance(v, specs.Spec) else specs.Undeclared(v, where))
            for k, v in tree.items()}
  fields = {'kind': _KindSpec(choices=lambda: kinds() + combined_kinds(), default=DEFAULT_KIND)}
  for cls in _REGISTRY.values():
    fields.update(declared(cls.options, f'{cls.__module__}.{cls.__name__}.options'))
  return fields


def _with_defaults(value, default):
  """`value` with the options it lacks (a config saved before they existed) at their defaults."""
  if not isinstance(value, dict) or not isinstance(default, dict):
    return value
  return {**default, **{k: _with_defaults(v, default.get(k)) for k, v in value.items()}}


def scheme_fields(kind: str) -> tuple[str, ...]:
  """The option groups of config.model.position that scheme `kind` reads."""
  return scheme(kind).fields()


def validate(model_cfg: ml_collections.ConfigDict, seq_len: int, causal: bool = True) -> None:
  """Checks `model_cfg.position` before anything is built or compiled: each option against
  its spec, options of other kinds left at their defaults, the direction against the declared
  capabilities, then the scheme's own checks."""
  cfg = model_cfg.position
  pattern = tuple(model_cfg.layer_kinds) if 'layer_kinds' in model_cfg else ()
  for i, layer_kind in enumerate(pattern):
    scheme(layer_kind, f'config.model.layer_kinds[{i}]')
  cls = model_scheme(model_cfg)
  kind = cls.kind
  field = (f'config.model.layer_kinds={pattern}' if pattern else
           f'config.model.position.kind={kind!r}')
  used = set(cls.fields())
  for name, default in default_fields().items():
    if name in used or name not in cfg:
      continue
    value = cfg[name].to_dict() if hasattr(cfg[name], 'to_dict') else cfg[name]
    if _with_defaults(value, default) != default:
      raise errors.ConfigError(
          f'config.model.position.{name} is changed from its defaults but '
          f'{field} does not use it. Fix: set '
          f'--config.model.position.kind={name}, or drop the {name} overrides.')
  specs.check_tree(cfg, field_specs(), 'config.model.position')
  if not causal and cls.capabilities.causal_only:
    raise errors.ConfigError(
        f'{field} is for causal attention only '
        f'({cls.causal_reason}). Fix: choose a kind that encoders can use: '
        f'{[k for k in kinds() if not capabilities(k).causal_only]}.')
  impl = model_cfg.attention_impl
  if impl != 'auto' and impl not in cls.capabilities.implementations:
    raise errors.ConfigError(
        f'{field} needs the attention probabilities or computes the '
        f'logits itself, which jax.nn.dot_product_attention (attention_impl={impl!r}) cannot do. '
        f'Fix: --config.model.attention_impl=einsum (or auto).')
  cls.validate(cfg, model_cfg, seq_len, causal)


def legacy_param_path(path: str, stacks: tuple[tuple[str, str], ...],
                      cfg: ml_collections.ConfigDict) -> str:
  """The path that a parameter saved under an earlier layout has now ('/'-joined, any prefix
  such as params/ or opt_state/0/mu/ kept). `stacks` pairs each stack's Shared attribute with
  its blocks' attribute, e.g. (('position', 'blocks'),); `cfg` is config.model.position. Paths
  that need no change come back unchanged."""
  for shared_name, blocks_name in stacks:
    match = re.search(rf'(^|/){shared_name}/(.+)$', path)
    if not match:
      continue
    head, rest = path[:match.start(2)], match.group(2)
    tail = '/value' if rest.endswith('/value') else ''  # A variable's value, kept as it is.
    rest = rest.removesuffix(tail)
    for pattern, replacement in scheme(cfg.kind).legacy_params(cfg):
      found = re.fullmatch(pattern, rest)
      if not found:
        continue
      if replacement.startswith('layer:'):
        inner = found.expand(replacement.removeprefix('layer:'))
        head = head[:len(head) - len(shared_name) - 1]
        return f'{head}{blocks_name}/{found.group(1)}/position/{inner}{tail}'
      return head + found.expand(replacement) + tail
  return path


def head_dim(model_cfg) -> int:
  return model_cfg.d_model // model_cfg.num_heads


def relative_positions(q_pos, k_pos):
  """Integer distances q_pos - k_pos, [batch, q_len, k_len]."""
  return q_pos[:, :, None] - k_pos[:, None, :]


def capability_table() -> str:
  """The Markdown table of docs/positions.md: for every registered kind, the attention
  implementations, FAVOR+, the key/value cache, encoders and continuation at a new length it
  supports, from the declared capabilities (tests/test_docs.py keeps the page equal to it)."""
  yes = lambda flag: 'yes' if flag else 'no'
  lines = ['| kind | einsum | xla | cudnn | FAVOR+ | key/value cache | encoders '
           '| continued at a new length |', '|' + '---|' * 8]
  for kind in kinds():
    cls, caps = scheme(kind), capabilities(kind)
    favor = ('no' if not caps.linear_attention else
             'rope_mode qk or features' if caps.feature_rotation else
             'rope_mode qk' if caps.rotary else 'yes')
    longer = ('yes' if cls.max_length.__func__ is PositionScheme.max_length.__func__ else
              'within the lengths its parameters cover')
    lines.append(f'| `{kind}` | ' + ' | '.join(
        [yes(i in caps.implementations) for i in ('einsum', 'xla', 'cudnn')]
        + [favor, 'yes', yes(not caps.causal_only), longer]) + ' |')
  return '\n'.join(lines)
