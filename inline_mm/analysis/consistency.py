"""Comparing one detector's outputs on one image across two runs (alone and batched, or
any two settings): detections matched greedily, features compared on the image's own cells,
and the Mask R-CNN test path run stage by stage so that runs can be mixed (one run's
features with the other's proposals).  ``tools/analysis_tools/padding_consistency.py`` reports
these for the padding-awareness investigation; mmdet and torchvision come in when used.
"""
MATCH_IOU = 0.5
SAME_PX, SAME_SCORE = 0.01, 1e-4   # "identical" detections (float noise is far below)
FEAT_TOL = 1e-5                    # relative difference that counts as "differs"


def rel_diff(a, b):
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-12))


def region_diff(alone, batched, pad_h, pad_w):
    """Relative difference of one level on the image's cells, the same more than one
    cell from the padded edges, and how many cells from those edges it exceeds FEAT_TOL."""
    import torch
    h, w = alone.shape[-2:]
    a, b = alone[0], batched[0, :, :h, :w]
    cells = (a - b).abs().amax(0) / a.abs().max().clamp_min(1e-12)
    inner = cells[:h - 1 if pad_h else h, :w - 1 if pad_w else w]
    ys, xs = torch.nonzero(cells > FEAT_TOL, as_tuple=True)
    far = torch.full_like(ys, h + w)
    dist = torch.minimum(h - 1 - ys if pad_h else far, w - 1 - xs if pad_w else far)
    return (float(cells.max()), float(inner.max()) if inner.numel() else 0.0,
            int(dist.max()) + 1 if len(dist) else 0)


def run_pass(model, inputs, samples):
    """The model's test path, stage by stage (same results as ``model.test_step``)."""
    data = model.data_preprocessor(dict(inputs=inputs, data_samples=samples), False)
    feats = model.backbone(data['inputs'])
    neck = model.neck(feats)
    rpn = model.rpn_head(neck)
    metas = [s.metainfo for s in data['data_samples']]
    props = model.rpn_head.predict_by_feat(*rpn, batch_img_metas=metas, rescale=False)
    dets = model.roi_head.predict(neck, [p.clone() for p in props], data['data_samples'],
                                  rescale=True)
    return dict(feats=feats, neck=neck, rpn=rpn, props=props, dets=dets,
                samples=data['data_samples'])


def roi(model, neck, props, sample, i=0):
    """The RoI head on image ``i`` of ``neck`` with the given proposals."""
    return model.roi_head.predict(tuple(x[i:i + 1] for x in neck), [props.clone()], [sample],
                                  rescale=True)[0]


def compare_dets(a, b, thr):
    """Greedy same-label matching of detections ``b`` to ``a`` (both InstanceData)."""
    from torchvision.ops import box_iou
    a, b = a[a.scores >= thr], b[b.scores >= thr]
    used, shift, dscore, mask_iou, near = set(), 0.0, 0.0, 1.0, 0
    iou = box_iou(a.bboxes, b.bboxes) if len(a) and len(b) else None
    for i in a.scores.argsort(descending=True).tolist():
        cand = [j for j in range(len(b)) if j not in used and b.labels[j] == a.labels[i]]
        if not cand:
            continue
        j = max(cand, key=lambda j: float(iou[i, j]))
        if float(iou[i, j]) < MATCH_IOU:
            continue
        used.add(j)
        near += float(iou[i, j]) >= 0.99
        shift = max(shift, float((a.bboxes[i] - b.bboxes[j]).abs().max()))
        dscore = max(dscore, abs(float(a.scores[i] - b.scores[j])))
        if 'masks' in a:
            inter = (a.masks[i] & b.masks[j]).sum()
            union = (a.masks[i] | b.masks[j]).sum()
            mask_iou = min(mask_iou, float(inter / union) if union else 1.0)
    m = len(used)
    same = m == len(a) == len(b) and shift <= SAME_PX and dscore <= SAME_SCORE
    return dict(images=1, identical=int(same), alone=len(a), batched=len(b), matched=m,
                iou99=near, max_shift=shift, max_dscore=dscore, lost=len(a) - m,
                gained=len(b) - m, min_mask_iou=mask_iou)


def merge(total, one):
    for k, v in one.items():
        if k in ('max_shift', 'max_dscore'):
            total[k] = max(total.get(k, 0.0), v)
        elif k == 'min_mask_iou':
            total[k] = min(total.get(k, 1.0), v)
        else:
            total[k] = total.get(k, 0) + v


def same_props(a, b):
    """How many proposals of ``b`` are one of ``a`` (box within 1e-3 px)."""
    if not len(a) or not len(b):
        return 0
    d = (b.bboxes[:, None, :] - a.bboxes[None, :, :]).abs().amax(-1)
    return int((d.amin(1) < 1e-3).sum())


def at_edge(props, h, w, pad_h, pad_w):
    """How many proposals reach the image's bottom / right edge where the batch pads it
    (where the proposals of anchors in the padded area end up, clipped)."""
    b = props.bboxes
    return int(((b[:, 3] >= h) & pad_h | (b[:, 2] >= w) & pad_w).sum())


def padded_anchors(props, batched, alone, nms_pre):
    """Count, per level, how many of the ``nms_pre`` best-scored anchors of the batch's
    first image (the RPN's pre-NMS candidates) lie in its padded area, and their best
    objectness (sigmoid RPN; the alone maps give the image's cells)."""
    import torch
    for b, a in zip(batched, alone):
        score = b[0]
        pad = torch.ones_like(score, dtype=torch.bool)
        pad[:, :a.shape[2], :a.shape[3]] = False
        k = score.numel() if nms_pre <= 0 else min(nms_pre, score.numel())
        props['top_k'] += k
        props['top_k_padded'] += int(pad.flatten()[score.flatten().topk(k).indices].sum())
        if pad.any():
            props['max_padded_objectness'] = max(props['max_padded_objectness'],
                                                 float(score[pad].sigmoid().max()))
