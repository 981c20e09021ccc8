"""The project's tokenizers in transformers' form (roformer/hf_tokenizers.py): the same ids as
the tokenizer the model was trained with, the bos first where transformers adds specials."""

import json

import numpy as np
import pytest
import sentencepiece as spm
import tokenizers

from roformer import hf_tokenizers
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies

TRAINING = """Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.
ROMEO: But, soft! what light through yonder window breaks? 1599, 42 ways.
"""

# Newlines (empty lines, a last one, lines of spaces), runs of spaces at both ends and inside,
# tabs and other spaces, compatibility characters that NFKC folds, a combining accent, and
# characters the model never saw (each run of them one unknown).
CASES = ['Shall I compare thee', '  thee   to a  summer  ', 'May,\n\nAnd\n', '\nthy\n   \nshade',
         'tab\there and\u00a0there\u3000too', 'ｆａｉｒ ﬁne ①', 'cafe\u0301 day', '漢字 by chance 漢',
         'emoji 😀😀 breaks', '', ' ', '\n', '\t\n ', 'wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww',
         '\x85the\x85', 'a\r\nb\r', '\u2581thee \u2581', '\u00ad\u200b\ufeffsea', 'a\u0301b',
         TRAINING, TRAINING.replace('\n', ' \n  ')]


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  path = tmp_path_factory.mktemp('spm') / 'tokenizer.model'
  return tokenizer_lib.train([TRAINING * 3], path, vocab_size=120)


# SentencePiece's own settings a model given as config.data.tokenizer may have been trained with
# (its defaults first: unk 0, bos 1, eos 2, NFKC, spaces stripped, a dummy prefix).
GIVEN_SETTINGS = {
    'defaults': {},
    'raw': {'normalization_rule_name': 'identity', 'remove_extra_whitespaces': False,
            'add_dummy_prefix': False},
    'spaces_kept': {'remove_extra_whitespaces': False},
    'no_prefix': {'add_dummy_prefix': False},
    'identity': {'normalization_rule_name': 'identity'},  # U+2581 in text stays U+2581.
    # Llama 2's kind: BPE, bytes for unknown characters, digits one by one, runs of spaces kept
    # and pieces of them allowed.
    'bpe_bytes': {'model_type': 'bpe', 'byte_fallback': True, 'character_coverage': 0.99,
                  'normalization_rule_name': 'identity', 'remove_extra_whitespaces': False,
                  'split_digits': True, 'allow_whitespace_only_pieces': True, 'vocab_size': 400},
    'unigram_across_words': {'byte_fallback': True, 'character_coverage': 0.99,
                             'split_by_whitespace': False, 'vocab_size': 400},
}


def _given_sentencepiece(directory, name: str, **more) -> vocabularies.SentencePieceFile:
  (directory / 'corpus.txt').write_text(TRAINING * 3, encoding='utf-8')
  settings = {'vocab_size': 100, **GIVEN_SETTINGS[name], **more}
  spm.SentencePieceTrainer.train(input=str(directory / 'corpus.txt'),
                                 model_prefix=str(directory / name), hard_vocab_limit=False,
                                 minloglevel=2, **settings)
  return vocabularies.SentencePieceFile(str(directory / f'{name}.model'))


def _bpe():
  """A GPT-2-like byte-level BPE with its own `<s>` and end-of-text, a template that frames
  with them, and padding and truncation switched on."""
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  tok.train_from_iterator([TRAINING] * 3, tokenizers.trainers.BpeTrainer(
      vocab_size=300, special_tokens=['<|endoftext|>', '<s>'],
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
  tok.post_processor = tokenizers.processors.TemplateProcessing(
      single='<s> $A <|endoftext|>',
      special_tokens=[(t, tok.token_to_id(t)) for t in ('<s>', '<|endoftext|>')])
  tok.enable_padding(pad_id=0, pad_token='<|endoftext|>')
  tok.enable_truncation(64)
  return tok


def _wordpiece():
  """A BERT-like WordPiece: lower-cased, [CLS] and [SEP] added by its template."""
  tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token='[UNK]'))
  tok.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
  tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
  tok.decoder = tokenizers.decoders.WordPiece()
  tok.train_from_iterator([TRAINING] * 3, tokenizers.trainers.WordPieceTrainer(
      vocab_size=200, special_tokens=['[PAD]', '[UNK]', '[CLS]', '[SEP]']))
  tok.post_processor = tokenizers.processors.BertProcessing(
      ('[SEP]', tok.token_to_id('[SEP]')), ('[CLS]', tok.token_to_id('[CLS]')))
  return tok


