"""The web page of the app: Gradio, served on this machine only, loading nothing from the web.

:class:`Handlers` holds what each control does (plain methods returning ``{name: value}``,
tested without a browser); :func:`build` lays the page out and wires the handlers to it;
:func:`serve` starts it.
"""
import functools
import logging
import os
import traceback
import warnings
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import gradio as gr

from ..attention_maps import METHODS, AttentionSiteError
from .viewer import DEFAULT_SCORE_THR, AppError, Image, Prediction, Viewer

__all__ = ['Handlers', 'Session', 'build', 'serve', 'SAMPLES', 'MEAN_OVER_HEADS']

#: the bundled images the page offers
SAMPLES = [os.path.join(os.path.dirname(__file__), 'samples', name)
           for name in ('toy_shapes.jpg', 'drawing.png')]
MEAN_OVER_HEADS = 'mean over heads'
#: the names of the page's outputs, in the order the handlers' results are wired
VIEWS = tuple(f'view-{m}' for m in METHODS) + ('view-kernel',)
CLEARED = {name: None for name in VIEWS + ('weights', 'x', 'y')}
CLEARED['summary'] = ''

logger = logging.getLogger(__name__)


@dataclass
class Session:
    """One browser tab's image, its predictions, the last capture and query."""

    image: Image
    prediction: Prediction
    captured: object = None
    point: Optional[Tuple[float, float]] = None


def head_labels(heads: int):
    return [MEAN_OVER_HEADS] + [f'head {i}' for i in range(heads)]


def _head(label) -> Optional[int]:
    if not label or label == MEAN_OVER_HEADS:
        return None
    return int(str(label).split()[-1])


def _error(e) -> str:
    return f'**Error:** {e}'


def _no_progress(*args, **kwargs):
    pass


