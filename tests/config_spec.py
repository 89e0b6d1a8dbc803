"""The shipped configs' recipes, stated once, every value with its source: what
tests/test_detection_configs.py, tests/test_seg_configs.py, tests/test_cityscapes.py and
tests/test_head_configs.py check every config against (the ablations equal their main
config but for the switches: tests/test_ablation_configs.py). A recipe change is one edit
here and one in the config base that holds the value (configs/_base_/, the families'
configs/inline_<family>/_base_/ fragments and T configs).

The InLine paper (arXiv 2412.06590) publishes no dense configs; its nearest public
relatives are the same lab's: Agent-Attention (mmdet 2.x / mmseg 0.x, same first author),
MLLA, and the lab's mmdet 3.3 port in ViTTT. A source names the repository at the commit
read and the file, an mmdet/mmseg config, or ``ours: ...`` with the recipe the value
extrapolates from and why. Stronger evidence of the paper's own setting would win; none was
found (the InLine repository holds classification only; no author answer on dense settings
in the sister repositories' issues).

Drop path follows one stated rule by head, schedule and size (DROP_PATH: Agent-Attention's
file of the same schedule and size first, else MLLA's, else ViTTT's); InLine-CSwin takes the
Swin rule by size letter; InLine-DeiT, a plain ViT, takes mmseg's DeiT UperNet / ImageNet
rate 0.1 (InLine-DeiT-B is DeiT-S sized; the Swin letters' rates are for 4-stage pyramids).
The AMP children keep their parent's optimizer (``amp_optimizer``). Widths are not stated:
the tests compute what a neck or head must take from the backbone itself (conftest.out_channels)."""
import re
from typing import NamedTuple

from inline_mm.models.families import FAMILIES


class Value(NamedTuple):
    value: object
    source: str


def ours(why: str) -> str:
    return f'ours: {why}'


# --- the sources (repository@commit read, and file) ---------------------------------------
# A citation is ``<repository>@<commit> <path>`` (or ``mmdet 3.3.0 configs/<path>``,
# ``mmseg 1.2.2 configs/<path>``); ``{a,b}`` in a path stands for each alternative, and every
# alternative names a file that exists at that commit. In a source that is not ``ours: ...``,
# the citations outside parentheses are the files that say the value; those in parentheses
# are context (what else the lab does); a citation followed by a `backquoted` text is a file
# that holds that text. tools/dev/check_citations.py checks all three against local copies
# of the repositories (docs/dev/recipes.md).
AGENT = 'LeapLabTHU/Agent-Attention@207ce3eb357b22ef8a15f8fa21cd1f14697bbaba'
MLLA = 'LeapLabTHU/MLLA@66b6d297e5c93ef3f8821570daf41b71b6f7782f'
VITTT = 'LeapLabTHU/ViTTT@e3477587d099e6b9e83e9e7c80b1b999e0989a20'
_ADET = f'{AGENT} downstream/detection/configs/'
_ASEG = f'{AGENT} downstream/segmentation/configs/'
_ASWIN = _ADET + 'agent_swin/agent_swin_'
#: The lab's Swin detectors: Mask R-CNN T/S at 1x and 3x, Cascade T at 1x and 3x, S/B at 3x.
A_SWIN_MRCNN = _ASWIN + '{t,s}_mrcnn_{1x,3x}_9-12-14-7.py'
A_SWIN_CRCNN = (_ASWIN + 't_crcnn_{1x,3x}_9-12-14-7.py, ' + _ASWIN +
                '{s,b}_crcnn_3x_9-12-14-7.py')
