"""The entry points that tests run as processes of their own: their environment (`env`), and
`run`, which forks them from a server that has imported the libraries once (tests/forkserver.py).

The tests' XLA flags (tests/conftest.py) force 8 host devices and make compilation cheap, since
the programs are tiny and run a few steps, so compiling them is most of the suite's time:
backend optimisation level 0, and XLA:CPU's older elemental emitter for fusions instead of its
MLIR fusion emitters (`--xla_cpu_use_fusion_emitters=false`: about half the backend compile
time of a tiny train step, 1.4-1.9 s -> 0.8 s), and its code generated as one LLVM module
instead of split into parts for a thread pool (`--xla_cpu_parallel_codegen_split_count=1`: the
two pytest-xdist workers already keep both cores busy, and the parts cost more than they save;
tests/test_decode.py alone in 66 s instead of 82, the imported checkpoints' logits in 35 s
instead of 42). A subprocess that should see another number of devices keeps these flags:
without them, its compilation alone takes a few times longer.
"""

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
FAST_COMPILE = ('--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false '
                '--xla_cpu_parallel_codegen_split_count=1')


def xla_flags(devices: int) -> str:
  return f'--xla_force_host_platform_device_count={devices} {FAST_COMPILE}'


def env(devices: int = 1, **extra: str) -> dict[str, str]:
  """os.environ for a subprocess with `devices` host CPU devices, plus `extra`."""
  return {**os.environ, 'XLA_FLAGS': xla_flags(devices), **extra}


# Variables read when Python starts or when a library is imported (JAX, Flax, numpy and its
# BLAS, orbax, TFDS, grain, absl, protobuf; the locale), not when JAX starts its backend
# (XLA_FLAGS, XLA_PYTHON_CLIENT_*): a run whose environment differs from this process's in one of
# these starts as a plain subprocess, and the fork server (tests/forkserver.py) is started again
# where this process's own have changed (a test that set one for good). A forked run shares the
# server's hash seed: a test that needs runs with their own compares plain ones.
_READ_AT_IMPORT = ('JAX_', 'PYTHON', 'LD_', 'MALLOC', 'GLIBC', 'TF_', 'TFDS_',
                   'OMP_', 'GRAIN', 'ABSL', 'FLAX_', 'NNX_', 'OPENBLAS_', 'MKL_', 'GOTO_', 'NPY_',
                   'NUMPY_', 'LANG', 'LC_', 'PROTOCOL_BUFFERS', 'ENABLE_ORBAX',
                   'ROFORMER_REUSE_FREED_MEMORY')
_server = {}  # This process's fork server (`_start_server`'s fields) once started.
_starting = threading.Lock()  # Two threads of a test may run their first entry points together.


def _fork_server():
  """This process's fork server, started at the first run that can use it (again, if it has
  ended)."""
  with _starting:
    if _server and (_server['process'].poll() is not None or _differs(_server['env'],
                                                                     os.environ)):
      _server.pop('stop')()
      _server.clear()
    if not _server:
      _start_server()
    return _server


def _start_server():
  """Starts the server with this process's environment and waits until it listens."""
  directory = tempfile.mkdtemp(prefix='roformer-forkserver-')
  path = os.path.join(directory, 'socket')
  env = dict(os.environ)
  process = subprocess.Popen([sys.executable, os.path.join(_HERE, 'forkserver.py'), path],
                             env=env, stdout=subprocess.PIPE, text=True)
  if process.stdout.readline().strip() != 'ready':
    raise RuntimeError(f'the fork server did not start (exit status {process.wait()})')

  def stop():
    process.kill()
    process.wait()
    shutil.rmtree(directory, ignore_errors=True)

  atexit.register(stop)
  _server.update(process=process, socket=path, env=env, directory=directory, stop=stop)


def _differs(env, other) -> bool:
  """Whether two environments differ in a variable read at import."""
  return any(env.get(k) != other.get(k) for k in set(env) | set(other)
             if k.startswith(_READ_AT_IMPORT))


def forked(args, env) -> bool:
  """Whether `run` forks `args` from the fork server, rather than start a subprocess."""
  if not args or args[0].startswith('-') or not args[0].endswith('.py'):
    return False  # `-c CODE`, `-m MODULE`: a plain subprocess.
  return not _differs(env, os.environ)


def run(args, cwd=None, env=None, timeout: float = 300,
        check: bool = False) -> subprocess.CompletedProcess:
  """`subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True,
  text=True, ...)` for a Python script: forked from the fork server (tests/forkserver.py) where
  the environment allows, else a plain subprocess. `env`: the whole environment (os.environ
  when None)."""
  env = dict(os.environ if env is None else env)
  cwd = os.fspath(cwd or os.getcwd())
  args = [os.fspath(a) for a in args]
  if not os.path.isdir(cwd):  # What subprocess raises, before anything starts.
    raise FileNotFoundError(2, 'No such file or directory', cwd)
  script = os.path.join(cwd, args[0]) if args else ''
  if not forked(args, env) or not os.path.isfile(script):  # Python's own message for a missing one.
    return subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=check, stdin=subprocess.DEVNULL)
  # Imported here: conftest imports this module before JAX starts, and forkserver needs none.
  import forkserver  # pylint: disable=import-outside-toplevel
  server = _fork_server()
  with tempfile.TemporaryDirectory(dir=server['directory']) as streams:
    out, err = os.path.join(streams, 'stdout'), os.path.join(streams, 'stderr')
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
      conn.connect(server['socket'])
      forkserver.send(conn, dict(args=args, cwd=cwd, env=env, stdout=out, stderr=err))
      pid = forkserver.receive(conn)
      if pid is None:
        raise RuntimeError(f'the fork server did not start {args}')
      conn.settimeout(timeout)
      try:
        status = forkserver.receive(conn)
      except socket.timeout:
        _kill(pid)
        raise subprocess.TimeoutExpired([sys.executable] + args, timeout) from None
      except BaseException:  # As subprocess.run: the run does not outlive its caller.
        _kill(pid)
        raise
      if status is None:
        raise RuntimeError(f'the fork server lost the run of {args} (pid {pid})')
    done = subprocess.CompletedProcess([sys.executable] + args, status,
                                       _read(out), _read(err))
  if check:
    done.check_returncode()
  return done


def interruptible_popen(args, **kwargs) -> subprocess.Popen:
  """subprocess.Popen(args, **kwargs) with SIGINT at its default in the child, as a terminal's
  foreground job starts it, for the tests that press Ctrl-C.

  A suite launched as a background job (`pytest ... &`, nohup) starts with SIGINT ignored, and
  an ignored signal stays ignored across exec, so the child would never see the Ctrl-C: a
  handled signal is reset to its default at exec instead, so SIGINT is handled here while the
  child starts (a `preexec_fn` would make subprocess fork this multithreaded process instead of
  spawning)."""
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    return subprocess.Popen(args, **kwargs)
  finally:
    signal.signal(signal.SIGINT, previous)


def _kill(pid: int) -> None:
  """Kills a forked run that may have ended meanwhile (its watcher reaps it)."""
  with contextlib.suppress(ProcessLookupError):
    os.kill(pid, signal.SIGKILL)


def _read(path: str) -> str:
  with open(path, encoding='utf-8', errors='replace') as f:
    return f.read()
