"""Position schemes: how a Transformer learns where each token is.

`base` holds the interface (what a kind declares: options, checks, capabilities, its life
cycle; the `Shared` module each stack builds and the `Layer` module each block builds, with the
hooks the stack calls) and the registry, `registry` the look-ups (combinations, per-layer
layouts, the config's fields); each family of schemes is a module of its own, and importing it
registers its kinds (docs/layout.md lists the modules, from their docstrings; the README
and docs/positions.md list the kinds, generated from the registry).

A new module in this package is imported with the others (no list to extend), so adding a
scheme is one module and its tests. Everything public is re-exported here, so `roformer.positions.apply_rotary`,
`roformer.positions.scheme` and the rest keep one address.
"""

import importlib
import pkgutil

from roformer.positions import absolute
from roformer.positions import bias
from roformer.positions import contextual
from roformer.positions import forgetting
from roformer.positions import householder
from roformer.positions import polar
from roformer.positions import relative
from roformer.positions import remap
from roformer.positions import rotary
from roformer.positions import scaling
from roformer.positions import training
from roformer.positions.absolute import (LEARNED, Learned, NoPositions, Sinusoidal, learned_rows,
                                         sinusoidal_table)
from roformer.positions.base import (Capabilities, Layer, PositionScheme, Shared, head_dim,
                                     kinds, register, relative_positions)
from roformer.positions.registry import (bias_kinds, capabilities, capability_table,
                                         check_length_factor, combine, combined_kinds,
                                         default_fields, derive, field_specs, kinds_line,
                                         layer_config, layer_kinds, layer_rope_bases,
                                         layer_windows,
                                         legacy_param_path,
                                         length_scaling, unread,
                                         may_change, model_scheme, option, set_option,
                                         per_layer, scheme, scheme_fields, take_derived,
                                         take_filled, validate)
from roformer.positions.bias import (ALIBI, ALiBi, Fire, Kerple, T5Bias, alibi_everywhere,
                                     alibi_slopes, fire_bias, fire_inputs, fire_pieces,
                                     t5_buckets)
from roformer.positions.contextual import CoPE
from roformer.positions.forgetting import Forgetting, forgetting_bias
from roformer.positions.householder import Path, path_logits, short_convolution
from roformer.positions.polar import Polar, pope_frequencies, pope_logits
from roformer.positions.relative import Shaw, TransformerXL
from roformer.positions.remap import relative_distances
from roformer.positions.rotary import (ROPE, Rotary, XPos, apply_rotary, check_remap_length,
                                       kept_pairs, layer_kinds_of, layer_remap,
                                       remapped_rope_logits, rope_layers, rotate_pairs,
                                       rotation_problem, values_rotated,
                                       xpos_decay)
from roformer.positions.scaling import (dynamic_frequencies, llama3_frequencies,
                                       longrope_frequencies, rope_frequencies,
                                       scaled_frequencies, yarn_ramp)

# Every module of this package is imported, so that a scheme written in a module of its own (a
# `PositionScheme` subclass under `register`) is registered with no edit anywhere else.
for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f'{__name__}.{_module.name}')