A_SWIN_DET = A_SWIN_MRCNN + ', ' + A_SWIN_CRCNN
A_SWIN_1X = _ASWIN + '{t,s}_mrcnn_1x_9-12-14-7.py, ' + _ASWIN + 't_crcnn_1x_9-12-14-7.py'
A_SWIN_3X = _ASWIN + '{t,s}_mrcnn_3x_9-12-14-7.py, ' + _ASWIN + '{t,s,b}_crcnn_3x_9-12-14-7.py'
A_SCHED_1X = _ADET + '_base_/schedules/schedule_1x.py'
A_COCO = _ADET + '_base_/datasets/coco_instance.py'
A_RUNTIME = _ADET + '_base_/default_runtime.py'
A_PVT_MRCNN = _ADET + 'agent_pvt/agent_pvt_{t,s,m,l}_mrcnn_1x_12-16-28-28.py'
A_PVT_RTN = _ADET + 'agent_pvt/agent_pvt_{t,s,m,l}_rtn_1x_12-16-28-28.py'
A_UPERNET = _ASEG + 'agent_swin/upernet_agent_swin_{t,s,b}_9-12-14-7.py'
A_UPERNET_MODEL = _ASEG + '_base_/models/upernet_swin.py'
A_FPN = _ASEG + 'agent_pvt/fpn_agent_pvt_{t,s,m,l}_12-16-28-28.py'
A_ADE = _ASEG + '_base_/datasets/ade20k.py'
A_FPN_MODEL = _ASEG + '_base_/models/fpn_r50.py'
M_MRCNN = f'{MLLA} downstream/detection/configs/mlla/mlla_{{}}_mrcnn_{{}}.py'
V_MRCNN = f'{VITTT} detection/configs/vittt/vittt_{{}}_mrcnn_{{}}.py'
V_COCO = f'{VITTT} detection/configs/_base_/datasets/coco_instance.py'
MMDET = 'mmdet 3.3.0 configs/'
MMSEG = 'mmseg 1.2.2 configs/'

_TYPES = dict(swin='InLineSwin', pvt='InLinePVT', cswin='InLineCSwin', deit='InLineDeiT')
_ARCHS = dict(t='tiny', s='small', m='medium', l='large', b='base')
VARIANTS = ('swin-t', 'swin-s', 'swin-b', 'pvt-t', 'pvt-s', 'pvt-m', 'pvt-l',
            'cswin-t', 'cswin-s', 'cswin-b', 'deit-t', 'deit-s', 'deit-b')
#: Variant (as config names spell it) -> (backbone type, arch).
BACKBONES = {v: (_TYPES[v.split('-')[0]], _ARCHS[v[-1]]) for v in VARIANTS}

#: Parameter-name keys without weight decay, by backbone type: the backbone's own
#: ``no_weight_decay_keys`` (the LayerNorms everywhere, and the family's position tables and
#: class token; CSwin's LePE is a conv: decayed). tests/test_backbone_idioms.py checks that
#: they select exactly the parameters of the backbone's ``no_weight_decay()``.
NO_DECAY = {name: set(family.cls.no_weight_decay_keys) for name, family in FAMILIES.items()}
#: A recipe's ``no_decay`` value: the backbone's norms and position tables, or nothing.
NORMS_AND_TABLES, NOTHING = 'norms and position tables', 'nothing'


def no_decay_keys(recipe: dict, backbone_type: str) -> set:
    return NO_DECAY[backbone_type] if recipe['no_decay'].value == NORMS_AND_TABLES else set()


#: A config's schedule, as its name spells it before the data set: ``1x``, ``ms-crop-3x``,
#: ``12e``, ``lsj-50e``, ``160k``, ``40k``, ``80k``.
_SCHEDULE = re.compile(r'[_-]((?:ms-crop-|lsj-)?\d+[xek])_(?:coco|ade20k|cityscapes)')


def schedule(name: str) -> str:
    return _SCHEDULE.search(name).group(1)


# --- drop path, by head, schedule and variant -----------------------------------------------
# THE RULE for InLine-Swin (and InLine-CSwin, through the Swin rule by size letter): the
# rate of the lab's file of the same head kind, size and schedule, taken from Agent-Attention
# first (the closest kin: same first author, InLine's predecessor), else MLLA, else ViTTT.
# The repositories disagree on the schedule: at 3x MLLA and ViTTT raise their rates (MLLA-T/S
# 0.3; ViTTT T/S/B 0.3/0.4/0.6) where Agent-Attention keeps Swin-T/S at 0.1; Agent wins. For
# two-stage COCO detectors the head kind is "two-stage" (Agent's Mask R-CNN and Cascade rates
# agree wherever both exist: T 1x, T 3x, S 3x; the Base file it has is a Cascade). The rule
# reaches InLine-PVT through Agent-PVT at 1x (Mask R-CNN, RetinaNet) and on ADE20K (Semantic
# FPN); past the lab's files (PVT at 3x, PVT Cascade, Cityscapes, the one-stage Swin heads)
# a rate is ours and says what it extends. InLine-DeiT, a plain ViT, is outside it: none of
# the three repositories has a plain-ViT detector or segmenter (ViTTT's are hierarchical).
def _swin(size, sched):
    return f'{_ASWIN}{size}_{{mrcnn,crcnn}}_{sched}_9-12-14-7.py'


