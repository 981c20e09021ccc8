"""Results and configs survive a power loss: each atomic write forces the new file's bytes to
the disk before its rename, and the rename (the parent directory) after it; a staged directory
is synced whole before it is renamed into view; a metrics record is synced once appended. Checked
by recording every os.fsync with the path it was given, in order."""

import os

import numpy as np
import pytest

from roformer import files
from roformer import metrics


@pytest.fixture
def synced(monkeypatch):
  """The paths os.fsync is given, in order, with each os.replace / os.rename between them."""
  events = []
  real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

  def fsync(fd):
    events.append(('fsync', os.readlink(f'/proc/self/fd/{fd}')))
    return real_fsync(fd)

  def replace(a, b):
    events.append(('rename', os.path.abspath(b)))
    return real_replace(a, b)

  def rename(a, b):
    events.append(('rename', os.path.abspath(b)))
    return real_rename(a, b)

  monkeypatch.setattr(os, 'fsync', fsync)
  monkeypatch.setattr(os, 'replace', replace)
  monkeypatch.setattr(os, 'rename', rename)
  return events


def test_an_atomic_json_write_syncs_the_file_then_renames_then_syncs_the_directory(
    tmp_path, synced):
  path = str(tmp_path / 'eval_results.json')
  files.write_json_atomic(path, {'loss': 1.5})
  assert synced == [('fsync', path + '.tmp'), ('rename', path), ('fsync', str(tmp_path))]
  assert files.read_json(path) == {'loss': 1.5}


def test_a_staged_directory_is_synced_whole_before_it_is_renamed_into_view(tmp_path, synced):
  staging = tmp_path / 'run.partial'
  (staging / 'checkpoints').mkdir(parents=True)
  (staging / 'config.json').write_text('{}')
  (staging / 'checkpoints' / 'data').write_bytes(b'x')
  files.sync_tree(str(staging))
  files.durable_replace(str(staging), str(tmp_path / 'run'))
  renamed = synced.index(('rename', str(tmp_path / 'run')))
  before = {path for _, path in synced[:renamed]}
  assert before == {str(staging), str(staging / 'checkpoints'), str(staging / 'config.json'),
                    str(staging / 'checkpoints' / 'data')}
  assert synced[renamed + 1:] == [('fsync', str(tmp_path))]


def test_a_metrics_record_is_synced_once_appended(tmp_path, synced):
  writer = metrics.MetricsWriter(str(tmp_path))
  writer.write(3, 'train', {'loss': np.float32(2.0)})
  writer.close()
  jsonl = [path for kind, path in synced if path.endswith('metrics.jsonl')]
  assert jsonl == [str(tmp_path / 'metrics.jsonl')]


def test_a_runs_start_is_synced_once_appended_and_ends_a_line_a_crash_cut(tmp_path, synced):
  """provenance.record_start appends as metrics.jsonl does: synced, and after a line cut short
  (a kill mid-write) it ends that line first, so that the cut line is the only one lost."""
  from roformer import provenance  # pylint: disable=import-outside-toplevel
  path = tmp_path / provenance.ENVIRONMENT_FILE
  path.write_text('{"step": 0, "commit": "abc1234"}\n{"step": 4, "comm')
  provenance.record_start(str(tmp_path), 8)
  assert [kind_path for kind_path in synced if kind_path[1] == str(path)] == [
      ('fsync', str(path))]
  assert [start['step'] for start in metrics.read_jsonl(str(path))] == [0, 8]


def test_a_reports_markdown_is_written_atomically_and_synced(tmp_path, synced):
  """scripts/report.py's report.md (what the docs link to) goes through the same durable write."""
  import shutil  # pylint: disable=import-outside-toplevel
  from scripts import report  # pylint: disable=import-outside-toplevel
  kept = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                      'results', 'options_2026-11-27', 'records')
  for seed in (0, 1):
    shutil.copytree(os.path.join(kept, f'flip_flop,rope,seed={seed}'),
                    tmp_path / f'flip_flop,rope,seed={seed}')
  assert report.main([str(tmp_path)]) == 0
  path = str(tmp_path / 'report.md')
  at = synced.index(('fsync', path + '.tmp'))
  assert synced[at + 1:at + 3] == [('rename', path), ('fsync', str(tmp_path))]
  pngs = sorted(p for p in os.listdir(tmp_path) if p.endswith('.png'))
  assert pngs and all(('rename', str(tmp_path / p)) in synced for p in pngs)  # Its plots too.


def test_a_figure_is_saved_whole_or_not_at_all(tmp_path, synced):
  """A plot is written as the JSON is (synced, then renamed over the old one); a save that
  fails halfway leaves the old file and no temporary one."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  from matplotlib import figure  # pylint: disable=import-outside-toplevel
  path = str(tmp_path / 'curves.png')
  fig = figure.Figure()
  fig.add_subplot().plot([0, 1], [1, 0])
  files.save_figure_atomic(fig, path)
  assert synced == [('fsync', path + '.tmp'), ('rename', path), ('fsync', str(tmp_path))]
  with open(path, 'rb') as f:
    first = f.read()
  assert first.startswith(b'\x89PNG\r\n')

  def fails_halfway(f, **kwargs):
    f.write(first[:100])
    raise OSError(28, 'No space left on device')
  fig.savefig = fails_halfway
  with pytest.raises(OSError, match='No space left'):
    files.save_figure_atomic(fig, path)
  with open(path, 'rb') as f:
    assert f.read() == first
  assert sorted(os.listdir(tmp_path)) == ['curves.png']
  del fig.savefig  # Matplotlib's own again. A name without an extension: PNG, as matplotlib
  assert files.save_figure_atomic(fig, str(tmp_path / 'bare')) == str(tmp_path / 'bare.png')
  assert (tmp_path / 'bare.png').read_bytes().startswith(b'\x89PNG')  # would name it.
