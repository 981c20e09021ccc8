"""Makes the Hugging Face fixtures of tests/test_hf_checkpoints.py: tiny random causal LMs saved
by `transformers`, with transformers' own float32 logits and greedy ids beside each.

  python -m venv /tmp/hf && /tmp/hf/bin/pip install torch==2.13.0 transformers==5.24.0
  /tmp/hf/bin/python scripts/make_hf_fixtures.py            # writes tests/data/hf/

Made with transformers 5.24.0 and torch 2.13.0 (CPU); the test suite reads the fixtures without
either. Each fixture is a directory as `save_pretrained` writes it (config.json,
model.safetensors in float16 to keep it small, tokenizer.json and tokenizer_config.json) and
`reference.npz`:
  prompt   int64 [1, 6]; greedy int64 [1, 6 + 14]: greedy decoding from the prompt, each step a
           full forward pass (`use_cache=False`: dynamic NTK then reads every position at the
           current length, as this project computes it; with a cache, transformers keeps the
           keys rotated at the frequencies of the step that cached them)
  ids      int64 [1, 40]: the greedy ids, then random ones, past original_max_position_embeddings
           (16)
  logits   float32 [1, 40, vocab]: transformers' logits for them (eager attention, float32)
Every weight is drawn at random (biases and norm scales too, which transformers initialises to 0
and 1: a mapping that dropped them would go unseen), and a seed is kept only if greedy decoding
never has a top-two gap below 1e-2, so that float rounding cannot flip an id. Some configs are
rewritten in transformers 4's form after saving (`rope_theta` and `rope_scaling`), and their
reference comes from transformers reading that form back.

This script is the only place that imports torch or transformers; it is not run by the tests.
"""

import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import tokenizers
try:
  import torch
  import transformers
except ImportError:
  sys.exit('error: this script needs torch and transformers (pip install torch '
           'transformers==5.24.0); they are not in requirements.txt.')

OUT = pathlib.Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'hf'
ORIGINAL = 16  # original_max_position_embeddings of the scaled fixtures.
LENGTH, PROMPT, NEW = 40, 6, 14
TEXT = """When in the chronicle of wasted time I see descriptions of the fairest wights,
And beauty making beautiful old rhyme in praise of ladies dead and lovely knights,
Then, in the blazon of sweet beauty's best, of hand, of foot, of lip, of eye, of brow,
I see their antique pen would have express'd even such a beauty as you master now.
Shall I compare thee to a summer's day? Thou art more lovely and more temperate."""

def yarn(factor: float, **more) -> dict:
  """rope_parameters of YaRN by `factor` from ORIGINAL positions at base 10,000, with `more`
  of its keys (partial_rotary_factor, beta_fast, mscale, ...)."""
  return {'rope_type': 'yarn', 'factor': factor, 'rope_theta': 10000.0, **more,
          'original_max_position_embeddings': ORIGINAL}


SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=ORIGINAL)

