"""Causal language model on the embedded Shakespeare corpus, sized for a 2-core CPU.

  python train.py --config configs/lm.py --workdir runs/lm
  python train.py --config configs/lm.py:sinusoidal --workdir runs/lm_sin
  python train.py --config configs/lm.py --config.model.position.kind=learned --workdir ...
  python train.py --config configs/lm.py:gemma3 --workdir runs/lm_gemma3   # Gemma 3's layout
  python train.py --config configs/lm.py:llama --workdir runs/lm_llama     # Llama's block
  python train.py --config configs/lm.py:llama,alibi --workdir ...         # ... another scheme
  python train.py --config configs/lm.py:mixtral --workdir runs/lm_mixtral # Mixtral's experts
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


def _check_arg(arg: str) -> None:
  """configs/lm.py:ARG is KIND, gemma3, BLOCK or BLOCK,KIND; anything else names them."""
  parts = arg.split(',')
  known = positions.kinds() + positions.combined_kinds()
  if (len(parts) == 1 and parts[0] in known + [*BLOCKS, 'gemma3']) or (
      len(parts) == 2 and parts[0] in BLOCKS and parts[1] in known):
    return
  names = known + [*BLOCKS, 'gemma3']
  close = [] if parts[-1] in names else difflib.get_close_matches(parts[-1], names, n=1)
  raise ValueError(f'configs/lm.py:{arg} is not an argument of this file'
                   + (f' (did you mean {close[0]!r} for {parts[-1]!r}?)' if close else '')
                   + f'. Fix: KIND (a position kind: {", ".join(positions.kinds())}, or A+B '
                   'such as rope+fox), gemma3, llama, mixtral, or llama,KIND and mixtral,KIND.')


def get_config(position: str = 'rope'):
  config = base.get_config()
  config.model.type = 'causal_lm'
  _check_arg(position or 'rope')
  parts = (position or 'rope').split(',')
  if parts[0] in BLOCKS:
    config.model.position.kind = parts[1] if len(parts) > 1 else 'rope'
    return BLOCKS[parts[0]](config)
  if position == 'gemma3':  # Gemma 3's layout: 5 windowed layers at base 10k, 1 global at 1M,
    # on the classic block (not Gemma 3's sandwich block, which an imported checkpoint has).
    config.model.position.kind = 'rope'
    config.model.num_layers = 6
    # Fixed in tokens, as Gemma 3's 1,024 are at any context; here a quarter of the 256 trained.
    window = config.data.seq_len // 4
    config.model.layer_windows = (window,) * 5 + (0,)
    config.model.layer_rope_bases = (10_000.0,) * 5 + (1_000_000.0,)
    return config
  config.model.position.kind = position or 'rope'
  return config
