"""Passkey rows hidden in a corpus's text (config.data.synthetic.filler='text',
roformer/data/passkey_text.py): each row is a window of the text with the key sentence inside
and the question at the end, its answer weighted, rebuilt the same from its index; a mixture
trains on each row as one packed row and scores it like the synthetic task; bad settings are
one error."""

import json
import math
import os
import re

import jax
import ml_collections
import numpy as np
import processes
import pytest
from configs.sweeps import passkey_extension

from roformer import config_args
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import metrics
from roformer import resolve
from roformer import sharding
from roformer import sweeps
from roformer import tasks
from roformer import trainer as trainer_lib
from roformer.data import mixture
from roformer.data import passkey_text
from roformer.data import pipeline
from roformer.data import tokenizer as tokenizer_lib
from roformer.data import tokens as tokens_lib
from roformer.data import vocabularies
from roformer.positions import remap
from scripts import report
from scripts import sweep as sweep_script
from scripts import sweep_points

BYTES = vocabularies.given('bytes')  # One id per byte: a row's text is its ids' bytes.
TEXT = ('Now is the winter of our discontent made glorious summer by this sun of York; ',
        'and all the clouds that lour upon our house in the deep bosom of the ocean buried. ')
ROW = re.compile(r'^(?P<before>.*) The pass key is (?P<key>\d{5})\. Remember it\. (?P=key) is '
                 r'the pass key\. (?P<after>.*) What is the pass key\? The pass key is (?P=key)$',
                 re.S)


def _split(name: str = 'validation', buckets: int = 5) -> passkey_text.Split:
  cfg = ml_collections.ConfigDict({'seed': 3, 'eval_examples': 64, 'key_digits': 5,
                                   'depth_buckets': buckets, 'filler': 'text'})
  return passkey_text.Split(cfg, name, [{'text': t} for t in TEXT], 'text')


def _text(row) -> str:
  ids = np.append(row['inputs'][:1], row['targets'][row['targets_segment_ids'] > 0])
  assert ids[0] == tokenizer_lib.BOS_ID and ids[-1] == tokenizer_lib.EOS_ID
  return bytes(int(i) - tokenizer_lib.NUM_SPECIAL for i in ids[1:-1]).decode('utf-8')