_SWIN_TWO_STAGE = {
    ('t', '1x'): Value(0.1, _swin('t', '1x') + ' (MLLA and ViTTT take 0.1 at 1x too: ' +
                       M_MRCNN.format('t', '1x') + ' `drop_path_rate=0.1`, ' +
                       V_MRCNN.format('t', '1x') + ' `drop_path_rate=0.1`)'),
    ('t', 'ms-crop-3x'): Value(0.1, _swin('t', '3x') + ' (at 3x MLLA and ViTTT raise it: ' +
                               M_MRCNN.format('t', '3x') + ' `drop_path_rate=0.3`, ' +
                               V_MRCNN.format('t', '3x') + ' `drop_path_rate=0.3`)'),
    ('s', '1x'): Value(0.1, _ASWIN + 's_mrcnn_1x_9-12-14-7.py (MLLA and ViTTT take 0.1 at 1x '
                       'too: ' + M_MRCNN.format('s', '1x') + ' `drop_path_rate=0.1`, ' +
                       V_MRCNN.format('s', '1x') + ' `drop_path_rate=0.1`)'),
    ('s', 'ms-crop-3x'): Value(0.1, _swin('s', '3x') + ' (at 3x MLLA and ViTTT raise it: ' +
                               M_MRCNN.format('s', '3x') + ' `drop_path_rate=0.3`, ' +
                               V_MRCNN.format('s', '3x') + ' `drop_path_rate=0.4`)'),
    ('b', '1x'): Value(0.1, M_MRCNN.format('b', '1x') + ', ' + V_MRCNN.format('b', '1x') +
                       ' (no Base 1x in Agent-Attention: MLLA, then ViTTT, agree)'),
    ('b', 'ms-crop-3x'): Value(0.4, _ASWIN + 'b_crcnn_3x_9-12-14-7.py (ViTTT-B 3x takes 0.6: '
                               + V_MRCNN.format('b', '3x') + ' `drop_path_rate=0.6`)'),
}
_SWIN_SEG = {k: Value(r, A_UPERNET.replace('{t,s,b}', k) + ' (160k, the only schedule)')
             for k, r in (('t', 0.3), ('s', 0.3), ('b', 0.5))}
_CSWIN = ours('the Swin rule, by size letter ({})')
_DEIT = Value(0.1, ours('outside the rule (no plain-ViT dense recipe in the lab): '
                        "InLine-DeiT is a plain ViT, the rate of its ImageNet recipe and of "
                        + MMSEG + 'vit/vit_deit-{s16,b16}_upernet_8xb2-160k_ade20k-512x512.py'))
_PVT_MRCNN = {'t': 0.1, 's': 0.2, 'm': 0.1, 'l': 0.2}
_PVT_RTN = {'t': 0.1, 's': 0.1, 'm': 0.2, 'l': 0.3}
_PVT_FPN = {'t': 0.1, 's': 0.1, 'm': 0.2, 'l': 0.1}


def _pvt_3x_rate(source: str) -> str:
    return ours('no PVT 3x in the lab: the 1x rate of ' + source + ', as Agent-Attention '
                'keeps its Swin T/S rates from 1x to 3x (' + A_SWIN_MRCNN + ')')


def _pvt_cascade_rate(source: str) -> str:
    return ours('no PVT Cascade in the lab: the PVT Mask R-CNN rate of the schedule, ' + source)


def _two_stage(sched: str, cascade: bool) -> dict:
    rates = {f'swin-{k}': v for (k, s), v in _SWIN_TWO_STAGE.items() if s == sched}
    rates.update({f'cswin-{k}': Value(v.value, _CSWIN.format(f'InLine-Swin-{k.upper()}, '
                                                             + v.source))
                  for (k, s), v in _SWIN_TWO_STAGE.items() if s == sched})
    for k, r in _PVT_MRCNN.items():
        source = A_PVT_MRCNN.replace('{t,s,m,l}', k)
        if sched != '1x':
            source = _pvt_3x_rate(source)
        rates[f'pvt-{k}'] = Value(r, _pvt_cascade_rate(source) if cascade else source)
    rates.update({f'deit-{k}': _DEIT for k in 'tsb'})
    return rates


