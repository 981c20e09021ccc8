"""train.py whose data stops reading after FAIL_AFTER reads, as a disk or a network file
system failing mid-epoch would (tests/test_reliability.py runs it as a subprocess). Every read
of a record goes through roformer.data.cache: CheckedSource (a TFDS dataset's ArrayRecord
shards) or RecordFile (files this project wrote); each names the damaged file in its error."""

import os
import runpy
import sys

sys.path.insert(0, os.getcwd())
from roformer.data import cache  # pylint: disable=wrong-import-position

_reads = [0]


def _failing(cls):
  getitem, getitems = cls.__getitem__, cls.__getitems__

  def check(self):
    _reads[0] += 1
    if _reads[0] > int(os.environ['FAIL_AFTER']):
      error = RuntimeError('DATA_LOSS: the read failed')
      if cls is cache.CheckedSource:
        raise self._error(error)  # pylint: disable=protected-access
      raise self._damaged(cache.first_line(error))  # pylint: disable=protected-access

  def failing_getitem(self, index):
    check(self)
    return getitem(self, index)

  def failing_getitems(self, indices, *args):
    check(self)
    return getitems(self, indices, *args)

  cls.__getitem__, cls.__getitems__ = failing_getitem, failing_getitems


if __name__ == '__main__':
  _failing(cache.CheckedSource)
  _failing(cache.RecordFile)
  sys.argv = ['train.py'] + sys.argv[1:]
  runpy.run_path('train.py', run_name='__main__')
