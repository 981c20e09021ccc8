"""Hugging Face checkpoints out (roformer/hf.py, hf_export_config.py, hf_weights_export.py,
hf_tokenizers.py): a model trained here or imported goes to the transformers class that computes
it, and read back computes the same logits; its tokenizer gives the run's ids; a model no class
computes is refused with the reason and its fix, before anything is written. Torch is not
needed; where it is installed, transformers reads an export back with the same logits."""

import json
import re
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm
import tokenizers
from flax import nnx

from configs import test as test_config
from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import hf
from roformer import hf_config
from roformer import hf_export_config
from roformer import hf_gpt_oss
from roformer import hf_weights
from roformer import models
from roformer import resolve
from roformer import saved_config
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies
from tests import hf_fixtures
from tests import kinds

FIXTURES, _imported = hf_fixtures.FIXTURES, hf_fixtures.imported
_relative_error = hf_fixtures.relative_error


def _gptj_block(m) -> bool:
  """Whether `m` is GPT-J's block (one norm before parallel branches, biases on the MLP alone),
  whose class takes no RoPE scaling and no position past n_positions."""
  return m.residual == 'parallel_shared' and m.biases == 'mlp'


def _workdir(config, path, checkpoint: bool = True, tokenizer=None) -> str:
  """A workdir of `config` at step 0, as train.py would leave one, its parameters drawn at
  random and every bias and norm scale moved off its initial 0 or 1 (a dropped one would
  show), the weights of the 'normal' initialisation at 0.3, not 0.02 (at 0.02 attention is
  nearly uniform, and a wrong factor of q.k, RoPE layout or scaling moves the logits by less
  than 1e-3); without `checkpoint`, its config alone. Its tokenizer: bytes, the SentencePiece
  model `tokenizer` (roformer.data.tokenizer.Tokenizer) as if trained for the run, or a file
  given as config.data.tokenizer (vocabularies.SentencePieceFile or HuggingFace)."""
  config.model.vocab_size = tokenizer.vocab_size if tokenizer else 256 + 5
  if config.model.init == 'normal':
    config.model.init_std = 0.3
  trained = isinstance(tokenizer, tokenizer_lib.Tokenizer)
  config.data.tokenizer = 'sentencepiece' if trained else tokenizer.path if tokenizer else 'bytes'
  resolve.validate(config)
  os.makedirs(path)
  if tokenizer:
    shutil.copy(tokenizer.path, os.path.join(path, tokenizer.workdir_file))
  saved_config.save(config, str(path))
  if not checkpoint:
    return str(path)
  # Drawn eagerly: Trainer.init_state compiles its initialisation (about 0.9 s a model here).
  abstract = trainer_lib.Trainer(config, sharding.make_mesh(config.mesh)).abstract_state
  state = {'params': nnx.state(models.create(config.model, seed=3)),
           'opt_state': jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), abstract['opt_state']),
           'step': jnp.int32(0)}
  # Vectors, and QK-norm's scales and biases (a matrix where each head has its own).
  moved = lambda path, leaf: leaf.ndim == 1 or sharding.path_str(path).endswith(
      ('q_scale', 'k_scale', 'q_bias', 'k_bias'))
  paths, tree = jax.tree_util.tree_flatten_with_path(state['params'])
  keys = jax.random.split(jax.random.key(4), len(paths))
  state['params'] = jax.tree.unflatten(tree, [
      leaf + 0.2 * jax.random.normal(key, leaf.shape, leaf.dtype) if moved(path, leaf) else leaf
      for (path, leaf), key in zip(paths, keys)])
  ckpt = checkpoint_lib.Checkpointer(os.path.join(path, 'checkpoints'))
  ckpt.save(0, state)
  ckpt.close()
  return str(path)


# The Llama preset with QK-norm, heads 12 wide (4 of them in a 32-wide model) and the interleaved
# pairs, whose export to Qwen3 permutes the norms' scales with the rotated columns.
QWEN3 = {'attention.qk_norm': True, 'attention.qk_norm_eps': 1e-5, 'head_dim': 12,
         'position.rope.layout': 'interleaved'}
# Qwen3 with its attention biases and a windowed layer before a global one.
QWEN3_WINDOWS = dict(QWEN3, biases='attention', layer_windows=(8, 0))
# The Llama preset with a layer without positions after a RoPE one, and a window on it.
SMOLLM3 = {'layer_kinds': ('rope', 'none'), 'layer_windows': (0, 8)}
# OLMo 2's block: norms on the branches' outputs alone, QK-norm over all heads, the four
# attention biases, the interleaved pairs (permuted with the norms' scales on export).
OLMO2 = {'norm': 'output', 'attention.qk_norm': True, 'attention.qk_norm_over': 'heads',
         'attention.qk_norm_eps': 1e-5, 'biases': 'attention',
         'position.rope.layout': 'interleaved'}
# The mixtures of experts (roformer/moe.py): Mixtral's renormalized 2 of 4 experts with a window
# on every layer; Qwen2-MoE's softmax weights with a shared expert and q, k and v biases;
# Qwen3-MoE's 3 of 6 experts with QK-norm over each head; OLMoE's softmax weights with QK-norm over
# all heads and the attention biases (both trained on interleaved pairs, permuted on export).
MOE = {'mlp': 'moe', 'moe.num_experts': 4}
MIXTRAL = dict(MOE, layer_windows=(8,))
# gpt-oss's: learned sinks, q, k, v and o biases, a window on alternate layers, experts with
# biases and the clamped SwiGLU (a limit that binds at init_std 0.3).
GPT_OSS = dict(MOE, biases='attention', layer_windows=(8, 0), **{
    'attention.sink_logit': True, 'moe.biases': True, 'moe.swiglu_limit': 0.5})
FIXED_SINKS = {'attention.sink_logit_learned': False, 'attention.sink_logit_init': 1.5}
# Llama 4's layout (configs/lm.py:llama4's, 8-token chunks, the temperature from position 4, the
# RoPE layers trained on the halves, permuted on export), with its dense MLP and with its mixture.
LLAMA4 = {'layer_kinds': ('rope', 'none'), 'layer_chunks': (8, 0), 'attention.qk_norm': True,
          'attention.qk_norm_scale': False, 'attention.qk_norm_layers': 'rotary',
          'attention.qk_norm_eps': 1e-5, 'layer_norm_eps': 1e-5, 'attention.nope_temperature': True,
          'attention.nope_temperature_floor': 4, 'attention.nope_temperature_scale': 0.5}
LLAMA4_UNCHUNKED = {**LLAMA4, 'layer_chunks': ()}
LLAMA4_MOE = {**LLAMA4, **MOE, 'moe.router': 'sigmoid', 'moe.weight_inputs': True,
              'moe.shared_gate': False, 'moe.renormalize': False, 'moe.experts_per_token': 1,
              'moe.shared_d_ff': 64}  # As wide as the experts (configs/test.py:llama's d_ff).
LLAMA4_MAVERICK = {**LLAMA4_MOE, 'moe.dense_layers': (1,), 'moe.dense_d_ff': 48}
# DeepSeek-V3's: multi-head latent attention (heads 12 wide, RoPE on 4 shared key dimensions of
# interleaved pairs, values 6 wide, a query latent), dense; with its mixture after a dense first
# layer (sigmoid scores, the choice bias, 2 groups, the routed scale, an ungated shared expert);
# with the softmax scale its scaling's mscale_all_dim writes.
DEEPSEEK = {'head_dim': 12, 'num_kv_heads': 0, 'mla.kv_rank': 16, 'mla.q_rank': 12,
            'mla.rope_dim': 4, 'mla.v_head_dim': 6, 'position.rope.fraction': 1 / 3,
            'position.rope.layout': 'interleaved'}
DEEPSEEK_MOE = {**DEEPSEEK, **MOE, 'moe.router': 'sigmoid', 'moe.choice_bias': True,
                'moe.groups': 2, 'moe.routed_scale': 2.5, 'moe.shared_d_ff': 64,
                'moe.shared_gate': False, 'moe.dense_layers': (0,), 'moe.dense_d_ff': 48}
# DeepSeek-V2's: its mixture under the softmax (probabilities times the routed scale, groups
# scored by their best) beside latent attention with queries from one projection.
DEEPSEEK_V2 = {**DEEPSEEK, **MOE, 'mla.q_rank': 0, 'moe.renormalize': False, 'moe.groups': 2,
               'moe.group_score': 'best', 'moe.routed_scale': 1.5, 'moe.shared_d_ff': 128,
               'moe.shared_gate': False, 'moe.dense_layers': (0,), 'moe.dense_d_ff': 48}
# GLM-4.5's: DeepSeek-V3's mixture beside grouped-query attention with q, k and v biases,
# QK-norm over each head and half of each head rotated (interleaved here, permuted on export).
GLM4_MOE = {**QWEN3, **{k: v for k, v in DEEPSEEK_MOE.items() if k.startswith('moe.')},
            'mlp': 'moe', 'biases': 'qkv', 'position.rope.fraction': 0.5}
DEEPSEEK_SCALED = {**DEEPSEEK, 'position.rope.layout': 'half', 'attention.softmax_scale': True,
                   'attention.softmax_scale_value': 0.4}
QWEN2_MOE = dict(MOE, biases='qkv', **{'moe.renormalize': False, 'moe.shared_d_ff': 40})
# MiniMax-M2's: the experts chosen by their sigmoid scores plus the choice bias, renormalized,
# QK-norm over all heads, half of each head rotated.
MINIMAX_M2 = {**MOE, 'moe.router': 'sigmoid', 'moe.choice_bias': True,
              'attention.qk_norm': True, 'attention.qk_norm_over': 'heads',
              'attention.qk_norm_eps': 1e-5, 'position.rope.fraction': 0.5}
QWEN3_MOE = {**QWEN3, **MOE, 'moe.num_experts': 6, 'moe.experts_per_token': 3}
# Dense MLPs of their own width between the sparse ones: the Qwen MoEs' mlp_only_layers, Llama 4
# Maverick's layers outside moe_layers.
DENSE_LAYERS = {'moe.dense_layers': (0,), 'moe.dense_d_ff': 48}
QWEN3_MOE_DENSE = {**QWEN3_MOE, **DENSE_LAYERS}
OLMOE = {**MOE, 'biases': 'attention', 'attention.qk_norm': True,
         'attention.qk_norm_over': 'heads', 'attention.qk_norm_eps': 1e-5,
         'moe.renormalize': False, 'position.rope.layout': 'interleaved'}
# Arcee's: Llama's block with a plain MLP of squared ReLU and the MLP's biases. Nemotron's: the
# classic block with squared ReLU, half of each head rotated, grouped-query attention and the
# attention's biases alone (LayerNorm1P's scales stored less 1), linear scaling.
ARCEE = {'mlp': 'plain', 'activation': 'relu_squared', 'biases': 'mlp'}
NEMOTRON = {'activation': 'relu_squared', 'position.rope.fraction': 0.5, 'num_kv_heads': 2,
            'biases': 'attention', 'position.rope.layout': 'half',
            'position.rope.scaling.kind': 'linear', 'position.rope.scaling.factor': 2.0,
            'position.rope.scaling.original_length': 16}
