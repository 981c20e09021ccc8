"""Causal language model on the embedded Shakespeare corpus, sized for a 2-core CPU.

  python train.py --config configs/lm.py --workdir runs/lm
  python train.py --config configs/lm.py:sinusoidal --workdir runs/lm_sin
  python train.py --config configs/lm.py --config.model.position.kind=learned --workdir ...
  python train.py --config configs/lm.py:gemma3 --workdir runs/lm_gemma3   # Gemma 3's layout
  python train.py --config configs/lm.py:llama --workdir runs/lm_llama     # Llama's block
  python train.py --config configs/lm.py:llama,alibi --workdir ...         # ... another scheme
  python train.py --config configs/lm.py:mixtral --workdir runs/lm_mixtral # Mixtral's experts
  python train.py --config configs/lm.py:llama4 --workdir runs/lm_llama4   # Llama 4's iRoPE
  python train.py --config configs/lm.py:gpt_oss --workdir runs/lm_gpt_oss # gpt-oss's sinks
  python train.py --config configs/lm.py:deepseek --workdir runs/lm_ds     # DeepSeek-V3's MLA
"""

import difflib

from configs import base
from roformer import positions


def llama_fields(d_ff: int, num_heads: int) -> dict:
  """The Llama-family block ("Transformer++", the baseline of the FoX and PaTH papers) as model
  fields, at a classic block's sizes: RMSNorm, a SwiGLU MLP, grouped-query attention, no biases,
  an untied output layer and Llama's initialisation. The gated MLP's d_ff is 2/3 of the plain
  one's (three matrices for two: at d_model 256, 522k MLP parameters a layer against 524k),
  rounded to a multiple of 8; half as many key/value heads as query heads."""
  return {'normalization': 'rms_norm', 'layer_norm_eps': 1e-5, 'mlp': 'gated',
          'activation': 'silu', 'd_ff': max(8, round(2 * d_ff / 3 / 8) * 8),
          'num_kv_heads': num_heads // 2 if num_heads % 2 == 0 else 0, 'biases': 'none',
          'tie_embeddings': False, 'init': 'normal'}


def llama(config):
  """`config` with the Llama-family block (`llama_fields`) and RoPE in Llama's half layout (the
  same function as the interleaved one, its pairs in Llama's order, so that the weights export
  without a permutation)."""
  config.model.update(llama_fields(config.model.d_ff, config.model.num_heads))
  if 'rope' in positions.scheme_fields(config.model.position.kind):  # rope, xpos, rope+B.
    config.model.position.rope.layout = 'half'
  return config


def mixtral(config):
  """`config` with Llama's block (`llama`) whose MLP is Mixtral's mixture: 8 gated experts, 2 per
  token with their weights renormalized, each half as wide as Llama's MLP, so that a token's
  MLP computes what the llama preset's does (the same active parameters and model FLOPs, four
  times the MLP parameters); the load-balancing loss at 0.01 (roformer/moe.py)."""
  llama(config)
  config.model.update({'mlp': 'moe', 'd_ff': max(8, round(config.model.d_ff / 2 / 8) * 8)})
  config.model.moe.update({'num_experts': 8, 'experts_per_token': 2, 'renormalize': True})
  return config


BLOCKS = {'llama': llama, 'mixtral': mixtral}  # configs/lm.py:BLOCK or BLOCK,KIND.


