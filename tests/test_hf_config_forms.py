"""How each family's config.json reads (roformer/hf_config.py): transformers 4's and 5's forms of
the same model give the same config, a field left out reads as its transformers class's default,
and the fields that only some families have (Gemma's caps and query scale, GPT-2's table, Phi-3's
and OLMo's layouts, YaRN's attention factor, Phi's output bias, Cohere's multiplier) are read;
Gemma 2's caps and query scale, OLMo 1's clamp and BLOOM's norm of the embeddings each move
the logits off transformers' by more than 1% where they are left out. The
fixtures' equality with transformers is tests/test_hf_checkpoints.py's. Torch is not needed."""

import json
import os
import pathlib

import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy

from roformer import errors
from roformer import hf
from roformer import hf_config
from roformer import hf_export_config
from roformer import positions
from tests import hf_fixtures

FIXTURES = hf_fixtures.FIXTURES
_relative_error, _edited = hf_fixtures.relative_error, hf_fixtures.edited


def test_the_two_config_forms_give_the_same_model():
  """transformers 4's rope_theta + rope_scaling ('type' or 'rope_type') and transformers 5's
  rope_parameters are read alike."""
  v4 = json.loads((FIXTURES / 'qwen2_yarn_v4' / 'config.json').read_text())
  v5 = {k: v for k, v in v4.items() if k not in ('rope_theta', 'rope_scaling')}
  v5['rope_parameters'] = {'rope_type': v4['rope_scaling']['type'],
                           'rope_theta': v4['rope_theta'],
                           **{k: v for k, v in v4['rope_scaling'].items() if k != 'type'}}
  other = dict(v4, rope_scaling={'rope_type': 'yarn',
                                 **{k: v for k, v in v4['rope_scaling'].items() if k != 'type'}})
  configs = [hf_config.to_config(c, 'dir').to_dict() for c in (v4, v5, other)]
  assert configs[0] == configs[1] == configs[2]
  assert configs[0]['model']['position']['rope']['scaling']['kind'] == 'yarn'


def test_gemma3s_scaling_of_its_global_layers_reads_alike_in_both_forms():
  """Gemma 3 4B-27B's linear scaling of the global layers: transformers 5's per-layer-type
  rope_parameters and transformers 4's top-level rope_scaling (which transformers applies to
  the global layers) give one model, scaling the global layers alone; the trained length is
  max_position_embeddings over the factor."""
  v5 = hf_config.read(str(FIXTURES / 'gemma3_multimodal'))  # Its language model's.
  v4 = {k: v for k, v in v5.items() if k not in ('rope_parameters', 'layer_types')}
  v4.update(rope_theta=1e6, rope_local_base_freq=10000.0, sliding_window_pattern=2,
            rope_scaling={'rope_type': 'linear', 'factor': 4.0})
  configs = [hf_config.to_config(c, 'dir') for c in (v5, v4)]
  assert configs[0].to_dict() == configs[1].to_dict()
  sc = configs[0].model.position.rope.scaling
  assert (sc.kind, sc.factor, sc.layers, sc.original_length) == ('linear', 4.0, 'global', 16)
  assert configs[0].data.seq_len == 16


def test_gemma3s_multimodal_class_imports_its_language_model_under_either_weight_names(tmp_path):
  """Gemma3ForConditionalGeneration (Gemma 3 4B-27B's class): the language model under the
  Hub's names (language_model.model.*, as the fixture was saved) or transformers 5's
  (model.language_model.*, lm_head), the vision tower left out, computes transformers' logits
  (its text-only forward)."""
  ref = np.load(FIXTURES / 'gemma3_multimodal' / 'reference.npz')
  source = _edited(tmp_path, 'gemma3_multimodal')
  tensors = safetensors_numpy.load_file(os.path.join(source, 'model.safetensors'))
  renamed = {('model.language_model.' + k[len('language_model.model.'):]
              if k.startswith('language_model.model.') else 'model.' + k): v
             for k, v in tensors.items()}
  assert any(k.startswith('model.vision_tower.') for k in renamed)
  safetensors_numpy.save_file(renamed, os.path.join(source, 'model.safetensors'))
  for directory, name in ((str(FIXTURES / 'gemma3_multimodal'), 'hub'), (source, 'v5')):
    hf.import_checkpoint(directory, str(tmp_path / name))
    lm = hf.load(str(tmp_path / name))
    assert _relative_error(lm.logits(ref['ids']), ref['logits']) < 1e-4, name
  assert lm.config.model.position.rope.scaling.layers == 'global'
  # Flags that disagree (untied in text_config, tied at the top, as transformers 5 reads it) with
  # no output layer stored: read tied, as the weights were saved.
  config = json.loads((FIXTURES / 'gemma3_multimodal' / 'config.json').read_text())
  config['text_config']['tie_word_embeddings'] = False
  (pathlib.Path(source) / 'config.json').write_text(json.dumps(config))
  hf.import_checkpoint(source, str(tmp_path / 'flags'))
  lm = hf.load(str(tmp_path / 'flags'))
  assert lm.config.model.tie_embeddings
  assert _relative_error(lm.logits(ref['ids']), ref['logits']) < 1e-4


def test_a_hub_gemma3_text_config_reads_with_gemma3s_defaults():
  """gemma-3-4b-it's config.json gives text_config five fields; the others are
  Gemma3TextConfig's: 8 heads of 256 over 4 key/value heads, 262,208 ids, windows of 1024 on
  five layers in six, and linear scaling by 8 on the global ones from 131,072 / 8 positions."""
  hub = {'architectures': ['Gemma3ForConditionalGeneration'], 'model_type': 'gemma3',
         'text_config': {'hidden_size': 2560, 'intermediate_size': 10240,
                         'model_type': 'gemma3_text', 'num_hidden_layers': 34,
                         'rope_scaling': {'factor': 8.0, 'rope_type': 'linear'},
                         'sliding_window': 1024},
         'vision_config': {'model_type': 'siglip_vision_model'}}
  config = hf_config.to_config(hf_config.text_view(hub, 'dir/config.json'), 'dir')
  m = config.model
  assert (m.num_heads, m.num_kv_heads, m.head_dim, m.vocab_size, m.tie_embeddings) == (
      8, 4, 256, 262_208, True)
  assert tuple(m.layer_windows) == ((1024,) * 5 + (0,)) * 5 + (1024,) * 4
  assert (m.position.rope.scaling.kind, m.position.rope.scaling.factor) == ('linear', 8.0)
  assert m.position.rope.scaling.layers == 'global' and config.data.seq_len == 16384
  with pytest.raises(errors.DamagedFileError, match='names Gemma3ForConditionalGeneration but '
                                                    'has no text_config'):
    hf_config.text_view({**hub, 'text_config': None}, 'dir/config.json')


