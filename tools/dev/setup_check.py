"""The set-up's last step: prove the environment can do what the README's first commands need.

Exits non-zero, naming the failed check, unless every check passes; ``tools/dev/setup_env.sh``
writes its stamp only after this succeeds.  Run it by hand any time:
``.venv/bin/python tools/dev/setup_check.py``.
"""
import importlib.metadata as md
import sys

from packaging.version import Version


def check_setuptools():
    version = Version(md.version('setuptools'))
    # torch >= 2.10 requires >= 77.0.3; mmengine 0.10.7 imports pkg_resources, removed in 81.
    if not Version('77.0.3') <= version < Version('81'):
        raise RuntimeError(f'setuptools {version} is outside [77.0.3, 81): mmengine needs '
                           'pkg_resources and torch needs >= 77.0.3')
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pkg_resources  # noqa: F401
    return str(version)


def check_one_owner():
    """Each OpenMMLab import name belongs to one distribution: two (mmcv-lite's dependency
    `mmengine` beside onedl-mmengine) would leave one's files over the other's."""
    owners = md.packages_distributions()
    names = ('mmengine', 'mmcv', 'mmdet', 'mmseg')
    clashes = {name: sorted(set(owners.get(name, []))) for name in names}
    clashes = {k: v for k, v in clashes.items() if len(v) > 1}
    if clashes:
        raise RuntimeError('; '.join(f'{k}/ is installed by {" and ".join(v)}'
                                     for k, v in clashes.items())
                           + ': pip uninstall all of them and run the set-up again')
    from inline_mm.env import stack_name
    return f'{stack_name()} stack, one distribution per package'


def check_base_configs():
    from mmengine.config import Config
    det = Config.fromstring("_base_ = ['mmdet::_base_/models/mask-rcnn_r50_fpn.py']", '.py')
    seg = Config.fromstring("_base_ = ['mmseg::_base_/models/upernet_swin.py']", '.py')
    assert det.model.type == 'MaskRCNN' and seg.model.type == 'EncoderDecoder'
    return 'mmdet:: and mmseg:: bases resolve'


def check_mmcv_ops():
    import torch
    from mmcv.ops import RoIAlign, nms

    import _inline_mm_mmcv_hook
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]])
    _, keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
    assert keep.tolist() == [0, 2], keep
    feats = torch.arange(64.).reshape(1, 1, 8, 8).requires_grad_()
    out = RoIAlign((2, 2), 1.0, 0, aligned=True)(feats, torch.tensor([[0., 0., 0., 4., 4.]]))
    out.sum().backward()
    assert out.shape == (1, 1, 2, 2) and feats.grad.sum().item() > 0
    return f'mmcv.ops nms + RoIAlign run ({_inline_mm_mmcv_hook.backend()} mmcv._ext)'


def check_inline_mm():
    import inline_mm
    from mmdet.registry import MODELS as DET
    from mmseg.registry import MODELS as SEG
    assert DET.get('InLineSwin') and SEG.get('InLineSwin')
    return f'inline_mm {inline_mm.__version__} registered'


def check_app():
    """The app's Gradio and the browser test's Playwright (the upstream stack's set-up)."""
    from inline_mm.env import stack_name
    if stack_name() != 'upstream':
        return 'not set up on this stack (the app and its tests run on the upstream one)'
    import gradio
    import playwright.sync_api  # noqa: F401
    return f"gradio {gradio.__version__}, playwright {md.version('playwright')} import"


CHECKS = (check_setuptools, check_one_owner, check_base_configs, check_mmcv_ops,
          check_inline_mm, check_app)
#: checked in a second process beside the others: on a new environment most of a check's time
#: is compiling the byte-code of what it imports, and the app's Gradio shares little with mmdet
APART = (check_app,)


def run_checks(checks) -> list:
    """``[(ok, line)]``, one per check, every check run whatever the others gave."""
    results = []
    for check in checks:
        try:
            results.append((True, f'  ok   {check.__name__[6:]}: {check()}'))
        except Exception as e:  # report every failure, then exit non-zero
            results.append((False, f'  FAIL {check.__name__[6:]}: {type(e).__name__}: {e}'))
    return results


def main(argv=None) -> int:
    import subprocess
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--only']:          # the second process: named checks, one line each
        lines = run_checks([c for c in CHECKS if c.__name__[6:] in argv[1:]])
        print('\n'.join(line for _, line in lines))
        return 0 if all(ok for ok, _ in lines) else 1
    apart = subprocess.Popen([sys.executable, __file__, '--only', *(c.__name__[6:] for c in APART)],
                             stdout=subprocess.PIPE, text=True)
    results = run_checks([c for c in CHECKS if c not in APART])
    out, _ = apart.communicate()
    for _, line in results:
        print(line)
    print(out, end='')
    return 1 if apart.returncode or not all(ok for ok, _ in results) else 0


if __name__ == '__main__':
    sys.exit(main())