# name: (config class, its fields, transformers 4 form?, tokenizer specials, embedding rows)
FIXTURES = {
    # Llama: grouped-query attention, llama3 scaling, transformers 5's rope_parameters.
    'llama_gqa_llama3': ('LlamaConfig', dict(
        SMALL, num_key_value_heads=2, max_position_embeddings=4 * ORIGINAL,
        rope_parameters={'rope_type': 'llama3', 'rope_theta': 10000.0, 'factor': 4.0,
                         'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                         'original_max_position_embeddings': ORIGINAL}), False, 'llama', 0),
    # Llama with linear scaling written as transformers 4 writes it ('rope_type' key).
    'llama_linear_v4': ('LlamaConfig', dict(
        SMALL, num_key_value_heads=1, rope_parameters={'rope_type': 'linear', 'factor': 2.0,
                                                        'rope_theta': 500.0}),
                        True, 'llama', 0),
    # Llama with dynamic NTK (transformers 5's form).
    'llama_dynamic': ('LlamaConfig', dict(
        SMALL, rope_parameters={'rope_type': 'dynamic', 'factor': 2.0, 'rope_theta': 10000.0}),
                      False, 'llama', 0),
    # Qwen2: q/k/v biases, tied embeddings, YaRN in transformers 4's form ('type' key).
    'qwen2_yarn_v4': ('Qwen2Config', dict(
        SMALL, num_key_value_heads=2, tie_word_embeddings=True, rms_norm_eps=1e-6,
        max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0)), True, 'qwen', 0),
    # Mistral: a sliding window on every layer.
    'mistral_window': ('MistralConfig', dict(
        SMALL, num_key_value_heads=2, sliding_window=8, max_position_embeddings=64,
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000.0}), False, 'llama', 0),
    # Qwen3: QK-norm, heads wider than hidden_size / heads (head_dim 16 for 4 heads of a
    # 32-wide model, as Qwen3-0.6B's 128 for 16 heads of 1024), tied embeddings, YaRN.
    'qwen3_yarn_wide_heads': ('Qwen3Config', dict(
        SMALL, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
        max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0)), False, 'qwen', 0),
    # Gemma 3's text model: sandwich norms (stored as scale - 1), QK-norm, embeddings times
    # sqrt(hidden_size), two windowed layers at base 10k and a global one at 1M, wide heads.
    'gemma3_local_global': ('Gemma3TextConfig', dict(
        SMALL, num_hidden_layers=3, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
        sliding_window=8, max_position_embeddings=64, hidden_activation='gelu_pytorch_tanh',
        layer_types=['sliding_attention', 'sliding_attention', 'full_attention'],
        rope_parameters={'sliding_attention': {'rope_type': 'default', 'rope_theta': 10000.0},
                         'full_attention': {'rope_type': 'default', 'rope_theta': 1e6}}),
                            False, 'llama', 0),
    # Gemma 2 (as transformers 4 wrote it): sandwich norms, embeddings times sqrt(hidden_size),
    # alternate 8-token windows, logits scaled by 1/sqrt(24) for heads 16 wide (as Gemma 2 27B's
    # 1/sqrt(144) for 128), attention and output logits soft-capped at values that bind, and a
    # linear scaling of every layer.
    'gemma2_softcap_scaled': ('Gemma2Config', dict(
        SMALL, num_hidden_layers=3, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
        sliding_window=8, max_position_embeddings=4 * ORIGINAL,
        hidden_activation='gelu_pytorch_tanh', attn_logit_softcapping=2.0,
        final_logit_softcapping=15.0,
        rope_parameters={'rope_type': 'linear', 'factor': 4.0, 'rope_theta': 10000.0}),
                              True, 'llama', 0),
    # Gemma 3 4B-27B's class: Gemma 3's language model with a linear scaling of its global layer
    # alone (factor 4 here, 8 there) inside Gemma3ForConditionalGeneration, beside a vision tower
    # (SigLIP, one tiny layer) that the import leaves out.
    'gemma3_multimodal': ('Gemma3Config', dict(
        text_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
            max_position_embeddings=4 * ORIGINAL, sliding_window_pattern=2,
            rope_parameters={
                'sliding_attention': {'rope_type': 'default', 'rope_theta': 10000.0},
                'full_attention': {'rope_type': 'linear', 'factor': 4.0, 'rope_theta': 1e6}}),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, image_size=28, patch_size=14),
        mm_tokens_per_image=4, max_position_embeddings=4 * ORIGINAL), False, 'llama', 0),
    # OLMo 1 (1.7 and 0724, as transformers 4 wrote them): LayerNorms without parameters, q, k
    # and v clamped to 1 (about half of each clamped), attention biases, grouped-query attention,
    # dynamic NTK.
    'olmo_clip_dynamic_v4': ('OlmoConfig', dict(
        SMALL, num_key_value_heads=2, attention_bias=True, clip_qkv=1.0,
        rope_parameters={'rope_type': 'dynamic', 'factor': 2.0, 'rope_theta': 10000.0}),
                             True, 'neox', 0),
    # OLMo 2: norms on the branches' outputs alone, QK-norm over all heads at once, attention
    # biases, grouped-query attention, YaRN.
    'olmo2_yarn_biases': ('Olmo2Config', dict(
        SMALL, num_key_value_heads=2, attention_bias=True, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0)), False, 'llama', 0),
    # OLMo 3 (its long-context form, as transformers 4 wrote it): 8-token windows on three
    # layers in four, YaRN on the full-attention one alone, OLMo 3's base. (transformers 5.24
    # reads a transformers 4 file's rope_theta into the global layers alone, the sliding ones
    # taking the class's 500,000; at that base both readings agree.)
    'olmo3_window_yarn_v4': ('Olmo3Config', dict(
        SMALL, num_hidden_layers=4, num_key_value_heads=2, sliding_window=8,
        max_position_embeddings=4 * ORIGINAL,
        rope_parameters={'full_attention': {'rope_type': 'yarn', 'factor': 4.0,
                                            'rope_theta': 500000.0, 'attention_factor': 1.2,
                                            'original_max_position_embeddings': ORIGINAL},
                         'sliding_attention': {'rope_type': 'default',
                                               'rope_theta': 500000.0}}),
                             True, 'llama', 0),
    # SmolLM3: a layer without positions (NoPE) between two RoPE ones, an 8-token window on
    # it, tied embeddings, YaRN on the RoPE layers.
    'smollm3_nope_yarn': ('SmolLM3Config', dict(
        SMALL, num_hidden_layers=3, num_key_value_heads=2, no_rope_layers=[1, 0, 1],
        use_sliding_window=True, sliding_window=8, max_position_embeddings=2 * ORIGINAL,
        rope_parameters=yarn(2.0)), False, 'llama', 0),
    # Llama with heads narrower than hidden_size / heads (as Mistral NeMo's 128 for 32 heads of
    # 5120), of a width that is not a power of 2.
    'llama_narrow_heads': ('LlamaConfig', dict(
        SMALL, num_key_value_heads=2, head_dim=6,
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000.0}), False, 'llama', 0),
    # Phi-3: fused q/k/v and gate/up weights, three quarters of each head rotated, a 12-token
    # window on every layer, LongRoPE (Phi-3's own form: rope_scaling with 'type', the original
    # length at the top level, no factor: max_position_embeddings / original gives it).
    'phi3_longrope_partial': ('Phi3Config', dict(
        SMALL, num_key_value_heads=2, partial_rotary_factor=0.75, sliding_window=12,
        max_position_embeddings=4 * ORIGINAL, original_max_position_embeddings=ORIGINAL,
        rope_parameters={'rope_type': 'longrope', 'rope_theta': 10000.0,
                         'short_factor': [1.0, 1.25, 2.0], 'long_factor': [1.5, 3.0, 7.5]}),
                              True, 'llama', 0),
    # GPT-NeoX with YaRN on a quarter of each head: transformers multiplies the rotated
    # dimensions alone by the attention factor.
    'gpt_neox_yarn_partial': ('GPTNeoXConfig', dict(
        SMALL, num_attention_heads=2, use_parallel_residual=True, hidden_act='gelu',
        max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0, partial_rotary_factor=0.25)), False, 'neox', 0),
    # Phi (1, 1.5 and 2, as transformers 4 wrote them): one LayerNorm before both parallel
    # branches, half of each head rotated, biases on every dense layer and on lm_head,
    # grouped-query attention, linear scaling.
    'phi_shared_norm_linear_v4': ('PhiConfig', dict(
        SMALL, num_key_value_heads=2,
        rope_parameters={'rope_type': 'linear', 'factor': 2.0, 'rope_theta': 10000.0,
                         'partial_rotary_factor': 0.5}), True, 'neox', 0),
    # Cohere (Command R, Aya, as transformers 4 wrote them): LayerNorms without a bias shared
    # by parallel branches, RoPE on interleaved pairs, the logits times 0.25, tied embeddings,
    # grouped-query attention, YaRN.
    'cohere_interleaved_yarn_v4': ('CohereConfig', dict(
        SMALL, num_key_value_heads=2, logit_scale=0.25, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0)), True, 'llama', 0),
    # Cohere 2 (Command R7B): two 8-token windowed RoPE layers, then a global one without
    # positions, attention biases.
    'cohere2_window_nope': ('Cohere2Config', dict(
        SMALL, num_hidden_layers=3, num_key_value_heads=2, sliding_window=8, logit_scale=0.5,
        attention_bias=True, max_position_embeddings=64,
        layer_types=['sliding_attention', 'sliding_attention', 'full_attention'],
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000.0}), False, 'llama', 0),
    # Granite 3 (as transformers 4 wrote it): Llama's block with muP's four constants (the
    # embeddings times 6, each branch's output times 0.22, q.k times 1/16 where 1/sqrt(8) is the
    # usual factor, the logits divided by 4), biases on attention and the MLP, tied embeddings,
    # grouped-query attention, linear scaling.
    'granite_multipliers_v4': ('GraniteConfig', dict(
        SMALL, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
        embedding_multiplier=6.0, residual_multiplier=0.22, attention_multiplier=0.0625,
        logits_scaling=4.0, tie_word_embeddings=True, max_position_embeddings=2 * ORIGINAL,
        rope_parameters={'rope_type': 'linear', 'factor': 2.0, 'rope_theta': 10000.0}), True,
                               'llama', 0),
    # StableLM 2 (1.6B's layout): LayerNorms with a gated MLP, q, k and v biases, half of each
    # head rotated (the class's default is a quarter), grouped-query attention, YaRN.
    'stablelm_qkv_bias_yarn': ('StableLmConfig', dict(
        SMALL, num_key_value_heads=2, use_qkv_bias=True, max_position_embeddings=2 * ORIGINAL,
        rope_parameters=yarn(2.0, partial_rotary_factor=0.5)), False, 'neox', 0),
    # GPT-J: one LayerNorm before both parallel branches, RoPE on the interleaved pairs of the
    # first half of each head (rotary_dim 4 of 8), biases on the MLP and lm_head alone, untied.
    'gptj_interleaved_partial': ('GPTJConfig', dict(
        n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_inner=64, n_positions=64), False, 'neox',
                                 0),
    # GLM (GLM-4 9B's layout): RoPE on the interleaved pairs of the first half of each head (the
    # class's default: the file leaves partial_rotary_factor out), q, k and v biases, the MLP's
    # gate and up in one weight, grouped-query attention, linear scaling; transformers 4's form.
    'glm_interleaved_bias_linear': ('GlmConfig', dict(
        SMALL, head_dim=8, num_key_value_heads=2, max_position_embeddings=2 * ORIGINAL,
        rope_parameters={'rope_type': 'linear', 'factor': 2.0, 'rope_theta': 10000.0}), True,
                                    'qwen', 0),
    # GLM-4 (0414's layout): GLM's block with sandwich norms (RMSNorm's own scales), three
    # quarters of each head rotated, no biases, YaRN.
    'glm4_sandwich_yarn': ('Glm4Config', dict(
        SMALL, head_dim=8, num_key_value_heads=2, attention_bias=False,
        max_position_embeddings=2 * ORIGINAL,
        rope_parameters=yarn(2.0, partial_rotary_factor=0.75)), False, 'qwen', 0),
    # StarCoder 2: the classic block (LayerNorms, a plain MLP with the tanh GELU, biases on every
    # dense layer) with RoPE, grouped-query attention, a 12-token window on every layer, tied
    # embeddings (the class's default), YaRN.
    'starcoder2_window_yarn': ('Starcoder2Config', dict(
        SMALL, num_key_value_heads=2, sliding_window=12, max_position_embeddings=2 * ORIGINAL,
        rope_parameters=yarn(2.0)), False, 'neox', 0),
    # Falcon 7B's layout: one LayerNorm before both parallel branches, multi-query attention (one
    # key/value head), no biases, tied embeddings, dynamic NTK.
    'falcon_multi_query_dynamic': ('FalconConfig', dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=16,
        ffn_hidden_size=64, rope_parameters={'rope_type': 'dynamic', 'factor': 2.0,
                                             'rope_theta': 10000.0}), False, 'neox', 0),
    # Falcon 40B's: new_decoder_architecture, each parallel branch after its own norm, two
    # key/value heads for four, biases (bias true), untied, llama3's scaling.
    'falcon_new_gqa_llama3': ('FalconConfig', dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2,
        new_decoder_architecture=True, bias=True, tie_word_embeddings=False,
        max_position_embeddings=4 * ORIGINAL, rope_parameters={
            'rope_type': 'llama3', 'factor': 4.0, 'rope_theta': 10000.0, 'low_freq_factor': 1.0,
            'high_freq_factor': 4.0, 'original_max_position_embeddings': ORIGINAL}), False,
                              'neox', 0),
    # Falcon's older layout without parallel_attn: the branches one after the other, each after
    # its norm, a key and a value per head (multi_query false), biases, transformers 4's form.
    'falcon_sequential_v4': ('FalconConfig', dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, parallel_attn=False,
        multi_query=False, bias=True, max_position_embeddings=2 * ORIGINAL,
        rope_parameters={'rope_type': 'linear', 'factor': 2.0, 'rope_theta': 10000.0}), True,
                             'neox', 0),
    # EXAONE 4.0 (32B's layout): OLMo 2's output norms with QK-norm over each head, three sliding
    # layers with RoPE and a 12-token window then a global one without positions, grouped-query
    # attention, llama3's scaling.
    'exaone4_hybrid_nope_llama3': ('Exaone4Config', dict(
        SMALL, num_hidden_layers=4, num_key_value_heads=2, sliding_window=12,
        sliding_window_pattern=4, max_position_embeddings=4 * ORIGINAL, rope_parameters={
            'rope_type': 'llama3', 'factor': 4.0, 'rope_theta': 10000.0, 'low_freq_factor': 1.0,
            'high_freq_factor': 4.0, 'original_max_position_embeddings': ORIGINAL}), False,
                                   'neox', 0),
    # Ministral (8B's layout): Mistral's block with a 12-token window on the sliding layers of
    # layer_types and none on the full ones, grouped-query attention, YaRN.
    'ministral_layer_windows_yarn': ('MinistralConfig', dict(
        SMALL, num_hidden_layers=3, num_key_value_heads=2, head_dim=8, sliding_window=12,
        layer_types=['sliding_attention', 'full_attention', 'sliding_attention'],
        max_position_embeddings=2 * ORIGINAL, rope_parameters=yarn(2.0)), False, 'llama', 0),
    # GPT-2: learned absolute positions (a 64-row table), the classic pre-LayerNorm block with
    # Conv1D weights, tied embeddings; saved without the `transformer.` prefix, as the Hub's
    # original GPT-2 files are.
    'gpt2_learned': ('GPT2Config', dict(
        n_embd=32, n_layer=2, n_head=4, n_positions=64, activation_function='gelu_new'),
                     False, 'neox', 0),
    # BLOOM: ALiBi over 6 heads (not a power of 2: the slopes of 4 heads, then 2 of those of 8
    # between them), a LayerNorm of the embeddings, the classic block with GPT-NeoX's head-major
    # query_key_value, tied embeddings; saved without the `transformer.` prefix, as the Hub's
    # BLOOM files are.
    'bloom_alibi': ('BloomConfig', dict(hidden_size=24, n_layer=2, n_head=6), False, 'neox', 0),
    # MPT: ALiBi over 6 heads (not a power of 2: MPT's own ordering of the slopes, which is
    # ALiBi's), LayerNorms without a bias, no biases, the exact GELU, tied embeddings;
    # transformers' MPT computes no position past max_seq_len (64).
    'mpt_alibi': ('MptConfig', dict(d_model=24, n_heads=6, n_layers=2, max_seq_len=64), False,
                  'neox', 0),
    # GPT-NeoX: partial rotary (a quarter of each head), parallel residual, untied, LayerNorm
    # with biases, an embedding padded past the tokenizer (as Pythia's 50,304 rows for 50,277).
    'gpt_neox_partial': ('GPTNeoXConfig', dict(
        SMALL, num_attention_heads=2, use_parallel_residual=True,
        max_position_embeddings=64, hidden_act='gelu',
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000.0,
                         'partial_rotary_factor': 0.25}), False, 'neox', 8),
    # Mixtral: 4 experts, 2 per token with their weights renormalized, an 8-token window on
    # every layer, grouped-query attention, YaRN.
    'mixtral_window_yarn': ('MixtralConfig', dict(
        SMALL, num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=8,
        max_position_embeddings=4 * ORIGINAL, rope_parameters=yarn(4.0)), False, 'llama', 0),
    # Qwen2-MoE (transformers 4's form): the softmax's own weights of 2 of 4 experts 24 wide, a
    # shared expert 48 wide behind its sigmoid gate, q/k/v biases, linear scaling.
    'qwen2_moe_shared_linear_v4': ('Qwen2MoeConfig', dict(
        SMALL, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=24, shared_expert_intermediate_size=48, norm_topk_prob=False,
        rope_parameters={'rope_type': 'linear', 'factor': 2.0, 'rope_theta': 10000.0}), True,
                                   'qwen', 0),
    # Qwen3-MoE (30B-A3B's layout): QK-norm over each head, heads wider than hidden_size / heads,
    # 3 of 6 experts with renormalized weights (norm_topk_prob), llama3 scaling.
    'qwen3_moe_wide_heads_llama3': ('Qwen3MoeConfig', dict(
        SMALL, num_key_value_heads=2, head_dim=16, num_experts=6, num_experts_per_tok=3,
        moe_intermediate_size=24, norm_topk_prob=True, max_position_embeddings=4 * ORIGINAL,
        rope_parameters={'rope_type': 'llama3', 'factor': 4.0, 'rope_theta': 10000.0,
                         'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                         'original_max_position_embeddings': ORIGINAL}), False, 'qwen', 0),
    # OLMoE: Llama's pre-norm block with QK-norm over all heads, 2 of 4 experts with the
    # softmax's own weights, attention biases, dynamic NTK.
    'olmoe_heads_norm_dynamic': ('OlmoeConfig', dict(
        SMALL, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, attention_bias=True,
        rope_parameters={'rope_type': 'dynamic', 'factor': 2.0, 'rope_theta': 10000.0}), False,
                                 'neox', 0),
    # Nemotron (transformers 4's form): LayerNorm1P (the stored scale less 1, with a bias), a
    # plain MLP with squared ReLU, half of each head rotated (the class's default),
    # grouped-query attention, biases on the attention and the MLP, linear scaling.
    'nemotron_layernorm1p_linear_v4': ('NemotronConfig', dict(
        SMALL, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
        rope_parameters={'rope_type': 'linear', 'factor': 2.0, 'rope_theta': 10000.0}), True,
                                       'llama', 0),
    # Arcee (AFM-4.5B's layout): Llama's block with a plain MLP and squared ReLU, YaRN.
    'arcee_relu2_yarn': ('ArceeConfig', dict(
        SMALL, num_key_value_heads=2, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0)), False, 'llama', 0),
    # QK-norm as LayerNorm: Phi's one for all heads with a bias (qk_layernorm), StableLM 2 12B's
    # one per head (qk_layernorm, with its parallel branches after one norm), Command R+'s one per
    # head (use_qk_norm).
    'phi_qk_layernorm': ('PhiConfig', dict(
        SMALL, num_key_value_heads=2, qk_layernorm=True,
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000.0,
                         'partial_rotary_factor': 0.5}), False, 'neox', 0),
    'stablelm_per_head_qk_norm': ('StableLmConfig', dict(
        SMALL, num_key_value_heads=2, qk_layernorm=True, use_parallel_residual=True,
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000.0,
                         'partial_rotary_factor': 0.25}), False, 'neox', 0),
    'cohere_qk_norm': ('CohereConfig', dict(
        SMALL, num_key_value_heads=2, use_qk_norm=True, logit_scale=0.25,
        rope_parameters={'rope_type': 'default', 'rope_theta': 10000.0}), False, 'llama', 0),
    # gpt-oss: sinks in every head's softmax, windows on alternate layers (the even ones),
    # YaRN's unrounded ramp (truncate false; beta_slow 0.25 puts its ends between pairs), q, k,
    # v and o biases, heads wider than hidden_size / heads, 2 of 4 experts with biases and the
    # clamped SwiGLU at a limit that binds; and the same stored as the Hub's checkpoints are,
    # the experts in MXFP4.
    'gpt_oss_sinks_yarn': ('GptOssConfig', dict(
        SMALL, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=8, swiglu_limit=1.0, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0, beta_fast=32.0, beta_slow=0.25, truncate=False)), False,
                                          'neox', 0),
    # Llama 4 (Scout's layout): RoPE on interleaved pairs within 8-token chunks, unscaled
    # QK-norm on the RoPE layer, a layer without positions whose queries' temperature grows from
    # position 3 on (floor_scale 4, attn_scale 0.5), 1 of 4 experts weighted by its sigmoid on
    # its input beside an ungated shared expert, llama3's scaling.
    'llama4_chunks_temperature_llama3': ('Llama4TextConfig', dict(
        SMALL, intermediate_size=24, intermediate_size_mlp=48, num_key_value_heads=2,
        head_dim=16, num_local_experts=4, num_experts_per_tok=1, no_rope_layers=[1, 0],
        attention_chunk_size=8, floor_scale=4, attn_scale=0.5, rms_norm_eps=1e-5,
        max_position_embeddings=4 * ORIGINAL,
        rope_parameters={'rope_type': 'llama3', 'factor': 4.0, 'rope_theta': 10000.0,
                         'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                         'original_max_position_embeddings': ORIGINAL}), False, 'llama', 0),
    # Dense MLPs between the sparse ones: Qwen2-MoE with 4 layers, the mixture on every second
    # (decoder_sparse_step 2) except those in mlp_only_layers (3), so layer 1 alone; the dense
    # layers' own width (intermediate_size 40), a shared expert, YaRN.
    'qwen2_moe_dense_layers_yarn': ('Qwen2MoeConfig', dict(
        SMALL, num_hidden_layers=4, intermediate_size=40, num_key_value_heads=2, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=16,
        decoder_sparse_step=2, mlp_only_layers=[3], norm_topk_prob=True,
        max_position_embeddings=4 * ORIGINAL, rope_parameters=yarn(4.0)), False, 'qwen', 0),
    # Llama 4 Maverick's layout: the mixture on every other layer (interleave_moe_layer_step 2),
    # the others a dense gated MLP intermediate_size_mlp wide; chunked RoPE layers beside a
    # global one without positions, linear scaling.
    'llama4_maverick_interleaved_linear': ('Llama4TextConfig', dict(
        SMALL, num_hidden_layers=4, intermediate_size=24, intermediate_size_mlp=48,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=1,
        interleave_moe_layer_step=2, no_rope_layers=[1, 1, 1, 0], attention_chunk_size=8,
        rms_norm_eps=1e-5, rope_parameters={'rope_type': 'linear', 'factor': 2.0,
                                            'rope_theta': 10000.0}), False, 'llama', 0),
    # DeepSeek-V3: multi-head latent attention (a query latent 16 wide, keys and values from one
    # 12 wide, RoPE on 4 shared key dimensions of interleaved pairs beside 8 per head, values 6
    # wide), YaRN whose mscale_all_dim scales the softmax; a dense first layer, then 3 of 8
    # experts in the best 2 of 4 groups with the choice bias, renormalized and scaled, beside a
    # shared expert.
    'deepseek_v3_mla_yarn': ('DeepseekV3Config', dict(
        SMALL, num_hidden_layers=3, intermediate_size=48, num_key_value_heads=4, q_lora_rank=16,
        kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
        n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
        moe_intermediate_size=16, n_shared_experts=1, routed_scaling_factor=2.5,
        first_k_dense_replace=1, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0, mscale=0.8, mscale_all_dim=1.0)), False, 'llama', 0),
    # DeepSeek-V2 (V2-Lite's layout: queries from one projection): latent attention on
    # interleaved pairs, 3 of 8 experts in the best of 2 groups by its best probability,
    # the probabilities times a routed scale, not renormalized, beside two shared experts, a dense
    # first layer; YaRN with mscale_all_dim.
    'deepseek_v2_groups_yarn': ('DeepseekV2Config', dict(
        SMALL, num_hidden_layers=3, intermediate_size=48, num_key_value_heads=4,
        q_lora_rank=None, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
        n_routed_experts=8, num_experts_per_tok=3, topk_method='group_limited_greedy', n_group=2,
        topk_group=1, moe_intermediate_size=16, n_shared_experts=2, routed_scaling_factor=1.5,
        first_k_dense_replace=1, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0, mscale=1.0, mscale_all_dim=1.0)), False, 'llama', 0),
    # GLM-4.5 (Glm4MoeForCausalLM): grouped-query attention with q, k and v biases and QK-norm
    # over each head, half of each head rotated (the class's default), a dense first layer,
    # then DeepSeek-V3's routing (2 of 8 experts in the best 1 of 2 groups, the choice bias, a
    # routed scale) beside a shared expert; YaRN.
    'glm4_moe_partial_qk_norm_yarn': ('Glm4MoeConfig', dict(
        SMALL, num_hidden_layers=3, intermediate_size=48, num_key_value_heads=2, head_dim=16,
        attention_bias=True, use_qk_norm=True, n_routed_experts=8, num_experts_per_tok=2,
        n_group=2, topk_group=1, moe_intermediate_size=16, n_shared_experts=1,
        routed_scaling_factor=1.5, first_k_dense_replace=1, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0, partial_rotary_factor=0.5)), False, 'llama', 0),
    # Seed-OSS (ByteDance's 512k-token model): Llama's block with biases on q, k and v alone
    # (attention_bias, attention_out_bias false), grouped-query attention, wider heads, YaRN.
    'seed_oss_qkv_bias_yarn': ('SeedOssConfig', dict(
        SMALL, num_key_value_heads=2, head_dim=16, attention_bias=True, attention_out_bias=False,
        max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0)), False, 'llama', 0),
    # MiniMax-M2: Mixtral's experts (2 of 4) chosen by their sigmoid scores plus the choice
    # bias and renormalized, QK-norm over all heads, half of each head rotated (of 16-wide heads),
    # grouped-query attention, YaRN.
    'minimax_m2_partial_qk_norm_yarn': ('MiniMaxM2Config', dict(
        SMALL, intermediate_size=16, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0, partial_rotary_factor=0.5)), False, 'llama', 0),
    # ERNIE 4.5 (0.3B's layout): Llama's block with RoPE on interleaved pairs, a bias on every
    # dense layer (use_bias), tied embeddings, grouped-query attention, 16-wide heads, YaRN.
    'ernie4_5_interleaved_bias_yarn': ('Ernie4_5Config', dict(
        SMALL, num_key_value_heads=2, head_dim=16, use_bias=True, tie_word_embeddings=True,
        max_position_embeddings=4 * ORIGINAL,
        rope_parameters=yarn(4.0)), False, 'llama', 0),
    # Qwen3 stored as the Hub's "-FP8" checkpoints are: every projection of the blocks in e4m3
    # with a scale per 16 x 16 block (whole blocks: transformers' dequantization takes no partial
    # ones), QK-norm, YaRN.
    'qwen3_fp8_blocks': ('Qwen3Config', dict(
        SMALL, intermediate_size=48, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=4 * ORIGINAL, rope_parameters=yarn(4.0)), False, 'qwen', 0),
}
FIXTURES['gpt_oss_mxfp4'] = FIXTURES['gpt_oss_sinks_yarn']
# Llama 4 as the Hub's checkpoints are: the multimodal class (its language model the one above
# with YaRN, whose q and k multiplier the norm after the rotation removes; a tiny vision model
# and projector beside it).
FIXTURES['llama4_multimodal'] = ('Llama4Config', dict(
    text_config=dict(FIXTURES['llama4_chunks_temperature_llama3'][1], rope_parameters=yarn(4.0)),
    vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, image_size=28, patch_size=14, vision_output_dim=16,
                       projector_input_dim=16, projector_output_dim=32),
    boi_token_index=1, eoi_token_index=2, image_token_index=3), False, 'llama', 0)
