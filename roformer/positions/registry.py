"""Looking position schemes up: a registered kind, a combination 'A+B' (a kind with the bias of a
bias-only kind added), a model's per-layer layout, and what is derived from the registry as a
whole (the config's fields and their check, the capability table, old checkpoints' paths).

A combination and a per-layer layout are descriptions made from their parts (`Composite`): their
options, checks, capabilities and life-cycle hooks are the parts', so no kind is written twice.
"""

import copy
import difflib
import re
import textwrap

import ml_collections
from flax import nnx

from roformer import errors
from roformer import fused_bias as fused_bias_lib
from roformer import specs
from roformer.positions.base import (DEFAULT_KIND, _REGISTRY, Capabilities, Layer,
                                     PositionScheme, Shared, kinds)

def scheme(kind: str, field: str = 'config.model.position.kind') -> type[PositionScheme]:
  """The description of `kind`: a registered kind, or 'A+B', kind A with the bias of a
  bias-only kind B added (`combine`). A ConfigError naming `field` and the choices if
  unknown."""
  if kind in _REGISTRY:
    return _REGISTRY[kind]
  if kind in combined_kinds():
    first, second = kind.split('+')
    return combine(_REGISTRY[first], _REGISTRY[second])
  text = str(kind)
  first, plus, second = text.partition('+')
  if plus and first in _REGISTRY and second in _REGISTRY:  # Known parts, not combinable.
    why = (f'only {bias_kinds()} can be added to another kind (B in A+B), not {second!r}'
           if second not in bias_kinds() else
           f'{first!r} is itself a bias only: {second} alone is its bias'
           if first in bias_kinds() else
           f'{first!r} gives no position signal for the bias to add to: {second} alone is '
           'that model')
    raise errors.ConfigError(
        f'{field}={kind!r}: {why}. Fix: choose one of {kinds()}, or A+B with B one of '
        f'{bias_kinds()} and A another kind than none (e.g. rope+fox).')
  hint = ''
  if ',' in text:
    hint = (" (one kind: a list of them is a tuple, --config.model.layer_kinds=\"('rope',"
            "'none')\")")
  elif text.lower() == 'nope':
    hint = " (did you mean 'none'? NoPE is position.kind=none)"
  elif text in OTHER_FIELDS:
    hint = f' ({text} is a value of {OTHER_FIELDS[text]}: --{OTHER_FIELDS[text]}={text})'
  else:
    close = difflib.get_close_matches(text, kinds() + combined_kinds(), n=1)
    hint = f' (did you mean {close[0]!r}?)' if close else ''
  raise errors.ConfigError(
      f'{field}={kind!r} is not a known position scheme{hint}. '
      f'Fix: choose one of {kinds()}, or A+B with B one of {bias_kinds()} (e.g. rope+fox).')


# Values of other fields that a position kind may be mistaken for ({value: the field}): the
# registries that import this one (roformer/attention_options) enter their kinds.
OTHER_FIELDS: dict[str, str] = {}


def layer_kinds(model_cfg) -> tuple[str, ...]:
  """Each layer's kind: `model.layer_kinds` cycled over the layers, or `model.position.kind`
  for every layer when that pattern is empty."""
  pattern = tuple(model_cfg.layer_kinds) if 'layer_kinds' in model_cfg else ()
  if not pattern:
    return (model_cfg.position.kind,) * model_cfg.num_layers
  return tuple(pattern[i % len(pattern)] for i in range(model_cfg.num_layers))


def layer_windows(model_cfg) -> tuple[int, ...]:
  """Each layer's sliding window: `model.layer_windows` cycled over the layers (0, and an
  empty pattern: the whole causal context)."""
  pattern = tuple(model_cfg.layer_windows) if 'layer_windows' in model_cfg else ()
  return tuple(int(pattern[i % len(pattern)]) if pattern else 0
               for i in range(model_cfg.num_layers))


