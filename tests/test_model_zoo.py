"""Each family's model-zoo page (configs/<family>/README.md) lists exactly the configs of
its folder, each once, with the backbone file it starts from; the README links every page."""
import re
from pathlib import Path

import pytest
from mmengine.config import Config

from inline_mm.models import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
# configs/inline_<family>/ for every family of the table (InLineSwin -> inline_swin)
FAMILY_OF = {'inline_' + re.sub('^InLine', '', name).lower(): f for name, f in FAMILIES.items()}
FOLDERS = sorted(FAMILY_OF)
ROW = re.compile(r'^\| \[([\w.-]+\.py)\]\(([\w.-]+\.py)\) \|(.*)$', re.M)


def _page(folder):
    return (ROOT / 'configs' / folder / 'README.md').read_text()


@pytest.mark.parametrize('folder', FOLDERS)
def test_page_lists_exactly_the_shipped_configs(folder):
    page = _page(folder)
    rows = ROW.findall(page)
    named = [name for name, _, _ in rows]
    assert all(name == link for name, link, _ in rows)
    assert len(named) == len(set(named)), 'a config is listed twice'
    shipped = {p.name for p in (ROOT / 'configs' / folder).glob('*.py')}
    assert set(named) == shipped, (f'missing: {sorted(shipped - set(named))}, '
                                   f'not shipped: {sorted(set(named) - shipped)}')
    # and any other config the page names (commands, prose) exists too
    for path in re.findall(r'configs/([\w-]+/[\w.-]+\.py)', page):
        if 'CONFIG' not in path:
            assert (ROOT / 'configs' / path).is_file(), path


@pytest.mark.parametrize('folder', FOLDERS)
def test_rows_name_the_backbone_file_each_config_loads(folder):
    family = FAMILY_OF[folder]
    page = _page(folder)
    for release in family.checkpoints:      # the files' table: short name and official link
        assert f'`inline://{release.name}` | [{release.file}]({release.url})' in page
    for name, _, rest in ROW.findall(page):
        cfg = Config.fromfile(str(ROOT / 'configs' / folder / name))
        ckpt = (cfg.model.backbone.get('init_cfg') or {}).get('checkpoint')
        if ckpt:
            assert f'`{ckpt}`' in rest, (name, ckpt)
        assert f'configs/{folder}/{name}' in rest, f'{name}: no command'


def test_readme_links_every_page():
    readme = (ROOT / 'README.md').read_text()
    for folder in FOLDERS:
        assert f'](configs/{folder}/README.md)' in readme, folder
