"""Translation (`encoder_decoder`): teacher-forced training on packed source/target pairs, and
beam-search decoding for validation's BLEU."""

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import decode
from roformer import errors
from roformer.data import pipeline
from roformer.data import tokenizer as tokenizer_lib
from roformer.tasks import base
from roformer.tasks import language_modeling

log = logging.getLogger('roformer')


class Translation(language_modeling.LanguageModeling):
  """Teacher-forced translation of packed source/target pairs (`encoder_decoder`); validation
  also decodes with beam search and scores BLEU, and the best-BLEU checkpoint is kept."""

  decodes = True
  best_metric = 'bleu'

  features = ('inputs', 'decoder_inputs', 'targets', 'inputs_segment_ids',
              'decoder_inputs_segment_ids', 'targets_segment_ids', 'inputs_positions',
              'decoder_inputs_positions', 'targets_positions')

  def batches(self, config, source, tokenizer, *, train: bool, seq_len=None, batch_size=None):
    (_, source_key), (_, target_key) = pipeline.text_fields(config.data)
    return pipeline.translation_dataset(
        source, tokenizer, source_key=source_key, target_key=target_key,
        max_len=seq_len or config.data.seq_len, batch_size=base.batch_size(config, batch_size),
        shuffle=train, repeat=train, seed=config.seed, shard_index=jax.process_index(),
        shard_count=jax.process_count())

  def sums(self, model, batch, key=None, label_smoothing: float = 0.0):
    logits = model(batch['inputs'], batch['inputs_positions'], batch['inputs_segment_ids'],
                   batch['decoder_inputs'], batch['targets_positions'],
                   batch['targets_segment_ids'], key)
    weights = (batch['targets_segment_ids'] > 0).astype(jnp.float32)
    return base.token_sums(logits, batch['targets'], weights, label_smoothing)


  def translate(self, graphdef, params, texts, tokenizer, *, max_len: int, beam_size: int = 4,
                alpha: float = 0.6, batch_size: int = 32) -> list[str]:
    """Beam-search translations (detokenized text) of raw source sentences. Sources longer
    than max_len - 1 tokens are cut, as in training, and counted in a warning."""
    if any(not t.strip() for t in texts):
      raise errors.ConfigError('cannot translate an empty source sentence (index '
                               f'{next(i for i, t in enumerate(texts) if not t.strip())}).')
    ids = [tokenizer.encode(t) for t in texts]
    cut = sum(len(x) > max_len - 1 for x in ids)
    if cut:
      log.warning('%d of %d source sentences are longer than %d tokens and were cut.', cut,
                  len(ids), max_len - 1)
    out = []
    for start in range(0, len(ids), batch_size):
      chunk = ids[start:start + batch_size]
      src = np.zeros((batch_size, max_len), np.int32)
      for row, x in enumerate(chunk):
        x = np.append(x[:max_len - 1], tokenizer_lib.EOS_ID)
        src[row, :len(x)] = x
      tokens = np.asarray(_beam_translate(graphdef, params, src, beam_size, alpha, max_len))
      out += [tokenizer.decode(row) for row in tokens[:len(chunk)]]
    return out


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5))
def _beam_translate(graphdef, params, src, beam_size, alpha, max_len):
  return beams(nnx.merge(graphdef, params), src, beam_size, alpha, max_len)[0][:, 0]


def beams(model, src, beam_size: int, alpha: float, max_len: int,
          eos_id: int = tokenizer_lib.EOS_ID):
  """Beam search of each source row of `src` [batch, src_len] (0: padding) through the
  decoder's cache: (tokens [batch, beam_size, max_len - 1] best first, after the bos at
  position 0; scores [batch, beam_size]), as decode.beam_search returns them; a hypothesis
  ends at `eos_id`."""
  segments = (src > 0).astype(jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(src.shape[1]), src.shape)
  memory = model.encode_source(src, positions, segments)
  cache = model.init_cache(memory, segments, max_len)
  bos = jnp.full((src.shape[0], 1), tokenizer_lib.BOS_ID, jnp.int32)

  def decode_fn(tokens, positions, cache):
    logits, cache = model.decode(tokens, positions, cache, last_only=True)
    return logits[:, -1], cache

  logits, cache = decode_fn(bos, jnp.zeros_like(bos), cache)
  # Where the decoder's scheme computes every position anew past a length (LongRoPE), each
  # beam's cache is filled afresh over its prefix there.
  step_fn, refills, cache = decode.refilling(
      decode_fn, lambda cache, slots: model.init_cache(cache['memory'],
                                                       cache['memory_segment_ids'], slots),
      model.cache_breaks,
      jnp.zeros((src.shape[0], max_len), jnp.int32).at[:, 0].set(tokenizer_lib.BOS_ID), cache,
      first_position=1)
  return decode.beam_search(step_fn, logits, cache, jnp.ones((src.shape[0],), jnp.int32),
                            beam_size=beam_size, max_len=max_len - 1, eos_id=eos_id,
                            alpha=alpha, refills=refills)