class Handlers:
    """What the page's controls do, each returning ``{output name: value}`` (names left out
    stay as they are on the page). Bad input returns a message; nothing raises."""

    def __init__(self, viewer: Viewer):
        self.viewer = viewer

    # ------------------------------------------------------------------ image
    def load(self, payload, score_thr, state, progress=gr.Progress()) -> Dict:
        """A new image (an upload, a sample, or cleared): read it, predict, draw."""
        cleared = dict(CLEARED, predictions=None, legend='', state=None)
        if not payload:
            return dict(cleared, message='Upload an image or pick a sample.')
        path = payload.get('path') if isinstance(payload, dict) else str(payload)
        name = payload.get('orig_name') if isinstance(payload, dict) else None
        try:
            image = self.viewer.read(path, name)
            (progress or _no_progress)(0.2, desc='running the model')
            prediction = self.viewer.predict(image)
            drawn, legend, summary = self.viewer.draw(image, prediction, score_thr)
        except AppError as e:
            return dict(cleared, message=_error(e))
        except Exception as e:        # the page stays up and says what happened
            logger.error('%s', traceback.format_exc())
            return dict(cleared, message=_error(f'unexpected {type(e).__name__}: {e} '
                                                '(the traceback is in the terminal)'))
        notes = ''.join(f'- {n}\n' for n in image.notes)
        message = (f'{notes}{image.name}, {image.hw[1]}x{image.hw[0]}: {summary}. Click a point '
                   'on the predictions to see its attention.')
        return dict(cleared, predictions=drawn, legend=legend, message=message,
                    state=Session(image, prediction))

    def rethreshold(self, score_thr, state: Optional[Session]) -> Dict:
        """The slider moved: redraw (no new prediction)."""
        if state is None:
            return {}
        drawn, legend, _ = self.viewer.draw(state.image, state.prediction, score_thr, state.point)
        return dict(predictions=drawn, legend=legend)

    # ------------------------------------------------------------------ attention
    def click(self, block, head, score_thr, state, evt: gr.SelectData,
              progress=gr.Progress()) -> Dict:
        """A click on the predictions: that pixel is the query."""
        x, y = evt.index[:2]
        return self.attend(x, y, block, head, score_thr, state, progress)

    def again(self, block, head, score_thr, state, progress=gr.Progress()) -> Dict:
        """Another block or head: the same query again, if there is one."""
        if state is None or state.point is None:
            return {}
        return self.attend(*state.point, block, head, score_thr, state, progress)

    def attend(self, x, y, block, head, score_thr, state: Optional[Session],
               progress=gr.Progress()) -> Dict:
        """The views of the query at pixel (x, y)."""
        if state is None:
            return dict(CLEARED, message=_error('no image yet: upload one or pick a sample'))
        if x is None or y is None:
            return dict(message=_error('give both x and y (pixels of the image), or click on '
                                       'the predictions'))
        try:
            choice = self.viewer.choice(block)
            if not self.viewer.reuses(state.captured, state.image, choice):
                (progress or _no_progress)(0.3, desc=f'running the backbone to {choice.label}')
            views, state.captured = self.viewer.attention(state.image, (x, y), choice,
                                                          _head(head), state.captured)
        except (AppError, AttentionSiteError, ValueError) as e:
            return dict(CLEARED, message=_error(e), x=x, y=y)
        except Exception as e:
            logger.error('%s', traceback.format_exc())
            return dict(CLEARED, message=_error(f'unexpected {type(e).__name__}: {e} '
                                                '(the traceback is in the terminal)'), x=x, y=y)
        state.point = views.point
        drawn, _, _ = self.viewer.draw(state.image, state.prediction, score_thr, views.point)
        out = {f'view-{m}': gr.update(value=views.images[m], label=views.labels[m])
               for m in METHODS}
        ranges = ''.join(f'\n- {views.captions[m]}' for m in METHODS)
        done = ('the capture of this image and block was reused' if views.reused
                else f'{choice.label}: captured')
        out.update({'view-kernel': views.kernel, 'weights': views.weights_file,
                    'summary': views.summary + ranges, 'x': views.point[0], 'y': views.point[1],
                    'predictions': drawn, 'state': state,
                    'message': done + '; click another point, or pick a block or head'})
        return out

    def block_changed(self, block) -> Dict:
        """Another block: its heads; why it has no map, if it has none."""
        try:
            choice = self.viewer.choice(block)
        except AppError as e:
            return dict(message=_error(e))
        out = dict(head=gr.update(choices=head_labels(choice.heads), value=MEAN_OVER_HEADS))
        if choice.why_not:
            out.update(CLEARED, message=_error(choice.why_not))
        return out


CSS = """
.legend td, .legend th {padding: 2px 8px; text-align: left}
#message {min-height: 2em}
"""


