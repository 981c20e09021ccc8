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


def test_transformers_form_puts_the_bos_first_as_training_framed_documents(trained):
  for tokenizer in (trained, vocabularies.Bytes()):
    tok, _ = hf_tokenizers.form(tokenizer)
    bos, _ = vocabularies.framing(tokenizer)
    text = 'Thou art more lovely\nand more temperate'
    assert tok.encode(text).ids == [*bos, *map(int, tokenizer.encode(text))]


def test_the_written_files_read_back_as_the_import_reads_them(trained, tmp_path):
  """What an export writes is what --from_hf reads: the same ids and the same framing."""
  for name, tokenizer in (('spm', trained), ('bytes', vocabularies.Bytes())):
    (tmp_path / name).mkdir()
    assert hf_tokenizers.write(tokenizer, str(tmp_path / name))
    config = json.loads((tmp_path / name / 'tokenizer_config.json').read_text())
    assert config['bos_token'] == '<s>' and config['eos_token'] == '</s>'
    back = vocabularies.Pretrained(str(tmp_path / name))
    for text in CASES[:6]:
      assert list(back.encode(text)) == list(tokenizer.encode(text)), (name, text)
    assert vocabularies.framing(back) == vocabularies.framing(tokenizer)


def test_a_model_of_other_settings_or_a_shifted_file_writes_nothing(tmp_path):
  """Only the settings tokenizer.train uses are reproduced: a BPE model, or a SentencePiece file
  given as config.data.tokenizer (its ids shifted past the project's), has no form here."""
  (tmp_path / 'corpus.txt').write_text(TRAINING * 3, encoding='utf-8')
  spm.SentencePieceTrainer.train(
      input=str(tmp_path / 'corpus.txt'), model_prefix=str(tmp_path / 'bpe'), vocab_size=120,
      model_type='bpe', pad_id=0, eos_id=1, bos_id=2, unk_id=3, user_defined_symbols=['<n>'],
      hard_vocab_limit=False, minloglevel=2)
  bpe = tokenizer_lib.Tokenizer(tmp_path / 'bpe.model')
  assert hf_tokenizers.form(bpe) is None
  shifted = vocabularies.SentencePieceFile(str(tmp_path / 'bpe.model'))
  assert not hf_tokenizers.write(shifted, str(tmp_path))
  assert not (tmp_path / 'tokenizer.json').exists()


def test_transformers_reads_the_forms_with_the_same_ids(trained, tmp_path):
  """Where transformers is installed: its tokenizer of the written files gives the ids, and
  one bos first when it adds special tokens."""
  transformers = pytest.importorskip('transformers')
  for name, tokenizer in (('spm', trained), ('bytes', vocabularies.Bytes())):
    (tmp_path / name).mkdir()
    assert hf_tokenizers.write(tokenizer, str(tmp_path / name))
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / name))
    for text in CASES:
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
