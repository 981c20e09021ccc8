"""Translation end to end on the embedded en-de corpus, WMT by name, and its bad inputs."""

import json
import os
import shutil

from flax import nnx
import jax
import numpy as np
import offline
import pytest

from configs import translate
from roformer import errors
from roformer import evaluate
from roformer import generation
from roformer import loop
from roformer import metrics
from roformer import saved_config
from roformer import sharding
from roformer import tasks
from roformer import trainer as trainer_lib
from roformer import workdir as workdir_lib
from roformer.data import pipeline
from roformer.data import tokens as tokens_lib


def tiny(data_dir, **data):
  cfg = translate.get_config()
  cfg.data.data_dir = data_dir
  # The tokenizer from every 8th pair: a tenth of the time, the same 512 pieces' kind of text.
  cfg.data.update({'vocab_size': 512, 'seq_len': 48, 'tokenizer_documents': 3500, **data})
  cfg.model.update(num_layers=2, d_model=32, num_heads=4, d_ff=64)
  cfg.train.update(batch_size=8, steps=4, warmup_steps=1, log_every=2, eval_every=2,
                   eval_batches=1, checkpoint_every=2, learning_rate=3e-3)
  cfg.eval.update(batch_size=8, max_batches=1, bleu_sentences=8, bleu_sentences_test=8,
                  beam_size=2)
  return cfg


@pytest.fixture(scope='module')
def trained(tmp_path_factory, data_dir):
  workdir = str(tmp_path_factory.mktemp('translate') / 'run')
  last = loop.train_and_evaluate(tiny(data_dir), workdir)
  return workdir, last


def test_training_reports_bleu_and_keeps_the_best_checkpoint(trained):
  workdir, last = trained
  records = [r for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
             if r['split'] == 'validation']
  assert [r['step'] for r in records] == [2, 4] and all('bleu' in r for r in records)
  best_step = max(records, key=lambda r: r['bleu'])['step']  # First of equal scores.
  assert os.listdir(os.path.join(workdir, 'best')) == [str(best_step)]
  assert 0.0 <= last['validation']['bleu'] <= 100.0


def test_eval_decodes_each_split_and_writes_its_translations(trained):
  workdir, _ = trained
  cfg = saved_config.load(workdir)
  results = evaluate.evaluate_workdir(cfg, workdir)
  test = results['splits']['test']
  assert test['direction'] == 'en->de' and test['sentences'] == 8
  assert test['bleu_signature'].startswith('nrefs:1|case:mixed') and 'chrf' in test
  hyp = os.path.join(workdir, 'translations', 'test-step4.hyp.txt')
  ref = os.path.join(workdir, 'translations', 'test-step4.ref.txt')
  with open(hyp, encoding='utf-8') as f, open(ref, encoding='utf-8') as g:
    hyps, refs = f.read().splitlines(), g.read().splitlines()
  assert len(hyps) == len(refs) == 8 and all(refs)
  # The score is sacreBLEU of exactly these files.
  assert metrics.bleu_and_chrf(hyps, refs)['bleu'] == pytest.approx(test['bleu'])
  assert 0.0 <= test['copy_source_bleu'] < 10.0  # English copied as German scores near 0.
  assert test['hypotheses'] == 'translations/test-step4.hyp.txt'
  # Validation is decoded too, on the sentences training scores: the same BLEU at that step.
  validation = results['splits']['validation']
  logged = [r for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
            if r['split'] == 'validation' and r['step'] == 4]
  assert validation['sentences'] == 8 and validation['bleu'] == pytest.approx(logged[0]['bleu'])
  assert validation['hypotheses'] == 'translations/validation-step4.hyp.txt'
  json.dumps(results)  # Serialisable for eval_results.json.
  # A variant written to eval_results.b3.json (3 sentences) keeps the plain files whole.
  cfg.eval.bleu_sentences_test = 3
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  variant = evaluate.evaluate_resolved(resolve.for_evaluation(cfg, workdir),
                                       'eval_results.b3.json')
  assert variant['splits']['test']['hypotheses'] == 'translations/test-step4.b3.hyp.txt'
  with (open(hyp, encoding='utf-8') as f,
        open(hyp.replace('.hyp', '.b3.hyp'), encoding='utf-8') as g):
    assert len(f.read().splitlines()) == 8 and len(g.read().splitlines()) == 3


