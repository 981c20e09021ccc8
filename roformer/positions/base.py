"""The position-scheme interface: what a kind declares, the modules it builds, and the registry.

A kind is described once, by a `PositionScheme` subclass registered under its name:
- `options`: its option groups under `config.model.position.<group>`, each option's type, range
  and default (`roformer/specs.py`); configs/base.py and the config check read them from here;
- `validate`: the checks that relate its options to the model and the sequence length;
- `capabilities`: what it can be combined with (`Capabilities`), which is all that code outside
  this package asks: no kind name appears in the stack, the config checks or the warm start
  (registry.py looks kinds up, and builds combinations and per-layer layouts from them);
- its life cycle (`may_change`, `from_source`, `check_continuation`, `length_factor`,
  `layer_options`, `results_fields`): what a run reading a trained one may change of its
  options and takes from that run, what a block sets per layer, what an evaluation records;
- two module classes: `Shared`, built once per stack (the embedding hook and any parameters
  shared by the layers), and `Layer`, built by every block, which owns that layer's parameters.
  A block's `Layer` is the same for every block of a kind, so a stack repeats with the period of
  its per-layer settings and can be scanned by periods (`roformer.scanned`).

The stack calls the hooks at fixed points; every hook defaults to the identity (`fused_bias`:
the same bias as `logits_bias`, as what roformer/fused_bias.py computes block by block, read
with attention_impl='pallas'):

| hook                                         | module | used by                | effect                          |
|----------------------------------------------|--------|------------------------|---------------------------------|
| `embed(x, positions)`                        | Shared | sinusoidal, learned    | adds an absolute code to x      |
| `__call__()`                                 | Shared | xl, t5, fire (shared)  | the arrays every layer reads    |
| `layer_input(x, positions, shared)`          | Layer  | learned (per layer)    | adds a code at a layer's input  |
| `prepare(x, positions, shared)`              | Layer  | fox, path              | the context the hooks below get |
| `rotate(q, k, q_pos, k_pos, ctx)`            | Layer  | rope, xpos             | rotates queries and keys        |
| `rotate_value(v, k_pos, ctx)`                | Layer  | rope (rotate_values)   | rotates values                  |
| `rotate_features(qf, kf, q_pos, k_pos, ctx)` | Layer  | rope                   | FAVOR+'s rotation of features   |
| `logits_bias(q, k, q_pos, k_pos, mask, ctx)` | Layer  | the bias schemes (*)   | added to the attention logits   |
| `fused_bias(q_pos, ctx)`                     | Layer  | alibi, kerple, t5, ... | the bias for the fused kernel   |
| `logits(q, k, q_pos, k_pos, mask, ctx)`      | Layer  | path, pope, tapa       | replaces q.k/sqrt(d) itself     |
| `remapped_logits(q, k, q_pos, k_pos, row)`   | Layer  | rope                   | the logits under a remap        |
| `value_term(probs, q_pos, k_pos, ctx)`       | Layer  | shaw                   | added to the attention output   |
| `cache_state(batch, max_len)`                | Layer  | fox, path              | its per-slot state in the cache |
| `extend_cache(ctx, state, index)`            | Layer  | fox, path              | the context over every slot     |

(*) shaw, xl, t5, alibi, kerple, fire, cope, fox. `prepare` receives the attention sublayer's input
(after the LayerNorm in the pre-norm stack) and returns the per-layer context `ctx` that the
other attention hooks receive; by default that context is `shared`, what the stack's `Shared`
module returns. `logits_bias` also receives the attention mask (bool, broadcastable to
[batch, heads, q_len, k_len]), which only CoPE reads: its positions count the gates of the keys
a query may see. Positions are always explicit arrays, integer unless a training-position
sampler draws real ones for a kind that declares `real_positions` (they restart at 0 in every
packed segment and start at the cache index when decoding); angles are computed in float32 and
cast to the activation dtype only at the end.

With a key/value cache, a scheme whose context is computed from the tokens (FoX's cumulative
gates) keeps it per slot: `cache_state` allocates it with the cache (batch first, so that beam
search reorders it with the keys), and `extend_cache` receives `prepare`'s context for the new
tokens, writes them at slot `index` and returns the context over every slot with the new state.
"""

import dataclasses
from typing import Any, Callable

import jax
import ml_collections
from flax import nnx