def test_gemma2_reads_its_caps_and_scale_and_each_one_binds_in_the_fixture(tmp_path):
  """The fixture's attention soft-cap (2), output soft-cap (15), query_pre_attn_scalar (24, for
  heads 16 wide), alternate windows and linear scaling of every layer are read; without each
  cap, or at the heads' own scale, the import's logits move off transformers' by more than 1%
  (transformers itself was checked to move alike: tests/data/hf's script)."""
  hf_json = json.loads((FIXTURES / 'gemma2_softcap_scaled' / 'config.json').read_text())
  m = hf_config.to_config(hf_json, 'dir').model
  att = m.attention
  assert (att.softcap, att.softcap_value, att.logit_scale, att.logit_scale_dim) == (
      True, 2.0, True, 24)
  assert (m.logits_softcap, m.norm, m.embedding_multiplier, tuple(m.layer_windows)) == (
      15.0, 'sandwich', 32 ** 0.5, (8, 0, 8))
  sc = m.position.rope.scaling
  assert not att.qk_norm and (sc.kind, sc.factor, sc.layers) == ('linear', 4.0, 'all')
  ref = np.load(FIXTURES / 'gemma2_softcap_scaled' / 'reference.npz')
  for i, edit in enumerate(({'attn_logit_softcapping': None}, {'final_logit_softcapping': None},
                            {'query_pre_attn_scalar': 16})):
    (tmp_path / str(i)).mkdir()
    source = _edited(tmp_path / str(i), 'gemma2_softcap_scaled',
                     lambda c, edit=edit: c.update(edit))
    workdir = str(tmp_path / str(i) / 'w')
    hf.import_checkpoint(source, workdir)
    assert _relative_error(hf.load(workdir).logits(ref['ids']), ref['logits']) > 1e-2, edit


def test_a_gemma2_config_with_fields_left_out_reads_as_gemma2configs_defaults():
  """Without the caps, query_pre_attn_scalar, head_dim and layer_types: caps of 50 and 30,
  logits scaled by 1/sqrt(256) = the heads' own 256 wide, windows on the even layers; a Gemma 3
  27B-style scalar (168 for heads 128 wide) is its own scale."""
  config = json.loads((FIXTURES / 'gemma2_softcap_scaled' / 'config.json').read_text())
  for field in ('attn_logit_softcapping', 'final_logit_softcapping', 'query_pre_attn_scalar',
                'head_dim', 'layer_types', 'tie_word_embeddings'):
    config.pop(field)
  m = hf_config.to_config(config, 'dir').model
  assert (m.attention.softcap, m.attention.softcap_value, m.logits_softcap, m.head_dim) == (
      True, 50.0, 30.0, 256)
  assert not m.attention.logit_scale and m.tie_embeddings
  assert tuple(m.layer_windows) == (8, 0, 8)
  gemma3 = json.loads((FIXTURES / 'gemma3_local_global' / 'config.json').read_text())
  gemma3.update(head_dim=128, query_pre_attn_scalar=168, final_logit_softcapping=None)
  m = hf_config.to_config(gemma3, 'dir').model
  assert (m.attention.logit_scale, m.attention.logit_scale_dim, m.logits_softcap) == (
      True, 168, 0.0)
  assert not m.attention.softcap


def test_gpt2_reads_its_table_under_either_weight_names_and_takes_no_position_past_it(
    tmp_path):
  """GPT-2 is the classic block with learned positions over n_positions rows. Its weights read
  alike under the Hub's original names (the fixture's) and transformers 5's (`transformer.`);
  scoring or generating past the table is one error (its rows' logits would be NaN)."""
  ref = np.load(FIXTURES / 'gpt2_learned' / 'reference.npz')
  source = pathlib.Path(_edited(tmp_path, 'gpt2_learned'))
  tensors = safetensors_numpy.load_file(str(source / 'model.safetensors'))
  assert not any(n.startswith('transformer.') for n in tensors)
  # transformers 5's names, and the causal-mask buffers that older versions stored.
  buffers = {f'h.{i}.attn.{n}': np.tril(np.ones((1, 1, 64, 64), np.float32))
             for i in range(2) for n in ('bias', 'masked_bias')}
  safetensors_numpy.save_file({'transformer.' + n: a for n, a in {**tensors, **buffers}.items()},
                              str(source / 'model.safetensors'))
  hf.import_checkpoint(str(source), str(tmp_path / 'w'))
  lm = hf.load(str(tmp_path / 'w'))
  m = lm.config.model
  assert (m.position.kind, m.position.learned.max_length, lm.config.data.seq_len) == (
      'learned', 64, 64)
  assert (m.normalization, m.mlp, m.biases, m.activation, m.tie_embeddings) == (
      'layer_norm', 'plain', 'all', 'gelu_tanh', True)
  assert _relative_error(lm.logits(ref['ids']), ref['logits']) < 1e-4
  with pytest.raises(errors.ConfigError, match=r'65 positions are more than this model takes: '
                     r'.*learned position table.*Fix: score shorter rows\.$'):
    lm.logits(np.ones((1, 65), np.int64))
  with pytest.raises(errors.ConfigError, match=r'70 positions .*Fix: a shorter prompt or fewer '
                                               r'max_new_tokens\.$'):
    lm.generate(np.ones((1, 60), np.int64), 10)
  # Untied under the original names: lm_head keeps its own name beside the unprefixed ones.
  (tmp_path / 'untied').mkdir()
  untied = pathlib.Path(_edited(tmp_path / 'untied', 'gpt2_learned',
                                lambda c: c.update(tie_word_embeddings=False)))
  head = np.random.default_rng(0).normal(size=tensors['wte.weight'].shape).astype(np.float32)
  safetensors_numpy.save_file({**tensors, 'lm_head.weight': head},
                              str(untied / 'model.safetensors'))
  hf.import_checkpoint(str(untied), str(tmp_path / 'w_untied'))
  model = hf.load(str(tmp_path / 'w_untied')).model
  np.testing.assert_array_equal(np.asarray(model.unembed[...]), head)