def layer_rope_bases(model_cfg) -> tuple[float, ...]:
  """Each layer's RoPE base: `model.layer_rope_bases` cycled over the layers (Gemma 3's local
  and global bases), and `position.rope.base` on every layer where it is empty."""
  pattern = tuple(model_cfg.layer_rope_bases) if 'layer_rope_bases' in model_cfg else ()
  base = float(model_cfg.position.rope.base)
  return tuple(float(pattern[i % len(pattern)]) if pattern else base
               for i in range(model_cfg.num_layers))


def model_scheme(model_cfg) -> type[PositionScheme]:
  """The description of a model's positions: its kind's, or with `model.layer_kinds` one made
  from the layers' kinds (`per_layer`)."""
  pattern = tuple(model_cfg.layer_kinds) if 'layer_kinds' in model_cfg else ()
  if not pattern:
    return scheme(model_cfg.position.kind)
  parts = {k: scheme(k, f'config.model.layer_kinds[{i}]') for i, k in enumerate(pattern)}
  return per_layer(tuple(parts[k] for k in dict.fromkeys(layer_kinds(model_cfg))),
                   ','.join(pattern))


class Composite(PositionScheme):
  """A description made from the kinds `parts` (a combination, a per-layer layout): every
  check and life-cycle hook is its parts'."""

  parts: tuple[type[PositionScheme], ...] = ()
  options = {}

  @classmethod
  def _each(cls, hook: str, *args) -> None:
    """Calls every part's `hook` with `args` (the checks and fills that each part does)."""
    for part in cls.parts:
      getattr(part, hook)(*args)

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    cls._each('validate', cfg, model_cfg, seq_len, causal)

  @classmethod
  def max_length(cls, cfg):
    bounds = [n for n in (p.max_length(cfg) for p in cls.parts) if n is not None]
    return min(bounds) if bounds else None

  @classmethod
  def from_source(cls, cfg, trained, occasion):
    cls._each('from_source', cfg, trained, occasion)

  @classmethod
  def check_continuation(cls, cfg, trained, seq_len, source):
    cls._each('check_continuation', cfg, trained, seq_len, source)

  @classmethod
  def _scaled_part(cls, cfg):
    """The first part with a context-extension factor, or None."""
    for part in cls.parts:
      try:
        part.length_factor(cfg)
        return part
      except errors.ConfigError:
        continue
    return None

  @classmethod
  def length_factor(cls, cfg):
    part = cls._scaled_part(cfg)
    return part.length_factor(cfg) if part else super().length_factor(cfg)

  @classmethod
  def factor_basis(cls, cfg, trained):
    part = cls._scaled_part(cfg)
    return part.factor_basis(cfg, trained) if part else super().factor_basis(cfg, trained)

  @classmethod
  def unread(cls, cfg, model_cfg):
    return list(dict.fromkeys(u for part in cls.parts for u in part.unread(cfg, model_cfg)))

  @classmethod
  def remaps(cls, model_cfg):
    return any(part.remaps(model_cfg) for part in cls.parts)

  @classmethod
  def layer_options(cls, model_cfg, layer):
    return {k: v for part in cls.parts for k, v in part.layer_options(model_cfg, layer).items()}

  @classmethod
  def cache_breaks(cls, cfg):
    return tuple(sorted({n for part in cls.parts for n in part.cache_breaks(cfg)}))

  @classmethod
  def results_fields(cls, cfg):
    return {k: v for part in cls.parts for k, v in part.results_fields(cfg).items()}


def option(cfg, path: str):
  """config.model.position `cfg`'s option at the dotted `path` ('rope.scaling.factor')."""
  for part in path.split('.'):
    cfg = cfg[part]
  return cfg


def set_option(cfg, path: str, value) -> None:
  """Sets config.model.position `cfg`'s option at the dotted `path` to `value`."""
  group, _, last = path.rpartition('.')
  (option(cfg, group) if group else cfg)[last] = value


def length_scaling(model_cfg, trained: int) -> tuple[str, float, int]:
  """eval.scale_rope_to_length's rule for a model trained on `trained` positions: (the option
  under config.model.position that it sets, the least factor, the length it stretches); an
  evaluated length L takes max(least, L / length). A model trained with a scaling (continued
  with YaRN from 64 to 256 at factor 4; Llama 3.1's llama3 at 8) keeps its factor up to the
  length it reaches and stretches from its original length past it."""
  scheme = model_scheme(model_cfg)
  name = scheme.length_factor(model_cfg.position)
  return (name, *scheme.factor_basis(model_cfg.position, trained))


