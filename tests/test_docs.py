"""The README and the pages under docs/: every relative link and image resolves (anchors
included, by GitHub's heading slugs), every page is reachable from the README, and the README
stays a front page."""

import json
import math
import pathlib
import re
import shlex
import urllib.parse

import pytest

from scripts import generated_docs

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / 'README.md'
MAX_README_LINES = 260

_FENCE = re.compile(r'^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$', re.M | re.S)
_CODE_SPAN = re.compile(r'(`+).+?\1', re.S)
# [text](target) and ![alt](target); the target may be followed by a "title".
_LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)')
_HEADING = re.compile(r'^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$', re.M)


def pages() -> list[pathlib.Path]:
  return [README] + sorted((ROOT / 'docs').rglob('*.md'))


def _prose(text: str) -> str:
  """The text outside fenced code blocks and code spans, where links are links."""
  return _CODE_SPAN.sub('', _FENCE.sub('', text))


def slug(heading: str) -> str:
  """GitHub's anchor for a heading: lowercase, markup and punctuation other than '-' and '_'
  dropped, spaces to '-'."""
  text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link keeps its text
  return re.sub(r'[^\w\- ]', '', text.strip().lower()).replace(' ', '-')


def anchors(page: pathlib.Path) -> set[str]:
  """Every anchor of a page, with GitHub's -1, -2, ... suffixes for repeated headings."""
  seen: dict[str, int] = {}
  result = set()
  for heading in _HEADING.findall(_FENCE.sub('', page.read_text(encoding='utf-8'))):
    base = slug(heading)
    count = seen.get(base, 0)
    seen[base] = count + 1
    result.add(base if count == 0 else f'{base}-{count}')
  return result


def relative_links(page: pathlib.Path) -> list[str]:
  targets = _LINK.findall(_prose(page.read_text(encoding='utf-8')))
  return [t for t in targets if t and not re.match(r'^[a-z][a-z0-9+.-]*:', t, re.I)]


def broken_links(page: pathlib.Path) -> list[str]:
  """Each relative link of `page` whose file, directory or anchor does not exist."""
  broken = []
  for target in relative_links(page):
    path, _, anchor = target.partition('#')
    resolved = (page.parent / urllib.parse.unquote(path)).resolve() if path else page
    if not resolved.exists():
      broken.append(f'{target}: no file or directory {resolved}')
    elif anchor and resolved.suffix == '.md' and resolved.is_file():
      if urllib.parse.unquote(anchor).lower() not in anchors(resolved):
        broken.append(f'{target}: no heading with anchor #{anchor} in {resolved.name}')
    elif anchor:
      broken.append(f'{target}: #{anchor} on a target that is not a Markdown page')
  return broken


def _name(page: pathlib.Path) -> str:
  return str(page.relative_to(ROOT))


@pytest.mark.parametrize('page', pages(), ids=_name)
def test_every_relative_link_in_the_docs_resolves(page):
  broken = broken_links(page)
  assert not broken, f'{_name(page)} has broken links:\n' + '\n'.join(broken)


def test_every_docs_page_is_reachable_from_the_readme():
  reached, queue = {README}, [README]
  while queue:
    page = queue.pop()
    for target in relative_links(page):
      path = target.partition('#')[0]
      if not path.endswith('.md'):
        continue
      linked = (page.parent / urllib.parse.unquote(path)).resolve()
      if linked.is_file() and linked not in reached:
        reached.add(linked)
        queue.append(linked)
  unreached = [_name(p) for p in pages() if p.resolve() not in reached]
  assert not unreached, f'pages no link from README.md leads to: {unreached}'


def test_the_readme_is_a_front_page_of_at_most_260_lines():
  lines = len(README.read_text(encoding='utf-8').splitlines())
  assert lines <= MAX_README_LINES, (
      f'README.md has {lines} lines; move long write-ups to docs/ (at most {MAX_README_LINES}).')


