"""Reading the small files a run writes (config.json, eval_results*.json, metrics.jsonl) so
that a damaged one is named with its fix instead of a decoder's traceback. Light on purpose:
the sweep driver and the report read them without importing JAX."""

import contextlib
import errno
import json
import logging
import os
import re
import shutil

from roformer import errors
from roformer import killpoints

log = logging.getLogger('roformer')


# A run's record of the train documents its config.data files held (roformer/workdir.py).
TRAIN_DATA_FILE = 'train_data.json'
# The files an evaluation writes in a workdir (eval.py --out): eval_results.json, the run as
# trained; eval_results.NAME.json, a variant; or another eval_*.json (eval_passkey.json).
EVALUATION_FILE = re.compile(r'eval_[\w.,=+-]+\.json')


def checkpoint_steps(directory: str) -> list[int]:
  """The steps with a finished checkpoint in `directory`, from its listing alone (orbax writes
  a step under a temporary name and renames it to the step once written): for a process that
  must not start a JAX backend, which orbax's manager does (a sweep's driver on a GPU host,
  scripts/keep_records.py)."""
  if not os.path.isdir(directory):
    return []
  return sorted(int(name) for name in os.listdir(directory)
                if name.isdigit() and os.path.isdir(os.path.join(directory, name)))


def read_json(path: str, fix: str = '') -> dict:
  """The JSON object in `path`. A file that cannot be read, is not JSON (truncated, overwritten)
  or holds something other than an object raises DamagedFileError naming it and `fix` (by
  default: restore it, or delete it to have it written again)."""
  fix = fix or ('restore it from a copy, or delete it so that the step that writes it runs '
                'again')
  try:
    with open(path, encoding='utf-8') as f:
      value = json.load(f)
  except FileNotFoundError:
    raise
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
    raise errors.DamagedFileError(f'{path} cannot be read ({reason}). Fix: {fix}.') from None
  if not isinstance(value, dict):
    raise errors.DamagedFileError(f'{path} holds a JSON {type(value).__name__}, not an object '
                                  f'(damaged or not written by this project). Fix: {fix}.')
  return value


def current_config(workdir: str) -> dict:
  """The config a run trains under now: config.json (the run as it started) with the newest
  config.resume-STEP.json in its place when the run was resumed with changed settings (more
  steps, another schedule). What a run was started as stays in config.json; how long it runs,
  and so when it is finished, is the latest of these."""
  return read_json(current_config_path(workdir))


def resume_config_name(step: int | str) -> str:
  """The file in which a run resumed at `step` with changed settings records its config
  (`'*'`: the glob of every such file)."""
  return f'config.resume-{step}.json'


def current_config_path(workdir: str) -> str:
  """The path of current_config's file."""
  latest = os.path.join(workdir, 'config.json')
  resumed = []
  for name in os.listdir(workdir) if os.path.isdir(workdir) else ():
    middle = name[len('config.resume-'):-len('.json')]
    if middle.isdigit() and name == resume_config_name(int(middle)):
      resumed.append((int(middle), name))
  if resumed:
    latest = os.path.join(workdir, max(resumed)[1])
  return latest


def write_json_atomic(path: str, value, default=None) -> None:
  """Writes `value` as JSON to `path` through a temporary file renamed over it: a reader never
  sees half of it, whenever the write is cut. `default`: json.dump's, for other values."""
  write_text_atomic(path, json.dumps(value, indent=2, default=default))


def write_text_atomic(path: str, text: str) -> None:
  """Writes `text` to `path` through a temporary file renamed over it (see write_json_atomic),
  durably: the file's bytes and then the rename are forced to the disk (`durable_replace`)."""
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    killpoints.write(f, text, 'json.partial')  # f.write(text), or cut there by a test.
    sync(f)
  killpoints.reach('json.written')
  durable_replace(path + '.tmp', path)


