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
from roformer import hf_gpt_oss
from roformer import resolve
from roformer import saved_config
from roformer.data import vocabularies
from tests import hf_fixtures
from tests import kinds

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES, NAMES = hf_fixtures.FIXTURES, hf_fixtures.NAMES
_imported, _relative_error = hf_fixtures.imported, hf_fixtures.relative_error
_edited = hf_fixtures.edited


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
  greedy ids equal (the argmax of each prefix of the greedy row in the full pass, or where the
  frequencies follow the length, generation); decoding with the key/value cache equal to the
  full pass."""
  del tmp_path  # Converted in memory, as its import converts it (the workdirs: below).
  lm = hf.load(str(FIXTURES / name))
  ref = np.load(FIXTURES / name / 'reference.npz')
  logits = lm.logits(ref['ids'])
  assert _relative_error(logits, ref['logits']) < 1e-4
  follows_length = lm.config.model.position.rope.scaling.kind in ('dynamic', 'longrope')
  greedy, start = ref['greedy'], ref['prompt'].shape[1]
  if follows_length:  # Each step's frequencies follow its length: generation, step by step.
    np.testing.assert_array_equal(
        lm.generate(ref['prompt'], greedy.shape[1] - start, stop_at_eos=False), greedy)
  else:  # The row starts with the greedy ids, each its prefix's argmax in one causal pass.
    np.testing.assert_array_equal(ref['ids'][:, :greedy.shape[1]], greedy)
    np.testing.assert_array_equal(logits[:, start - 1:greedy.shape[1] - 1].argmax(-1),
                                  greedy[:, start:])
  # Decoding through the cache against one full pass. Dynamic NTK and LongRoPE rotate by the
  # length of each call's input: past their original 16 positions, states cached by an
  # earlier, shorter call were computed at other frequencies, so it is checked within them
  # (generate, above, refills LongRoPE's cache where it crosses them).
  # Chunks of one size compile one decoding program (the cache index is an argument).
  # Elsewhere the full pass over the first 24 positions is the longer one's, above, cut
  # (causal attention).
  sizes = (8, 8) if follows_length else (8, 8, 8)
  if not follows_length and any(block.attn.window for block in lm.model.blocks):
    sizes = (8, 8) + (1,) * 8  # Its windowed layers' rings (window_cache.py), a token a call.
  kinds.assert_decoding_equals_full_pass(lm.model, jax.numpy.asarray(ref['ids'][:, :sum(sizes)]),
                                         sizes, max_len=sum(sizes),
                                         full=None if follows_length else logits[:, :sum(sizes)])


@pytest.mark.parametrize('name', ['llama_gqa_llama3', 'gemma3_multimodal', 'gpt_oss_mxfp4'])
def test_a_directory_loads_as_its_imported_workdir(name, tmp_path):
  """hf.load of a Hugging Face directory converts it in memory: the same config, tokenizer ids
  and logits as the workdir its import writes; a step or overrides are refused (they need the
  workdir)."""
  direct, workdir = hf.load(str(FIXTURES / name)), hf.load(_imported(name, tmp_path))
  as_saved = lambda lm: json.loads(json.dumps(lm.config.to_dict()))  # Tuples as lists.
  assert as_saved(direct) == as_saved(workdir)
  text = 'Shall I compare thee?'
  assert list(direct.encode(text)) == list(workdir.encode(text))
  ids = np.load(FIXTURES / name / 'reference.npz')['ids']
  np.testing.assert_array_equal(direct.logits(ids), workdir.logits(ids))
  for kwargs in ({'step': 0}, {'overrides': {'model.scan_layers': True}}):
    with pytest.raises(errors.ConfigError, match='is a Hugging Face directory.*Fix: import it'):
      hf.load(str(FIXTURES / name), **kwargs)


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


_SCALING = lambda **f: lambda c: c['rope_parameters'].update(f)
_SET = lambda **f: lambda c: c.update(f)


@pytest.mark.parametrize('name,edits', [
    ('deepseek_v3_mla_yarn', (_SET(rope_interleave=False), _SCALING(mscale_all_dim=0.0),
                              _SET(topk_group=4), _SET(routed_scaling_factor=1.0),
                              _SET(n_group=1))),
    ('deepseek_v2_groups_yarn', (_SCALING(mscale_all_dim=0.0), _SET(topk_method='greedy'),
                                 _SET(topk_group=2), _SET(routed_scaling_factor=1.0)))])
def test_each_of_deepseeks_features_decides_its_logits(name, edits, tmp_path):
  """The DeepSeek fixtures' logits move by more than 1e-2 of the largest where any one of their
  features is read otherwise (so the fixture test above checks each): RoPE on the halves (V3),
  no softmax scale of mscale_all_dim, every group kept (as one group, greedy, or all of them),
  the routed scale 1."""
  ref = np.load(FIXTURES / name / 'reference.npz')
  for i, edit in enumerate(edits):
    lm = hf.load(hf_fixtures.edited(tmp_path / str(i), name, edit))
    assert _relative_error(lm.logits(ref['ids']), ref['logits']) > 1e-2, i


def test_minimax_m2s_rotary_dim_and_choice_bias_decide_its_logits(tmp_path):
  """MiniMax-M2's files on the Hub give its partial rotary as rotary_dim (8 of 16 here), which
  reads as the fixture's partial_rotary_factor: the same logits; the whole head rotated, or the
  choice bias left at 0, moves them by more than 1e-2 of the largest."""
  name = 'minimax_m2_partial_qk_norm_yarn'
  ref = np.load(FIXTURES / name / 'reference.npz')
  logits = lambda source: hf.load(source).logits(ref['ids'])

  def hub_form(config):
    del config['rope_parameters']['partial_rotary_factor']
    config['rotary_dim'] = 8
  assert _relative_error(logits(hf_fixtures.edited(tmp_path / 'hub', name, hub_form)),
                         ref['logits']) < 1e-4
  whole = hf_fixtures.edited(tmp_path / 'whole', name, _SCALING(partial_rotary_factor=1.0))
  assert _relative_error(logits(whole), ref['logits']) > 1e-2
  unbiased = hf_fixtures.edited(tmp_path / 'unbiased', name)
  tensors = safetensors_numpy.load_file(unbiased + '/model.safetensors')
  biases = [k for k in tensors if k.endswith('block_sparse_moe.e_score_correction_bias')]
  for key in biases:
    tensors[key] = np.zeros_like(tensors[key])
  safetensors_numpy.save_file(tensors, unbiased + '/model.safetensors')
  assert len(biases) == 2 and _relative_error(logits(unbiased), ref['logits']) > 1e-2


@pytest.mark.parametrize('name,fields,dense', [
    ('qwen2_moe_dense_layers_yarn', {}, (0, 2, 3)),  # Every 2nd, less mlp_only_layers [3].
    ('qwen2_moe_dense_layers_yarn', {'mlp_only_layers': [], 'decoder_sparse_step': 3}, (0, 1, 3)),
    ('qwen2_moe_dense_layers_yarn', {'mlp_only_layers': None, 'decoder_sparse_step': 1}, ()),
    ('qwen2_moe_dense_layers_yarn', {'num_experts': 0}, 'all'),
    ('llama4_maverick_interleaved_linear', {}, (0, 2)),  # interleave_moe_layer_step 2.
    ('llama4_maverick_interleaved_linear', {'moe_layers': [0, 1, 2]}, (3,)),
    ('llama4_maverick_interleaved_linear', {'moe_layers': []}, 'all')])
def test_dense_layers_between_the_sparse_ones_follow_the_classes_rule(name, fields, dense,
                                                                      tmp_path):
  """The Qwen MoEs' layer i is dense where it is in mlp_only_layers or (i + 1) is not a multiple
  of decoder_sparse_step (all without experts); Llama 4's where it is not in moe_layers (else
  every interleave_moe_layer_step-th from the step's own). Their width is intermediate_size
  (Llama 4: intermediate_size_mlp); a model dense everywhere has Llama's gated MLP."""
  path = hf_fixtures.edited(tmp_path, name, lambda c: c.update(fields))
  model = hf_config.to_config(hf_config.read(path), path).model
  width = 48 if name.startswith('llama4') else 40
  if dense == 'all':
    assert (model.mlp, model.d_ff) == ('gated', width)
  else:
    assert model.mlp == 'moe' and model.d_ff == 24
    assert (tuple(model.moe.dense_layers), model.moe.dense_d_ff) == (dense, width if dense else 0)


