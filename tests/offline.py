"""TFDS's mock data for the tests, which run without a network: the mock stands in for the
download, so the check that refuses a download on a machine without a network
(roformer/data/cache.py: check_can_download) is passed over inside it."""

import contextlib
from unittest import mock

import tensorflow_datasets as tfds

from roformer.data import cache


@contextlib.contextmanager
def mock_data(**kwargs):
  """tfds.testing.mock_data(**kwargs), with the network check passed over."""
  with tfds.testing.mock_data(**kwargs), mock.patch.object(cache, 'check_can_download'):
    yield
