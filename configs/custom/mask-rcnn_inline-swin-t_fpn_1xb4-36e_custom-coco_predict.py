# Predict instance masks on a folder of images without annotations, with a model trained by
# the template next to this file (a copy next to your copy: point _base_ at it). List the
# folder first, with the training file's categories:
#   python tools/dataset_converters/images2coco.py DATA/images/predict \
#       DATA/annotations/predict.json --categories-from DATA/annotations/train.json
#   python tools/test.py <this file> <checkpoint>        (--work-dir DIR: elsewhere)
# writes, in the run's folder <work_dir>/<timestamp>/predictions/ (work_dir: --work-dir, or
# work_dirs/<this file's name>; each run its own folder, the path is logged at the end):
#   results.segm.json   one COCO results file for the folder: per detection image_id,
#                       category_id (the training file's ids), bbox, score, segmentation (RLE)
#   results.bbox.json   the same without masks
#   overlays/<image stem>.png   each image with its boxes, masks, class names and scores
#                               (score >= overlay_score_thr)
_base_ = './mask-rcnn_inline-swin-t_fpn_1xb4-36e_custom-coco.py'

predict_ann_file = 'annotations/predict.json'
predict_dir = 'predictions'         # relative: in <work_dir>/<timestamp>/
overlay_score_thr = 0.3             # the overlays draw detections scoring at least this

test_dataloader = dict(
    dataset=dict(
        ann_file=predict_ann_file,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='Resize', scale={{_base_.img_scale}}, keep_ratio=True),
            dict(type='PackDetInputs',
                 meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
        ]))
# No annotations: save the predictions, score nothing.
test_evaluator = dict(ann_file=_base_.data_root + predict_ann_file, format_only=True,
                      outfile_prefix=predict_dir + '/results')
custom_hooks = [dict(type='PredictionOverlayHook', out_dir=predict_dir + '/overlays',
                     score_thr=overlay_score_thr)]
