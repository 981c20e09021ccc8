"""The attention interface: what an attention kind (`config.model.attention.kind`) and a switch
of `config.model.attention` declare, and the hooks roformer/self_attention.py calls.

A kind or a switch is one module of this package: a subclass of `AttentionKind` or
`AttentionOption` registered with `register`, holding its fields (type, range, default), what it
needs of the others and of the position schemes, its FLOPs and its hooks. The config checks,
roformer/flops.py and the table of docs/positions.md read the declarations (the package's
`check`, `table`), so no pair of options is written out anywhere.

A self-attention call runs the hooks in this order (the switches' in the order the package
registers them; a switch's hooks default to doing nothing, `logits` being called only where
`forms_logits` says so, and a kind must define `attend`):

- `init(module, cfg, att, caps, rngs, dtype)`, kind and switches: the layer's parameters and
  settings, at construction;
- `projections(module, q, k, v)`, switches (qkv_clip): the projected queries, keys and values,
  before anything else;
- `queries_keys(module, q, k)`, switches (qk_norm): before the cache and any rotation;
- `rotate(module, q, k, site)`, kind: the position scheme's rotation, or none (a remap, FAVOR+'s
  rotated features);
- `values(module, v)`, switches (differential): the values the maps weight;
- `queries(module, q, pos)`, switches (nope_temperature): the rotated queries;
- `attend(module, q, k, v, mask, site)`, kind: the weights and the weighted values; softmax's
  asks the switches' `logits` (dape: forms the logits, `forms_logits`), `logits_factor`
  (ssmax: a factor on each row's logits and bias), `map_logits` (softcap: a function of the
  formed logits, `maps_logits`) and `sink` (sink_logit: a logit per head in each row's
  softmax, `adds_sink`);
- `outputs(module, out, x, layer)`, switches (differential, output_gate): the heads' outputs.

`init` sets parameters as attributes of the attention module, so that their paths in a
checkpoint are the module's (`attn/q_scale`, `attn/gate`, ...) whatever module declares them.
"""

import dataclasses
from typing import Any

import jax

from roformer import fused_bias
from roformer import latent_attention
from roformer import positions

# Features an attention kind may form, and how a message says that one lacks it.
FEATURES = {
    'softmax': 'has no softmax: it forms no softmax maps over logits',
    'logits': 'forms no L x L logits',
    'head_outputs': 'has no per-head outputs formed as weights times values',
    'mask': 'never forms the attention mask',
}

# A prompt filling its own cache runs in at most this many causal blocks (`Site.block_rows`):
# at 8,192 tokens on the CPU, 16 blocks compiled in a quarter of the time 64 blocks of 128 rows
# took, and stepped faster, for a little more memory held (docs/performance.md).
PREFILL_BLOCKS = 16

KINDS: dict[str, 'AttentionKind'] = {}
OPTIONS: dict[str, 'AttentionOption'] = {}