@pytest.mark.parametrize('length', [160, 301])
def test_a_row_hides_the_key_in_a_window_of_the_text_and_asks_for_it_at_the_end(length):
  rows, stream = passkey_text.Rows(_split(), BYTES, length), ''.join(TEXT)
  depths = []
  for i in range(40):
    row = rows[i]
    assert (row['inputs_segment_ids'] == 1).all()  # Exactly `length` predictions.
    np.testing.assert_array_equal(row['inputs_positions'], np.arange(length))
    np.testing.assert_array_equal(row['inputs'][1:], row['targets'][:-1])
    match = ROW.match(_text(row))
    assert match, _text(row)
    window = match['before'] + match['after']
    assert window in stream * (2 + length // len(stream))  # A window of the text, wrapping.
    # Only the answer after the question is weighted: a space and its 5 digits, the row's
    # last targets before [eos].
    answer = np.flatnonzero(row['weights'])
    np.testing.assert_array_equal(answer, np.arange(length - 7, length - 1))
    assert bytes(int(t) - tokenizer_lib.NUM_SPECIAL for t in row['targets'][answer]).decode() == (
        ' ' + match['key'])
    depth = len(match['before']) / len(window)
    assert row['bucket'] == min(int(depth * 5), 4)
    depths.append(depth)
  assert min(depths) < 0.2 and max(depths) > 0.8  # Keys at every depth.


def test_a_row_is_the_same_from_its_index_and_training_rows_follow_the_run_seed():
  rows = passkey_text.Rows(_split(), BYTES, 160)
  again = passkey_text.Rows(_split(), BYTES, 160)
  for i in range(5):
    for key, value in rows[i].items():
      np.testing.assert_array_equal(again[i][key], value)
  assert _text(rows[0]) != _text(rows[1])
  assert len(rows) == 64  # eval_examples rows to evaluate.
  train = [passkey_text.Rows(_split('train'), BYTES, 160, seed) for seed in (1, 1, 2)]
  first = [[_text(r[i]) for i in range(4)] for r in train]
  assert first[0] == first[1] and first[0] != first[2]


def test_a_mixture_trains_on_each_row_as_one_packed_row():
  split, length = _split('train'), 160
  batches = pipeline.lm_dataset(split, BYTES, text_key='text', seq_len=length, batch_size=4,
                                shuffle=False, seed=5)
  batch = next(iter(batches))
  rows = passkey_text.Rows(split, BYTES, length, 5)
  for i in range(4):
    for key in ('inputs', 'targets', 'inputs_positions', 'inputs_segment_ids'):
      np.testing.assert_array_equal(batch[key][i], rows[i][key])


def test_rows_too_short_for_the_key_are_one_error_naming_the_fix():
  need = len(' The pass key is. Remember it. is the pass key.  What is the pass key? The pass '
             'key is') + 3 * 6 + 2 + 1  # The fixed bytes, three keys, bos, eos, one of text.
  passkey_text.Rows(_split(), BYTES, need - 1)
  with pytest.raises(errors.ConfigError, match=f'config.data.seq_len={need - 1} or more'):
    passkey_text.Rows(_split(), BYTES, need - 2)


def test_rows_in_text_are_not_held_to_the_word_rows_bound(config):
  """The bound of passkey rows in words (41 tokens at 5 digits) is not that of rows in text,
  which is checked in the run's tokenizer when the rows are built (above): a mixture's text
  passkey is not refused by it, so the one refusal a user sees names the real bound."""
  config.data.mixture = {'plays': {'weight': 0.8},
                         'keys': {'weight': 0.2, 'name': 'synthetic/passkey'}}
  config.data.synthetic.filler = 'text'
  config.data.seq_len = 24
  resolve.validate(config)


def test_the_text_filler_is_refused_outside_a_mixture_and_for_other_tasks(config):
  alone = config_args.load('configs/synthetic.py:passkey')
  alone.data.synthetic.filler = 'text'
  with pytest.raises(errors.ConfigError, match="filler='text' hides the key in config.data.name"):
    resolve.validate(alone)
  config.data.mixture = {'plays': {'weight': 1.0},
                         'copies': {'weight': 1.0, 'name': 'synthetic/copy'}}
  config.data.synthetic.filler = 'text'
  with pytest.raises(errors.ConfigError, match=r"mixture.copies: config.data.synthetic.filler="):
    resolve.validate(config)


def _key_mixture(config):
  config.data.mixture = {'plays': {'weight': 3.0},
                         'keys': {'weight': 1.0, 'name': 'synthetic/passkey'}}
  config.data.update(seq_len=112, tokenizer='bytes')
  config.data.synthetic.update(filler='text', key_digits=2, depth_buckets=2, eval_examples=8)
  config.train.update(steps=1, warmup_steps=0, eval_every=1, checkpoint_every=1, log_every=1,
                      eval_batches=-1)
  config.eval.update(length_multipliers=(1,), max_batches=-1)
  return config


def test_the_key_rows_are_scored_by_a_trainer_of_the_same_model_with_the_tasks_scoring(config):
  run = _key_mixture(config)
  run.model.vocab_size = BYTES.vocab_size
  trainer = trainer_lib.Trainer(run, sharding.make_mesh(run.mesh))
  keys_config = ml_collections.ConfigDict(run.to_dict())
  keys_config.data = mixture.member_config(run.data, mixture.entries(run.data)['keys'])
  scorer = evaluate.scorer(trainer, _split(), keys_config)
  assert isinstance(scorer.task, tasks.SyntheticTask) and scorer.task.task == 'passkey'
  assert not isinstance(trainer.task, tasks.SyntheticTask)
  shapes = lambda t: jax.tree.map(lambda a: a.shape, t.abstract_state['params'])
  assert shapes(scorer) == shapes(trainer)  # The run's own parameters fit it.
  assert evaluate.scorer(trainer, _split(), keys_config) is scorer  # Compiled once.
  assert evaluate.scorer(trainer, [{'text': 'plays'}], run) is trainer  # Text: the run's own.


@pytest.mark.slow  # A run of one step with its validation: about 10 s.
def test_a_run_on_the_mixture_validates_the_key_rows_by_their_answers(config, tmp_path):
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(_key_mixture(config), workdir)
  records = metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  keys = [r for r in records if r['split'] == 'validation/keys' and r['step'] == 1][0]
  plays = [r for r in records if r['split'] == 'validation/plays' and r['step'] == 1][0]
  # 8 rows, each answer a space and 2 digits (bytes: one id each), scored as passkey rows;
  # the plays as text.
  assert keys['rows'] == 8 and keys['tokens'] == 24
  assert keys['sequence_accuracy'] <= keys['accuracy'] + 1e-9
  assert 'rows' not in plays and plays['tokens'] > 24
  # The run's validation is the text's alone: the key rows' answer loss is another quantity.
  whole = [r for r in records if r['split'] == 'validation' and r['step'] == 1][0]
  assert whole['loss'] == pytest.approx(plays['loss'], rel=1e-6) != keys['loss']


@pytest.mark.slow  # A run and eval.py's evaluation of it: about 15 s.
def test_eval_py_scores_the_mixtures_key_rows_like_the_synthetic_task(config, tmp_path):
  config = _key_mixture(config)
  workdir = str(tmp_path / 'run')
  loop.train_and_evaluate(config, workdir, eval_splits=('validation',))  # eval.py's results.
  with open(os.path.join(workdir, 'eval_results.json'), encoding='utf-8') as f:
    results = json.load(f)
  keys = results['splits']['validation/keys']['lengths']
  [row] = keys  # 8 rows, each answer a space and 2 digits (bytes: one id each).
  assert row['length'] == 112 and row['rows'] == 8 and row['tokens'] == 24
  assert len(row['depth_accuracy']) == 2
  assert row['sequence_accuracy'] <= row['accuracy'] + 1e-9  # A row right has its 3 ids right.
  assert 'unigram_loss' in results['splits']['validation/plays']
  assert 'unigram_loss' not in results['splits']['validation/keys']


def test_the_extension_sweep_sizes_its_remaps_by_the_shared_rule():
  """configs/sweeps/passkey_extension.py evaluates each remap with remap.fitted's options for
  its trained and longest lengths, the rule scripts/evaluate_extensions.sh uses (test_remap
  checks what the rule bounds)."""
  length = passkey_extension.TRAIN_LENGTH
  longest = length * max(passkey_extension.MULTIPLIERS)
  evals = sweeps.load('configs/sweeps/passkey_extension.py').evals
  for method, options in remap.fitted(length, longest).items():
    overrides = evals[f'remap_{method}']['overrides']
    assert overrides == {'model.position.rope.remap.method': method, **{
        f'model.position.rope.remap.{k}': v for k, v in options.items()}}, method


def test_the_extension_sweep_continues_each_seeds_base_and_evaluates_variants_on_the_base():
  sweep = sweeps.load('configs/sweeps/passkey_extension.py')
  names = [p.name for p in sweep.points]
  assert len(names) == len(passkey_extension.SEEDS) * (2 + len(passkey_extension.CONTINUED))
  for point in sweep.points:
    if point.name.startswith('continue_'):
      assert point.needs == ('base,seed=' + point.name.rsplit('=', 1)[1],)
  base, continued = sweep.points[0], sweep.points[1]
  posed, = [p for p in sweep.points if p.name == 'continue_pose,seed=0']
  on_base = {name for name, ev in sweep.evals.items() if sweeps.applies(ev, base)}
  on_continued = {name for name, ev in sweep.evals.items() if sweeps.applies(ev, continued)}
  on_posed = {name for name, ev in sweep.evals.items() if sweeps.applies(ev, posed)}
  assert on_base == {''} | {f'rope_{k}' for k in passkey_extension.EVAL_SCALINGS} | {
      f'remap_{m}' for m in remap.fitted(128, 2048)}
  assert on_continued == {'', 'short'}
  # PoSE trains at the base's length with positions covering its own longest evaluation (the
  # base's), and is evaluated plainly there.
  assert on_posed == {''}
  for arg in ('', 'smoke'):
    points = sweeps.load(f'configs/sweeps/passkey_extension.py:{arg}').points
    base, = [p for p in points if p.name == 'base,seed=0']
    posed, = [p for p in points if p.name == 'continue_pose,seed=0']
    assert posed.fields['data.seq_len'] == base.fields['data.seq_len']
    assert posed.fields['eval.length_multipliers'] == base.fields['eval.length_multipliers']
    assert posed.fields['train.pose_target_length'] == base.fields['data.seq_len'] * max(
        base.fields['eval.length_multipliers'])


def test_the_report_reads_a_mixtures_text_perplexity_and_its_passkey_rows_by_variant():
  def split(ppl, exact=None):
    row = {'length': 128, 'loss': math.log(ppl), 'perplexity': ppl}
    if exact is not None:
      row.update(sequence_accuracy=exact, depth_accuracy=[exact, 1.0])
    return {'lengths': [row]}
  points = []
  for seed, (plain, remap) in enumerate([(0.5, 0.9), (0.7, 1.0)]):
    evals, retrieval = {}, {}
    for name, exact in (('', plain), ('remap_rerope', remap)):
      text, answers = sweep_points._text_and_answers(  # pylint: disable=protected-access
          {'validation/keys': split(3.0, exact), 'validation/plays': split(90.0 + seed)})
      by_length = sweep_points._by_length  # pylint: disable=protected-access
      evals[name], retrieval[name] = by_length(text), by_length(answers)
    points.append({'name': f'base,seed={seed}', 'scheme': 'rope', 'options': '', 'seed': seed,
                   'task': 'shakespeare', 'status': 'done', 'evals': evals,
                   'retrieval': retrieval})
  assert report.extrapolation(points) == {'rope': {128: 90.5}, 'rope + rerope remap': {128: 90.5}}
  text = '\n'.join(report._retrieval_sections(points))  # pylint: disable=protected-access
  assert '| rope | 2 | 0.600 ± 0.141 |' in text
  assert '| rope + rerope remap | 2 | 0.950 ± 0.071 |' in text
  assert '| rope + rerope remap | 0.95 / 1.00 |' in text


@pytest.mark.slow  # A tiny base, two continuations and eight evaluations: about 2 minutes.
def test_the_extension_sweeps_smoke_run_reports_perplexity_and_passkey_per_variant(
    tmp_path, data_dir, monkeypatch):
  monkeypatch.setenv('XLA_FLAGS', processes.xla_flags(1))  # The children: one CPU device.
  spec = tmp_path / 'smoke.py'
  spec.write_text(f"""
from configs.sweeps import passkey_extension
def get_sweep(arg=''):
  sweep = passkey_extension.get_sweep('smoke')
  sweep['overrides']['data.data_dir'] = {data_dir!r}
  return sweep
""")
  root = str(tmp_path / 'extension')
  assert sweep_script.main(['--sweep', str(spec), '--workdir', root]) == 0
  assert report.main([root]) == 0
  text = open(os.path.join(root, 'report.md'), encoding='utf-8').read()
  assert '## Passkey in text: rows answered in full' in text
  for line in ('| rope | 1 |', '| rope + dca remap | 1 |', '| rope + linear scaling | 1 |',
               '| rope (continued from=base) + short | 1 |',
               # PoSE's continuation is its own line, not a seed of the plain continuation's.
               '| rope (continued from=base) | 1 |',
               '| rope (continued from=base, pose_target_length=320, pose_chunks=2) | 1 |'):
    assert line in text, line
  assert os.path.exists(os.path.join(root, 'passkey_accuracy.png'))


@pytest.mark.parametrize('name', ['llama_linear_v4', 'qwen2_yarn_v4'])
def test_a_pretrained_tokenizer_frames_rows_with_its_own_bos_and_eos(name):
  """A pretrained tokenizer's rows start with its bos (none for Qwen2) and end with its eos; as
  a mixture's documents they carry neither (packing adds them), and no text token is lost."""
  tok = vocabularies.Pretrained(os.path.join(os.path.dirname(__file__), 'data', 'hf', name))
  bos, eos = vocabularies.framing(tok)
  rows = passkey_text.Rows(_split(), tok, 200)
  ids = rows.tokens(3)[0]
  assert list(ids[:len(bos)]) == bos and list(ids[-1:]) == eos
  document = passkey_text.Documents(passkey_text.Rows(_split(), tok, 200))[3][tokens_lib.TOKEN_IDS]
  assert list(document) == list(ids[len(bos):-1])
