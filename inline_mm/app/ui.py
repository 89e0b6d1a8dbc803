"""The web page of the app: Gradio, served on this machine only, loading nothing from the web.

:class:`Handlers` holds what each control does (plain methods returning ``{name: value}``,
tested without a browser); :func:`build` lays the page out and wires the handlers to it;
:func:`serve` starts it.
"""
import functools
import html
import logging
import os
import re
import threading
import traceback
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import gradio as gr

from ..visualization.attention_maps import METHODS, AttentionSiteError
from ..visualization.attention_views import colour_stops
from .viewer import DEFAULT_CONCURRENCY, DEFAULT_SCORE_THR, AppError, Image, Prediction, Viewer

__all__ = ['Handlers', 'Session', 'build', 'serve', 'SAMPLES', 'MEAN_OVER_HEADS']

#: the bundled images the page offers
SAMPLES = [os.path.join(os.path.dirname(__file__), 'samples', name)
           for name in ('toy_shapes.jpg', 'drawing.png')]
MEAN_OVER_HEADS = 'mean over heads'
#: the names of the page's outputs, in the order the handlers' results are wired
VIEWS = tuple(f'view-{m}' for m in METHODS) + ('view-kernel',)
BARS = tuple(f'bar-{m}' for m in METHODS)
CLEARED = {name: None for name in VIEWS + ('weights', 'x', 'y')}
CLEARED.update({name: '' for name in BARS + ('summary',)})
#: what the page says about the maps' colours
SCALE_NOTE = ('Each map has its own colour scale, drawn under it: **white is the uniform weight '
              '1/n** (every one of the n tokens weighted alike), red above it, blue below, out '
              "to the map's largest distance from 1/n (the bar's ends). Compare maps by their "
              'bars\' numbers, not by their colours.')

logger = logging.getLogger(__name__)


@dataclass
class Session:
    """One browser tab's image, its predictions, the last capture and query."""

    image: Image
    prediction: Prediction
    captured: object = None
    point: Optional[Tuple[float, float]] = None


class Newest:
    """Which of a tab's model requests is its newest, so that only the newest one's result
    reaches the page.

    A tab's requests run side by side (``--concurrency``) and may finish out of order: a
    click on the last image that finishes after a new image's predictions, or the second
    ``change`` event Gradio fires for one upload, must not draw over what came after them.
    Each request :meth:`begin` s a ticket; its result is shown only while :meth:`newest`
    holds. A request that repeats the newest one (``what`` equal and not None: the same
    file again) gets no ticket at all: the one already under way answers for both.
    At most ``tabs`` tabs are remembered (the least recently active are forgotten; a
    forgotten tab's request is shown).
    """

    def __init__(self, tabs: int = 1024):
        self.tabs = tabs
        self._lock = threading.Lock()
        self._tabs: 'OrderedDict[object, Tuple[int, object]]' = OrderedDict()

    def begin(self, tab, what=None) -> Optional[int]:
        """A new request of ``tab``: its ticket, or None when it repeats the newest."""
        with self._lock:
            ticket, last = self._tabs.pop(tab, (0, None))
            if what is not None and what == last:
                self._tabs[tab] = (ticket, last)
                return None
            self._tabs[tab] = (ticket + 1, what)
            while len(self._tabs) > self.tabs:
                self._tabs.popitem(last=False)
            return ticket + 1

    def newest(self, tab, ticket: int) -> bool:
        with self._lock:
            return self._tabs.get(tab, (ticket,))[0] == ticket


def _tab(request: Optional[gr.Request]):
    """The browser tab a request comes from (None without one: a direct call)."""
    return getattr(request, 'session_hash', None)


def head_labels(heads: int):
    return [MEAN_OVER_HEADS] + [f'head {i}' for i in range(heads)]


def _head(label) -> Optional[int]:
    if not label or label == MEAN_OVER_HEADS:
        return None
    return int(str(label).split()[-1])


#: an absolute path (of a file on the server: a message names a file by its name only)
_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"/]+/)+([^\s'\"/]+)")


def _error(e) -> str:
    return '**Error:** ' + _PATH.sub(r'\1', str(e))


def colour_bar(scale: Tuple[float, float], uniform: float) -> str:
    """A map's colour bar (HTML): the colours from ``scale``'s low end to its high end, the
    uniform weight 1/n marked in the middle, the three values printed under it."""
    lo, hi = scale
    stops = ', '.join(f'rgb{c}' for c in colour_stops())
    mark = 100 * (uniform - lo) / (hi - lo)
    return (f'<div class="colour-bar" data-lo="{lo:.12g}" data-uniform="{uniform:.12g}" '
            f'data-hi="{hi:.12g}"><div class="bar" style="background:linear-gradient(to right, '
            f'{stops})"><span class="uniform" style="left:{mark:.2f}%"></span></div>'
            f'<div class="ticks"><span>{lo:.3g}</span>'
            f'<span>1/n = {html.escape(f"{uniform:.3g}")}</span><span>{hi:.3g}</span></div>'
            '</div>')


