#!/usr/bin/env python
"""Does a Mask R-CNN give an image the same detections alone and batched next to a larger one?

    python tools/analysis_tools/padding_consistency.py CONFIG CHECKPOINT \\
        [--num-images N] [--skip-ap]
    # the demo model:
    python tools/analysis_tools/padding_consistency.py \\
        configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py \\
        work_dirs/demo/iter_550.pth
    # with mmdet's stock RPNHead instead of the configs' PadAwareRPNHead:
    python tools/analysis_tools/padding_consistency.py CONFIG CHECKPOINT \\
        --cfg-options model.rpn_head.type=RPNHead

mmdet batches images of different sizes by zero-padding them bottom/right (after
normalisation, to a multiple of 32). Every measurement runs twice, with the backbone's
``pad_aware`` switched off (the plain behaviour of mmdet's backbones) and on.

(a) **Alone vs batched.** Each val image (as the test pipeline gives it) is resized to
``--small-size`` (default 256x160, W x H) and run through the model's own
DetDataPreprocessor and heads alone (a batch of one) and as the first image of a batch of
two whose second image is the next val image at full size (256x256 for the toy set), so
the batch is padded below it. Its detections are compared: counts, pairs matched greedily
(same label, highest IoU, IoU >= 0.5; in score order), max box shift (px), max score
difference, detections lost / gained, the smallest mask IoU of a pair; an image counts as
identical when every detection has a partner within 0.01 px and 1e-4 in score. Features
are compared on the image's own cells: relative difference max|alone - batched| / max|alone|,
and how many cells from the padded edge the difference (> 1e-5) reaches. To say where the
remaining differences come from, the RoI head is also run on mixed inputs:
``anchors on image``: batched features, but the RPN's outputs cropped to the image's cells
(no anchors in the padded area, exactly the alone run's anchors);
``alone proposals``: batched features, the alone run's proposals (only the features the
RoI head pools differ); ``batched proposals``: the alone run's features, the batched
run's proposals (only the proposals differ); ``alone, 0-padded``: the alone run's features
zero-padded to the batch's map size and its proposals (only RoIAlign differs: bilinear
samples past the image's last row/column interpolate with the padding instead of clamping
to the edge). It also counts the RPN's pre-NMS candidates (each level's ``nms_pre`` best
anchors) that lie in the padded area, and the proposals that reach the padded edge (where
those anchors' boxes end up, clipped to the image).

(b) **AP at test batch 1 vs 2.** Writes a copy of the val set with ``--ap-fraction``
(0.6: 36 of 60) of its images resized to ``--small-size`` (boxes, polygons and RLE masks
scaled with them), picked with ``--seed`` so that as many test batches of two as possible
mix sizes (24 of 30 for 36 of 60), and runs the stock ``tools/test.py`` on it at test
batch 1 and 2 (``--ap-batches``) for both settings of ``pad_aware`` (``--cfg-options``).
``--skip-ap`` leaves it out.

The tool runs in the repository root (the configs' data paths are relative to it); on the
demo model, 60 images, it takes about 3 min on 2 cores (1 thread), 1 min without (b).
Everything printed is also written to ``<out-dir>/padding_consistency.json``.
"""
import argparse
import json
import os
import os.path as osp
import re
import subprocess
import sys

from inline_mm.analysis.consistency import (at_edge, compare_dets, merge, padded_anchors,
                                            region_diff, rel_diff, roi, run_pass, same_props)
from inline_mm.datasets.coco_resize import write_resized_set

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('--num-images', type=int, default=None, help='(a): val images (default: all)')
    p.add_argument('--small-size', type=int, nargs=2, default=(256, 160), metavar=('W', 'H'),
                   help='size the compared images are resized to (default: 256 160)')
    p.add_argument('--score-thrs', type=float, nargs='+', default=(0.05, 0.5),
                   help='(a): compare detections at these scores and above (default: 0.05 0.5)')
    p.add_argument('--skip-ap', action='store_true', help='leave out (b), the AP runs')
    p.add_argument('--ap-fraction', type=float, default=0.6,
                   help='(b): fraction of val images resized (default: 0.6)')
    p.add_argument('--ap-batches', type=int, nargs='+', default=(1, 2),
                   help='(b): test batch sizes (default: 1 2)')
    p.add_argument('--seed', type=int, default=0, help='(b): which images are resized')
    p.add_argument('--out-dir', default='work_dirs/padding_consistency')
    p.add_argument('--cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                   help='config overrides for (a) and every tools/test.py run of (b), e.g. '
                        'model.rpn_head.type=RPNHead (the stock head instead of the '
                        "configs' PadAwareRPNHead)")
    return p.parse_args(argv)