# OLMo 3's: a windowed layer then a global one, YaRN on the global one alone.
OLMO3 = dict(OLMO2, layer_windows=(8, 0), **{
    'position.rope.scaling.kind': 'yarn', 'position.rope.scaling.factor': 2.0,
    'position.rope.scaling.original_length': 16, 'position.rope.scaling.ramp': 'index',
    'position.rope.scaling.layers': 'global'})
# OLMo 1's: LayerNorms without parameters at eps 1e-5, q, k and v clamped at 0.1 (it binds at this
# initialisation: without it the logits move by more than 1%), attention biases.
OLMO1 = {'normalization': 'layer_norm_nonparametric', 'layer_norm_eps': 1e-5,
         'biases': 'attention', 'attention.qkv_clip': True, 'attention.qkv_clip_value': 0.1,
         'position.rope.layout': 'interleaved'}
# Phi's: one LayerNorm before both parallel branches, half of each head rotated (interleaved
# pairs), grouped-query attention, a bias of the output layer, and YaRN (its attention factor on
# the rotated dimensions alone, as transformers applies it).
PHI = {'residual': 'parallel_shared', 'output_bias': True, 'num_kv_heads': 2,
       'position.rope.fraction': 0.5, 'position.rope.scaling.kind': 'yarn',
       'position.rope.scaling.factor': 2.0, 'position.rope.scaling.original_length': 16,
       'position.rope.scaling.ramp': 'index',
       'position.rope.scaling.attention_factor_dims': 'rotated'}
# StableLM's: the Llama preset with LayerNorms, q, k and v biases, half of each head rotated (YaRN's
# attention factor on those alone, as transformers applies it).
STABLELM = {'normalization': 'layer_norm', 'biases': 'qkv', 'position.rope.fraction': 0.5,
            'position.rope.scaling.kind': 'yarn', 'position.rope.scaling.factor': 2.0,
            'position.rope.scaling.original_length': 16, 'position.rope.scaling.ramp': 'index',
            'position.rope.scaling.attention_factor_dims': 'rotated'}
# StableLM's parallel branches after one norm (use_parallel_residual), no biases, three quarters of
# each head rotated on interleaved pairs (permuted to its halves on export).
STABLELM_PARALLEL = dict(STABLELM, residual='parallel_shared', biases='none', **{
    'position.rope.fraction': 0.75, 'position.rope.layout': 'interleaved'})
# GPT-J's: Phi's block with biases on the MLP alone (and the output layer), three quarters of each
# head rotated (6 dimensions, where the permutation is not its own inverse), trained on the halves
# (the export permutes them to GPT-J's interleaved pairs).
GPTJ = {'residual': 'parallel_shared', 'output_bias': True, 'biases': 'mlp',
        'position.rope.fraction': 0.75, 'position.rope.layout': 'half'}
# StarCoder 2's: the classic block with grouped-query attention and an 8-token window on every
# layer (GPT-NeoX has neither).
STARCODER2 = {'num_kv_heads': 2, 'layer_windows': (8,)}
# Falcon 40B's: the classic block's parallel branches, each after its own norm, with
# grouped-query attention (GPT-NeoX has full multi-head attention).
FALCON = {'residual': 'parallel', 'num_kv_heads': 2}
# Falcon 7B's: both branches after one norm, one key/value head, no biases (Phi has them all).
FALCON_SHARED = {'residual': 'parallel_shared', 'num_kv_heads': 1, 'biases': 'none'}
# EXAONE 4's: OLMo 2's output norms with QK-norm over each head, a windowed RoPE layer then a
# global one without positions, on the interleaved pairs (permuted to its halves on export).
EXAONE4 = {'norm': 'output', 'attention.qk_norm': True, 'attention.qk_norm_eps': 1e-5,
           'layer_kinds': ('rope', 'none'), 'layer_windows': (8, 0),
           'position.rope.layout': 'interleaved'}
# EXAONE 4 without windows: RoPE in every layer (its sliding_window null).
EXAONE4_GLOBAL = {'norm': 'output', 'attention.qk_norm': True, 'attention.qk_norm_eps': 1e-5}
# Cohere's: LayerNorms without a bias shared by parallel branches, a gated MLP, the logits times
# 0.25, trained on the halves (the export permutes them to Cohere's interleaved pairs).
COHERE = {'normalization': 'layer_norm_unbiased', 'residual': 'parallel_shared', 'biases': 'none',
          'logits_multiplier': 0.25, 'position.rope.layout': 'half'}
# Cohere 2's: a windowed RoPE layer then a global one without positions, attention biases, on
# interleaved pairs; tied at the classic initialisation, whose output scale 1/sqrt(d) the export
# folds into lm_head beside logit_scale (the multiplier, not folded).
COHERE2 = dict(COHERE, layer_kinds=('rope', 'none'), layer_windows=(8, 0), biases='attention',
               tie_embeddings=True, init='classic', **{'position.rope.layout': 'interleaved'})
# Cohere 2 without a global layer: a window on every layer, all of them RoPE ones.
COHERE2_WINDOWED = dict(COHERE, layer_windows=(8,))
# QK-norm as LayerNorm: Phi's shared by the heads with a bias, StableLM 2 12B's and Command R+'s one
# per head (its scales permuted with the columns on export).
QK_LAYER_NORM = {'attention.qk_norm': True, 'attention.qk_norm_type': 'layer_norm'}
PHI_QK = dict(PHI, **QK_LAYER_NORM, **{'attention.qk_norm_bias': True})
STABLELM_QK = dict(STABLELM_PARALLEL, **QK_LAYER_NORM, **{'attention.qk_norm_over': 'each_head',
                                                         'attention.qk_norm_eps': 1e-5})
COHERE_QK = dict(COHERE, **QK_LAYER_NORM, **{'attention.qk_norm_over': 'each_head',
                                             'attention.qk_norm_eps': 1e-5})
# Granite's: Llama's block with muP's four constants (the embeddings times 4, each branch's
# output times 0.5, q.k times 1/16, the logits times 0.5), biases on attention and the MLP,
# grouped-query attention, on interleaved pairs.
GRANITE = {'embedding_multiplier': 4.0, 'residual_multiplier': 0.5, 'logits_multiplier': 0.5,
           'attention.softmax_scale': True, 'attention.softmax_scale_value': 0.0625,
           'biases': 'all', 'num_kv_heads': 2, 'position.rope.layout': 'interleaved'}
# Granite with the branches' multiplier alone: q.k at 1/sqrt(head_dim), written out.
GRANITE_RESIDUAL = {'residual_multiplier': 0.5}
# GLM's: half of each head rotated, trained on the halves (the export permutes them to GLM's
# interleaved pairs), q, k and v biases (Phi-3, the other class with partial rotary, has none),
# grouped-query attention, llama3's scaling of the rotated part.
GLM = {'biases': 'qkv', 'num_kv_heads': 2, 'position.rope.fraction': 0.5,
       'position.rope.layout': 'half', 'position.rope.scaling.kind': 'llama3',
       'position.rope.scaling.factor': 4.0, 'position.rope.scaling.original_length': 16}
# GLM-4's: sandwich norms without Gemma's multiplier of the embeddings, whole heads rotated from
# the halves, q, k and v biases, dynamic NTK.
GLM4 = {'norm': 'sandwich', 'biases': 'qkv', 'position.rope.layout': 'half',
        'position.rope.scaling.kind': 'dynamic', 'position.rope.scaling.factor': 2.0,
        'position.rope.scaling.original_length': 16}
# GLM with LongRoPE on the rotated half of each head (Phi-3 has no q, k and v biases).
GLM_LONGROPE = dict(GLM, **{'position.rope.scaling.kind': 'longrope',
                            'position.rope.scaling.short_factor': (1.0, 1.5),
                            'position.rope.scaling.long_factor': (2.0, 4.0),
                            'position.rope.scaling.attention_factor_dims': 'rotated'})
# Three quarters of each head rotated (interleaved pairs), a window on every layer, LongRoPE with
# its attention factor on the rotated dimensions: Phi-3's block.
PHI3 = {'position.rope.fraction': 0.75, 'position.rope.layout': 'interleaved',
        'layer_windows': (8,), 'position.rope.scaling.kind': 'longrope',
        'position.rope.scaling.factor': 4.0, 'position.rope.scaling.original_length': 16,
        'position.rope.scaling.short_factor': (1.0, 1.5, 2.0),
        'position.rope.scaling.long_factor': (2.0, 4.0, 8.0),
        'position.rope.scaling.attention_factor_dims': 'rotated'}
# With Gemma 3's sandwich norms, its embedding multiplier, and a windowed layer at base 10k then
# a global one at 1M.
GEMMA3 = dict(QWEN3, norm='sandwich', embedding_multiplier=32 ** 0.5, layer_windows=(8, 0),
              layer_rope_bases=(1e4, 1e6), activation='gelu_tanh')
# Gemma 3 with the linear scaling of its global layer alone (its 4B-27B models').
GEMMA3_SCALED = dict(GEMMA3, **{'position.rope.scaling.kind': 'linear',
                                'position.rope.scaling.factor': 4.0,
                                'position.rope.scaling.original_length': 16,
                                'position.rope.scaling.layers': 'global'})

# Gemma 3 with its attention logits scaled by 1/sqrt(20) (heads 12 wide, as Gemma 3 27B's
# 1/sqrt(168) for 128) and its output logits soft-capped.
GEMMA3_CAPPED = dict(GEMMA3, **{'attention.logit_scale': True, 'attention.logit_scale_dim': 20,
                                'logits_softcap': 3.0})
# Gemma 2's block: Gemma 3's without QK-norm, one RoPE base, a linear scaling of every layer, and
# its attention logits soft-capped too.
GEMMA2 = {'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none', 'norm': 'sandwich',
          'embedding_multiplier': 32 ** 0.5, 'layer_windows': (8, 0), 'activation': 'gelu_tanh',
          'head_dim': 12, 'attention.softcap': True, 'attention.softcap_value': 1.0,
          'attention.logit_scale': True, 'attention.logit_scale_dim': 20, 'logits_softcap': 3.0,
          'position.rope.layout': 'interleaved', 'position.rope.scaling.kind': 'linear',
          'position.rope.scaling.factor': 2.0, 'position.rope.scaling.original_length': 16}


