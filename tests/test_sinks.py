"""roformer/sinks.py and scripts/attention_sinks.py: the weight on the row's first token,
against hand-computed values and closed forms of attention with no query-key term."""

import json
import os
import shutil

import jax
import numpy as np
import processes
import pytest
from flax import nnx

from configs import synthetic
from roformer import loop
from roformer import resolve
from roformer import saved_config
from roformer import sharding
from roformer import sinks
from roformer import trainer as trainer_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADS = 4


def tiny(kind: str):
  """configs/synthetic.py:copy, 2 layers of 4 heads, 2 steps."""
  config = synthetic.get_config(f'copy,{kind}')
  config.data.seq_len = 16
  config.data.synthetic.eval_examples = 16
  config.model.update(d_model=32, d_ff=64, num_heads=HEADS)
  config.mesh.num_devices = 1
  config.train.update(batch_size=8, steps=2, warmup_steps=1, eval_every=2, checkpoint_every=2,
                      eval_batches=1)
  config.eval.update(batch_size=8, length_multipliers=(1,))
  return config


@pytest.fixture(scope='module')
def workdirs(tmp_path_factory):
  """Trained copy runs: rope at seeds 0 and 1 (one label), alibi at seed 0."""
  root = tmp_path_factory.mktemp('sinks')
  out = {}
  for kind, seed in (('rope', 0), ('rope', 1), ('alibi', 0)):
    config = tiny(kind)
    config.seed = seed
    out[kind, seed] = str(root / f'copy,{kind},seed={seed}')
    loop.train_and_evaluate(config, out[kind, seed])
  return out


def test_first_token_sums_counts_only_queries_that_see_the_first_token():
  probs = np.zeros((1, 2, 4, 4), np.float32)
  probs[0, 0, 1:, 0] = [0.5, 0.2, 0.9]
  probs[0, 1, 1:, 0] = [0.3, 0.1, 0.7]
  segments = np.array([[1, 1, 1, 2]])  # Query 3 is in another document: not counted.
  got = jax.device_get(sinks.first_token_sums(probs, segments))
  np.testing.assert_allclose(got['mass'], [0.5 + 0.2, 0.3 + 0.1], rtol=1e-6)
  np.testing.assert_allclose(got['uniform'], 1 / 2 + 1 / 3, rtol=1e-6)
  assert got['queries'] == 2
  got = jax.device_get(sinks.first_token_sums(probs, None))  # One document: all of them.
  np.testing.assert_allclose(got['mass'], [1.6, 1.1], rtol=1e-6)
  np.testing.assert_allclose(got['uniform'], 1 / 2 + 1 / 3 + 1 / 4, rtol=1e-6)
  got = jax.device_get(sinks.first_token_sums(probs, None, window=2))  # Only query 1 sees it.
  np.testing.assert_allclose(got['mass'], [0.5, 0.3], rtol=1e-6)
  np.testing.assert_allclose(got['uniform'], 1 / 2, rtol=1e-6)
  got = jax.device_get(sinks.first_token_sums(probs, None, sees_itself=False))  # Keys j < i.
  np.testing.assert_allclose(got['uniform'], 1 + 1 / 2 + 1 / 3, rtol=1e-6)