def test_gpt2config_names_read_as_the_blocks_fields():
  """n_inner (4 n_embd where null), layer_norm_epsilon, activation_function and initializer_range
  are read, not assumed; an untied GPT-2 has its own output layer."""
  config = json.loads((FIXTURES / 'gpt2_learned' / 'config.json').read_text())
  config.update(n_inner=48, layer_norm_epsilon=0.5, activation_function='relu',
                initializer_range=0.1, tie_word_embeddings=False)
  m = hf_config.to_config(config, 'dir').model
  assert (m.d_ff, m.layer_norm_eps, m.activation, m.init_std, m.tie_embeddings) == (
      48, 0.5, 'relu', 0.1, False)
  config.update(n_inner=None)
  assert hf_config.to_config(config, 'dir').model.d_ff == 128


def test_phi3s_config_forms_and_older_names_give_the_same_model():
  """Phi-3's own form (rope_scaling with 'type', the original length and partial rotary at
  the top level), transformers 5's rope_parameters, and the older names 'su' and 'yarn' that
  Phi3Config reads as longrope, are read alike: LongRoPE from 16 positions with the factor
  max_position_embeddings / original (4), the attention factor on the rotated dimensions (6 of
  8), a 12-token window on both layers. Without original_max_position_embeddings, Phi3Config's
  4096 is the original length."""
  v4 = json.loads((FIXTURES / 'phi3_longrope_partial' / 'config.json').read_text())
  v5 = {k: v for k, v in v4.items() if k not in ('rope_theta', 'rope_scaling')}
  v5['rope_parameters'] = {'rope_type': 'longrope', 'rope_theta': v4['rope_theta'],
                           **{k: v for k, v in v4['rope_scaling'].items() if k != 'type'}}
  older = [dict(v4, rope_scaling=dict(v4['rope_scaling'], type=name)) for name in ('su', 'yarn')]
  configs = [hf_config.to_config(c, 'dir').to_dict() for c in (v4, v5, *older)]
  assert all(c == configs[0] for c in configs)
  m = hf_config.to_config(v4, 'dir').model
  assert dict(m.position.rope.scaling) == dict(
      m.position.rope.scaling, kind='longrope', factor=4.0, original_length=16,
      short_factor=(1.0, 1.25, 2.0), long_factor=(1.5, 3.0, 7.5), attention_factor=0.0,
      attention_factor_dims='rotated')
  assert (m.position.rope.fraction, tuple(m.layer_windows), m.biases) == (0.75, (12,), 'none')
  bare = {k: v for k, v in v4.items() if k != 'original_max_position_embeddings'}
  bare['max_position_embeddings'] = 131072
  scaling = hf_config.to_config(bare, 'dir').model.position.rope.scaling
  assert (scaling.original_length, scaling.factor) == (4096, 32.0)


def test_phi3_and_olmo_read_their_classes_defaults():
  """Where a file leaves them out: Phi3Config's and OLMo's rms_norm_eps (1e-5, Llama's 1e-6);
  a LongRoPE factor below 1 (max_position_embeddings under the original length) read as 1,
  whose attention factor, 1, transformers computes alike."""
  phi3 = json.loads((FIXTURES / 'phi3_longrope_partial' / 'config.json').read_text())
  olmo2 = json.loads((FIXTURES / 'olmo2_yarn_biases' / 'config.json').read_text())
  llama = json.loads((FIXTURES / 'llama_narrow_heads' / 'config.json').read_text())
  for config, eps in ((phi3, 1e-5), (olmo2, 1e-5), (llama, 1e-6)):
    config.pop('rms_norm_eps')
    assert hf_config.to_config(config, 'dir').model.layer_norm_eps == eps
  short = hf_config.to_config(dict(phi3, max_position_embeddings=8), 'dir')
  assert short.model.position.rope.scaling.factor == 1.0
  assert positions.scaled_frequencies(6, 1e4, short.model.position.rope.scaling)[1] == 1.0


def test_olmo3s_config_forms_and_default_layout_give_the_same_model():
  """OLMo 3: transformers 4's rope_theta and rope_scaling (the global layers' scaling, one base
  for both kinds) and transformers 5's rope_parameters per layer type read alike; without
  layer_types, every fourth layer is global, as Olmo3Config assumes; rope_theta defaults to
  500,000."""
  v4 = json.loads((FIXTURES / 'olmo3_window_yarn_v4' / 'config.json').read_text())
  v5 = {k: v for k, v in v4.items() if k not in ('rope_theta', 'rope_scaling')}
  v5['rope_parameters'] = {
      'full_attention': {**v4['rope_scaling'], 'rope_theta': v4['rope_theta']},
      'sliding_attention': {'rope_type': 'default', 'rope_theta': v4['rope_theta']}}
  v5['layer_types'] = ['sliding_attention'] * 3 + ['full_attention']
  configs = [hf_config.to_config(c, 'dir') for c in (v4, v5)]
  assert configs[0].to_dict() == configs[1].to_dict()
  m = configs[0].model
  assert (tuple(m.layer_windows), m.norm, m.attention.qk_norm_over) == (
      (8, 8, 8, 0), 'output', 'heads')
  sc = m.position.rope.scaling
  assert (sc.kind, sc.layers, sc.attention_factor, sc.original_length) == (
      'yarn', 'global', 1.2, 16)
  bare = {k: v for k, v in v4.items() if k != 'rope_theta'}
  assert hf_config.to_config(bare, 'dir').model.position.rope.base == 500_000.0
  # Three layers: all of them windowed, none global, so transformers never applies the scaling.
  shallow = hf_config.to_config(dict(v4, num_hidden_layers=3), 'dir')
  assert shallow.model.position.rope.scaling.kind == 'none'
  assert shallow.data.seq_len == v4['max_position_embeddings']


