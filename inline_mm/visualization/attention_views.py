"""Attention maps as a person sees them: each map at the image's own size, coloured over
the image, the local kernel as a picture, and the exact weights as a file.

The maps of :mod:`inline_mm.visualization.attention_maps` live on a grid of tokens that covers the
*resized* image (the config's test resize), ``stride`` pixels per token. Here every pixel of the
*original* image takes the value of the token it falls in, by the rule of
:func:`~inline_mm.visualization.attention_maps.point_to_cell` (a click on a pixel and the map under
it name the same token). Used by the app (``python -m inline_mm.app``) and by
``tools/attention_map.py`` (its figure, and ``--npz``); nothing here imports a web framework.
"""
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from .attention_maps import METHODS, AttentionMaps

__all__ = ['pixel_cells', 'map_at_image_size', 'map_scale', 'colour_stops', 'colour_over',
           'mark_point', 'kernel_taps',
           'kernel_picture', 'method_label', 'save_maps', 'load_maps', 'figure_size',
           'draw_figure']

#: how a map is coloured: matplotlib's colour map and its opacity over a grey copy of the
#: image (the figure of tools/attention_map.py uses the same); a diverging map, white in the
#: middle, where :func:`map_scale` puts the uniform weight 1/n
COLOUR_MAP, OPACITY = 'RdBu_r', 0.6