def cfg_options(pairs):
    """``KEY=VALUE`` strings -> the dict mmengine's ``--cfg-options`` makes of them."""
    from mmengine.config import DictAction
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition('=')
        if not sep:
            raise SystemExit(f'--cfg-options takes KEY=VALUE pairs, got {pair!r}')
        options[key] = DictAction._parse_iterable(value)
    return options


# --------------------------------------------------------------------- (a) alone vs batched
def alone_vs_batched(model, dataset, args):
    import mmcv
    import torch
    from mmdet.structures import DetDataSample
    w_s, h_s = args.small_size
    n = len(dataset) if args.num_images is None else min(args.num_images, len(dataset))
    nms_pre = model.rpn_head.test_cfg.get('nms_pre', -1)
    out, alone_prev = {}, None
    for pad_aware in (False, True):
        model.backbone.pad_aware = pad_aware
        feat = dict(backbone=0.0, neck=0.0, neck_inner=0.0, rpn=0.0, rpn_inner=0.0,
                    neck_depth=[], rpn_depth=[])
        props = dict(alone=0, batched=0, batched_same=0, anchors_on_image=0,
                     anchors_on_image_same=0, at_padded_edge_alone=0, at_padded_edge_batched=0,
                     top_k=0, top_k_padded=0, max_padded_objectness=0.0)
        dets = {}
        alone_dets = []
        for i in range(n):
            item, partner = dataset[i], dataset[(i + 1) % len(dataset)]
            img = item['inputs'].permute(1, 2, 0).numpy()
            small = torch.from_numpy(mmcv.imresize(img, (w_s, h_s))).permute(2, 0, 1).contiguous()
            meta = dict(img_id=item['data_samples'].img_id, img_path=item['data_samples'].img_path,
                        ori_shape=(h_s, w_s), img_shape=(h_s, w_s), scale_factor=(1.0, 1.0))
            with torch.no_grad():
                al = run_pass(model, [small], [DetDataSample(metainfo=meta)])
                ba = run_pass(model, [small, partner['inputs']],
                              [DetDataSample(metainfo=meta),
                               DetDataSample(metainfo=partner['data_samples'].metainfo)])
                if i == 0:   # the stage-by-stage pass is mmdet's own test path
                    ref = model.test_step(dict(inputs=[small, partner['inputs']],
                                               data_samples=[DetDataSample(metainfo=meta),
                                                             DetDataSample(metainfo=partner[
                                                                 'data_samples'].metainfo)]))
                    assert compare_dets(ref[0].pred_instances, ba['dets'][0], 0)['identical']
                (ha, wa), (hb, wb) = (r['samples'][0].batch_input_shape for r in (al, ba))
                pad_h, pad_w = hb > ha, wb > wa
                if not (pad_h or pad_w):
                    raise SystemExit(f'val image {(i + 1) % len(dataset)} is no larger than '
                                     f'{w_s}x{h_s}: choose a smaller --small-size')
                feat['backbone'] = max([feat['backbone']] + [
                    rel_diff(a[0], b[0, :, :a.shape[2], :a.shape[3]])
                    for a, b in zip(al['feats'], ba['feats'])])
                for key, xa, xb in (('neck', al['neck'], ba['neck']),
                                    ('rpn', al['rpn'][0], ba['rpn'][0])):
                    r = [region_diff(a, b, pad_h, pad_w) for a, b in zip(xa, xb)]
                    feat[key] = max(feat[key], *(x[0] for x in r))
                    feat[key + '_inner'] = max(feat[key + '_inner'], *(x[1] for x in r))
                    depth = feat[key + '_depth'] or [0] * len(r)
                    feat[key + '_depth'] = [max(d, x[2]) for d, x in zip(depth, r)]
                # The RPN's outputs of the batched run, on the image's cells only.
                crop = [[x[0:1, :, :a.shape[2], :a.shape[3]] for x, a in zip(outs, al['rpn'][0])]
                        for outs in ba['rpn']]
                p_img = model.rpn_head.predict_by_feat(
                    *crop, batch_img_metas=[ba['samples'][0].metainfo], rescale=False)[0]
                pa, pb = al['props'][0], ba['props'][0]
                padded_anchors(props, ba['rpn'][0], al['rpn'][0], nms_pre)
                for k, v in (('alone', len(pa)), ('batched', len(pb)),
                             ('batched_same', same_props(pa, pb)),
                             ('anchors_on_image', len(p_img)),
                             ('anchors_on_image_same', same_props(pa, p_img)),
                             ('at_padded_edge_alone', at_edge(pa, h_s, w_s, pad_h, pad_w)),
                             ('at_padded_edge_batched', at_edge(pb, h_s, w_s, pad_h, pad_w))):
                    props[k] += v
                variants = {
                    'batched': ba['dets'][0],
                    'anchors on image': roi(model, ba['neck'], p_img, ba['samples'][0]),
                    'alone proposals': roi(model, ba['neck'], pa, ba['samples'][0]),
                    'batched proposals': roi(model, al['neck'], pb, al['samples'][0]),
                    'alone, 0-padded': roi(model, [
                        torch.nn.functional.pad(a, (0, b.shape[3] - a.shape[3], 0,
                                                    b.shape[2] - a.shape[2]))
                        for a, b in zip(al['neck'], ba['neck'])], pa, ba['samples'][0]),
                }
            for thr in args.score_thrs:
                for name, d in variants.items():
                    merge(dets.setdefault(f'{thr:g}', {}).setdefault(name, {}),
                          compare_dets(al['dets'][0], d, thr))
            alone_dets.append(al['dets'][0])
        same_alone = None if alone_prev is None else all(
            compare_dets(a, b, 0)['identical'] for a, b in zip(alone_prev, alone_dets))
        alone_prev = alone_dets
        out[str(pad_aware)] = dict(features=feat, proposals=props, detections=dets,
                                   alone_same_as_pad_aware_false=same_alone)
    return dict(images=n, small_size=[w_s, h_s], results=out)


