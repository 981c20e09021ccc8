"""Classification and regression: the encoding of sentences and pairs, GLUE metrics against
hand-computed values, fine-tuning from a masked-LM run, GLUE by name, and bad inputs."""

import json
import os

import jax
import numpy as np
import offline
import processes
import pytest

from configs import classify
from configs import test as test_config
from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import loop
from roformer import metrics
from roformer import resolve
from roformer import saved_config
from roformer import sharding
from roformer import tasks
from roformer import trainer as trainer_lib
from roformer import workdir as workdir_lib
from roformer.data import pipeline
from roformer.data import tokenizer as tokenizer_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeTokenizer:
  """One id per word: 10 + its length (enough to check the layout)."""

  def encode(self, text):
    return np.asarray([10 + len(w) for w in text.split()], np.int32)


def encode(texts, max_len, label=1, num_classes=2):
  keys = tuple(f't{i}' for i in range(len(texts)))
  example = {**dict(zip(keys, texts)), 'label': label}
  return pipeline.EncodeForClassification(FakeTokenizer(), keys, 'label', max_len,
                                          num_classes).map(example)


def test_pair_layout_and_truncation_of_the_longer_text():
  out = encode(['a bb', 'ccc'], 10)
  bos, eos = tokenizer_lib.BOS_ID, tokenizer_lib.EOS_ID
  np.testing.assert_array_equal(out['inputs'], [bos, 11, 12, eos, 13, eos, 0, 0, 0, 0])
  np.testing.assert_array_equal(out['token_types'], [0, 0, 0, 0, 1, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(out['inputs_segment_ids'], [1] * 6 + [0] * 4)
  np.testing.assert_array_equal(out['inputs_positions'][:6], range(6))
  cut = encode(['a a a a a a', 'b b'], 8)  # 5 tokens of text fit: the longer side is cut.
  np.testing.assert_array_equal(cut['inputs'], [bos, 11, 11, 11, eos, 11, 11, eos])
  assert out['label'] == 1 and out['weight'] == 1.0


def test_out_of_range_label_is_named():
  with pytest.raises(errors.ConfigError, match='num_classes'):
    encode(['a'], 8, label=2)
  assert encode(['a'], 8, label=-1)['label'] == -1  # Hidden test labels pass through.
  assert encode(['a'], 8, label=3.5, num_classes=1)['label'] == np.float32(3.5)


def test_metrics_against_hand_computed_values():
  y = [1, 1, 0, 0, 1, 0]
  p = [1, 0, 0, 1, 1, 0]  # tp 2, fn 1, fp 1, tn 2.
  assert metrics.accuracy(y, p) == pytest.approx(4 / 6)
  assert metrics.f1(y, p) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
  assert metrics.matthews_correlation(y, p) == pytest.approx((2 * 2 - 1 * 1) / 9)
  assert metrics.matthews_correlation([1, 1, 1], [1, 1, 1]) == 0.0  # Empty margin.
  x, z = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 5.0, 4.0]
  # Pearson by hand: deviations (-1.5,-.5,.5,1.5) and (-1.75,.25,1.25,.25).
  num = 1.5 * 1.75 - 0.5 * 0.25 + 0.5 * 1.25 + 1.5 * 0.25
  den = np.sqrt(5.0 * (1.75 ** 2 + 0.25 ** 2 + 1.25 ** 2 + 0.25 ** 2))
  assert metrics.pearson(x, z) == pytest.approx(num / den)
  np.testing.assert_array_equal(metrics.ranks(z), [1, 2.5, 4, 2.5])  # Ties share a rank.
  assert metrics.spearman(x, z) == pytest.approx(metrics.pearson([1, 2, 3, 4], [1, 2.5, 4, 2.5]))
  report = metrics.classification_report(('accuracy', 'f1'), np.asarray(y), np.asarray(p))
  assert report == {'accuracy': pytest.approx(4 / 6), 'f1': pytest.approx(2 / 3)}


@pytest.fixture(scope='module')
def pretrained(mlm_workdir, tmp_path_factory):
  """The session's tiny masked-LM run, and a causal-LM workdir (not one to fine-tune from)."""
  lm_dir = tmp_path_factory.mktemp('lm')
  saved_config.save(test_config.get_config(), str(lm_dir))
  return mlm_workdir[0], str(lm_dir)


def classify_config(data_dir, **fields):
  cfg = test_config.get_config('classify')
  cfg.data.data_dir = data_dir
  cfg.update(fields)
  return cfg


def test_fine_tuning_takes_over_the_encoder_and_its_tokenizer(pretrained, data_dir, tmp_path):
  mlm_dir, _ = pretrained
  cfg = classify_config(data_dir, init_from=mlm_dir)
  cfg.train.update(steps=4, eval_every=4, checkpoint_every=4)
  workdir = str(tmp_path / 'ft')
  last = loop.train_and_evaluate(cfg, workdir, stop_at=1)
  with open(os.path.join(workdir, workdir_lib.TOKENIZER_FILE), 'rb') as a, open(
      os.path.join(mlm_dir, workdir_lib.TOKENIZER_FILE), 'rb') as b:
    assert a.read() == b.read()  # The pretraining's vocabulary, not rotten_tomatoes'.
  # After one step at learning rate 0 (warmup), the encoder equals the pretrained one.
  mesh_cfg = saved_config.load(workdir)
  trainer = trainer_lib.Trainer(mesh_cfg, sharding.make_mesh(mesh_cfg.mesh))
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  tuned = ckpt.restore(1, trainer.abstract_state)['params'].to_pure_dict()
  ckpt.close()
  source_cfg = saved_config.load(mlm_dir)
  source_cfg.model.vocab_size = mesh_cfg.model.vocab_size
  source = trainer_lib.Trainer(source_cfg, trainer.mesh)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(mlm_dir, 'checkpoints'))
  original = ckpt.restore(16, source.abstract_state)['params'].to_pure_dict()
  ckpt.close()
  for key in ('embed', 'blocks', 'ln_final', 'token_type'):
    for a, b in zip(jax.tree.leaves(tuned[key]), jax.tree.leaves(original[key])):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert 'head' not in tuned and 'classifier' in tuned
  del last


