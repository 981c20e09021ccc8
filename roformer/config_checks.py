"""A config's own checks, before any workdir or data is read: each field alone against its
declared spec (`check_fields`: type, range, and no setting that the run would leave unread),
then the fields together (`check_relations`: lengths, the architecture, attention and the
mesh's batch split). roformer/resolve.py runs them in the order a run's inputs become known;
each raises one ConfigError naming the field and the fix.
"""

import math

import jax
import ml_collections

from roformer import attention_options
from roformer import config_schema
from roformer import errors
from roformer import latent_attention
from roformer import layers
from roformer import model_types
from roformer import models
from roformer import positions as positions_lib
from roformer import self_attention
from roformer import sharding
from roformer import specs
from roformer import sweeps
from roformer import tasks
from roformer.data import corpus
from roformer.data import mixture
from roformer.data import synthetic
from roformer.data import vocabularies


def validate(config: ml_collections.ConfigDict, num_data_parallel: int | None = None,
             process_count: int = 1) -> None:
  """Raises ConfigError naming the offending field and the fix: `check_fields`, then
  `check_relations`. (`for_training` runs the two apart, with the warm start's settings taken
  from its source between them.)"""
  check_fields(config)
  check_relations(config, num_data_parallel, process_count)


def check_fields(config: ml_collections.ConfigDict, saved=None) -> None:
  """Every field present and held to its declared type and range (roformer/config_schema.py),
  and none that this run does not read changed from its default (it would be ignored); for an
  evaluation of the run `saved` trained, from the value saved there."""
  config_schema.check(config)
  for why in unread_settings(config, saved):
    raise errors.ConfigError(why)
  for name, spec in unread_changes(config, saved):
    value = config
    for part in name.split('.')[1:]:
      value = value[part]
    value = value.to_dict() if hasattr(value, 'to_dict') else value  # One line, not YAML.
    raise errors.ConfigError(
        f'{name}={value!r} is read only by {spec.reader.what}, and this run '
        f'(model.type={config.model.type!r}, data.name={config.data.name!r}) is not one of '
        f'them. Fix: drop the override (its default is {spec.default!r}; where the config '
        f'file sets it, --{name}={sweeps.format_value(spec.default)}), or {spec.reader.fix}.')