# The fixtures built as their multimodal class, whose Auto class for causal LMs is the text one.
MULTIMODAL_CLASSES = {'llama4_multimodal': 'Llama4ForConditionalGeneration'}
MXFP4 = ('gpt_oss_mxfp4',)  # Experts stored in MXFP4 (`to_mxfp4`).
FP8 = {'qwen3_fp8_blocks': [16, 16]}  # Projections in block-scaled FP8 (`to_fp8`): the blocks.

SPECIALS = {  # bos, eos, pad as tokenizer_config.json names them (None: the model has none).
    'llama': ('<s>', '</s>', None),
    'qwen': (None, '<|endoftext|>', '<|endoftext|>'),
    'neox': ('<|endoftext|>', '<|endoftext|>', None),
}


def make_tokenizer(vocab_size: int) -> tokenizers.Tokenizer:
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token='<unk>'))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=['<unk>', '<s>', '</s>', '<|endoftext|>'],
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()[:60], show_progress=False)
  tok.train_from_iterator(TEXT.split('\n'), trainer)
  return tok


def randomize(model: torch.nn.Module, seed: int) -> None:
  """Every parameter drawn afresh: matrices N(0, 1/fan_in) (embeddings N(0, 1)), biases
  N(0, 0.1^2), norm scales 1 + N(0, 0.1^2)."""
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=gen)
      if name.endswith('sinks'):  # gpt-oss's sink logits: of the size of the logits.
        p.copy_(noise)
      elif p.ndim == 1 and ('norm' in name or '.ln_' in name):
        p.copy_(1 + 0.1 * noise)
      elif p.ndim == 1:
        p.copy_(0.1 * noise)
      elif ('embed' in name and 'embed_out' not in name) or 'wte' in name:
        p.copy_(noise)
      else:
        p.copy_(noise * p.shape[1] ** -0.5 * 1.5)
    for name, b in model.named_buffers():  # DeepSeek-V3's choice bias, of the scores' size.
      if name.endswith('e_score_correction_bias'):
        b.copy_(0.3 * torch.randn(b.shape, generator=gen))


