"""A run's tokenizer in transformers' form, written beside an export's weights, so that
transformers (and lm-evaluation-harness through it) encode text into the run's ids.

`write(tokenizer, hf_dir)` writes tokenizer.json and tokenizer_config.json (roformer/hf.py's
export calls it):

- An imported tokenizer goes out as it came (its tokenizer.json, less any truncation and
  padding, which vocabularies turns off), with its bos, eos and pad.
- The bytes tokenizer (vocabularies.Bytes) is a byte-level BPE without merges: byte b is id b + 5.
- A SentencePiece model trained here (roformer/data/tokenizer.py) is the same unigram model in
  the `tokenizers` package's terms: its pieces and scores in its ids; its normalisation (the
  model's own precompiled character map, then spaces stripped at both ends of a line and runs of
  spaces made one, as SentencePiece's `remove_extra_whitespaces` does); a word boundary marked
  with U+2581 and one put before each line (`add_dummy_prefix`); the newline an added token at
  the newline piece's id, so that lines are encoded one by one, as `tokenizer.encode_lines`
  does.
- A SentencePiece model given as `config.data.tokenizer` (vocabularies.SentencePieceFile) is the
  same, its ids moved up by 5 past the project's five, with its own settings: a unigram model,
  or a BPE one (Llama 2's kind) as a `tokenizers` BPE model with merges worked out from its
  pieces (`_merges`); a built-in character map or none, spaces stripped or kept, a dummy prefix
  or none, bytes for unknown characters or not; its user-defined pieces (Mistral's [REF]) as
  SentencePiece takes them (`_user_defined_pieces`). A model of another kind (char, word), with
  whitespace as a suffix, with normalisation or denormalisation rules of its own (a TSV), or with
  user-defined pieces beside a character map or merges that miss a piece, has no form.
- A tokenizer.json given as `config.data.tokenizer` (vocabularies.HuggingFace) keeps its
  pipeline and model (BPE, WordPiece, WordLevel or Unigram), its ids moved up by 5 past the
  project's five.

In the two given forms, ids 0..4 hold the project's pad, eos, bos, unk and newline, named as the
project names them unless the tokenizer has a token of that name (`<s>`, say), whose id stays
its own: then the project's is marked `<s|roformer>`; a given tokenizer.json, like an imported
one, goes out without its truncation and padding. `tests/test_hf_tokenizers.py` checks the
ids against the project's tokenizers on text with newlines, runs of spaces, tabs, empty lines,
compatibility characters and unknown characters, for models of several settings.

Every project-framed form goes out with a post-processor that puts the project's bos first, as
the data pipeline framed every document in training (`add_special_tokens=True`, transformers'
default; lm-evaluation-harness asks for it with `add_bos_token=True`); a given tokenizer.json's
own template (a BERT's [CLS] and [SEP]) is dropped, as training never added it.

Where these forms differ from the project's tokenizers:
- The project's special tokens and a SentencePiece model's own control pieces (`<s>` of a
  model given) are transformers special tokens, and tokens of the model: text that spells one
  out is read as it, and so is text that the normalisation turns into one (a fullwidth
  '＜pad＞' under NFKC, '<PAD>' under case folding or lower-casing), where the project's
  tokenizers read the characters. Text that spells out `<n>` is spelt out, where the trained
  model reads the newline piece.
- An unknown character decodes as nothing with `skip_special_tokens=True`, where SentencePiece
  gives ' ⁇ '. A run of byte pieces that is not UTF-8 (which encoding never gives) decodes as
  U+FFFD for each byte, where SentencePiece keeps the characters it holds.
- Ids that mix the project's special ids with a given tokenizer.json's own special tokens
  decode with both (`skip_special_tokens=False`) or neither, where the project's decoding drops
  its own and keeps the file's.
- A character that the character map composes with the one before it (a combining mark after
  a character the map rewrites, as in NFD text: 'e' + U+0301 after U+00A0, or Vietnamese letters
  written in NFD; a halfwidth voiced mark, 'ｶﾞ'; conjoining Hangul jamo) can be dropped or kept
  apart: the `tokenizers` package applies the map to whole graphemes (its issues #2116 and
  #2334).

Before a form built here is written, it must encode a few texts (`PROBES`, and texts holding
each piece it matches apart from its model: `_piece_probes`) into the run's ids;
a tokenizer without such a form, or whose form does not, writes nothing: `write` returns False
and scripts/convert_hf.py says so.
"""