def test_gemma3s_two_config_forms_give_the_same_model():
  """transformers 5's rope_parameters per layer type and layer_types, and transformers 4's
  rope_theta, rope_local_base_freq and sliding_window_pattern (every third layer global here,
  as the fixture's layer_types say), are read alike: two windowed layers at base 10k, one
  global at 1M."""
  v5 = json.loads((FIXTURES / 'gemma3_local_global' / 'config.json').read_text())
  v4 = {k: v for k, v in v5.items() if k not in ('rope_parameters', 'layer_types')}
  v4.update(rope_theta=1e6, rope_local_base_freq=10000.0, rope_scaling=None,
            sliding_window_pattern=3)
  configs = [hf_config.to_config(c, 'dir') for c in (v5, v4)]
  assert configs[0].to_dict() == configs[1].to_dict()
  m = configs[0].model
  assert (tuple(m.layer_windows), tuple(m.layer_rope_bases)) == ((8, 8, 0), (1e4, 1e4, 1e6))
  assert (m.norm, m.head_dim, m.attention.qk_norm, m.tie_embeddings) == (
      'sandwich', 16, True, True)
  assert m.embedding_multiplier == 32 ** 0.5
  # A null window beside sliding layers is a config transformers 5.24 cannot run either.
  with pytest.raises(errors.DamagedFileError, match='sliding_window is None while layers slide'):
    hf_config.to_config(dict(v5, sliding_window=None), 'dir')


@pytest.mark.parametrize('name,width', [('qwen3_yarn_wide_heads', 128),
                                        ('gemma3_local_global', 256)])
def test_a_missing_head_dim_reads_as_the_class_default_and_qk_norm_takes_rms_norm_eps(name, width):
  """Qwen3Config's head_dim is 128 where config.json has none, Gemma3TextConfig's 256 (not
  hidden_size / heads, as Llama's); QK-norm takes the file's rms_norm_eps."""
  config = json.loads((FIXTURES / name / 'config.json').read_text())
  config.pop('head_dim')
  config.update(rms_norm_eps=1e-2, query_pre_attn_scalar=width)
  m = hf_config.to_config(config, 'dir').model
  assert (m.head_dim, m.attention.qk_norm_eps, m.layer_norm_eps) == (width, 1e-2, 1e-2)


def test_a_smollm3_config_with_fields_left_out_reads_as_smollm3config_defaults_them():
  """Without no_rope_layers, layer_types, tie_word_embeddings, rope_theta and sliding_window:
  every fourth layer without positions (no_rope_layer_interval), tied, base 2e6 (SmolLM3's
  default_theta), and no window even with use_sliding_window (its window is None); a
  no_rope_layers longer than the layers is cut to them, and one with no RoPE layer refused."""
  config = json.loads((FIXTURES / 'smollm3_nope_yarn' / 'config.json').read_text())
  for field in ('no_rope_layers', 'layer_types', 'tie_word_embeddings', 'rope_parameters',
                'sliding_window'):
    config.pop(field)
  config.update(num_hidden_layers=8, use_sliding_window=True)
  m = hf_config.to_config(config, 'dir').model
  kinds_of = lambda m: [m.layer_kinds[i % len(m.layer_kinds)] != 'none' for i in range(8)]
  assert kinds_of(m) == [True, True, True, False] * 2
  assert (m.tie_embeddings, m.position.rope.base, tuple(m.layer_windows)) == (True, 2e6, ())
  config.update(num_hidden_layers=3, no_rope_layers=[1, 0, 1, 1, 0])
  assert len(hf_config.to_config(config, 'dir').model.layer_kinds) == 3
  with pytest.raises(errors.ConfigError, match='no_rope_layers leaves no layer with RoPE'):
    hf_config.to_config(dict(config, no_rope_layers=[0, 0, 0]), 'dir')


@pytest.mark.parametrize('name', ['llama_linear_v4', 'cohere_interleaved_yarn_v4',
                                  'cohere2_window_nope'])
def test_a_partial_rotary_factor_beside_a_scaling_of_whole_head_rotation_is_refused(name):
  """A class that rotates whole heads (Llama's, Cohere's) ignores partial_rotary_factor at its
  default frequencies, but transformers' scalings compute frequencies for that part of each
  head alone, which the class then applies to all of it: transformers 5.24 fails on such a
  file, so there is no model to read. Refused in either form; without a scaling it reads as
  whole heads."""
  hf = json.loads((FIXTURES / name / 'config.json').read_text())
  scaled = {'rope_type': 'linear', 'factor': 2.0, 'rope_theta': 10000.0}
  for form in (dict(hf, partial_rotary_factor=0.5, rope_scaling=scaled, rope_parameters=None),
               dict(hf, rope_scaling=None, rope_parameters={**scaled,
                                                             'partial_rotary_factor': 0.5})):
    with pytest.raises(errors.ConfigError, match=r"partial_rotary_factor 0.5 with rope_type "
                       r"'linear': \w+ForCausalLM rotates whole heads.*Fix: a checkpoint "
                       r'without partial_rotary_factor'):
      hf_config.to_config(form, 'dir')
  plain = dict(hf, rope_scaling=None, rope_parameters={'rope_type': 'default',
                                                       'rope_theta': 10000.0,
                                                       'partial_rotary_factor': 0.5})
  assert hf_config.to_config(plain, 'dir').model.position.rope.fraction == 1.0


def test_a_partial_rotary_factor_beside_a_scaling_of_the_global_layers_is_refused():
  """Gemma 3's rotary settings per layer type: the global layers' scaling with a
  partial_rotary_factor fails in transformers as in the classes above, and is refused."""
  hf = json.loads((FIXTURES / 'gemma3_local_global' / 'config.json').read_text())
  full = dict(hf['rope_parameters']['full_attention'], rope_type='linear', factor=2.0)
  scaled = dict(hf, rope_parameters=dict(hf['rope_parameters'], full_attention=full))
  assert hf_config.to_config(scaled, 'dir').model.position.rope.scaling.kind == 'linear'
  partial = dict(scaled, rope_parameters=dict(scaled['rope_parameters'], full_attention=dict(
      full, partial_rotary_factor=0.5)))
  with pytest.raises(errors.ConfigError, match=r"partial_rotary_factor 0.5 with rope_type "
                     r"'linear': Gemma3ForCausalLM rotates whole heads"):
    hf_config.to_config(partial, 'dir')


def test_biases_on_the_mlp_alone_read_as_their_own_setting():
  """Llama's attention_bias and mlp_bias apart: the MLP's alone is model.biases='mlp' (GPT-J's
  layout, which the block builds), each other pair its setting."""
  hf = json.loads((FIXTURES / 'llama_linear_v4' / 'config.json').read_text())
  for attention, mlp, biases in ((False, True, 'mlp'), (True, True, 'all'),
                                 (True, False, 'attention'), (False, False, 'none')):
    config = hf_config.to_config(dict(hf, attention_bias=attention, mlp_bias=mlp), 'dir')
    assert config.model.biases == biases