def greedy(model, prompt: torch.Tensor) -> tuple[np.ndarray, float]:
  """Greedy ids by full passes, and the smallest top-two gap of the logits it chose from."""
  ids, gap = prompt, np.inf
  for _ in range(NEW):
    logits = model(ids, use_cache=False).logits[0, -1]
    top = torch.topk(logits, 2).values
    gap = min(gap, float(top[0] - top[1]))
    ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
  return ids.numpy(), gap


def to_v4(config_path: pathlib.Path) -> None:
  """config.json rewritten as transformers 4 wrote it: rope_theta at the top level and the
  scaling in rope_scaling, keyed by 'type' (Qwen2's and Phi-3's form) or 'rope_type'
  (Llama's); Phi's and Phi-3's partial rotary, and Phi-3's original length, at the top level;
  GLM's partial rotary left out (the class's default)."""
  config = json.loads(config_path.read_text())
  params = dict(config.pop('rope_parameters'))
  if 'full_attention' in params:  # OLMo 3: the global layers' scaling, one base for all.
    params = dict(params['full_attention'])
    config.pop('layer_types')  # Every fourth layer global, as the class assumes without it.
  config['rope_theta'] = params.pop('rope_theta')
  kind = params.pop('rope_type')
  key = 'type' if config['model_type'] in ('qwen2', 'phi3') else 'rope_type'
  if config['model_type'] in ('phi', 'phi3'):
    config['partial_rotary_factor'] = params.pop('partial_rotary_factor', 1.0)
  if config['model_type'] == 'phi3':
    config['original_max_position_embeddings'] = params.pop('original_max_position_embeddings')
  if config['model_type'] == 'glm':  # Left out: GlmConfig's default (0.5) rotates that part.
    assert params.pop('partial_rotary_factor') == 0.5
  config['rope_scaling'] = {key: kind, **params} if kind != 'default' else None
  config['transformers_version'] = '4.57.6'
  config_path.write_text(json.dumps(config, indent=2) + '\n')


FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """A [E, in, out] weight in MXFP4 as gpt-oss's checkpoints store it: (blocks uint8
  [E, out, in / 32, 16], two E2M1 codes per byte, low nibble first; scales uint8
  [E, out, in / 32], 2^(scale - 127) per group of 32 inputs; the float values they encode)."""
  rows = np.swapaxes(weight, 1, 2)
  groups = rows.reshape(rows.shape[:-1] + (-1, 32)).astype(np.float64)
  exponent = np.ceil(np.log2(np.abs(groups).max(-1) / 6.0))
  codes = np.abs(groups[..., None] / np.exp2(exponent)[..., None, None] - FP4).argmin(-1)
  values = FP4[codes] * np.exp2(exponent)[..., None]
  blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
  decoded = np.swapaxes(values.reshape(rows.shape), 1, 2)
  return blocks, (exponent + 127).astype(np.uint8), decoded


def quantize_experts(model) -> None:
  """Each expert matrix of a gpt-oss model set to the value its MXFP4 form encodes."""
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith(('experts.gate_up_proj', 'experts.down_proj')):
        p.copy_(torch.as_tensor(mxfp4(p.float().numpy())[2], dtype=p.dtype))


def to_mxfp4(directory: pathlib.Path) -> None:
  """The saved experts' matrices rewritten as MXFP4 blocks and scales, and config.json's
  quantization_config as the Hub's gpt-oss checkpoints have it."""
  from safetensors import torch as safetensors_torch  # pylint: disable=g-import-not-at-top
  path = directory / 'model.safetensors'
  tensors = safetensors_torch.load_file(str(path))
  for name in [n for n in tensors if n.endswith(('experts.gate_up_proj', 'experts.down_proj'))]:
    blocks, scales, decoded = mxfp4(tensors.pop(name).float().numpy())
    tensors[name + '_blocks'] = torch.as_tensor(np.ascontiguousarray(blocks))
    tensors[name + '_scales'] = torch.as_tensor(np.ascontiguousarray(scales))
  safetensors_torch.save_file(tensors, str(path), metadata={'format': 'pt'})
  config = json.loads((directory / 'config.json').read_text())
  config['quantization_config'] = {'quant_method': 'mxfp4', 'modules_to_not_convert': [
      'model.layers.*.self_attn', 'model.layers.*.mlp.router', 'model.embed_tokens', 'lm_head']}
  (directory / 'config.json').write_text(json.dumps(config, indent=2) + '\n')


