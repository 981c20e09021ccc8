"""Softmax attention (`attention.kind='softmax'`, the default): softmax over q.k/sqrt(d) and the
position scheme's terms, on every implementation (`attention.attend`), or on the fused bias
kernel of roformer/fused_bias.py with attention_impl='pallas'. A switch that maps the logits
(`maps_logits`: soft-capping) or adds a logit to each row's softmax (`adds_sink`: sink_logit)
has them formed on every path, over causal blocks of queries as the plain einsum path. Under a
distance remap the logits are RoPE's at the remapped distances, computed over causal blocks of
queries (at most REMAP_BLOCKS, of at least `model.causal_block` rows; 0: the whole matrix) so
that a long evaluation holds one block's rows of them at a time."""

import jax.numpy as jnp

from roformer import attention
from roformer import fused_bias
from roformer.attention_options import base

# A remap's queries run in at most this many causal blocks (of at least model.causal_block rows):
# each block is its own part of the compiled program, so the compile time grows with their
# number (docs/positions.md), and a quarter of the rows at a time is what lets a 32k row fit.
REMAP_BLOCKS = 4


@base.register
class Softmax(base.AttentionKind):
  name = 'softmax'
  about = "softmax over the scaled logits and the scheme's terms"
  has = frozenset(base.FEATURES)
  implementations = ('einsum', 'xla', 'cudnn', 'pallas')
  in_transformers = True

  def decodes_over_a_ring(self, module, position) -> bool:
    # Every switch of the softmax reads a key's logit, value or visibility, not its order.
    return not module.remap and position.keys_by_position_alone()

  def takes_grouped_keys(self, module) -> bool:
    # Its plain path reads grouped heads in place; its other paths repeat them (`attend`). A
    # switch's `values` hook (differential attention's pairs) sees the query heads' values.
    return not any(base.has_hook(o, 'values') for o in module.options)

  def attend(self, module, q, k, v, mask, site: base.Site):
    position, cache = site.position, site.cache
    plain_k, plain_v = k, v  # Grouped heads, where the layer passes them: the plain path's.
    if not module.absorbs(cache):  # The absorbed form's one key head: broadcast.
      k, v = (attention.expand_heads(t, q.shape[2]) for t in (k, v))  # Unused ones: dropped.
    args = (site.pos, site.k_pos)
    factors = lambda mask: [f for f in (o.logits_factor(module, mask) for o in module.options)
                            if f is not None]
    maps = [o for o in module.options if o.maps_logits]
    sink = next((o.sink(module) for o in module.options if o.adds_sink), None)
    former = next((o for o in module.options if o.forms_logits), None)
    if module.remap:
      blocked = (module.causal and site.block_rows(module, q.shape[1])
                 and not module.record_probs)
      rows = max(module.causal_block, -(-q.shape[1] // REMAP_BLOCKS))
      if blocked and rows < q.shape[1]:
        return attention.over_causal_blocks(
            lambda q, k, v, mask, _, q_pos, k_pos: _remapped(
                module, position, q, k, v, mask, q_pos, k_pos, factors, maps, sink,
                site.k_pos)[0],
            q, k, v, mask, None, rows, module.window, (site.pos,), (site.k_pos,)), None
      return _remapped(module, position, q, k, v, mask, *args, factors, maps, sink)
    if module.computes_logits:
      logits = position.logits(q, k, *args, mask, site.ctx)
      for factor in factors(mask):
        logits = logits * factor[..., None]
      return attention.attend_logits(_mapped(module, logits, maps), v, mask, sink)
    fused = site.fused_inputs(module)  # Never with a map: such options are einsum-only.
    if fused:
      # The fused kernel: the scheme's bias computed block by block, never materialised.
      bias, params, row, col = fused
      return fused_bias.attend(q, k, v, site.pos, site.segments, bias, params=params, row=row,
                               col=col, causal=module.causal, window=module.window), None
    bias = position.logits_bias(q, k, *args, mask, site.ctx)
    if former:
      logits = former.logits(module, attention.scaled_logits(q, k), bias)
      return attention.attend_logits(_mapped(module, logits, maps), v, mask, sink)
    for factor in factors(mask):  # (q.k + bias) f, with q scaled so that every kernel can run it.
      q = (q * jnp.transpose(factor, (0, 2, 1))[..., None]).astype(q.dtype)
      bias = None if bias is None else bias * factor[..., None]
    if maps or sink is not None:
      return _mapped_attention(module, q, k, v, mask, bias, maps, site, sink)
    return attention.attend(q, plain_k, plain_v, mask, bias=bias,
                            impl=('einsum' if module.record_probs else module.unfused_impl
                                  if cache is None else module.cache_impl),
                            return_probs=module.value_term or module.record_probs,
                            causal_block=site.block_rows(module, q.shape[1]),
                            window=module.window,
                            segments=site.segments if cache is None else None,
                            causal=module.causal)


def _mapped_attention(module, q, k, v, mask, bias, maps, site, sink=None):
  """softmax over the mapped logits (q.k/sqrt(d) + bias through each switch's `map_logits`),
  with the switches' `sink` logit where one adds it: (output, weights). A causal self-attention
  without a cache (or filling its own: `Site.fills_cache`) whose weights nothing reads runs over
  causal blocks of `model.causal_block` queries, each over the keys from its window's first to
  its last row, as the plain einsum path does, so that it holds one block's logits."""
  def attend(q, k, v, mask, bias):
    return attention.attend_logits(_mapped(module, attention.scaled_logits(q, k, bias), maps),
                                   v, mask, sink)

  rows = site.block_rows(module, q.shape[1])
  if (module.causal and 0 < rows < q.shape[1]
      and not (module.value_term or module.record_probs)):
    return attention.over_causal_blocks(lambda *a: attend(*a)[0], q, k, v, mask, bias, rows,
                                        module.window), None
  return attend(q, k, v, mask, bias)


def _mapped(module, logits, maps):
  """The logits through each switch's `map_logits`, in the order the switches run."""
  for option in maps:
    logits = option.map_logits(module, logits)
  return logits


def _remapped(module, position, q, k, v, mask, q_pos, k_pos, factors, maps, sink=None,
              row_pos=None):
  """softmax over RoPE's logits under the layer's distance remap (`remapped_logits`: one
  [batch, heads, q_len, k_len] product per region of the remap), with the pairs the remap hides
  masked, each option's row factor and map: (output, weights). Run over causal blocks of queries,
  it holds one block's rows at a time: each row's factor reads only its own row of the mask,
  and the keys a block leaves out are all after its rows or before its window; `row_pos`, the
  row's positions, decides what depends on its length (dynamic scaling)."""
  logits, seen = position.remapped_logits(q, k, q_pos, k_pos, row_pos)
  mask = mask if seen is None else mask & seen[:, None]
  for factor in factors(mask):
    logits = logits * factor[..., None]
  return attention.attend_logits(_mapped(module, logits, maps), v, mask, sink)