def test_yarn_truncate_false_reads_as_the_unrounded_ramp_and_goes_out_as_it_came():
  base = json.loads((FIXTURES / 'qwen2_yarn_v4' / 'config.json').read_text())
  for truncate, ramp in ((None, 'index'), (True, 'index'), (False, 'index_unrounded')):
    settings = dict(base['rope_scaling'], **({} if truncate is None else {'truncate': truncate}))
    config = hf_config.to_config(dict(base, rope_scaling=settings), 'dir')
    assert config.model.position.rope.scaling.ramp == ramp
    went = hf_export_config.from_config(config, {'bos': None, 'eos': 1, 'pad': None})
    assert went['rope_scaling'].get('truncate', True) == (ramp == 'index')


def test_yarn_attention_factor_follows_transformers():
  base = json.loads((FIXTURES / 'qwen2_yarn_v4' / 'config.json').read_text())
  scaling = lambda **extra: hf_config.to_config(dict(
      base, rope_scaling=dict(base['rope_scaling'], **extra)), 'dir').model.position.rope.scaling
  assert scaling().attention_factor == 0.0  # 0.1 ln(factor) + 1, computed by scaling.py.
  assert scaling(attention_factor=1.25).attention_factor == 1.25
  deepseek = scaling(mscale=0.707, mscale_all_dim=0.707)
  assert deepseek.attention_factor == pytest.approx(1.0)
  grow = lambda m: 0.1 * m * np.log(4.0) + 1
  assert scaling(mscale=1.0, mscale_all_dim=0.5).attention_factor == pytest.approx(
      grow(1.0) / grow(0.5))


def test_bloom_reads_as_the_classic_block_with_alibi_and_a_norm_of_its_embeddings(tmp_path):
  """BloomForCausalLM is the classic block (an MLP of 4 hidden_size, the tanh GELU, biases on
  every layer) with ALiBi over its heads and a LayerNorm of the embeddings. The fixture's 6
  heads are not a power of 2: BLOOM's slopes are those of 4 heads, 2^-2k, then the odd powers
  of 8 heads' ratio 2^-1, by hand. The norm of the embeddings binds: without it the logits
  move off transformers' by more than 1%. Weights read alike under the Hub's names (the
  fixture's) and transformers 5's (`transformer.`)."""
  config = hf_config.to_config(hf_config.read(str(FIXTURES / 'bloom_alibi')), 'dir')
  m = config.model
  assert (m.position.kind, m.embedding_norm, m.num_heads, m.d_ff, m.activation) == (
      positions.ALIBI, True, 6, 96, 'gelu_tanh')
  assert (m.normalization, m.mlp, m.biases, m.residual, m.norm, m.tie_embeddings) == (
      'layer_norm', 'plain', 'all', 'sequential', 'pre', True)
  assert config.data.seq_len == 2048  # BloomConfig has no trained length; BLOOM's own.
  np.testing.assert_allclose(positions.alibi_slopes(6),
                             [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3], rtol=1e-7)
  ref = np.load(FIXTURES / 'bloom_alibi' / 'reference.npz')
  source = pathlib.Path(_edited(tmp_path, 'bloom_alibi'))
  tensors = safetensors_numpy.load_file(str(source / 'model.safetensors'))
  assert 'word_embeddings_layernorm.weight' in tensors
  safetensors_numpy.save_file({'transformer.' + n: a for n, a in tensors.items()},
                              str(source / 'model.safetensors'))
  hf.import_checkpoint(str(source), str(tmp_path / 'w'))
  lm = hf.load(str(tmp_path / 'w'))
  assert _relative_error(lm.logits(ref['ids']), ref['logits']) < 1e-4
  lm.model.embedding_norm = False  # The same weights without the norm.
  assert _relative_error(lm.logits(ref['ids']), ref['logits']) > 1e-2


def test_bloomconfig_names_and_lengths_read_as_the_blocks_fields():
  """n_embed is hidden_size's older name, num_attention_heads and num_hidden_layers the generic
  names BloomConfig reads as n_head and n_layer; a seq_length is the trained length;
  pretraining_tp alone changes nothing but rounding, and is read past."""
  hf_json = json.loads((FIXTURES / 'bloom_alibi' / 'config.json').read_text())
  older = dict(hf_json, n_embed=hf_json.pop('hidden_size'), seq_length=512,
               num_attention_heads=hf_json.pop('n_head'), num_hidden_layers=hf_json.pop('n_layer'),
               pretraining_tp=4)
  m, data = (lambda c: (c.model, c.data))(hf_config.to_config(older, 'dir'))
  assert (m.d_model, m.num_heads, m.num_layers, data.seq_len) == (24, 6, 2, 512)


def test_stablelm_reads_layer_norms_with_a_gated_mlp_in_sequence_or_parallel():
  """StableLmForCausalLM: LayerNorms (with biases) before the branches, a gated MLP, q, k and v
  biases where use_qkv_bias says, partial_rotary_factor of each head rotated on its halves (a
  quarter where absent, as StableLmConfig), and with use_parallel_residual both branches after
  one norm; in transformers 4's form too. Its qk_layernorm is a LayerNorm of each head's own,
  without a bias, at the blocks' epsilon."""
  hf_json = json.loads((FIXTURES / 'stablelm_qkv_bias_yarn' / 'config.json').read_text())
  m = hf_config.to_config(hf_json, 'dir').model
  assert (m.normalization, m.mlp, m.residual, m.biases, m.tie_embeddings, m.num_kv_heads) == (
      'layer_norm', 'gated', 'sequential', 'qkv', False, 2)
  rope = m.position.rope
  assert (rope.layout, rope.fraction, rope.scaling.kind, rope.scaling.attention_factor_dims) == (
      'half', 0.5, 'yarn', 'rotated')
  params = dict(hf_json['rope_parameters'])
  del params['partial_rotary_factor']
  bare = {k: v for k, v in hf_json.items() if k not in ('use_qkv_bias', 'rope_parameters')}
  v4 = dict(bare, rope_theta=params.pop('rope_theta'), rope_scaling=params,
            use_parallel_residual=True)
  m = hf_config.to_config(v4, 'dir').model
  assert (m.position.rope.fraction, m.biases, m.residual) == (0.25, 'none', 'parallel_shared')
  att = hf_config.to_config(dict(hf_json, qk_layernorm=True), 'dir').model.attention
  assert (att.qk_norm, att.qk_norm_type, att.qk_norm_over, att.qk_norm_bias, att.qk_norm_eps) == (
      True, 'layer_norm', 'each_head', False, hf_json['layer_norm_eps'])