def test_config_fields_left_out_read_as_transformers_defaults_them():
  mistral = json.loads((FIXTURES / 'mistral_window' / 'config.json').read_text())
  del mistral['sliding_window']  # MistralConfig's default is 4096.
  assert tuple(hf_config.to_config(mistral, 'dir').model.layer_windows) == (4096,)
  linear = json.loads((FIXTURES / 'llama_linear_v4' / 'config.json').read_text())
  assert hf_config.to_config(linear, 'dir').data.seq_len == 8  # 16 interpolated by 2.
  both = dict(linear, rope_parameters={'rope_type': 'default', 'rope_theta': 1.0})
  assert hf_config.to_config(both, 'dir').model.position.rope.scaling.kind == 'linear'
  # Llama's class rotates whole heads at its default frequencies whatever the file says; a
  # scaling's frequencies follow the factor, and transformers fails on them (tested
  # in tests/test_hf_config_forms.py).
  partial = dict(linear, partial_rotary_factor=0.5, rope_scaling=None)
  assert hf_config.to_config(partial, 'dir').model.position.rope.fraction == 1.0
  # Starcoder2Config: 2 key/value heads, no window, biases and tied embeddings; GLM's half of
  # each head rotated, q, k and v biases, heads 128 wide.
  starcoder2 = json.loads((FIXTURES / 'starcoder2_window_yarn' / 'config.json').read_text())
  for name in ('num_key_value_heads', 'sliding_window', 'use_bias', 'tie_word_embeddings'):
    del starcoder2[name]
  m = hf_config.to_config(starcoder2, 'dir').model
  assert (m.num_kv_heads, tuple(m.layer_windows), m.biases, m.tie_embeddings) == (2, (), 'all',
                                                                                 True)
  ministral = json.loads((FIXTURES / 'ministral_layer_windows_yarn' / 'config.json').read_text())
  del ministral['layer_types']  # MinistralConfig slides every layer where the window is set.
  assert tuple(hf_config.to_config(ministral, 'dir').model.layer_windows) == (12, 12, 12)
  del ministral['sliding_window']  # Its default is 4096.
  assert tuple(hf_config.to_config(ministral, 'dir').model.layer_windows) == (4096,) * 3
  glm = json.loads((FIXTURES / 'glm_interleaved_bias_linear' / 'config.json').read_text())
  for name in ('attention_bias', 'head_dim', 'rms_norm_eps', 'num_key_value_heads'):
    del glm[name]
  glm.update(rotary_pct=0.25, rotary_emb_base=500.0)  # GPT-NeoX's names, which GLM ignores.
  m = hf_config.to_config(glm, 'dir').model
  assert (m.position.rope.fraction, m.position.rope.base, m.biases, m.head_dim, m.num_kv_heads,
          m.layer_norm_eps) == (0.5, 10000.0, 'qkv', 128, 2, 1.5625e-7)
  # Seed-OSS's, ERNIE 4.5's and MiniMax-M2's classes: heads 128 wide, 8, 2 and 8 key/value
  # heads, their own bases, biases and ties.
  for name, want in (('seed_oss_qkv_bias_yarn', (8, 10000.0, 'qkv', False)),
                     ('ernie4_5_interleaved_bias_yarn', (2, 500000.0, 'none', True)),
                     ('minimax_m2_partial_qk_norm_yarn', (8, 5e6, 'none', False))):
    left_out = json.loads((FIXTURES / name / 'config.json').read_text())
    for field in ('head_dim', 'num_key_value_heads', 'rope_parameters', 'attention_bias',
                  'use_bias', 'tie_word_embeddings'):
      left_out.pop(field, None)
    left_out.update(num_attention_heads=8, hidden_size=256)
    m = hf_config.to_config(left_out, 'dir').model
    assert (m.head_dim or m.d_model // m.num_heads, m.num_kv_heads or m.num_heads,
            m.position.rope.base, m.biases, m.tie_embeddings) == (128, *want), name


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


