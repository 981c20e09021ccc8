"""scripts/generate.py and roformer.generation on a tiny trained causal LM: what it prints, and
one clear error (naming the flag, no traceback) for each bad input."""

import json
import os
import re
import shutil

import processes
import pytest

from configs import test as test_config
from roformer import errors
from roformer import evaluate
from roformer import generation
from roformer import loop
from roformer import saved_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LENGTH = 32  # The learned position table: prompt tokens + max_new_tokens must fit in it.


@pytest.fixture(scope='module')
def lm_workdir(tmp_path_factory, data_dir):
  """A causal LM with `learned` positions (a scheme with a longest position), 2 steps."""
  cfg = test_config.get_config('learned')
  cfg.data.data_dir = data_dir
  cfg.model.position.learned.max_length = MAX_LENGTH
  cfg.mesh.num_devices = 1
  cfg.train.update(steps=2, eval_every=2, checkpoint_every=2)
  cfg.eval.update(length_multipliers=(1,))
  workdir = str(tmp_path_factory.mktemp('generate') / 'lm')
  loop.train_and_evaluate(cfg, workdir)
  return workdir


def _script(*args):
  # The test process's environment, XLA_FLAGS included: generate.py decodes on one device
  # anyway, and the same flags let it load what this process compiled from the shared
  # compilation cache (conftest.py).
  return processes.run(['scripts/generate.py', *args], cwd=REPO)


@pytest.mark.slow  # generate.py in its own process: about 10 s.
def test_script_prints_each_sample_of_each_prompt_as_the_library_does(lm_workdir):
  prompts = ['ROMEO:', 'To be']
  args = dict(max_new_tokens=8, temperature=1.0, seed=3, num_samples=2)
  expected = generation.run(lm_workdir, prompts, sampling=generation.Sampling(**args))
  proc = _script(f'--workdir={lm_workdir}', *[f'--prompt={p}' for p in prompts],
                 *[f'--{k}={v}' for k, v in args.items()])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'Traceback' not in proc.stderr
  assert proc.stdout.rstrip('\n') == expected
  blocks = expected.split('\n\n')
  headers = [f'=== prompt {p}/2, sample {s}/2 ===' for p in (1, 2) for s in (1, 2)]
  assert [b.split('\n', 1)[0] for b in blocks] == headers
  bodies = [b.split('\n', 1)[1] for b in blocks]
  for body, prompt in zip(bodies, ['ROMEO:'] * 2 + ['To be'] * 2):
    assert body.startswith(prompt) and len(body) > len(prompt)  # The prompt, then new text.
  assert bodies[0] != bodies[1]  # Two samples of 8 tokens from 512.


def test_an_unreadable_checkpoint_is_one_line_and_nothing_after_it(lm_workdir, tmp_path):
  """generate.py meeting a damaged checkpoint while orbax's threads run: the whole output is
  the one error line naming the step and the fix, no traceback at exit."""
  damaged = str(tmp_path / 'lm')
  shutil.copytree(lm_workdir, damaged)
  with open(os.path.join(damaged, 'checkpoints', '2', 'state', '_METADATA'), 'w') as f:
    f.write('{"tree')
  proc = _script(f'--workdir={damaged}', '--prompt=ROMEO:', '--max_new_tokens=2')
  assert proc.returncode == 1 and proc.stdout == ''
  assert proc.stderr.startswith('error: the checkpoint at step 2 in ') and proc.stderr.count(
      '\n') == 1, proc.stderr[-3000:]
  assert 'cannot be read' in proc.stderr and 'restore that directory from a copy' in proc.stderr
  assert 'available' not in proc.stderr  # No other step to name.


@pytest.mark.parametrize('field,value,message', [
    ('temperature', -1.0, '--temperature=-1.0 must be >= 0'),
    ('top_p', 0.0, r'--top_p=0.0 must be in \(0, 1\]'),
    ('top_p', 1.5, r'--top_p=1.5 must be in \(0, 1\]'),
    ('top_k', -2, '--top_k=-2 must be >= 0'),
    ('max_new_tokens', 0, '--max_new_tokens=0 must be >= 1'),
    ('num_samples', 0, '--num_samples=0 must be >= 1'),
])
def test_bad_sampling_flags_name_the_flag(field, value, message):
  with pytest.raises(errors.ConfigError, match=message):
    generation.run('/nonexistent', ['ROMEO:'],
                   sampling=generation.Sampling(**{field: value}))


def test_missing_or_empty_prompts_are_refused(tmp_path):
  blank = tmp_path / 'blank.txt'
  blank.write_text('Hello.\n\nWorld.\n', encoding='utf-8')
  for prompts, input_file, message in [
      ([], None, 'nothing to generate from.*--prompt.*--input'),
      (['ROMEO:', '  '], None, '--prompt 2 is empty'),
      ([], str(blank), r"--input='.*blank.txt' line 2 is empty"),
      (['ROMEO:'], str(tmp_path / 'missing.txt'), r"--input='.*missing.txt' cannot be read")]:
    with pytest.raises(errors.ConfigError, match=message):
      generation.run('/nonexistent', prompts, input_file=input_file)


def test_a_prompt_past_the_learned_table_is_refused(lm_workdir):
  """[bos] + 'ROMEO:' + 40 new tokens, or a long prompt + 1, exceed 32 positions."""
  with pytest.raises(errors.ConfigError, match=(
      r'--max_new_tokens=40 that is \d+ positions.*learned.max_length=32.*Fix: lower '
      '--max_new_tokens or shorten the prompt')):
    generation.run(lm_workdir, ['ROMEO:'], sampling=generation.Sampling(max_new_tokens=40))
  with pytest.raises(errors.ConfigError, match='prompt 2 is'):
    generation.run(lm_workdir, ['ROMEO:', 'ROMEO: ' * 30],
                   sampling=generation.Sampling(max_new_tokens=1))