def test_init_from_refuses_the_wrong_runs(pretrained, data_dir, tmp_path):
  mlm_dir, lm_dir = pretrained
  workdir = str(tmp_path / 'ft')
  with pytest.raises(errors.ConfigError, match="'causal_lm' run; a 'classifier' model starts "
                     "from a 'mlm' run"):
    loop.train_and_evaluate(classify_config(data_dir, init_from=lm_dir), workdir)
  with pytest.raises(errors.ConfigError, match='not a directory'):
    loop.train_and_evaluate(classify_config(data_dir, init_from=str(tmp_path / 'nope')),
                                 workdir)
  wider = classify_config(data_dir, init_from=mlm_dir)
  wider.model.d_model = 64
  with pytest.raises(errors.ConfigError, match='model.d_model: 32 vs 64'):
    loop.train_and_evaluate(wider, workdir)
  other_kind = test_config.get_config('classify,alibi')
  other_kind.data.data_dir, other_kind.init_from = data_dir, mlm_dir
  with pytest.raises(errors.ConfigError, match='position.kind'):
    loop.train_and_evaluate(other_kind, workdir)
  assert not os.path.exists(workdir)  # Nothing written.


def test_init_from_ignores_options_the_encoder_does_not_read(pretrained, data_dir):
  mlm_dir, _ = pretrained
  cfg = classify_config(data_dir, init_from=mlm_dir)
  assert cfg.model.position.kind == 'rope' and cfg.model.attention.kind == 'softmax'
  cfg.model.position.learned.max_length += 1  # Another scheme's option.
  cfg.model.attention.rope_mode = 'features' if cfg.model.attention.rope_mode == 'qk' else 'qk'
  cfg.model.attention.num_features += 1  # FAVOR+ options, read only by attention.kind='favor'.
  cfg.model.attention.ssmax_init += 1  # Read only with attention.ssmax on.
  _, step = resolve.check_init_from(cfg)
  assert step == 16
  cfg.model.attention.qk_norm = True  # A switch: it adds parameters and changes the logits.
  with pytest.raises(errors.ConfigError, match='model.attention.qk_norm'):
    resolve.check_init_from(cfg)
  cfg.model.attention.qk_norm = False
  cfg.model.embedding_multiplier = 2.0  # No parameters, but other inputs to the encoder.
  with pytest.raises(errors.ConfigError, match='model.embedding_multiplier'):
    resolve.check_init_from(cfg)
  cfg.model.embedding_multiplier = 1.0
  cfg.model.residual_multiplier = 0.5  # No parameters, but the branches' outputs scaled.
  with pytest.raises(errors.ConfigError, match='model.residual_multiplier'):
    resolve.check_init_from(cfg)
  cfg.model.residual_multiplier = 1.0
  cfg.model.embedding_norm = True  # A norm the pretrained encoder did not have.
  with pytest.raises(errors.ConfigError, match='model.embedding_norm'):
    resolve.check_init_from(cfg)
  cfg.model.embedding_norm = False
  for field, value in (('normalization', 'layer_norm_unbiased'), ('mlp', 'gated'),
                       ('biases', 'none'), ('residual', 'parallel'), ('num_kv_heads', 2)):
    kept = cfg.model[field]  # Each decides what the pretrained parameters compute.
    cfg.model[field] = value
    with pytest.raises(errors.ConfigError, match=f'model.{field}'):
      resolve.check_init_from(cfg)
    cfg.model[field] = kept
  cfg.model.position.rope.base = 500.0  # An option RoPE reads.
  with pytest.raises(errors.ConfigError, match='model.position.rope.base'):
    resolve.check_init_from(cfg)
  cfg.model.position.kind = 'learned'  # Another kind: the kinds named, not their options.
  with pytest.raises(errors.ConfigError, match=r"\(pretrained vs now\): model.position.kind: "
                     r"'rope' vs 'learned'\. Fix: .*configs/classify.py:TASK,roformer") as e:
    resolve.check_init_from(cfg)
  assert 'model.position.rope' not in str(e.value)


