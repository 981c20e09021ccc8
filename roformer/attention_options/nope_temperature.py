"""Llama 4's attention temperature (`attention.nope_temperature`) on the layers without positions
(NoPE): their queries times 1 + scale log(floor((p + 1) / floor) + 1) at position p (1 below
`floor`), so that attention sharpens with the distance it must cover.
"""

import jax
import jax.numpy as jnp

from roformer.attention_options import base
from roformer.specs import Float, Int


def nope_temperature(positions: jax.Array, floor: int, scale: float) -> jax.Array:
  """Llama 4's query temperature at integer `positions`: 1 + scale log(floor((p + 1) / floor)
  + 1), float32 (exactly 1 below `floor`)."""
  p = positions.astype(jnp.float32)
  return 1.0 + scale * jnp.log(jnp.floor((p + 1.0) / floor) + 1.0)


def _without_positions(caps) -> bool:
  return not (caps.reads_positions or caps.logits_term or caps.rotary)


@base.register
class NopeTemperature(base.AttentionOption):
  field = 'nope_temperature'
  paper = 'Llama 4'
  about = 'a temperature on the layers without positions'
  specs = {'nope_temperature_floor': Int(1, 2**30, default=8192),
           'nope_temperature_scale': Float(0, 100, default=0.1)}
  needs = ('logits',)
  positions_need = 'some layer without positions'
  transformers_families = ('llama4',)

  def transformers_fields(self, att, family: str) -> dict:
    del family
    return {'attn_temperature_tuning': True, 'floor_scale': att.nope_temperature_floor,
            'attn_scale': att.nope_temperature_scale}

  def positions(self, model_cfg) -> str:
    if any(_without_positions(c) for c in base.layer_caps(model_cfg).values()):
      return ''
    return 'it scales the layers without any position signal, and no layer is one'

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.temperature = ((att.nope_temperature_floor, att.nope_temperature_scale)
                          if _without_positions(caps) else None)

  def queries(self, module, q, pos):
    if not module.temperature:
      return q
    return (q * nope_temperature(pos, *module.temperature)[:, :, None, None]).astype(q.dtype)
