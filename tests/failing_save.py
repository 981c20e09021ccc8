"""train.py whose checkpoint saves from step 4 on fail in orbax's background thread, as a
full disk would fail them there (tests/test_reliability.py runs it as a subprocess). It
patches a private orbax class (the step directory's rename at the end of a save), so a new
orbax may need it pointed elsewhere."""

import errno
import os
import runpy
import sys

from orbax.checkpoint._src.path import atomicity

_finalize = atomicity.AtomicRenameTemporaryPath.finalize


async def _failing_finalize(self):
  step = os.path.basename(str(self.get_final()))
  if step.isdigit() and int(step) >= 4:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.get()))
  return await _finalize(self)


if __name__ == '__main__':
  atomicity.AtomicRenameTemporaryPath.finalize = _failing_finalize
  sys.path.insert(0, os.getcwd())
  sys.argv = ['train.py'] + sys.argv[1:]
  runpy.run_path('train.py', run_name='__main__')