# BLOOM's block: the classic one with ALiBi, a LayerNorm of the embeddings and an MLP of
# 4 d_model with the tanh GELU.
BLOOM = {'embedding_norm': True, 'd_ff': 128, 'activation': 'gelu_tanh'}
# MPT's: ALiBi without that norm, LayerNorms without a bias, no biases, the exact GELU; and with
# q, k and v clamped (attn_config.clip_qkv) at 0.1, which binds as OLMo 1's does.
MPT = {'normalization': 'layer_norm_unbiased', 'biases': 'none', 'd_ff': 128, 'activation': 'gelu'}
MPT_CLIPPED = dict(MPT, **{'attention.qkv_clip': True, 'attention.qkv_clip_value': 0.1})
# MPT with q.k times 0.3 (its attn_config.softmax_scale) in place of 1/sqrt(4).
MPT_SCALED = dict(MPT, **{'attention.softmax_scale': True, 'attention.softmax_scale_value': 0.3})


# Checks behind -m slow: the same export paths as a default one (a model trained here, or an
# imported fixture of the same family taken back out).
_SLOW = pytest.mark.slow


def _slow(*values):
  """A case that runs under -m slow alone."""
  return pytest.param(*values, marks=_SLOW)


@pytest.mark.parametrize('arg,fields,arch', [('rope', {}, 'GPTNeoXForCausalLM'),
                                             ('rope', STARCODER2, 'Starcoder2ForCausalLM'),
                                             ('rope', FALCON, 'FalconForCausalLM'),
                                             _slow('rope', FALCON_SHARED, 'FalconForCausalLM'),
                                             # The fixtures gpt2_learned and bloom_alibi take
                                             # the same paths out in the default suite.
                                             _slow('learned', {}, 'GPT2LMHeadModel'),
                                             _slow('alibi', BLOOM, 'BloomForCausalLM'),
                                             _slow('alibi', MPT, 'MptForCausalLM'),
                                             ('alibi', MPT_CLIPPED, 'MptForCausalLM'),
                                             ('alibi', MPT_SCALED, 'MptForCausalLM'),
                                             ('llama', {}, 'LlamaForCausalLM'),
                                             ('llama', {'biases': 'mlp'}, 'LlamaForCausalLM'),
                                             ('llama', QWEN3, 'Qwen3ForCausalLM'),
                                             ('llama', QWEN3_WINDOWS, 'Qwen3ForCausalLM'),
                                             ('llama', GEMMA3, 'Gemma3ForCausalLM'),
                                             _slow('llama', GEMMA3_SCALED, 'Gemma3ForCausalLM'),
                                             _slow('llama', GEMMA3_CAPPED, 'Gemma3ForCausalLM'),
                                             ('llama', GEMMA2, 'Gemma2ForCausalLM'),
                                             ('llama', SMOLLM3, 'SmolLM3ForCausalLM'),
                                             ('llama', PHI3, 'Phi3ForCausalLM'),
                                             ('llama', GLM, 'GlmForCausalLM'),
                                             ('llama', GLM4, 'Glm4ForCausalLM'),
                                             ('llama', GLM_LONGROPE, 'GlmForCausalLM'),
                                             # One base given per layer: the export's.
                                             _slow('llama', dict(GLM4, layer_rope_bases=(500.0,)),
                                                   'Glm4ForCausalLM'),
                                             ('llama', OLMO1, 'OlmoForCausalLM'),
                                             ('rope', PHI, 'PhiForCausalLM'),
                                             ('rope', GPTJ, 'GPTJForCausalLM'),
                                             # The fixture stablelm_qkv_bias_yarn takes the
                                             # same path out (in sequence, q, k and v biases).
                                             _slow('llama', STABLELM, 'StableLmForCausalLM'),
                                             ('llama', STABLELM_PARALLEL, 'StableLmForCausalLM'),
                                             ('llama', COHERE, 'CohereForCausalLM'),
                                             ('llama', COHERE2, 'Cohere2ForCausalLM'),
                                             ('llama', GRANITE, 'GraniteForCausalLM'),
                                             # The family test below picks its class; the
                                             # Cohere 2 and OLMo 3 cases take their paths out.
                                             _slow('llama', COHERE2_WINDOWED, 'Cohere2ForCausalLM'),
                                             _slow('llama', OLMO2, 'Olmo2ForCausalLM'),
                                             ('llama', OLMO3, 'Olmo3ForCausalLM'),
                                             ('llama', EXAONE4, 'Exaone4ForCausalLM'),
                                             _slow('llama', EXAONE4_GLOBAL, 'Exaone4ForCausalLM'),
                                             ('llama', MIXTRAL, 'MixtralForCausalLM'),
                                             ('llama', GPT_OSS, 'GptOssForCausalLM'),
                                             ('llama', LLAMA4, 'Llama4ForCausalLM'),
                                             # Without chunks: the temperature is its own.
                                             _slow('llama', LLAMA4_UNCHUNKED, 'Llama4ForCausalLM'),
                                             ('llama', LLAMA4_MOE, 'Llama4ForCausalLM'),
                                             ('llama', LLAMA4_MAVERICK, 'Llama4ForCausalLM'),
                                             # The fixtures qwen2_moe_dense_layers_yarn,
                                             # deepseek_v3_mla_yarn and
                                             # glm4_moe_partial_qk_norm_yarn take these and
                                             # GLM-4.5's paths out.
                                             _slow('llama', QWEN3_MOE_DENSE,
                                                   'Qwen3MoeForCausalLM'),
                                             _slow('llama', DEEPSEEK, 'DeepseekV3ForCausalLM'),
                                             ('llama', DEEPSEEK_MOE, 'DeepseekV3ForCausalLM'),
                                             _slow('llama', DEEPSEEK_SCALED,
                                                   'DeepseekV3ForCausalLM'),
                                             _slow('llama', GLM4_MOE, 'Glm4MoeForCausalLM'),
                                             # deepseek_v2_groups_yarn takes its path out.
                                             _slow('llama', DEEPSEEK_V2, 'DeepseekV2ForCausalLM'),
                                             # minimax_m2_partial_qk_norm_yarn takes
                                             # MiniMax-M2's path out by default.
                                             _slow('llama', MINIMAX_M2, 'MiniMaxM2ForCausalLM'),
                                             # The fixtures of these classes take the same
                                             # paths out in the default suite.
                                             _slow('llama', QWEN2_MOE, 'Qwen2MoeForCausalLM'),
                                             _slow('llama', QWEN3_MOE, 'Qwen3MoeForCausalLM'),
                                             _slow('llama', OLMOE, 'OlmoeForCausalLM'),
                                             _slow('llama', ARCEE, 'ArceeForCausalLM'),
                                             _slow('rope', NEMOTRON, 'NemotronForCausalLM'),
                                             ('rope', PHI_QK, 'PhiForCausalLM'),
                                             ('llama', STABLELM_QK, 'StableLmForCausalLM'),
                                             ('llama', COHERE_QK, 'CohereForCausalLM')])
def test_a_model_trained_here_exports_with_the_same_logits(arg, fields, arch, tmp_path):
  """The classic block (interleaved pairs, the tied output at 1/sqrt(d), biases) goes to
  GPT-NeoX (with grouped-query attention and a window on every layer to StarCoder 2; with
  parallel branches and grouped-query attention, or one key/value head and no biases, to
  Falcon), with learned positions to GPT-2 (its output then untied), with ALiBi and a norm of
  the embeddings to BLOOM (its output untied alike), without it to MPT (q, k and v clamped),
  with one norm shared by parallel branches and an output bias to Phi (with biases on the MLP
  alone to GPT-J, three quarters of each head rotated from the halves), LayerNorms with a gated MLP
  to StableLM (its branches in sequence or in parallel after one norm), with that norm unbiased,
  a gated MLP and a logits multiplier to Cohere (with windowed RoPE layers, beside layers without
  positions or not, to Cohere 2), the Llama preset to
  Llama, with muP's multipliers to Granite, with norms without parameters and the clamp to
  OLMo 1, with
  QK-norm to Qwen3 (with and without windows and attention biases), with Gemma 3's
  sandwich norms to Gemma 3, without its QK-norm and with soft-caps to Gemma 2, with a layer
  without positions to SmolLM3, with output norms and QK-norm over each head to EXAONE 4 (a
  windowed RoPE layer beside a global one without positions, or RoPE in every layer), with
  partial rotary to Phi-3 (with q, k and v biases and a
  scaling Phi-3 does not take, to GLM), with sandwich norms without Gemma's multiplier to GLM-4,
  a mixture of experts to Mixtral, Qwen2-MoE (a shared expert), Qwen3-MoE or OLMoE (QK-norm over
  each head or over all); the export, read back, computes
  the same logits.
  (The last test of this file reads it with transformers where torch is.)"""
  config = test_config.get_config(arg)
  kinds.set_fields(config.model, fields)
  # transformers' Gemma 3 scales its global layers only; Phi-3 takes LongRoPE alone; GPT-J takes
  # no scaling.
  if (config.model.norm != 'sandwich' and config.model.position.kind == 'rope'
      and config.model.position.rope.scaling.kind == 'none' and not _gptj_block(config.model)):
    config.model.position.rope.scaling.update(kind='yarn', factor=2.0, original_length=16,
                                              ramp='index')
    # Llama 4's norm after the rotation removes YaRN's multiplier.
    if fields in (LLAMA4, LLAMA4_MOE, LLAMA4_UNCHUNKED, LLAMA4_MAVERICK):
      config.model.position.rope.scaling.attention_factor = 1.0
    # DeepSeek-V3's and GLM-4.5's classes multiply the rotated dimensions.
    if config.model.mla.kv_rank or fields is GLM4_MOE or fields is MINIMAX_M2:
      config.model.position.rope.scaling.attention_factor_dims = 'rotated'
  workdir = _workdir(config, tmp_path / 'w')
  assert hf.export_checkpoint(workdir, str(tmp_path / 'out')) == arch
  went = json.loads((tmp_path / 'out' / 'config.json').read_text())
  if config.model.attention.qkv_clip:  # OLMo's clip_qkv, or MPT's inside its attn_config.
    assert went.get('attn_config', went)['clip_qkv'] == config.model.attention.qkv_clip_value
  if config.model.attention.softmax_scale:  # Granite's attention_multiplier, or MPT's.
    if arch == 'DeepseekV3ForCausalLM':  # head_dim^-1/2 (0.1 mscale_all_dim ln(factor) + 1)^2.
      grown = 0.1 * went['rope_parameters']['mscale_all_dim'] * np.log(2.0) + 1
      scale = 12 ** -0.5 * grown ** 2
    else:
      scale = went['attn_config']['softmax_scale'] if 'attn_config' in went else went[
          'attention_multiplier']
    np.testing.assert_allclose(scale, config.model.attention.softmax_scale_value, rtol=1e-12)
  # Read as its import reads it, in memory (the import's workdir is the same: test_hf_checkpoints).
  back, here = hf.load(str(tmp_path / 'out')), hf.load(workdir)
  ids = np.random.default_rng(0).integers(5, 261, (2, 40))
  assert _relative_error(back.logits(ids), here.logits(ids)) < 1e-5
  # The bytes tokenizer went with it: the same ids, the same framing.
  text = 'Shall I compare thee?\n'
  assert list(back.tokenizer.encode(text)) == list(here.tokenizer.encode(text))
  assert vocabularies.framing(back.tokenizer) == vocabularies.framing(here.tokenizer)