def print_a(res):
    w, h = res['small_size']
    print(f'\n(a) {res["images"]} val images, each resized to {w}x{h}: alone vs first of a batch '
          'of two with the next val image at full size')
    print('\nfeatures on the image\'s cells (max over images; max|alone - batched| / max|alone|; '
          '"depth": cells from the padded edge where it exceeds 1e-5, per level)')
    print(f'{"pad_aware":<10}{"backbone":>10}{"neck":>10}{"neck >1 cell":>14}'
          f'{"neck depth":>16}{"RPN out":>10}{"RPN >1 cell":>13}{"RPN depth":>16}')
    for pa, r in res['results'].items():
        f = r['features']
        print(f'{pa:<10}{f["backbone"]:>10.1e}{f["neck"]:>10.1e}{f["neck_inner"]:>14.1e}'
              f'{"/".join(map(str, f["neck_depth"])):>16}{f["rpn"]:>10.1e}'
              f'{f["rpn_inner"]:>13.1e}{"/".join(map(str, f["rpn_depth"])):>16}')
    print('\nRPN proposals (summed over images): alone, batched, batched that are an alone '
          'proposal; the same with the\nbatched RPN outputs cropped to the image (no anchors in '
          'the padded area); proposals that reach the padded edge')
    for pa, r in res['results'].items():
        p = r['proposals']
        print(f'pad_aware={pa:<6} alone {p["alone"]}, batched {p["batched"]} ({p["batched_same"]} '
              f'same), anchors on image {p["anchors_on_image"]} ({p["anchors_on_image_same"]} '
              f'same); at the padded edge: alone {p["at_padded_edge_alone"]}, batched '
              f'{p["at_padded_edge_batched"]}\n{"":17}pre-NMS candidates (top nms_pre per '
              f'level) on anchors in the padded area: {p["top_k_padded"]} of {p["top_k"]}, '
              f'their objectness up to {p["max_padded_objectness"]:.3f}')
    cols = ('identical', 'alone', 'batched', 'matched', 'iou99', 'max_shift', 'max_dscore',
            'lost', 'gained', 'min_mask_iou')
    for thr in next(iter(res['results'].values()))['detections']:
        print(f'\ndetections with score >= {thr}, alone vs the variant (summed / max / min over '
              'images)')
        print(f'{"pad_aware":<10}{"variant":<19}' + ''.join(f'{c:>13}' for c in cols))
        for pa, r in res['results'].items():
            for name, s in r['detections'][thr].items():
                vals = [f'{s["identical"]}/{s["images"]}'] + [
                    f'{s[c]:.3g}' if isinstance(s[c], float) else str(s[c]) for c in cols[1:]]
                print(f'{pa:<10}{name:<19}' + ''.join(f'{v:>13}' for v in vals))
    print('variants: batched = mmdet\'s test path on the batch; anchors on image = batched '
          'features, RPN outputs cropped to the\nimage\'s cells; alone proposals = batched '
          'features, the alone proposals; batched proposals = alone features, the\nbatched '
          'proposals; alone, 0-padded = alone features zero-padded to the batch map, alone '
          'proposals')
    same = res['results']['True']['alone_same_as_pad_aware_false']
    print(f'\nalone (no padding) detections identical with pad_aware False and True: {same}')