def test_deepseeks_latent_cache_decodes_transformers_logits_and_greedy_ids(tmp_path):
  """The imported DeepSeek-V3 checkpoint with `model.mla.cache='latent'` (an override at
  evaluation): the cache keeps kv_lora_rank + qk_rope_head_dim numbers a token, and decoding
  through it gives transformers' logits (YaRN past the original length, the softmax scale)
  and its greedy ids."""
  name = 'deepseek_v3_mla_yarn'
  lm = hf.load(_imported(name, tmp_path), overrides={'model.mla.cache': 'latent'})
  ref = np.load(FIXTURES / name / 'reference.npz')
  hf_config = json.loads((FIXTURES / name / 'config.json').read_text())
  sizes = (8, 8, 8)
  cache = kinds.assert_decoding_equals_full_pass(
      lm.model, jax.numpy.asarray(ref['ids'][:, :sum(sizes)]), sizes, max_len=sum(sizes),
      full=ref['logits'][:, :sum(sizes)], atol=1e-4 * float(np.abs(ref['logits']).max()))
  assert cache['layers'][0]['k'].shape[1:] == (
      1, sum(sizes), hf_config['kv_lora_rank'] + hf_config['qk_rope_head_dim'])
  assert 'v' not in cache['layers'][0]
  greedy, start = ref['greedy'], ref['prompt'].shape[1]
  np.testing.assert_array_equal(
      lm.generate(ref['prompt'], greedy.shape[1] - start, stop_at_eos=False), greedy)