def check_length_factor(model_cfg, saved_model_cfg) -> None:
  """eval.scale_rope_to_length sets the factor of each length: a factor given on the command
  line as well would be recorded and not applied, so it is refused."""
  name = model_scheme(model_cfg).length_factor(model_cfg.position)
  given, saved = option(model_cfg.position, name), option(saved_model_cfg.position, name)
  if given != saved:
    field = f'config.model.position.{name}'
    raise errors.ConfigError(
        f'{field}={given} is set at each evaluated length by config.eval.scale_rope_to_length '
        f'(the model was trained with {saved}). Fix: drop --{field} to scale each length, or '
        f'drop --config.eval.scale_rope_to_length to evaluate every length at {given}.')


def unread(model_cfg) -> list[tuple[str, str]]:
  """(field under config.model.position, why) of each setting the model leaves unread: the
  kind beside model.layer_kinds that does not name it, and each scheme's own (`unread`)."""
  cfg = model_cfg.position
  pattern = tuple(model_cfg.layer_kinds) if 'layer_kinds' in model_cfg else ()
  out = []
  if pattern and cfg.kind not in (DEFAULT_KIND, *pattern):  # Naming a layer's kind is harmless.
    out.append(('kind', f'config.model.position.kind={cfg.kind!r} is not read: '
                        f'config.model.layer_kinds={pattern} gives each layer its kind. Fix: '
                        f'name {cfg.kind} in layer_kinds, or drop --config.model.position.kind '
                        f'(its default is {DEFAULT_KIND!r}).'))
  return out + model_scheme(model_cfg).unread(cfg, model_cfg)


def layer_config(model_cfg, layer: int) -> ml_collections.ConfigDict:
  """The model config that block `layer` is built from: `model_cfg` with its layer's kind
  (`model.layer_kinds`) and the options its scheme sets per layer (`layer_options`), or
  `model_cfg` itself when they are the model's."""
  kind = layer_kinds(model_cfg)[layer]
  options = scheme(kind).layer_options(model_cfg, layer)
  if kind == model_cfg.position.kind and all(
      option(model_cfg.position, k) == v for k, v in options.items()):
    return model_cfg
  layer_cfg = copy.deepcopy(model_cfg)
  with layer_cfg.unlocked():
    layer_cfg.position.kind = kind
    for path, value in options.items():
      set_option(layer_cfg.position, path, value)
  return layer_cfg


_PER_LAYER: dict[tuple, type[PositionScheme]] = {}