def _segmentation(swin: dict, pvt: dict, pvt_source: str, deit: bool) -> dict:
    rates = {f'swin-{k}': v for k, v in swin.items()}
    rates.update({f'cswin-{k}': Value(v.value, _CSWIN.format(f'InLine-Swin-{k.upper()}, '
                                                             + v.source))
                  for k, v in swin.items()})
    rates.update({f'pvt-{k}': Value(v, pvt_source.replace('{t,s,m,l}', k))
                  for k, v in pvt.items()})
    rates.update({f'deit-{k}': _DEIT for k in 'tsb' if deit})
    return rates


_UPERNET = _segmentation(_SWIN_SEG, {}, '', deit=True)
_SEM_FPN = _segmentation({}, _PVT_FPN, A_FPN + ' (40k, the only schedule)', deit=False)
_CITYSCAPES_RATE = ours('no Cityscapes recipe in the lab: the ADE20K rate of the head, ')
#: drop_path_rate by (head, schedule), then variant (only the variants a head ships with are
#: used; ``schedule(config name)`` gives the schedule).
DROP_PATH = {
    ('mask-rcnn', '1x'): _two_stage('1x', cascade=False),
    ('mask-rcnn', 'ms-crop-3x'): _two_stage('ms-crop-3x', cascade=False),
    ('cascade-mask-rcnn', '1x'): _two_stage('1x', cascade=True),
    ('cascade-mask-rcnn', 'ms-crop-3x'): _two_stage('ms-crop-3x', cascade=True),
    ('retinanet', '1x'): {
        'pvt-s': Value(_PVT_RTN['s'], A_PVT_RTN.replace('{t,s,m,l}', 's')),
        'swin-t': Value(0.1, ours('no Swin RetinaNet in the lab: the Swin-T 1x two-stage '
                                  'rate, ' + _swin('t', '1x')))},
    ('fcos', '1x'): {'swin-t': Value(0.1, ours('as RetinaNet Swin-T: the Swin-T 1x two-stage '
                                               'rate, ' + _swin('t', '1x')))},
    ('upernet', '160k'): _UPERNET,
    ('fpn', '40k'): _SEM_FPN,
    ('upernet', '80k'): {v: Value(r.value, _CITYSCAPES_RATE + r.source)
                         for v, r in _UPERNET.items()},
    ('fpn', '80k'): {v: Value(r.value, _CITYSCAPES_RATE + r.source)
                     for v, r in _SEM_FPN.items()},
    ('segformer', '160k'): {
        'swin-t': Value(0.3, ours('the UperNet Swin-T rate, ' + _SWIN_SEG['t'].source)),
        'pvt-s': Value(0.1, ours('the Semantic FPN PVT-S rate, ' +
                                 A_FPN.replace('{t,s,m,l}', 's')))},
    ('mask2former', 'lsj-50e'): {'swin-t': Value(0.3, MMDET + 'mask2former/mask2former_swin-t-'
                                                 'p4-w7-224_8xb2-lsj-50e_coco.py')},
    ('mask2former', '160k'): {'swin-t': Value(0.3, MMSEG + 'mask2former/mask2former_swin-t_'
                                              '8xb2-160k_ade20k-512x512.py')},
    ('dino', '12e'): {'swin-t': Value(0.2, MMDET + 'dino/dino-5scale_swin-l_8xb2-12e_coco.py '
                                      "(mmdet ships no DINO Swin-T; also InLine-Swin-T's "
                                      'ImageNet rate)')},
}
#: The ImageNet recipes' rates, one ``--cfg-options model.backbone.drop_path_rate=...`` away
#: (docs/detection.md, docs/segmentation.md).
INLINE = 'LeapLabTHU/InLine@e463a6f4dbb95893726b294ff83f61a58644bf6e'


def _in1k(variant: str) -> str:
    if variant.startswith('deit'):      # its yaml sets none: the default of config.py
        return f'{INLINE} config.py (cfgs/inline_{variant.replace("-", "_")}.yaml sets none)'
    return f"{INLINE} cfgs/inline_{variant.replace('-', '_').replace('pvt_l', 'pvt_b')}.yaml" \
        + (' (PVT-L is its pvt_b)' if variant == 'pvt-l' else '')


