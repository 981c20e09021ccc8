"""eval.py's results file: an evaluation of other splits or lengths of the same checkpoint and
settings adds to it instead of dropping what was scored before, one that would replace another
checkpoint's or other settings' results is refused, and a classifier's splits are chosen
by config.eval.splits, never silently by --splits."""

import importlib
import json

import pytest

from configs import classify
from roformer import cli
from roformer import saved_config

eval_script = importlib.import_module('eval')


def results(step, splits, overrides=()):
  return {'step': step, 'position': 'rope', 'train_seq_len': 64, 'overrides': list(overrides),
          'splits': {s: {'lengths': [{'length': 64, 'loss': float(i + 1)}]}
                     for i, s in enumerate(splits)}}


def test_fewer_splits_of_the_same_checkpoint_and_settings_add_to_the_file(tmp_path):
  path = tmp_path / 'eval_results.json'
  path.write_text(json.dumps(results(20, ['validation', 'test'])))
  merged = eval_script.with_earlier_scores(str(path), results(20, ['validation']))
  assert list(merged['splits']) == ['validation', 'test']
  assert merged['splits']['test'] == results(20, ['validation', 'test'])['splits']['test']
  classifier = eval_script.with_earlier_scores(  # Which splits a classifier scores aside.
      str(path), results(20, ['train'], ['eval.splits: (...) vs (...)']))
  assert list(classifier['splits']) == ['validation', 'test', 'train']
  # Another checkpoint, or other settings: the file describes this evaluation alone.
  other_step = eval_script.with_earlier_scores(str(path), results(30, ['validation']))
  assert list(other_step['splits']) == ['validation']
  other = results(20, ['validation'], ['eval.max_batches: 0 vs 2'])
  assert eval_script.with_earlier_scores(str(path), other) == other
  path.write_text('{"step": 2')  # Damaged: replaced.
  assert eval_script.with_earlier_scores(str(path), other) == other


def test_other_lengths_of_the_same_checkpoint_and_settings_add_to_the_file(tmp_path):
  """Evaluated at 1x and 2x, then at 2x and 4x at another commit: the file holds the three
  lengths in order, the 2x row the newer one's, no override naming the lengths (its rows say
  what was scored), and what each evaluation ran on, the earlier first; nothing is refused."""
  path = tmp_path / 'eval_results.json'
  row = lambda length, loss: {'length': length, 'loss': loss}
  ran_on = lambda commit, lengths: [{'splits': ['validation'], 'lengths': lengths,
                                     'commit': commit, 'packages': {'jax': '0.10.2'}}]
  first = {**results(20, []), 'splits': {'validation': {'lengths': [row(64, 1.0), row(128, 2.0)],
                                                        'unigram_loss': 5.0}},
           'environments': ran_on('abc1234', [64, 128])}
  path.write_text(json.dumps(first))
  later = {**results(20, [], ['eval.length_multipliers: (1, 2) vs (2, 4)']),
           'splits': {'validation': {'lengths': [row(128, 2.5), row(256, 3.0)],
                                     'unigram_loss': 5.0}},
           'environments': ran_on('def5678+changes', [128, 256])}
  assert eval_script.lost_by_writing(
      str(path), {k: v for k, v in later.items() if k != 'splits'}) == ''
  merged = eval_script.with_earlier_scores(str(path), later)
  assert merged['splits']['validation'] == {
      'lengths': [row(64, 1.0), row(128, 2.5), row(256, 3.0)], 'unigram_loss': 5.0}
  assert merged['overrides'] == []
  assert merged['environments'] == (ran_on('abc1234', [64, 128])
                                    + ran_on('def5678+changes', [128, 256]))


def test_each_evaluation_whose_scores_the_file_keeps_keeps_what_it_ran_on(tmp_path):
  """Merged, the file keeps one `environments` entry per evaluation that scored a row of it: an
  earlier one whose every split and length was scored again goes; scores written without a
  readable record (before evaluations kept one, or beside a damaged one) stand as one
  `unrecorded` entry naming their rows, until those are scored again."""
  path = tmp_path / 'eval_results.json'
  rows = lambda *lengths: {'lengths': [{'length': n, 'loss': 1.0} for n in lengths]}
  entry = lambda commit, splits, lengths=(): {
      'splits': splits, **({'lengths': list(lengths)} if lengths else {}), 'commit': commit,
      'packages': {}, 'host': {}, 'variables': {}}
  def merged(earlier_splits, earlier_environments, splits, environments):
    earlier = {**results(20, []), 'splits': earlier_splits}
    if earlier_environments is not None:
      earlier['environments'] = earlier_environments
    path.write_text(json.dumps(earlier))
    now = {**results(20, []), 'splits': splits, 'environments': environments}
    return eval_script.with_earlier_scores(str(path), now)['environments']
  both = {'validation': rows(64, 128), 'test': rows(64, 128)}
  a, b = entry('a', ['validation', 'test'], [64, 128]), entry('b', ['validation'], [64, 128])
  assert merged(both, [a], {'validation': rows(64, 128)}, [b]) == [a, b]  # a's test rows.
  c = entry('c', ['validation', 'test'], [64, 128])
  assert merged(both, [a, b], both, [c]) == [c]  # The same evaluation again: c's rows all.
  # A classifier's entries name splits alone.
  scores = {'validation': {'accuracy': 0.5}, 'test': {'accuracy': 0.5}}
  d, e = entry('d', ['validation', 'test']), entry('e', ['test'])
  assert merged(scores, [d], {'test': {'accuracy': 0.6}}, [e]) == [d, e]
  assert merged(scores, [d], scores, [entry('f', ['validation', 'test'])])[0]['commit'] == 'f'
  # No record, or a damaged one: the earlier rows stand unrecorded until scored again.
  unrecorded = {'unrecorded': True, 'splits': ['test', 'validation'], 'lengths': [64, 128]}
  for damaged in (None, {'a': 1}, [a, {**b, 'host': 'Xeon'}], [a, 'b'], [{**a, 'splits': 5}],
                  [{**a, 'lengths': 64}], [{**a, 'splits': [None]}], [{**a, 'splits': 'test'}],
                  [{**a, 'lengths': [True]}]):
    assert merged(both, damaged, {'validation': rows(64, 128)}, [b]) == [unrecorded, b]
    assert merged(both, damaged, both, [c]) == [c]
  # An entry every row of which later entries scored again goes, whichever scored them.
  t = entry('t', ['test'], [64, 128])
  assert merged(both, [a, b], {'test': rows(64, 128)}, [t]) == [b, t]
  # Unrecorded splits scored at other lengths name only their own rows.
  uneven = {'validation': rows(64, 128), 'test': rows(64)}
  assert merged(uneven, None, {'validation': rows(64, 128)}, [b]) == [
      {'unrecorded': True, 'splits': ['test'], 'lengths': [64]}, b]
  assert merged(uneven, None, both, [c]) == [c]