def test_gptj_reads_a_shared_norm_interleaved_partial_rotary_and_biases_of_its_mlp():
  """GPTJForCausalLM: one LayerNorm before both parallel branches, biases on the MLP and the
  output layer alone, untied where the file does not say, RoPE at base 10,000 on the interleaved
  pairs of each head's first rotary_dim dimensions (GPTJConfig's 64 where absent), n_positions
  the trained length, under GPTJConfig's names or the generic ones. A rotary_dim that
  transformers' GPT-J fails on (odd, wider than a head, or null with several heads, which it
  reads as n_embd) is refused in one line. The fixture's output bias spans more than 1% of
  transformers' logits, so an import without it would not match them."""
  name = 'gptj_interleaved_partial'
  hf_json = json.loads((FIXTURES / name / 'config.json').read_text())
  config = hf_config.to_config(hf_json, 'dir')
  m = config.model
  assert (m.normalization, m.mlp, m.residual, m.biases, m.output_bias, m.tie_embeddings) == (
      'layer_norm', 'plain', 'parallel_shared', 'mlp', True, False)
  rope = m.position.rope
  assert (rope.base, rope.layout, rope.fraction, rope.scaling.kind, m.d_ff) == (
      10000.0, 'interleaved', 0.5, 'none', 64)
  assert (m.activation, config.data.seq_len) == ('gelu_tanh', 64)
  generic = {k: v for k, v in hf_json.items()
             if k not in ('n_embd', 'n_head', 'n_layer', 'n_positions', 'tie_word_embeddings')}
  generic.update(hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                 max_position_embeddings=64)
  assert hf_config.to_config(generic, 'dir').model == m
  for rotary in (3, 16, None, 'missing'):
    bad = dict(hf_json, rotary_dim=rotary) if rotary != 'missing' else {
        k: v for k, v in hf_json.items() if k != 'rotary_dim'}  # GPTJConfig's 64.
    with pytest.raises(errors.ConfigError, match=r"rotary_dim \d+ with heads of 8: transformers' "
                       r'GPT-J rotates an even number'):
      hf_config.to_config(bad, 'dir')
  bias = safetensors_numpy.load_file(str(FIXTURES / name / 'model.safetensors'))['lm_head.bias']
  ref = np.load(FIXTURES / name / 'reference.npz')
  assert np.ptp(bias) > 1e-2 * np.abs(ref['logits']).max()


def test_a_partial_rotary_factor_that_rotates_an_odd_width_is_refused():
  """5 of a head's 8 dimensions: RoPE here rotates pairs (transformers' GLM rotates 6 at the
  frequencies of 5; its GPT-NeoX fails)."""
  hf_json = json.loads((FIXTURES / 'glm4_sandwich_yarn' / 'config.json').read_text())
  hf_json['rope_parameters']['partial_rotary_factor'] = 0.625
  with pytest.raises(errors.ConfigError, match=r'partial_rotary_factor 0\.625 rotates 5 of 8 '
                     r'dimensions, an odd number'):
    hf_config.to_config(hf_json, 'dir')


def test_exaone4_rotates_its_sliding_layers_alone_where_it_has_a_window():
  """EXAONE 4: with a window, RoPE and the window on the sliding layers (`layer_types`, which
  outranks a pattern of letters, or every sliding_window_pattern-th layer global) and neither on
  the global ones; with a null window, RoPE on every layer. A window with no sliding layer (no
  RoPE at all) and a pattern of letters without layer_types are refused in one line."""
  hf_json = json.loads((FIXTURES / 'exaone4_hybrid_nope_llama3' / 'config.json').read_text())
  layout = lambda hf: (lambda m: (tuple(m.layer_windows), tuple(m.layer_kinds)))(
      hf_config.to_config(hf, 'dir').model)
  hybrid = ((12, 12, 12, 0), ('rope', 'rope', 'rope', 'none'))
  assert layout(hf_json) == hybrid
  assert layout(dict(hf_json, sliding_window_pattern='LLLG')) == hybrid
  no_types = {k: v for k, v in hf_json.items() if k != 'layer_types'}
  assert layout(dict(no_types, sliding_window_pattern=2)) == (
      (12, 0, 12, 0), ('rope', 'none', 'rope', 'none'))
  assert layout(dict(no_types, sliding_window=None)) == ((), ())
  with pytest.raises(errors.ConfigError, match=r"sliding_window_pattern 'LLLG' without "
                     r"layer_types, which transformers' EXAONE 4 fails on"):
    hf_config.to_config(dict(no_types, sliding_window_pattern='LLLG'), 'dir')
  with pytest.raises(errors.ConfigError, match=r'sliding_window set and no sliding layer, and so '
                     r'no layer with RoPE'):
    hf_config.to_config(dict(hf_json, layer_types=['full_attention'] * 4), 'dir')