IMAGENET_DROP_PATH = {
    v: Value(r, _in1k(v))
    for v, r in (('swin-t', 0.2), ('swin-s', 0.3), ('swin-b', 0.5), ('pvt-t', 0.1),
                 ('pvt-s', 0.1), ('pvt-m', 0.3), ('pvt-l', 0.3), ('cswin-t', 0.2),
                 ('cswin-s', 0.4), ('cswin-b', 0.5), ('deit-t', 0.1), ('deit-s', 0.1),
                 ('deit-b', 0.1))}

# --- COCO: Mask R-CNN and Cascade Mask R-CNN ------------------------------------------------
#: The schedule-independent fields of every two-stage COCO recipe.
_COCO = dict(
    optimizer=Value('AdamW', A_SWIN_DET + '; ' + A_PVT_MRCNN),
    betas=Value((0.9, 0.999), A_SWIN_DET + ' (PVT: the AdamW default)'),
    layer_decay=Value(None, A_SWIN_DET + '; ' + A_PVT_MRCNN + ' (none)'),
    gpus=Value(8, A_RUNTIME + ' (its base_batch_size note: 8 GPUs x 2 samples per GPU)'),
    batch_per_gpu=Value(2, A_COCO),
    warmup=Value((500, 0.001), A_SCHED_1X + " (linear; ViTTT's mmdet-3 port takes 1000: "
                 + V_MRCNN.format('{t,s,b}', '{1x,3x}') + ' `end=1000`)'),
    test_scale=Value((1333, 800), A_COCO),
    grad_clip=Value(None, A_SCHED_1X),
    rpn=Value('PadAwareRPNHead', ours("mmdet's RPNHead, proposing for each image only from "
                                      'anchors on its own pixels, so an image gets the same '
                                      'detections alone and batched (docs/padding.md); the '
                                      "same as the lab's RPNHead on unpadded images")),
    neck_out=Value(256, _ADET + '_base_/models/mask_rcnn_swin_fpn.py'),
    cascade_target_stds=Value([0.1, 0.05, 0.033],
                              _ADET + 'agent_swin/agent_swin_t_crcnn_1x_9-12-14-7.py (first '
                              'coordinate of each stage; 4 convs + 1 fc, GIoU, decoded boxes)'),
    # AMP changes the arithmetic, not the batch: an AMP child keeps its parent's optimizer
    # (a recipe for a larger batch is a batch change with its lr: mmdet's auto_scale_lr).
    amp_optimizer=Value('the parent\'s', MMDET + 'swin/mask-rcnn_swin-t-p4-w7_fpn_amp-ms-crop-'
                        "3x_coco.py (ViTTT's AMP 2e-4, " + V_MRCNN.format('{t,s,b}', '{1x,3x}')
                        + ' `lr=0.0002`, is at 4 images a GPU, ' + V_COCO + ' `batch_size=4`, '
                        'twice the 2 here, with no fp32 run to compare: a batch, not AMP)'),
)
_SCHEDULE_1X = dict(max_epochs=Value(12, A_SCHED_1X), milestones=Value([8, 11], A_SCHED_1X))
_SCHEDULE_3X = dict(max_epochs=Value(36, A_SWIN_3X), milestones=Value([27, 33], A_SWIN_3X))
_MS_CROP = 'ms-crop'           # short side 480-800, or resize / crop 384-600 / resize
_SINGLE = 'single-scale'       # 1333x800
_SWIN_OPT = dict(lr=Value(1e-4, A_SWIN_DET), weight_decay=Value(0.05, A_SWIN_DET),
                 no_decay=Value(NORMS_AND_TABLES, A_SWIN_DET))
_PVT_OPT = dict(lr=Value(2e-4, A_PVT_MRCNN), weight_decay=Value(1e-4, A_PVT_MRCNN),
                no_decay=Value(NOTHING, A_PVT_MRCNN))
_PVT_3X = ours('no PVT 3x in the lab: the PVT 1x optimiser (' + A_PVT_MRCNN + ') on the '
               "Swin 3x schedule and augmentation, as the config's name says")