@dataclasses.dataclass(frozen=True)
class Site:
  """What one self-attention call hands its kind's `attend` and `rotate`: the query and key
  positions, the block's position module and its context, the layer's cache (None without
  one), the packed segment ids (None where there are none), the layer index (an int or an int32
  scalar) and the queries' first key slot (0, or the cache index)."""
  pos: jax.Array
  k_pos: jax.Array
  position: Any
  ctx: Any
  cache: dict | None
  segments: jax.Array | None
  layer: Any
  first_slot: Any
  # The call writes every slot of its cache from slot 0 (a prompt's own cache, as
  # decode.causal_lm_start fills it): its keys are its own tokens' and its mask the causal one,
  # so it may run over causal blocks as a call without a cache does.
  fills_cache: bool = False

  def block_rows(self, module, q_len: int) -> int:
    """The rows of each causal block of queries this call may run in (0: none): the layer's
    `model.causal_block` without a cache; for a prompt filling its own cache, at least
    q_len / PREFILL_BLOCKS, since generation compiles a program for each prompt length and each
    block is its own part of it (docs/performance.md); none with any other cache."""
    if self.cache is None:
      return module.causal_block
    if self.fills_cache and module.causal_block:
      return max(module.causal_block, -(-q_len // PREFILL_BLOCKS))
    return 0

  def fused_inputs(self, module):
    """(bias, params, row, col) for roformer/fused_bias.py's `attend` (and stick-breaking's)
    where `module` runs the fused kernels on this call (attention_impl='pallas', no cache,
    packed segments, no recorded probabilities; a scheme with no fused bias gives none), else
    None."""
    if (module.impl != 'pallas' or self.cache is not None or self.segments is None
        or module.record_probs):
      return None
    return self.position.fused_bias(self.pos, self.ctx) or (fused_bias.NONE, None, None, None)


def scores_flops(model_cfg, seq_len: int, causal: bool) -> float:
  """q.k scores and weighted values, 2 L h e and 2 L h e_v (h heads of width e: d_model by
  default; values e_v wide, e but with latent attention); half of it when causal."""
  full = 2 * seq_len * model_cfg.num_heads * (positions.head_dim(model_cfg)
                                              + latent_attention.value_dim(model_cfg))
  return full / 2 if causal else full


def layer_caps(model_cfg) -> dict:
  """{kind: capabilities} of the distinct position kinds of the layers."""
  return {k: positions.capabilities(k) for k in dict.fromkeys(positions.layer_kinds(model_cfg))}


class AttentionKind:
  """A value of `attention.kind`: what it forms (FEATURES), the implementations it runs on
  (None: it has its own path and ignores `attention_impl`), the model types it serves (those
  whose declaration, roformer/model_types.py, has the flag `model_flag`; '': every one), its own
  fields of config.model.attention (`specs`), how often the train step redraws its random
  features, and its hooks."""
  name = ''
  about = ''
  has: frozenset = frozenset()
  implementations: tuple[str, ...] | None = None
  model_flag = ''
  specs: dict = {}
  in_transformers = False  # Whether transformers' attention computes it (hf_export_config.py).

  @property
  def reads(self) -> tuple[str, ...]:
    return tuple(self.specs)

  def unread(self, model_cfg, att) -> list[tuple[str, str]]:
    """(field under config.model.attention, why) of each of its settings that the model's
    other fields leave unread; checked with the fields, where a value saved with a trained
    run is kept. None by default."""
    del model_cfg, att
    return []

  def redraw_interval(self, att) -> int:
    """Steps between redraws of its random features (0: it has none, or never)."""
    del att
    return 0

  def flops(self, model_cfg, seq_len: int, causal: bool) -> float:
    """Its attention FLOPs per token and layer (forward)."""
    return scores_flops(model_cfg, seq_len, causal)

  def validate(self, model_cfg, att) -> None:
    """Its own further checks: ConfigError or nothing."""

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    """Sets the layer's parameters and settings of this kind on the attention `module`."""

  def rotate(self, module, q, k, site: Site):
    """Queries and keys with the scheme's rotation (none where a remap forms the logits)."""
    if module.remap:
      return q, k
    return site.position.rotate(q, k, site.pos, site.k_pos, site.ctx)

  def rotates_before_cache(self, module, position) -> bool:
    """Whether a decoding call may rotate its new keys before they are cached (`rotate` over
    the new tokens alone, the cache keeping them rotated): no remap moves the distances and
    the scheme turns each key by its own position alone. A kind whose `rotate` reads more
    than the scheme's rotation says otherwise."""
    return not module.remap and position.rotates_keys_alone()

  def decodes_over_a_ring(self, module, position) -> bool:
    """Whether a windowed layer of this kind may decode over its window's keys alone, held out
    of order (roformer/window_cache.py): `attend` reads each key through its position alone,
    never through its slot or the keys before it. None does unless it says so."""
    del module, position
    return False

  def takes_grouped_keys(self, module) -> bool:
    """Whether `attend` takes keys and values of the key/value heads only (fewer than the query
    heads: grouped-query attention) on a decoding call whose keys were rotated before the
    cache. None does unless it says so."""
    del module
    return False

  def attend(self, module, q, k, v, mask, site: Site):
    """(output [batch, q_len, heads, head_dim], the weights [batch, heads, q_len, k_len] or None
    where they are not formed)."""
    raise NotImplementedError

  def sees_itself(self, module) -> bool:
    """Whether a query's weights include its own key (the measure of attention sinks)."""
    del module
    return True


class AttentionOption:
  """A switch of `config.model.attention` (`field`, a Bool): what it needs of the attention kind
  (FEATURES), whether it runs on the einsum path only or not on some implementations
  (`not_on`), the switches it cannot be combined with ((field, why)), what it needs of the
  layers' position schemes (`positions`: the reason they do not fit, or ''; `positions_need`
  says it in words for the table), its fields besides the switch (`specs`, read when it is on),
  why a head's weights are then not one attention map (`no_single_map`, '' where they are), its
  FLOPs and its hooks."""
  field = ''
  paper = ''
  about = ''
  specs: dict = {}
  needs: tuple[str, ...] = ()
  einsum_only = False
  not_on: tuple[str, ...] = ()
  excludes: tuple[tuple[str, str], ...] = ()
  positions_need = ''
  no_single_map = ''
  forms_logits = False  # Its `logits` hook forms the logits from q.k and the scheme's bias.
  maps_logits = False  # Its `map_logits` hook maps the formed logits before the softmax.
  adds_sink = False  # Its `sink` hook gives a logit per head that joins each row's softmax.
  # The transformers families (roformer/hf_export_config.py) whose attention computes it; none: an
  # export of a model with it on is refused.
  transformers_families: tuple[str, ...] = ()

  @property
  def reads(self) -> tuple[str, ...]:
    return tuple(self.specs)

  def transformers_fields(self, att, family: str) -> dict:
    """The config.json fields by which class `family` (one of those) computes it as `att` sets
    it (none where it always does)."""
    del att, family
    return {}

  def from_transformers(self, family: str, hf: dict, eps: float) -> dict:
    """config.model.attention's fields that a `family` checkpoint's config.json (`hf`) sets
    for it, where the class computes it with the blocks' norm epsilon `eps` as the import reads
    it (roformer/hf_config.py); {} where it does not."""
    del family, hf, eps
    return {}

  def transformers_computes(self, att, family: str) -> bool:
    """Whether class `family` computes it as `att` sets it: one of `transformers_families`, or
    (an option with settings that some of those classes compute and others do not) the ones
    its settings say."""
    del att
    return family in self.transformers_families

  def transformers_refusal(self, model_cfg, att) -> str:
    """Why those families' classes do not compute it as `att` sets it ('' where they do)."""
    del model_cfg, att
    return ''

  def positions(self, model_cfg) -> str:
    del model_cfg
    return ''

  def validate(self, config, model_cfg, att) -> None:
    """Its own further checks: ConfigError or nothing."""

  def attention_flops(self, model_cfg, seq_len: int, causal: bool) -> float:
    """Its FLOPs per token and layer in the scores and weighted values, beyond the kind's."""
    del model_cfg, seq_len, causal
    return 0.0

  def layer_flops(self, model_cfg, seq_len: int, causal: bool) -> float:
    """Its FLOPs per token and layer outside them."""
    del model_cfg, seq_len, causal
    return 0.0

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    """Sets the layer's parameters and settings of this switch on the attention `module`."""

  def projections(self, module, q, k, v):
    del module
    return q, k, v

  def queries_keys(self, module, q, k):
    del module
    return q, k

  def values(self, module, v):
    del module
    return v

  def queries(self, module, q, pos):
    del module, pos
    return q

  def logits(self, module, scaled, bias):
    """The logits [batch, heads, q_len, k_len] from q.k/sqrt(d) and the scheme's bias."""
    raise NotImplementedError

  def map_logits(self, module, logits):
    """A function of the logits [batch, heads, q_len, k_len] (bias and factors in), before the
    mask and the softmax; called where `maps_logits` says so."""
    raise NotImplementedError

  def sink(self, module):
    """float32 [heads]: a logit per head that joins each row's softmax and weights no value
    (called where `adds_sink` says so)."""
    raise NotImplementedError

  def logits_factor(self, module, mask):
    """A factor [batch or 1, heads, q_len] on each row's logits and bias, or None."""
    del module, mask
    return None

  def outputs(self, module, out, x, layer):
    """The heads' outputs [batch, q_len, heads, width] after the weighted values (`x`: the
    layer's input)."""
    del module, x, layer
    return out


def has_hook(option: AttentionOption, hook: str) -> bool:
  """Whether the switch defines hook `hook` itself (the base class's does nothing)."""
  return getattr(type(option), hook) is not getattr(AttentionOption, hook)


def register(cls):
  """Registers an AttentionKind or AttentionOption subclass (one instance) under its name."""
  item = cls()
  if isinstance(item, AttentionKind):
    KINDS[item.name] = item
  else:
    # The fused kernels add the scheme's bias inside their tiles: logits formed or mapped by an
    # option exist on the einsum path alone.
    if (item.forms_logits or item.maps_logits or item.adds_sink) and not item.einsum_only:
      raise TypeError(f'attention option {item.field!r} forms, maps or adds to the logits, so '
                      'it must declare einsum_only = True.')
    OPTIONS[item.field] = item
  return cls
