"""The shared Transformer stack and the task models built on it.

One stack (multi-head attention + MLP) serves every model; it is parameterized by a position
scheme from `roformer.positions`, whose hooks it calls at fixed points; `roformer.stack` runs the
blocks (a loop, or one scan). LayerNorm is pre-residual
by default (`config.model.norm='pre'`); 'post' gives the BERT/RoFormer layout (LayerNorm after
each residual sum and after the embeddings), which pretrained Hugging Face RoFormer weights need,
and 'sandwich' Gemma's (a norm before each branch and one on its output).
Dropout is functional (an explicit key per call), so a train step stays a pure function of its
inputs.
"""

import copy
import math

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from roformer import attention
from roformer import autodiff
from roformer import blocks
from roformer import errors
from roformer import latent_attention
from roformer import layers
from roformer import model_types
from roformer import positions as positions_lib
from roformer import scanned
from roformer import self_attention
from roformer import stack
from roformer import variables






def _position_shared(cfg, *, causal: bool, rngs: nnx.Rngs) -> positions_lib.Shared:
  """The position scheme's stack-wide module (the config was checked before: resolve.py)."""
  return positions_lib.model_scheme(cfg).Shared(cfg, causal=causal, rngs=rngs)


class EmbeddingModel(nnx.Module):
  """Shared by every model: the token embedding and the output layer, which is the embedding
  transposed (tied, the default) or a matrix of its own (`model.tie_embeddings=False`: Llama,
  GPT-NeoX)."""

  causal = False  # Whether attention is causal: schemes such as t5 and xpos depend on it.
  # Each stack's position Shared module and its blocks, by attribute name: checkpoints written
  # when the per-layer position parameters lived beside the blocks are converted through them.
  stacks = (('position', 'blocks'),)

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    # Plain fields, not the ConfigDict: the module's graph must stay hashable for jit.
    self.d_model, self.num_heads, self.dropout_rate = cfg.d_model, cfg.num_heads, cfg.dropout
    self.num_kv_heads = self_attention.kv_heads(cfg)
    self.head_dim = positions_lib.head_dim(cfg)
    # The key/value cache's (heads, key width, value width).
    self.cache_widths = latent_attention.cache_widths(cfg, self.num_kv_heads)
    self.dtype = jnp.dtype(cfg.dtype)
    self.remat = cfg.remat
    self.scan_layers = bool(cfg.scan_layers)
    self.custom_gradients = bool(cfg.custom_gradients)  # roformer/autodiff.py
    # Positions at which decoding refills its cache (decode.refilling; LongRoPE's switch).
    self.cache_breaks = positions_lib.model_scheme(cfg).cache_breaks(cfg.position)
    # The token embeddings' multiplier at the input (Gemma's sqrt(d_model)); not at the output.
    self.embedding_multiplier = float(cfg.embedding_multiplier)
    # A norm of the token embeddings, before any absolute position is added (BLOOM's
    # word_embeddings_layernorm).
    self.embedding_norm = bool(cfg.embedding_norm)
    if self.embedding_norm:
      self.embed_norm = layers.norm(cfg, dtype=self.dtype, rngs=rngs)
    # > 0: the logits l become c tanh(l / c) (Gemma 2's final_logit_softcapping).
    self.logits_softcap = float(cfg.logits_softcap)
    std = layers.embedding_std(cfg)
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, dtype=self.dtype, rngs=rngs,
                           embedding_init=variables.init(nnx.initializers.normal(stddev=std),
                                                         ('vocab', 'embed'), decay=True))
    self.tied = bool(cfg.tie_embeddings)
    # The tied output layer's own scale (the initialisation's), and the logits' multiplier
    # (Cohere's logit_scale): `logits_scale` is their product.
    self.tied_scale = layers.tied_logits_scale(cfg) if self.tied else 1.0
    self.logits_scale = self.tied_scale * float(cfg.logits_multiplier)
    if not self.tied:  # [vocab, d_model] like the embedding (and Hugging Face's lm_head).
      out_std = std if layers.init_name(cfg) == 'normal' else cfg.d_model ** -0.5
      self.unembed = variables.param(
          jax.random.normal(rngs.params(), (cfg.vocab_size, cfg.d_model), jnp.float32) * out_std,
          ('vocab', 'embed'), decay=True)

  def embed_tokens(self, tokens) -> jax.Array:
    """The input embeddings [..., d_model] of integer tokens, times `model.embedding_multiplier`
    in the activation dtype (as Gemma multiplies them), then normalised where
    `model.embedding_norm` (as BLOOM does)."""
    x = self.embed(tokens)
    if self.embedding_multiplier != 1.0:
      x = x * jnp.asarray(self.embedding_multiplier, x.dtype)
    return self.embed_norm(x) if self.embedding_norm else x

  def readout(self) -> jax.Array:
    """The output layer's matrix [vocab, d_model] (float32 parameters), before its scale
    `logits_scale`: the logits are hidden @ readout().T * logits_scale (+ a bias), then capped
    where `logits_softcap` > 0."""
    return self.embed.embedding[...] if self.tied else self.unembed[...]

  def logits(self, hidden, bias=None):
    """The output layer: float32 logits [..., vocab] of hidden states [..., d_model], plus a
    float32 `bias` [vocab] (the masked LM's), soft-capped where `model.logits_softcap` > 0."""
    if self.tied:
      logits = self.embed.attend(hidden)
    else:
      logits = jnp.dot(hidden.astype(self.dtype), self.unembed[...].astype(self.dtype).T)
    if self.logits_scale != 1.0:
      logits = logits * jnp.asarray(self.logits_scale, logits.dtype)
    logits = logits.astype(jnp.float32)
    if bias is not None:
      logits = logits + bias
    return attention.soft_capped(logits, self.logits_softcap)


