"""Toy segmentation sets, the folder dataset, the palette metric and the dataset tools."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.registry import DATASETS, METRICS
from mmseg.structures import SegDataSample
from PIL import Image

import inline_mm  # noqa: F401
from inline_mm.cli import check_dataset, convert_masks
from inline_mm.datasets.toy import segmentation as toy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp('segdata')
    toy.make_folder_toy(str(root / 'good'), num_train=6, num_val=3, size=64)
    touched = toy.make_broken_variants(str(root / 'broken'), size=48)
    return root, touched


def _check(capsys, *argv):
    rc = check_dataset.main([str(a) for a in argv])
    return rc, capsys.readouterr().out


# ------------------------------------------------------------------ toy data
def test_folder_toy_layout(data):
    good = data[0] / 'good'
    meta = json.loads((good / 'meta.json').read_text())
    assert meta == {'classes': list(toy.FOLDER_CLASSES),
                    'palette': [list(p) for p in toy.FOLDER_PALETTE]}
    for split, n in (('train', 6), ('val', 3)):
        images = sorted((good / 'images' / split).iterdir())
        assert len(images) == n
        assert {p.suffix for p in images} == ({'.jpg', '.png'} if split == 'train' else {'.jpg'})
        for img in images:
            mask = Image.open(good / 'masks' / split / f'{img.stem}.png')
            assert mask.mode == 'P' and mask.size == Image.open(img).size
            assert set(np.unique(np.array(mask))) <= set(range(len(toy.FOLDER_CLASSES)))


def test_toy_sets_are_reproducible(tmp_path):
    toy.make_ade_toy(str(tmp_path / 'a'), num_train=2, num_val=1, size=48, seed=3)
    toy.make_ade_toy(str(tmp_path / 'b'), num_train=2, num_val=1, size=48, seed=3)
    for f in (tmp_path / 'a').rglob('*.*'):
        assert f.read_bytes() == (tmp_path / 'b' / f.relative_to(tmp_path / 'a')).read_bytes()


def test_ade_toy_layout(tmp_path):
    counts = toy.make_ade_toy(str(tmp_path), num_train=3, num_val=2, size=48)
    assert counts == {'training': 3, 'validation': 2}
    values = set()
    for split in counts:
        for img in (tmp_path / 'images' / split).glob('*.jpg'):
            ann = Image.open(tmp_path / 'annotations' / split / f'{img.stem}.png')
            assert ann.size == Image.open(img).size
            values |= set(np.unique(np.array(ann)).tolist())
    assert img.stem.startswith('ADE_val_')
    # 0 (unlabelled, ignored via reduce_zero_label), background and at least one shape
    assert 0 in values and 1 in values and values <= set(toy.ADE_VALUES.values())
    assert len(values) >= 3


# --------------------------------------------------------------- the checker
def test_check_passes_the_good_set(data, capsys):
    rc, out = _check(capsys, data[0] / 'good')
    assert rc == 0, out
    assert 'ERROR' not in out and 'OK:' in out
    assert 'background' in out and 'circle' in out         # class pixel summary


@pytest.mark.parametrize('variant', list(toy.BROKEN_VARIANTS))
def test_check_fails_each_broken_set_naming_problem_and_file(data, capsys, variant):
    root, touched = data
    rc, out = _check(capsys, root / 'broken' / variant)
    assert rc == 1, out
    code = toy.BROKEN_VARIANTS[variant]
    lines = [ln for ln in out.splitlines() if ln.startswith('ERROR')]
    assert any(f'[{code}]' in ln for ln in lines), out
    where = touched[variant]
    if variant == 'unpaired':        # the image whose mask was deleted is named
        where = where.replace('masks/', 'images/').replace('.png', '.jpg')
        assert any('[unpaired-mask] masks/val/val_orphan.png' in ln for ln in lines), out
    assert any(f'[{code}] {where}' in ln for ln in lines), out
    assert 'FAILED' in out


def test_check_reports_every_problem_at_once(data, tmp_path, capsys):
    ds = tmp_path / 'many'
    shutil.copytree(data[0] / 'good', ds)
    (ds / 'masks' / 'train' / 'train_0000.png').unlink()                       # unpaired
    m = np.array(Image.open(ds / 'masks' / 'val' / 'val_0000.png'))
    m[0, 0] = 9
    Image.fromarray(m).save(ds / 'masks' / 'val' / 'val_0000.png')             # out of range
    Image.open(ds / 'masks' / 'val' / 'val_0001.png').convert('RGB').save(
        ds / 'masks' / 'val' / 'val_0001.png')                                  # RGB
    shutil.copy(ds / 'masks' / 'val' / 'val_0002.png', ds / 'masks' / 'val' / 'val_0002.jpg')
    (ds / 'masks' / 'val' / 'val_0002.png').unlink()                            # JPEG mask
    rc, out = _check(capsys, ds)
    assert rc == 1
    for expected in ('[unpaired-image] images/train/train_0000.jpg',
                     '[label-out-of-range] masks/val/val_0000.png: label values 9',
                     '[rgb-mask] masks/val/val_0001.png',
                     '[mask-format] masks/val/val_0002.jpg'):
        assert expected in out, out
    assert 'FAILED: 4 problem(s)' in out


def test_check_flags_meta_and_class_count(data, tmp_path, capsys):
    rc, out = _check(capsys, data[0] / 'good', '--num-classes', 3)
    assert rc == 1 and '[meta]' in out and 'num_classes is 3' in out
    ds = tmp_path / 'nometa'
    shutil.copytree(data[0] / 'good', ds)
    (ds / 'meta.json').unlink()
    rc, out = _check(capsys, ds)
    assert rc == 1 and '[meta] meta.json: not found' in out
    assert _check(capsys, ds, '--num-classes', 4)[0] == 0
    (ds / 'meta.json').write_text('{"classes": ["a"]}')
    assert _check(capsys, ds)[0] == 1


def test_check_reduce_zero_label_range(tmp_path, capsys):
    toy.make_ade_toy(str(tmp_path), num_train=2, num_val=1, size=48)
    args = [tmp_path, '--img-dir', 'images', '--mask-dir', 'annotations',
            '--splits', 'training', 'validation', '--reduce-zero-label']
    assert _check(capsys, *args, '--num-classes', 150)[0] == 0
    rc, out = _check(capsys, *args, '--num-classes', 2)    # value 5 ('tree') is class 4
    assert rc == 1 and '[label-out-of-range]' in out and 'valid are 1..2' in out


def test_check_ade_config_uses_the_dataset_class_conventions(tmp_path, capsys):
    """ADE20KDataset fixes '.jpg' and reduce_zero_label=True; the checker reads them."""
    toy.make_ade_toy(str(tmp_path), num_train=2, num_val=1, size=48)
    config = ROOT / 'configs' / 'inline_pvt' / 'fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py'
    opts = [f'{loader}.dataset.data_root={tmp_path}' for loader in
            ('train_dataloader', 'val_dataloader', 'test_dataloader')]
    rc, out = _check(capsys, '--config', config, '--cfg-options', *opts)
    assert rc == 0, out
    assert 'reduce_zero_label True' in out and 'wall' in out      # ADE20K's own class names


@pytest.mark.subprocess
def test_check_cli_exit_status(data):
    """The script itself exits non-zero on a broken set."""
    run = [sys.executable, str(ROOT / 'tools' / 'misc' / 'check_dataset.py')]
    ok = subprocess.run(run + [str(data[0] / 'good')], capture_output=True, text=True)
    bad = subprocess.run(run + [str(data[0] / 'broken' / 'rgb_masks')], capture_output=True,
                         text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert bad.returncode == 1 and '[rgb-mask]' in bad.stdout


# ----------------------------------------------------------- convert_masks
def test_convert_masks_fixes_the_rgb_variant(data, tmp_path, capsys):
    src = data[0] / 'broken' / 'rgb_masks'
    ds = tmp_path / 'fixed'
    shutil.copytree(src, ds, ignore=shutil.ignore_patterns('masks'))
    assert convert_masks.main([str(src / 'masks'), str(ds / 'masks'),
                               '--meta', str(src / 'meta.json')]) == 0
    rgb = np.array(Image.open(src / 'masks' / 'train' / 'train_0001.png'))
    index = Image.open(ds / 'masks' / 'train' / 'train_0001.png')
    assert index.mode == 'P'
    palette = np.array(toy.FOLDER_PALETTE, np.uint8)
    assert np.array_equal(palette[np.array(index)], rgb)       # every pixel round-trips
    capsys.readouterr()
    rc, out = _check(capsys, ds)
    assert rc == 0, out


def test_convert_masks_binary_unknown_nearest_gray(data, tmp_path, capsys):
    src = data[0] / 'broken' / 'binary_255'
    assert convert_masks.main([str(src / 'masks'), str(tmp_path / 'bin'),
                               '--meta', str(src / 'meta.json')]) == 0
    assert set(np.unique(np.array(Image.open(tmp_path / 'bin' / 'train' / 'train_0000.png')))) \
        == {0, 1}

    rgb = np.zeros((8, 8, 3), np.uint8)
    rgb[:4] = (250, 2, 1)           # near red: JPEG-like noise
    rgb[6:] = (9, 9, 200)           # not in the palette at all
    rgb[4:6] = (255, 255, 255)      # an "unlabelled" colour
    (tmp_path / 'in').mkdir()
    Image.fromarray(rgb).save(tmp_path / 'in' / 'a.png')
    pal = '0,0,0;255,0,0'
    assert convert_masks.main([str(tmp_path / 'in'), str(tmp_path / 'o1'), '--palette', pal]) == 1
    out = capsys.readouterr().out
    assert 'a.png' in out and '(9,9,200) 16 px' in out and '(250,2,1) 32 px' in out
    assert 'nothing written' in out
    assert not (tmp_path / 'o1').exists()      # no empty or partial output folder
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith('.')] == []
    assert convert_masks.main([str(tmp_path / 'in'), str(tmp_path / 'o2'), '--palette', pal,
                               '--nearest', '8', '--ignore-color', '255,255,255',
                               '--unknown', 'ignore']) == 0
    got = np.array(Image.open(tmp_path / 'o2' / 'a.png'))
    assert (got[:4] == 1).all() and (got[4:] == 255).all()

    grey = np.repeat(np.array([[0, 1], [2, 3]], np.uint8)[..., None], 3, axis=2)
    (tmp_path / 'g').mkdir()
    Image.fromarray(grey).save(tmp_path / 'g' / 'b.png')
    assert convert_masks.main([str(tmp_path / 'g'), str(tmp_path / 'o3'), '--gray']) == 0
    assert np.array_equal(np.array(Image.open(tmp_path / 'o3' / 'b.png')), grey[..., 0])


def test_convert_masks_failed_run_leaves_what_was_there(tmp_path, capsys):
    """Into an existing folder: a failed run changes nothing in it; a good run adds and
    replaces files of the same name and keeps the others."""
    (tmp_path / 'in' / 'sub').mkdir(parents=True)
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / 'in' / 'sub' / 'a.png')
    bad = np.zeros((4, 4, 3), np.uint8)
    bad[0, 0] = (9, 9, 9)
    Image.fromarray(bad).save(tmp_path / 'in' / 'b.png')
    out = tmp_path / 'out'
    (out / 'sub').mkdir(parents=True)
    (out / 'keep.txt').write_text('mine')
    (out / 'sub' / 'a.png').write_bytes(b'old')
    before = sorted(p.relative_to(out) for p in out.rglob('*'))
    args = [str(tmp_path / 'in'), str(out), '--palette', '0,0,0;255,0,0']
    assert convert_masks.main(args) == 1
    assert sorted(p.relative_to(out) for p in out.rglob('*')) == before
    assert (out / 'sub' / 'a.png').read_bytes() == b'old'
    (tmp_path / 'in' / 'b.png').unlink()
    assert convert_masks.main(args) == 0
    assert (out / 'keep.txt').read_text() == 'mine'
    assert np.array_equal(np.array(Image.open(out / 'sub' / 'a.png')), np.zeros((4, 4)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ['in', 'out']   # no scratch left
    capsys.readouterr()


# ---------------------------------------------------------- SegFolderDataset
def _folder_cfg(root, split='train', **kw):
    cfg = dict(type='SegFolderDataset', data_root=str(root),
               data_prefix=dict(img_path=f'images/{split}', seg_map_path=f'masks/{split}'),
               pipeline=[dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                         dict(type='PackSegInputs')])
    cfg.update(kw)
    return cfg


def test_folder_dataset_reads_meta_and_mixed_formats(data):
    init_default_scope('mmseg')
    good = data[0] / 'good'
    ds = DATASETS.build(_folder_cfg(good, metainfo=dict(classes=toy.FOLDER_CLASSES)))
    assert type(ds).__name__ == 'SegFolderDataset'
    assert ds.metainfo['classes'] == toy.FOLDER_CLASSES
    assert ds.metainfo['palette'] == [list(p) for p in toy.FOLDER_PALETTE]
    infos = [ds.get_data_info(i) for i in range(len(ds))]
    assert len(ds) == 6 and {Path(d['img_path']).suffix for d in infos} == {'.jpg', '.png'}
    sample = ds[4]                  # train_0004.png, an image stored as PNG
    assert sample['data_samples'].img_path.endswith('train_0004.png')
    gt = sample['data_samples'].gt_sem_seg.data
    assert gt.shape[-2:] == sample['inputs'].shape[-2:]
    assert set(gt.unique().tolist()) <= {0, 1, 2, 3}


def test_folder_dataset_refuses_what_would_break_training(data, tmp_path):
    init_default_scope('mmseg')
    root, _ = data
    with pytest.raises(ValueError, match='differ from those in'):
        DATASETS.build(_folder_cfg(root / 'good', metainfo=dict(classes=('a', 'b'))))
    with pytest.raises(FileNotFoundError, match='have no mask: .*train_0000.png'):
        DATASETS.build(_folder_cfg(root / 'broken' / 'unpaired'))
    with pytest.raises(FileNotFoundError, match='no images'):
        DATASETS.build(_folder_cfg(root / 'broken' / 'empty_split', split='val'))
    with pytest.raises(ValueError, match='ignore_index must be 255'):
        DATASETS.build(_folder_cfg(root / 'good', reduce_zero_label=True, ignore_index=0))
    bare = tmp_path / 'bare'
    shutil.copytree(root / 'good', bare)
    (bare / 'meta.json').unlink()
    with pytest.raises(FileNotFoundError, match='no classes'):
        DATASETS.build(_folder_cfg(bare))
    ds = DATASETS.build(_folder_cfg(bare, metainfo=dict(classes=toy.FOLDER_CLASSES)))
    assert len(ds.metainfo['palette']) == 4           # generated when meta.json is absent
    (bare / 'meta.json').write_text('{"classes": ["a", "b"], "palette": [[0, 0, 0]]}')
    with pytest.raises(ValueError, match='1 colours for 2 classes'):
        DATASETS.build(_folder_cfg(bare))


def test_folder_dataset_without_masks(data):
    init_default_scope('mmseg')
    cfg = _folder_cfg(data[0] / 'good', split='val', with_masks=False,
                      pipeline=[dict(type='LoadImageFromFile'), dict(type='PackSegInputs')])
    cfg['data_prefix'] = dict(img_path='images/val')
    ds = DATASETS.build(cfg)
    assert len(ds) == 3
    assert all('seg_map_path' not in ds.get_data_info(i) for i in range(3))
    assert ds[0]['inputs'].shape[0] == 3


# ---------------------------------------------------------- PaletteIoUMetric
@pytest.mark.parametrize('reduce_zero_label', [False, True])
def test_palette_metric_scores_and_saves_palette_pngs(tmp_path, reduce_zero_label):
    init_default_scope('mmseg')
    metric = METRICS.build(dict(type='PaletteIoUMetric', output_dir=str(tmp_path)))
    palette = [[0, 0, 0], [200, 10, 10], [10, 200, 10]]
    metric.dataset_meta = dict(classes=('bg', 'a', 'b'), palette=palette)
    pred = torch.tensor([[0, 1], [2, 2]])
    gt = torch.tensor([[0, 1], [2, 255]])
    sample = SegDataSample(pred_sem_seg=PixelData(data=pred[None]),
                           gt_sem_seg=PixelData(data=gt[None]))
    sample.set_metainfo(dict(img_path='/x/images/val/scene_7.jpg',
                             reduce_zero_label=reduce_zero_label))
    metric.process({}, [sample.to_dict()])
    assert metric.compute_metrics(metric.results)['mIoU'] == 100.0   # 255 is ignored
    im = Image.open(tmp_path / 'scene_7.png')
    assert im.mode == 'P'
    shift = int(reduce_zero_label)
    assert np.array_equal(np.array(im), pred.numpy() + shift)
    flat = im.getpalette()[:3 * (3 + shift)]
    assert flat == ([0, 0, 0] * shift + [c for rgb in palette for c in rgb])