def test_falcon_reads_its_three_layouts_and_refuses_what_its_class_fails_on():
  """FalconForCausalLM: the new layout's parallel branches after two norms (or one, with
  num_ln_in_parallel_attn 1) and num_kv_heads; the older one's branches after one norm with one
  key/value head (multi_query, the default), or one after the other with a key and a value per
  head; its defaults where the file leaves fields out (no biases, tied, ffn 4 hidden_size,
  gelu). ALiBi (Falcon-RW's, scaled with the logits) and the combinations transformers' class
  fails on are refused in one line."""
  read = lambda name: json.loads((FIXTURES / name / 'config.json').read_text())
  fields = lambda hf: (lambda m: (m.residual, m.num_kv_heads, m.biases, m.tie_embeddings, m.d_ff,
                                  m.activation))(hf_config.to_config(hf, 'dir').model)
  new, old, sequential = (read(n) for n in ('falcon_new_gqa_llama3', 'falcon_multi_query_dynamic',
                                            'falcon_sequential_v4'))
  assert fields(new) == ('parallel', 2, 'all', False, 128, 'gelu')
  assert fields(dict(new, num_ln_in_parallel_attn=1))[0] == 'parallel_shared'
  assert fields(old) == ('parallel_shared', 1, 'none', True, 64, 'gelu')
  assert fields(sequential) == ('sequential', 0, 'all', True, 128, 'gelu')
  left_out = {k: v for k, v in new.items() if k not in (
      'bias', 'tie_word_embeddings', 'ffn_hidden_size', 'activation', 'num_kv_heads')}
  assert fields(left_out) == ('parallel', 0, 'none', True, 128, 'gelu')
  # A null switch is false, as the class tests it: branches in sequence, a key and a value per
  # head.
  assert fields(dict(sequential, parallel_attn=None))[0] == 'sequential'
  assert fields(dict(old, multi_query=None))[:2] == ('parallel_shared', 0)
  for edit, message in (
      ({'alibi': True}, r'alibi \(Falcon-RW\), whose bias transformers\' Falcon scales'),
      ({'parallel_attn': False}, r'new_decoder_architecture without parallel_attn'),
      ({'num_kv_heads': 3}, r'num_ln_in_parallel_attn 2 with 3 key/value heads for 4'),
      ({'new_decoder_architecture': False, 'num_ln_in_parallel_attn': 2},
       r'num_ln_in_parallel_attn 2 without new_decoder_architecture'),
      ({'new_decoder_architecture': False, 'multi_query': False, 'num_ln_in_parallel_attn': None},
       r'num_kv_heads 2 for 4 heads without multi_query or new_decoder_architecture')):
    with pytest.raises(errors.ConfigError, match=message):
      hf_config.to_config(dict(new, **edit), 'dir')


def test_mpt_reads_as_alibi_with_unbiased_layer_norms_and_no_biases():
  """MptForCausalLM: ALiBi over its heads (the fixture's 6: MPT takes the odd then the even
  slopes of 8 heads, which are ALiBi's, by hand), LayerNorms without a bias, no biases, an MLP
  of 4 d_model with the exact GELU, and max_seq_len as the trained length; a softmax_scale of
  1/sqrt of the heads' width is the default's, and a clip_qkv of 0 clips nothing (as
  transformers reads it): both read as the defaults. Another softmax_scale is
  attention.softmax_scale."""
  hf_json = json.loads((FIXTURES / 'mpt_alibi' / 'config.json').read_text())
  m, data = (lambda c: (c.model, c.data))(hf_config.to_config(hf_json, 'dir'))
  assert (m.position.kind, m.normalization, m.biases, m.mlp, m.activation, m.d_ff) == (
      positions.ALIBI, 'layer_norm_unbiased', 'none', 'plain', 'gelu', 96)
  assert (m.embedding_norm, m.tie_embeddings, m.num_heads, data.seq_len) == (False, True, 6, 64)
  eight = [2.0 ** -k for k in range(1, 9)]
  np.testing.assert_allclose(positions.alibi_slopes(6), (eight[1::2] + eight[::2])[:6],
                             rtol=1e-7)
  same = dict(hf_json, attn_config=dict(hf_json['attn_config'], softmax_scale=4 ** -0.5,
                                        clip_qkv=0))
  assert hf_config.to_config(same, 'dir').model == m
  scaled = dict(hf_json, attn_config=dict(hf_json['attn_config'], softmax_scale=0.3))
  att = hf_config.to_config(scaled, 'dir').model.attention
  assert (att.softmax_scale, att.softmax_scale_value) == (True, 0.3)


def test_olmo1_reads_norms_without_parameters_and_a_clamp_that_binds_in_the_fixture(tmp_path):
  """OlmoForCausalLM: LayerNorms without a scale or bias at eps 1e-5 whatever the file says
  (OlmoLayerNorm's), q, k and v clamped to clip_qkv, attention biases, untied; without the
  clamp the import's logits move off transformers' by more than 1%. MPT's attn_config.clip_qkv
  is the same option."""
  hf_json = json.loads((FIXTURES / 'olmo_clip_dynamic_v4' / 'config.json').read_text())
  m = hf_config.to_config(dict(hf_json, rms_norm_eps=1e-6), 'dir').model
  assert (m.normalization, m.layer_norm_eps, m.mlp, m.norm, m.biases, m.tie_embeddings) == (
      'layer_norm_nonparametric', 1e-5, 'gated', 'pre', 'attention', False)
  assert (m.attention.qkv_clip, m.attention.qkv_clip_value, m.num_kv_heads) == (True, 1.0, 2)
  assert not hf_config.to_config(dict(hf_json, clip_qkv=None), 'dir').model.attention.qkv_clip
  mpt = json.loads((FIXTURES / 'mpt_alibi' / 'config.json').read_text())
  mpt['attn_config'] = dict(mpt['attn_config'], clip_qkv=6)
  att = hf_config.to_config(mpt, 'dir').model.attention
  assert (att.qkv_clip, att.qkv_clip_value) == (True, 6.0)
  source = _edited(tmp_path, 'olmo_clip_dynamic_v4', lambda c: c.update(clip_qkv=None))
  hf.import_checkpoint(source, str(tmp_path / 'w'))
  ref = np.load(FIXTURES / 'olmo_clip_dynamic_v4' / 'reference.npz')
  assert _relative_error(hf.load(str(tmp_path / 'w')).logits(ref['ids']), ref['logits']) > 1e-2


def test_phi_reads_one_shared_norm_half_rotary_and_an_output_bias_that_binds():
  """PhiForCausalLM: GPT-NeoX's block with one LayerNorm before both parallel branches, biases
  on every dense layer whatever the file says, partial_rotary_factor (0.5 where absent, as
  PhiConfig), lm_head's bias as the output layer's; the fixture's bias spans more than 1% of
  transformers' logits, so an import without it would not match them."""
  hf_json = json.loads((FIXTURES / 'phi_shared_norm_linear_v4' / 'config.json').read_text())
  m = hf_config.to_config(hf_json, 'dir').model
  assert (m.normalization, m.mlp, m.residual, m.biases, m.output_bias, m.activation) == (
      'layer_norm', 'plain', 'parallel_shared', 'all', True, 'gelu_tanh')
  assert (m.position.rope.fraction, m.position.rope.scaling.kind, m.num_kv_heads) == (
      0.5, 'linear', 2)
  bare = {k: v for k, v in hf_json.items() if k != 'partial_rotary_factor'}
  assert hf_config.to_config(dict(bare, attention_bias=False), 'dir').model == m
  bias = safetensors_numpy.load_file(
      str(FIXTURES / 'phi_shared_norm_linear_v4' / 'model.safetensors'))['lm_head.bias']
  ref = np.load(FIXTURES / 'phi_shared_norm_linear_v4' / 'reference.npz')
  assert np.ptp(bias) > 1e-2 * np.abs(ref['logits']).max()