class Transformer(EmbeddingModel):
  """Token embedding (plus token-type embedding if `type_vocab_size` > 0), position scheme, a
  stack of blocks and a LayerNorm: after the stack (pre-norm) or after the embeddings
  (post-norm, where every block ends in one)."""

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    dtype = self.dtype
    self.post_norm = cfg.norm == 'post'
    if cfg.type_vocab_size:
      self.token_type = nnx.Embed(
          cfg.type_vocab_size, cfg.d_model, dtype=dtype, rngs=rngs,
          embedding_init=variables.init(nnx.initializers.normal(stddev=0.02), (None, 'embed'),
                                        decay=True))
    # The scheme's stack-wide module (embedding, shared parameters); each block has its own.
    self.position = _position_shared(cfg, causal=self.causal, rngs=rngs)
    if self.post_norm:
      self.ln_embed = layers.norm(cfg, dtype=dtype, rngs=rngs)
    self.blocks = stack.build(
        lambda i, rngs: blocks.Block(
            positions_lib.layer_config(cfg, i), dtype=dtype, rngs=rngs, causal=self.causal,
            window=self_attention.layer_window(cfg, i),
            chunk=self_attention.layer_chunk(cfg, i), layer=i),
        cfg.num_layers, self.scan_layers, rngs)
    if not self.post_norm:
      self.ln_final = layers.norm(cfg, dtype=dtype, rngs=rngs)

  @autodiff.applying
  def encode(self, tokens, positions, mask, key=None, cache=None, token_types=None,
             segments=None):
    """Hidden states [batch, len, d_model] for integer tokens and positions [batch, len]
    (and token types, for models with a token-type embedding; default all 0).

    With a `cache` (from `init_cache`), tokens are appended at slot cache['index'] and attend
    to every cached slot through `mask`; returns (hidden, updated cache) then.
    """
    keys = layers.split_key(key, len(self.blocks) + 1)
    x = self.embed_tokens(tokens)
    if hasattr(self, 'token_type'):
      x = x + self.token_type(jnp.zeros_like(tokens) if token_types is None else token_types)
    x = self.position.embed(x, positions)
    if self.post_norm:
      x = self.ln_embed(x)
    x = layers.dropout(x, self.dropout_rate, keys[-1])
    extra = {} if segments is None else {'segments': segments}
    x, cache = stack.run_blocks(self.blocks, self.position(), x, positions, mask, keys, cache,
                                remat=self.remat, **extra)
    if not self.post_norm:
      x = self.ln_final(x)
    return x if cache is None else (x, cache)

  def init_cache(self, batch: int, max_len: int, rings: bool = True) -> dict:
    """An empty key/value cache of `max_len` slots (stack.empty_cache)."""
    return stack.empty_cache(batch, max_len, self.blocks, self.cache_widths, self.dtype, rings)

  def encode_segments(self, tokens, positions, segment_ids, key=None, token_types=None):
    """Bidirectional hidden states where packed segments attend only within themselves
    (the encoder of the masked LM and the classifier)."""
    mask = attention.make_mask(segment_ids, segment_ids, causal=False)
    return self.encode(tokens, positions, mask, key, token_types=token_types,
                       segments=segment_ids)