def check_relations(config: ml_collections.ConfigDict, num_data_parallel: int | None = None,
                    process_count: int = 1, trained: tuple[int, str] | None = None,
                    on_device: bool = True) -> None:
  """The checks that relate fields, on a config that passed `check_fields`. With
  `num_data_parallel`, also that the batches split over the devices and processes. `trained`:
  (positions, where that number comes from) of a model already trained, for the bounds that
  depend on how it was trained (evaluation reads them from the saved config: an override of
  data.seq_len must not lift them); by default `trained_positions(config)`. `on_device`: also
  what the device this process runs on allows (False: no JAX backend is started)."""
  m, t, d = config.model, config.train, config.data
  lengths = tuple(config.eval.length_multipliers)
  if tasks.per_example(config) and lengths != (1,) and lengths != config_schema.default_config(
      ).eval.length_multipliers:  # Set by hand: it would be ignored.
    raise errors.ConfigError(
        f'config.eval.length_multipliers={lengths}: a {m.type} scores each example at '
        'data.seq_len, not at multiples of it. Fix: drop it; to score at another length, '
        '--config.data.seq_len=N --out eval_results.N.json.')
  if m.d_model % m.num_heads and not m.head_dim:
    raise errors.ConfigError(f'config.model.d_model={m.d_model} is not divisible by '
                             f'config.model.num_heads={m.num_heads}. Fix: change one of them, '
                             "or set the heads' width with config.model.head_dim.")
  accum = t.grad_accum_steps
  if t.batch_size % accum:
    raise errors.ConfigError(f'config.train.batch_size={t.batch_size} is not divisible by '
                             f'config.train.grad_accum_steps={accum}. Fix: make the batch a '
                             'multiple of the number of micro-batches.')
  if t.warmup_steps > t.steps:
    raise errors.ConfigError(f'config.train.warmup_steps={t.warmup_steps} must be in [0, '
                             f'config.train.steps={t.steps}]. Fix: '
                             f'--config.train.warmup_steps={max(t.steps // 10, 0)} (a tenth '
                             'of the steps), or more steps.')
  if t.schedule == 'wsd' and not 2 <= t.decay_steps <= t.steps - t.warmup_steps:
    raise errors.ConfigError(  # A step takes the rate before its update: 1 step never decays.
        f"config.train.schedule='wsd' decays over config.train.decay_steps={t.decay_steps}, "
        f'which must be in [2, steps - warmup_steps = {t.steps - t.warmup_steps}]. Fix: set '
        'config.train.decay_steps.')
  if t.schedule != 'wsd' and t.decay_steps:
    raise errors.ConfigError(
        f'config.train.decay_steps={t.decay_steps} is read by the wsd schedule only '
        f"(config.train.schedule='{t.schedule}'). Fix: set it to 0 or use schedule='wsd'.")
  if m.attention_impl == 'cudnn' and (m.dtype == 'float32' or (
      on_device and jax.default_backend() != 'gpu')):
    raise errors.ConfigError(
        "config.model.attention_impl='cudnn' needs a GPU and bfloat16/float16 activations ("
        + (f'backend {jax.default_backend()}, ' if on_device else '')
        + f"dtype {m.dtype}). Fix: use 'xla' or 'einsum'.")
  _validate_architecture(config)
  for causal in models.attention_directions(m):
    positions_lib.validate(m, d.seq_len, causal=causal)
  _validate_lengths(config, trained)
  vocabularies.kind(config.data.tokenizer)  # A name of no tokenizer: refused here.
  if corpus.is_files(config.data) and not model_types.of(m).documents:
    documents = ' or '.join(model_types.named('documents'))
    raise errors.ConfigError(
        f"config.data.name='files' holds documents for language models (model.type "
        f'{documents}), not {m.type!r} (labels, sentence pairs). Fix: a dataset with those '
        f'features (TFDS or embedded), or model.type {documents}.')
  if mixture.is_mixture(config.data):  # A model already trained has its tokenizer.
    mixture.validate(config, trained is None and (
        vocabularies.kind(config.data.tokenizer) == vocabularies.TRAINED))
  if config_schema.TEXT_CAUSAL_LM.reads(config):
    shortest = config.data.seq_len * min(config.eval.length_multipliers)
    if config.eval.protocol == 'windows' and config.eval.stride:
      raise errors.ConfigError(
          f'config.eval.stride={config.eval.stride} is read by eval.protocol=sliding only. Fix: '
          "add --config.eval.protocol=sliding, or drop the stride.")
    if config.eval.stride > shortest:
      raise errors.ConfigError(
          f'config.eval.stride={config.eval.stride} is longer than the shortest evaluated '
          f'length, {shortest} (data.seq_len x the smallest eval.length_multipliers): windows '
          f'would skip tokens. Fix: --config.eval.stride={shortest} or less (0: half of each '
          'length).')
  if config.eval.scale_rope_to_length:  # The scheme's factor to set, or its refusal.
    positions_lib.length_scaling(m, (trained or trained_positions(config))[0])
  sharding.rules_from_config(config.mesh)
  if num_data_parallel is not None:
    # Each micro-batch is split over the devices.
    train_name = 'train.batch_size' + (f' / train.grad_accum_steps ({accum})' if accum > 1 else '')
    for name, batch in ((train_name, t.batch_size // accum),
                        ('eval.batch_size', config.eval.batch_size)):
      if batch % num_data_parallel or batch % process_count:
        step = math.lcm(num_data_parallel, process_count)
        fix = (f'a train.batch_size that is a multiple of {step * accum} (train.grad_accum_steps '
               f'x {step}), or fewer train.grad_accum_steps' if name == train_name and accum > 1
               else f'a multiple of {step}')
        raise errors.ConfigError(
            f'config.{name} = {batch} is not divisible by the data-parallel size '
            f'{num_data_parallel} (mesh data x fsdp) and process count {process_count}. Fix: '
            f'{fix}.')


def trained_positions(config) -> tuple[int, str]:
  """(the positions a run of `config` trains on, the field that sets them): data.seq_len, or
  the range its training-position sampler covers when larger."""
  return max([(config.data.seq_len, 'config.data.seq_len'),
              *positions_lib.training.covered(config)])


def _validate_lengths(config, trained: tuple[int, str] | None = None) -> None:
  """Synthetic tasks against the training and evaluation lengths; the training positions;
  a distance remap against the positions trained on (`trained`, see check_relations)."""
  m, d = config.model, config.data
  task = synthetic.task_name(d)
  if task:
    if not model_types.of(m).decoder_only:
      raise errors.ConfigError(
          f'config.data.name={d.name!r} is a synthetic task for a causal LM (model.type is '
          f'{m.type!r}). Fix: start from configs/synthetic.py.')
    if d.synthetic.filler == 'text':
      raise errors.ConfigError(
          "config.data.synthetic.filler='text' hides the key in config.data.name's text, but "
          f'config.data.name={d.name!r} is the task itself. Fix: make the task a source of a '
          "mixture (config.data.name='shakespeare', config.data.mixture={'text': "
          "{'weight': 0.9}, 'keys': {'weight': 0.1, 'name': 'synthetic/passkey'}}), or leave "
          "filler at 'words'.")
    longest = d.seq_len * max(config.eval.length_multipliers, default=1)
    synthetic.validate(task, d.synthetic, d.seq_len, longest)
  # Its training positions (random, PoSE, floats): for a decoder-only model.
  positions_lib.training.validate(config, model_types.of(m).decoder_only)
  count, where = trained or trained_positions(config)
  positions_lib.check_remap_length(m, count, f'{where}={count}')


def _validate_architecture(config) -> None:
  """The stack's options and each model type's own fields."""
  m, d = config.model, config.data
  declared = model_types.of(m)
  if m.norm == 'post' and not declared.post_norm:
    raise errors.ConfigError("config.model.norm='post' is offered for "
                             f"{model_types.offering('post_norm')}. Fix: use norm='pre' for "
                             f'{m.type}.')
  if m.norm == 'post' and m.embedding_norm:
    raise errors.ConfigError("config.model.embedding_norm normalises the embeddings, which "
                             "norm='post' already does. Fix: leave embedding_norm off with "
                             "norm='post'.")
  kv = m.num_kv_heads
  if kv and (kv > m.num_heads or m.num_heads % kv):
    raise errors.ConfigError(
        f'config.model.num_kv_heads={kv} must divide config.model.num_heads={m.num_heads} '
        '(each key/value head serves an equal group of query heads). Fix: a divisor of '
        'num_heads, or 0 for one per query head.')
  default_std = config_schema.spec_at('model.init_std').default
  if m.init == 'classic' and m.init_std != default_std:
    raise errors.ConfigError(
        f"config.model.init_std={m.init_std} sets the std of init='normal'; the classic "
        'initialisation draws from fan-in and would ignore it. Fix: --config.model.init=normal, '
        'or drop the override.')
  if vocabularies.kind(d.tokenizer) == 'pretrained' and not declared.decoder_only:
    raise errors.ConfigError(
        f"config.data.tokenizer={d.tokenizer!r} is a pretrained model's own tokenizer, whose ids "
        f'are its own; the {m.type} model frames and masks with this project\'s special ids '
        f"(bos, eos, the masked LM's [MASK]). Fix: {model_types.offering('decoder_only')} "
        f"(model.type={' or '.join(model_types.named('decoder_only'))}), or a tokenizer.json "
        'without the hf: prefix (its ids after the special ones).')
  if m.residual != 'sequential' and (m.norm != 'pre' or not declared.parallel_residual):
    raise errors.ConfigError(
        f"config.model.residual={m.residual!r} (x + attn(norm x) + mlp(norm x)) is a "
        f"pre-norm layout of decoder and encoder stacks, not norm={m.norm!r} with "
        f"type={m.type!r}. Fix: --config.model.residual=sequential.")
  problem = layers.MLPS[m.mlp].problem(m) or latent_attention.validate(m)
  if problem:
    raise errors.ConfigError(problem)
  _validate_attention(config, m)
  if declared.validate:  # The type's own rules.
    declared.validate(config)
  if config.init_from and not declared.starts_from:
    raise errors.ConfigError(f'config.init_from starts a classifier from a masked LM or '
                             f'continues a causal LM, not a {m.type!r} model. Fix: leave it '
                             'empty.')


def _validate_attention(config, m) -> None:
  """Per-layer kinds, windows and bases; the attention kind and options, as they declare
  (roformer/attention_options/)."""
  att = self_attention.attention_config(m)
  pattern = tuple(m.layer_kinds)
  if pattern:
    positions_lib.model_scheme(m)  # Each named kind exists (an error names its index).
    if not model_types.of(m).decoder_only:
      raise errors.ConfigError(
          f'config.model.layer_kinds={pattern} is offered for causal LMs (model.type is '
          f'{m.type!r}). Fix: --config.model.layer_kinds=() and one position.kind.')
    absolute = [k for k in pattern if positions_lib.scheme(k).Shared.embed
                is not positions_lib.Shared.embed]
    if absolute and len(set(pattern)) > 1:
      raise errors.ConfigError(
          f'config.model.layer_kinds={pattern} names {absolute[0]!r}, which adds its code to '
          'the embeddings below every layer, not to a layer. Fix: per-layer kinds that act in '
          'attention.')
  for field, what in (('layer_windows', 'slides a causal window'),
                      ('layer_chunks', 'attends within causal chunks')):
    pattern = tuple(m[field])
    if not any(pattern):
      continue
    if not model_types.of(m).decoder_only:
      raise errors.ConfigError(
          f'config.model.{field}={pattern} {what}; model.type={m.type!r} attends both ways. '
          f'Fix: --config.model.{field}=().')
    if 'mask' not in attention_options.KINDS[att.kind].has:
      raise errors.ConfigError(
          f'config.model.{field}={pattern} needs the attention mask: attention.kind='
          f"{att.kind!r} {attention_options.FEATURES['mask']}. Fix: softmax attention or "
          f'--config.model.{field}=().')
  bases = tuple(m.layer_rope_bases)
  if bases:
    rotary = [k for k in dict.fromkeys(positions_lib.layer_kinds(m))
              if positions_lib.capabilities(k).rotary]
    if not rotary:
      raise errors.ConfigError(
          f'config.model.layer_rope_bases={bases} sets RoPE bases, but no layer rotates '
          f'(layer kinds {positions_lib.layer_kinds(m)}). Fix: --config.model.layer_rope_bases=(), '
          'or a rotary kind on some layers.')
  attention_options.check_kind(m, att)
  attention_options.check(config, m, att)
  if latent_attention.enabled(m):
    _validate_latent(m, att)


def _validate_latent_cache(m, att) -> None:
  """MLA's absorbed form feeds wider query heads, one key head and the latent as values
  through the hooks: a scheme that declares it computes the same there, and the options
  acting on queries alone or on the logits, not those on the keys or the heads' projections."""
  base = attention_options.AttentionOption
  on_keys = [o.field for o in attention_options.enabled(att)
             if type(o).projections is not base.projections
             or type(o).queries_keys is not base.queries_keys]
  kinds = [k for k in dict.fromkeys(positions_lib.layer_kinds(m))
           if not positions_lib.capabilities(k).latent_cache]
  named = (f'position kind {kinds[0]!r}, whose hooks read more of the heads than their dot '
           'products and RoPE\'s rotation,' if kinds
           else f'attention.{on_keys[0]}, which acts on each head\'s keys,' if on_keys
           else 'rotated values (position.rope.rotate_values)' if positions_lib.values_rotated(m)
           else '')
  if named:
    raise errors.ConfigError(
        f"config.model.mla.cache='latent' decodes in MLA's absorbed form (wider query heads, "
        f'one key head, the latent as values), where the {named} would compute another '
        "thing. Fix: --config.model.mla.cache=heads.")


def _validate_latent(m, att) -> None:
  """MLA's heads run softmax attention over logits, with the options that act on queries, keys
  and logits: those acting on the values or the heads' outputs take them head_dim wide (their
  own hooks); RoPE rotates exactly its decoupled dimensions."""
  base = attention_options.AttentionOption
  on_values = [o.field for o in attention_options.enabled(att)
               if type(o).values is not base.values or type(o).outputs is not base.outputs]
  softmax = {'softmax', 'logits'} <= attention_options.KINDS[att.kind].has
  if not softmax or on_values:
    named = (f'attention.kind={att.kind!r}' if not softmax
             else f"attention.{', attention.'.join(on_values)}, which acts on the values")
    raise errors.ConfigError(
        f'config.model.{named} with multi-head latent attention (model.mla.kv_rank='
        f'{m.mla.kv_rank}), whose heads run softmax attention with the options on queries, keys '
        'and logits. Fix: turn it off, or --config.model.mla.kv_rank=0.')
  problem = positions_lib.rotation_problem(
      m, m.mla.rope_dim, 'multi-head latent attention decouples it onto the '
      f'model.mla.rope_dim={m.mla.rope_dim} key dimensions every head shares')
  if problem and not m.mla.rope_dim:
    problem = ('config.model.mla.rope_dim=0 gives no key dimensions every head shares, for RoPE '
               'to rotate. Fix: an even --config.model.mla.rope_dim below the head width, with '
               '--config.model.position.rope.fraction=rope_dim / head_dim, or a position kind '
               'that does not rotate.')
  if problem:
    raise errors.ConfigError(problem)
  if latent_attention.latent_cache(m):
    _validate_latent_cache(m, att)
  if latent_attention.value_dim(m) == positions_lib.head_dim(m):
    return
  kinds = dict.fromkeys(positions_lib.layer_kinds(m))
  on_values = [k for k in kinds if positions_lib.capabilities(k).value_term]
  if on_values or positions_lib.values_rotated(m) or m.attention_impl == 'pallas':
    named = (f'position kind {on_values[0]!r} (a term of its own beside the values)' if on_values
             else 'rotated values (position.rope.rotate_values)' if not m.attention_impl ==
             'pallas' else "attention_impl='pallas' (the fused kernels)")
    raise errors.ConfigError(
        f'config.model.mla.v_head_dim={m.mla.v_head_dim} makes the values another width than the '
        f'keys ({positions_lib.head_dim(m)}), which the {named} takes them at. Fix: '
        '--config.model.mla.v_head_dim=0 (the head width), or without it.')


def _plain(value):
  value = value.to_dict() if hasattr(value, 'to_dict') else value
  if isinstance(value, dict):
    return {k: _plain(v) for k, v in value.items()}
  return list(value) if isinstance(value, tuple) else value


def unread_changes(config, saved=None) -> list[tuple[str, specs.Spec]]:
  """(dotted field, spec) of every field that `config`'s run does not read but that differs
  from its default; with `saved` (the config of the trained run that `config` evaluates),
  only those that also differ from its value there (a run trained before a field was found
  unread keeps its value, ignored as it was)."""
  out = []

  def walk(tree, node, before, name):
    for key, spec in tree.items():
      if isinstance(spec, dict):
        walk(spec, node[key], before.get(key, {}) if before is not None else None,
             f'{name}.{key}')
      elif (spec.reader is not None and not spec.reader.reads(config)
            and _plain(node[key]) != _plain(spec.default)
            and (before is None or _plain(node[key]) != _plain(before.get(key)))):
        out.append((f'{name}.{key}', spec))
  walk(config_schema.schema(), config, None if saved is None else _plain(saved), 'config')
  return out


def unread_settings(config, saved=None) -> list[str]:
  """Why each setting that the run leaves unread because of its other fields (which no spec's
  reader sees: a position kind beside model.layer_kinds, RoPE's base beside
  model.layer_rope_bases, a remap option its method ignores, FAVOR+'s rope_mode=features for a
  kind without RoPE's rotation; positions.unread, attention_options.unread) would change
  nothing; with `saved`, not those that hold its value there (as `unread_changes`)."""
  found = _unread_settings(config)

  def at(node, dotted):
    for part in dotted.split('.'):
      node = node.get(part) if hasattr(node, 'get') else None
    return _plain(node)
  return [why for field, why in found if saved is None or at(config, field) != at(saved, field)]


def _unread_settings(config) -> list[tuple[str, str]]:
  """(dotted field, why) of each setting that positions.unread and attention_options.unread
  find unread beside the run's other fields."""
  return ([(f'model.position.{f}', why) for f, why in positions_lib.unread(config.model)]
          + [(f'model.attention.{f}', why) for f, why in attention_options.unread(config.model)])


def unread_fields(config) -> set[str]:
  """The dotted fields (without 'config.') set away from their defaults that `config` leaves
  unread, by a spec's reader or beside its other fields: those its checks refuse as changing
  nothing (unread_changes and unread_settings)."""
  return ({field.removeprefix('config.') for field, _ in unread_changes(config)}
          | {field for field, _ in _unread_settings(config)})