def _unigram():
  """A Unigram model of the `tokenizers` package, with its own `<pad>`, `<unk>` and `<s>`."""
  tok = tokenizers.Tokenizer(tokenizers.models.Unigram())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
  tok.decoder = tokenizers.decoders.Metaspace()
  tok.train_from_iterator([TRAINING] * 3, tokenizers.trainers.UnigramTrainer(
      vocab_size=120, special_tokens=['<pad>', '<unk>', '<s>'], unk_token='<unk>'))
  return tok


def _wordlevel():
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token='<unk>'))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok.train_from_iterator([TRAINING] * 3, tokenizers.trainers.WordLevelTrainer(
      special_tokens=['<unk>', '<n>']))
  return tok


GIVEN_JSON = {'bpe': _bpe, 'wordpiece': _wordpiece, 'unigram': _unigram, 'wordlevel': _wordlevel}


def _given_json(directory, name: str) -> vocabularies.HuggingFace:
  GIVEN_JSON[name]().save(str(directory / f'{name}.json'))
  return vocabularies.HuggingFace(str(directory / f'{name}.json'))


def test_a_sentencepiece_model_trained_here_gives_the_same_ids_and_text(trained):
  tok, ids = hf_tokenizers.form(trained)
  assert ids == {'bos': tokenizer_lib.BOS_ID, 'eos': tokenizer_lib.EOS_ID,
                 'pad': tokenizer_lib.PAD_ID}
  for text in CASES:
    want = [int(i) for i in trained.encode(text)]
    assert tok.encode(text, add_special_tokens=False).ids == want, text
    if tokenizer_lib.UNK_ID not in want:  # SentencePiece decodes an unknown as ' ⁇ '.
      assert tok.decode(want, skip_special_tokens=True) == trained.decode(want), text
  assert tokenizer_lib.UNK_ID in trained.encode('漢字')  # The model does not know them.


def test_ids_that_encoding_never_gives_decode_as_sentencepiece_decodes_them(trained):
  """Generated ids can start a line with word marks or hold an eos: every mark a line starts
  with is dropped, as SentencePiece decodes line by line."""
  tok, _ = hf_tokenizers.form(trained)
  mark, word = trained.sp.piece_to_id('\u2581'), trained.encode('thee')[0]
  rng = np.random.default_rng(0)
  known = [i for i in range(tokenizer_lib.NUM_SPECIAL, trained.vocab_size)]
  sequences = [[mark, word], [tokenizer_lib.NEWLINE_ID, mark, mark, word],
               [mark, tokenizer_lib.EOS_ID, word]] + [
                   list(rng.choice(known + [tokenizer_lib.NEWLINE_ID, tokenizer_lib.EOS_ID], 12))
                   for _ in range(300)]
  for ids in sequences:
    ids = [int(i) for i in ids]
    assert tok.decode(ids, skip_special_tokens=True) == trained.decode(ids), ids


def _assert_same_ids_and_text(tok, given, texts):
  """`tok` (a form of the SentencePiece model `given`) encodes each text into given's ids and
  decodes them to given's text, where they hold no unknown (SentencePiece writes ' ⁇ ')."""
  unk = given.sp.unk_id() + 5
  for text in texts:
    want = [int(i) for i in given.encode(text)]
    assert tok.encode(text, add_special_tokens=False).ids == want, text
    if unk not in want:
      assert tok.decode(want, skip_special_tokens=True) == given.decode(want), text


@pytest.mark.parametrize('name', GIVEN_SETTINGS)
def test_a_sentencepiece_model_given_as_the_tokenizer_gives_the_run_s_ids_and_text(name, tmp_path):
  """Its ids moved up by 5 and lines encoded one by one, as vocabularies.SentencePieceFile
  encodes; its own settings (unigram or BPE, a character map or none, spaces stripped or kept, a
  dummy prefix or none, bytes for unknown characters, digits apart) both ways, ids that encoding
  never gives included (but byte pieces, whose runs could be invalid UTF-8)."""
  given = _given_sentencepiece(tmp_path, name)
  tok, _ = hf_tokenizers.form(given)
  _assert_same_ids_and_text(tok, given, CASES)
  unk = given.sp.unk_id() + 5
  if GIVEN_SETTINGS[name].get('byte_fallback'):
    assert any(given.sp.is_byte(int(i) - 5) for i in given.encode('漢字 😀'))
  rng = np.random.default_rng(0)
  known = [i for i in range(5, given.vocab_size) if i != unk and not given.sp.is_byte(i - 5)]
  for _ in range(300):
    ids = [int(i) for i in rng.choice(known + [tokenizer_lib.NEWLINE_ID, tokenizer_lib.EOS_ID], 12)]
    assert tok.decode(ids, skip_special_tokens=True) == given.decode(ids), ids


