"""Each family's model-zoo page (configs/<family>/README.md) links every config of its folder
and shows each with the official file it starts from; the README links every page. How a page
words or lays this out is free: its commands are tests/test_readme.py's, its links
tests/test_docs.py's, and which file a config loads is tests/test_detection_configs.py's and
tests/test_seg_configs.py's."""
import re
from pathlib import Path

import pytest

from inline_mm.models import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
# configs/inline_<family>/ for every family of the table (InLineSwin -> inline_swin)
FAMILY_OF = {'inline_' + re.sub('^InLine', '', name).lower(): f for name, f in FAMILIES.items()}
FOLDERS = sorted(FAMILY_OF)
#: a relative link to a config of the same folder
CONFIG_LINK = re.compile(r'\]\(([\w.-]+\.py)\)')


def _page(folder):
    return (ROOT / 'configs' / folder / 'README.md').read_text()


@pytest.mark.parametrize('folder', FOLDERS)
def test_page_links_every_shipped_config(folder):
    linked = set(CONFIG_LINK.findall(_page(folder)))
    shipped = {p.name for p in (ROOT / 'configs' / folder).glob('*.py')}
    assert shipped <= linked, f'configs the page does not link: {sorted(shipped - linked)}'


@pytest.mark.parametrize('folder', FOLDERS)
def test_each_config_is_shown_with_its_official_file(folder):
    """Where the page links a config of a released variant (``..._inline-swin-t_...``), the
    same line names the short name of that variant's file, and the page links every official
    file of the family."""
    page = _page(folder)
    released = {r.weights for r in FAMILY_OF[folder].checkpoints}
    for release in FAMILY_OF[folder].checkpoints:
        assert f']({release.url})' in page, f'the page does not link {release.url}'
    for line in page.splitlines():
        for name in CONFIG_LINK.findall(line):
            variant = re.search(r'inline-([a-z]+-[a-z])[_-]', name)
            short = variant and variant[1].replace('-', '_')
            if short in released:
                assert f'inline://{short}' in line, f'{name} is linked without inline://{short}'


def test_readme_links_every_page():
    readme = (ROOT / 'README.md').read_text()
    for folder in FOLDERS:
        assert f'](configs/{folder}/README.md)' in readme, folder
