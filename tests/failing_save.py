"""train.py whose checkpoint saves from step 4 on fail in orbax's background thread, as a
full disk would fail them there (tests/test_reliability.py runs it as a subprocess).

A save ends by renaming its temporary directory to WORKDIR/checkpoints/STEP; this script makes
that rename fail with ENOSPC for steps 4 and later. It patches `os.rename`, which orbax reaches
through etils' local-path backend, rather than a private orbax class, so that a new orbax keeps
it working as long as it still commits a step by renaming it into place. Every other rename
(train.py's atomic JSON writes included) goes through untouched.
"""

import errno
import os
import runpy
import sys

_rename = os.rename


def _failing_rename(src, dst, *args, **kwargs):
  final = os.fspath(dst)
  step = os.path.basename(final)
  if (step.isdigit() and int(step) >= 4
      and os.path.basename(os.path.dirname(final)) == 'checkpoints'):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(src))
  return _rename(src, dst, *args, **kwargs)


if __name__ == '__main__':
  os.rename = _failing_rename
  sys.path.insert(0, os.getcwd())
  sys.argv = ['train.py'] + sys.argv[1:]
  runpy.run_path('train.py', run_name='__main__')