class CausalLM(Transformer):
  """Decoder-only language model: causal mask plus segment masking for packed documents, and
  a bias of the output layer where `model.output_bias`."""

  causal = True

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    if cfg.output_bias:
      self.output_bias = variables.param(jnp.zeros((cfg.vocab_size,), jnp.float32), ('vocab',),
                                         decay=False)

  def logits(self, hidden, bias=None):
    """The output layer's logits, with its own bias where it has one."""
    if bias is None and hasattr(self, 'output_bias'):
      bias = self.output_bias[...]
    return super().logits(hidden, bias)

  def __call__(self, tokens, positions, segment_ids, key=None):
    return self.logits(self.hidden(tokens, positions, segment_ids, key))

  def hidden(self, tokens, positions, segment_ids, key=None):
    """The final hidden states [batch, len, d_model], before the output layer."""
    mask = attention.make_mask(segment_ids, segment_ids, causal=True)
    return self.encode(tokens, positions, mask, key, segments=segment_ids)

  def decode(self, tokens, positions, cache, last_only: bool = False):
    """Incremental decoding: logits for `tokens` [batch, len] appended to the cache (one
    sequence per row, occupying slots 0..index+len-1) and the updated cache. `last_only`: the
    logits at the last token alone ([batch, 1, vocab]), all that a prompt's prefill needs (the
    whole output layer over a long prompt is [batch, len, vocab]: 4 GiB a row at 8k tokens of
    Llama 3's 128k vocabulary)."""
    hidden, cache = self.encode(tokens, positions, stack.cache_mask(tokens, cache), cache=cache)
    return self.logits(hidden[:, -1:] if last_only else hidden), cache


class MaskedLM(Transformer):
  """Bidirectional encoder with a BERT-style masked-LM head (dense, activation, LayerNorm, then
  the tied embedding plus an output bias). Packed documents attend within their segment."""

  causal = False

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    d = cfg.d_model
    self.activation = cfg.activation
    self.head = layers.dense(d, d, dtype=self.dtype, rngs=rngs)
    self.head_ln = layers.layer_norm(cfg, dtype=self.dtype, rngs=rngs)
    self.output_bias = variables.param(jnp.zeros((cfg.vocab_size,), jnp.float32), ('vocab',),
                                       decay=False)

  def __call__(self, tokens, positions, segment_ids, key=None, token_types=None):
    """Float32 logits [batch, len, vocab] at every position."""
    return self.predict(self.encode_segments(tokens, positions, segment_ids, key, token_types))

  def transform(self, hidden):
    """The masked-LM head's dense layer, activation and LayerNorm, before the tied output."""
    return self.head_ln(layers.ACTIVATIONS[self.activation](self.head(hidden)))

  @autodiff.applying
  def predict(self, hidden):
    """The masked-LM head on encoder states [..., d_model] (any subset of the positions)."""
    return self.logits(self.transform(hidden), self.output_bias.value)