def build(viewer: Viewer, score_thr: float = DEFAULT_SCORE_THR) -> gr.Blocks:
    """The page for ``viewer``."""
    h = Handlers(viewer)
    c: Dict[str, gr.components.Component] = {}
    default = viewer.default_choice or (viewer.choices[0] if viewer.choices else None)
    detection = viewer.kind == 'detection'
    with gr.Blocks(title='InLine: predictions and attention', analytics_enabled=False) as page:
        gr.Markdown('## InLine: predictions and the exact attention of any point\n'
                    + viewer.describe(), elem_id='model')
        with gr.Row():
            with gr.Column():
                c['image'] = gr.Image(label='image (upload one, or pick a sample below)',
                                      type='filepath', image_mode=None,
                                      sources=['upload', 'clipboard'], elem_id='image',
                                      format='png')
                gr.Examples([[s] for s in SAMPLES], inputs=[c['image']], label='samples',
                            elem_id='samples')
            with gr.Column():
                c['predictions'] = gr.Image(
                    label='predictions: click a point to see its attention', interactive=False,
                    format='png', elem_id='predictions', buttons=['download', 'fullscreen'])
                c['score'] = gr.Slider(0, 1, value=score_thr, step=0.01, elem_id='score',
                                       label='score threshold', visible=detection)
                c['legend'] = gr.HTML(elem_id='legend')
        c['message'] = gr.Markdown(elem_id='message')
        with gr.Row():
            c['block'] = gr.Dropdown([ch.label for ch in viewer.choices],
                                     value=default.label if default else None,
                                     label='block (stage, block): InLine blocks have maps',
                                     elem_id='block')
            c['head'] = gr.Dropdown(head_labels(default.heads if default else 0),
                                    value=MEAN_OVER_HEADS, label='head', elem_id='head')
            c['x'] = gr.Number(label='x (pixels)', precision=0, elem_id='x')
            c['y'] = gr.Number(label='y (pixels)', precision=0, elem_id='y')
            show = gr.Button('show the attention of (x, y)', elem_id='show')
        c['summary'] = gr.Markdown(elem_id='summary')
        with gr.Row():
            for m in METHODS:
                c[f'view-{m}'] = gr.Image(label=m, interactive=False, format='png',
                                          elem_id=f'view-{m}', buttons=['download', 'fullscreen'])
            c['view-kernel'] = gr.Image(label='local 3x3 kernel', interactive=False, format='png',
                                        elem_id='view-kernel', buttons=['download', 'fullscreen'])
        c['weights'] = gr.File(label='the exact weights of this query (.npz, float64)',
                               interactive=False, elem_id='weights')
        c['state'] = gr.State(None)

        def wire(fn, outputs):
            names = list(outputs)

            @functools.wraps(fn)
            def run(*args, **kwargs):
                result = fn(*args, **kwargs)
                return tuple(result.get(n, gr.skip()) for n in names)
            return run, [c[n] for n in names]

        loaded = ('predictions', 'legend', 'message', 'state') + tuple(CLEARED)
        fn, out = wire(h.load, loaded)
        c['image'].change(fn, [c['image'], c['score'], c['state']], out, preprocess=False)
        fn, out = wire(h.rethreshold, ('predictions', 'legend'))
        c['score'].release(fn, [c['score'], c['state']], out, show_progress='hidden')
        attended = tuple(CLEARED) + ('predictions', 'message', 'state')
        inputs = [c['block'], c['head'], c['score'], c['state']]
        fn, out = wire(h.click, attended)
        c['predictions'].select(fn, inputs, out)
        fn, out = wire(h.attend, attended)
        show.click(fn, [c['x'], c['y']] + inputs, out)
        fn, out = wire(h.block_changed, ('head', 'message') + tuple(CLEARED))
        again, again_out = wire(h.again, attended)
        c['block'].input(fn, [c['block']], out).then(again, inputs, again_out)
        c['head'].input(again, inputs, again_out)
    return page


def serve(viewer: Viewer, host: str = '127.0.0.1', port: int = 7860,
          score_thr: float = DEFAULT_SCORE_THR, block: bool = True):
    """Start the page on ``host:port`` (this machine only unless told otherwise). Nothing is
    fetched from the web: no analytics, no share link, the page's fonts and scripts are
    gradio's own files."""
    # (gradio reads it when it sends statistics or checks its version; the page's Blocks
    # say so too, but a page gradio builds itself, as its API page, reads the variable)
    os.environ['GRADIO_ANALYTICS_ENABLED'] = 'False'
    # gradio's queue calls a pandas option that pandas 3 deprecates, on every event
    warnings.filterwarnings('ignore', module='gradio.queueing')
    page = build(viewer, score_thr)
    page.queue(default_concurrency_limit=1)
    return page.launch(server_name=host, server_port=port, share=False, inbrowser=False,
                       show_error=True, prevent_thread_lock=not block, quiet=False,
                       footer_links=[], run_history=False, enable_monitoring=False,
                       pwa=False, mcp_server=False, ssr_mode=False,
                       max_file_size='200mb', css=CSS)