#: (rule, schedule in the config's name) -> recipe. InLine-Swin, -CSwin and -DeiT take the
#: Swin rule, InLine-PVT the PVT rule (DETECTION_RULE). Cascade Mask R-CNN trains as Mask
#: R-CNN (tests/test_detection_configs.py); the lab's Cascade is Swin-only.
DETECTION = {
    ('swin', '1x'): dict(_COCO, **_SWIN_OPT, **_SCHEDULE_1X,
                         train_pipeline=Value(_MS_CROP, A_SWIN_1X + ', ' +
                                              M_MRCNN.format('{t,s,b}', '1x'))),
    ('swin', 'ms-crop-3x'): dict(_COCO, **_SWIN_OPT, **_SCHEDULE_3X,
                                 train_pipeline=Value(_MS_CROP, A_SWIN_3X)),
    ('pvt', '1x'): dict(_COCO, **_PVT_OPT, **_SCHEDULE_1X,
                        train_pipeline=Value(_SINGLE, A_PVT_MRCNN + ' (no pipeline of its '
                                             'own: ' + A_COCO + ')')),
    ('pvt', 'ms-crop-3x'): dict(_COCO, **{k: Value(v.value, _PVT_3X) for k, v in
                                          _PVT_OPT.items()}, **_SCHEDULE_3X,
                                train_pipeline=Value(_MS_CROP, _PVT_3X)),
}
DETECTION_RULE = dict(swin='swin', cswin='swin', deit='swin', pvt='pvt')

#: RetinaNet and FCOS (one-stage, box-only COCO, 1x, single scale as the lab's RetinaNet).
ONE_STAGE = {
    'pvt': dict(_COCO, **_SCHEDULE_1X, lr=Value(1e-4, A_PVT_RTN),
                weight_decay=Value(1e-4, A_PVT_RTN), no_decay=Value(NOTHING, A_PVT_RTN),
                train_pipeline=Value(_SINGLE, A_PVT_RTN)),
    'swin': dict(_COCO, **_SCHEDULE_1X, **{
        k: Value(v.value, ours('no Swin one-stage detector in the lab: the Swin Mask R-CNN '
                               'optimiser, ' + v.source)) for k, v in _SWIN_OPT.items()},
                 train_pipeline=Value(_SINGLE, ours(
                     "the lab's one-stage recipe (" + A_PVT_RTN + ') and ' + MMDET +
                     'swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py train single scale'))),
}

# --- ADE20K and Cityscapes: UperNet and Semantic FPN -----------------------------------------
_POLY_ONE = ours("mmengine's LinearLR and PolyLR both from iteration 0 (they multiply): "
                 "mmcv's poly policy with linear warm-up of " + A_UPERNET + ', but for '
                 "mmengine's one-iteration offsets (warm-up full at 1499, poly 0 at the last)")
#: ADE20K recipes, by decode head. ``warmup``: (iterations, start factor) or None;
#: ``poly_begin``: the iteration PolyLR starts at.
SEGMENTATION = {
    'upernet': dict(
        optimizer=Value('AdamW', A_UPERNET), lr=Value(6e-5, A_UPERNET),
        betas=Value((0.9, 0.999), A_UPERNET), weight_decay=Value(0.01, A_UPERNET),
        no_decay=Value(NORMS_AND_TABLES, A_UPERNET), layer_decay=Value(None, A_UPERNET),
        warmup=Value((1500, 1e-6), A_UPERNET), power=Value(1.0, A_UPERNET),
        eta_min=Value(0.0, A_UPERNET), poly_begin=Value(0, _POLY_ONE),
        max_iters=Value(160000, _ASEG + '_base_/schedules/schedule_160k.py'),
        gpus=Value(8, A_UPERNET + ' (its 8 GPUs x 2 note)'), batch_size=Value(2, A_UPERNET),
        grad_clip=Value(None, A_UPERNET),
        channels=Value(512, A_UPERNET_MODEL), aux=Value((2, 256, 0.4), A_UPERNET_MODEL +
                                                        ' (input index, channels, weight)'),
        crop=Value((512, 512), A_ADE), test_scale=Value((2048, 512), A_ADE)),
    'fpn': dict(
        optimizer=Value('AdamW', A_FPN), lr=Value(2e-4, A_FPN),
        betas=Value((0.9, 0.999), A_FPN + ' (the AdamW default)'),
        weight_decay=Value(1e-4, A_FPN), no_decay=Value(NOTHING, A_FPN),
        layer_decay=Value(None, A_FPN), warmup=Value(None, A_FPN),
        power=Value(0.9, A_FPN), eta_min=Value(0.0, A_FPN), poly_begin=Value(0, A_FPN),
        max_iters=Value(40000, _ASEG + '_base_/schedules/schedule_40k.py'),
        gpus=Value(4, ours("the lab's 8 GPUs x 2 (" + A_FPN + ') as 4 x 4: the same 16 '
                           "images a step, on the GPUs the configs' names (4xb4) state")),
        batch_size=Value(4, ours('4 images on each of the 4 GPUs, as gpus says')),
        grad_clip=Value(None, A_FPN),
        channels=Value(128, A_FPN_MODEL), aux=Value(None, A_FPN_MODEL),
        crop=Value((512, 512), A_ADE), test_scale=Value((2048, 512), A_ADE)),
}
#: Every ADE20K config: 150 classes, 512x512 crops.
ADE20K = dict(num_classes=150, crop_size=(512, 512))
#: InLine-DeiT's UperNet (mmseg's ViT recipe, ``MMSEG``
#: _base_/models/upernet_vit-b16_ln_mln.py): blocks 3, 6, 9, 12 through MultiLevelNeck, the
#: auxiliary head on the 4th map (input index, channels, weight).
DEIT_UPERNET = dict(out_indices=(2, 5, 8, 11), final_norm=True, scales=[4, 2, 1, 0.5],
                    aux=(3, 256, 0.4))
