"""Attention kinds and options (`config.model.attention`), each one module of this package that
declares its fields (type, range, default), what it needs of the others, of the implementation
and of the position schemes, its FLOPs and its hooks (`base` holds the interface and the order in
which a self-attention call runs the hooks).

Everything else follows from the declarations: `SPECS` (the config group, which
roformer/config_schema.py puts in the config; a model config without it, built by hand, reads
`DEFAULTS` through `self_attention.attention_config`), the config checks (`check`, `check_kind`),
roformer/flops.py, the warm start's comparison (`fields_read`) and the table of
docs/positions.md (`table`). None names a pair of options.

A new kind or switch is a module of this package and its tests: every module here is imported.
The ones below are imported first, in this order, which is the order of `attention.kind`'s
choices and of the switches everywhere: their hooks run in it (differential attention's outputs
before the output gate's), their initial parameters are drawn in it, `check` reports the first
switch that does not fit in it, and the table lists them in it. A module not in the list comes
after them, in alphabetical order.
"""

import copy
import importlib
import pkgutil
from typing import Any, Callable

from roformer import attention
from roformer import errors
from roformer import model_types
from roformer import positions
from roformer.attention_options import softmax  # pylint: disable=unused-import
from roformer.attention_options import favor  # pylint: disable=unused-import
from roformer.attention_options import stick_breaking  # pylint: disable=unused-import
from roformer.attention_options import qk_norm  # pylint: disable=unused-import
from roformer.attention_options import ssmax  # pylint: disable=unused-import
from roformer.attention_options import dape  # pylint: disable=unused-import
from roformer.attention_options import differential  # pylint: disable=unused-import
from roformer.attention_options import output_gate  # pylint: disable=unused-import
from roformer.attention_options import nope_temperature  # pylint: disable=unused-import
from roformer.attention_options.base import (FEATURES, KINDS, OPTIONS, AttentionKind,
                                             AttentionOption, Site)
from roformer.specs import Bool, Str, defaults

for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f'{__name__}.{_module.name}')

SPECS = {
    'kind': Str(tuple(KINDS), default='softmax'),
    **{name: spec for kind in KINDS.values() for name, spec in kind.specs.items()},
    **{name: spec for option in OPTIONS.values()
       for name, spec in {option.field: Bool(default=False), **option.specs}.items()},
}
DEFAULTS = defaults(SPECS)
positions.registry.OTHER_FIELDS.update(  # A position kind typed for one of them is named.
    {kind: 'config.model.attention.kind' for kind in KINDS})


_ALL_IMPLEMENTATIONS = tuple(i for i in attention.IMPLEMENTATIONS if i != 'auto')


def enabled(att) -> list[AttentionOption]:
  return [o for o in OPTIONS.values() if att[o.field]]


def reads(att, field: str) -> bool:
  """Whether config.model.attention `att` reads `field`: a field of no kind or switch always,
  one of theirs while one of its owners is on."""
  found = owners(field)
  return not found or any(has(att) for _, has in found)


def unread(model_cfg) -> list[tuple[str, str]]:
  """(field under config.model.attention, why) of the attention kind's settings that the
  model leaves unread (its `unread`)."""
  att = model_cfg.attention
  return KINDS[att.kind].unread(model_cfg, att) if att.kind in KINDS else []


def owners(field: str) -> list[tuple[str, Callable[[Any], bool]]]:
  """(the setting in words, whether config.model.attention `att` has it) of each kind or
  switch whose own field `field` is (none for `kind` and the switches themselves): a field
  changed while none of them is on would change nothing (roformer/config_schema.py refuses
  it)."""
  found = [(f'attention.kind={k.name}', lambda att, k=k: att.kind == k.name)
           for k in KINDS.values() if field in k.specs]
  return found + [(f'attention.{o.field}=True', lambda att, o=o: bool(att[o.field]))
                  for o in OPTIONS.values() if field in o.specs]


def fields_read(att) -> dict:
  """The fields of config.model.attention `att` that decide what attention computes: the
  kind and its own fields, every switch, and the fields of the switches that are on (not
  FAVOR+'s `chunk`, which only orders its sums, nor the fields of what is off)."""
  kind = KINDS[att.kind]
  return {'kind': att.kind, **{f: att[f] for f in kind.reads},
          **{o.field: bool(att[o.field]) for o in OPTIONS.values()},
          **{f: att[f] for o in enabled(att) for f in o.reads}}


