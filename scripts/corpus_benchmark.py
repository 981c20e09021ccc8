"""Converting a large corpus of your own files (config.data.name='files'): time and peak memory.

  python scripts/corpus_benchmark.py --gigabytes 1 --dir /tmp/corpus_bench

Writes `--gigabytes` of generated JSON-lines documents (`--files` gzipped files of documents
of 200-20,000 characters drawn from a fixed 5,000-word vocabulary; not real text, but the
conversion reads, decodes, parses, hashes and writes it as it would any text), then converts
it in a fresh process (roformer/data/corpus.py, as the first training run would) and reports
the conversion's wall time, documents and bytes per second, and the process's peak resident
memory (getrusage), against the size of the corpus. The corpus is generated on the spot and
deleted afterwards (--keep keeps it): nothing of it is committed.
"""

import gzip
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import provenance  # pylint: disable=wrong-import-position

_CONVERT = '''
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from roformer import config_schema
from roformer.data import corpus
cfg = config_schema.default_config().data
cfg.update(name='files', files={files!r}, data_dir={data_dir!r})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # After the imports.
started = time.time()
directory = corpus.prepare(cfg, cfg.data_dir)
seconds = time.time() - started
info = json.load(open(directory + '/info.json'))
print(json.dumps({{'seconds': seconds, 'documents': info['documents'], 'bytes': info['bytes'],
                  'rss_before_mib': before,
                  'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
'''


def generate(directory: str, total_bytes: int, files: int, seed: int = 0) -> int:
  """Writes about `total_bytes` of uncompressed JSON lines into `files` .jsonl.gz files."""
  rng = np.random.default_rng(seed)
  words = np.array([''.join(rng.choice(list('abcdefghijklmnopqrstuvwxyz'), rng.integers(2, 10)))
                    for _ in range(5000)])
  os.makedirs(directory, exist_ok=True)
  written, per_file = 0, total_bytes // files
  for i in range(files):
    with gzip.open(os.path.join(directory, f'part-{i:04d}.jsonl.gz'), 'wt', encoding='utf-8',
                   compresslevel=1) as f:
      in_file = 0
      while in_file < per_file:
        n = int(rng.integers(40, 4000))  # Words: about 200-20,000 characters.
        line = json.dumps({'text': ' '.join(words[rng.integers(0, len(words), n)]),
                           'id': written}) + '\n'
        f.write(line)
        in_file += len(line)
      written += in_file
  return written


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--gigabytes', type=cli.positive(float), default=1.0)
  parser.add_argument('--files', type=cli.positive_int, default=64)
  parser.add_argument('--dir', default='/tmp/roformer_corpus_benchmark')
  parser.add_argument('--keep', action='store_true', help='Keep the generated corpus.')
  parser.add_argument('--out', default='', help='Also write the results as JSON here.')
  args = parser.parse_args(argv)
  corpus_dir, data_dir = os.path.join(args.dir, 'corpus'), os.path.join(args.dir, 'data')
  for made in (corpus_dir, data_dir):  # Only what this script makes: nothing else in --dir.
    shutil.rmtree(made, ignore_errors=True)
  started = time.time()
  size = generate(corpus_dir, int(args.gigabytes * 2**30), args.files)
  generated = time.time() - started
  on_disk = sum(os.path.getsize(os.path.join(corpus_dir, f)) for f in os.listdir(corpus_dir))
  script = _CONVERT.format(repo=REPO, files=os.path.join(corpus_dir, '*.jsonl.gz'),
                           data_dir=data_dir)
  environ = {**os.environ, 'JAX_PLATFORMS': 'cpu'}  # The conversion's.
  done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        check=False, env=environ)
  if done.returncode:
    if not args.keep:
      for made in (corpus_dir, data_dir):
        shutil.rmtree(made, ignore_errors=True)
    last = (done.stderr.strip().splitlines() or ['(no output)'])[-1]
    raise errors.ConfigError(f'the conversion failed: {last} Fix: what that line names (free '
                             'disk space under --dir, a missing package), then rerun.')
  result = json.loads(done.stdout.strip().splitlines()[-1])
  documents = sum(result['documents'].values())
  result.update(text_bytes=size, gzip_bytes=on_disk, files=args.files,
                generate_seconds=round(generated, 1), documents_total=documents,
                mib_per_s=round(size / 2**20 / result['seconds'], 1),
                documents_per_s=round(documents / result['seconds']),
                # The conversion is its child: this process's software and host, its variables.
                made_with=provenance.measurement(provenance.PACKAGES, environ))
  print(f"{size / 2**30:.2f} GiB of JSON lines ({on_disk / 2**30:.2f} GiB gzipped, "
        f"{args.files} files, {documents:,} documents): converted in {result['seconds']:.1f} s "
        f"({result['mib_per_s']} MiB/s, {result['documents_per_s']:,} documents/s), peak RSS "
        f"{result['peak_rss_mib']:.0f} MiB ({result['rss_before_mib']:.0f} MiB before it "
        f"started); splits {result['documents']}")
  if args.out:
    files.write_json_atomic(args.out, result)
  if not args.keep:
    for made in (corpus_dir, data_dir):
      shutil.rmtree(made, ignore_errors=True)
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