#: Every Cityscapes config: 19 classes, 512x1024 crops, whole 1024x2048 images at test time
#: (mmseg's test resize), 80k iterations, 8 images per step (4 GPUs x 2); otherwise the
#: head's ADE20K recipe (SEGMENTATION), its drop path and schedule shape.
CITYSCAPES = dict(num_classes=19, crop_size=(512, 1024), test_scale=(2048, 1024),
                  max_iters=80000, gpus=4, batch_size=2)
CITYSCAPES_SOURCE = ours("no Cityscapes recipe in the lab: the ADE20K recipe of the head, "
                         "on mmseg's Cityscapes data and 80k schedule (" + MMSEG +
                         'swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-'
                         '512x512.py, sem_fpn/fpn_r50_4xb2-80k_cityscapes-512x1024.py)')

#: The other shipped recipes, by what they extrapolate from (checked by the tests named).
OTHER_RECIPES = {
    'segformer (ADE20K)': ours('the UperNet recipe above with the head at 10x lr, as '
                               + MMSEG + 'segformer (tests/test_head_configs.py)'),
    'mask2former, dino': MMDET + 'mask2former, dino; ' + MMSEG + 'mask2former (their '
    'optimiser, schedule and pipelines; tests/test_head_configs.py)',
    'ablations': ours('InLine-Swin-T Mask R-CNN 1x / UperNet 160k with the switches '
                      'changed, nothing else (tests/test_ablation_configs.py)'),
    'custom (own data)': ours('the Swin-T Mask R-CNN / UperNet recipes on 1 GPU x 4 for own '
                              'data, 36 epochs / 20k iterations; drop path as the COCO / '
                              'ADE20K Swin-T rates; the UperNet poly starts after a warm-up of '
                              '10% of the run, so that short runs reach the set lr '
                              '(tests/test_own_instances.py, tests/test_readme.py)'),
    'toy demo': ours('InLine-Swin-nano from scratch, 550 iterations on toy shapes '
                     '(tests/test_zoo_train_eval.py); the demo (`make demo`) its 700-iteration '
                     'child at 2x lr without drop path, which holds the AP floor over 5 seeds '
                     '(docs/dev/get_started.md, "The demo")'),
}


def cited():
    """Every (where, field, value, source) of the tables (field and value None for the
    recipes stated in words): what tools/dev/check_citations.py checks, given this file."""
    for name, table in (('DETECTION', DETECTION), ('ONE_STAGE', ONE_STAGE),
                        ('SEGMENTATION', SEGMENTATION), ('DROP_PATH', DROP_PATH),
                        ('IMAGENET_DROP_PATH', {'in1k': IMAGENET_DROP_PATH})):
        for key, fields in table.items():
            for field, v in fields.items():
                field = 'drop_path_rate' if name.endswith('DROP_PATH') else field
                yield f'{name}[{key!r}]', field, v.value, v.source
    yield 'CITYSCAPES', None, None, CITYSCAPES_SOURCE
    for where, source in OTHER_RECIPES.items():
        yield where, None, None, source


