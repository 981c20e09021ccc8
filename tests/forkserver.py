"""A Python process that has imported the project's libraries once and forks a child for each
entry point a test runs (tests/processes.py: `run`), so that a run costs its own work and not
another 1.2-2 s of importing JAX, Flax, orbax, grain and TFDS.

Most of the suite's entry-point runs are bad inputs answered in a fraction of a second, or a few
training steps: their imports were about a tenth of the suite's CPU time. The child is a process
of its own, as `python SCRIPT ARGS` would start it: its own pid, working directory, environment
(read by XLA when JAX starts its backend, which the server never does), standard streams, exit
status, and `__main__` run from the script's file. What it shares with the server is what was
imported before it forked; `processes.run` starts a plain subprocess instead wherever the
environment differs in a variable those imports read (JAX's own, Python's, the allocator's).

Protocol (one Unix socket connection per run): the client sends a pickled request; the server
forks a watcher, which forks the child, sends the child's pid, waits for it and sends its exit
status (negative: the signal that ended it, as subprocess reports it). The server itself never
waits on a run, so that runs started together overlap.

Run as `python tests/forkserver.py SOCKET`: it imports, listens, prints 'ready', and exits when
the process that started it has gone.
"""

import atexit
import builtins
import importlib
import importlib.machinery
import os
import pickle
import pkgutil
import signal
import socket
import struct
import sys
import threading
import traceback
import types


_PATH = list(sys.path)  # sys.path as Python set it, before the package's root was added.


def _preload() -> None:
  """Every module of the project's package (roformer/), and with them its libraries."""
  sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import roformer  # pylint: disable=import-outside-toplevel
  for module in pkgutil.walk_packages(roformer.__path__, 'roformer.'):
    try:
      importlib.import_module(module.name)
    except Exception:  # pylint: disable=broad-except  # A child imports it again and says why.
      pass


def send(conn: socket.socket, value) -> None:
  data = pickle.dumps(value)
  conn.sendall(struct.pack('!Q', len(data)) + data)


def receive(conn: socket.socket):
  """The next message, or None where the other end has closed."""
  head = _exactly(conn, 8)
  return None if head is None else pickle.loads(_exactly(conn, struct.unpack('!Q', head)[0]))


def _exactly(conn: socket.socket, size: int) -> bytes | None:
  chunks, left = [], size
  while left:
    chunk = conn.recv(left)
    if not chunk:
      return None
    chunks.append(chunk)
    left -= len(chunk)
  return b''.join(chunks)


def _run_main(script: str) -> None:
  """Runs the script as the `__main__` module, as `python SCRIPT` does: its __file__ absolute,
  sys.argv[0] as given (runpy.run_path would set it to the path too)."""
  path = os.path.abspath(script)
  main = types.ModuleType('__main__')
  main.__file__ = path
  main.__loader__ = importlib.machinery.SourceFileLoader('__main__', path)
  main.__builtins__ = builtins
  sys.modules['__main__'] = main
  with open(path, 'rb') as f:
    code = compile(f.read(), path, 'exec')
  exec(code, main.__dict__)  # pylint: disable=exec-used


def _redirect(fd: int, path: str, flags: int) -> None:
  opened = os.open(path, flags, 0o644)
  os.dup2(opened, fd)
  os.close(opened)


def _child(request: dict) -> None:
  """Becomes `python SCRIPT ARGS` for the request, and exits as it would. A failure before the
  script starts (the client checked the working directory and the script) exits 127."""
  try:
    _redirect(0, os.devnull, os.O_RDONLY)
    _redirect(1, request['stdout'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(2, request['stderr'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    script = request['args'][0]
    sys.argv = list(request['args'])
    sys.path[:] = [os.path.dirname(os.path.realpath(script))] + _PATH[1:]  # As `python SCRIPT`.
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
    os._exit(127)  # pylint: disable=protected-access
  status = 0
  try:
    _run_main(script)
  except SystemExit as e:
    if e.code is None:
      status = 0
    elif isinstance(e.code, int):
      status = e.code
    else:
      print(e.code, file=sys.stderr)
      status = 1
  except BaseException as e:  # pylint: disable=broad-except  # As the interpreter reports it.
    frames = e.__traceback__
    while frames is not None and frames.tb_frame.f_code.co_filename == __file__:
      frames = frames.tb_next  # The traceback starts in the script, as Python's does.
    sys.excepthook(type(e), e.with_traceback(frames), frames)
    status = 1
    if isinstance(e, KeyboardInterrupt):  # Python ends by SIGINT itself, for the shell's sake.
      status = -signal.SIGINT
  # What the interpreter does at exit: wait for the threads that are not daemons, then the
  # exit handlers, then flush.
  threading._shutdown()  # pylint: disable=protected-access
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except Exception:  # pylint: disable=broad-except
      pass
  if status == -signal.SIGINT:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
  os._exit(status)  # pylint: disable=protected-access


def _watch(conn: socket.socket, request: dict) -> None:
  """In the watcher: forks the child, reports its pid, then its exit status."""
  pid = os.fork()
  if pid == 0:
    conn.close()
    _child(request)
  send(conn, pid)
  _, status = os.waitpid(pid, 0)
  send(conn, os.waitstatus_to_exitcode(status))
  conn.close()


def serve(path: str) -> None:
  _preload()
  parent = os.getppid()
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  listener.bind(path)
  listener.listen(16)
  listener.settimeout(1.0)
  print('ready', flush=True)
  while os.getppid() == parent:
    try:
      while os.waitpid(-1, os.WNOHANG)[0]:  # Watchers that have reported.
        pass
    except ChildProcessError:
      pass
    try:
      conn, _ = listener.accept()
    except socket.timeout:
      continue
    conn.settimeout(None)
    request = receive(conn)
    if request is None:
      conn.close()
      continue
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
      listener.close()
      try:
        _watch(conn, request)
      finally:
        os._exit(0)  # pylint: disable=protected-access
    conn.close()


if __name__ == '__main__':
  serve(sys.argv[1])