def test_a_broken_link_or_anchor_is_reported(tmp_path):
  (tmp_path / 'other.md').write_text('# Other page\n\n## Measured: the `rope` sweep, 2x\n')
  page = tmp_path / 'page.md'
  page.write_text(
      '# Page\n\n'
      '[fine](other.md#measured-the-rope-sweep-2x) [self](#page) [web](https://example.com)\n'
      '`[in code](missing.md)`\n\n```\n[in a block](missing.md)\n```\n'
      '[no file](missing.md) ![no image](img/missing.png) [no anchor](other.md#nothing)\n')
  assert broken_links(page) == [
      f'missing.md: no file or directory {tmp_path.resolve() / "missing.md"}',
      f'img/missing.png: no file or directory {tmp_path.resolve() / "img" / "missing.png"}',
      'other.md#nothing: no heading with anchor #nothing in other.md',
  ]


@pytest.mark.parametrize('heading, expected', [
    ('Choosing a position scheme', 'choosing-a-position-scheme'),
    ('Measured: BERT vs RoFormer pretraining, then fine-tuning',
     'measured-bert-vs-roformer-pretraining-then-fine-tuning'),
    ('Measured: softmax vs FAVOR+ as the sequence doubles',
     'measured-softmax-vs-favor-as-the-sequence-doubles'),
    ('Measured: fine-tuning on rotten_tomatoes', 'measured-fine-tuning-on-rotten_tomatoes'),
    ('`rope` + `rope.scaling`', 'rope--ropescaling'),
])
def test_anchors_follow_githubs_heading_slugs(heading, expected):
  assert slug(heading) == expected


@pytest.mark.parametrize('page, start, end, make', generated_docs.BLOCKS,
                         ids=[f'{b[0]}:{b[1].strip()}' for b in generated_docs.BLOCKS])
def test_each_generated_block_of_the_docs_is_what_the_code_says(page, start, end, make):
  """The README's kinds, docs/positions.md's capability and attention options tables,
  docs/configs_and_data.md's table of what may change and docs/layout.md's module index are
  what the registries, roformer/saved_config.py and the modules' docstrings give now."""
  assert generated_docs.shown(page, start, end) == make(), (
      f'the {start.strip()} block of {page} is stale. Fix: python scripts/generated_docs.py')


def test_the_generated_blocks_hold_what_they_are_for():
  """Not an empty registry's output: the kinds and options tables name what the code has."""
  from roformer import attention_options  # pylint: disable=import-outside-toplevel
  kinds_line = generated_docs.shown('README.md', *generated_docs.BLOCKS[0][1:3])
  assert '`rope`' in kinds_line and '`alibi`' in kinds_line
  table = generated_docs.shown('docs/positions.md', *generated_docs.BLOCKS[2][1:3])
  assert all(f'`{field}`' in table for field in attention_options.OPTIONS)


def test_a_stale_generated_block_is_rewritten_and_the_rest_of_the_page_kept(tmp_path,
                                                                           monkeypatch):
  (tmp_path / 'docs').mkdir()
  page = 'before\n<!-- kinds: generated -->\nold\n<!-- end of kinds -->\nafter\n'
  (tmp_path / 'README.md').write_text(page)
  monkeypatch.setattr(generated_docs, 'ROOT', tmp_path)
  monkeypatch.setattr(generated_docs, 'BLOCKS', generated_docs.BLOCKS[:1])
  assert generated_docs.main(['--check']) == 1
  assert generated_docs.main([]) == 0
  assert (tmp_path / 'README.md').read_text() == page.replace('old', generated_docs._kinds())
  assert generated_docs.main(['--check']) == 0


def test_the_extension_table_is_the_kept_records():
  """docs/hf_checkpoints.md's table of an imported model under every scaling and remap is
  scripts/extension_table.py's output on the kept records."""
  from scripts import extension_table  # pylint: disable=import-outside-toplevel
  page = (ROOT / 'docs' / 'hf_checkpoints.md').read_text(encoding='utf-8')
  records = ROOT / 'docs' / 'results' / 'hf_workflow_2026-11-29' / 'records'
  for marker, run in (('extension table', 'imported'), ('continued table', 'imported_yarn')):
    table = page.split(f'<!-- {marker}: generated -->\n', 1)[1].split(
        f'\n<!-- end of {marker} -->', 1)[0]
    assert table == extension_table.table(str(records / run)), marker