def test_cohere_reads_a_shared_unbiased_norm_interleaved_pairs_and_a_multiplier():
  """CohereForCausalLM: LayerNorms without a bias before both parallel branches, a gated MLP,
  RoPE on interleaved pairs (the default base 500,000 where the file has none, as CohereConfig),
  and logit_scale as the logits' multiplier; tied embeddings where the file does not say (as
  CohereConfig and Cohere2Config, and the Hub's Command R configs). Cohere 2: RoPE and a window
  on its sliding layers, none on its global ones, from layer_types or sliding_window_pattern."""
  hf_json = json.loads((FIXTURES / 'cohere_interleaved_yarn_v4' / 'config.json').read_text())
  m = hf_config.to_config(hf_json, 'dir').model
  assert (m.normalization, m.mlp, m.residual, m.biases, m.logits_multiplier) == (
      'layer_norm_unbiased', 'gated', 'parallel_shared', 'none', 0.25)
  assert (m.position.rope.layout, m.tie_embeddings, m.num_kv_heads) == ('interleaved', True, 2)
  bare = {k: v for k, v in hf_json.items() if k not in ('rope_theta', 'tie_word_embeddings')}
  assert hf_config.to_config(bare, 'dir').model.position.rope.base == 500_000.0
  assert hf_config.to_config(bare, 'dir').model.tie_embeddings
  cohere2 = json.loads((FIXTURES / 'cohere2_window_nope' / 'config.json').read_text())
  m = hf_config.to_config(cohere2, 'dir').model
  assert hf_config.to_config({k: v for k, v in cohere2.items() if k != 'tie_word_embeddings'},
                             'dir').model.tie_embeddings
  assert (tuple(m.layer_kinds), tuple(m.layer_windows), m.biases, m.logits_multiplier) == (
      ('rope', 'rope', 'none'), (8, 8, 0), 'attention', 0.5)
  pattern = {k: v for k, v in cohere2.items() if k != 'layer_types'}
  assert hf_config.to_config(dict(pattern, sliding_window_pattern=3), 'dir').model == m


def test_granite_reads_its_four_multipliers_and_each_binds_in_the_fixture(tmp_path):
  """GraniteForCausalLM: Llama's block with the embeddings times embedding_multiplier, each
  branch's output times residual_multiplier, q.k times attention_multiplier in place of
  1/sqrt(head_dim) and the logits divided by logits_scaling (each 1 where absent, as
  GraniteConfig; untied where the file does not say). Each one binds in the fixture: set to 1,
  the import no longer computes transformers' logits."""
  name = 'granite_multipliers_v4'
  hf_json = json.loads((FIXTURES / name / 'config.json').read_text())
  m = hf_config.to_config(hf_json, 'dir').model
  assert (m.embedding_multiplier, m.residual_multiplier, m.logits_multiplier) == (6.0, 0.22, 0.25)
  assert (m.attention.softmax_scale, m.attention.softmax_scale_value) == (True, 0.0625)
  assert (m.normalization, m.mlp, m.biases, m.tie_embeddings, m.num_kv_heads) == (
      'rms_norm', 'gated', 'all', True, 2)
  multipliers = ('embedding_multiplier', 'residual_multiplier', 'attention_multiplier',
                 'logits_scaling')
  bare = hf_config.to_config({k: v for k, v in hf_json.items()
                              if k not in multipliers + ('tie_word_embeddings',)}, 'dir').model
  assert (bare.embedding_multiplier, bare.residual_multiplier, bare.logits_multiplier,
          bare.attention.softmax_scale_value, bare.tie_embeddings) == (1.0, 1.0, 1.0, 1.0, False)
  ref = np.load(FIXTURES / name / 'reference.npz')
  for field in multipliers:
    source = _edited(tmp_path / field, name, lambda c, field=field: c.update({field: 1.0}))
    hf.import_checkpoint(source, str(tmp_path / field / 'w'))
    lm = hf.load(str(tmp_path / field / 'w'))
    assert _relative_error(lm.logits(ref['ids']), ref['logits']) > 1e-2, field


@pytest.mark.parametrize('name,scheme', [
    ('bloom_alibi', "trained length 2048, position.kind='alibi', a norm of the embeddings\n"),
    ('mpt_alibi', "trained length 64, position.kind='alibi'\n"),
    ('gpt2_learned', 'trained length 64, learned positions over 64 rows\n'),
    ('smollm3_nope_yarn', '1 of 3 layers without positions, trained length 16, rope base 10000, '
                          'scaling yarn'),
    ('olmo_clip_dynamic_v4', 'q, k and v clamped at 1, trained length 16, rope base 10000, '
                             'scaling dynamic\n'),
    ('phi_shared_norm_linear_v4', 'trained length 8, rope base 10000 over 0.5 of each head, '
                                  'scaling linear, an output bias\n'),
    ('gptj_interleaved_partial', 'trained length 64, rope base 10000 over 0.5 of each head on '
                                 'interleaved pairs, scaling none, an output bias\n'),
    ('glm4_sandwich_yarn', 'trained length 16, rope base 10000 over 0.75 of each head on '
                           'interleaved pairs, scaling yarn\n'),
    ('cohere_interleaved_yarn_v4', 'trained length 16, rope base 10000 on interleaved pairs, '
                                   'scaling yarn, logits times 0.25\n'),
    ('granite_multipliers_v4', 'q.k times 0.0625, embeddings times 6, each branch times 0.22, '
                               'trained length 16, rope base 10000, scaling linear, logits times '
                               '0.25\n')])
def test_the_import_says_what_positions_it_read(name, scheme, tmp_path, capsys):
  """convert_hf.py's summary names the scheme read (RoPE's base, its interleaved pairs and its
  scaling only where layers rotate, the part of each head rotated), a clamp of q, k and v, a set
  factor of q.k, the multipliers of the embeddings, the branches and the logits, and an output
  bias."""
  from scripts import convert_hf  # pylint: disable=g-import-not-at-top
  convert_hf.main(['--from_hf', str(FIXTURES / name), '--workdir', str(tmp_path / 'w')])
  out = capsys.readouterr().out
  assert scheme in out
  assert ('rope base' in out) == ('rope base' in scheme)