def per_layer(parts: tuple, name: str) -> type[PositionScheme]:
  """The description of a stack whose layers use the kinds `parts` (a hybrid layout such as
  three RoPE layers and one without positions): the union of their options and checks, the
  capabilities any of them has (causal only if one is, FAVOR+ only if all can), and a `Shared`
  module holding each kind's (its `__call__` returns one value per layer). Each block builds
  its own kind's `Layer`; a scanned stack runs each period of the layout as one step."""
  key = (parts, name)
  if key in _PER_LAYER:
    return _PER_LAYER[key]
  caps = [p.capabilities for p in parts]

  class LayerShared(Shared):
    def __init__(self, model_cfg, *, causal, rngs):
      self.kinds = tuple(layer_kinds(model_cfg))  # Static: hashable in a jitted graph.
      self.parts = nnx.Dict({p.kind: p.Shared(model_cfg, causal=causal, rngs=rngs)
                             for p in parts})

    def __call__(self):
      values = {kind: self.parts[kind]() for kind in dict.fromkeys(self.kinds)}
      return [values[kind] for kind in self.kinds]

  class PerLayer(Composite):
    reads = tuple(dict.fromkeys(f for p in parts for f in p.fields()))
    derived = tuple(dict.fromkeys(d for p in parts for d in p.derived))
    filled_from_source = tuple(dict.fromkeys(f for p in parts for f in p.filled_from_source))
    capabilities = Capabilities(
        causal_only=any(c.causal_only for c in caps),
        reads_positions=any(c.reads_positions for c in caps),
        logits_term='; '.join(dict.fromkeys(c.logits_term for c in caps if c.logits_term)),
        value_term=any(c.value_term for c in caps),
        computes_logits=any(c.computes_logits for c in caps),
        rotary=any(c.rotary for c in caps),
        feature_rotation=all(c.feature_rotation or not c.rotary for c in caps) and any(
            c.feature_rotation for c in caps),
        real_positions=all(c.real_positions or not c.reads_positions for c in caps),
        fused_bias=all(c.fused_bias or not c.logits_term for c in caps),
        fused_first=any(c.logits_term for c in caps) and all(
            c.fused_first or not c.logits_term for c in caps),
        latent_cache=all(c.latent_cache for c in caps))
    causal_reason = '; '.join(p.causal_reason for p in parts if p.capabilities.causal_only)
    Shared = LayerShared

  PerLayer.kind, PerLayer.parts = name, tuple(parts)
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

    def rotates_keys_alone(self):
      return self.first.rotates_keys_alone()

    def keeps_unrotated_dims(self):
      return self.first.keeps_unrotated_dims()

    def rotate_value(self, v, k_pos, ctx):
      return self.first.rotate_value(v, k_pos, ctx[0])

    def rotate_features(self, qf, kf, q_pos, k_pos, ctx):
      return self.first.rotate_features(qf, kf, q_pos, k_pos, ctx[0])

    def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
      biases = [self.first.logits_bias(q, k, q_pos, k_pos, mask, ctx[0]),
                self.second.logits_bias(q, k, q_pos, k_pos, mask, ctx[1])]
      biases = [x for x in biases if x is not None]
      return None if not biases else biases[0] if len(biases) == 1 else biases[0] + biases[1]

    def fused_bias(self, q_pos, ctx):
      bias, params, row, col = self.second.fused_bias(q_pos, ctx[1])
      if not a.fused_bias:  # `first` adds no bias where it runs (RoPE rotates q and k).
        return bias, params, row, col
      first_bias, first_params, _, _ = self.first.fused_bias(q_pos, ctx[0])
      return fused_bias_lib.combined(first_bias, bias), first_params, row, col

    def logits(self, q, k, q_pos, k_pos, mask, ctx):
      return (self.first.logits(q, k, q_pos, k_pos, mask, ctx[0])
              + self.second.logits_bias(q, k, q_pos, k_pos, mask, ctx[1]))

    def remapped_logits(self, q, k, q_pos, k_pos, row_pos=None):
      return self.first.remapped_logits(q, k, q_pos, k_pos, row_pos)

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

  class Combined(Composite):
    reads = tuple(first.fields()) + tuple(second.fields())
    derived = tuple(dict.fromkeys(first.derived + second.derived))
    filled_from_source = tuple(dict.fromkeys(first.filled_from_source
                                             + second.filled_from_source))
    capabilities = Capabilities(
        causal_only=a.causal_only or b.causal_only,
        reads_positions=a.reads_positions or b.reads_positions,
        logits_term='; '.join(t for t in (a.logits_term, b.logits_term) if t),
        value_term=a.value_term, computes_logits=a.computes_logits, rotary=a.rotary,
        feature_rotation=False,
        real_positions=all(c.real_positions or not c.reads_positions for c in (a, b)),
        fused_bias=b.fused_bias and (a.fused_bias or not a.logits_term),
        fused_first=b.fused_first and (a.fused_first or not a.logits_term),
        latent_cache=a.latent_cache and b.latent_cache)
    causal_reason = first.causal_reason if a.causal_only else second.causal_reason
    Shared = CombinedShared
    Layer = CombinedLayer

  Combined.kind, Combined.parts = f'{first.kind}+{second.kind}', (first, second)
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
    needs = 'it needs the attention probabilities or computes the logits itself, which '
    why = (('its bias has no form for the fused kernel (no fused_bias hook)'
            if 'xla' in cls.capabilities.implementations else
            needs + "the fused kernel (attention_impl='pallas') cannot do")
           if impl == 'pallas' else
           needs + f'jax.nn.dot_product_attention (attention_impl={impl!r}) cannot do')
    raise errors.ConfigError(f'{field}: {why}. Fix: --config.model.attention_impl=einsum (or '
                             'auto).')
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