def gemma3(config):
  """Gemma 3's layout on the classic block (not Gemma 3's sandwich block, which an imported
  checkpoint has): 5 windowed layers at base 10k, 1 global at 1M, the window fixed in tokens as
  Gemma 3's 1,024 are at any context, here a quarter of the trained length."""
  config.model.position.kind = 'rope'
  config.model.num_layers = 6
  config.model.layer_windows = (config.data.seq_len // 4,) * 5 + (0,)
  config.model.layer_rope_bases = (10_000.0,) * 5 + (1_000_000.0,)
  return config


def llama4(config):
  """Llama 4's attention layout ("iRoPE") on Llama's block (`llama`; its dense MLP): three
  RoPE layers on interleaved pairs attending within chunks, q and k divided by their root mean
  square there (no scale), then a global layer without positions whose queries sharpen with
  the position (the temperature from the chunk's length on, 0.1 as Llama 4's). The chunk is a
  quarter of the trained length, as Llama 4's 8,192 is of the context it pretrained at."""
  llama(config)
  chunk = config.data.seq_len // 4
  config.model.update(num_layers=4, layer_kinds=('rope',) * 3 + ('none',),
                      layer_chunks=(chunk,) * 3 + (0,))
  config.model.position.update(kind='rope')
  config.model.position.rope.layout = 'interleaved'
  config.model.attention.update(
      qk_norm=True, qk_norm_scale=False, qk_norm_layers='rotary', qk_norm_eps=1e-5,
      nope_temperature=True, nope_temperature_floor=chunk, nope_temperature_scale=0.1)
  return config


def gpt_oss(config):
  """gpt-oss's attention layout on Llama's block (`llama`; its dense MLP): a learned sink
  logit per head in every softmax, windows on alternate layers (a quarter of the trained length,
  as its 128 tokens are short beside its 4k pretraining) and biases on q, k, v and o."""
  llama(config)
  config.model.update(layer_windows=(config.data.seq_len // 4, 0), biases='attention')
  config.model.attention.sink_logit = True
  return config


def deepseek(config):
  """DeepSeek-V3's layout on Llama's block (`llama`): multi-head latent attention, keys and
  values from a latent a quarter of d_model wide and queries from one 3/8 of it, RoPE on a
  quarter of each head's query and key dimensions (those every head shares in its key; DeepSeek-V3
  rotates 64 of 192) on interleaved pairs; the first layer dense, the others DeepSeek-V3's
  mixture: 2 of 8 experts chosen by their sigmoid scores plus the choice bias within the best 2
  of 4 groups, renormalized and times 2.5, beside an ungated shared expert, each a third as wide
  as Llama's MLP, so that a token's three experts have about its parameters; the choice bias
  balances the loads as DeepSeek-V3's (moved by 0.001 a step), beside its complementary
  sequence-wise balancing loss at 0.0001 over the normalized sigmoid scores."""
  llama(config)
  m = config.model
  width = m.d_model // m.num_heads
  config.model.update(num_kv_heads=0, mlp='moe', d_ff=max(8, round(m.d_ff / 3 / 8) * 8))
  config.model.mla.update(kv_rank=m.d_model // 4, q_rank=3 * m.d_model // 8,
                          rope_dim=width // 4)
  config.model.position.rope.update(fraction=0.25, layout='interleaved')
  config.model.moe.update(num_experts=8, experts_per_token=2, router='sigmoid',
                          renormalize=True, choice_bias=True, choice_bias_rate=0.001,
                          balance_loss=0.0001, balance_over='sequence',
                          balance_scores='normalized',
                          groups=4, groups_per_token=2, routed_scale=2.5, shared_d_ff=m.d_ff,
                          shared_gate=False,
                          dense_layers=(0,), dense_d_ff=3 * m.d_ff)
  return config


LAYOUTS = {'gemma3': gemma3, 'llama4': llama4, 'gpt_oss': gpt_oss,
           'deepseek': deepseek}  # configs/lm.py:LAYOUT.


def _check_arg(arg: str) -> None:
  """configs/lm.py:ARG is KIND, LAYOUT, BLOCK or BLOCK,KIND; anything else names them."""
  parts = arg.split(',')
  known = positions.kinds() + positions.combined_kinds()
  if (len(parts) == 1 and parts[0] in known + [*BLOCKS, *LAYOUTS]) or (
      len(parts) == 2 and parts[0] in BLOCKS and parts[1] in known):
    return
  names = known + [*BLOCKS, *LAYOUTS]
  close = [] if parts[-1] in names else difflib.get_close_matches(parts[-1], names, n=1)
  raise ValueError(f'configs/lm.py:{arg} is not an argument of this file'
                   + (f' (did you mean {close[0]!r} for {parts[-1]!r}?)' if close else '')
                   + f'. Fix: KIND (a position kind: {", ".join(positions.kinds())}, or A+B '
                   'such as rope+fox), a layout (gemma3, llama4, gpt_oss, deepseek), llama, '
                   'mixtral, or llama,KIND and mixtral,KIND.')


def get_config(position: str = 'rope'):
  config = base.get_config()
  config.model.type = 'causal_lm'
  _check_arg(position or 'rope')
  parts = (position or 'rope').split(',')
  if parts[0] in BLOCKS:
    config.model.position.kind = parts[1] if len(parts) > 1 else 'rope'
    return BLOCKS[parts[0]](config)
  if position in LAYOUTS:
    return LAYOUTS[position](config)
  config.model.position.kind = position or 'rope'
  return config