def to_fp8(directory: pathlib.Path, block: list) -> None:
  """Every projection matrix of the blocks (`*_proj.weight`) rewritten in e4m3 with a float32
  scale per block (`weight_scale_inv`: the block's largest magnitude over 448, e4m3's largest),
  and config.json's quantization_config as transformers' fine-grained FP8 writes it."""
  from safetensors import torch as safetensors_torch  # pylint: disable=g-import-not-at-top
  path = directory / 'model.safetensors'
  tensors = safetensors_torch.load_file(str(path))
  for name in [n for n in tensors if n.endswith('_proj.weight')]:
    weight = tensors[name].float()
    rows, cols = weight.shape
    grid = (-(-rows // block[0]), -(-cols // block[1]))
    padded = torch.zeros(grid[0] * block[0], grid[1] * block[1])
    padded[:rows, :cols] = weight
    blocks = padded.reshape(grid[0], block[0], grid[1], block[1])
    scale = blocks.abs().amax(dim=(1, 3)) / 448.0
    grown = scale.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :cols]
    tensors[name] = (weight / grown).to(torch.float8_e4m3fn)
    tensors[name + '_scale_inv'] = scale.contiguous()
  safetensors_torch.save_file(tensors, str(path), metadata={'format': 'pt'})
  config_path = directory / 'config.json'
  config = json.loads(config_path.read_text())
  config['quantization_config'] = {'quant_method': 'fp8', 'activation_scheme': 'dynamic',
                                   'weight_block_size': block}
  config_path.write_text(json.dumps(config, indent=2) + '\n')


def unprefixed(path: pathlib.Path) -> None:
  """GPT-2's or BLOOM's weights renamed as the Hub's original files name them, without
  `transformer.`."""
  from safetensors import torch as safetensors_torch  # pylint: disable=g-import-not-at-top
  tensors = safetensors_torch.load_file(str(path))
  safetensors_torch.save_file({k.removeprefix('transformer.'): v for k, v in tensors.items()},
                              str(path), metadata={'format': 'pt'})


def make(name: str, cls_name: str, fields: dict, v4: bool, specials: str, padding: int,
         tok: tokenizers.Tokenizer) -> None:
  bos, eos, pad = SPECIALS[specials]
  ids_of = lambda t: None if t is None else tok.token_to_id(t)
  vocab = tok.get_vocab_size() + padding
  ids = dict(vocab_size=vocab, bos_token_id=ids_of(bos), eos_token_id=ids_of(eos),
             pad_token_id=ids_of(pad))
  if 'text_config' in fields:  # A multimodal class: the vocabulary is its language model's.
    fields = dict(fields, text_config=dict(fields['text_config'], **ids))
    ids = {}
  config = getattr(transformers, cls_name)(**ids, **fields)
  config._attn_implementation = 'eager'  # pylint: disable=protected-access
  for seed in range(100):
    torch.manual_seed(seed)
    if name in MULTIMODAL_CLASSES:  # Its Auto class is the language model's alone.
      model = getattr(transformers, MULTIMODAL_CLASSES[name])._from_config(
          config, attn_implementation='eager')
    else:
      model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation='eager')
    randomize(model, seed)
    if name in MXFP4:
      quantize_experts(model)
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
      model.to(torch.float16).save_pretrained(tmp)
      if name in MXFP4:
        to_mxfp4(pathlib.Path(tmp))
      if name in FP8:
        to_fp8(pathlib.Path(tmp), FP8[name])
      if v4:
        to_v4(pathlib.Path(tmp) / 'config.json')
      if cls_name in ('GPT2Config', 'BloomConfig'):
        unprefixed(pathlib.Path(tmp) / 'model.safetensors')
      # The reference is what transformers computes from the stored (float16) weights.
      model = getattr(transformers, MULTIMODAL_CLASSES.get(
          name, 'AutoModelForCausalLM')).from_pretrained(
          tmp, dtype=torch.float32, attn_implementation='eager').eval()
      if name in MULTIMODAL_CLASSES:
        # On text alone the class runs its language model, whose logits it returns; transformers
        # 5.24's Llama4ForConditionalGeneration.forward then fails (it reads `image_outputs`,
        # which that output lacks), so the language model computes the reference.
        model = model.language_model
      rng = np.random.default_rng(seed)
      ids = torch.as_tensor(rng.integers(4, tok.get_vocab_size(), (1, LENGTH)))
      prompt = ids[:, :PROMPT]
      with torch.no_grad():
        out, gap = greedy(model, prompt)
        # The row starts with the greedy ids: a causal full pass over it predicts each of
        # them from its prefix, as greedy decoding by full passes does.
        ids = torch.cat([torch.as_tensor(out), ids[:, out.shape[1]:]], dim=1)
        logits = model(ids, use_cache=False).logits.numpy()
      if gap < 1e-2:
        continue
      target = OUT / name
      shutil.rmtree(target, ignore_errors=True)
      shutil.copytree(tmp, target)
    tok.save(str(target / 'tokenizer.json'))
    (target / 'tokenizer_config.json').write_text(json.dumps({
        'bos_token': bos, 'eos_token': eos, 'pad_token': pad, 'unk_token': '<unk>',
        'add_bos_token': bos is not None,
        'model_max_length': fields.get('max_position_embeddings', fields.get(
            'n_positions', fields.get('max_seq_len'))),
        'tokenizer_class': 'PreTrainedTokenizerFast'}, indent=2) + '\n')
    (target / 'generation_config.json').unlink(missing_ok=True)
    np.savez_compressed(target / 'reference.npz', ids=ids.numpy(), logits=logits,
                        prompt=prompt.numpy(), greedy=out)
    print(f'{name}: seed {seed}, smallest greedy gap {gap:.3f}, '
          f'{sum(f.stat().st_size for f in target.iterdir()) / 1024:.0f} KB')
    return
  raise SystemExit(f'{name}: no seed of 100 gives greedy gaps of 1e-2')


def main(argv):
  names = argv or list(FIXTURES)
  OUT.mkdir(parents=True, exist_ok=True)
  tok = make_tokenizer(96)
  (OUT / 'VERSIONS').write_text(f'transformers {transformers.__version__}\n'
                                f'torch {torch.__version__}\n'
                                f'tokenizers {tokenizers.__version__}\n')
  for name in names:
    make(name, *FIXTURES[name], tok)


if __name__ == '__main__':
  main(sys.argv[1:])