def check(config, m, att) -> None:
  """Every enabled option against the attention kind, the implementation, the other options and
  the layers' position schemes, from the declarations; the first that does not fit is one
  ConfigError naming the option, why and the fix."""
  kind = KINDS[att.kind]
  for o in enabled(att):
    field = f'config.model.attention.{o.field}=True'
    off = f'--config.model.attention.{o.field}=False'
    for feature in o.needs:
      if feature not in kind.has:
        fit = [k.name for k in KINDS.values() if feature in k.has]
        raise errors.ConfigError(
            f'{field} ({o.about}): attention.kind={kind.name!r} {FEATURES[feature]}. Fix: '
            f'--config.model.attention.kind={fit[0]} (kinds that have it: {fit}), or {off}.')
    if o.einsum_only and m.attention_impl not in ('auto', 'einsum'):
      raise errors.ConfigError(
          f'{field} ({o.about}): it runs on the einsum path, not attention_impl='
          f'{m.attention_impl!r}. Fix: --config.model.attention_impl=auto (or einsum), or {off}.')
    if m.attention_impl in o.not_on:
      raise errors.ConfigError(
          f'{field} ({o.about}) does not run on attention_impl={m.attention_impl!r}. Fix: '
          f'--config.model.attention_impl=auto, or {off}.')
    for other, why in o.excludes:
      if att[other]:
        raise errors.ConfigError(f'{field} ({o.about}): attention.{other} {why}. Fix: {off}, or '
                                 f'--config.model.attention.{other}=False.')
    reason = o.positions(m)
    if reason:
      fit = [k for k in positions.kinds() if not o.positions(_with_kind(m, k))]
      raise errors.ConfigError(f'{field} ({o.about}): {reason}. Fix: a position kind that fits '
                               f'({", ".join(map(repr, fit))}, or model.layer_kinds with such '
                               f'layers), or {off}.')
    o.validate(config, m, att)


def implementations(att) -> set[str]:
  """The attention implementations that the kind and the switches on can run: what 'auto'
  chooses among (roformer/attention.py `resolve`; `check` and `check_kind` refuse an explicit
  choice outside it, each naming its cause)."""
  allowed = set(KINDS[att.kind].implementations or _ALL_IMPLEMENTATIONS)
  for o in enabled(att):
    allowed -= set(o.not_on)
    if o.einsum_only:
      allowed &= {'einsum'}
  return allowed


def _with_kind(m, kind: str):
  """`m` with every layer of position kind `kind` (for the fix's list of kinds that fit)."""
  other = copy.deepcopy(m)
  with other.unlocked():
    other.position.kind, other.layer_kinds = kind, ()
  return other


def check_kind(m, att) -> None:
  """The attention kind against the model type, the implementation and the position scheme's
  distance remap (which forms a softmax)."""
  kind = KINDS[att.kind]
  field = f'config.model.attention.kind={kind.name!r}'
  if kind.model_flag and not getattr(model_types.of(m), kind.model_flag):
    raise errors.ConfigError(
        f'{field} ({kind.about}) is for {model_types.offering(kind.model_flag)}, not '
        f'model.type={m.type!r}. Fix: --config.model.attention.kind=softmax.')
  if kind.implementations is not None and m.attention_impl not in ('auto',) + kind.implementations:
    raise errors.ConfigError(
        f'{field} runs on the {"/".join(kind.implementations)} path, not attention_impl='
        f'{m.attention_impl!r}. Fix: --config.model.attention_impl=auto.')
  if positions.model_scheme(m).remaps(m) and 'softmax' not in kind.has:
    raise errors.ConfigError(
        f'{field} {FEATURES["softmax"]}, and the position scheme\'s distance '
        'remap computes a softmax over the logits it remaps. Fix: '
        '--config.model.attention.kind=softmax, or no remap.')
  kind.validate(m, att)


def _implementations(o: AttentionOption) -> str:
  if o.einsum_only:
    return 'einsum'
  return 'not ' + ', '.join(o.not_on) if o.not_on else 'any'


def table() -> str:
  """The Markdown table of docs/positions.md: each attention option, what it needs of the kind,
  the kinds and implementations it runs with, what it excludes and needs of the position
  schemes, from the declarations (tests/test_docs.py keeps the page equal to it)."""
  kinds = list(KINDS)
  lines = ['| option | paper | what it does | ' + ' | '.join(f'kind={k}' for k in kinds)
           + ' | attention_impl | not with | position schemes |',
           '|' + '---|' * (len(kinds) + 6)]
  for o in OPTIONS.values():
    runs = ['yes' if all(f in KINDS[k].has for f in o.needs) else 'no' for k in kinds]
    lines.append(
        f'| `{o.field}` | {o.paper} | {o.about} | ' + ' | '.join(runs)
        + f' | {_implementations(o)} | '
        + (', '.join(f'`{other}`' for other, _ in o.excludes) or '-') + ' | '
        + (o.positions_need or 'any') + ' |')
  return '\n'.join(lines)


def unweighted(kind: str, options) -> str:
  """Why attention of `kind` with the switches `options` (their fields) has no one attention map
  per head ('' where it has): the measure of attention sinks reads the maps."""
  if 'head_outputs' not in KINDS[kind].has:
    fit = [k.name for k in KINDS.values() if 'head_outputs' in k.has]
    return (f'config.model.attention.kind={kind} ({KINDS[kind].about}) '
            f'{FEATURES["head_outputs"]}: no attention weights to measure. Fix: measure a run of '
            f'kind {" or ".join(fit)}.')
  for field in options:
    if OPTIONS[field].no_single_map:
      return (f'config.model.attention.{field}=True: {OPTIONS[field].no_single_map}. Fix: '
              f'measure a run without it.')
  return ''