def pixel_cells(image_hw: Tuple[int, int], resized_hw: Tuple[int, int], stride: int,
                grid: Tuple[int, int]) -> Tuple[np.ndarray, np.ndarray]:
    """The grid row of every pixel row and the grid column of every pixel column of an
    ``image_hw`` image: ``(ih,)`` and ``(iw,)`` int arrays, the arithmetic of
    :func:`~inline_mm.visualization.attention_maps.point_to_cell` for each pixel."""
    ih, iw = image_hw
    rows = np.minimum((np.arange(ih) * resized_hw[0] / ih // stride).astype(np.int64),
                      grid[0] - 1)
    cols = np.minimum((np.arange(iw) * resized_hw[1] / iw // stride).astype(np.int64),
                      grid[1] - 1)
    return rows, cols


def map_at_image_size(grid_map, image_hw: Tuple[int, int], resized_hw: Tuple[int, int],
                      stride: int) -> np.ndarray:
    """An ``(h, w)`` map of tokens as an ``image_hw`` array: each pixel holds its token's
    value (nearest, no smoothing: a token's weight is one number)."""
    grid_map = np.asarray(grid_map)
    rows, cols = pixel_cells(image_hw, resized_hw, stride, grid_map.shape)
    return grid_map[rows[:, None], cols[None, :]]


def map_scale(values, uniform: float) -> Tuple[float, float]:
    """A map's colour scale ``(lo, hi)``: centred on the uniform weight ``uniform`` (1/n,
    white), out to the map's largest distance from it (blue below, red above), so that a
    colour says how far a key is from getting the uniform weight, and the ends are the
    map's extreme. A map with every weight uniform gets ``uniform +- uniform``."""
    bound = float(np.max(np.abs(np.asarray(values, dtype=np.float64) - uniform)))
    if not bound > 0:
        bound = abs(uniform) or 1.0
    return uniform - bound, uniform + bound


def colour_stops(n: int = 11) -> list:
    """``n`` evenly spaced ``(r, g, b)`` colours of :data:`COLOUR_MAP` (0-255 ints), from
    ``lo`` to ``hi`` of :func:`map_scale`: a colour bar."""
    from matplotlib import colormaps
    return [tuple(int(round(255 * c)) for c in colormaps[COLOUR_MAP](i / (n - 1))[:3])
            for i in range(n)]


def colour_over(image: np.ndarray, values: np.ndarray, scale: Tuple[float, float],
                point: Optional[Tuple[float, float]] = None) -> np.ndarray:
    """``values`` (the image's size) coloured on ``scale`` (``(lo, hi)``, :func:`map_scale`)
    over a grey copy of the ``(H, W, 3)`` uint8 ``image``; the query ``point`` marked.
    Returns an ``(H, W, 3)`` uint8 image."""
    from matplotlib import colormaps
    lo, hi = scale
    scaled = np.clip((np.asarray(values, dtype=np.float64) - lo) / (hi - lo), 0, 1)
    colours = colormaps[COLOUR_MAP](scaled)[..., :3] * 255
    grey = image.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    out = OPACITY * colours + (1 - OPACITY) * grey[..., None]
    out = np.clip(out + 0.5, 0, 255).astype(np.uint8)
    return out if point is None else mark_point(out, point)


def mark_point(image: np.ndarray, point: Tuple[float, float]) -> np.ndarray:
    """A copy of ``image`` with a white, black-edged ring around pixel ``point`` (x, y),
    sized to the image."""
    from PIL import Image, ImageDraw
    h, w = image.shape[:2]
    r = max(4, round(min(h, w) / 40))
    x, y = point
    im = Image.fromarray(image)
    draw = ImageDraw.Draw(im)
    draw.ellipse((x - r - 1, y - r - 1, x + r + 1, y + r + 1), outline=(0, 0, 0),
                 width=max(2, r // 2) + 2)
    draw.ellipse((x - r, y - r, x + r, y + r), outline=(255, 255, 255), width=max(2, r // 2))
    return np.asarray(im)


def method_label(maps: AttentionMaps, method: str) -> str:
    """What a column of weights is, in words: whose weights, on which kernel."""
    own = " (the block's)"
    if method == 'inline':
        return 'InLine' + (own if maps.attention == 'inline' else '')
    if method == 'linear':
        if maps.linear_kernel == 'relu' and maps.kernel_name == 'identity':
            text = 'linear (ReLU kernel)'
        else:
            text = f'linear, {maps.linear_kernel} kernel'
        return text + (own if maps.attention == 'linear' else '')
    if method == 'softmax':
        return 'Softmax'
    raise ValueError(f'unknown method {method!r}; one of {METHODS}')


def kernel_taps(maps: AttentionMaps, row: int = 0) -> np.ndarray:
    """The ``(3, 3)`` local kernel as query ``row`` applies it: NaN at the taps past the
    image's border (they read zero padding), float64."""
    k = maps.kernel.detach().cpu().numpy().astype(np.float64)
    cell = maps.query_cell(row)
    if cell is not None:
        ys = cell[0] + np.arange(-1, 2)[:, None]
        xs = cell[1] + np.arange(-1, 2)[None, :]
        inside = (ys >= 0) & (ys < maps.grid[0]) & (xs >= 0) & (xs < maps.grid[1])
        k = np.where(inside, k, np.nan)
    return k


def kernel_picture(maps: AttentionMaps, row: int = 0, side: int = 320) -> np.ndarray:
    """The local 3x3 kernel around query ``row`` as a ``(side, side, 3)`` uint8 picture:
    each tap coloured by its value (blue negative, red positive) and printed; taps past the
    image's border read zero padding and are left blank."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    dpi = 100
    fig = plt.figure(figsize=(side / dpi, side / dpi), dpi=dpi)
    ax = fig.add_axes((0.12, 0.18, 0.76, 0.76))    # (the title below: page labels sit on top)
    ax.set_xticks([])
    ax.set_yticks([])
    what = 'mean over heads' if maps.head is None else f'head {maps.head}'
    title = f"local 3x3{' + LePE' if maps.lepe else ''} ({what})"
    if maps.kernel is None:
        ax.text(0.5, 0.5, 'no local term', ha='center', va='center', fontsize=11)
    else:
        k = kernel_taps(maps, row)
        bound = float(np.nanmax(np.abs(k))) if np.isfinite(k).any() else 1.0
        ax.imshow(k, cmap='RdBu_r', vmin=-bound, vmax=bound)
        for dy in range(3):
            for dx in range(3):
                if np.isfinite(k[dy, dx]):
                    dark = abs(k[dy, dx]) > 0.6 * bound     # (white on the deep colours)
                    ax.text(dx, dy, f'{k[dy, dx]:.3g}', ha='center', va='center', fontsize=10,
                            color='white' if dark else 'black')
        title += '\nthe same for every query'
    fig.text(0.5, 0.02, title, ha='center', va='bottom', fontsize=10)
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return pixels


def save_maps(path: str, maps: AttentionMaps, points: Sequence[Optional[Tuple[float, float]]],
              image_hw: Tuple[int, int], resized_hw: Tuple[int, int], module: str = ''):
    """Write the exact weights of ``maps`` to an ``.npz`` file (float64, nothing rounded).

    Arrays: per method of :data:`~inline_mm.visualization.attention_maps.METHODS` ``<method>`` ``(m,
    h, w)`` (each query's weights on the patch keys) and ``<method>_prefix`` ``(m, p)`` (on the
    class token, ``p = 0`` without one); ``kernel`` ``(3, 3)`` (NaN without a local term); ``cells``
    ``(m, 2)`` the query tokens ``(r, c)`` (-1 for a class-token query); ``points`` ``(m, 2)`` their
    ``(x, y)`` pixels (NaN for a class-token query); ``query_scales`` ``(m,)``; ``grid``,
    ``stride``, ``image_hw``, ``resized_hw``, ``head`` (-1: the mean over heads); ``module`` (the
    attention's module path).
    """
    rows = range(len(maps.queries))
    arrays: Dict[str, np.ndarray] = {}
    for method in METHODS:
        arrays[method] = np.stack([maps.grid_map(method, r).detach().cpu().numpy()
                                   for r in rows])
        arrays[f'{method}_prefix'] = np.stack([maps.prefix(method, r).detach().cpu().numpy()
                                               for r in rows])
    kernel = maps.kernel
    arrays['kernel'] = (np.full((3, 3), np.nan) if kernel is None
                        else kernel.detach().cpu().numpy().astype(np.float64))
    arrays['cells'] = np.array([maps.query_cell(r) or (-1, -1) for r in rows], dtype=np.int64)
    arrays['points'] = np.array([p if p is not None else (np.nan, np.nan) for p in points],
                                dtype=np.float64).reshape(-1, 2)
    arrays['query_scales'] = np.asarray(maps.query_scales, dtype=np.float64)
    arrays['grid'] = np.asarray(maps.grid, dtype=np.int64)
    arrays['stride'] = np.asarray(maps.stride, dtype=np.int64)
    arrays['image_hw'] = np.asarray(image_hw, dtype=np.int64)
    arrays['resized_hw'] = np.asarray(resized_hw, dtype=np.int64)
    arrays['head'] = np.asarray(-1 if maps.head is None else maps.head, dtype=np.int64)
    arrays['module'] = np.asarray(module)
    np.savez_compressed(path, **arrays)


def load_maps(path: str) -> Dict[str, np.ndarray]:
    """The arrays :func:`save_maps` wrote (plain arrays: no pickled objects)."""
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


# --------------------------------------------------------------------------- the figure
#: pixels of one cell of the figure, and of the title band above the cells
CELL_PX, TITLE_PX, DPI = 240, 76, 100
#: the figure's columns
COLUMNS = ('image',) + METHODS + ('local',)


def figure_size(rows: int) -> Tuple[int, int]:
    """``(width, height)`` in pixels of a figure with ``rows`` queries."""
    return CELL_PX * len(COLUMNS), CELL_PX * rows + TITLE_PX


def draw_figure(maps: AttentionMaps, image, points: Sequence[Optional[Tuple[float, float]]],
                resized_hw: Tuple[int, int], path: str, title: str = ''):
    """Write the PNG of ``tools/attention_map.py``: one row per query (``points``: its
    ``(x, y)`` in ``image`` pixels, or None for a class-token query), columns: the image
    with the query marked, the InLine, linear and Softmax maps over the image, the local
    3x3 kernel."""
    import io

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from PIL import Image

    rows = len(maps.queries)
    width, height = figure_size(rows)
    fig = plt.figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    grid = fig.add_gridspec(rows, len(COLUMNS), left=0.01, right=0.99, bottom=0.01,
                            top=1 - TITLE_PX / height, wspace=0.08, hspace=0.32)
    ih, iw = image.shape[:2]
    grey = image.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    h, w = maps.grid
    # The grid covers stride-sized cells of the resized image; back in the image's pixels:
    extent = (0, w * maps.stride * iw / resized_hw[1], h * maps.stride * ih / resized_hw[0], 0)
    uniform = 1.0 / maps.weights[METHODS[0]].shape[-1]      # 1/n: n keys, the prefix too
    title = (title + '\n' if title else '') + (f'each map: white = the uniform weight 1/n = '
                                                f'{uniform:.2g}, red above, blue below')
    fig.suptitle(title, fontsize=9, y=1 - 0.12 * TITLE_PX / height)
    for r, point in enumerate(points[:rows]):
        for c, column in enumerate(COLUMNS):
            ax = fig.add_subplot(grid[r, c])
            ax.set_xticks([])
            ax.set_yticks([])
            if column == 'local':
                _draw_kernel(ax, maps, r)
                continue
            # The maps over a grey copy, so that their colours read as weights.
            ax.imshow(image if column == 'image' else grey, cmap='gray', vmin=0, vmax=255)
            if column != 'image':
                m = maps.grid_map(column, r).numpy()
                lo, hi = map_scale(m, uniform)
                ax.imshow(m, extent=extent, cmap=COLOUR_MAP, alpha=OPACITY, vmin=lo, vmax=hi,
                          interpolation='nearest')
                text = f'{method_label(maps, column)}\n[{m.min():.2g}, {m.max():.2g}]'
                if maps.prefix_tokens:
                    text += f' cls {float(maps.prefix(column, r).sum()):.2g}'
                ax.set_title(text, fontsize=7)
            else:
                label = 'class token' if point is None else f'query ({point[0]:g}, {point[1]:g})'
                if maps.query_scales[r] != 1:
                    label += f', q x {maps.query_scales[r]:g}'
                ax.set_title(label, fontsize=7)
            if point is not None:
                ax.plot([point[0]], [point[1]], marker='*', markersize=11, color='white',
                        markeredgecolor='black')
            ax.set_xlim(0, iw)
            ax.set_ylim(ih, 0)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format='png')
    plt.close(fig)
    # A 256-colour palette: a third of the bytes, no visible change to flat maps.
    with Image.open(buf) as im:
        im.convert('RGB').quantize(256).save(path, optimize=True)


def _draw_kernel(ax, maps: AttentionMaps, row: int):
    what = 'mean over heads' if maps.head is None else f'head {maps.head}'
    if maps.kernel is None:
        ax.text(0.5, 0.5, 'no local term', ha='center', va='center', fontsize=8)
        ax.set_title('local 3x3', fontsize=7)
        return
    k = kernel_taps(maps, row)          # taps past the image read zero padding: blank
    bound = np.nanmax(np.abs(k)) if np.isfinite(k).any() else 1.0
    ax.imshow(k, cmap='RdBu_r', vmin=-bound, vmax=bound)
    for dy in range(3):
        for dx in range(3):
            if np.isfinite(k[dy, dx]):
                ax.text(dx, dy, f'{k[dy, dx]:.2g}', ha='center', va='center', fontsize=7)
    where = 'class token: none' if maps.query_cell(row) is None else 'same for every query'
    ax.set_title(f"local 3x3{' + LePE' if maps.lepe else ''} ({what})\n{where}", fontsize=7)