def capability_table() -> str:
  """The Markdown table of docs/positions.md: for every registered kind, the attention
  implementations (pallas: the fused kernel of roformer/fused_bias.py, which `auto` takes on a
  GPU for a scheme that declares fused_first), FAVOR+, the key/value cache, MLA's latent cache
  (its absorbed form), encoders and continuation at a new length it supports, and whether it
  reads real-valued positions (random float sampling), from the declared capabilities
  (tests/test_docs.py keeps the page equal to it)."""
  yes = lambda flag: 'yes' if flag else 'no'
  lines = ['| kind | einsum | xla | cudnn | pallas | FAVOR+ | key/value cache | MLA latent cache '
           '| encoders | continued at a new length | real positions |', '|' + '---|' * 11]
  for kind in kinds():
    cls, caps = scheme(kind), capabilities(kind)
    favor = ('no' if not caps.linear_attention else
             'rope_mode qk or features' if caps.feature_rotation else 'rope_mode qk')
    longer = ('yes' if cls.max_length.__func__ is PositionScheme.max_length.__func__ else
              'within the lengths its parameters cover')
    lines.append(f'| `{kind}` | ' + ' | '.join(
        [yes(i in caps.implementations) for i in ('einsum', 'xla', 'cudnn')]
        + ['yes, auto on a GPU' if caps.fused_first else yes('pallas' in caps.implementations)]
        + [favor, 'yes', yes(caps.latent_cache), yes(not caps.causal_only), longer,
           yes(caps.real_positions) if caps.reads_positions else 'none read']) + ' |')
  return '\n'.join(lines)


def derive(model_cfg, trained: int) -> None:
  """Sets each derived option (`PositionScheme.derived`) left at 0 in `model_cfg` (unlocked) to
  `trained`, the positions the run trains on."""
  for path in model_scheme(model_cfg).derived:
    if not option(model_cfg.position, path):
      set_option(model_cfg.position, path, trained)


def _take_unset(model_cfg, saved_model_cfg, declared: str) -> None:
  """Sets each option the scheme lists in its `declared` attribute that is left at 0 in
  `model_cfg` (unlocked) to its value in `saved_model_cfg`, where that run's scheme lists it."""
  saved = getattr(model_scheme(saved_model_cfg), declared)
  for path in getattr(model_scheme(model_cfg), declared):
    if path in saved and not option(model_cfg.position, path):
      set_option(model_cfg.position, path, option(saved_model_cfg.position, path))


def take_derived(model_cfg, saved_model_cfg) -> None:
  """Each derived option (`PositionScheme.derived`) left unset takes the value of the run
  `saved_model_cfg` describes (the run resumed, continued or fine-tuned from)."""
  _take_unset(model_cfg, saved_model_cfg, 'derived')


def take_filled(model_cfg, saved_model_cfg) -> None:
  """Each option that `from_source` fills in (`PositionScheme.filled_from_source`) left unset
  takes its value in `saved_model_cfg`, the resumed run's own config, where that run filled it
  in when it started."""
  _take_unset(model_cfg, saved_model_cfg, 'filled_from_source')


def kinds_line() -> str:
  """The README's list of the registered kinds, wrapped at 96 columns (tests/test_docs.py keeps
  the README equal to it)."""
  return textwrap.fill(', '.join(f'`{kind}`' for kind in kinds()) + '.', 96)


def may_change() -> tuple[tuple[str, tuple[str, ...], str], ...]:
  """(field, occasions, why) for every option that some registered kind lets a run reading a
  trained one change (its `may_change`), each option once."""
  rules = {}
  for cls in _REGISTRY.values():
    for option, occasions, why in cls.may_change:
      rules.setdefault(f'model.position.{option}', (occasions, why))
  return tuple((field, occasions, why) for field, (occasions, why) in rules.items())