@pytest.mark.parametrize('field,value', [('tokenizer', 'bytes'), ('vocab_size', 2000),
                                         ('tokenizer_chars', 5000)])
def test_a_tokenizer_override_beside_init_from_is_refused(pretrained, data_dir, field, value):
  """The run takes the pretrained run's tokenizer whole (its ids are the embedding's rows):
  another tokenizer or size was saved as if applied and ignored; it is refused."""
  mlm_dir, _ = pretrained
  cfg = classify_config(data_dir, init_from=mlm_dir)
  cfg.data[field] = value
  with pytest.raises(errors.ConfigError, match=rf'config.data.{field}={value!r}, but the run '
                     r'takes its tokenizer from config.init_from=.*Fix: set --config.data.'
                     rf'{field}=.*the source'):
    resolve.check_init_from(cfg)


def test_classifier_from_scratch_then_eval_py(data_dir, tmp_path):
  cfg = classify_config(data_dir)
  workdir = str(tmp_path / 'rt')
  last = loop.train_and_evaluate(cfg, workdir)
  assert {'loss', 'accuracy', 'f1', 'examples'} <= set(last['validation'])
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu'}
  run = processes.run(['eval.py', f'--workdir={workdir}', '--config.eval.max_batches=2'],
                      cwd=REPO, env=env)
  assert run.returncode == 0, run.stderr[-2000:]
  with open(os.path.join(workdir, 'eval_results.json'), encoding='utf-8') as f:
    results = json.load(f)
  for split in ('validation', 'test'):
    r = results['splits'][split]
    assert r['examples'] == 16 and 0 <= r['accuracy'] <= 1 and 'f1' in r
  # eval.py scores the validation batches as the run's final evaluation did.
  for metric in ('loss', 'accuracy', 'f1'):
    np.testing.assert_allclose(results['splits']['validation'][metric],
                               last['validation'][metric], rtol=1e-5, err_msg=metric)


@pytest.mark.parametrize('task', [pytest.param('glue/mrpc', marks=pytest.mark.slow),
                                  'glue/stsb'])
