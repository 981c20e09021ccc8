"""Analytic model FLOPs of a training step, counted as MaxText does (PaLM's 6N + attention
term, with causal attention counted as half).

A matmul of an [n, a] by [a, b] matrix costs 2nab FLOPs; training costs 3x the forward pass
(forward, gradient with respect to the activations, gradient with respect to the weights).
Counted per token of the input sequence:

  per layer     qkv and output projections  2 * 4 d^2   (2 d (h + 2 g) e + 2 h e d)
                MLP up and down             2 * 2 d f   (gated: 2 * 3 d f; a mixture of
                                            experts: its router, k experts and any shared
                                            one, roformer/moe.py)
                attention scores QK^T, PV   2 * 2 L d   (2 * 2 L h e; half of it when causal;
                                            a sliding window's or chunk's keys alone:
                                            `layer_spans`)
                FAVOR+ instead              2 * 2 m h e (q, k features) + 2 * 2 m h e (sums)
  per token     output layer (tied logits)  2 d V
                masked-LM head dense        2 d^2
  training      3 x the above

The masked LM needs its head and output layer only at the selected tokens: they are counted for
that fraction of the tokens (`predicted_fraction`, config.data.mask_rate), whether the model
computes them there only (the default) or everywhere (config.data.max_predictions=0).

L is the sequence length, d the model width, f the MLP width, V the vocabulary, m the FAVOR+
features per head (summed over heads: m * num_heads columns of e each). In
brackets, the general form: h query heads and g key/value heads (grouped-query attention) of
width e (model.head_dim; h e = d by default). Element-wise
work (LayerNorm, softmax, GELU, the position schemes' rotations and biases) and embedding
lookups are not counted: "model FLOPs" are the same for every position scheme, so a scheme's
extra cost shows up as a lower achieved FLOP rate.
"""

import ml_collections

from roformer import attention_options
from roformer import latent_attention
from roformer import layers
from roformer import model_types
from roformer import positions
from roformer import self_attention

TRAIN_MULTIPLIER = 3  # Forward + two backward matmuls per forward matmul.


def attention_flops_per_token(model_cfg: ml_collections.ConfigDict, seq_len: int,
                              causal: bool) -> float:
  """Forward FLOPs per token of one layer's attention (scores and weighted values): the
  attention kind's, and what its options add there (differential attention's values of twice
  the head width), as roformer/attention_options/ declares them."""
  att = self_attention.attention_config(model_cfg)
  return (attention_options.KINDS[att.kind].flops(model_cfg, seq_len, causal)
          + sum(o.attention_flops(model_cfg, seq_len, causal)
                for o in attention_options.enabled(att)))


def layer_spans(model_cfg: ml_collections.ConfigDict, seq_len: int,
                causal: bool) -> list[tuple[float, bool]]:
  """Each layer's (seq_len, causal) as its attention is counted: (seq_len, causal) where it sees
  every key before its query; where a sliding window W or a chunk C bounds them, the keys a
  query sees on average, counted as a pass over all of them (causal False). In a causal pass of
  L tokens that is W - W^2 / 2L (W < L) and C / 2 (C < L), continuous as causal's L / 2 is;
  a decoding token that attends `seq_len` positions (causal False) sees min(seq_len, W) of them,
  and its chunk's (seq_len - 1) mod C + 1."""
  spans = []
  for layer in range(model_cfg.num_layers):
    window = self_attention.layer_window(model_cfg, layer)
    chunk = self_attention.layer_chunk(model_cfg, layer)
    if causal:
      seen = [seq_len / 2]
      if 0 < window < seq_len:
        seen.append(window - window * window / (2 * seq_len))
      if 0 < chunk < seq_len:
        seen.append(chunk / 2)
      spans.append((float(seq_len), True) if len(seen) == 1 else (min(seen), False))
    else:
      seen = [float(seq_len)]
      if window:
        seen.append(float(window))
      if chunk:
        seen.append((seq_len - 1) % chunk + 1.0)
      spans.append((min(seen), False))
  return spans


def layer_flops_per_token(model_cfg: ml_collections.ConfigDict, seq_len: int,
                          causal: bool) -> float:
  """Forward FLOPs per token of one layer, averaged over the layers: projections, MLP,
  attention over the keys each layer sees (`layer_spans`), and what the attention options add
  beside it (gated attention's W_g, DAPE's MLP on each pair), as declared."""
  d = model_cfg.d_model
  h, g, e = (model_cfg.num_heads, self_attention.kv_heads(model_cfg),
             positions.head_dim(model_cfg))
  att = self_attention.attention_config(model_cfg)
  spans = layer_spans(model_cfg, seq_len, causal)
  attended = sum(attention_flops_per_token(model_cfg, n, c)
                 + sum(o.layer_flops(model_cfg, n, c) for o in attention_options.enabled(att))
                 for n, c in spans) / len(spans)
  mlp = layers.MLPS[model_cfg.mlp].flops(model_cfg)
  projections = (latent_attention.projection_flops(model_cfg)
                 if latent_attention.enabled(model_cfg)
                 else 2 * d * (h + 2 * g) * e + 2 * h * e * d)
  return projections + mlp + attended


def predicted_fraction(config: ml_collections.ConfigDict) -> float:
  """The share of the tokens the output layer runs at, as the model type declares it (a masked
  LM's selection rate); 1 for the others."""
  return model_types.of(config.model).predicted_fraction(config)


def train_flops_per_token(model_cfg: ml_collections.ConfigDict, seq_len: int,
                          predicted_fraction: float = 1.0) -> float:
  """Training FLOPs per input token of the model `model_cfg` builds, as its type declares them
  (roformer/model_types.py: the encoder-decoder's per target token, the masked LM's head for
  `predicted_fraction` of the tokens)."""
  forward = model_types.of(model_cfg).forward_flops(model_cfg, seq_len, predicted_fraction,
                                                    layer_flops_per_token)
  return TRAIN_MULTIPLIER * forward


def decode_flops_per_token(model_cfg: ml_collections.ConfigDict, attended: int) -> float:
  """Forward FLOPs of one new token of a causal LM that attends to `attended` positions (the
  cached ones and its own: the last position of a causal pass), counted as the plain form's
  products: what the model computes, the same for every cache (MLA's absorbed form reaches the
  same outputs through other products)."""
  return model_types.of(model_cfg).forward_flops(
      model_cfg, attended, 1.0, lambda cfg, n, causal: layer_flops_per_token(cfg, n, False))


def prefill_flops_per_token(model_cfg: ml_collections.ConfigDict, prompt_len: int) -> float:
  """Forward FLOPs per token of a causal LM's prefill (decode.causal_lm_start): the causal pass
  over a prompt of `prompt_len` tokens, its output layer at the last token alone."""
  forward = lambda cfg: model_types.of(cfg).forward_flops(
      cfg, prompt_len, 1.0, layer_flops_per_token)
  no_vocab = ml_collections.ConfigDict(model_cfg.to_dict())
  no_vocab.vocab_size = 0
  output = forward(model_cfg) - forward(no_vocab)  # The output layer's, at every token.
  return forward(no_vocab) + output / prompt_len