@pytest.mark.parametrize('name,read', [('deepseek_v3_mla_yarn', True),
                                       ('glm4_moe_partial_qk_norm_yarn', True),
                                       ('qwen3_moe_wide_heads_llama3', False)])
def test_multi_token_prediction_layers_past_the_last_are_left_as_transformers_leaves_them(
    name, read, tmp_path):
  """DeepSeek-V3's and GLM-4.5's checkpoints keep their multi-token prediction layer after the
  last (model.layers.<num_hidden_layers>), which their classes skip: the import skips it too and
  computes the same logits; elsewhere such a layer is a tensor config.json does not account for."""
  source = tmp_path / 'mtp'
  shutil.copytree(FIXTURES / name, source)
  tensors = safetensors_numpy.load_file(str(source / 'model.safetensors'))
  layers = json.loads((source / 'config.json').read_text())['num_hidden_layers']
  tensors[f'model.layers.{layers}.input_layernorm.weight'] = np.ones(32, np.float16)
  safetensors_numpy.save_file(tensors, str(source / 'model.safetensors'))
  if not read:
    with pytest.raises(errors.ConfigError, match='1 tensors that config.json does not account'):
      hf.load(str(source))
    return
  ref = np.load(FIXTURES / name / 'reference.npz')
  assert _relative_error(hf.load(str(source)).logits(ref['ids']), ref['logits']) < 1e-4
  # A config.json that counts no such layer (num_nextn_predict_layers 0) accounts for none.
  config = json.loads((source / 'config.json').read_text())
  (source / 'config.json').write_text(json.dumps({**config, 'num_nextn_predict_layers': 0}))
  with pytest.raises(errors.ConfigError, match='1 tensors that config.json does not account'):
    hf.load(str(source))


def test_mxfp4_bytes_decode_to_their_values():
  """A byte holds two E2M1 codes, the low nibble first; a group of 32 shares 2^(scale - 127).
  By hand: 0x21 is 0.5 then 1.0, 0xF9 is -0.5 then -6.0; scale 128 doubles, 126 halves; the
  result is transposed as transformers lays out the experts ([E, in, out])."""
  blocks = np.zeros((1, 2, 1, 16), np.uint8)
  blocks[0, 0, 0, 0], blocks[0, 1, 0, 15] = 0x21, 0xF9
  scales = np.array([[[128], [126]]], np.uint8)
  out = hf_gpt_oss.dequantize(blocks, scales)
  assert out.shape == (1, 32, 2)
  want = np.zeros((1, 32, 2), np.float32)
  want[0, 0, 0], want[0, 1, 0] = 1.0, 2.0
  want[0, 30, 1], want[0, 31, 1] = -0.25, -3.0
  np.testing.assert_array_equal(out, want)
  with pytest.raises(errors.DamagedFileError, match=r"'x_blocks' has no x_scales beside it"):
    hf_gpt_oss.dequantized({'x_blocks': blocks})
  with pytest.raises(errors.DamagedFileError, match=r"'x_blocks' has shape \(1, 2, 1, 16\) "
                                                    r'beside x_scales of \(1, 2\)'):
    hf_gpt_oss.dequantized({'x_blocks': blocks, 'x_scales': scales[..., 0]})