import json
import os
import re

import numpy as np

from roformer import files
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies

_SPECIALS = ('<pad>', '</s>', '<s>', '<unk>')  # Ids 0..3 (roformer/data/tokenizer.py).
_WORD = '\u2581'  # SentencePiece's word-boundary mark.
_SHIFT = tokenizer_lib.NUM_SPECIAL  # A given file's id n is n + 5 (vocabularies).


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
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[],
                                                   unk_token=_SPECIALS[tokenizer_lib.UNK_ID]))
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


def _free_names(taken) -> list[str]:
  """The names of the project's ids 0..4 in a shifted form: its own (`<pad>`, `</s>`, `<s>`,
  `<unk>`, `<n>`) where the tokenizer does not use the name for a token of its own, else the
  name marked as the project's (`<s|roformer>`), so that no name stands for two ids."""
  names = []
  for name in (*_SPECIALS, tokenizer_lib.NEWLINE_PIECE):
    while name in taken:
      name = name[:-1] + '|roformer>'
    names.append(name)
  return names


def _sentencepiece_normalizer(norm):
  """SentencePiece's normalisation (`norm`, a NormalizerSpec) in its order: the model's own
  character map (NFKC and its kin; none for `identity`); spaces (ASCII ones only: Strip() would
  take U+0085 as well) dropped from the start and runs of them made one; the dummy prefix, even
  where the line starts with a mark (Metaspace's prefix is not); spaces escaped as marks; then
  every mark at the end dropped, a literal U+2581 or the prefix included."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import normalizers  # pylint: disable=g-import-not-at-top
  steps = []
  if norm.precompiled_charsmap:
    steps.append(normalizers.Precompiled(norm.precompiled_charsmap))
  if norm.remove_extra_whitespaces:
    steps += [normalizers.Replace(tokenizers.Regex(r'\A +'), ''),
              normalizers.Replace(tokenizers.Regex(' {2,}'), ' ')]
  if norm.add_dummy_prefix:
    steps.append(normalizers.Prepend(_WORD))
  steps.append(normalizers.Replace(' ', _WORD))
  if norm.remove_extra_whitespaces:
    steps.append(normalizers.Replace(tokenizers.Regex(f'{_WORD}+\\z'), ''))
  return normalizers.Sequence(steps)


def _sentencepiece_decoder(norm, byte_fallback: bool):
  """Marks back to spaces, byte pieces back to bytes; then the spaces SentencePiece drops from a
  line's start as it decodes line by line: every one where it strips spaces, the dummy
  prefix's one where it only adds it."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders  # pylint: disable=g-import-not-at-top
  steps = [decoders.Replace(_WORD, ' ')]
  if byte_fallback:
    steps.append(decoders.ByteFallback())
  steps.append(decoders.Fuse())
  if norm.remove_extra_whitespaces:
    steps.append(decoders.Replace(tokenizers.Regex('(?m)^ +'), ''))
  elif norm.add_dummy_prefix:
    steps.append(decoders.Replace(tokenizers.Regex('(?m)^ '), ''))
  return decoders.Sequence(steps)


def _merges(proto) -> list[tuple[str, str]]:
  """A SentencePiece BPE model's merges, which it does not store: two pieces merge where their
  concatenation is a piece, in the order of its score (SentencePiece merges the adjacent pair
  whose piece scores highest first)."""
  normal = {p.piece: i for i, p in enumerate(proto.pieces) if p.type == p.NORMAL}
  merges = []
  for piece, i in normal.items():
    for cut in range(1, len(piece)):
      if piece[:cut] in normal and piece[cut:] in normal:
        merges.append((-proto.pieces[i].score, i, cut, piece[:cut], piece[cut:]))
  return [(left, right) for *_, left, right in sorted(merges)]


