"""The Markdown pages link where they say: every relative link names a file or folder of the
checkout, and every ``#anchor`` names a heading of its page as GitHub slugs it. The README
indexes every user page of docs/, each user page stays within 15 KB, and every developer note
of docs/dev/ is linked from a user page. (Reads the files only: no subprocess, no network.)"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_PAGES = sorted((ROOT / 'docs').glob('*.md'))
DEV_NOTES = sorted(p for p in (ROOT / 'docs' / 'dev').glob('*.md') if p.name != 'README.md')
PAGES = sorted({ROOT / 'README.md', ROOT / 'checkpoints' / 'README.md', *USER_PAGES,
                *(ROOT / 'docs' / 'dev').glob('*.md'),
                *(ROOT / 'configs').glob('*/README.md')})
#: the most a user page of docs/ may weigh; investigations and history go to docs/dev/
MAX_USER_PAGE_BYTES = 15_000

_FENCE = re.compile(r'^(```|~~~).*?^\1[ \t]*$', re.M | re.S)
_CODE = re.compile(r'(`+)(.+?)\1', re.S)
_LINK = re.compile(r'!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')


def prose(text: str) -> str:
    """The text without fenced blocks, and with inline code reduced to its words, so that
    a link written inside code (an example, not a link) is not taken for one."""
    text = _FENCE.sub('', text)
    return _CODE.sub(lambda m: re.sub(r'[\[\]()]', ' ', m[2]), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped (letters, digits,
    '_' and '-' stay), lower case, each space a '-'."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)      # a link keeps its text
    text = re.sub(r'<[^>]+>', '', text)                            # inline HTML goes
    text = re.sub(r'[^\w\- ]', '', text.strip().lower())
    return text.replace(' ', '-')


def anchors(page: Path) -> set:
    """Every anchor of a page; a repeated heading gets -1, -2, ... as on GitHub."""
    seen = {}
    out = set()
    for m in re.finditer(r'^#{1,6}[ \t]+(.+?)[ \t#]*$', _FENCE.sub('', page.read_text()), re.M):
        base = slug(m[1])
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f'{base}-{n}')
    return out


def test_slug_follows_github():
    assert slug('Mask R-CNN + FPN on COCO') == 'mask-r-cnn--fpn-on-coco'
    assert slug('timm (`features_only` backbones, no OpenMMLab needed)') == \
        'timm-features_only-backbones-no-openmmlab-needed'
    assert slug('1. Lay out the data') == '1-lay-out-the-data'
    assert slug('Beyond the backbone: the RPN') == 'beyond-the-backbone-the-rpn'


def test_prose_drops_code():
    text = 'see [a](x.md)\n```bash\n[b](y.md)\n```\n`[c](z.md)` and [`d`](w.md)'
    assert [m[1] for m in _LINK.finditer(prose(text))] == ['x.md', 'w.md']


@pytest.mark.parametrize('page', PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for m in _LINK.finditer(prose(page.read_text())):
        target = m[1]
        if re.match(r'[a-z][a-z0-9+.-]*:', target, re.I):     # https:, mailto:, ...
            continue
        path, _, anchor = target.partition('#')
        dest = (page.parent / path).resolve() if path else page
        if ROOT not in (dest, *dest.parents) or not dest.exists():
            broken.append(f'{target}: no such file in the checkout')
        elif anchor and dest.suffix == '.md' and anchor not in anchors(dest):
            broken.append(f'{target}: {dest.relative_to(ROOT)} has no heading with anchor '
                          f'#{anchor}')
    assert not broken, f'{page.relative_to(ROOT)}:\n' + '\n'.join(broken)


def test_readme_indexes_every_docs_page():
    readme = (ROOT / 'README.md').read_text()
    missing = [p.name for p in (ROOT / 'docs').glob('*.md') if f'](docs/{p.name})' not in readme]
    assert not missing, f'README.md does not link these docs pages: {missing}'


@pytest.mark.parametrize('page', USER_PAGES, ids=lambda p: p.name)
def test_user_pages_stay_short(page):
    size = len(page.read_bytes())
    assert size <= MAX_USER_PAGE_BYTES, (
        f'docs/{page.name} is {size:,} bytes (at most {MAX_USER_PAGE_BYTES:,}): keep what to do '
        'and the current figures with their commands, and move investigations, history and '
        f'rationale to docs/dev/{page.name}, linked from the page')


def test_every_developer_note_is_linked_from_a_user_page():
    linked = {(page.parent / m[1].partition('#')[0]).resolve()
              for page in USER_PAGES for m in _LINK.finditer(prose(page.read_text()))}
    orphans = [note.name for note in DEV_NOTES if note.resolve() not in linked]
    assert not orphans, f'docs/dev/ notes that no page of docs/ links: {orphans}'