# --------------------------------------------------------------------- (b) AP at batch 1 vs 2
def run_test(config, checkpoint, work_dir, options):
    env = dict(os.environ)
    env.setdefault('OMP_NUM_THREADS', '1')
    out = subprocess.run([sys.executable, 'tools/test.py', config, checkpoint, '--work-dir',
                          work_dir, '--cfg-options', *options], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    log = out.stdout + out.stderr
    with open(osp.join(work_dir, 'test.log'), 'w') as f:
        f.write(log)
    found = {k: re.findall(re.escape(k) + r': (-?[\d.]+)', log)
             for k in ('coco/bbox_mAP', 'coco/segm_mAP')}
    if out.returncode or not all(found.values()):
        raise SystemExit(f'tools/test.py failed (exit {out.returncode}):\n{log[-3000:]}')
    return {k: float(v[-1]) for k, v in found.items()}


def ap_batch_1_vs_2(cfg, args):
    ds = cfg.test_dataloader.dataset
    dst = osp.join(args.out_dir, 'resized_val')
    chosen = write_resized_set(ds.data_root, ds.ann_file, ds.data_prefix['img'], dst,
                               args.ap_fraction, args.small_size, args.seed)
    with open(osp.join(dst, ds.ann_file)) as f:
        n = len(json.load(f)['images'])
    mixed = sum((i in chosen) != (i + 1 in chosen) for i in range(0, n - 1, 2))
    data = [f'test_dataloader.dataset.data_root={osp.abspath(dst)}/',
            f'test_evaluator.ann_file={osp.abspath(osp.join(dst, ds.ann_file))}',
            'test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False']
    runs = {}
    for pad_aware in (False, True):
        for batch in args.ap_batches:
            wd = osp.abspath(osp.join(args.out_dir, f'test_pad-aware-{pad_aware}_batch-{batch}'))
            os.makedirs(wd, exist_ok=True)
            runs[f'{pad_aware}/{batch}'] = run_test(
                args.config, args.checkpoint, wd,
                data + list(args.cfg_options) + [f'test_dataloader.batch_size={batch}',
                                                 f'model.backbone.pad_aware={pad_aware}'])
    return dict(images=n, resized=len(chosen), mixed_batches=mixed, batches=(n + 1) // 2,
                small_size=list(args.small_size), batch_sizes=list(args.ap_batches), ap=runs)


def print_b(res):
    w, h = res['small_size']
    print(f'\n(b) tools/test.py on the val set with {res["resized"]} of {res["images"]} images '
          f'resized to {w}x{h} ({res["mixed_batches"]} of {res["batches"]} test batches of 2 mix '
          'sizes): box / mask AP at each test batch size')
    sizes = res['batch_sizes']
    print(f'{"pad_aware":<10}' + ''.join(f'{f"batch {b}":>16}' for b in sizes) +
          ''.join(f'{f"batch {b} - {sizes[0]}":>18}' for b in sizes[1:]))
    for pa in ('False', 'True'):
        ap = [(res['ap'][f'{pa}/{b}']['coco/bbox_mAP'], res['ap'][f'{pa}/{b}']['coco/segm_mAP'])
              for b in sizes]
        print(f'{pa:<10}' + ''.join(f'{f"{x:.3f} / {y:.3f}":>16}' for x, y in ap) +
              ''.join(f'{f"{x - ap[0][0]:+.3f} / {y - ap[0][1]:+.3f}":>18}' for x, y in ap[1:]))


def main(argv=None):
    args = parse_args(argv)
    args.config, args.checkpoint, args.out_dir = (
        osp.abspath(p) for p in (args.config, args.checkpoint, args.out_dir))
    os.chdir(ROOT)                     # the configs' data paths are relative to it
    os.makedirs(args.out_dir, exist_ok=True)
    import torch
    torch.set_num_threads(int(os.environ.get('OMP_NUM_THREADS', '1')))
    from mmdet.apis import init_detector
    from mmdet.registry import DATASETS
    model = init_detector(args.config, args.checkpoint, device='cpu',
                          cfg_options=cfg_options(args.cfg_options) or None)
    cfg = model.cfg
    print(f'RPN head: {type(model.rpn_head).__name__}')
    summary = dict(config=args.config, checkpoint=args.checkpoint,
                   cfg_options=list(args.cfg_options), rpn_head=type(model.rpn_head).__name__)
    summary['alone_vs_batched'] = alone_vs_batched(
        model, DATASETS.build(cfg.test_dataloader.dataset), args)
    print_a(summary['alone_vs_batched'])
    if not args.skip_ap:
        sys.stdout.flush()
        summary['ap_batch_1_vs_2'] = ap_batch_1_vs_2(cfg, args)
        print_b(summary['ap_batch_1_vs_2'])
    with open(osp.join(args.out_dir, 'padding_consistency.json'), 'w') as f:
        json.dump(summary, f, indent=1)
    print(f'\nwritten: {osp.join(args.out_dir, "padding_consistency.json")}')


if __name__ == '__main__':
    main()