def _proto(sp):
  """The ModelProto of the loaded SentencePiece model `sp`."""
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(sp.serialized_model_proto())
  return proto


def _user_defined(proto, shift: int) -> list[str]:
  """The user-defined pieces among `proto`'s own (shift 0: the model trained here, past its
  specials and newline piece; shift 5: a given model, all of its pieces)."""
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  user = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
  start = 0 if shift else tokenizer_lib.NUM_SPECIAL
  return [p.piece for p in proto.pieces[start:] if p.type == user]


def _user_defined_pieces(proto, vocab: list, shift: int) -> list:
  """`vocab` ((piece, score) by id, moved up by `shift`) with each user-defined piece at the score
  SentencePiece's unigram search gives it (sentencepiece 0.2.3: 0.1 for each byte past its first,
  above every normal piece's log probability), so that the same search picks the same pieces.

  How SentencePiece takes a user-defined piece (Mistral's [REF]), and how the forms follow it:
  - its normaliser copies a piece found in the text as it is, before the character map; so a
    model with both has no form (a piece whose letters the map would change, or compose with
    a mark after it, is matched there and not after it);
  - a unigram model then searches the line with every piece, user-defined ones at that score;
  - a BPE model freezes each piece, the longest at each place from the left, and merges the
    text between them apart. Its form splits the pieces off first and, as no merge makes them,
    takes a part that is a piece whole (`ignore_merges`): which its merges must do for every
    normal piece, or the form would take a piece that they never reach
    (`_merges_reach_every_piece`).
  An added token matched after normalising is not used: `tokenizers` gives it the mark of the
  dummy prefix or of a space before it."""
  scores = {p: float(np.float32(0.1 * (len(p.encode('utf-8')) - 1)))
            for p in _user_defined(proto, shift)}
  return [(name, scores.get(name, score)) for name, score in vocab]