def test_fixed_sinks_go_out_as_their_value_in_every_head():
  """A model trained with sink_logit_learned=False has no sink parameter: its export writes
  the fixed logit in every head of every layer; learned ones go out as they are."""
  config = test_config.get_config('llama')
  kinds.set_fields(config.model, {**GPT_OSS, **FIXED_SINKS})
  out = {}
  hf_gpt_oss.write_sinks(out, 'p.', {}, config.model)
  np.testing.assert_array_equal(out['p.self_attn.sinks'], np.full(config.model.num_heads, 1.5))
  hf_gpt_oss.write_sinks(out, 'q.', {'sink': np.arange(4.0)}, config.model)
  np.testing.assert_array_equal(out['q.self_attn.sinks'], np.arange(4.0))


@pytest.mark.parametrize('given', [False, True])
def test_a_run_with_a_sentencepiece_model_exports_it_with_the_same_ids(given, tmp_path):
  """The default tokenizer, or a SentencePiece model given as config.data.tokenizer (its ids
  moved up by 5), goes out with the model: transformers' form of it encodes text into the run's
  ids, bos first, and the export imported back encodes as the run does."""
  text = 'Shall I compare thee to a summer day?\nThou art more lovely'
  if given:  # SentencePiece's defaults: its own unk, bos and eos at 0, 1, 2.
    (tmp_path / 'corpus.txt').write_text(text * 20)
    spm.SentencePieceTrainer.train(input=str(tmp_path / 'corpus.txt'), vocab_size=60,
                                   model_prefix=str(tmp_path / 'spm'), hard_vocab_limit=False,
                                   minloglevel=2)
    model = vocabularies.SentencePieceFile(str(tmp_path / 'spm.model'))
  else:
    model = tokenizer_lib.train([text * 20], tmp_path / 'spm.model', vocab_size=60)
  workdir = _workdir(test_config.get_config('llama'), tmp_path / 'w', tokenizer=model)
  hf.export_checkpoint(workdir, str(tmp_path / 'out'))
  theirs = tokenizers.Tokenizer.from_file(str(tmp_path / 'out' / 'tokenizer.json'))
  here = hf.load(workdir)
  assert theirs.encode(text).ids == list(here.encode(text))
  assert here.encode(text)[0] == tokenizer_lib.BOS_ID
  hf.import_checkpoint(str(tmp_path / 'out'), str(tmp_path / 'back'))
  assert list(hf.load(str(tmp_path / 'back')).encode(text)) == list(here.encode(text))




@pytest.mark.parametrize('name,arch', [
    _slow('qwen2_yarn_v4', 'Qwen2ForCausalLM'),
    ('qwen3_yarn_wide_heads', 'Qwen3ForCausalLM'),
    _slow('llama_narrow_heads', 'LlamaForCausalLM'),
    ('gemma3_local_global', 'Gemma3ForCausalLM'),
    ('gemma3_multimodal', 'Gemma3ForCausalLM'),
    ('gemma2_softcap_scaled', 'Gemma2ForCausalLM'),
    _slow('olmo2_yarn_biases', 'Olmo2ForCausalLM'),
    ('olmo3_window_yarn_v4', 'Olmo3ForCausalLM'),
    _slow('smollm3_nope_yarn', 'SmolLM3ForCausalLM'),
    ('phi3_longrope_partial', 'Phi3ForCausalLM'),
    _slow('gpt_neox_yarn_partial', 'GPTNeoXForCausalLM'),
    ('gpt2_learned', 'GPT2LMHeadModel'),
    ('bloom_alibi', 'BloomForCausalLM'),
    ('mpt_alibi', 'MptForCausalLM'),
    ('gptj_interleaved_partial', 'GPTJForCausalLM'),
    ('stablelm_qkv_bias_yarn', 'StableLmForCausalLM'),
    ('glm_interleaved_bias_linear', 'GlmForCausalLM'),
    ('glm4_sandwich_yarn', 'Glm4ForCausalLM'),
    ('starcoder2_window_yarn', 'Starcoder2ForCausalLM'),
    ('falcon_multi_query_dynamic', 'FalconForCausalLM'),
    ('falcon_new_gqa_llama3', 'FalconForCausalLM'),
    ('exaone4_hybrid_nope_llama3', 'Exaone4ForCausalLM'),
    # Ministral's windows on some layers go to Qwen2 (its q, k and v biases zero).
    ('ministral_layer_windows_yarn', 'Qwen2ForCausalLM'),
    ('minimax_m2_partial_qk_norm_yarn', 'MiniMaxM2ForCausalLM'),
    # ERNIE 4.5's block (every dense layer biased, tied) is Llama's, its pairs permuted.
    ('ernie4_5_interleaved_bias_yarn', 'LlamaForCausalLM'),
    # Seed-OSS's block (biases on q, k and v alone) is Qwen2's.
    ('seed_oss_qkv_bias_yarn', 'Qwen2ForCausalLM'),
    # The model trained here with OLMO1 takes the same path in the default suite.
    _slow('olmo_clip_dynamic_v4', 'OlmoForCausalLM'),
    _slow('phi_shared_norm_linear_v4', 'PhiForCausalLM'),
    _slow('cohere2_window_nope', 'Cohere2ForCausalLM'),
    # A Mixtral trained here takes the same path out in the default suite.
    _slow('mixtral_window_yarn', 'MixtralForCausalLM'),
    _slow('phi_qk_layernorm', 'PhiForCausalLM'),
    ('stablelm_per_head_qk_norm', 'StableLmForCausalLM'),
    _slow('cohere_qk_norm', 'CohereForCausalLM'),
    ('nemotron_layernorm1p_linear_v4', 'NemotronForCausalLM'),
    ('arcee_relu2_yarn', 'ArceeForCausalLM'),
    ('qwen2_moe_shared_linear_v4', 'Qwen2MoeForCausalLM'),
    ('qwen3_moe_wide_heads_llama3', 'Qwen3MoeForCausalLM'),
    ('olmoe_heads_norm_dynamic', 'OlmoeForCausalLM'),
    ('qwen2_moe_dense_layers_yarn', 'Qwen2MoeForCausalLM'),
    ('deepseek_v3_mla_yarn', 'DeepseekV3ForCausalLM'),
    ('glm4_moe_partial_qk_norm_yarn', 'Glm4MoeForCausalLM'),
    ('deepseek_v2_groups_yarn', 'DeepseekV2ForCausalLM'),
    _slow('qwen3_fp8_blocks', 'Qwen3ForCausalLM'),  # Out in float32.
    _slow('llama4_maverick_interleaved_linear', 'Llama4ForCausalLM'),
    # The MXFP4 experts go out as float32; the models trained here with gpt-oss's and Llama 4's
    # layouts take the same paths out in the default suite.
    _slow('gpt_oss_mxfp4', 'GptOssForCausalLM'),
    _slow('llama4_chunks_temperature_llama3', 'Llama4ForCausalLM'),
    _slow('llama4_multimodal', 'Llama4ForCausalLM')])
def test_an_imported_checkpoint_exports_as_it_came(name, arch, tmp_path):
  workdir = _imported(name, tmp_path)
  assert hf.export_checkpoint(workdir, str(tmp_path / 'out')) == arch
  assert (tmp_path / 'out' / 'tokenizer.json').exists()
  modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / 'out').iterdir()}
  assert len(set(modes.values())) == 1, modes  # The weights as readable as the rest.
  # A multimodal class goes out as its language model's, from the text view of its config.
  came = hf_config.read(str(FIXTURES / name))
  went = json.loads((tmp_path / 'out' / 'config.json').read_text())
  for field in ('max_position_embeddings', 'num_key_value_heads', 'tie_word_embeddings',
                'n_positions', 'activation_function', 'layer_norm_epsilon', 'max_seq_len',
                'rotary_dim'):
    assert went.get(field) == came.get(field), field
  if came.get('n_inner') is not None:  # GPT-2's null is 4 n_embd, which the export writes.
    assert went['n_inner'] == came['n_inner']
  present = {'GPT2LMHeadModel': ('n_positions', 'activation_function', 'layer_norm_epsilon'),
             'MptForCausalLM': ('max_seq_len', 'layer_norm_epsilon'),
             'BloomForCausalLM': ('layer_norm_epsilon',),
             'GPTJForCausalLM': ('n_positions', 'rotary_dim', 'n_inner')}.get(
                 arch, ('max_position_embeddings',))
  assert all(field in went for field in present), (present, sorted(went))
  if arch not in ('GPTNeoXForCausalLM', 'GPT2LMHeadModel', 'BloomForCausalLM',
                  'MptForCausalLM', 'GPTJForCausalLM', 'StableLmForCausalLM',
                  'FalconForCausalLM'):  # Their heads split the width.
    assert went['head_dim'] == came.get('head_dim', came['hidden_size'] // came[
        'num_attention_heads'])
  if 'yarn' in name:
    assert went['rope_scaling']['original_max_position_embeddings'] == 16
  # Nothing rotates, or (GPT-J, GLM) the pairs stay interleaved: as it came.
  if name in ('gpt2_learned', 'bloom_alibi', 'mpt_alibi', 'gptj_interleaved_partial',
              'glm_interleaved_bias_linear', 'glm4_sandwich_yarn'):
    came = hf_weights.canonical(hf_weights.read(str(FIXTURES / name)), came['model_type'], came,
                                'config.json')
    went = hf_weights.read(str(tmp_path / 'out'))
    assert sorted(went) == sorted(came)
    for tensor, array in came.items():
      np.testing.assert_array_equal(went[tensor], array, err_msg=tensor)
  ref = np.load(FIXTURES / name / 'reference.npz')  # Read back as its import reads it.
  assert _relative_error(hf.load(str(tmp_path / 'out')).logits(ref['ids']), ref['logits']) < 1e-4