# Pieces a model may be given whole (Mistral's [REF]): marks, a word the corpus holds, a letter,
# one with a space inside, one that holds another, and two that overlap ('abc').
USER_DEFINED = ['[INST]', '[/INST]', '<sep>', 'ROMEO', 'I', 'a b', '[INST]x', 'ab', 'bc']


@pytest.mark.parametrize('name', ['raw', 'identity', 'bpe_bytes'])
def test_user_defined_pieces_are_taken_where_sentencepiece_takes_them(name, tmp_path):
  """A unigram model's search takes each user-defined piece at SentencePiece's score for it
  (so of two that overlap, the better split); a BPE model takes the longest at each place from
  the left, inside words too; the text either side is encoded as SentencePiece encodes it."""
  given = _given_sentencepiece(tmp_path, name, user_defined_symbols=USER_DEFINED)
  tok, _ = hf_tokenizers.form(given)
  texts = CASES + ['[INST] Shall I compare thee? [/INST] ROMEO:', 'xROMEOy<sep><sep>\nROMEO',
                   '  [INST]  a b  ', '[INST]x[INST] I', 'abc xabcx abcbc', 'thee \u2581ROMEO']
  _assert_same_ids_and_text(tok, given, texts)
  pieces = {given.sp.piece_to_id(p) + 5: p for p in USER_DEFINED}
  assert [pieces[i] for i in given.encode('a[INST]xROMEOy') if i in pieces] == ['[INST]x',
                                                                                 'ROMEO']


def test_a_unigram_search_scores_a_user_defined_piece_as_sentencepiece_does(tmp_path):
  """sentencepiece 0.2.3's search scores a user-defined piece at 0.1 for each byte past its
  first, not at the 0 the model stores: so 'ab' + 'c' wins over a normal piece 'abc' scored 0.05
  above 'c' there, and in the form, where at 0 it would lose."""
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  given = _given_sentencepiece(tmp_path, 'identity', user_defined_symbols=['ab'])
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(given.sp.serialized_model_proto())
  added = proto.pieces.add()
  added.piece, added.score = 'abc', given.sp.get_score(given.sp.piece_to_id('c')) + 0.05
  (tmp_path / 'abc.model').write_bytes(proto.SerializeToString())
  scored = vocabularies.SentencePieceFile(str(tmp_path / 'abc.model'))
  assert scored.sp.encode('abc', out_type=str)[-2:] == ['ab', 'c']
  _assert_same_ids_and_text(hf_tokenizers.form(scored)[0], scored, ['abc', 'xabc abcab'])


def test_user_defined_pieces_beside_a_character_map_have_no_form(tmp_path):
  """SentencePiece copies a user-defined piece found in the text before its character map
  (NFKC) rewrites the rest, so 'ROMEO' followed by a combining accent stays 'ROMEO' there and
  becomes 'ROMEÓ' in a form that normalises first: such a model writes nothing, rather than
  other ids. Under the identity map the same pieces have a form."""
  nfkc = _given_sentencepiece(tmp_path, 'defaults', user_defined_symbols=['ROMEO'])
  assert 'ROMEO' in [nfkc.sp.id_to_piece(int(i) - 5) for i in nfkc.encode('ROMEO\u0301')]
  assert hf_tokenizers.form(nfkc) is None
  assert hf_tokenizers.form(_given_sentencepiece(tmp_path, 'identity',
                                                 user_defined_symbols=['ROMEO']))


def test_a_bpe_model_whose_merges_miss_a_piece_has_no_form_beside_user_defined_ones(tmp_path):
  """Beside user-defined pieces a BPE form takes a part that is a piece whole, so a piece its
  merges never reach ('vkgp', whose 'vk' and 'gp' merges come after 'kg') would be taken where
  SentencePiece gives 'v', 'kg', 'p': that model writes nothing; without user-defined pieces it
  has a form, which gives SentencePiece's ids."""
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  for user_defined in (['[INST]'], []):
    given = _given_sentencepiece(tmp_path, 'bpe_bytes', **(
        {'user_defined_symbols': user_defined} if user_defined else {}))
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(given.sp.serialized_model_proto())
    for piece, score in (('kg', 0.0), ('vk', -900.0), ('gp', -900.0), ('vkgp', -901.0)):
      added = proto.pieces.add()
      added.piece, added.score = piece, score
    path = tmp_path / f'missed{len(user_defined)}.model'
    path.write_bytes(proto.SerializeToString())
    missed = vocabularies.SentencePieceFile(str(path))
    assert missed.sp.encode('[INST]vkgp', out_type=str)[-3:] == ['v', 'kg', 'p']
    made = hf_tokenizers.form(missed)
    assert (made is None) == bool(user_defined)
    if made:
      _assert_same_ids_and_text(made[0], missed, ['[INST]vkgp', 'vkgp vkgp'])