def _merges_reach_every_piece(proto) -> bool:
  """Whether a SentencePiece BPE model's merges turn each normal piece's text into that piece."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  raw = sentencepiece_model_pb2.ModelProto()
  raw.CopyFrom(proto)
  norm = raw.normalizer_spec  # The model alone: the text as it is, marks included.
  norm.name, norm.precompiled_charsmap = 'identity', b''
  norm.add_dummy_prefix = norm.remove_extra_whitespaces = norm.escape_whitespaces = False
  model = spm.SentencePieceProcessor(model_proto=raw.SerializeToString())
  normal = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
  return all(model.encode(p.piece) == [i] for i, p in enumerate(raw.pieces) if p.type == normal)


def _sentencepiece(sp, shift: int):
  """SentencePiece model `sp` (as loaded) as a `tokenizers` Tokenizer with the project's ids: the
  model trained here (shift 0: its ids 0..4 are the project's specials and the newline piece),
  or a model given as config.data.tokenizer (shift 5: the project's five ids first, then the
  model's own, each moved up by 5). None where the model's settings are not those this form
  reproduces: a unigram or BPE model, without whitespace as a suffix, rules of its own (a
  normalisation or denormalisation TSV), or user-defined pieces it cannot take as SentencePiece
  does (`_user_defined_pieces`)."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  proto = _proto(sp)
  norm, trainer = proto.normalizer_spec, proto.trainer_spec
  piece = sentencepiece_model_pb2.ModelProto.SentencePiece
  if (trainer.model_type not in (trainer.UNIGRAM, trainer.BPE)
      or trainer.treat_whitespace_as_suffix or not norm.escape_whitespaces
      or norm.name == 'user_defined' or proto.denormalizer_spec.precompiled_charsmap
      or (not shift and [p.piece for p in proto.pieces[:tokenizer_lib.NUM_SPECIAL]]
          != [*_SPECIALS, tokenizer_lib.NEWLINE_PIECE])):
    return None
  # The newline's id holds the newline itself, matched as an added token before the rest of
  # the pipeline, so that each line is normalised and encoded on its own (encode_lines).
  vocab = [(p.piece, p.score) for p in proto.pieces]
  if shift:
    reserved = _free_names({p.piece for p in proto.pieces})
    vocab = [(name, 0.0) for name in reserved[:tokenizer_lib.NEWLINE_ID]] + [('\n', 0.0)] + vocab
  else:
    vocab[tokenizer_lib.NEWLINE_ID] = ('\n', vocab[tokenizer_lib.NEWLINE_ID][1])
  unk = shift + [i for i, p in enumerate(proto.pieces) if p.type == piece.UNKNOWN][0]
  user_defined = _user_defined(proto, shift)
  bpe = trainer.model_type == trainer.BPE
  if user_defined and (norm.precompiled_charsmap or (bpe and not _merges_reach_every_piece(proto))):
    return None  # See _user_defined_pieces.
  if not bpe:
    model = tokenizers.models.Unigram(_user_defined_pieces(proto, vocab, shift), unk_id=unk,
                                      byte_fallback=trainer.byte_fallback)
  else:
    model = tokenizers.models.BPE({name: i for i, (name, _) in enumerate(vocab)}, _merges(proto),
                                  unk_token=vocab[unk][0], fuse_unk=True,
                                  byte_fallback=trainer.byte_fallback,
                                  ignore_merges=bool(user_defined))
  tok = tokenizers.Tokenizer(model)
  tok.normalizer = _sentencepiece_normalizer(norm)
  # No pre-tokenizer (but for a BPE model's user-defined pieces): SentencePiece encodes a line
  # whole (its split into words at marks and digits shaped the pieces in training, so no piece
  # crosses one), and a run of unknown characters is one unknown piece across them.
  if user_defined and bpe:
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(
        tokenizers.Regex('|'.join(re.escape(p) for p in sorted(user_defined, key=len,
                                                                reverse=True))), 'isolated')
  tok.decoder = _sentencepiece_decoder(norm, trainer.byte_fallback)
  tok.add_tokens([tokenizers.AddedToken('\n', normalized=False, special=False)])
  specials = reserved[:tokenizer_lib.NEWLINE_ID] if shift else []
  tok.add_special_tokens(specials + [p.piece for p in proto.pieces
                                     if p.type in (piece.CONTROL, piece.UNKNOWN)])
  return tok


def _shifted_json(given):
  """A tokenizer.json given as config.data.tokenizer (vocabularies.HuggingFace) with the
  project's ids: its own five first, then every id of the file moved up by 5, the rest of its
  pipeline as it is."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  spec = json.loads(given.tok.to_str())
  model, added = spec['model'], spec.get('added_tokens') or []
  if isinstance(model['vocab'], dict):  # BPE, WordPiece, WordLevel: token -> id.
    reserved = _free_names(set(model['vocab']) | {a['content'] for a in added})
    model['vocab'] = {**{name: i for i, name in enumerate(reserved)},
                      **{token: i + _SHIFT for token, i in model['vocab'].items()}}
  else:  # Unigram: [token, score] in id order.
    reserved = _free_names({p for p, _ in model['vocab']} | {a['content'] for a in added})
    model['vocab'] = [[name, 0.0] for name in reserved] + model['vocab']
    if model.get('unk_id') is not None:
      model['unk_id'] += _SHIFT
  for token in added:
    token['id'] += _SHIFT
  tok = tokenizers.Tokenizer.from_str(json.dumps(spec))
  tok.add_special_tokens(reserved)
  return tok


def special_ids(tokenizer) -> dict:
  """The bos, eos and pad ids of `tokenizer` as the data pipeline frames documents with them
  (None where it has none)."""
  bos, eos = vocabularies.framing(tokenizer)
  return {'bos': bos[0] if bos else None, 'eos': eos[0] if eos else None,
          'pad': getattr(tokenizer, 'pad_id', tokenizer_lib.PAD_ID)}


# Texts a form built here must encode into the run's ids before it is written (`form`): a
# check, beside the tests, that no setting of a given model escaped the conversion. Lines, runs of
# spaces and tabs, compatibility characters, digits, code, other scripts, a literal mark.
PROBES = ("Shall I compare thee to a summer's day?", '  two  spaces \t a tab\t ',
          'lines\n\nand\n  more\n', 'ｆｕｌｌ ﬁne ① ½', 'x = f(12345) + 0.5  # code',
          'Привет, мир. Γειά σου. 你好，世界。', 'emoji 😀 and \u2581 marks', 'naïve café',
          '\r\n\tend ')


def _piece_probes(pieces, most_joins: int = 2000) -> tuple:
  """Texts that hold each of `pieces` (a model's user-defined pieces or a tokenizer.json's added
  tokens): alone, between words, inside one, twice over, at the start and end of lines, and
  (up to `most_joins`) two that overlap, where one ends as the other starts."""
  joins = [a + b[k:] for a in pieces for b in pieces for k in range(1, min(len(a), len(b)))
           if a != b and a.endswith(b[:k])][:most_joins]
  return tuple(text for t in pieces for text in (t, f'a {t} b', f'x{t}y', t + t, f' {t}\n{t} ')
               ) + tuple(f'x{j} {j}' for j in joins)


def _own_pieces(tokenizer) -> list[str]:
  """The pieces a form matches apart from its model: a SentencePiece model's user-defined ones,
  a tokenizer.json's added tokens that are not special."""
  if isinstance(tokenizer, (tokenizer_lib.Tokenizer, vocabularies.SentencePieceFile)):
    return _user_defined(_proto(tokenizer.sp),
                         0 if isinstance(tokenizer, tokenizer_lib.Tokenizer) else _SHIFT)
  if isinstance(tokenizer, vocabularies.HuggingFace):
    return [t.content for t in tokenizer.tok.get_added_tokens_decoder().values() if not t.special]
  return []


def form(tokenizer):
  """(tokenizers.Tokenizer, its bos/eos/pad ids) for `tokenizer` in transformers' form, or None
  where it has none (see the module docstring) or where the form built encodes one of PROBES
  other than `tokenizer` does."""
  if isinstance(tokenizer, vocabularies.Pretrained):
    return tokenizer.tok, special_ids(tokenizer)
  if isinstance(tokenizer, vocabularies.Bytes):
    tok = _bytes_tokenizer()
  elif isinstance(tokenizer, tokenizer_lib.Tokenizer):
    tok = _sentencepiece(tokenizer.sp, 0)
  elif isinstance(tokenizer, vocabularies.SentencePieceFile):
    tok = _sentencepiece(tokenizer.sp, _SHIFT)
  elif isinstance(tokenizer, vocabularies.HuggingFace):
    tok = _shifted_json(tokenizer)
  else:
    tok = None
  if tok is None or any(tok.encode(text, add_special_tokens=False).ids
                        != [int(i) for i in tokenizer.encode(text)]
                        for text in PROBES + _piece_probes(_own_pieces(tokenizer))):
    return None
  _with_bos(tok, tok.id_to_token(tokenizer_lib.BOS_ID))
  return tok, special_ids(tokenizer)


def _unknown(tok) -> str | None:
  """The token `tok`'s model gives for what it does not know (None where it has none)."""
  model = json.loads(tok.to_str())['model']
  if model.get('type') == 'Unigram':
    return None if model.get('unk_id') is None else model['vocab'][model['unk_id']][0]
  return model.get('unk_token')


def write(tokenizer, hf_dir: str) -> bool:
  """Writes tokenizer.json and tokenizer_config.json for `tokenizer` into `hf_dir`; False (and
  nothing written) where it has no transformers form."""
  made = form(tokenizer)
  if made is None:
    return False
  tok, ids = made
  tok.save(os.path.join(hf_dir, 'tokenizer.json'))
  name = lambda i: None if i is None else tok.id_to_token(i)
  unk = _unknown(tok)
  files.write_json_atomic(os.path.join(hf_dir, 'tokenizer_config.json'), {
      'bos_token': name(ids['bos']), 'eos_token': name(ids['eos']), 'pad_token': name(ids['pad']),
      **({'unk_token': unk} if unk is not None else {}),
      'add_bos_token': ids['bos'] is not None, 'tokenizer_class': 'PreTrainedTokenizerFast',
      # Decoding as the tokenizer.json says (older transformers join ' ,' into ',' otherwise).
      'clean_up_tokenization_spaces': False})
  return True