def _loaded(image: Image, summary: str) -> str:
    """The message of an image: its notes, name, size and what was predicted."""
    notes = ''.join(f'- {n}\n' for n in image.notes)
    return (f'{notes}{image.name}, {image.hw[1]}x{image.hw[0]}: {summary}. Click a point on the '
            'predictions to see its attention.')


def _no_progress(*args, **kwargs):
    pass


class Handlers:
    """What the page's controls do, each returning ``{output name: value}`` (names left out
    stay as they are on the page). Bad input returns a message; nothing raises."""

    def __init__(self, viewer: Viewer):
        self.viewer = viewer
        self.newest = Newest()

    # ------------------------------------------------------------------ image
    def load(self, payload, score_thr, state, progress=gr.Progress(),
             request: gr.Request = None) -> Dict:
        """A new image (an upload, a sample, or cleared): read it, predict, draw."""
        path = payload.get('path') if isinstance(payload, dict) else payload
        name = payload.get('orig_name') if isinstance(payload, dict) else None
        tab = _tab(request)
        ticket = self.newest.begin(tab, ('image', path and str(path), name))
        if ticket is None:              # this image is already on its way to the page
            return {}
        cleared = dict(CLEARED, predictions=None, legend='', state=None)
        if not path:
            return dict(cleared, message='Upload an image or pick a sample.')
        try:
            image = self.viewer.read(str(path), name)
            (progress or _no_progress)(0.2, desc='running the model')
            prediction = self.viewer.predict(image)
            drawn, legend, summary = self.viewer.draw(image, prediction, score_thr)
            out = dict(cleared, predictions=drawn, legend=legend,
                       message=_loaded(image, summary), state=Session(image, prediction))
        except AppError as e:
            out = dict(cleared, message=_error(e))
        except Exception as e:        # the page stays up and says what happened
            logger.error('%s', traceback.format_exc())
            out = dict(cleared, message=_error(f'unexpected {type(e).__name__}: {e} '
                                               '(the traceback is in the terminal)'))
        return self._if_newest(tab, ticket, out)

    def _if_newest(self, tab, ticket: int, out: Dict) -> Dict:
        """``out`` while the request of ``ticket`` is its tab's newest; else nothing to draw."""
        return out if self.newest.newest(tab, ticket) else {}

    def rethreshold(self, score_thr, state: Optional[Session]) -> Dict:
        """The slider moved: redraw (no new prediction)."""
        if state is None:
            return {}
        drawn, legend, summary = self.viewer.draw(state.image, state.prediction, score_thr,
                                                  state.point)
        return dict(predictions=drawn, legend=legend, message=_loaded(state.image, summary))

    # ------------------------------------------------------------------ attention
    def click(self, block, head, score_thr, state, evt: gr.SelectData,
              progress=gr.Progress(), request: gr.Request = None) -> Dict:
        """A click on the predictions: that pixel is the query."""
        x, y = evt.index[:2]
        return self.attend(x, y, block, head, score_thr, state, progress, request)

    def again(self, block, head, score_thr, state, progress=gr.Progress(),
              request: gr.Request = None) -> Dict:
        """Another block or head: the same query again, if there is one."""
        if state is None or state.point is None:
            return {}
        return self.attend(*state.point, block, head, score_thr, state, progress, request)

    def attend(self, x, y, block, head, score_thr, state: Optional[Session],
               progress=gr.Progress(), request: gr.Request = None) -> Dict:
        """The views of the query at pixel (x, y)."""
        tab = _tab(request)
        ticket = self.newest.begin(tab)
        if state is None:
            return dict(CLEARED, message=_error('no image yet: upload one or pick a sample'))
        if x is None or y is None:
            return dict(message=_error('give both x and y (pixels of the image), or click on '
                                       'the predictions'))
        try:
            choice = self.viewer.choice(block)
            if not self.viewer.reuses(state.captured, state.image, choice):
                (progress or _no_progress)(0.3, desc=f'running the backbone to {choice.label}')
            views, captured = self.viewer.attention(state.image, (x, y), choice, _head(head),
                                                    state.captured)
        except (AppError, AttentionSiteError, ValueError) as e:
            return self._if_newest(tab, ticket, dict(CLEARED, message=_error(e), x=x, y=y))
        except Exception as e:
            logger.error('%s', traceback.format_exc())
            return self._if_newest(tab, ticket, dict(
                CLEARED, message=_error(f'unexpected {type(e).__name__}: {e} (the traceback '
                                        'is in the terminal)'), x=x, y=y))
        if not self.newest.newest(tab, ticket):   # a newer request of this tab answers
            return {}
        state.captured, state.point = captured, views.point
        drawn, _, _ = self.viewer.draw(state.image, state.prediction, score_thr, views.point)
        out = {f'view-{m}': gr.update(value=views.images[m], label=views.labels[m])
               for m in METHODS}
        ranges = ''.join(f'\n- {views.captions[m]}' for m in METHODS)
        done = ('same image and block as before: its attention from the last click was used '
                'again (the backbone did not run again)' if views.reused
                else f'{choice.label}: the backbone ran on the image')
        out.update({f'bar-{m}': colour_bar(views.scales[m], views.uniform) for m in METHODS})
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
#image img {background: white}
.colour-bar .bar {position: relative; height: 12px; border: 1px solid #888}
.colour-bar .uniform {position: absolute; top: -3px; bottom: -3px; width: 2px;
                      margin-left: -1px; background: black}
.colour-bar .ticks {display: flex; justify-content: space-between; font-size: 12px}
"""


def build(viewer: Viewer, score_thr: float = DEFAULT_SCORE_THR,
          model_requests: int = DEFAULT_CONCURRENCY) -> gr.Blocks:
    """The page for ``viewer``; ``model_requests``: how many requests that run the model
    (an image's predictions, a click's maps) run at once, over all users (the rest wait in
    one first-come queue)."""
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
        gr.Markdown(SCALE_NOTE, elem_id='scale-note')
        with gr.Row():
            for m in METHODS:
                with gr.Column(min_width=160):
                    c[f'view-{m}'] = gr.Image(label=m, interactive=False, format='png',
                                              elem_id=f'view-{m}',
                                              buttons=['download', 'fullscreen'])
                    c[f'bar-{m}'] = gr.HTML(elem_id=f'bar-{m}')
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

        model = dict(concurrency_id='model', concurrency_limit=model_requests)
        loaded = ('predictions', 'legend', 'message', 'state') + tuple(CLEARED)
        fn, out = wire(h.load, loaded)
        c['image'].change(fn, [c['image'], c['score'], c['state']], out, preprocess=False,
                          **model)
        # .change: a typed value, the arrow keys and a drag's release all redraw
        fn, out = wire(h.rethreshold, ('predictions', 'legend', 'message'))
        c['score'].change(fn, [c['score'], c['state']], out, show_progress='hidden',
                          trigger_mode='always_last')
        attended = tuple(CLEARED) + ('predictions', 'message', 'state')
        inputs = [c['block'], c['head'], c['score'], c['state']]
        fn, out = wire(h.click, attended)
        c['predictions'].select(fn, inputs, out, **model)
        fn, out = wire(h.attend, attended)
        show.click(fn, [c['x'], c['y']] + inputs, out, **model)
        fn, out = wire(h.block_changed, ('head', 'message') + tuple(CLEARED))
        again, again_out = wire(h.again, attended)
        c['block'].input(fn, [c['block']], out).then(again, inputs, again_out, **model)
        c['head'].input(again, inputs, again_out, **model)
    return page


def serve(viewer: Viewer, host: str = '127.0.0.1', port: int = 7860,
          score_thr: float = DEFAULT_SCORE_THR, block: bool = True, on_start=None,
          model_requests: int = DEFAULT_CONCURRENCY):
    """Start the page on ``host:port`` (this machine only unless told otherwise), quietly;
    ``on_start(url)`` is called once it serves; then, with ``block``, serve until stopped.
    Nothing is fetched from the web: no analytics, no share link, the page's fonts and
    scripts are gradio's own files. Model requests of every user share one queue,
    ``model_requests`` of them running at once (each request's attention capture is its
    own, :func:`~inline_mm.models.attention.record_calls`)."""
    # (gradio reads it when it sends statistics or checks its version; the page's Blocks
    # say so too, but a page gradio builds itself, as its API page, reads the variable)
    os.environ['GRADIO_ANALYTICS_ENABLED'] = 'False'
    # gradio's queue calls a pandas option that pandas 3 deprecates, on every event
    warnings.filterwarnings('ignore', module='gradio.queueing')
    page = build(viewer, score_thr, model_requests)
    page.queue(default_concurrency_limit=1)
    page.launch(server_name=host, server_port=port, share=False, inbrowser=False,
                show_error=True, prevent_thread_lock=True, quiet=True,
                footer_links=[], run_history=False, enable_monitoring=False,
                pwa=False, mcp_server=False, ssr_mode=False,
                max_file_size='200mb', css=CSS)
    if on_start is not None:
        on_start(f'http://{host}:{port}')
    if block:
        page.block_thread()
    return page