def _no_query_key_term(params):
  """The parameters with every layer's query and key projections zeroed: q.k = 0."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  def zero(path, value):
    name = sharding.path_str(path)
    if 'qkv' not in name:
      return value
    value = np.array(value)
    d = value.shape[-1] // 3  # Columns [q | k | v] (the heads split as 3 x heads).
    value[..., :2 * d] = 0
    return value
  return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params),
                                      [zero(p, v) for p, v in flat])


def _measured(workdir, zero_qk=True, **model):
  """sinks.measure on the run's validation batches, with `model` fields changed (ones that add
  no parameters) and, by default, no query-key term."""
  trainer, params, batches = _prepared(workdir, **model)
  if zero_qk:
    params = _no_query_key_term(params)
  return sinks.measure(trainer.saved_graphdef, trainer.saved_params(params), trainer.task,
                       batches), batches


def _prepared(workdir, **model):
  """(trainer, restored params, validation batches of 8 rows) of the run, with `model` fields
  changed."""
  run = resolve.for_evaluation(saved_config.load(workdir), workdir, None, ('validation',))
  run.config.model.update(model)
  trainer = trainer_lib.Trainer(run.config, run.mesh)
  params = trainer_lib.restore_params(trainer, run.workdir, run.step)
  batches = list(trainer.task.batches(run.config, run.sources['validation'], run.tokenizer,
                                      train=False, batch_size=8))
  return trainer, params, batches


def _reference(batches, slope_of_head, window=0):
  """float64: query slot i of slot 0's document (i < window, if any) puts
  exp(-m i) / sum_{j<=i} exp(-m j) on key 0 (uniform for m = 0), averaged over those queries
  of every row."""
  per_head = []
  for m in slope_of_head:
    total = count = 0.0
    for batch in batches:
      seg = np.asarray(batch['inputs_segment_ids'])
      for row in seg:
        for i in range(1, window or len(row)):
          if row[0] > 0 and row[i] == row[0]:
            total += np.exp(-m * i) / np.exp(-m * np.arange(i + 1)).sum()
            count += 1
    per_head.append(total / count)
  return np.array(per_head)


def test_without_a_query_key_term_rope_attends_uniformly(workdirs):
  got, batches = _measured(workdirs['rope', 0])
  want = _reference(batches, [0.0] * HEADS)
  for layer in got.per_head:
    np.testing.assert_allclose(layer, want, rtol=1e-5)
  np.testing.assert_allclose(got.uniform, want[0], rtol=1e-5)


def test_without_a_query_key_term_alibi_gives_its_closed_form(workdirs):
  got, batches = _measured(workdirs['alibi', 0])
  slopes = [2.0 ** (-8.0 * (h + 1) / HEADS) for h in range(HEADS)]  # Press et al., 4 heads.
  want = _reference(batches, slopes)
  for layer in got.per_head:
    np.testing.assert_allclose(layer, want, rtol=1e-5)
  assert want[-1] > want[0]  # The flattest slope keeps the most on the far first token.


def test_a_sliding_window_counts_only_the_queries_it_lets_see_the_first_token(workdirs):
  got, batches = _measured(workdirs['rope', 0], layer_windows=[4])
  want = _reference(batches, [0.0] * HEADS, window=4)
  for layer in got.per_head:
    np.testing.assert_allclose(layer, want, rtol=1e-5)
  np.testing.assert_allclose(got.uniform, want[0], rtol=1e-5)


def test_a_scanned_stack_measures_as_its_layers_one_by_one(workdirs):
  looped, _ = _measured(workdirs['rope', 0], zero_qk=False)
  scanned, _ = _measured(workdirs['rope', 0], zero_qk=False, scan_layers=True)
  np.testing.assert_allclose(scanned.per_head, looped.per_head, rtol=1e-5)
  trainer, params, _ = _prepared(workdirs['rope', 0], scan_layers=True)
  with pytest.raises(ValueError, match='blocks as a loop'):  # Stacked, layers are not apart.
    sinks.record(nnx.merge(trainer.graphdef, params))
  assert (looped.per_head > 0).all()


def test_recording_leaves_the_models_loss_unchanged(workdirs):
  workdir = workdirs['rope', 0]
  config = saved_config.load(workdir)
  run = resolve.for_evaluation(config, workdir, None, ('validation',))
  trainer = trainer_lib.Trainer(run.config, run.mesh)
  params = trainer_lib.restore_params(trainer, run.workdir, run.step)
  batch = next(iter(trainer.task.batches(run.config, run.sources['validation'], run.tokenizer,
                                         train=False, batch_size=8)))
  def loss(record):
    model = nnx.merge(trainer.graphdef, params)
    if record:
      sinks.record(model)
    sums = trainer.task.eval_sums(model, batch)
    return float(sums['loss_sum'] / sums['weight'])
  assert loss(True) == pytest.approx(loss(False), rel=1e-6)


def _script(*args):
  return processes.run(['scripts/attention_sinks.py', *args], cwd=REPO)


def test_script_groups_seeds_and_writes_its_table(workdirs, tmp_path):
  out = tmp_path / 'out'
  proc = _script(f'--out={out}', *[f'--workdir={workdirs[k]}' for k in
                                    (('rope', 0), ('rope', 1), ('alibi', 0))])
  assert proc.returncode == 0, proc.stderr[-3000:]
  runs = json.loads((out / 'sinks.json').read_text())
  assert [r['label'] for r in runs] == ['copy,rope', 'copy,rope', 'copy,alibi']
  for r in runs:
    heads = np.array(r['per_head'])
    assert heads.shape == (2, HEADS) and ((heads >= 0) & (heads <= 1)).all()
    np.testing.assert_allclose(r['mass'], heads.mean(axis=1), rtol=1e-6)
    assert r['queries'][0] == r['queries'][1] > 0
    assert r['made_with']['backend'] == 'cpu' and 'jax' in r['made_with']['packages']
  rope = np.array([runs[0]['mass'], runs[1]['mass']])
  table = (out / 'sinks.md').read_text()
  cells = ' | '.join(f'{m:.3f} ± {s:.3f}' for m, s in zip(rope.mean(0), rope.std(0, ddof=1)))
  assert f'| copy,rope | 2 | {cells} |' in table
  assert '| copy,alibi | 1 |' in table
  assert (out / 'sinks.png').stat().st_size > 0


@pytest.mark.parametrize('case,says', [('missing', 'no config.json'), ('favor', 'FAVOR+'),
                                       ('differential', 'differential'),
                                       pytest.param('mlm', 'measured for causal LMs. Fix: give '
                                                    'causal_lm', marks=pytest.mark.slow),
                                       ('twice', 'names already')])
def test_script_refuses_what_it_cannot_measure_with_one_line(case, says, workdirs, tmp_path):
  workdir = str(tmp_path / 'run')
  if case == 'missing':
    os.makedirs(workdir)
  elif case == 'twice':  # The same run as the first --workdir, by another path.
    os.symlink(workdirs['rope', 1], workdir)
  else:  # A trained run, so that only this case's check can refuse it.
    shutil.copytree(workdirs['rope', 0], workdir)
    config = saved_config.load(workdir)
    if case == 'favor':
      config.model.attention.kind = 'favor'
    elif case == 'mlm':
      config.model.type = 'mlm'
    else:
      config.model.attention.differential = True
    saved_config.save(config, workdir)
  proc = _script(f'--out={tmp_path / "out"}', f'--workdir={workdirs["rope", 1]}',
                 f'--workdir={workdir}')
  assert proc.returncode == 1
  assert 'Traceback' not in proc.stderr
  lines = [l for l in proc.stderr.splitlines() if l.startswith('error:')]
  assert len(lines) == 1 and f'--workdir={workdir!r}' in lines[0] and says in lines[0]
  assert not (tmp_path / 'out').exists()  # Refused before anything was measured or written.


def test_seeds_of_one_model_share_one_evaluation_pass_and_measure_as_alone(workdirs, monkeypatch):
  """The script keys its compiled passes by sinks.same_model (the config without the seed): the
  two rope seeds share one (traced once for both), alibi gets its own, and a shared pass
  measures the second seed exactly as a pass of its own does."""
  def config(w):
    return resolve.for_evaluation(saved_config.load(w), w, None, ('validation',)).config
  keys = {k: sinks.same_model(config(w)) for k, w in workdirs.items()}
  assert keys['rope', 0] == keys['rope', 1] != keys['alibi', 0]

  (t0, p0, b0), (t1, p1, b1) = _prepared(workdirs['rope', 0]), _prepared(workdirs['rope', 1])
  alone = sinks.measure(t1.graphdef, p1, t1.task, b1)
  traces = []
  record = sinks.record
  monkeypatch.setattr(sinks, 'record', lambda model: traces.append(1) or record(model))
  shared = sinks.evaluation_pass(t0.graphdef, t0.task)
  sinks.measure(t0.graphdef, p0, t0.task, b0, step=shared)
  second = sinks.measure(t1.graphdef, p1, t1.task, b1, step=shared)
  assert len(traces) == 3  # Each measure's refusal check, and one trace for both runs.
  np.testing.assert_array_equal(second.per_head, alone.per_head)
  np.testing.assert_array_equal(second.queries, alone.queries)


def test_the_same_run_given_twice_by_the_same_path_is_refused(workdirs, tmp_path):
  """Equal paths (argparse may hand them over as one string object) are one run."""
  same = str(workdirs['rope', 0])
  proc = _script(f'--out={tmp_path / "out"}', f'--workdir={same}', f'--workdir={same}')
  assert proc.returncode == 1 and 'names already' in proc.stderr
  assert not (tmp_path / 'out').exists()
