"""config.data.tokenizer: bytes, an existing SentencePiece model, a Hugging Face tokenizer.json,
and the trained SentencePiece model's sample; each keeps the project's special ids."""

import pathlib

import numpy as np
import pytest
import sentencepiece as spm
import tokenizers
from tokenizers import models as hf_models
from tokenizers import pre_tokenizers
from tokenizers import trainers

from configs import test as test_config
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import workdir as workdir_lib
from roformer.data import pipeline
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import vocabularies

TEXT = ('The quick brown fox jumps over the lazy dog.\nA second line, with commas.\n'
        'Numbers 12345 and symbols #@!\n') * 20


def foreign_sentencepiece(tmp_path) -> str:
  """A SentencePiece model trained with the library's own defaults (unk 0, bos 1, eos 2)."""
  corpus = tmp_path / 'corpus.txt'
  corpus.write_text(TEXT)
  spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / 'theirs'),
                                 vocab_size=48, minloglevel=2)
  return str(tmp_path / 'theirs.model')


def huggingface_json(tmp_path) -> str:
  tok = tokenizers.Tokenizer(hf_models.BPE(unk_token='[UNK]'))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  tok.train_from_iterator(TEXT.split('\n'), trainers.BpeTrainer(
      vocab_size=300, special_tokens=['[UNK]'],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  tok.save(str(tmp_path / 'tokenizer.json'))
  return str(tmp_path / 'tokenizer.json')


def test_bytes_are_their_values_after_the_special_ids():
  tok = vocabularies.Bytes()
  text = 'Größe: 3 €\nnext'
  ids = tok.encode(text)
  assert ids.dtype == np.int32 and tok.vocab_size == 256 + tokenizer_lib.NUM_SPECIAL
  assert ids.tolist() == [b + 5 for b in text.encode('utf-8')]
  assert tok.decode(ids) == text
  assert tok.decode([tokenizer_lib.BOS_ID, *ids, tokenizer_lib.EOS_ID, 0]) == text
  assert tok.decode([*ids, 1000]) == text  # An id past the vocabulary (a bigger model's).


def test_a_sentencepiece_model_from_elsewhere_is_shifted_past_the_special_ids(tmp_path):
  path = foreign_sentencepiece(tmp_path)
  theirs = spm.SentencePieceProcessor(model_file=path)
  tok = vocabularies.given(path)
  assert tok.vocab_size == theirs.get_piece_size() + 5
  lines = TEXT.split('\n')[:2]
  ids = tok.encode('\n'.join(lines))
  want = [i + 5 for i in theirs.encode(lines[0])] + [tokenizer_lib.NEWLINE_ID] + [
      i + 5 for i in theirs.encode(lines[1])]
  assert ids.tolist() == want  # Their unk (0), bos (1) and eos (2) are ids 5, 6, 7 here.
  assert tok.decode(ids) == '\n'.join(lines)


def test_a_huggingface_tokenizer_json_is_shifted_past_the_special_ids(tmp_path):
  path = huggingface_json(tmp_path)
  theirs = tokenizers.Tokenizer.from_file(path)
  tok = vocabularies.given(path)
  assert tok.vocab_size == theirs.get_vocab_size() + 5
  ids = tok.encode(TEXT[:80])
  assert ids.tolist() == [i + 5 for i in theirs.encode(TEXT[:80]).ids]
  assert tok.decode([tokenizer_lib.BOS_ID, *ids]) == TEXT[:80]


def test_a_tokenizer_json_that_truncates_or_pads_still_encodes_a_document_whole(tmp_path):
  """A tokenizer.json saved with truncation (BERT's 512, say) would cut every document the
  pipeline encodes; given as the tokenizer, or as a pretrained model's, it encodes them whole."""
  theirs = tokenizers.Tokenizer.from_file(huggingface_json(tmp_path))
  whole = theirs.encode(TEXT).ids
  theirs.enable_truncation(8)
  theirs.enable_padding(length=len(whole) + 10, pad_id=0)
  assert len(theirs.encode(TEXT).ids) == len(whole) + 10  # Cut to 8, then padded.
  theirs.save(str(tmp_path / 'tokenizer.json'))
  given = vocabularies.given(str(tmp_path / 'tokenizer.json'))
  assert given.encode(TEXT).tolist() == [i + 5 for i in whole]
  pretrained = vocabularies.Pretrained(str(tmp_path))
  assert pretrained.encode(TEXT).tolist() == whole
  pretrained.save(str(tmp_path / 'kept.json'))
  assert vocabularies.Pretrained(str(tmp_path / 'kept.json')).encode(TEXT).tolist() == whole


@pytest.mark.parametrize('name, message', [
    ('gpt2', "config.data.tokenizer='gpt2' is not a tokenizer"),
    ('/no/such/tokenizer.json', '/no/such/tokenizer.json does not exist'),
    ('/no/such/spm.model', '/no/such/spm.model does not exist'),
])
def test_a_name_of_no_tokenizer_is_refused(name, message):
  with pytest.raises(errors.ConfigError, match=message):
    vocabularies.given(name)


def test_a_missing_tokenizer_is_named_before_any_data_is_read(config, monkeypatch):
  """Its path is checked before the documents are opened (and, for your own files,
  converted), not after."""
  def read(*args, **kwargs):
    raise AssertionError('the data was read before the tokenizer path was checked')
  monkeypatch.setattr(pipeline, 'load_sources', read)
  for name, what in (('/no/such/spm.model', 'a SentencePiece model'),
                     ('/no/such/tokenizer.json', 'a Hugging Face tokenizer.json'),
                     ('hf:/no/such/model', 'a Hugging Face model directory')):
    config.data.tokenizer = name
    with pytest.raises(errors.ConfigError, match=f'does not exist. Fix: give the path of {what}'):
      workdir_lib.setup_data(config)


def test_a_file_that_is_not_a_tokenizer_is_named(tmp_path):
  (tmp_path / 'bad.model').write_bytes(b'\x00not a model')
  (tmp_path / 'bad.json').write_text('{"not": "a tokenizer"}')
  with pytest.raises(errors.ConfigError, match='bad.model is not a readable SentencePiece'):
    vocabularies.given(str(tmp_path / 'bad.model'))
  with pytest.raises(errors.ConfigError, match='bad.json is not a readable Hugging Face'):
    vocabularies.given(str(tmp_path / 'bad.json'))


class Recording:
  """A source that records which records were read."""

  def __init__(self, n):
    self.read = set()
    self.n = n

  def __len__(self):
    return self.n

  def __getitem__(self, i):
    self.read.add(i)
    return {'text': f'document {i} says hello to words like apple{i % 3} and pear'}


def test_the_tokenizer_trains_on_an_even_sample_of_the_documents(tmp_path):
  cfg = test_config.get_config().data
  cfg.update(data_dir=str(tmp_path), vocab_size=40, tokenizer_documents=25)
  source = Recording(1000)
  path = pipeline.tokenizer_path(cfg)
  pipeline.load_tokenizer(cfg, source)
  assert sorted(source.read) == [40 * k for k in range(25)]  # Every 40th: spread evenly.
  assert path.exists() and path.name == 'spm_text_40_d25_c20000000.model'
  cfg.tokenizer_documents = 0
  assert pipeline.tokenizer_path(cfg).name == 'spm_text_40.model'  # The default's name.


def test_each_kind_is_kept_under_its_own_name_and_opened_again_from_it(tmp_path):
  """The file's name in a workdir says which kind of tokenizer it is (a run fine-tuned from
  another keeps the other's, whatever its own config says)."""
  for path in (huggingface_json(tmp_path), foreign_sentencepiece(tmp_path)):
    workdir = tmp_path / pathlib.Path(path).suffix[1:]
    workdir.mkdir()
    tok = vocabularies.given(path)
    vocabularies.keep(tok, str(workdir), resumed=False)
    kept, cls = vocabularies.kept(str(workdir))
    assert type(tok) is cls and pathlib.Path(kept).read_bytes() == pathlib.Path(
        path).read_bytes()
    assert cls(kept).encode(TEXT[:50]).tolist() == tok.encode(TEXT[:50]).tolist()
  # A new run with bytes in the HF run's workdir: a marker, and the other kind's file gone (it
  # would be read in the bytes' place).
  vocabularies.keep(vocabularies.Bytes(), str(tmp_path / 'json'), resumed=False)
  assert sorted(p.name for p in (tmp_path / 'json').iterdir()) == ['tokenizer.bytes']
  assert vocabularies.kept(str(tmp_path / 'json'))[1] is vocabularies.Bytes
  (tmp_path / 'empty').mkdir()
  assert vocabularies.kept(str(tmp_path / 'empty')) == (None, None)


def test_a_workdir_without_a_file_opens_the_bytes_its_config_names(tmp_path):
  cfg = test_config.get_config()
  cfg.data.tokenizer = 'bytes'
  tok = workdir_lib.open_tokenizer(cfg, str(tmp_path))
  assert isinstance(tok, vocabularies.Bytes) and cfg.model.vocab_size == 261
  cfg.data.tokenizer = 'sentencepiece'
  with pytest.raises(errors.ConfigError, match='has no tokenizer file'):
    workdir_lib.open_tokenizer(cfg, str(tmp_path))


@pytest.mark.slow  # Keeping and opening each kind: the two tests above.
@pytest.mark.parametrize('which', ['bytes', 'huggingface'])
def test_a_run_keeps_its_tokenizer_and_evaluation_uses_it(tmp_path, data_dir, which):
  """A run with each tokenizer trains; its workdir keeps the file (bytes: none, they follow
  from the config), from which evaluation and decoding open it again."""
  name = 'bytes' if which == 'bytes' else huggingface_json(tmp_path)
  cfg = test_config.get_config()
  cfg.data.update(data_dir=data_dir, tokenizer=name)
  cfg.mesh.num_devices = 1
  cfg.train.update(steps=2, eval_every=2, checkpoint_every=2)
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(cfg, workdir)
  kept = sorted(p.name for p in pathlib.Path(workdir).glob('tokenizer*'))
  assert kept == (['tokenizer.bytes'] if which == 'bytes' else ['tokenizer.json'])
  opened = workdir_lib.open_tokenizer(cfg, workdir)
  assert opened.encode('To be').tolist() == vocabularies.given(name).encode('To be').tolist()
  cfg.eval.update(max_batches=1, length_multipliers=(1,))
  results = evaluate.evaluate_workdir(cfg, workdir, splits=('validation',))
  assert np.isfinite(results['splits']['validation']['lengths'][0]['loss'])
  assert cfg.model.vocab_size == opened.vocab_size


def test_a_tokenizer_named_for_a_synthetic_task_is_refused():
  """A synthetic task's vocabulary follows from the task: data.tokenizer would be ignored."""
  from roformer import config_args  # pylint: disable=g-import-not-at-top
  from roformer import resolve  # pylint: disable=g-import-not-at-top
  config = config_args.load('configs/synthetic.py:passkey')
  config.data.tokenizer = 'bytes'
  with pytest.raises(errors.ConfigError, match="config.data.tokenizer='bytes' is read only by "
                     'runs on text'):
    resolve.check_fields(config)