@pytest.mark.parametrize('name,edit,remove,message', [
    ('llama_dynamic', lambda c: c.update(architectures=['JambaForCausalLM']), (),
     "architecture 'JambaForCausalLM' is not one this project reads"),
    ('llama_dynamic', lambda c: c.update(quantization_config={'quant_method': 'gptq'}), (),
     "quantization_config 'gptq', weights this project does not read"),
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
    ('bloom_alibi', lambda c: c.update(apply_residual_connection_post_layernorm=True), (),
     r'apply_residual_connection_post_layernorm \(the residual taken after the norm\) is not '
     r'computed here\. Fix: a BLOOM checkpoint without it'),
    ('bloom_alibi', lambda c: c.update(n_head=5), (), 'hidden_size 24 does not split into 5 heads'),
    ('bloom_alibi', lambda c: c.pop('n_head'), (), "lacks 'n_head'"),
    ('mpt_alibi', lambda c: c['attn_config'].update(alibi=False), (),
     r'attn_config\.alibi false \(learned positions\), where transformers applies ALiBi is not '
     r'computed here\. Fix: an MPT checkpoint without it'),
    ('mpt_alibi', lambda c: c['attn_config'].update(alibi_bias_max=16), (),
     "alibi_bias_max 16, where transformers' slopes take 8"),
    ('mpt_alibi', lambda c: c.update(n_heads=5), (), 'd_model 24 does not split into 5 heads'),
    ('mpt_alibi', lambda c: c.update(ffn_config='mptglu'), (),
     r"ffn_config is 'mptglu', not a group of fields\. Fix: use the config\.json that came"),
    ('mpt_alibi', lambda c: c.update(ffn_config={'ffn_act_fn': 'relu'}), (),
     r"ffn_config \{'ffn_act_fn': 'relu'\}, where transformers applies an MLP with the exact"),
    ('mpt_alibi', lambda c: c['attn_config'].update(clip_qkv=-6.0), (),
     r'attn_config\.clip_qkv is -6\.0, where transformers reads a positive number or null'),
    # QK-norm switched on over weights without it.
    ('phi_shared_norm_linear_v4', lambda c: c.update(qk_layernorm=True), (),
     r"lacks the tensor 'model\.layers\.0\.self_attn\.q_layernorm\.weight' that config\.json "
     r'implies'),
    ('cohere_interleaved_yarn_v4', lambda c: c.update(use_qk_norm=True), (),
     r"lacks the tensor 'model\.layers\.0\.self_attn\.q_norm\.weight'"),
    ('cohere2_window_nope', lambda c: c.update(use_qk_norm=True), (),
     "use_qk_norm, which transformers' Cohere 2 class does not apply"),
    ('cohere_interleaved_yarn_v4', lambda c: c.update(logit_scale=None), (),
     r'logit_scale is None, where transformers reads a positive number'),
    ('cohere2_window_nope', lambda c: c.update(layer_types=['full_attention'] * 3), (),
     r'no sliding layer, and so no layer with RoPE'),
    ('cohere2_window_nope', lambda c: c.update(layer_types=['sliding_attention'] * 2), (),
     r"layer_types is \['sliding_attention', 'sliding_attention'\], where transformers reads "
     r'one of sliding_attention, full_attention for each of the 3 layers'),
    ('gemma3_local_global', lambda c: c['layer_types'].__setitem__(2, 'chunked_attention'), (),
     r"layer_types is .*'chunked_attention'.*, where transformers reads one of"),
    ('olmo_clip_dynamic_v4', lambda c: c.update(clip_qkv=0), (),
     'clip_qkv is 0, where transformers reads a positive number or null'),
    ('mpt_alibi', lambda c: c['attn_config'].update(prefix_lm=True), (),
     'attn_config.prefix_lm, which transformers does not apply'),
    ('mpt_alibi', lambda c: c['attn_config'].update(sliding_window_size=16), (),
     'attn_config.sliding_window_size 16, which transformers does not apply'),
    ('mpt_alibi', lambda c: c.update(norm_type='low_precision_rmsnorm'), (),
     "norm_type 'low_precision_rmsnorm', where transformers applies LayerNorm"),
    ('mpt_alibi', lambda c: c.update(ffn_config={'ffn_type': 'mptglu'}), (),
     r"ffn_config \{'ffn_type': 'mptglu'\}, where transformers applies an MLP with the exact GELU"),
    ('mpt_alibi', lambda c: c['attn_config'].update(qk_ln=True), (),
     'attn_config.qk_ln, which transformers does not apply'),
    ('mpt_alibi', lambda c: c['attn_config'].update(softmax_scale=-0.3), (),
     r"attn_config\.softmax_scale is -0\.3, where transformers reads a positive number"),
    ('mpt_alibi', lambda c: c['attn_config'].update(attn_type='multiquery_attention'), (),
     "attn_type 'multiquery_attention'"),
    ('mpt_alibi', lambda c: c.update(logit_scale='inv_sqrt_d_model'), (),
     "logit_scale, which transformers' MPT does not apply"),
    ('mpt_alibi', lambda c: c.update(no_bias=False), (), "no_bias false .biases."),
    ('mpt_alibi', lambda c: c.update(expansion_ratio=2), (),
     "expansion_ratio 2, where transformers' MLP is 4 d_model wide"),
    ('bloom_alibi', lambda c: c.update(slow_but_exact=True, pretraining_tp=2), (),
     r'slow_but_exact with pretraining_tp > 1, under which .* leaves out the biases of '
     r'self_attention\.dense and mlp\.dense_4h_to_h\. Fix: set slow_but_exact to false'),
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
    ('deepseek_v2_groups_yarn', lambda c: c.update(mlp_bias=True), (),
     "mlp_bias, biases of DeepSeek-V2's dense MLPs"),
    ('deepseek_v2_groups_yarn', lambda c: c.pop('num_experts_per_tok'), (),
     'num_experts_per_tok is None, where transformers reads an integer'),
    ('deepseek_v2_groups_yarn', lambda c: c.update(topk_method='noaux_tc'), (),
     "topk_method 'noaux_tc', which DeepSeek-V2's class does not compute"),
    ('deepseek_v3_mla_yarn', lambda c: c.update(n_shared_experts='2'), (),
     "n_shared_experts is '2', where transformers reads an integer of at least 0"),
    ('seed_oss_qkv_bias_yarn', lambda c: c.update(attention_bias=False, attention_out_bias=True),
     (), 'attention_bias=False, attention_out_bias=True and mlp_bias=False give biases to a set '
         'of layers this project has no setting for'),
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


def test_prompts_of_different_lengths_generate_each_as_it_would_alone():
  """lm.generate of id lists of different lengths: a list of rows in their order, each its
  prompt and the new ids it gets alone (the rows of one length decoded together)."""
  lm = hf.load(str(FIXTURES / 'llama_dynamic'))
  prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14]]
  out = lm.generate(prompts, 4, stop_at_eos=False)
  assert isinstance(out, list) and [len(row) for row in out] == [8, 6, 8]
  for prompt, row in zip(prompts, out):
    np.testing.assert_array_equal(row[:len(prompt)], prompt)
    np.testing.assert_array_equal(row, lm.generate([prompt], 4, stop_at_eos=False)[0])
  with pytest.raises(errors.ConfigError, match='prompt 2 of ids is empty.* Fix: '):
    lm.generate([[5, 6], []], 3)
  with pytest.raises(errors.ConfigError, match=r'ids must be in .* Fix: '):
    lm.generate([[5, 6], [5, 6, 10**6]], 3)


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
  return processes.run(args, cwd=REPO, env=processes.env(), timeout=600)


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