class Classifier(Transformer):
  """Bidirectional encoder with a pooled classification (or, with one output, regression)
  head: the first token's state through a tanh dense layer (BERT's pooler), or the mean over
  the tokens, then dropout and a linear layer. The encoder's parameters have the same names as
  `MaskedLM`'s, so a pretrained encoder loads into it."""

  causal = False

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    d = cfg.d_model
    self.pooling = cfg.pooling
    self.pooler = layers.dense(d, d, dtype=self.dtype, rngs=rngs)
    self.classifier = layers.dense(d, cfg.num_classes, dtype=self.dtype, rngs=rngs)

  @autodiff.applying
  def __call__(self, tokens, positions, segment_ids, key=None, token_types=None):
    """Float32 logits [batch, num_classes] for one example per row (segment id 1, 0 = pad)."""
    k1, k2 = layers.split_key(key, 2)
    hidden = self.encode_segments(tokens, positions, segment_ids, k1, token_types)
    if self.pooling == 'mean':
      weights = (segment_ids > 0).astype(hidden.dtype)[..., None]
      pooled = (hidden * weights).sum(1) / jnp.maximum(weights.sum(1), 1)
    else:
      pooled = hidden[:, 0]
    pooled = layers.dropout(jnp.tanh(self.pooler(pooled)), self.dropout_rate, k2)
    return self.classifier(pooled).astype(jnp.float32)


class EncoderDecoder(EmbeddingModel):
  """Encoder-decoder Transformer for translation: one position scheme configuration applied to
  the encoder (bidirectional) and the decoder (causal) self-attention, separate instances of it
  for each, a shared source/target vocabulary and tied embeddings."""

  causal = True  # The decoder's self-attention; the encoder's is bidirectional.
  stacks = (('encoder_position', 'encoder_blocks'), ('decoder_position', 'decoder_blocks'))

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    dtype = self.dtype
    self.encoder_position = _position_shared(cfg, causal=False, rngs=rngs)
    self.encoder_blocks = stack.build(
        lambda i, rngs: blocks.Block(cfg, dtype=dtype, rngs=rngs, causal=False, layer=i),
        cfg.num_layers, self.scan_layers, rngs)
    self.encoder_ln = layers.norm(cfg, dtype=dtype, rngs=rngs)
    self.decoder_position = _position_shared(cfg, causal=True, rngs=rngs)
    self.decoder_blocks = stack.build(
        lambda i, rngs: blocks.DecoderBlock(cfg, dtype=dtype, rngs=rngs, layer=i),
        cfg.num_layers, self.scan_layers, rngs)
    self.decoder_ln = layers.norm(cfg, dtype=dtype, rngs=rngs)

  @autodiff.applying
  def encode_source(self, tokens, positions, segment_ids, key=None):
    """Encoder states [batch, src_len, d_model]; packed sources attend within their segment."""
    keys = layers.split_key(key, len(self.encoder_blocks) + 1)
    mask = attention.make_mask(segment_ids, segment_ids, causal=False)
    x = self.encoder_position.embed(self.embed_tokens(tokens), positions)
    x = layers.dropout(x, self.dropout_rate, keys[-1])
    x, _ = stack.run_blocks(self.encoder_blocks, self.encoder_position(), x, positions, mask,
                            keys, remat=self.remat, segments=segment_ids)
    return self.encoder_ln(x)

  @autodiff.applying
  def _decode(self, tokens, positions, mask, memory, memory_mask, key=None, cache=None,
              segments=None, last_only: bool = False):
    keys = layers.split_key(key, len(self.decoder_blocks) + 1)
    extra = {} if segments is None else {'segments': segments}
    x = self.decoder_position.embed(self.embed_tokens(tokens), positions)
    x = layers.dropout(x, self.dropout_rate, keys[-1])
    x, cache = stack.run_blocks(self.decoder_blocks, self.decoder_position(), x, positions,
                                mask, keys, cache, remat=self.remat,
                                memory=memory, memory_mask=memory_mask, **extra)
    return self.logits(self.decoder_ln(x[:, -1:] if last_only else x)), cache

  def __call__(self, inputs, inputs_positions, inputs_segment_ids, decoder_inputs,
               targets_positions, targets_segment_ids, key=None):
    """Teacher-forced logits [batch, tgt_len, vocab] for packed source/target pairs: target
    tokens see earlier tokens of their own target and only the source of the same pair."""
    k1, k2 = layers.split_key(key, 2)
    memory = self.encode_source(inputs, inputs_positions, inputs_segment_ids, k1)
    self_mask = attention.make_mask(targets_segment_ids, targets_segment_ids, causal=True)
    cross_mask = attention.make_mask(targets_segment_ids, inputs_segment_ids, causal=False)
    return self._decode(decoder_inputs, targets_positions, self_mask, memory, cross_mask, k2,
                        segments=targets_segment_ids)[0]

  def init_cache(self, memory, memory_segment_ids, max_len: int) -> dict:
    """A decoder cache for one source per row; it carries the encoder memory so that beam
    search reorders it with the keys and values."""
    cache = stack.empty_cache(memory.shape[0], max_len, self.decoder_blocks, self.cache_widths,
                              self.dtype)
    return {**cache, 'memory': memory, 'memory_segment_ids': memory_segment_ids}

  def decode(self, tokens, positions, cache, last_only: bool = False):
    """Incremental decoding of target `tokens` [batch, len] at the cache index; `last_only`:
    the logits of the last token alone ([batch, 1, vocab])."""
    cross_mask = attention.make_mask(jnp.ones_like(tokens), cache['memory_segment_ids'],
                                     causal=False)
    return self._decode(tokens, positions, stack.cache_mask(tokens, cache), cache['memory'],
                        cross_mask, cache=cache, last_only=last_only)