def save_figure_atomic(fig, path: str, **savefig_kwargs) -> str:
  """matplotlib `fig` saved to `path` (its format from the extension; none: `path`.png, as
  matplotlib names it) as write_text_atomic writes text: through a temporary file renamed over
  it, which a failed save removes. Returns the path written."""
  if not os.path.splitext(path)[1]:
    path += '.png'
  temporary = path + '.tmp'
  try:
    with open(temporary, 'wb') as f:
      fig.savefig(f, format=os.path.splitext(path)[1][1:], **savefig_kwargs)
      sync(f)
  except BaseException:
    if os.path.exists(temporary):
      os.remove(temporary)
    raise
  durable_replace(temporary, path)
  return path


def sync(f) -> None:
  """Forces an open file's written bytes to the disk (a power loss after this keeps them)."""
  f.flush()
  os.fsync(f.fileno())


def sync_directory(path: str) -> None:
  """Forces a directory's entries (a rename or a new file in it) to the disk."""
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  except OSError as e:  # Some network and FUSE file systems cannot sync a directory.
    if e.errno != errno.EINVAL:
      raise
  finally:
    os.close(fd)


def sync_tree(root: str) -> None:
  """Forces `root` to the disk: a file, or a directory built in a staging place with every file
  and directory under it, before it is renamed into view."""
  if not os.path.isdir(root):
    with open(root, 'rb') as f:
      os.fsync(f.fileno())
    return
  for directory, _, names in os.walk(root):
    for name in names:
      with open(os.path.join(directory, name), 'rb') as f:
        os.fsync(f.fileno())
    sync_directory(directory)


def durable_replace(source: str, target: str) -> None:
  """os.replace(source, target), then the parent directory synced, so that after a power loss
  `target` is the new file or the old one. `source` must already be synced (`sync`,
  `sync_tree`): a rename can reach the disk before the data it names."""
  os.replace(source, target)
  sync_directory(os.path.dirname(os.path.abspath(target)))


def read_jsonl(path: str) -> list[dict]:
  """The records of a JSON-lines file. A line that does not parse (the last one of a write cut
  short by a full disk or a kill) is skipped with a warning naming the file and the line; the
  file itself is left as it is."""
  records = []
  with open(path, encoding='utf-8', errors='replace') as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        record = None
      if not isinstance(record, dict):
        log.warning('%s line %d is not a JSON record (a write cut short?); skipped.', path,
                    number)
        continue
      records.append(record)
  return records


def ends_with_newline(path: str) -> bool:
  """Whether `path` is empty or ends with a newline (else a write was cut short)."""
  if not os.path.exists(path) or not os.path.getsize(path):
    return True
  with open(path, 'rb') as f:
    f.seek(-1, os.SEEK_END)
    return f.read(1) == b'\n'


def append_record(path: str, record: dict, killpoint: str | None = None) -> None:
  """Appends `record` to the JSON-lines file `path` as one line and syncs it. A last line that a
  crash cut short is ended first, so that it is the only record lost (read_jsonl skips it).
  `killpoint` names the point a test may cut this write at (roformer/killpoints.py)."""
  text = json.dumps(record) + '\n'
  complete = ends_with_newline(path)
  with open(path, 'a', encoding='utf-8') as f:
    if killpoint:  # f.write, or cut there by a test.
      killpoints.write(f, text if complete else '\n' + text, killpoint)
    else:
      f.write(text if complete else '\n' + text)
    sync(f)


@contextlib.contextmanager
def staged_directory(directory: str):
  """A new directory beside `directory` to write into, synced and renamed to it once everything
  is written: a command that fails or is killed halfway leaves no `directory` that looks
  complete (a failure removes the staging directory; a kill leaves `DIR.partial-PID` at most),
  and a power loss after it leaves the whole one. `directory` may exist only empty."""
  staging = f'{directory}.partial-{os.getpid()}'
  shutil.rmtree(staging, ignore_errors=True)
  os.makedirs(staging)
  try:
    yield staging
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  sync_tree(staging)
  if os.path.isdir(directory):
    os.rmdir(directory)
  os.rename(staging, directory)
  sync_directory(os.path.dirname(os.path.abspath(directory)))