@pytest.mark.parametrize('fields,message', [
    ({'position.kind': 'kerple'}, "position.kind='kerple'"),
    ({'position.kind': 'alibi'}, r'ALiBi in the classic block without a norm of the embeddings, '
                                 r'which BLOOM, the ALiBi class with that block, has\. Fix: train '
                                 r'with --config\.model\.embedding_norm=true for BLOOM, or with '
                                 r'--config\.model\.normalization=layer_norm_unbiased '
                                 r'--config\.model\.biases=none --config\.model\.activation=gelu '
                                 r'--config\.model\.d_ff=128 for MPT'),
    (dict(MPT, **{'position.kind': 'alibi', 'biases': 'all'}),
     r"biases='all' in an MPT .* which has none\. Fix: train with --config\.model\.biases=none"),
    (dict(MPT, **{'position.kind': 'alibi', 'residual': 'parallel'}),
     r"residual='parallel' in an MPT \(ALiBi without a norm of the embeddings\) block"),
    ({'embedding_norm': True}, r"a norm of the embeddings \(model\.embedding_norm\) outside "
                               r"BLOOM's block"),
    ({'position.kind': 'alibi', 'embedding_norm': True},
     r'an MLP of 64 with gelu_tanh in a BLOOM .* 4 x d_model = 128 wide .*\. Fix: train with '
     r'--config\.model\.d_ff=128 --config\.model\.activation=gelu_tanh'),
    (dict(BLOOM, **{'position.kind': 'alibi', 'residual': 'parallel'}),
     r"residual='parallel' in a BLOOM .* adds the branches one after the other"),
    (dict(BLOOM, **{'position.kind': 'alibi', 'num_kv_heads': 2}),
     r'grouped-query attention in a BLOOM '),
    ({'position.kind': 'alibi', 'embedding_norm': True, 'normalization': 'rms_norm',
      'mlp': 'gated'}, r'rms_norm with a gated MLP in a BLOOM \(ALiBi with a norm of the '
                       r'embeddings\) block, which has LayerNorm and a plain MLP'),
    ({'position.rope.keep_fraction': 0.5}, 'p-RoPE'),
    ({'layer_chunks': (8, 0), 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none'},
     "chunks on other layers than the RoPE ones"),
    ({**LLAMA4, 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'layer_chunks': (8, 4)}, r'chunks of several sizes \[4, 8\]'),
    ({**LLAMA4, 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'attention.qk_norm_scale': True},
     r'attention.qk_norm \(.*qk_norm_scale=True.*\) in a Llama 4 block'),
    ({**LLAMA4, 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'position.rope.scaling.kind': 'yarn', 'position.rope.scaling.factor': 2.0,
      'position.rope.scaling.original_length': 16, 'position.rope.scaling.ramp': 'index'},
     r"yarn's q and k multiplier with QK-norm: Llama 4's class norms q and k after rotating "
     r'them, which removes it\. Fix: .*attention_factor=1'),
    ({**LLAMA4_MOE, 'normalization': 'rms_norm', 'biases': 'none', 'moe.shared_d_ff': 8},
     "a mixture other than Llama 4's"),
    # Whatever else the block is, chunks or Llama 4's routing are its class's alone.
    ({**LLAMA4, 'biases': 'none'}, r"normalization='layer_norm', norm='pre', residual="
                                   r"'sequential' with Llama 4's chunks or routing"),
    ({**LLAMA4, 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'norm': 'sandwich'}, r"normalization='rms_norm', norm='sandwich', residual='sequential' "
                           r"with Llama 4's"),
    ({**LLAMA4, 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'residual_multiplier': 0.5}, "a multiplier, a soft-cap, an output bias or per-layer"),
    ({**LLAMA4, 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'position.rope.fraction': 0.5}, r"partial rotary \(rope.fraction=0.5\): Llama 4's"),
    ({'attention.ssmax': True}, r'an attention option \(.*\)'),
    ({'attention.sink_logit': True, 'normalization': 'rms_norm', 'mlp': 'gated',
      'biases': 'none'}, r"attention.sink_logit with a dense MLP: gpt-oss's, the class with "
                         r"sinks, is a mixture of experts"),
    ({'attention.qk_norm': True}, r'attention\.qk_norm in a GPT-NeoX block'),
    ({'head_dim': 16, 'residual': 'parallel'}, r'heads of width head_dim=16 in a GPT-NeoX block'),
    ({'attention.qk_norm': True, 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'qkv'},
     r"attention\.qk_norm with biases='qkv' \(Qwen3"),
    ({'attention.qk_norm': True, 'attention.qk_norm_eps': 1e-3, 'normalization': 'rms_norm',
      'mlp': 'gated', 'biases': 'none'}, r'QK-norm with its own epsilon'),
    ({'norm': 'sandwich', 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'embedding_multiplier': 2.0},
     r'embedding_multiplier=2 in a sandwich block: Gemma 2 multiplies its embeddings by '
     r'sqrt\(d_model\)'),
    (dict(FALCON, **{'position.rope.fraction': 0.5}),
     r'partial rotary \(rope.fraction=0.5\) in a Falcon block \(the classic one with parallel '
     r'branches\), which rotates whole heads'),
    (dict(FALCON_SHARED, layer_windows=(8,)), r'sliding windows in a Falcon block'),
    (dict(FALCON_SHARED, output_bias=True),
     r'a bias of the output layer \(model\.output_bias\) in a Falcon block .*, whose lm_head has '
     r'none'),
    (dict(EXAONE4, normalization='rms_norm', mlp='gated', biases='none',
          **{'attention.qk_norm_over': 'heads'}),
     r'QK-norm over all the heads with output norms and layers without positions: EXAONE 4, the '
     r'class of that block, norms each head'),
    (dict(STARCODER2, layer_windows=(8, 0)),
     r'sliding windows \[0, 8\] across the layers in a StarCoder 2 block \(the classic one with '
     r'grouped-query attention or windows\), which has one window on every layer or none'),
    (dict(STARCODER2, biases='attention'),
     r"biases='attention' in a StarCoder 2 block .*, which has them on every dense layer or "
     r'none'),
    (dict(GLM, biases='all', normalization='rms_norm', mlp='gated'),
     r"biases='all' in a GLM block \(partial rotary\), which has them on q, k and v or "
     r'nowhere\. Fix: train with --config\.model\.biases=qkv or none'),
    (dict(GLM4, normalization='rms_norm', mlp='gated', biases='attention'),
     r"biases='attention' in a GLM-4 block \(sandwich norms\), which has them on q, k and v or "
     r'nowhere'),
    (dict(GLM4, normalization='rms_norm', mlp='gated', layer_windows=(8, 0)),
     r"sliding windows in a sandwich block without Gemma's multiplier of the embeddings: GLM-4, "
     r'the class of that block, has none \(Gemma 2 and 3 have it, with their multiplier '
     r'sqrt\(d_model\) = 5\.65685\)\. Fix: train without it, or for Gemma with '
     r'--config\.model\.embedding_multiplier=5\.656854'),
    (dict(GEMMA2, layer_rope_bases=(1e4, 1e6)),
     r'per-layer RoPE bases \(layer_rope_bases\) in a sandwich block without QK-norm \(Gemma 2 '
     r'has one rope_theta'),
    (dict(GEMMA2, **{'position.rope.scaling.layers': 'global'}),
     r"a RoPE scaling \('linear'\) of the global layers alone in a sandwich block without "
     r"QK-norm: transformers' Gemma 2 scales every layer"),
    ({'position.kind': 'learned', 'position.learned.per_layer': True},
     r"position.kind='learned': the Llama, .* GPT-2 one learned table added to the embeddings"),
    ({'position.kind': 'learned', 'normalization': 'rms_norm', 'mlp': 'gated'},
     r'rms_norm with a gated MLP in a GPT-2 \(the class with learned positions\) block, which '
     r'has LayerNorm'),
    ({'position.kind': 'learned', 'attention.qk_norm': True},
     r'attention\.qk_norm in a GPT-2 \(the class with learned positions\) block'),
    ({'position.kind': 'learned', 'num_kv_heads': 2},
     r'grouped-query attention in a GPT-2 '),
    ({'position.kind': 'learned', 'layer_windows': (8, 0)},
     r'sliding windows in a GPT-2 '),
    ({'position.kind': 'learned', 'residual': 'parallel'},
     r"residual='parallel' in a GPT-2 .* adds the branches one after the other"),
    ({'logits_softcap': 30.0}, r"a soft-cap of the output logits \(logits_softcap=30\) outside "
                               r"Gemma 2's and 3's block"),
    ({'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none', 'attention.softcap': True},
     r'attention\.softcap in a Qwen3ForCausalLM block, whose class does not compute it'),
    (dict(GEMMA3, **{'attention.softcap': True}),
     r'attention\.softcap in a Gemma3ForCausalLM block, whose class does not compute it'),
    ({'norm': 'sandwich', 'normalization': 'rms_norm', 'mlp': 'gated', 'biases': 'none',
      'attention.qk_norm': True}, r"attention\.qk_norm in a sandwich block without Gemma's "
                                  r'multiplier of the embeddings: GLM-4'),
    (dict(GEMMA3, layer_rope_bases=(1e4, 1e5, 1e4, 1e6), num_layers=4),
     r'RoPE bases that differ among the windowed layers or among the global ones'),
    (dict(GEMMA3, **{'position.rope.scaling.kind': 'linear', 'position.rope.scaling.factor': 2.0}),
     r"a RoPE scaling \('linear'\) of every layer in a sandwich block with QK-norm: "
     r"transformers' Gemma 3 "
     r"scales its global layers alone\. Fix: --config.model.position.rope.scaling.layers=global"),
    (dict(GEMMA3, **{'position.rope.scaling.kind': 'ntk', 'position.rope.scaling.factor': 2.0,
                     'position.rope.scaling.layers': 'global'}),
     r"the RoPE scaling 'ntk' in a sandwich block \(Gemma 3's export takes linear, yarn, "
     r'llama3\)'),
    (dict(QWEN3_WINDOWS, **{'position.rope.scaling.kind': 'linear',
                            'position.rope.scaling.factor': 2.0,
                            'position.rope.scaling.layers': 'global'}),
     r"a RoPE scaling of the global layers alone \(rope.scaling.layers='global'\) outside "
     r"Gemma 3's and OLMo 3's blocks"),
    (dict(GEMMA3, layer_windows=(8, 4)), r'sliding windows of several sizes \[4, 8\]'),
    (dict(GEMMA3, **{'position.rope.fraction': 0.5}),
     r'partial rotary \(rope.fraction=0.5\) in a sandwich block with the embedding multiplier: '
     r'Gemma 3 rotates whole heads \(GLM-4'),
    (dict(PHI3, normalization='rms_norm', mlp='gated', biases='qkv'),
     r"partial rotary \(rope.fraction=0.75\) with biases='qkv' \(Phi-3 has none\)"),
    (dict(PHI3, normalization='rms_norm', mlp='gated', biases='none', layer_windows=(8, 0)),
     r'partial rotary \(rope.fraction=0.75\) with sliding windows on some layers only \(Phi-3 '
     r'windows every layer or none\)'),
    (dict(PHI3, normalization='rms_norm', mlp='gated', biases='none', **{
        'position.rope.scaling.kind': 'llama3', 'position.rope.scaling.short_factor': (),
        'position.rope.scaling.long_factor': (),
        'position.rope.scaling.attention_factor_dims': 'all'}),
     r"partial rotary \(rope.fraction=0.75\) with the RoPE scaling 'llama3' \(Phi-3's config "
     r'takes longrope alone\)'),
    (dict(PHI3, normalization='rms_norm', mlp='gated', biases='none', layer_windows=(8, 4)),
     r'sliding windows of several sizes \[4, 8\]'),
    (dict(PHI3, normalization='rms_norm', mlp='gated', biases='none', head_dim=16, **{
        'position.rope.scaling.short_factor': (1.0,) * 6,
        'position.rope.scaling.long_factor': (2.0,) * 6}),
     r'partial rotary \(rope.fraction=0.75\) with LongRoPE and heads of width head_dim=16: '
     r'Phi3Config sizes the factor lists from hidden_size / heads \(8\)'),
    (dict({k: v for k, v in OLMO2.items() if not k.startswith('attention.')},
          normalization='rms_norm', mlp='gated'),
     r'output norms without QK-norm \(OLMo 2 and 3 have it over all heads, EXAONE 4 over each '
     r'head\)'),
    (dict(OLMO2, normalization='rms_norm', mlp='gated', **{'attention.qk_norm_over': 'head'}),
     r"biases='attention' in an EXAONE 4 block \(output norms with QK-norm over each head\), "
     r'which has none'),
    (dict(EXAONE4, normalization='rms_norm', mlp='gated', biases='none', layer_windows=(0, 8)),
     r'windows on other layers than the RoPE ones in an EXAONE 4 block'),
    (dict(EXAONE4, normalization='rms_norm', mlp='gated', biases='none', layer_windows=()),
     r'layers without positions and no windows in an EXAONE 4 block'),
    (dict({k: v for k, v in EXAONE4.items() if not k.startswith('attention.')},
          normalization='rms_norm', mlp='gated'),
     r'layers without positions with output norms, without QK-norm \(EXAONE 4'),
    (dict(QWEN3, normalization='rms_norm', mlp='gated', biases='none',
          **{'attention.qk_norm_over': 'heads'}),
     r"QK-norm over all the heads \(attention.qk_norm_over='heads'\) with norm='pre'"),
    (dict(OLMO2, normalization='rms_norm', mlp='gated', biases='qkv', layer_norm_eps=1e-5),
     r"biases='qkv' with output norms \(OLMo has all four attention ones or none\)"),
    (dict(OLMO3, normalization='rms_norm', mlp='gated', layer_norm_eps=1e-5, **{
        'position.rope.scaling.layers': 'all'}),
     r"a RoPE scaling \('yarn'\) of every layer with sliding windows and output norms"),
    (dict(OLMO3, normalization='rms_norm', mlp='gated', layer_norm_eps=1e-5, **{
        'position.rope.scaling.kind': 'dynamic', 'position.rope.scaling.ramp': 'ratio'}),
     r"the RoPE scaling 'dynamic' with sliding windows and output norms \(OLMo 3's export "
     r'takes linear, yarn, llama3\)'),
    ({'norm': 'output'}, r"norm='output' in a GPT-NeoX block"),
    (dict(OLMO1, mlp='plain'), r'the block layer_norm_nonparametric with a plain MLP .*OLMo 1 '
                               r'layer_norm_nonparametric with a gated one'),
    (dict(OLMO1, mlp='gated', layer_norm_eps=1e-6),
     r'layer_norm_eps=1e-06 in an OLMo 1 block \(norms without parameters\), whose norms take '
     r'1e-5\. Fix: train with --config\.model\.layer_norm_eps=1e-5'),
    (dict(OLMO1, mlp='gated', layer_windows=(8, 0)), r'sliding windows in an OLMo 1 block'),
    (dict(OLMO1, mlp='gated', biases='all'), r"biases='all' in an OLMo 1 block .*Fix: train with "
                                             r'--config\.model\.biases=attention or none'),
    (dict(OLMO1, mlp='gated', **{'attention.qk_norm': True}),
     r'attention\.qk_norm in an OLMo 1 block .*, whose class clamps q, k and v'),
    (dict(OLMO1, mlp='gated', norm='sandwich'), r"norm='sandwich' in an OLMo 1 block"),
    (dict(OLMO1, mlp='gated', **{'position.rope.fraction': 0.5}),
     r'partial rotary \(rope\.fraction=0\.5\) in an OLMo 1 block'),
    ({'normalization': 'rms_norm', 'mlp': 'gated', 'attention.qkv_clip': True},
     r'attention\.qkv_clip in a Qwen3ForCausalLM block, whose class does not compute it'),
    ({'attention.qkv_clip': True}, r'attention\.qkv_clip in a GPT-NeoX block'),
    ({'output_bias': True}, r"a bias of the output layer \(model.output_bias\) outside Phi's "
                            r"and GPT-J's blocks"),
    ({'logits_multiplier': 0.5}, r'a multiplier of the output logits \(logits_multiplier=0\.5\) '
                                 r"outside Cohere's block"),
    (dict(COHERE, mlp='gated', residual='sequential'),
     r"residual='sequential' in a Cohere block .*Fix: train with "
     r'--config\.model\.residual=parallel_shared'),
    (dict(COHERE, mlp='gated', layer_windows=(8, 0)),
     r'windows on other layers than the RoPE ones in a Cohere block .*: Cohere 2, its class'),
    (dict(COHERE2, mlp='gated', layer_windows=(0, 8)),
     r'windows on other layers than the RoPE ones in a Cohere block'),
    (dict(COHERE2, mlp='gated', head_dim=12),
     r'heads of width head_dim=12 in a Cohere 2 block'),
    (dict(COHERE, mlp='gated', biases='all'), r"biases='all' in a Cohere block"),
    (dict(PHI, biases='attention'), r"biases='attention' in a Phi block .*Fix: train with "
                                    r'--config\.model\.biases=all'),
    (dict(PHI, layer_windows=(8, 0)), r'sliding windows in a Phi block'),
    (dict(PHI, **{'attention.qk_norm': True, 'attention.qk_norm_eps': 1e-6}),
     r"attention\.qk_norm \(.*qk_norm_type='rms_norm'.*\) in a Phi block"),
    (dict(PHI, normalization='rms_norm', mlp='gated', output_bias=False),
     r"a parallel residual \(residual='parallel_shared'\) in a Llama-family block"),
    (dict(PHI, normalization='rms_norm', mlp='gated'),
     r"a bias of the output layer \(model\.output_bias\) outside Phi's and GPT-J's blocks"),
    (dict(PHI, layer_kinds=('rope', 'none')), r'layers without positions \(layer_kinds\) in a '
                                              r'Phi block'),
    (dict(OLMO3, normalization='rms_norm', mlp='gated', layer_norm_eps=1e-5,
          layer_rope_bases=(1e4, 1e6)),
     r"per-layer RoPE bases \(layer_rope_bases\) outside Gemma 2's and 3's block"),
    (dict(SMOLLM3, normalization='rms_norm', mlp='gated', biases='none', norm='output'),
     r'layers without positions with output norms, without QK-norm \(EXAONE 4, the class of '
     r'that block, has it over each head\)'),
    (dict(PHI3, **{'position.rope.scaling.attention_factor_dims': 'all'}),
     r"longrope's attention factor on every dimension of q and k with partial rotary .*Fix: "
     r'train or continue with --config.model.position.rope.scaling.attention_factor_dims'),
    (dict(GEMMA3, biases='qkv'), r"biases='qkv' in a sandwich block"),
    (dict(SMOLLM3, layer_windows=(8, 0), normalization='rms_norm', mlp='gated', biases='none'),
     r'sliding windows on RoPE layers with layers without positions'),
    (dict(SMOLLM3, normalization='rms_norm', mlp='gated', biases='qkv'),
     r"biases='qkv' with layers without positions"),
    (dict(SMOLLM3, normalization='rms_norm', mlp='gated', biases='none',
          **{'attention.qk_norm': True}),
     r'attention\.qk_norm with layers without positions'),
    (dict(SMOLLM3, normalization='rms_norm', mlp='gated', biases='none', norm='sandwich'),
     r"norm='sandwich' with layers without positions"),
    (dict(SMOLLM3, normalization='rms_norm', mlp='gated', biases='none', num_layers=4,
          layer_windows=(0, 4, 0, 8)), r'sliding windows of several sizes \[4, 8\]'),
    ({'layer_kinds': ('rope', 'none')}, r'layers without positions \(layer_kinds\) in a GPT-NeoX'),
    ({'layer_kinds': ('rope', 'alibi')},
     r"position.kind='rope' with layer_kinds \('rope', 'alibi'\): the Llama"),
    ({'layer_rope_bases': (1e4, 1e6)}, r"per-layer RoPE bases \(layer_rope_bases\) outside "
                                       r"Gemma 2's and 3's block"),
    ({'embedding_multiplier': 2.0}, r"an embedding multiplier \(2\) outside Gemma 2's and 3's "
                                    r'block'),
    (dict(GPTJ, **{'position.rope.base': 5e5}),
     r'rope\.base=500000 in a GPT-J block .*base 10000'),
    (dict(GPTJ, num_kv_heads=2), r'grouped-query attention in a GPT-J block'),
    ({'mlp': 'gated', 'biases': 'all'},
     r"biases='all' in a StableLM block .*Fix: train with --config\.model\.biases=qkv or none"),
    ({'mlp': 'gated', 'biases': 'attention'}, r"biases='attention' in a StableLM block"),
    ({'mlp': 'gated', 'biases': 'mlp'}, r"biases='mlp' in a StableLM block"),
    (dict(STABLELM_PARALLEL, mlp='gated', output_bias=True),
     r"a bias of the output layer \(model\.output_bias\) outside Phi's and GPT-J's blocks"),
    (dict(COHERE, mlp='gated', output_bias=True),
     r"a bias of the output layer \(model\.output_bias\) outside Phi's and GPT-J's blocks"),
    ({'mlp': 'gated', 'biases': 'qkv', 'residual': 'parallel'},
     r"residual='parallel' in a StableLM block .*share one norm"),
    ({'mlp': 'gated', 'biases': 'qkv', 'layer_windows': (8,)},
     r'sliding windows in a StableLM block'),
    (dict(GPTJ, **{'position.rope.scaling.kind': 'linear', 'position.rope.scaling.factor': 2.0}),
     r"the RoPE scaling 'linear' in a GPT-J block .*, whose config takes none\. Fix: export"),
    (dict(GPTJ, **{'attention.qk_norm': True}), r'attention\.qk_norm in a GPT-J block'),
    ({'residual_multiplier': 0.5}, r'a multiplier of the residual branches '
                                   r"\(residual_multiplier=0\.5\) outside Granite's block"),
    ({'attention.softmax_scale': True}, r'attention\.softmax_scale in a GPT-NeoX block'),
    (dict(GRANITE, normalization='rms_norm', mlp='gated', layer_windows=(8,)),
     r'sliding windows in a Granite block'),
    (dict(GRANITE, normalization='rms_norm', mlp='gated', biases='qkv'),
     r"biases='qkv' in a Granite block .*Fix: train with --config\.model\.biases=attention"),
    (dict(GRANITE, normalization='rms_norm', mlp='gated', **{'attention.qk_norm': True}),
     r'attention\.qk_norm in a Granite block .*computes one attention option'),
    (dict(GRANITE, normalization='rms_norm', mlp='gated', residual='parallel'),
     r"residual='parallel' in a Granite block"),
    ({'residual': 'parallel', 'normalization': 'rms_norm', 'mlp': 'gated'},
     r"a parallel residual \(residual='parallel'\) in a Llama-family block \(.*\)\. Fix: "
     r'export a model trained '
     'without it'),
    ({'position.rope.scaling.kind': 'yarn', 'position.rope.scaling.factor': 2.0,
      'position.rope.scaling.original_length': 16, 'position.rope.scaling.ramp': 'ratio'},
     r"YaRN's 'ratio' ramp .*Fix: train or continue with "
     r'--config.model.position.rope.scaling.ramp=index: [^.]*\.$'),
])
def test_an_export_no_transformers_class_computes_is_refused_with_why(fields, message, tmp_path):
  # The cases built on GEMMA3 on the Llama preset, whose layer_norm_eps their QK-norm's matches;
  # the others on the classic block.
  config = test_config.get_config('llama' if fields.get('norm') == 'sandwich'
                                  and 'attention.qk_norm_eps' in fields else 'rope')
  kinds.set_fields(config.model, fields)
  workdir = _workdir(config, tmp_path / 'w', checkpoint=False)
  with pytest.raises(errors.ConfigError, match='no transformers class computes this model: '
                     + message):
    hf.export_checkpoint(workdir, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('arg,fields,family', [('llama', COHERE, 'cohere'),
                                               ('llama', COHERE2, 'cohere2'),
                                               ('llama', COHERE2_WINDOWED, 'cohere2'),
                                               ('llama', OLMO2, 'olmo2'), ('llama', OLMO3, 'olmo3'),
                                               ('rope', PHI, 'phi'), ('llama', OLMO1, 'olmo'),
                                               ('llama', GRANITE_RESIDUAL, 'granite'),
                                               ('llama', {'logits_multiplier': 2.0}, 'granite'),
                                               ('llama', {'attention.softmax_scale': True},
                                                'granite'),
                                               ('llama', {'position.rope.fraction': 0.5}, 'phi3'),
                                               ('llama', {'position.rope.fraction': 0.5,
                                                          'biases': 'qkv'}, 'glm'),
                                               ('llama', dict(GLM, biases='none'), 'glm'),
                                               ('llama', {'norm': 'sandwich'}, 'glm4'),
                                               ('rope', {'biases': 'none'}, 'starcoder2'),
                                               ('rope', {'num_kv_heads': 2}, 'starcoder2'),
                                               ('rope', {'layer_windows': (8,)}, 'starcoder2'),
                                               ('rope', FALCON, 'falcon'),
                                               ('rope', FALCON_SHARED, 'falcon'),
                                               ('rope', {'residual': 'parallel',
                                                         'biases': 'none'}, 'falcon'),
                                               ('llama', EXAONE4, 'exaone4'),
                                               ('llama', EXAONE4_GLOBAL, 'exaone4'),
                                               ('rope', {'head_dim': 16}, 'starcoder2'),
                                               ('llama', ARCEE, 'arcee'),
                                               ('rope', NEMOTRON, 'nemotron'),
                                               ('rope', {'position.rope.fraction': 0.5,
                                                         'num_kv_heads': 2}, 'nemotron'),
                                               ('rope', {'position.rope.fraction': 0.5},
                                                'gpt_neox')])
def test_each_block_goes_to_the_class_that_computes_it(arg, fields, family):
  """Cohere 2 wherever a Cohere block has a window (on every layer too), OLMo 3 wherever an
  OLMo block has one, Granite wherever Llama's block has any one of its constants; partial
  rotary to Phi-3 where it computes it (no biases, no scaling but LongRoPE), else to GLM; sandwich
  norms without Gemma's multiplier to GLM-4; the classic block without biases, with grouped-query
  attention or with windows to StarCoder 2; its parallel branches with grouped-query attention
  or without biases to Falcon; output norms with QK-norm over each head to EXAONE 4: the class
  chosen from the config alone."""
  config = test_config.get_config(arg)
  kinds.set_fields(config.model, fields)
  if fields is OLMO2:  # As the round trips do: a scaling of every layer.
    config.model.position.rope.scaling.update(kind='yarn', factor=2.0, original_length=16,
                                              ramp='index')
  config.model.vocab_size = 261
  resolve.validate(config)
  assert hf_export_config.export_family(config) == family


@pytest.mark.parametrize('fields,why', [
    (dict(MOE, norm='sandwich'), r"normalization='rms_norm', norm='sandwich'"),
    (dict(MOE, **{'moe.renormalize': False}), "the softmax's own weights"),
    (dict(MOE, biases='qkv'), "biases='qkv'; MixtralForCausalLM would be the nearest"),
    (dict(QWEN2_MOE, layer_windows=(8,)), 'windows; Qwen2MoeForCausalLM'),
    (dict(MIXTRAL, layer_windows=(8, 0)), 'windows that differ by layer'),
    ({**QWEN3_MOE, 'moe.shared_d_ff': 8}, 'qk_norm; Qwen2MoeForCausalLM'),
    (dict(MOE, **{'position.rope.fraction': 0.5}), 'RoPE on part of each head'),
    ({**GPT_OSS, 'attention.sink_logit': False}, 'no sink logit .*GptOssForCausalLM'),
    ({**GPT_OSS, 'moe.swiglu_limit': 0.0}, r'an unclamped SwiGLU \(moe.swiglu_limit 0'),
    ({**GPT_OSS, 'moe.shared_d_ff': 8}, 'a shared expert .gpt-oss has none.; GptOss'),
    ({**GPT_OSS, 'moe.renormalize': False}, "the softmax's own weights"),
    ({**GPT_OSS, 'biases': 'qkv'}, "biases='qkv'"),
    ({**GPT_OSS, 'layer_windows': (8, 4)}, 'windows of more than one width'),
    ({**GPT_OSS, 'attention.softcap': True}, 'the attention option softcap'),
    ({**MOE, 'moe.shared_d_ff': 8, 'moe.shared_gate': False}, "Llama 4's routing"),
    ({**MIXTRAL, **DENSE_LAYERS}, r'dense layers between the sparse ones \(moe.dense_layers '
                                  r'\(0,\)\), .*; MixtralForCausalLM'),
    ({**OLMOE, **DENSE_LAYERS}, 'dense layers between the sparse ones .*; OlmoeForCausalLM'),
    ({**MOE, 'moe.groups': 2}, "DeepSeek's choice bias, groups or routed scale .* "
                               'DeepseekV2ForCausalLM would be the nearest with model.mla'),
    ({**GLM4_MOE, 'layer_windows': (8,)}, 'windows; Glm4MoeForCausalLM would be the nearest'),
    ({**GLM4_MOE, 'biases': 'attention'}, "biases='attention'; Glm4MoeForCausalLM"),
    ({**GLM4_MOE, 'attention.qk_norm_over': 'heads'},
     r"attention.qk_norm \(.*qk_norm_over='heads'.*\) in a GLM-4.5 block"),
    ({**GLM4_MOE, 'moe.shared_gate': True}, "Llama 4's routing .* or sigmoid scores otherwise"),
    ({**MINIMAX_M2, 'moe.renormalize': False},
     "the sigmoid scores' own weights .*; MiniMaxM2ForCausalLM would be the nearest"),
    ({**MINIMAX_M2, 'biases': 'attention'}, "biases='attention'; MiniMaxM2ForCausalLM")])
def test_a_mixture_no_transformers_class_computes_is_refused_naming_the_nearest(fields, why):
  _assert_llama_export_refused(fields, 'a mixture of experts with ' + why)


def _assert_llama_export_refused(fields: dict, message: str) -> None:
  """The Llama preset with `fields` validates, and its export is refused with `message`."""
  config = test_config.get_config('llama')
  kinds.set_fields(config.model, fields)
  config.model.vocab_size = 261
  resolve.validate(config)
  with pytest.raises(errors.ConfigError, match=message):
    hf_export_config.export_family(config)


@pytest.mark.parametrize('fields,why', [
    ({**DEEPSEEK, 'layer_windows': (8,)}, 'sliding windows or chunks with latent attention'),
    ({**DEEPSEEK, 'attention.qk_norm': True}, "attention.qk_norm with latent attention, which "
                                              "DeepSeek-V3's class does not compute"),
    ({**DEEPSEEK, 'attention.softmax_scale': True}, 'a softmax scale without a RoPE scaling'),
    ({**DEEPSEEK, 'layer_kinds': ('rope', 'none')}, 'layers other than RoPE with latent'),
    ({**DEEPSEEK_MOE, 'moe.shared_d_ff': 40}, "a mixture other than DeepSeek-V3's"),
    ({**DEEPSEEK_MOE, 'moe.dense_layers': (1,)}, "a mixture other than DeepSeek-V3's"),
    ({**DEEPSEEK_V2, 'moe.renormalize': True}, "a mixture other than DeepSeek-V3's"),
    ({**DEEPSEEK_V2, 'moe.group_score': 'two_best'}, "a mixture other than DeepSeek-V3's"),
    ({**DEEPSEEK_V2, 'position.rope.layout': 'half'}, "RoPE on the halves with DeepSeek-V2's"),
    ({**DEEPSEEK, 'biases': 'mlp'}, "biases='mlp' .DeepSeek-V3's class has none"),
    ({**DEEPSEEK, 'position.rope.scaling.kind': 'yarn', 'position.rope.scaling.factor': 2.0,
      'position.rope.scaling.original_length': 16, 'position.rope.scaling.ramp': 'index',
      'position.rope.scaling.attention_factor_dims': 'all'},
     "yarn's attention factor on every dimension of q and k .DeepSeek-V3's class")])
def test_a_latent_attention_export_refuses_what_deepseeks_class_lacks(fields, why):
  _assert_llama_export_refused(fields, 'no transformers class computes this model: ' + why)


@pytest.mark.parametrize('fields', [{'moe.choice_bias': True}, {'moe.groups': 2},
                                    {'moe.routed_scale': 2.0}])
def test_llama4s_routing_with_deepseeks_fields_is_refused(fields):
  """Llama 4's class has no choice bias, groups or routed scale: its export refuses them
  rather than writing a model that computes otherwise."""
  _assert_llama_export_refused({**LLAMA4_MOE, **fields, 'moe.num_experts': 4},
                               "no transformers class computes this model: a mixture other than "
                               "Llama 4's")


@pytest.mark.parametrize('arg,fields,why', [
    ('llama', dict(ARCEE, biases='qkv'), "biases='qkv' in an Arcee block"),
    ('llama', dict(ARCEE, layer_windows=(8,)), 'sliding windows in an Arcee block'),
    ('llama', dict(ARCEE, **{'position.rope.fraction': 0.5}), 'RoPE on part of the layers or '
                                                              'of each head in an Arcee block'),
    ('rope', dict(NEMOTRON, layer_windows=(8,)), 'sliding windows in a Nemotron block'),
    ('rope', dict(NEMOTRON, biases='qkv'), "biases='qkv' in a Nemotron block"),
    # QK-norm as a class computes it, or refused naming the block.
    ('rope', dict(PHI, **QK_LAYER_NORM), "attention.qk_norm (qk_norm_eps=1e-06, "
                                         "qk_norm_over='head', qk_norm_type='layer_norm', "
                                         "qk_norm_bias=False, qk_norm_scale=True, "
                                         "qk_norm_layers='all') in a Phi block"),
    ('rope', dict(PHI_QK, head_dim=12), 'QK-norm with heads of width head_dim=12 in a Phi block '
                                        '(one LayerNorm before both parallel branches), whose '
                                        'q_layernorm and k_layernorm are d_model / num_heads = 8 '
                                        'wide'),
    ('llama', dict(STABLELM_QK, **{'attention.qk_norm_over': 'head'}),
     "attention.qk_norm (qk_norm_eps=1e-05, qk_norm_over='head', qk_norm_type='layer_norm', "
     "qk_norm_bias=False, qk_norm_scale=True, qk_norm_layers='all') in a StableLM block"),
    ('llama', {**COHERE_QK, 'attention.qk_norm_type': 'rms_norm'},
     "attention.qk_norm (qk_norm_eps=1e-05, qk_norm_over='each_head', qk_norm_type='rms_norm', "
     "qk_norm_bias=False, qk_norm_scale=True, qk_norm_layers='all') in a Cohere block"),
    ('llama', {**COHERE2, **QK_LAYER_NORM, 'attention.qk_norm_over': 'each_head',
               'attention.qk_norm_eps': 1e-5}, 'attention.qk_norm in a Cohere block'),  # Cohere 2.
    ('llama', {'attention.qk_norm': True, 'attention.qk_norm_over': 'each_head',
               'attention.qk_norm_eps': 1e-5}, 'attention.qk_norm in a Qwen3ForCausalLM block')])
def test_an_export_refuses_what_its_blocks_class_lacks(arg, fields, why, tmp_path):
  config = test_config.get_config(arg)
  kinds.set_fields(config.model, fields)
  workdir = _workdir(config, tmp_path / 'w', checkpoint=False)
  with pytest.raises(errors.ConfigError, match='no transformers class computes this model: '
                     + re.escape(why)):
    hf.export_checkpoint(workdir, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def test_an_mpt_export_keeps_a_longer_max_seq_len_of_its_source():
  """max_seq_len is the trained length, or the imported file's where that is longer: past it
  transformers' MPT computes no position."""
  config = test_config.get_config('alibi')
  kinds.set_fields(config.model, MPT)
  ids = {'bos': 1, 'eos': 2, 'pad': None}
  assert hf_export_config.from_config(config, ids)['max_seq_len'] == config.data.seq_len
  assert hf_export_config.from_config(config, ids, {'max_seq_len': 65536})['max_seq_len'] == 65536
  assert hf_export_config.from_config(config, ids, {'max_seq_len': 8})['max_seq_len'] == (
      config.data.seq_len)


@pytest.mark.parametrize('windows,bases,pattern', [
    ((8, 0), (1e4, 1e6), 2), ((), (), 1), ((0, 8), (1e6, 1e4), None)])
def test_a_gemma3_export_names_its_layers_for_both_transformers_versions(windows, bases, pattern):
  """layer_types (transformers 5), and sliding_window_pattern where the layers follow one (every
  p-th global; 1: all), which transformers 4 reads alone; no sliding_window without windows
  (the class's default: its mask is built anyway)."""
  config = test_config.get_config('llama')
  kinds.set_fields(config.model, dict(GEMMA3, layer_windows=windows, layer_rope_bases=bases))
  out = hf_export_config.from_config(config, {})
  assert out['layer_types'] == ['sliding_attention' if w else 'full_attention'
                                for w in (windows or (0, 0))]
  assert out.get('sliding_window_pattern') == pattern
  assert out.get('sliding_window') == (max(windows) if windows else None)
  assert (out['rope_theta'], out['rope_local_base_freq']) == (
      (1e6, 1e4) if windows else (config.model.position.rope.base,) * 2)


@pytest.mark.parametrize('bases,theta', [((), 1e4), ((5e5,), 5e5), ((5e5, 5e5), 5e5)])
def test_a_gemma2_export_writes_the_one_base_its_layers_rotate_at(bases, theta):
  """Gemma 2 has one rope_theta: the layers' base, whether position.rope.base or one given to
  every layer by layer_rope_bases; the options' own fields are written beside it."""
  config = test_config.get_config('llama')
  kinds.set_fields(config.model, dict(GEMMA2, layer_rope_bases=bases))
  out = hf_export_config.from_config(config, {})
  assert out['architectures'] == ['Gemma2ForCausalLM'] and out['rope_theta'] == theta
  assert (out['query_pre_attn_scalar'], out['attn_logit_softcapping'],
          out['final_logit_softcapping']) == (20, 1.0, 3.0)


@pytest.mark.parametrize('original_length, seq_len, written', [
    (64, 128, 128),  # Continued from 64 to 128: it stretches to its own length.
    (0, 2048, 16384),  # As imported: seq_len is the length before the stretch.
])
def test_a_linear_exports_the_length_it_stretches_to(original_length, seq_len, written):
  """max_position_embeddings, which lm-evaluation-harness takes as the longest input."""
  config = test_config.get_config('llama')
  config.data.seq_len = seq_len
  config.model.position.rope.scaling.update(kind='linear', original_length=original_length,
                                            factor=written / (original_length or seq_len))
  hf = hf_export_config.from_config(config, {})
  assert hf['max_position_embeddings'] == written
  assert hf['rope_scaling'] == {'rope_type': 'linear',
                                'factor': config.model.position.rope.scaling.factor}


def test_an_export_without_a_tokenizer_says_so_and_how_to_encode(tmp_path, monkeypatch, capsys):
  """A run whose tokenizer has no transformers form (a SentencePiece BPE model, say) exports
  the model alone; the command's output says so, and how to
  get the ids."""
  from scripts import convert_hf  # pylint: disable=import-outside-toplevel
  written = {}
  def export(workdir, hf_dir, step=None):
    os.makedirs(hf_dir)
    written[hf_dir] = workdir, step
    return 'GPTNeoXForCausalLM'
  monkeypatch.setattr(hf, 'export_checkpoint', export)
  out = str(tmp_path / 'out')
  convert_hf.main(['--to_hf', out, '--workdir', 'runs/lm'])
  printed = capsys.readouterr().out
  assert written == {out: ('runs/lm', None)}
  assert "and no tokenizer: the run's has no transformers form" in printed
  assert "hf.load('runs/lm').encode" in printed
  with_tokenizer = str(tmp_path / 'with')  # An export that wrote one says nothing of it.
  monkeypatch.setattr(hf, 'export_checkpoint', lambda workdir, hf_dir, step=None: (
      os.makedirs(hf_dir), open(os.path.join(hf_dir, 'tokenizer.json'), 'w').close(),
      'LlamaForCausalLM')[-1])
  convert_hf.main(['--to_hf', with_tokenizer, '--workdir', 'runs/lm'])
  assert 'and no tokenizer' not in capsys.readouterr().out


@pytest.mark.parametrize('arg,fields', [('rope', {}), ('rope', STARCODER2),
                                        ('rope', dict(STARCODER2, head_dim=12)), ('rope', FALCON),
                                        ('rope', FALCON_SHARED),
                                        ('rope', {'biases': 'none'}), ('learned', {}),
                                        ('alibi', BLOOM),
                                        ('alibi', MPT), ('alibi', MPT_CLIPPED),
                                        ('alibi', MPT_SCALED),
                                        ('llama', {}), ('llama', {'biases': 'mlp'}),
                                        ('llama', OLMO1), ('rope', PHI),
                                        ('rope', GPTJ), ('rope', dict(GPTJ, output_bias=False)),
                                        ('llama', STABLELM), ('llama', STABLELM_PARALLEL),
                                        ('llama', COHERE), ('llama', COHERE2),
                                        ('llama', COHERE2_WINDOWED), ('llama', GRANITE),
                                        ('llama', GRANITE_RESIDUAL),
                                        ('llama', QWEN3),
                                        ('llama', QWEN3_WINDOWS), ('llama', GEMMA3),
                                        ('llama', GEMMA3_SCALED), ('llama', GEMMA3_CAPPED),
                                        ('llama', GEMMA2), ('llama', OLMO2),
                                        ('llama', OLMO3),
                                        ('llama', SMOLLM3), ('llama', PHI3), ('llama', GLM),
                                        ('llama', GLM4), ('llama', GLM_LONGROPE),
                                        ('llama', EXAONE4), ('llama', EXAONE4_GLOBAL),
                                        ('llama', MIXTRAL), ('llama', QWEN2_MOE),
                                        ('llama', QWEN3_MOE), ('llama', OLMOE),
                                        ('llama', ARCEE), ('rope', NEMOTRON),
                                        ('rope', PHI_QK), ('llama', STABLELM_QK),
                                        ('llama', COHERE_QK), ('llama', GPT_OSS),
                                        ('llama', LLAMA4), ('llama', LLAMA4_MOE),
                                        ('llama', LLAMA4_UNCHUNKED),
                                        ('llama', LLAMA4_MAVERICK),
                                        ('llama', QWEN3_MOE_DENSE), ('llama', DEEPSEEK),
                                        ('llama', DEEPSEEK_MOE), ('llama', DEEPSEEK_SCALED),
                                        ('llama', GLM4_MOE), ('llama', DEEPSEEK_V2),
                                        ('llama', MINIMAX_M2)])
def test_transformers_reads_an_export_with_the_same_logits(arg, fields, tmp_path):
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  config = test_config.get_config(arg)
  kinds.set_fields(config.model, fields)
  if (config.model.norm != 'sandwich' and config.model.position.kind == 'rope'
      and config.model.position.rope.scaling.kind == 'none' and not _gptj_block(config.model)):
    config.model.position.rope.scaling.update(kind='llama3', factor=2.0, original_length=16)
  workdir = _workdir(config, tmp_path / 'w')
  hf.export_checkpoint(workdir, str(tmp_path / 'out'))
  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(tmp_path / 'out'), dtype=torch.float32, attn_implementation='eager').eval()
  # transformers' MPT computes no position past max_seq_len, the run's length, nor GPT-J past
  # n_positions.
  length = (config.data.seq_len
            if fields in (MPT, MPT_CLIPPED, MPT_SCALED) or _gptj_block(config.model) else 40)
  ids = np.random.default_rng(0).integers(5, 261, (2, length))
  with torch.no_grad():
    got = model(torch.as_tensor(ids), use_cache=False).logits.numpy()
  assert _relative_error(got, hf.load(workdir).logits(ids)) < 1e-5