def test_generate_translates_each_prompt_and_input_line_as_eval_does(trained, tmp_path):
  """scripts/generate.py's library on a translation workdir: one line per --prompt, then per
  line of --input, equal to what evaluation's beam search (config.eval.beam_size and alpha, on
  the default mesh and batch) makes of the same sentences."""
  workdir, _ = trained
  cfg = saved_config.load(workdir)
  sources, tokenizer = workdir_lib.setup_data(cfg, splits=('test',), workdir=workdir)
  texts = [tokens_lib.as_text(sources['test'][i]['en']) for i in range(3)]
  trainer = trainer_lib.Trainer(cfg, sharding.make_mesh(cfg.mesh))
  params = trainer_lib.restore_params(trainer, workdir, trainer_lib.checkpoint_step(workdir))
  expected = trainer.task.translate(trainer.graphdef, params, texts, tokenizer,
                                    max_len=cfg.data.seq_len, beam_size=cfg.eval.beam_size,
                                    alpha=cfg.eval.alpha, batch_size=cfg.eval.batch_size)
  lines = tmp_path / 'input.txt'
  lines.write_text('\n'.join(texts[1:]) + '\n', encoding='utf-8')
  out = generation.run(workdir, texts[:1], input_file=str(lines))
  assert out.split('\n') == [e.replace('\n', ' ') for e in expected]
  # Sampling flags would change nothing here: refused, naming them and the beam search.
  with pytest.raises(errors.ConfigError, match=r'--temperature=0.5 --num_samples=3: sampling '
                     r'flags are for a causal LM; .*beam_size=.*Fix: drop them'):
    generation.run(workdir, texts[:1], sampling=generation.Sampling(temperature=0.5,
                                                                     num_samples=3))


def test_step_best_reads_the_best_checkpoint_after_it_rotates_out(trained, tmp_path):
  """--step=best (and the best step's number) restore the BLEU-best checkpoint from best/ once
  checkpoints/ no longer holds its step, with the parameters saved at that step; a workdir
  without best/ is refused naming the steps there are."""
  workdir, _ = trained
  best_step = int(os.listdir(os.path.join(workdir, 'best'))[0])
  cfg = saved_config.load(workdir)
  trainer = trainer_lib.Trainer(cfg, sharding.make_mesh(cfg.mesh))
  expected = trainer_lib.restore_params(trainer, workdir, best_step)  # From checkpoints/.
  rotated = str(tmp_path / 'rotated')
  shutil.copytree(workdir, rotated)
  shutil.rmtree(os.path.join(rotated, 'checkpoints', str(best_step)))
  assert trainer_lib.checkpoint_step(rotated, 'best') == best_step
  for step in ('best', best_step):
    got = trainer_lib.restore_params(trainer, rotated, trainer_lib.checkpoint_step(rotated, step))
    assert jax.tree.all(jax.tree.map(np.array_equal, nnx.to_pure_dict(got),
                                     nnx.to_pure_dict(expected)))
  assert evaluate.evaluate_workdir(cfg, rotated, 'best', splits=('test',))['step'] == best_step
  shutil.rmtree(os.path.join(rotated, 'best'))
  with pytest.raises(errors.ConfigError, match=r'--step=best: .* no best checkpoint.*available'):
    trainer_lib.checkpoint_step(rotated, 'best')
  with pytest.raises(errors.ConfigError, match=rf'--step={best_step} has no checkpoint'):
    trainer_lib.checkpoint_step(rotated, best_step)


def test_reverse_direction_and_vocabulary_mismatch(trained, data_dir):
  workdir, _ = trained
  cfg = saved_config.load(workdir)
  cfg.data.reverse = True
  with pytest.raises(errors.ConfigError, match='data.reverse: False vs True'):
    evaluate.evaluate_workdir(cfg, workdir)
  cfg = saved_config.load(workdir)
  cfg.data.vocab_size = 600
  with pytest.raises(errors.ConfigError, match='data.vocab_size: 512 vs 600'):
    evaluate.evaluate_workdir(cfg, workdir)
  assert pipeline.text_fields(tiny(data_dir, reverse=True).data) == [
      ('target_key', 'de'), ('source_key', 'en')]


def test_translation_needs_a_parallel_dataset(tmp_path, data_dir):
  cfg = tiny(data_dir, name='shakespeare')
  with pytest.raises(errors.ConfigError, match='needs a parallel dataset'):
    loop.train_and_evaluate(cfg, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()


def test_empty_source_sentence_is_refused():
  with pytest.raises(errors.ConfigError, match='empty source sentence'):
    tasks.Translation().translate(None, None, ['Hello.', '  '], None, max_len=8)


def test_wmt14_by_name_through_the_same_pipeline(tmp_path):
  cfg = tiny(str(tmp_path), name='wmt14_translate/de-en', vocab_size=64)
  with offline.mock_data(num_examples=12):
    sources = pipeline.load_sources(cfg.data, splits=('train', 'validation'))
    tok = pipeline.load_tokenizer(cfg.data, sources['train'])
    batch = next(iter(tasks.Translation().batches(cfg, sources['validation'], tok, train=False,
                                                  batch_size=4)))
  assert set(tasks.Translation.features) <= set(batch)
  seg = batch['targets_segment_ids']
  assert (seg == batch['decoder_inputs_segment_ids']).all() and seg.max() >= 1
  # Decoder inputs are the targets shifted right by one within each pair.
  for row in range(seg.shape[0]):
    for t in range(1, seg.shape[1]):
      if seg[row, t] and seg[row, t] == seg[row, t - 1]:
        assert batch['decoder_inputs'][row, t] == batch['targets'][row, t - 1]