def sources():
    """Every (where, source) pair of the tables, for the test that each names one."""
    for where, field, _, source in cited():
        yield (f'{where}[{field!r}]' if field else where), source


# --- checks of a resolved config against a recipe (used by the config tests) ---------------
def values(recipe: dict) -> dict:
    return {field: v.value for field, v in recipe.items()}


def _check_optimiser(cfg, recipe: dict, backbone_type: str):
    wrapper = cfg.optim_wrapper
    opt = wrapper.optimizer
    assert (opt.type, opt.lr, tuple(opt.betas), opt.weight_decay) == (
        recipe['optimizer'], recipe['lr'], recipe['betas'], recipe['weight_decay'])
    paramwise = wrapper.get('paramwise_cfg') or {}
    assert set(paramwise.get('custom_keys', {})) == no_decay_keys(
        {k: Value(v, '') for k, v in recipe.items()}, backbone_type)
    assert recipe['layer_decay'] is None and 'layer_decay_rate' not in paramwise
    assert wrapper.get('constructor') is None
    assert recipe['grad_clip'] is None and wrapper.get('clip_grad') is None


def check_coco(cfg, recipe: dict, backbone_type: str):
    """A resolved COCO config (Mask R-CNN, Cascade, RetinaNet, FCOS) against ``recipe``
    (``values(...)`` of a DETECTION or ONE_STAGE entry); an AMP child as its parent
    (``amp_optimizer``: tests/test_detection_configs.py compares the two)."""
    _check_optimiser(cfg, recipe, backbone_type)
    assert cfg.train_dataloader.batch_size == recipe['batch_per_gpu']
    assert cfg.auto_scale_lr.base_batch_size == recipe['gpus'] * recipe['batch_per_gpu']
    assert cfg.train_cfg.max_epochs == recipe['max_epochs']
    warm, steps = cfg.param_scheduler
    assert (warm.type, warm.end, warm.start_factor) == ('LinearLR', *recipe['warmup'])
    assert (steps.type, steps.milestones) == ('MultiStepLR', recipe['milestones'])
    train = cfg.train_dataloader.dataset.pipeline
    choice = [t for t in train if t.type == 'RandomChoice']
    if recipe['train_pipeline'] == 'ms-crop':
        (choice,) = choice
        scales, crop = choice.transforms
        assert [t.type for t in crop] == ['RandomChoiceResize', 'RandomCrop',
                                          'RandomChoiceResize']
        assert min(min(s) for s in scales[0].scales) == 480 and crop[1].crop_size == (384, 600)
    else:
        assert not choice
        assert [t.scale for t in train if t.type == 'Resize'] == [recipe['test_scale']]
    test = [t for t in cfg.test_dataloader.dataset.pipeline if t.type == 'Resize']
    assert [t.scale for t in test] == [recipe['test_scale']]
    assert cfg.model.neck.out_channels == recipe['neck_out']
    if cfg.model.get('rpn_head'):
        assert cfg.model.rpn_head.type == recipe['rpn']


def check_segmentation(cfg, recipe: dict, backbone_type: str, max_iters: int):
    """A resolved ADE20K or Cityscapes config against ``recipe`` (``values(...)`` of a
    SEGMENTATION entry), on a schedule of ``max_iters``."""
    _check_optimiser(cfg, recipe, backbone_type)
    *warm, poly = cfg.param_scheduler
    if recipe['warmup']:
        (warm,) = warm
        assert (warm.type, warm.begin, warm.end, warm.start_factor) == \
            ('LinearLR', 0, *recipe['warmup'])
    else:
        assert warm == []
    assert (poly.type, poly.begin, poly.end, poly.power, poly.eta_min) == \
        ('PolyLR', recipe['poly_begin'], max_iters, recipe['power'], recipe['eta_min'])
    assert cfg.train_cfg.max_iters == max_iters
    head = cfg.model.decode_head
    assert head.channels == recipe['channels']
    aux = cfg.model.get('auxiliary_head')
    assert (aux and (aux.in_index, aux.channels, aux.loss_decode.loss_weight)) == \
        (recipe['aux'] or None)
