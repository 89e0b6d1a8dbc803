"""The data checks decode every file as the training pipelines will: broken files made for
real (cut, emptied, replaced), refused with their names by tools/misc/check_dataset.py and by
DatasetCheckHook before iteration 1; good files written in other ways still pass."""
import copy
import io
import logging
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import cv2
import mmengine.dist
import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope
from PIL import Image, ImageFile

import inline_mm  # noqa: F401
from inline_mm.cli import check_dataset
from inline_mm.datasets import dataset_files, folder_checks, image_reading
from inline_mm.engine import DatasetCheckHook
from inline_mm.datasets.toy import segmentation as toy
from reliability_support import SHIPPED, hook_checked_runner, toy_ade, toy_coco
from support import load_script

ROOT = Path(__file__).resolve().parents[1]


def _cut(path: Path, keep: int):
    """Keep the first ``keep`` bytes (negative: drop the last ``-keep``)."""
    data = path.read_bytes()
    path.write_bytes(data[:keep])


def _halve(path: Path):
    _cut(path, len(path.read_bytes()) // 2)


#: file of the toy folder set -> (how it is broken, the code it must get)
BROKEN = {
    'images/train/train_0000.jpg': (_halve, 'truncated'),
    'images/train/train_0001.jpg': (lambda p: p.write_bytes(b''), 'unreadable'),
    'images/train/train_0002.jpg': (lambda p: p.write_text('<html>404 Not Found</html>\n'),
                                    'unreadable'),
    'images/train/train_0003.jpg': (
        lambda p: p.write_bytes(b'\xff\xd8\xff\xe0' + np.random.default_rng(0).bytes(4000)),
        'unreadable'),
    # Pillow decodes a PNG without its end chunk; OpenCV (LoadImageFromFile) does not.
    'images/train/train_0004.png': (lambda p: _cut(p, -12), 'corrupt'),
    # A palette PNG spends most of a small file on its palette: cut into the pixels.
    'masks/val/val_0000.png': (lambda p: _cut(p, -30), 'truncated'),
}
#: what --quick still finds: a header that cannot be read; masks are decoded for labels
FOUND_BY_QUICK = {'images/train/train_0001.jpg', 'images/train/train_0002.jpg',
                  'images/train/train_0003.jpg', 'masks/val/val_0000.png'}


@pytest.fixture(scope='module')
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp('decode')
    toy.make_folder_toy(str(root / 'good'), num_train=6, num_val=3, size=64)
    shutil.copytree(root / 'good', root / 'broken')
    for rel, (damage, _) in BROKEN.items():
        damage(root / 'broken' / rel)
    return root / 'good', root / 'broken'


def _check(capsys, *argv):
    rc = check_dataset.main([str(a) for a in argv])
    return rc, capsys.readouterr().out


# ------------------------------------------------------------------ tools/misc/check_dataset.py
@pytest.mark.parametrize('jobs', [1, 2])
def test_check_refuses_every_broken_file_by_name(folders, capsys, jobs):
    rc, out = _check(capsys, folders[1], '--jobs', jobs)
    assert rc == 1, out
    for rel, (_, code) in BROKEN.items():
        assert f'ERROR   [{code}] {rel}:' in out, (rel, out)
    assert f'FAILED: {len(BROKEN)} problem(s)' in out
    assert 'checked 9 images and 9 masks (' in out


def test_check_good_set_reports_files_bytes_and_time(folders, capsys):
    rc, out = _check(capsys, folders[0], '--jobs', 2)
    assert rc == 0, out
    line = re.search(r'checked 9 images and 9 masks \((\d+) kB\) in (\d+\.\d) s on 2 threads',
                     out)
    assert line, out
    total = sum(p.stat().st_size for p in folders[0].rglob('*.*') if p.suffix != '.json')
    assert int(line[1]) == round(total / 1e3)
    assert 'quick' not in out


def test_quick_reads_headers_and_says_what_it_misses(folders, capsys):
    rc, out = _check(capsys, folders[1], '--quick')
    assert rc == 1
    for rel, (_, code) in BROKEN.items():
        assert (f'] {rel}:' in out) == (rel in FOUND_BY_QUICK), (rel, out)
    assert 'quick: image headers only, images not decoded: truncated or corrupt images are ' \
           'not found' in out
    assert 'checked 9 image headers and 9 masks' in out


def test_check_ade_config_decodes_too(tmp_path, capsys):
    root = toy_ade(tmp_path / 'ade', num_train=3, size=48)
    bad = root / 'images' / 'validation' / 'ADE_val_00000001.jpg'
    _halve(bad)
    config = ROOT / 'configs' / 'inline_pvt' / 'fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py'
    opts = [f'{loader}.dataset.data_root={root}' for loader in
            ('train_dataloader', 'val_dataloader', 'test_dataloader')]
    rc, out = _check(capsys, '--config', config, '--cfg-options', *opts, '--jobs', 1)
    assert rc == 1 and '[truncated] images/validation/ADE_val_00000001.jpg' in out, out
    assert 'checked 5 images and 5 masks' in out


def test_progress_line_only_for_long_checks():
    class Stream(io.StringIO):
        def isatty(self):
            return False
    quiet, slow = Stream(), Stream()
    check_dataset.Progress('decoding', quiet, after=60)(5, 10)
    progress = check_dataset.Progress('decoding', slow, after=0, every=0)
    progress(5, 10)
    progress(10, 10)
    assert quiet.getvalue() == ''
    assert slow.getvalue().splitlines()[0].startswith('decoding: 5 of 10 (50%)')


# ------------------------------------------------------------------ the decode rules
def test_a_lenient_loader_or_setting_does_not_let_a_truncated_file_pass(folders, monkeypatch):
    """OpenCV 4.x returns a partial image with only a libjpeg warning for a cut JPEG, and
    a library may have set Pillow's LOAD_TRUNCATED_IMAGES: the file is refused anyway,
    and the setting is as it was afterwards."""
    path = str(folders[1] / 'images/train/train_0000.jpg')
    h, w = image_reading.image_size(path)
    monkeypatch.setattr(image_reading, '_cv2_decode', lambda data: np.zeros((h, w, 3), np.uint8))
    monkeypatch.setattr(ImageFile, 'LOAD_TRUNCATED_IMAGES', True)
    assert [p.code for p in image_reading.decode_problems(path)] == ['truncated']
    assert [p.code for p in dataset_files.parallel_map(image_reading.decode_problems, [path] * 3,
                                                       jobs=2)[2]] == ['truncated']
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True
    assert image_reading.read_file(path, decode=False).problems == []     # the header is fine


def test_jpeg_cut_at_any_point_is_refused(tmp_path):
    """Cut inside the header (OpenCV returns None) or inside the pixel data."""
    rng = np.random.default_rng(1)
    img = (rng.random((512, 683, 3)) * 255).astype(np.uint8)
    Image.fromarray(img).save(tmp_path / 'a.jpg', quality=90)
    data = (tmp_path / 'a.jpg').read_bytes()
    for keep in (300, len(data) // 2, len(data) - 100):
        (tmp_path / 'cut.jpg').write_bytes(data[:keep])
        assert [p.code for p in image_reading.decode_problems(str(tmp_path / 'cut.jpg'))] in (
            ['truncated'], ['unreadable']), keep
        assert cv2.imread(str(tmp_path / 'cut.jpg')) is None or keep > 300


def _well_formed_files(folder: Path) -> dict:
    """Good files written in other ways than the toy sets: kind -> paths."""
    rng = np.random.default_rng(2)
    rgb = (rng.random((37, 61, 3)) * 255).astype(np.uint8)
    images = {
        'cv2.jpg': lambda p: cv2.imwrite(str(p), rgb),
        'cv2.png': lambda p: cv2.imwrite(str(p), rgb),
        'progressive.jpg': lambda p: Image.fromarray(rgb).save(p, progressive=True, quality=80),
        'grey.jpg': lambda p: Image.fromarray(rgb[..., 0]).save(p),
        'cmyk.jpg': lambda p: Image.fromarray(rgb).convert('CMYK').save(p),
        'rgba.png': lambda p: Image.fromarray(np.dstack([rgb, rgb[..., :1]]), 'RGBA').save(p),
        'deep.png': lambda p: cv2.imwrite(str(p), rgb.astype(np.uint16) * 257),
        'palette.png': lambda p: Image.fromarray(rgb).convert('P').save(p),
        'a.bmp': lambda p: Image.fromarray(rgb).save(p),
        'a.tif': lambda p: Image.fromarray(rgb).save(p, compression='tiff_lzw'),
        'a.webp': lambda p: Image.fromarray(rgb).save(p, quality=70),
    }
    exif = Image.Exif()
    exif[0x0112] = 6        # rotated by OpenCV: height and width swap
    images['exif6.jpg'] = lambda p: Image.fromarray(rgb).save(p, exif=exif.tobytes())
    labels = (rng.random((37, 61)) * 4).astype(np.uint8)
    masks = {
        'grey.png': lambda p: Image.fromarray(labels).save(p),
        'palette.png': lambda p: toy.save_index_png(str(p), labels),
        'deep.png': lambda p: Image.fromarray(labels.astype(np.uint16)).save(p),
        'cv2.png': lambda p: cv2.imwrite(str(p), labels),
        'bits.png': lambda p: Image.fromarray(labels > 1).save(p),
    }
    out = {}
    for kind, files in (('image', images), ('mask', masks)):
        (folder / kind).mkdir()
        for name, write in files.items():
            write(folder / kind / name)
        out[kind] = sorted(str(p) for p in (folder / kind).iterdir())
    return out


def test_files_written_other_ways_are_not_refused(tmp_path):
    files = _well_formed_files(tmp_path)
    for kind, paths in files.items():
        for path in paths:
            assert image_reading.decode_problems(path, kind) == [], path
    found = folder_checks.check_pair(files['image'][0], str(tmp_path / 'mask' / 'deep.png'))
    assert found.problems == [] and set(found.histogram) <= {0, 1, 2, 3}
    bits = tmp_path / 'mask' / 'bits.png'          # 1-bit: the labels the loader gets
    assert folder_checks.check_pair(files['image'][0], str(bits)).histogram.keys() \
        == set(np.unique(np.array(Image.open(bits))).tolist())


def test_read_file_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="'image' or 'mask'"):
        image_reading.read_file('x.png', 'label')


# ------------------------------------------------------------------ DatasetCheckHook
def test_hook_refuses_undecodable_files_before_the_first_iteration(tmp_path):
    root = toy_ade(tmp_path / 'ade', num_train=4, size=64)
    image = root / 'images/training/ADE_train_00000002.jpg'
    mask = root / 'annotations/training/ADE_train_00000003.png'
    _halve(image)
    mask.write_text('not a png')
    runner = hook_checked_runner(tmp_path, root)
    with pytest.raises(ValueError) as err:
        runner.train()
    message = str(err.value)
    assert '2 problem(s)' in message and 'checked 4 images and 4 masks (' in message
    assert f'{image}: the file ends before its pixels do' in message
    assert f'{mask}: not an image file that Pillow recognises' in message
    assert runner.iter == 0


def _runner(*datasets):
    """What the hook reads of a runner: the loops' datasets and the logger."""
    loop = SimpleNamespace(dataloader=SimpleNamespace(dataset=datasets[0]))
    runner = SimpleNamespace(_train_loop=loop, logger=logging.getLogger('test_data_decode'))
    if len(datasets) > 1:
        runner._val_loop = SimpleNamespace(dataloader=SimpleNamespace(dataset=datasets[1]))
    return runner


@pytest.fixture(scope='module')
def coco_dataset(tmp_path_factory):
    from mmdet.registry import DATASETS
    root = toy_coco(tmp_path_factory.mktemp('coco'), num_train=6)
    cfg = Config.fromfile(str(SHIPPED['mask_rcnn']))
    ds = copy.deepcopy(cfg.train_dataloader.dataset)
    ds.update(data_root=str(root), metainfo=dict(classes=('circle', 'triangle', 'rectangle')))
    init_default_scope('mmdet')
    dataset = DATASETS.build(ds)
    dataset.full_init()
    return dataset


def test_hook_decodes_detection_images_too(coco_dataset, caplog):
    paths = [Path(coco_dataset.get_data_info(i)['img_path']) for i in range(len(coco_dataset))]
    backup = paths[4].read_bytes()
    hook = DatasetCheckHook(num_workers=2)
    with caplog.at_level(logging.INFO, 'test_data_decode'):
        hook.before_train(_runner(coco_dataset))
    assert f'checked {len(paths)} images (' in caplog.text and ' s' in caplog.text
    try:
        _halve(paths[4])
        DatasetCheckHook(decode=False).before_train(_runner(coco_dataset))   # headers only
        with pytest.raises(ValueError, match=rf'1 problem\(s\).*\n  {re.escape(str(paths[4]))}: '
                                             'the file ends before its pixels do'):
            hook.before_train(_runner(coco_dataset))
    finally:
        paths[4].write_bytes(backup)


def test_hook_checks_its_shard_and_fails_with_every_ranks_problems(coco_dataset, tmp_path,
                                                                   monkeypatch):
    """World size 2: rank 0 checks samples 0, 2, 4, ..., gathers rank 1's problems and
    raises the complete, sorted list (as rank 1 does)."""
    infos = [coco_dataset.get_data_info(i) for i in range(len(coco_dataset))]
    shards = [dataset_files.check_dataset_files([coco_dataset], shard=(r, 2), decode=False)
              for r in range(2)]
    assert [s.tally.images for s in shards] == [(len(infos) + 1) // 2, len(infos) // 2]

    class Dataset:
        """The COCO samples, with broken copies of samples 1 and 2 (rank 1 and 0)."""
        def __len__(self):
            return len(infos)

        def get_data_info(self, i):
            return dict(infos[i], img_path=str(broken[i])) if i in broken else infos[i]
    broken = {}
    for i in (1, 2):
        broken[i] = tmp_path / Path(infos[i]['img_path']).name
        broken[i].write_bytes(Path(infos[i]['img_path']).read_bytes()[:200])
    dataset = Dataset()
    rank1 = dataset_files.check_dataset_files([dataset], shard=(1, 2))
    assert [p.path for p in rank1.problems] == [str(broken[1])]
    gathered = []

    def all_gather_object(obj):
        gathered.append(obj)
        return [obj, (rank1.problems, rank1.tally, 0.1, None)]
    monkeypatch.setattr(mmengine.dist, 'get_rank', lambda: 0)
    monkeypatch.setattr(mmengine.dist, 'get_world_size', lambda: 2)
    monkeypatch.setattr(mmengine.dist, 'all_gather_object', all_gather_object)
    with pytest.raises(ValueError) as err:
        DatasetCheckHook(num_workers=1).before_train(_runner(dataset))
    assert [p.path for p in gathered[0][0]] == [str(broken[2])]     # rank 0 read its shard
    listed = re.findall(r'^  (\S+): ', str(err.value), re.M)
    assert listed == sorted([str(broken[1]), str(broken[2])])
    assert f'checked {len(infos)} images' in str(err.value)


def test_hook_calls_nothing_distributed_in_one_process(coco_dataset, monkeypatch):
    def refuse(*args):
        raise AssertionError('all_gather_object called with world size 1')
    monkeypatch.setattr(mmengine.dist, 'all_gather_object', refuse)
    DatasetCheckHook(num_workers=1).before_train(_runner(coco_dataset))


def test_hook_rejects_bad_worker_counts():
    with pytest.raises(ValueError, match='num_workers'):
        DatasetCheckHook(num_workers=0)


# ------------------------------------------------------------------ shipped configs
def test_own_data_template_checks_its_data_by_default_and_passes_the_toy_set(folders, caplog):
    """On in the template (user data is where broken files come from), off in the ADE20K
    and COCO configs (the bases say how to switch it on and what it costs)."""
    from mmseg.registry import DATASETS
    template = Config.fromfile(str(
        ROOT / 'configs/custom/inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512.py'))
    assert [h['type'] for h in template.custom_hooks] == ['DatasetCheckHook']
    for shipped in ('upernet', 'mask_rcnn'):
        hooks = Config.fromfile(str(SHIPPED[shipped])).get('custom_hooks') or []
        assert 'DatasetCheckHook' not in [h['type'] for h in hooks], shipped
    init_default_scope('mmseg')
    built = []
    for loader in (template.train_dataloader, template.val_dataloader):
        loader.dataset.data_root = str(folders[0])
        built.append(DATASETS.build(loader.dataset))
    with caplog.at_level(logging.INFO, 'test_data_decode'):
        DatasetCheckHook(**{k: v for k, v in template.custom_hooks[0].items() if k != 'type'}
                         ).before_train(_runner(*built))
    assert 'checked 9 images and 9 masks (' in caplog.text


def test_benchmark_set_is_ade20k_like_and_passes(tmp_path, capsys):
    """benchmarks/dataset_check.py times the checks on this set (at 2,000 pairs)."""
    bench = load_script('benchmarks/dataset_check.py')
    bench.make_set(str(tmp_path), 2)
    image = Image.open(tmp_path / 'images' / 'train' / '000001.jpg')
    assert image.size == (683, 512) and image.format == 'JPEG'
    rc, out = _check(capsys, tmp_path, '--splits', 'train', '--jobs', 1)
    assert rc == 0 and 'checked 2 images and 2 masks' in out, out