def test_results_of_a_later_checkpoint_or_other_settings_are_not_replaced_silently(tmp_path):
  """What eval.py checks before it computes anything: writing over the evaluation of a later
  checkpoint, or of the same checkpoint under other settings, would lose it (eval.py refuses
  unless --replace); an earlier checkpoint's evaluation, the same settings (merged) or no file
  lose nothing."""
  path = tmp_path / 'eval_results.json'
  header = lambda step, overrides=(): {k: v for k, v in results(step, [], overrides).items()
                                       if k != 'splits'}
  assert eval_script.lost_by_writing(str(path), header(20)) == ''  # No file.
  path.write_text(json.dumps(results(20, ['validation', 'test'])))
  assert eval_script.lost_by_writing(str(path), header(20)) == ''  # Merged.
  assert eval_script.lost_by_writing(str(path), header(30, ['eval.max_batches: 0 vs 2'])) == ''
  assert eval_script.lost_by_writing(str(path), header(10)) == (
      'the evaluation of a later checkpoint (step 20; validation, test)')
  assert eval_script.lost_by_writing(str(path), header(20, ['eval.max_batches: 0 vs 2'])) == (
      'the evaluation of the same checkpoint (step 20; validation, test) under other settings '
      "(overrides: [] vs ['eval.max_batches: 0 vs 2']; there vs now)")
  path.write_text('{"step": 2')  # Damaged: nothing to lose.
  assert eval_script.lost_by_writing(str(path), header(1)) == ''


def test_a_classifiers_splits_given_as_splits_are_refused_naming_its_field(tmp_path):
  saved_config.save(classify.get_config('rotten_tomatoes'), str(tmp_path))
  args = eval_script.parser().parse_args(['--workdir', str(tmp_path), '--splits', 'train'])
  with pytest.raises(cli.UsageError, match=r'--splits=train is for language-model and '
                     r'translation runs: .* is a classifier, which evaluates config.eval.splits. '
                     r"Fix: --config.eval.splits=\"\('train',\)\""):
    eval_script.main(args)


def test_a_label_field_of_text_is_refused_as_such_before_training():
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from roformer import tasks  # pylint: disable=import-outside-toplevel
  config = classify.get_config('rotten_tomatoes')
  config.data.label_key = 'play'
  sources = {'train': [{'text': b'a', 'play': b'Antony and Cleopatra'}] * 3}
  with pytest.raises(errors.ConfigError, match="label_key='play' of 'rotten_tomatoes' holds text "
                     r"\(e.g. 'Antony and Cleopatra'\), not class ids"):
    tasks.for_config(config).check_data(config, sources)


def test_init_from_a_runs_checkpoints_folder_names_the_run(tmp_path):
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  saved_config.save(classify.get_config('rotten_tomatoes'), str(tmp_path))
  (tmp_path / 'checkpoints' / '20').mkdir(parents=True)
  config = classify.get_config('rotten_tomatoes')
  config.init_from = str(tmp_path / 'checkpoints' / '20')
  with pytest.raises(errors.ConfigError, match=rf"holds no config.json, so it is not the workdir "
                     rf"of a run \({tmp_path} is: did you mean it\?\)"):
    resolve.take_from_source(config)


def test_a_misspelt_split_is_named_with_the_splits_there_are(data_dir):
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from roformer.data import pipeline  # pylint: disable=import-outside-toplevel
  config = classify.get_config('rotten_tomatoes')
  config.data.data_dir = data_dir
  with pytest.raises(errors.ConfigError, match="'train2' is not a split this project evaluates. "
                     'Fix: some of train, validation, test.$'):
    pipeline.load_sources(config.data, splits=('train2',))
  with pytest.raises(errors.ConfigError, match=r"several as a tuple: --config.eval.splits="):
    pipeline.load_sources(config.data, splits=('validation,test',))
  config.data.splits = {'validation': 'valid'}
  with pytest.raises(errors.ConfigError, match=r"has no split 'valid' for validation \(its "
                     r'splits: test, train, validation\)'):
    pipeline.load_sources(config.data, splits=('validation',))