MODELS = {'causal_lm': CausalLM, 'encoder_decoder': EncoderDecoder, 'mlm': MaskedLM,
          'classifier': Classifier}
POOLINGS = ('first', 'mean')


def is_causal(cfg: ml_collections.ConfigDict) -> bool:
  return MODELS[cfg.type].causal


def attention_directions(cfg: ml_collections.ConfigDict) -> tuple[bool, ...]:
  """The causalities of the self-attention stacks of a model type (the position scheme must
  support each): (True,) for the causal LM, (False, True) for the encoder-decoder."""
  return model_types.of(cfg).stacks


def create(cfg: ml_collections.ConfigDict, *, seed: int | jax.Array = 0):
  """Builds the model named by `cfg.type` with parameters drawn from `seed` (an int, or the
  key `jax.random.key(seed)` makes: the same parameters)."""
  if cfg.type not in MODELS:
    raise errors.ConfigError(f'config.model.type={cfg.type!r} is unknown. '
                             f'Fix: one of {sorted(MODELS)}.')
  return MODELS[cfg.type](cfg, rngs=nnx.Rngs(params=seed))


def layout(model) -> scanned.Layout | None:
  """How `model`'s (or an abstract model's) stacked blocks map to the per-block paths that
  checkpoints hold, or None when its stacks run as a loop (roformer/scanned.py)."""
  stacks = {name: getattr(model, name) for _, name in model.stacks}
  if not all(isinstance(s, scanned.ScannedBlocks) for s in stacks.values()):
    return None
  return scanned.Layout({name: (len(s), s.period, s.first) for name, s in stacks.items()})


def per_block_config(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`cfg` (config.model) building the same model with its blocks as a loop: the layout that
  checkpoints hold."""
  per_block = copy.deepcopy(cfg)
  with per_block.unlocked():
    per_block.scan_layers = False
  return per_block


def legacy_param_path(cfg: ml_collections.ConfigDict, path: str) -> str:
  """Where a parameter of a checkpoint written under the earlier layout (every per-layer
  position parameter in one module beside the blocks) is in the model `cfg` builds: a
  '/'-joined path, any prefix (params/, opt_state/0/mu/) kept."""
  return positions_lib.legacy_param_path(path, MODELS[cfg.type].stacks, cfg.position)


def parameter_count(params) -> int:
  """Number of scalars in a tree of (abstract or concrete) parameters."""
  return sum(math.prod(p.shape) for p in jax.tree.leaves(params))


def num_parameters(cfg: ml_collections.ConfigDict) -> int:
  """Parameter count of the model `cfg` builds, from shapes only (nothing is allocated)."""
  return parameter_count(nnx.state(nnx.eval_shape(lambda: create(cfg, seed=0)), nnx.Param))

