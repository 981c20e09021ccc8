"""tests/processes.py `run`: an entry point forked from the fork server (tests/forkserver.py)
behaves as the same command started as a plain subprocess."""

import os
import subprocess
import sys
import textwrap
import time

import processes
import pytest

_PROBE = textwrap.dedent('''\
    import json, os, sys
    import jax
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                      "main": __name__, "file": __file__, "flag": os.environ.get("PROBE"),
                      "devices": jax.device_count(), "stdin": sys.stdin.read()}))
    print("to stderr", file=sys.stderr)
    if os.environ.get("PROBE") == "raise":
        raise ValueError("probe failed")
    if os.environ.get("PROBE") == "interrupt":
        raise KeyboardInterrupt
    if os.environ.get("PROBE") == "kill":
        os.kill(os.getpid(), 9)
    sys.exit(int(os.environ.get("PROBE_STATUS", "0")))
    ''')


@pytest.fixture
def probe(tmp_path):
  (tmp_path / 'scripts').mkdir()
  path = tmp_path / 'scripts' / 'probe.py'
  path.write_text(_PROBE)
  return path


def _plain(args, cwd, env):
  return subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize('extra', [
    {},  # Exit status 0.
    {'PROBE': 'x', 'PROBE_STATUS': '3'},  # A status of its own, a variable of its own.
    {'PROBE': 'raise'},  # An uncaught exception: its traceback, status 1.
    {'PROBE': 'kill'},  # Ended by a signal: minus its number.
    {'PROBE': 'interrupt'},  # Ctrl-C uncaught: its traceback, then ended by SIGINT.
])
def test_a_forked_run_is_the_plain_subprocess_run(probe, tmp_path, extra):
  """Arguments, working directory, sys.path[0], __main__, the environment (XLA's device count
  included, read when JAX starts), empty stdin, the two streams apart and the exit status are
  those of `python SCRIPT ARGS` started on its own."""
  env = processes.env(devices=3, **extra)
  args = ['scripts/probe.py', '--flag=1', 'two words']
  forked = processes.run(args, cwd=tmp_path, env=env, timeout=120)
  plain = _plain(args, tmp_path, env)
  assert processes.forked(args, env)
  status = {'raise': 1, 'kill': -9, 'interrupt': -2}.get(extra.get('PROBE'),
                                                         int(extra.get('PROBE_STATUS', 0)))
  assert forked.returncode == plain.returncode == status
  assert forked.stdout == plain.stdout and '"devices": 3' in forked.stdout
  assert forked.stderr == plain.stderr
  assert plain.stderr.startswith('to stderr\n')
  if extra.get('PROBE') == 'raise':
    assert plain.stderr.endswith('ValueError: probe failed\n')


def test_a_variable_read_at_import_starts_a_plain_subprocess():
  """A run whose environment differs from the server's in a variable that JAX or Python reads
  when it starts is not forked (the server's imports have read theirs); one read when JAX starts
  its backend is the run's own."""
  args = ['train.py', '--help']
  assert processes.forked(args, processes.env(devices=1, ROFORMER_KILL_AT='',
                                              XLA_PYTHON_CLIENT_PREALLOCATE='false'))
  assert not processes.forked(args, processes.env(JAX_ENABLE_X64='1'))
  assert not processes.forked(args, processes.env(PYTHONHASHSEED='1'))
  assert not processes.forked(['-c', 'print(1)'], processes.env())


def test_a_variable_this_process_set_for_good_starts_the_server_again(monkeypatch, tmp_path):
  """A test that leaves a variable read at import set in this process (as a library call may
  for its children) gets a server started with it, and its runs are forked again."""
  (tmp_path / 'flag.py').write_text('import os\nprint(os.environ.get("FLAX_PROBE"))\n')
  processes.run([str(tmp_path / 'flag.py')], cwd=tmp_path)
  monkeypatch.setenv('FLAX_PROBE', 'set')
  assert processes.forked(['flag.py'], dict(os.environ))
  done = processes.run([str(tmp_path / 'flag.py')], cwd=tmp_path)
  server = processes._server  # pylint: disable=protected-access
  assert done.stdout == 'set\n' and server['env']['FLAX_PROBE'] == 'set'


def test_a_run_past_its_timeout_is_killed_and_raises_as_subprocess_does(tmp_path):
  script = tmp_path / 'sleeps.py'
  script.write_text('import os, time\n'
                    f'open({str(tmp_path / "pid")!r}, "w").write(str(os.getpid()))\n'
                    'time.sleep(60)\n')
  start = time.monotonic()
  with pytest.raises(subprocess.TimeoutExpired):
    processes.run([str(script)], cwd=tmp_path, timeout=3)
  assert time.monotonic() - start < 20
  pid = int((tmp_path / 'pid').read_text())
  with pytest.raises(ProcessLookupError):  # Killed, and reaped by its watcher.
    for _ in range(100):
      os.kill(pid, 0)
      time.sleep(0.05)


def test_a_missing_directory_or_script_fails_as_it_does_for_python(tmp_path):
  """A working directory that does not exist raises as subprocess does, before anything
  starts; a script that does not exist is Python's own error line and status 2."""
  with pytest.raises(FileNotFoundError):
    processes.run(['train.py'], cwd=tmp_path / 'missing')
  done = processes.run(['scripts/missing.py'], cwd=tmp_path)
  assert done.returncode == 2 and "can't open file" in done.stderr