@pytest.mark.parametrize('name', GIVEN_JSON)
def test_a_tokenizer_json_given_as_the_tokenizer_gives_the_run_s_ids_and_text(name, tmp_path):
  """Its pipeline as it is, its ids moved up by 5, as vocabularies.HuggingFace encodes (without
  the file's padding, truncation or template) and decodes."""
  given = _given_json(tmp_path, name)
  tok, _ = hf_tokenizers.form(given)
  assert tok.get_vocab_size() == given.vocab_size
  for text in CASES:
    want = [int(i) for i in given.encode(text)]
    assert tok.encode(text, add_special_tokens=False).ids == want, text
    assert tok.decode(want, skip_special_tokens=False) == given.decode(want), text
  rng = np.random.default_rng(0)
  for _ in range(100):
    ids = [int(i) for i in rng.integers(5, given.vocab_size, 12)]
    assert tok.decode(ids, skip_special_tokens=False) == given.decode(ids), ids
  words = [int(i) for i in given.encode('Shall I compare thee')]  # The project's specials go.
  framed = [tokenizer_lib.BOS_ID, *words, tokenizer_lib.EOS_ID, tokenizer_lib.PAD_ID]
  assert tok.decode(framed, skip_special_tokens=True) == given.decode(framed)


def test_the_project_s_ids_take_no_name_the_given_tokenizer_uses(tmp_path):
  """Where the given tokenizer has a `<s>` (or `<unk>`...) of its own, that token keeps its
  moved id and the project's is marked; every name stands for one id."""
  for given in (_given_json(tmp_path, 'bpe'), _given_json(tmp_path, 'unigram'),
                _given_sentencepiece(tmp_path, 'defaults')):
    tok, ids = hf_tokenizers.form(given)
    names = [tok.id_to_token(i) for i in range(tokenizer_lib.NUM_SPECIAL)]
    for i, name in enumerate(names):
      assert tok.token_to_id(name) == i, (name, names)
    assert ids == {'bos': 2, 'eos': 1, 'pad': 0}
    theirs = given.tok.token_to_id('<s>') if hasattr(given, 'tok') else given.sp.piece_to_id('<s>')
    assert names[tokenizer_lib.BOS_ID] == '<s|roformer>'
    assert tok.token_to_id('<s>') == theirs + 5
  assert hf_tokenizers.form(_given_json(tmp_path, 'wordpiece'))[0].id_to_token(2) == '<s>'


def test_transformers_form_puts_the_bos_first_as_training_framed_documents(trained, tmp_path):
  for tokenizer in (trained, vocabularies.Bytes(), _given_sentencepiece(tmp_path, 'defaults'),
                    _given_json(tmp_path, 'wordpiece')):
    tok, _ = hf_tokenizers.form(tokenizer)
    bos, _ = vocabularies.framing(tokenizer)
    text = 'Thou art more lovely\nand more temperate'
    assert tok.encode(text).ids == [*bos, *map(int, tokenizer.encode(text))]


def test_the_written_files_read_back_as_the_import_reads_them(trained, tmp_path):
  """What an export writes is what --from_hf reads: the same ids and the same framing."""
  for name, tokenizer in (('spm', trained), ('bytes', vocabularies.Bytes()),
                          ('given_spm', _given_sentencepiece(tmp_path, 'defaults')),
                          ('given_json', _given_json(tmp_path, 'bpe'))):
    (tmp_path / name).mkdir()
    assert hf_tokenizers.write(tokenizer, str(tmp_path / name))
    config = json.loads((tmp_path / name / 'tokenizer_config.json').read_text())
    marked = '|roformer' if name.startswith('given') else ''
    assert config['bos_token'] == f'<s{marked}>' and config['eos_token'] == (
        '</s|roformer>' if name == 'given_spm' else '</s>')
    back = vocabularies.Pretrained(str(tmp_path / name))
    for text in CASES[:6]:
      assert list(back.encode(text)) == list(tokenizer.encode(text)), (name, text)
    assert vocabularies.framing(back) == vocabularies.framing(tokenizer)