def test_glue_by_name_with_mock_data(task, tmp_path):
  cfg = test_config._shrink(classify.get_config(task))  # pylint: disable=protected-access
  cfg.data.update(data_dir=str(tmp_path / 'tfds'), vocab_size=64)
  cfg.train.update(steps=2, eval_every=2, checkpoint_every=2)
  cfg.eval.length_multipliers = (1,)
  with offline.mock_data(num_examples=24):
    sources, tok = workdir_lib.setup_data(cfg, splits=('train', 'validation'))
    batch = next(iter(tasks.for_config(cfg).batches(
        cfg, sources['validation'], tok, train=False, batch_size=4)))
    assert (batch['token_types'] == 1).any(axis=1).all()  # The second sentence of every pair.
    last = loop.train_and_evaluate(cfg, str(tmp_path / 'run'))
  expected = {'pearson', 'spearman'} if task == 'glue/stsb' else {'accuracy', 'f1'}
  assert expected <= set(last['validation'])
  with open(tmp_path / 'run' / 'metrics.jsonl', encoding='utf-8') as f:
    train = [r for r in map(json.loads, f) if r['split'] == 'train']
  assert train and all(('accuracy' in r) == (task != 'glue/stsb') for r in train)
  if task == 'glue/stsb':  # Regression reports no accuracy, in training or evaluation.
    assert batch['label'].dtype == np.float32 and 'accuracy' not in last['validation']


def test_training_and_evaluation_score_an_example_alike():
  """One prediction and one loss: training's accuracy and loss over a batch equal what
  evaluation's metrics read from the same outputs, a tie going to the first class in both,
  against a float64 numpy reference."""
  logits = np.array([[1.0, 1.0, 0.0], [0.5, 2.0, 2.0], [3.0, -1.0, 0.0], [0.0, 0.0, 4.0]],
                    np.float32)
  labels = np.array([1, 1, 0, 0], np.int32)
  task = tasks.Classification()
  prediction, loss, _ = task.scored(logits, labels)
  expected = logits.astype(np.float64).argmax(-1)  # numpy's argmax: the first of tied ones.
  np.testing.assert_array_equal(prediction, expected)
  np.testing.assert_array_equal(expected, [0, 1, 0, 2])
  logp = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
  np.testing.assert_allclose(loss, -logp[np.arange(4), labels], rtol=1e-6)
  # Training's sums, through the model call replaced by these logits.
  batch = {'label': labels, 'weight': np.ones(4, np.float32),
           'inputs_segment_ids': np.ones((4, 3), np.int32)}
  task.logits = lambda model, batch, key=None: logits
  sums = task.sums(None, batch)
  report = metrics.classification_report(('accuracy',), labels, np.asarray(prediction))
  assert float(sums['correct']) / 4 == report['accuracy'] == 0.5
  assert float(sums['loss_sum']) / 4 == pytest.approx(float(np.mean(loss)), rel=1e-6)
  regression = tasks.Classification(regression=True)
  regression.logits = lambda model, batch, key=None: logits[:, :1]
  sums = regression.sums(None, {**batch, 'label': np.array([1.0, 0.0, 3.0, 0.5], np.float32)})
  assert 'correct' not in sums
  assert float(sums['loss_sum']) == pytest.approx(0.0 + 0.25 + 0.0 + 0.25)


def test_sentence_pair_task_with_one_sentence_and_bad_labels(tmp_path):
  cfg = test_config._shrink(classify.get_config('glue/mrpc'))  # pylint: disable=protected-access
  cfg.data.update(data_dir=str(tmp_path / 'tfds'), vocab_size=64, text_keys=('sentence1',))
  with offline.mock_data(num_examples=24):
    with pytest.raises(errors.ConfigError, match='sentence-pair task'):
      loop.train_and_evaluate(cfg, str(tmp_path / 'a'))
    mnli = test_config._shrink(classify.get_config('glue/mnli'))  # pylint: disable=protected-access
    mnli.data.update(data_dir=str(tmp_path / 'tfds'), vocab_size=64)
    matched = pipeline.load_sources(mnli.data, splits=mnli.eval.splits)
    assert len(matched['validation']) and len(matched['validation_mismatched'])
    mnli.model.num_classes = 2  # MNLI has 3.
    with pytest.raises(errors.ConfigError, match='num_classes=3'):
      loop.train_and_evaluate(mnli, str(tmp_path / 'b'))
  assert not os.path.exists(tmp_path / 'a') and not os.path.exists(tmp_path / 'b')
  bad = test_config.get_config('classify')
  bad.eval.metrics = ('pearson',)
  with pytest.raises(errors.ConfigError, match='do not apply to classification'):
    resolve.validate(bad)
  mlm = test_config.get_config('mlm')
  mlm.init_from = '/tmp/x'
  with pytest.raises(errors.ConfigError, match="continues a causal LM, not a 'mlm' model"):
    resolve.validate(mlm)