def _page_commands(page: str) -> list[list[str]]:
  """Each command a page gives, as the shell splits it: the lines of its fenced bash blocks
  (continuations joined) and its inline code that starts with python or bash."""
  commands = []
  for block in re.findall(r'```bash\n(.*?)```', page, flags=re.DOTALL):
    commands += [line for line in block.replace('\\\n', ' ').splitlines() if line.strip()]
  commands += [span.replace('\n', ' ') for span in re.findall(r'`((?:python|bash) [^`]+)`', page)]
  return [shlex.split(command) for command in commands]


def test_the_kept_workflow_ran_the_pages_commands_for_the_times_and_losses_it_states():
  """docs/hf_checkpoints.md's context-extension workflow: every step in its records' steps.json
  is a command the page gives (its RUNS folder as the page's runs/ and hub/), and the times and
  validation losses the page states for it are the records' (each step's, and their sum)."""
  page = (ROOT / 'docs' / 'hf_checkpoints.md').read_text(encoding='utf-8')
  records = ROOT / 'docs' / 'results' / 'hf_workflow_2026-11-29' / 'records'
  kept = json.loads((records / 'steps.json').read_text(encoding='utf-8'))
  given = _page_commands(page)
  runs = re.search(r'--workdir (\S+)/shakespeare-llama', kept['steps'][0]['command']).group(1)
  for step in kept['steps']:
    command = step['command'].replace(f'{runs}/hub/', 'hub/').replace(f'{runs}/', 'runs/')
    assert shlex.split(command) in given, step['step']
  def minutes(seconds):  # Rounded half up, as the page states them.
    whole = math.floor(seconds + 0.5)
    return f'{whole // 60} min {whole % 60} s' if whole >= 60 else f'{whole} s'
  seconds = {step['step']: step['seconds'] for step in kept['steps']}
  for stated in ([sum(seconds.values())] + [seconds[name] for name in (
      'train', 'extensions', 'passkey', 'continue')]):
    assert re.search(rf'(?<![\d.]){minutes(stated)}\b', page), minutes(stated)
  for run, words in (('stand_in', 'validation loss {:.3f}, '),
                     ('imported_yarn', 'validation loss {:.3f} over the whole split')):
    lines = (records / run / 'metrics.jsonl').read_text(encoding='utf-8').splitlines()
    last = [json.loads(line) for line in lines if '"validation"' in line][-1]
    assert words.format(last['loss']) in page, (run, last['loss'])


def test_the_first_steps_table_is_the_kept_records():
  """docs/hf_checkpoints.md's first steps under each initialisation are scripts/init_loss.py's
  table of the kept runs."""
  from scripts import init_loss  # pylint: disable=import-outside-toplevel
  page = (ROOT / 'docs' / 'hf_checkpoints.md').read_text(encoding='utf-8')
  table = page.split('<!-- first steps: generated -->\n', 1)[1].split(
      '\n<!-- end of first steps -->', 1)[0]
  records = ROOT / 'docs' / 'results' / 'init_2026-11-28'
  runs = [str(records / f'lm_init={init}') for init in ('classic', 'normal')]
  assert table == init_loss.first_steps(runs, [1, 5, 10, 25, 50, 100])


@pytest.mark.parametrize('block,records', [('step 0', 'init_2026-11-28'),
                                           ('step 0 on a GPU', 'gpu_2026-11-30')])
def test_the_step0_losses_shown_are_the_kept_output(block, records):
  """docs/hf_checkpoints.md shows scripts/init_loss.py's kept output as it is."""
  page = (ROOT / 'docs' / 'hf_checkpoints.md').read_text(encoding='utf-8')
  shown = page.split(f'<!-- {block}: kept -->\n```\n', 1)[1].split(
      f'\n```\n<!-- end of {block} -->', 1)[0]
  kept = (ROOT / 'docs' / 'results' / records / 'step0.md').read_text(encoding='utf-8')
  assert shown == kept.rstrip('\n')


def test_the_layout_page_lists_each_file_with_its_own_first_sentence():
  """docs/layout.md's index (a generated block) names every module, config and script."""
  text = (ROOT / 'docs' / 'layout.md').read_text(encoding='utf-8')
  for path in ('roformer/separations.py', 'roformer/positions/rotary.py', 'train.py',
               'scripts/docs_from_records.py', 'configs/sweeps/length.py'):
    assert f'- `{path}`: ' in text, path