def test_a_sentencepiece_model_of_other_settings_writes_nothing(tmp_path):
  """A SentencePiece character model, trained here or given as config.data.tokenizer, has no
  form; nor has a given model with normalisation or denormalisation rules of its own."""
  (tmp_path / 'corpus.txt').write_text(TRAINING * 3, encoding='utf-8')
  spm.SentencePieceTrainer.train(
      input=str(tmp_path / 'corpus.txt'), model_prefix=str(tmp_path / 'char'), vocab_size=120,
      model_type='char', pad_id=0, eos_id=1, bos_id=2, unk_id=3, user_defined_symbols=['<n>'],
      hard_vocab_limit=False, minloglevel=2)
  char = tokenizer_lib.Tokenizer(tmp_path / 'char.model')
  assert hf_tokenizers.form(char) is None
  shifted = vocabularies.SentencePieceFile(str(tmp_path / 'char.model'))
  assert not hf_tokenizers.write(shifted, str(tmp_path))
  assert not (tmp_path / 'tokenizer.json').exists()
  # Rules of its own: 'ab' read as 'z' (a two-character source the `tokenizers` character map
  # does not match as SentencePiece does), or 'A' decoded as 'a'.
  (tmp_path / 'rule.tsv').write_text('61 62\t7A\n')
  for name, setting in (('rule', 'normalization_rule_tsv'),
                        ('denormal', 'denormalization_rule_tsv')):
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / 'corpus.txt'), model_prefix=str(tmp_path / name), vocab_size=100,
        hard_vocab_limit=False, minloglevel=2, **{setting: str(tmp_path / 'rule.tsv')})
    assert hf_tokenizers.form(vocabularies.SentencePieceFile(str(tmp_path / f'{name}.model'))
                              ) is None, name
  spm.SentencePieceTrainer.train(input=str(tmp_path / 'corpus.txt'), vocab_size=100,
                                 model_prefix=str(tmp_path / 'plain'), hard_vocab_limit=False,
                                 minloglevel=2)  # The same model without them has a form.
  assert hf_tokenizers.form(vocabularies.SentencePieceFile(str(tmp_path / 'plain.model')))


def test_transformers_reads_the_forms_with_the_same_ids(trained, tmp_path):
  """Where transformers is installed: its tokenizer of the written files gives the ids, and
  one bos first when it adds special tokens."""
  transformers = pytest.importorskip('transformers')
  for name, tokenizer in (('spm', trained), ('bytes', vocabularies.Bytes()),
                          ('given_spm', _given_sentencepiece(tmp_path, 'spaces_kept')),
                          ('given_bpe', _given_sentencepiece(tmp_path, 'bpe_bytes')),
                          ('given_user_defined', _given_sentencepiece(
                              tmp_path, 'identity', user_defined_symbols=USER_DEFINED)),
                          ('given_json', _given_json(tmp_path, 'bpe'))):
    (tmp_path / name).mkdir()
    assert hf_tokenizers.write(tokenizer, str(tmp_path / name))
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / name))
    for text in CASES + ['[INST] ROMEO: a b [/INST]x<sep>']:
      want = [int(i) for i in tokenizer.encode(text)]
      assert theirs(text, add_special_tokens=False)['input_ids'] == want, (name, text)
    assert theirs('and more')['input_ids'][:2] == [tokenizer_lib.BOS_ID,
                                                   int(tokenizer.encode('and more')[0])]


def test_the_bytes_form_is_byte_b_at_id_b_plus_5():
  tok, _ = hf_tokenizers.form(vocabularies.Bytes())
  text = 'é\n\x00~'
  want = list(np.frombuffer(text.encode('utf-8'), np.uint8).astype(int) + 5)
  assert tok.encode(text, add_special_tokens=False).ids == want
  assert isinstance(tok, tokenizers.Tokenizer) and tok.decode(want) == text


def test_a_form_that_encodes_a_probe_text_otherwise_is_not_written(trained, tmp_path,
                                                                    monkeypatch):
  """Whatever a conversion missed, an export checks its form on PROBES before writing it: a form
  that reads text lower-cased (as a setting it did not see might) writes nothing."""
  built = hf_tokenizers._sentencepiece  # pylint: disable=protected-access
  def lowered(sp, shift):
    tok = built(sp, shift)
    tok.normalizer = tokenizers.normalizers.Sequence([tok.normalizer,
                                                      tokenizers.normalizers.Lowercase()])
    return tok
  assert hf_tokenizers.write(trained, str(tmp_path))
  (tmp_path / 'tokenizer.json').unlink()
  monkeypatch.setattr(hf_tokenizers, '_sentencepiece', lowered)
  assert hf_tokenizers.form(trained) is None
  assert not hf_tokenizers.write(trained, str(tmp_path))
  assert not (tmp_path / 'tokenizer.json').exists()