@pytest.mark.parametrize('model_type', ['mlm', 'classifier'])
def test_masked_lm_and_classifier_workdirs_are_refused(lm_workdir, tmp_path, model_type):
  workdir = _copy_config(lm_workdir, tmp_path, type=model_type)
  with pytest.raises(errors.ConfigError, match=(
      f'holds a {model_type} model; scripts/generate.py serves causal_lm .*encoder_decoder')):
    generation.run(workdir, ['ROMEO:'])


def test_a_workdir_without_config_or_checkpoint_is_refused(lm_workdir, tmp_path):
  with pytest.raises(errors.ConfigError, match='config.json does not exist'):
    generation.run(str(tmp_path), ['ROMEO:'])
  with pytest.raises(errors.ConfigError, match='has no checkpoint.*Fix: train first'):
    generation.run(_copy_config(lm_workdir, tmp_path), ['ROMEO:'])
  with pytest.raises(errors.ConfigError, match=r'--step=7 has no checkpoint.*available: \[2\]'):
    generation.run(lm_workdir, ['ROMEO:'], step=7)


def test_script_reports_bad_input_in_one_line_without_traceback(lm_workdir, tmp_path):
  for args, message in [
      (['--temperature=-1'], 'error: --temperature=-1.0 must be >= 0.'),
      (['--workdir=' + _copy_config(lm_workdir, tmp_path, type='mlm')],
       'error: --workdir='),
  ]:
    proc = _script(f'--workdir={lm_workdir}', '--prompt=ROMEO:', *args)
    assert proc.returncode == 1
    assert 'Traceback' not in proc.stderr and proc.stdout == ''
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr[-2000:]


def _copy_config(workdir, tmp_path, **model):
  """A directory holding only `workdir`'s config.json and tokenizer, with model fields changed."""
  target = tmp_path / ('copy-' + '-'.join(f'{k}{v}' for k, v in model.items()))
  target.mkdir()
  with open(os.path.join(workdir, 'config.json'), encoding='utf-8') as f:
    config = json.load(f)
  config['model'].update(model)
  (target / 'config.json').write_text(json.dumps(config), encoding='utf-8')
  shutil.copy(os.path.join(workdir, 'tokenizer.model'), target / 'tokenizer.model')
  return str(target)


def test_a_continuation_ends_at_the_pretrained_tokenizers_eos(monkeypatch):
  """decode pads a finished row with id 0, a real token of most pretrained vocabularies (Llama
  3's '!'): the text stops at the eos instead of spelling out what follows it (here a word)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from roformer import decode  # pylint: disable=import-outside-toplevel
  from roformer.data import vocabularies  # pylint: disable=import-outside-toplevel
  tok = vocabularies.Pretrained(os.path.join(os.path.dirname(__file__), 'data', 'hf',
                                             'llama_linear_v4'))
  word = tok.encode(' thee')
  row = np.concatenate([word, [tok.eos_id], tok.encode(' rose')]).astype(np.int32)
  monkeypatch.setattr(decode, 'generate', lambda *a, **k: row[None])
  monkeypatch.setattr(generation.nnx, 'merge', lambda *a: None)
  out = generation.continue_prompt(None, None, tok, 'Shall I compare',
                                   generation.Sampling(max_new_tokens=len(row), num_samples=1))
  assert out == ['Shall I compare thee']


def test_an_evaluation_length_past_the_learned_table_is_skipped_with_its_reason(lm_workdir):
  """eval.py at 2x a 32-row learned table: that length is skipped, the row and the printed
  table saying why in full, without the fix for a new run (a trained table cannot grow)."""
  config = saved_config.load(lm_workdir)
  config.eval.update(length_multipliers=(1, 2), max_batches=1)
  results = evaluate.evaluate_workdir(config, lm_workdir, splits=('validation',))
  rows = results['splits']['validation']['lengths']
  assert 'skipped' not in rows[0] and rows[1]['length'] == 64
  reason = ('sequence length 64 is longer than the learned position table '
            '(config.model.position.learned.max_length=32).')
  assert rows[1]['skipped'] == reason
  assert f'validation       64   skipped: {reason}' in evaluate.format_results(results)


def test_a_trained_run_without_its_tokenizer_is_refused_with_the_copy_to_put_back(lm_workdir,
                                                                                  tmp_path):
  """Its checkpoints' ids belong to the tokenizer train.py copied in: eval.py and generate.py
  refuse a workdir that lost it, naming the file and the cached copy to put back, rather than
  reading the dataset's cache (which other data would have retrained) or saying the run is
  not a trained one."""
  lost = str(tmp_path / 'lm')
  shutil.copytree(lm_workdir, lost)
  os.remove(os.path.join(lost, 'tokenizer.model'))
  message = (rf"{re.escape(lost)}/tokenizer.model is missing: the run keeps there the tokenizer "
             r"its checkpoints were trained with. Fix: copy the one it was made from back \(cp '")
  with pytest.raises(errors.ConfigError, match=message):
    evaluate.evaluate_workdir(saved_config.load(lost), lost, splits=('validation',))
  with pytest.raises(errors.ConfigError, match=message):
    generation.open_workdir(lost)
