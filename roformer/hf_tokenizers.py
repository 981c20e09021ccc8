"""A run's tokenizer in transformers' form, written beside an export's weights, so that
transformers (and lm-evaluation-harness through it) encode text into the run's ids.

`write(tokenizer, hf_dir)` writes tokenizer.json and tokenizer_config.json (roformer/hf.py's
export calls it):

- An imported tokenizer goes out as it came (its tokenizer.json), with its bos, eos and pad.
- The bytes tokenizer (vocabularies.Bytes) is a byte-level BPE without merges: byte b is id b + 5.
- A SentencePiece model trained here (roformer/data/tokenizer.py) is the same unigram model in
  the `tokenizers` package's terms: its pieces and scores in its ids; its normalisation (the
  model's own precompiled character map, then spaces stripped at both ends of a line and runs of
  spaces made one, as SentencePiece's `remove_extra_whitespaces` does); a word boundary marked
  with U+2581 and one put before each line (`add_dummy_prefix`); the newline an added token at
  the newline piece's id, so that lines are encoded one by one, as `tokenizer.encode_lines`
  does. `tests/test_hf_tokenizers.py` checks the ids against SentencePiece's on text with
  newlines, runs of spaces, tabs, empty lines, compatibility characters and unknown characters.
  Only a model of the settings `tokenizer.train` uses is written (`_sentencepiece` checks them).

Both of the project's tokenizers go out with a post-processor that puts the bos first, as the
data pipeline framed every document in training (`add_special_tokens=True`, transformers'
default; lm-evaluation-harness asks for it with `add_bos_token=True`).

Where the SentencePiece form differs from SentencePiece itself:
- The special tokens (`<pad>`, `</s>`, `<s>`, `<unk>`) are transformers special tokens: text
  that spells one out is read as it, where SentencePiece spells out the characters; and
  text that spells out `<n>` is spelt out, where SentencePiece reads the newline piece.
- An unknown character decodes as nothing with `skip_special_tokens=True`, where SentencePiece
  gives ' ⁇ '.
- A combining mark after a character that the character map rewrites (decomposed, NFD text:
  'e' + U+0301 after U+00A0, or Vietnamese letters written in NFD) can be dropped or kept
  apart: the `tokenizers` package applies the map to whole graphemes (its issues #2116 and
  #2334). Elsewhere a combining mark is read as SentencePiece reads it.

A tokenizer without such a form (a SentencePiece file or a tokenizer.json given as
`config.data.tokenizer`, whose ids are shifted past the project's specials) writes nothing:
`write` returns False and scripts/convert_hf.py says so.
"""

import os

from roformer import files
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies

_SPECIALS = ('<pad>', '</s>', '<s>', '<unk>')  # Ids 0..3 (roformer/data/tokenizer.py).
_WORD = '\u2581'  # SentencePiece's word-boundary mark.


def _with_bos(tok, bos: str) -> None:
  """Puts `bos` first in every encoding made with special tokens (transformers' default)."""
  from tokenizers import processors  # pylint: disable=g-import-not-at-top
  tok.post_processor = processors.TemplateProcessing(
      single=f'{bos} $A', pair=f'{bos} $A $B', special_tokens=[(bos, tok.token_to_id(bos))])