from roformer import errors

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
  real_positions: it reads the positions as real numbers (angles proportional to them, functions
    of their differences), never as indices into a table or buckets, so real-valued training
    positions (random float sampling) mean to it what integer ones do.
  fused_bias: its `fused_bias` hook gives its logits bias to the fused kernel
    (roformer/fused_bias.py), so attention_impl='pallas' runs it; a scheme with no logits term
    runs there without one.
  fused_first: on a GPU in half precision, attention_impl='auto' runs it on the fused kernel
    rather than on cuDNN with its bias materialised: measured faster there
    (docs/performance_gpu.md). Only with fused_bias.
  latent_cache: its hooks read queries and keys only through their dot products and RoPE's
    rotation of the first rotary dimensions, and the values not at all (RoPE's rotate_values, an
    option of it that does, is refused apart: roformer/config_checks.py), so multi-head latent
    attention's absorbed form (`model.mla.cache='latent'`: wider query heads, one key head,
    the latent as values; roformer/latent_attention.py) computes what its heads do.
  """
  causal_only: bool = False
  reads_positions: bool = True
  logits_term: str = ''
  value_term: bool = False
  computes_logits: bool = False
  bias_only: bool = False
  rotary: bool = False
  feature_rotation: bool = False
  real_positions: bool = False
  fused_bias: bool = False
  fused_first: bool = False
  latent_cache: bool = False

  @property
  def implementations(self) -> tuple[str, ...]:
    """The attention implementations that can run it (attention.IMPLEMENTATIONS less 'auto')."""
    if self.value_term or self.computes_logits:
      return ('einsum',)
    return ('einsum', 'xla', 'cudnn') + (
        ('pallas',) if self.fused_bias or not self.logits_term else ())

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

  def rotates_keys_alone(self) -> bool:
    """Whether `rotate` turns each key by its own position and the layer's constants alone (the
    same whatever the other keys and the queries are), so that a decoding cache may keep the
    keys rotated once, as they are written, instead of rotating every cached key at each step.
    True of a layer that rotates nothing; a layer that rotates says so itself."""
    return type(self).rotate is Layer.rotate

  def keys_by_position_alone(self) -> bool:
    """Whether what this layer does to a key depends on that key's position alone: it rotates
    keys alone (`rotates_keys_alone`) and adds no bias, logits, value term or per-slot state of
    its own. A windowed layer of such a scheme may then decode over a cache of its window's keys
    alone, kept in a ring whose slots hold them out of order (roformer/window_cache.py)."""
    cls = type(self)
    return self.rotates_keys_alone() and all(
        getattr(cls, hook) is getattr(Layer, hook)
        for hook in ('logits_bias', 'logits', 'value_term', 'cache_state', 'extend_cache'))

  def keeps_unrotated_dims(self) -> bool:
    """Whether `rotate` leaves each key's dimensions past the ones it rotates as they are (MLA's
    absorbed form, roformer/latent_attention.py, reads its values there from a cached key)."""
    return True

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

  def fused_bias(self, q_pos, ctx):
    """This layer's logits bias for the fused kernel (roformer/fused_bias.py), for schemes that
    declare `Capabilities.fused_bias`: (fused_bias.Bias, per-head parameters [heads, P] or
    None, row and col values [batch, heads, len] or None); None: no bias."""
    del q_pos, ctx
    return None

  def logits(self, q, k, q_pos, k_pos, mask, ctx):
    """The attention logits [batch, heads, q_len, k_len] (float32, scaled) in place of
    q.k/sqrt(d), for schemes whose capabilities say `computes_logits`."""
    raise NotImplementedError(f'{type(self).__name__} does not compute logits.')

  def remapped_logits(self, q, k, q_pos, k_pos, row_pos=None):
    """For a layer whose scheme `remaps`: the scaled logits [batch, heads, q_len, k_len]
    (float32) under its training-free distance remap, and the [batch, q_len, k_len] pairs the
    remap lets a query see (None: all). `row_pos`: the whole row's positions where q and k are
    a block of it (what depends on the row's length, such as dynamic scaling's frequencies, is
    the row's)."""
    raise NotImplementedError(f'{type(self).__name__} has no distance remap.')

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

  # Its life cycle: what a run that reads a trained one (a continued run reads its source, an
  # evaluation its checkpoint) may change of its options, and what it takes from that run.
  # (option under config.model.position, the occasions ('continue', 'evaluate'), why): the
  # options that may differ from the trained run's; every other option of its groups is fixed
  # with the model (roformer/saved_config.py reads these).
  may_change: tuple[tuple[str, tuple[str, ...], str], ...] = ()
  # Options (dotted, under config.model.position) whose 0 means "the positions this model
  # trains on" (FoPE's clipping length): a run that starts from nothing writes its trained
  # positions into its config, and every run that reads a trained one (resumed, continued,
  # fine-tuned, evaluated) takes the value saved there (registry.derive, registry.take_derived).
  derived: tuple[str, ...] = ()
  # Options that `from_source` fills in when they are left at 0 (RoPE's original length): a
  # resumed continuation takes them from its own saved config, as its source may be gone
  # (registry.take_filled).
  filled_from_source: tuple[str, ...] = ()

  @classmethod
  def from_source(cls, cfg: ml_collections.ConfigDict, trained: int, occasion: str) -> None:
    """Fills in, in `cfg` (config.model.position, unlocked), what this kind takes from the run
    read on `occasion` ('continue' or 'evaluate'), which was trained on `trained` positions:
    nothing by default."""
    del cfg, trained, occasion

  @classmethod
  def check_continuation(cls, cfg: ml_collections.ConfigDict, trained: int, seq_len: int,
                         source: str) -> None:
    """Raises ConfigError naming the fix if its options (after `from_source`) cannot continue
    `source`, trained on `trained` positions, at `seq_len`."""
    del cfg, trained, seq_len, source

  @classmethod
  def length_factor(cls, cfg: ml_collections.ConfigDict) -> str:
    """The option (under config.model.position) that eval.scale_rope_to_length sets to each
    evaluated length over the trained one; ConfigError naming the fix if it has none."""
    del cfg
    raise errors.ConfigError(
        f'config.eval.scale_rope_to_length=True sets a context-extension factor to each '
        f'evaluated length / the trained one, and position.kind={cls.kind!r} has none. Fix: '
        'drop it, or evaluate a kind with a context-extension scaling (docs/positions.md).')

  @classmethod
  def unread(cls, cfg: ml_collections.ConfigDict,
             model_cfg: ml_collections.ConfigDict) -> list[tuple[str, str]]:
    """(option under config.model.position, why) of each of its options set away from its
    default that the model's other fields leave unread (it would change nothing); checked
    with the fields (resolve.check_fields), where a value saved with a trained run is kept.
    None by default."""
    del cfg, model_cfg
    return []

  @classmethod
  def factor_basis(cls, cfg: ml_collections.ConfigDict, trained: int) -> tuple[float, int]:
    """(the least factor, the length it stretches) of `length_factor` for a model trained on
    `trained` positions: eval.scale_rope_to_length sets the factor at length L to
    max(least, L / length). By default (1, trained): a factor of 1 where it was trained."""
    del cfg
    return 1.0, trained

  @classmethod
  def layer_options(cls, model_cfg: ml_collections.ConfigDict, layer: int) -> dict:
    """{option under config.model.position: value} that block `layer` takes in place of the
    model's (RoPE's base from model.layer_rope_bases): none by default."""
    del model_cfg, layer
    return {}

  @classmethod
  def remaps(cls, model_cfg: ml_collections.ConfigDict) -> bool:
    """Whether the layers it builds from `model_cfg` compute their logits under a
    training-free distance remap (their `remapped_logits`, on the einsum path): no by
    default."""
    del model_cfg
    return False

  @classmethod
  def cache_breaks(cls, cfg: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The lengths n past which its layers compute every earlier position anew (LongRoPE
    rotates by another set of frequencies once a call's length exceeds its original length):
    decoding that reaches length n + 1 refills the cache over the whole prefix there, so that it
    equals a full pass. None by default."""
    del cfg
    return ()

  @classmethod
  def results_fields(cls, cfg: ml_collections.ConfigDict) -> dict:
    """What an evaluation's results record of its options (eval_results.json): nothing by
    default."""
    del cfg
    return {}


# What each capability promises (`Capabilities`), and the Layer hooks, one of which must
# keep the promise: a hook left at its default would run as if the capability were absent.
_CAPABILITY_HOOKS = (('rotary', ('rotate',)), ('feature_rotation', ('rotate_features',)),
                     ('logits_term', ('logits_bias', 'logits')),
                     ('computes_logits', ('logits',)), ('value_term', ('value_term',)),
                     ('fused_bias', ('fused_bias',)))


def check_declared(cls: type[PositionScheme]) -> None:
  """Raises TypeError, naming the hook, where `cls` declares a capability that its Layer does
  not implement, causal_only without the reason its error gives, or fused_first without
  fused_bias."""
  if cls.capabilities.fused_first and not cls.capabilities.fused_bias:
    raise TypeError(f'{cls.__name__} declares fused_first without fused_bias: the fused kernel '
                    'cannot run it.')
  for capability, hooks in _CAPABILITY_HOOKS:
    if getattr(cls.capabilities, capability) and all(
        getattr(cls.Layer, hook) is getattr(Layer, hook) for hook in hooks):
      raise TypeError(
          f'position scheme {cls.__name__} declares Capabilities({capability}=...), but its '
          f'Layer ({cls.Layer.__name__}) does not override {" or ".join(hooks)}. Fix: write '
          f'the hook (docs/positions.md#adding-a-position-scheme), or drop the capability.')
  if cls.capabilities.causal_only and not cls.causal_reason:
    raise TypeError(f'position scheme {cls.__name__} declares causal_only without '
                    "causal_reason, which its error gives as the reason. Fix: set "
                    "causal_reason = 'why it needs causal attention'.")


def register(kind: str) -> Callable[[type[PositionScheme]], type[PositionScheme]]:
  """Adds the decorated PositionScheme to the registry as `kind`, once `check_declared`."""
  def wrap(cls):
    check_declared(cls)
    cls.kind = kind
    _REGISTRY[kind] = cls
    return cls
  return wrap


DEFAULT_KIND = 'rope'  # config.model.position.kind unless a config chooses another.


def kinds() -> list[str]:
  return sorted(_REGISTRY)


def head_dim(model_cfg) -> int:
  """Each attention head's width: `model.head_dim`, or d_model / num_heads where it is 0."""
  return int(model_cfg.head_dim) or model_cfg.d_model // model_cfg.num_heads


def relative_positions(q_pos, k_pos):
  """Integer distances q_pos - k_pos, [batch, q_len, k_len]."""
  return q_pos[:, :, None] - k_pos[:, None, :]
