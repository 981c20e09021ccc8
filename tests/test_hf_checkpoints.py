"""Hugging Face checkpoints in (roformer/hf.py, hf_config.py, hf_weights.py): every fixture of
tests/data/hf (tiny random models saved by transformers 5.24 with transformers' own logits and
greedy ids, made by scripts/make_hf_fixtures.py) imports into a workdir that computes the same
logits and greedy ids and decodes with its cache as without; each bad input is one error naming
it, before anything is written; the workflow of the command line on an import. The exports are
tests/test_hf_export.py's. Torch is not needed."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
import tokenizers
from safetensors import numpy as safetensors_numpy

import processes
from configs import test as test_config
from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import hf
from roformer import hf_config
from roformer import positions
from roformer import resolve
from roformer import saved_config
from roformer.data import vocabularies
from tests import kinds

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / 'tests' / 'data' / 'hf'
NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _imported(name, tmp_path) -> str:
  workdir = str(tmp_path / name)
  hf.import_checkpoint(str(FIXTURES / name), workdir)
  return workdir


def _relative_error(got, want) -> float:
  return float(np.abs(np.asarray(got) - want).max() / np.abs(want).max())


def test_the_fixtures_cover_each_architecture_scaling_and_config_form():
  seen = {}
  for name in NAMES:
    config = hf_config.read(str(FIXTURES / name))  # A multimodal class's text view.
    form = 'v5' if 'rope_parameters' in config else 'v4'
    family = hf_config.family(config, name)
    settings = ({'rope_type': 'default'} if family == 'gemma3'  # Per layer type.
                else hf_config.rope_settings(config, family, name))
    seen[name] = (config.get(hf_config.TEXT_OF) or config['architectures'][0],
                  settings['rope_type'], form)
  assert {a for a, _, _ in seen.values()} == set(hf_config.ARCHITECTURES) | set(
      hf_config.MULTIMODAL)
  assert {s for _, s, _ in seen.values()} == set(hf_config.SCALINGS)
  assert {f for _, _, f in seen.values()} == {'v4', 'v5'}


@pytest.mark.parametrize('name', NAMES)
def test_an_imported_checkpoint_computes_transformers_logits_and_greedy_ids(name, tmp_path):
  """Logits within 1e-4 of the largest, over positions past original_max_position_embeddings;
  greedy ids equal; decoding with the key/value cache equal to the full pass."""
  lm = hf.load(_imported(name, tmp_path))
  ref = np.load(FIXTURES / name / 'reference.npz')
  assert _relative_error(lm.logits(ref['ids']), ref['logits']) < 1e-4
  np.testing.assert_array_equal(
      lm.generate(ref['prompt'], ref['greedy'].shape[1] - ref['prompt'].shape[1],
                  stop_at_eos=False), ref['greedy'])
  # Decoding through the cache against one full pass. Dynamic NTK and LongRoPE rotate by the
  # length of each call's input: past their original 16 positions, states cached by an
  # earlier, shorter call were computed at other frequencies, so it is checked within them
  # (generate, above, refills LongRoPE's cache where it crosses them).
  follows_length = lm.config.model.position.rope.scaling.kind in ('dynamic', 'longrope')
  sizes = (7, 1, 8) if follows_length else (7, 1, 16)
  kinds.assert_decoding_equals_full_pass(lm.model, jax.numpy.asarray(ref['ids'][:, :sum(sizes)]),
                                         sizes, max_len=sum(sizes))


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
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  ref = np.load(FIXTURES / 'gpt2_learned' / 'reference.npz')
  source = tmp_path / 'prefixed'
  shutil.copytree(FIXTURES / 'gpt2_learned', source)
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
  untied = tmp_path / 'untied'
  shutil.copytree(FIXTURES / 'gpt2_learned', untied)
  head = np.random.default_rng(0).normal(size=tensors['wte.weight'].shape).astype(np.float32)
  safetensors_numpy.save_file({**tensors, 'lm_head.weight': head},
                              str(untied / 'model.safetensors'))
  config = json.loads((untied / 'config.json').read_text())
  (untied / 'config.json').write_text(json.dumps(dict(config, tie_word_embeddings=False)))
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


def test_an_imported_tokenizer_keeps_its_ids_and_specials(tmp_path):
  text = 'Shall I compare thee to a summer\'s day?'
  own = tokenizers.Tokenizer.from_file(str(FIXTURES / 'llama_linear_v4' / 'tokenizer.json'))
  for name, bos, eos in (('llama_linear_v4', '<s>', '</s>'),
                         ('qwen2_yarn_v4', None, '<|endoftext|>')):
    workdir = _imported(name, tmp_path)
    kept, cls = vocabularies.kept(workdir)
    tok = cls(kept)
    assert list(tok.encode(text)) == own.encode(text, add_special_tokens=False).ids
    frame = vocabularies.framing(tok)
    assert frame == ([own.token_to_id(bos)] if bos else [], [own.token_to_id(eos)])
    assert tok.decode(tok.encode(text)) == text
  assert tok.vocab_size == 96


def test_a_tied_checkpoint_storing_another_output_layer_is_read_untied(tmp_path):
  """transformers unties a checkpoint whose lm_head.weight is not its embedding; so does the
  import (with the head twice the embedding, every logit doubles)."""
  source = tmp_path / 'qwen'
  shutil.copytree(FIXTURES / 'qwen2_yarn_v4', source)
  tensors = safetensors_numpy.load_file(str(source / 'model.safetensors'))
  tensors['lm_head.weight'] = tensors['model.embed_tokens.weight'] * 2
  safetensors_numpy.save_file(tensors, str(source / 'model.safetensors'))
  hf.import_checkpoint(str(source), str(tmp_path / 'w'))
  lm = hf.load(str(tmp_path / 'w'))
  assert not lm.config.model.tie_embeddings
  ref = np.load(FIXTURES / 'qwen2_yarn_v4' / 'reference.npz')
  assert _relative_error(lm.logits(ref['ids']), 2 * ref['logits']) < 1e-4


def test_config_fields_left_out_read_as_transformers_defaults_them():
  mistral = json.loads((FIXTURES / 'mistral_window' / 'config.json').read_text())
  del mistral['sliding_window']  # MistralConfig's default is 4096.
  assert tuple(hf_config.to_config(mistral, 'dir').model.layer_windows) == (4096,)
  linear = json.loads((FIXTURES / 'llama_linear_v4' / 'config.json').read_text())
  assert hf_config.to_config(linear, 'dir').data.seq_len == 8  # 16 interpolated by 2.
  both = dict(linear, rope_parameters={'rope_type': 'default', 'rope_theta': 1.0})
  assert hf_config.to_config(both, 'dir').model.position.rope.scaling.kind == 'linear'
  partial = dict(linear, partial_rotary_factor=0.5)  # Llama rotates whole heads regardless.
  assert hf_config.to_config(partial, 'dir').model.position.rope.fraction == 1.0


def test_sharded_weights_read_as_one_file(tmp_path):
  source = tmp_path / 'sharded'
  shutil.copytree(FIXTURES / 'mistral_window', source)
  tensors = safetensors_numpy.load_file(str(source / 'model.safetensors'))
  os.remove(source / 'model.safetensors')
  names = sorted(tensors)
  shards = {'model-00001-of-00002.safetensors': names[::2],
            'model-00002-of-00002.safetensors': names[1::2]}
  for shard, members in shards.items():
    safetensors_numpy.save_file({n: tensors[n] for n in members}, str(source / shard))
  (source / 'model.safetensors.index.json').write_text(json.dumps(
      {'weight_map': {n: s for s, members in shards.items() for n in members}}))
  hf.import_checkpoint(str(source), str(tmp_path / 'w'))
  ref = np.load(FIXTURES / 'mistral_window' / 'reference.npz')
  assert _relative_error(hf.load(str(tmp_path / 'w')).logits(ref['ids']), ref['logits']) < 1e-4
  os.remove(source / 'model-00002-of-00002.safetensors')
  with pytest.raises(errors.ConfigError, match=r'lacks 1 of the 2 weight shards'):
    hf.import_checkpoint(str(source), str(tmp_path / 'w2'))
  assert not (tmp_path / 'w2').exists()


def _edited(tmp_path, name, edit=None, remove=()):
  source = tmp_path / f'edited_{name}'
  shutil.copytree(FIXTURES / name, source)
  if edit:
    config = json.loads((source / 'config.json').read_text())
    edit(config)
    (source / 'config.json').write_text(json.dumps(config))
  for file in remove:
    os.remove(source / file)
  return str(source)


@pytest.mark.parametrize('name,edit,remove,message', [
    ('llama_dynamic', lambda c: c.update(architectures=['PhiForCausalLM']), (),
     "architecture 'PhiForCausalLM' is not one this project reads"),
    ('llama_dynamic', lambda c: c['rope_parameters'].update(rope_type='su'), (),
     "rope scaling 'su' is not one this project computes"),
    ('llama_dynamic', lambda c: c['rope_parameters'].update(rope_type='longrope'), (),
     "longrope's short_factor is None, where transformers reads a list of positive numbers"),
    ('phi3_longrope_partial', lambda c: c['rope_scaling'].update(short_factor=[1.0, 2.0]), (),
     r"short_factor and long_factor have 2 and 3 numbers, where the 6 rotated dimensions make "
     r'3 pairs'),
    ('llama_dynamic', lambda c: c.update(intermediate_size=48), (),
     r"tensor 'model.layers.0.mlp.gate_proj.weight' has shape \(64, 32\), but config.json "
     r'implies \(48, 32\)'),
    ('llama_dynamic', lambda c: c.update(vocab_size=80), (),
     'has 96 tokens, but the embedding has 80 rows'),
    ('llama_dynamic', lambda c: c.update(num_hidden_layers=3), (),
     "lacks the tensor 'model.layers.2.input_layernorm.weight'"),
    ('llama_dynamic', None, ('model.safetensors',), 'has no model.safetensors'),
    ('llama_dynamic', None, ('tokenizer.json',), 'has no tokenizer.json'),
    ('qwen2_yarn_v4', lambda c: c['rope_scaling'].update(truncate=False), (),
     'yarn with truncate=false'),
    ('llama_dynamic', lambda c: c.update(hidden_size=[32]), (),
     'config.json holds a value of the wrong type'),
    ('llama_dynamic', lambda c: c.update(architectures=[{'class': 'Gemma3'}]), (),
     'config.json holds a value of the wrong type'),
    ('gemma3_local_global', lambda c: c['rope_parameters']['sliding_attention'].update(
        rope_type='linear', factor=8.0), (),
     r"rope scaling 'linear' on Gemma 3's sliding_attention layers; this project scales every "
     r'layer or the global ones'),
    ('gemma3_local_global', lambda c: c.update(query_pre_attn_scalar=12.5), (),
     'query_pre_attn_scalar is 12.5, where transformers reads a positive integer'),
    ('gemma2_softcap_scaled', lambda c: c.update(final_logit_softcapping=0), (),
     'final_logit_softcapping is 0, where transformers reads a positive number or null'),
    ('gemma2_softcap_scaled', lambda c: c.update(attn_logit_softcapping='50'), (),
     "attn_logit_softcapping is '50', where transformers reads a positive number or null"),
    ('gemma3_local_global', lambda c: c.update(attn_logit_softcapping=50.0), (),
     "attn_logit_softcapping 50.0, which transformers' Gemma 3 class reads and its attention "
     'does not apply'),
    ('gemma2_softcap_scaled', lambda c: c.update(query_pre_attn_scalar=float('inf')), (),
     r'query_pre_attn_scalar is inf, where transformers reads a positive integer \(this '
     r'project: up to 2\*\*20\)'),
    ('gemma2_softcap_scaled', lambda c: c.update(final_logit_softcapping=1e7), (),
     r'final_logit_softcapping is 10000000.0, where transformers reads a positive number or '
     r'null \(this project: up to 1e6\)'),
    ('llama_dynamic', lambda c: c.update(num_hidden_layers=float('inf')), (),
     'config.json holds a value of the wrong type'),
    ('gemma2_softcap_scaled', lambda c: c.update(sliding_window=None), (),
     r'sliding_window is None while layers slide \(sliding_attention\), which transformers '
     'cannot run'),
    ('gemma3_multimodal', lambda c: c['text_config'].update(final_logit_softcapping=1.0), (),
     "text_config's final_logit_softcapping 1.0, which Gemma3ForConditionalGeneration does not "
     'apply'),
    ('gpt2_learned', lambda c: c.update(scale_attn_by_inverse_layer_idx=True), (),
     r'scale_attn_by_inverse_layer_idx \(logits divided by the layer index \+ 1\) is not '
     'computed here'),
    ('gpt2_learned', lambda c: c.update(add_cross_attention=True), (),
     r'add_cross_attention \(the decoder of an encoder-decoder\) is not computed here'),
    ('gpt2_learned', lambda c: c.update(n_embd=30), (), 'n_embd 30 does not split into 4 heads'),
    ('gpt2_learned', lambda c: c.update(n_head=0), (), 'n_embd 32 does not split into 0 heads'),
    ('gpt2_learned', lambda c: c.update(layer_norm_epsilon=float('inf')), (),
     r'config.json gives a model this project refuses: config.model.layer_norm_eps=inf must be '
     r'a finite number'),
    ('gemma2_softcap_scaled', lambda c: c.update(hidden_activation='gelu_fast'), (),
     "hidden_activation 'gelu_fast' is not one this project computes"),
    ('gpt2_learned', lambda c: c.update(activation_function='gelu_fast'), (),
     "activation_function 'gelu_fast' is not one this project computes"),
    ('gpt2_learned', lambda c: c.update(n_positions=32), (),
     r"tensor 'transformer.wpe.weight' has shape \(64, 32\), but config.json implies "
     r'\(32, 32\)'),
    ('gemma2_softcap_scaled', lambda c: c.update(use_bidirectional_attention=True), (),
     'use_bidirectional_attention: this project reads causal LMs'),
    ('gemma3_local_global',
     lambda c: (c.pop('layer_types'), c.update(sliding_window_pattern=0)), (),
     'sliding_window_pattern is 0, where transformers reads a positive integer'),
    ('smollm3_nope_yarn', lambda c: (c.pop('no_rope_layers'), c.update(no_rope_layer_interval=0)),
     (), 'no_rope_layer_interval is 0, where transformers reads a positive integer'),
    ('qwen3_yarn_wide_heads', lambda c: c.update(num_hidden_layers=3), (),
     "lacks the tensor 'model.layers.2.input_layernorm.weight'"),
])
def test_a_bad_checkpoint_is_named_before_anything_is_written(tmp_path, name, edit, remove,
                                                               message):
  source = _edited(tmp_path, name, edit, remove)
  with pytest.raises((errors.ConfigError, errors.DamagedFileError), match=message) as raised:
    hf.import_checkpoint(source, str(tmp_path / 'w'))
  assert str(raised.value).count('Fix: ') == 1, raised.value  # One reason, one fix.
  assert not (tmp_path / 'w').exists()


@pytest.mark.parametrize('name', ['llama_dynamic', 'qwen2_yarn_v4'])
def test_without_tokenizer_config_the_special_ids_are_the_model_configs(name, tmp_path):
  """tokenizer_config.json names the bos, eos and pad tokens; without it, config.json's ids
  (which agree in every fixture: Llama's <s> and </s>, Qwen2's eos and pad and no bos)."""
  ids = lambda directory: vocabularies.Pretrained(directory).ids
  with_it = ids(str(FIXTURES / name))
  without = ids(_edited(tmp_path, name, remove=('tokenizer_config.json',)))
  model = json.loads((FIXTURES / name / 'config.json').read_text())
  assert without == with_it == {k: model[f'{k}_token_id'] for k in ('bos', 'eos', 'pad')}
  listed = _edited(tmp_path / 'listed', name,
                   lambda c: c.update(eos_token_id=[with_it['eos'], 0], pad_token_id=-1,
                                      bos_token_id=[]), ('tokenizer_config.json',))
  assert ids(listed) == {'bos': None, 'eos': with_it['eos'], 'pad': None}  # The first eos.
  broken = _edited(tmp_path / 'broken', name, lambda c: c.update(eos_token_id=[10**6]),
                   ('tokenizer_config.json',))
  with pytest.raises(errors.DamagedFileError, match=r'eos_token_id=\[1000000\] is not an id'):
    ids(broken)


@pytest.mark.parametrize('kind', ['yarn', 'dynamic'])
def test_a_continued_import_takes_its_scalings_original_length_from_it(kind, tmp_path):
  """configs/continued.py leaves the original length to the source: a stretching scaling and
  dynamic NTK alike take the length the imported model was pretrained at (16)."""
  from configs import continued  # pylint: disable=import-outside-toplevel
  config = continued.get_config(_imported('llama_gqa_llama3', tmp_path))
  config.model.position.rope.scaling.update(kind=kind, factor=4.0)
  resolve.take_from_source(config)
  assert config.model.position.rope.scaling.original_length == 16


def test_an_import_cut_short_leaves_no_workdir(tmp_path, monkeypatch):
  """The workdir appears only once complete: a write failing halfway (here the checkpoint's)
  leaves neither it nor its staging directory."""
  def fail(*args, **kwargs):
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(checkpoint_lib.Checkpointer, 'save', fail)
  with pytest.raises(OSError):
    hf.import_checkpoint(str(FIXTURES / 'llama_dynamic'), str(tmp_path / 'w'))
  assert os.listdir(tmp_path) == []


def test_a_damaged_kept_tokenizer_is_named_with_its_fix(tmp_path):
  workdir = _imported('llama_dynamic', tmp_path)
  path = os.path.join(workdir, vocabularies.Pretrained.workdir_file)
  kept = json.loads(open(path, encoding='utf-8').read())
  del kept['vocab_size']
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(kept, f)
  with pytest.raises(errors.DamagedFileError, match='is not a kept pretrained tokenizer. Fix: '):
    vocabularies.Pretrained(path)


def test_bad_ids_and_a_file_for_a_directory_are_one_error_with_its_fix(tmp_path):
  lm = hf.load(_imported('llama_dynamic', tmp_path))
  for ids, says in (([[5, 6, 7], [5, 6]], 'its rows have different lengths'),
                    ([[0.5, 1.0]], 'ids must be integer'),
                    ([[5, 10**6]], 'ids must be in'),
                    (np.zeros((1, 0), np.int32), 'at least one position'),
                    (np.zeros((0, 4), np.int32), 'at least one position')):
    with pytest.raises(errors.ConfigError, match=f'{says}.* Fix: '):
      lm.logits(ids)
  with pytest.raises(errors.ConfigError, match='at least one position.* Fix: '):
    lm.generate(np.zeros((1, 0), np.int32), 3)  # A prompt of a tokenizer without a bos.
  with pytest.raises(errors.ConfigError, match=r"is a file\. Fix: --from_hf=.*llama_dynamic,"):
    hf.import_checkpoint(str(FIXTURES / 'llama_dynamic' / 'config.json'), str(tmp_path / 'w'))
  with pytest.raises(errors.ConfigError, match=r'--step=7 has no checkpoint.* Fix: one of'):
    hf.load(lm.workdir, step=7)


@pytest.mark.parametrize('arg', ['mlm', 'classify'])
def test_a_workdir_of_another_model_type_is_named_as_not_a_causal_lm(arg, tmp_path):
  config = test_config.get_config(arg)
  os.makedirs(tmp_path / 'w')
  saved_config.save(config, str(tmp_path / 'w'))
  with pytest.raises(errors.ConfigError, match=f'holds a {config.model.type} model, not a causal '
                                               'LM. Fix: point at a causal_lm workdir'):
    hf.load(str(tmp_path / 'w'))


def test_continued_config_without_a_run_names_the_fix(tmp_path):
  from configs import continued  # pylint: disable=import-outside-toplevel
  for argument, says in (('', 'names none'), (str(tmp_path), 'holds no config.json')):
    with pytest.raises(errors.ConfigError, match=f'{says}.*Fix: --config configs/continued.py:'
                                                 'WORKDIR, with WORKDIR a causal LM'):
      continued.get_config(argument)


def _run(args):
  return subprocess.run([sys.executable] + args, cwd=REPO, env=processes.env(), text=True,
                        capture_output=True, timeout=600, check=False)


def test_the_workflow_on_an_imported_checkpoint(tmp_path, data_dir):
  """The command line on an imported model: convert_hf.py, eval.py on a text file of one's own
  with sliding windows, and train.py continuing it at 4x its length with YaRN
  (configs/continued.py); an existing workdir is one error line and stays as it was."""
  workdir = str(tmp_path / 'llama')
  done = _run(['scripts/convert_hf.py', '--from_hf', str(FIXTURES / 'llama_gqa_llama3'),
               '--workdir', workdir])
  assert done.returncode == 0, done.stderr[-2000:]
  again = _run(['scripts/convert_hf.py', '--from_hf', str(FIXTURES / 'llama_gqa_llama3'),
                '--workdir', workdir])
  assert again.returncode == 1 and again.stderr.strip().startswith('error: --workdir=')
  assert 'Traceback' not in again.stderr
  text = pathlib.Path(tmp_path / 'text')
  text.mkdir()
  for i in range(3):
    (text / f'{i}.txt').write_text('When in the chronicle of wasted time ' * (20 + i))
  done = _run(['eval.py', '--workdir', workdir, '--config.data.name=files',
               f'--config.data.files={text}/0.txt', f'--config.data.validation_files={text}/1.txt',
               f'--config.data.test_files={text}/2.txt', f'--config.data.data_dir={data_dir}',
               '--config.eval.protocol=sliding', '--config.eval.length_multipliers=1,4',
               '--splits=test', '--out=eval_results.mine.json'])
  assert done.returncode == 0, done.stderr[-2000:]
  results = json.loads(pathlib.Path(workdir, 'eval_results.mine.json').read_text())
  assert [r['length'] for r in results['splits']['test']['lengths']] == [16, 64]
  assert all(np.isfinite(r['loss']) for r in results['splits']['test']['lengths'])
  done = _run(['train.py', f'--config=configs/continued.py:{workdir}', '--workdir',
               str(tmp_path / 'yarn'), '--config.data.seq_len=64', '--config.train.steps=2',
               '--config.train.batch_size=2', '--config.train.warmup_steps=1',
               '--config.train.eval_every=2', '--config.train.eval_batches=1',
               f'--config.data.data_dir={data_dir}',
               '--config.model.position.rope.scaling.kind=yarn',
               '--config.model.position.rope.scaling.factor=4'])
  assert done.returncode == 0, done.stderr[-2000:]
  continued = saved_config.load(str(tmp_path / 'yarn'))
  assert continued.model.position.rope.scaling.original_length == 16
  assert continued.data.tokenizer.startswith('hf:')