def _bytes_tokenizer():
  """The bytes tokenizer (vocabularies.Bytes): byte b is id b + 5 after the project's specials,
  each byte its own token (a byte-level BPE without merges)."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  specials = [*_SPECIALS, tokenizer_lib.NEWLINE_PIECE]  # Ids 0..4; the newline is its byte.
  alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet(),
                    key=lambda ch: _BYTE_OF[ch])
  vocab = {name: i for i, name in enumerate(specials)}
  vocab.update({ch: tokenizer_lib.NUM_SPECIAL + _BYTE_OF[ch] for ch in alphabet})
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                          use_regex=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  tok.add_special_tokens(list(_SPECIALS))
  return tok


def _byte_chars() -> dict[str, int]:
  """GPT-2's byte-to-character map (the ByteLevel pre-tokenizer's), inverted."""
  printable = (list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1))
               + list(range(ord('®'), ord('ÿ') + 1)))
  chars, extra = {}, 0
  for b in range(256):
    if b in printable:
      chars[chr(b)] = b
    else:
      chars[chr(256 + extra)] = b
      extra += 1
  return chars


_BYTE_OF = _byte_chars()


def _sentencepiece(trained):
  """The SentencePiece model of `trained` (roformer/data/tokenizer.py's Tokenizer, as loaded) as
  a `tokenizers` Tokenizer with the same ids, or None where its settings are not those this form
  reproduces."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders, normalizers  # pylint: disable=g-import-not-at-top
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(trained.sp.serialized_model_proto())
  norm, trainer = proto.normalizer_spec, proto.trainer_spec
  piece = sentencepiece_model_pb2.ModelProto.SentencePiece
  names = [p.piece for p in proto.pieces]
  if (trainer.model_type != trainer.UNIGRAM or trainer.byte_fallback
      or trainer.treat_whitespace_as_suffix or not trainer.split_by_whitespace
      or not (norm.add_dummy_prefix and norm.remove_extra_whitespaces
              and norm.escape_whitespaces) or not norm.precompiled_charsmap
      or names[:tokenizer_lib.NUM_SPECIAL] != [*_SPECIALS, tokenizer_lib.NEWLINE_PIECE]
      or any(p.type == piece.USER_DEFINED for p in proto.pieces[tokenizer_lib.NUM_SPECIAL:])):
    return None
  # The newline piece becomes the newline itself, matched as an added token before the rest of
  # the pipeline, so that each line is normalised and encoded on its own.
  vocab = [('\n' if i == tokenizer_lib.NEWLINE_ID else p.piece, p.score)
           for i, p in enumerate(proto.pieces)]
  tok = tokenizers.Tokenizer(tokenizers.models.Unigram(vocab, unk_id=tokenizer_lib.UNK_ID,
                                                       byte_fallback=False))
  # SentencePiece strips and joins ASCII spaces only (Strip() would take U+0085 as well).
  tok.normalizer = normalizers.Sequence([
      normalizers.Precompiled(norm.precompiled_charsmap),
      normalizers.Replace(tokenizers.Regex(r'\A +| +\z'), ''),
      normalizers.Replace(tokenizers.Regex(' {2,}'), ' ')])
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(replacement=_WORD,
                                                          prepend_scheme='always', split=True)
  # Marks back to spaces, then the spaces each line begins with dropped (SentencePiece decodes
  # line by line, each without its leading marks).
  tok.decoder = decoders.Sequence([
      decoders.Replace(_WORD, ' '), decoders.Fuse(),
      decoders.Replace(tokenizers.Regex('(?m)^ +'), '')])
  tok.add_tokens([tokenizers.AddedToken('\n', normalized=False, special=False)])
  tok.add_special_tokens(list(_SPECIALS))
  return tok


def special_ids(tokenizer) -> dict:
  """The bos, eos and pad ids of `tokenizer` as the data pipeline frames documents with them
  (None where it has none)."""
  bos, eos = vocabularies.framing(tokenizer)
  return {'bos': bos[0] if bos else None, 'eos': eos[0] if eos else None,
          'pad': getattr(tokenizer, 'pad_id', tokenizer_lib.PAD_ID)}


def form(tokenizer):
  """(tokenizers.Tokenizer, its bos/eos/pad ids) for `tokenizer` in transformers' form, or None
  where it has none (see the module docstring)."""
  if isinstance(tokenizer, vocabularies.Pretrained):
    return tokenizer.tok, special_ids(tokenizer)
  if isinstance(tokenizer, vocabularies.Bytes):
    tok = _bytes_tokenizer()
  elif isinstance(tokenizer, tokenizer_lib.Tokenizer):
    tok = _sentencepiece(tokenizer)
    if tok is None:
      return None
  else:
    return None
  _with_bos(tok, _SPECIALS[tokenizer_lib.BOS_ID])
  return tok, special_ids(tokenizer)


def write(tokenizer, hf_dir: str) -> bool:
  """Writes tokenizer.json and tokenizer_config.json for `tokenizer` into `hf_dir`; False (and
  nothing written) where it has no transformers form."""
  made = form(tokenizer)
  if made is None:
    return False
  tok, ids = made
  tok.save(os.path.join(hf_dir, 'tokenizer.json'))
  name = lambda i: None if i is None else tok.id_to_token(i)
  own = not isinstance(tokenizer, vocabularies.Pretrained)  # Its specials at ids 0..3.
  files.write_json_atomic(os.path.join(hf_dir, 'tokenizer_config.json'), {
      'bos_token': name(ids['bos']), 'eos_token': name(ids['eos']), 'pad_token': name(ids['pad']),
      **({'unk_token': _SPECIALS[tokenizer_lib.UNK_ID]} if own else {}),
      'add_bos_token': ids['bos'] is not None, 'tokenizer_class': 'PreTrainedTokenizerFast',
      # Decoding as the tokenizer.json says (older transformers join ' ,' into ',' otherwise).
      'clean_up_tokenization_spaces': False})
  return True
