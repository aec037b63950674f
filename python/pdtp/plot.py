"""Charts (``pdtp[plot]``: matplotlib; PNG or SVG by the file's extension).

* :func:`throughput_chart`: requests/s per GPU against the GPU budget, one line per model,
  one panel per GPU type — from :func:`pdtp.sweep` rows.
* :func:`pairs_chart`: for each model and connector, every (prefill TP, decode TP) pair:
  valid, valid with a warning, or the code of the first rule vLLM would reject it with.
* :func:`latency_chart`: simulated TTFT and TPOT percentiles of a deployment against the
  request rate, with the SLO lines (:func:`pdtp.simulate`).
* :func:`pareto_chart`: output tokens/s per GPU against tokens/s per user, from
  :func:`pdtp.pareto` — the valid frontier (aggregated and disaggregated points marked
  apart, each labelled with its instances) and the rule-blind frontier faintly behind.
"""

from __future__ import annotations

import errno
import importlib
import math
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

from .connectors import NO_GPU_CONNECTOR, VENDOR_DEFAULTS
from .errors import ArgumentTypeError, InvalidArgumentError
from .layout import loadable_tp_sizes

__all__ = [
    "DEFAULT_MODELS",
    "PAIR_MODELS",
    "latency_chart",
    "pairs_chart",
    "pairs_grid",
    "pareto_chart",
    "throughput_chart",
]

# A representative set: dense GQA small and large, 4-KV-head GQA, MoE, MHA and MLA.
DEFAULT_MODELS = (
    "llama-3.1-8b",
    "qwen2.5-7b",
    "mixtral-8x7b",
    "llama-3.1-70b",
    "qwen3-235b-a22b",
    "deepseek-v3",
)
PAIR_MODELS = ("llama-3.1-70b", "qwen3-235b-a22b", "llama-2-13b", "deepseek-v3")

# Cell states of the pairs chart: (label in the cell, colour, legend text).
_VALID = "valid"
_WARN = "valid_warning"
_CELLS: dict[str, tuple[str, str, str]] = {
    _VALID: ("ok", "#4caf50", "valid"),
    _WARN: ("ok*", "#a5d6a7", "valid, but some prefill ranks are never read (P > D)"),
    "attention_heads_not_divisible": ("A%tp", "#9e9e9e", "attention heads not divisible by TP"),
    "kv_heads_not_divisible": ("H%tp", "#bdbdbd", "KV heads neither divide nor are divided by TP"),
    "tp_not_divisible": ("P∤D", "#ef9a9a", "neither TP size divides the other"),
    "decode_smaller_than_prefill": ("D<P", "#ffcc80", "decode TP smaller than prefill TP"),
    "kv_heads_not_replicated": ("KV", "#e57373", "MoRIIO: P≠D needs min(P, D) ≥ KV heads"),
    "too_many_acks": ("acks", "#ce93d8", "more release acks than max_acks"),
}
_OTHER = ("?", "#fff59d", "other rule")


def _matplotlib() -> Any:
    try:
        mpl = importlib.import_module("matplotlib")
    except ImportError:
        raise InvalidArgumentError('charts need matplotlib: pip install "pdtp[plot]"') from None
    mpl.use("Agg")  # files only; never a window
    return importlib.import_module("matplotlib.pyplot")


def _chart_suffix(path: str | os.PathLike[str]) -> str:
    """The file type (checked before any drawing, so a wrong name costs nothing)."""
    suffix = pathlib.Path(path).suffix.lower()
    if suffix not in (".png", ".svg"):
        raise InvalidArgumentError(f"chart file must end in .png or .svg, got {str(path)!r}")
    return suffix


def _save(fig: Any, path: str | os.PathLike[str] | None) -> None:
    if path is None:
        return
    p = pathlib.Path(path)
    suffix = _chart_suffix(p)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where the folder should be
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(p.parent)) from None
    kwargs: dict[str, Any] = {"bbox_inches": "tight"}
    if suffix == ".png":
        kwargs["dpi"] = 110
    else:
        kwargs["metadata"] = {"Date": None}  # reproducible SVG
    fig.savefig(p, **kwargs)


def _rows(data: Any) -> list[Any]:
    """Sweep rows from a DataFrame, a list of dicts or an output file."""
    if isinstance(data, str | os.PathLike):
        from .sweeps import read_rows

        return read_rows(data)
    if hasattr(data, "to_dict") and hasattr(data, "columns"):
        out: list[Any] = data.to_dict("records")
        return out
    return list(data)


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


# The legend stays readable: without a model list, a chart draws this many models, the ones
# with the highest peak requests/s per GPU (the title says so).
TOP_MODELS = 10
# Colour, then dash pattern, then marker: 10 x 4 x 6 distinct styles before any repeats.
_DASHES = ("-", "--", ":", "-.")
_MARKERS = (None, "o", "s", "^", "D", "v")


def _style(i: int) -> dict[str, Any]:
    """The i-th model's line style: no two of the first 240 models look alike."""
    marker = _MARKERS[(i // (10 * len(_DASHES))) % len(_MARKERS)]
    style: dict[str, Any] = {
        "color": f"C{i % 10}",
        "linestyle": _DASHES[(i // 10) % len(_DASHES)],
        "linewidth": 1.6,
    }
    if marker:
        style.update(marker=marker, markersize=3.5)
    return style


def _slo(x: Any) -> float | None:
    return None if _missing(x) else float(x)


def _workload_key(r: Any) -> tuple[int, int, float | None, float | None]:
    # None for a missing SLO, never NaN (NaN != NaN would split one workload in two).
    return (int(r["isl"]), int(r["osl"]), _slo(r["slo_ttft_ms"]), _slo(r["slo_tpot_ms"]))


def _workload_label(w: tuple[int, int, float | None, float | None], fields: Sequence[int]) -> str:
    """The workload's fields at positions ``fields`` (0 isl, 1 osl, 2 TTFT, 3 TPOT)."""
    isl, osl, ttft, tpot = w
    parts = {
        0: f"isl={isl}",
        1: f"osl={osl}",
        2: "no TTFT bound" if ttft is None else f"TTFT ≤ {ttft:g} ms",
        3: "no TPOT bound" if tpot is None else f"TPOT ≤ {tpot:g} ms",
    }
    return ", ".join(parts[i] for i in fields)


def _per_gpu(r: Any) -> float:
    rps = r["requests_per_s"]
    return math.nan if _missing(rps) else float(rps) / float(r["gpus"])


def _names(x: str | Sequence[str] | None) -> list[str] | None:
    return None if x is None else [x] if isinstance(x, str) else list(x)


def throughput_chart(
    data: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    models: Sequence[str] | None = None,
    gpu: str | Sequence[str] | None = None,
    connector: str | Sequence[str] | None = None,
    top: int | None = TOP_MODELS,
    title: str | None = None,
) -> Any:
    """Requests/s per budgeted GPU against the GPU budget (log-log) from :func:`pdtp.sweep`
    rows (a DataFrame, dicts or an output file).

    One panel per GPU type, connector and workload in the rows (each titled with what sets
    it apart; what all panels share goes in the figure title), one line per model, the same
    colour and dash for a model in every panel. ``models`` picks the models (in that order);
    without it the ``top`` models by peak requests/s per GPU are drawn (``None`` or 0: all),
    and the legend says which. Budgets a model cannot serve leave a gap. Returns the
    matplotlib Figure."""
    if path is not None:
        _chart_suffix(path)
    plt = _matplotlib()
    rows = _rows(data)
    connectors_wanted, gpus_wanted = _names(connector), _names(gpu)
    if connectors_wanted is not None:
        rows = [r for r in rows if r["connector"] in connectors_wanted]
    if gpus_wanted is not None:
        rows = [r for r in rows if r["gpu"] in gpus_wanted]
    if models is not None:
        rows = [r for r in rows if r["model"] in set(models)]
    if not rows:
        raise InvalidArgumentError("no sweep rows to plot (check models / gpu / connector)")
    if top is not None and top < 0:
        raise InvalidArgumentError(f"top must be 0 (all models) or a positive count, got {top}")

    # The models, strongest first (the legend's order): peak requests/s per GPU anywhere.
    peak: dict[str, float] = {}
    for r in rows:
        v = _per_gpu(r)
        if not math.isnan(v):
            peak[r["model"]] = max(peak.get(r["model"], 0.0), v)
        else:
            peak.setdefault(r["model"], 0.0)
    if models is not None:
        model_names = [m for m in dict.fromkeys(models) if m in peak]
    else:
        model_names = sorted(peak, key=lambda m: (-peak[m], m))
    shown = model_names[:top] if models is None and top else model_names
    cut = len(shown) < len(model_names)

    gpu_names = list(gpus_wanted or sorted({r["gpu"] for r in rows}))
    gpu_names = [g for g in gpu_names if any(r["gpu"] == g for r in rows)]
    connector_names = sorted({r["connector"] for r in rows})
    workloads = sorted({_workload_key(r) for r in rows}, key=lambda w: tuple(
        -1.0 if x is None else x for x in w
    ))  # fmt: skip
    # Panels name the workload fields that differ; the figure title, the ones all share.
    varying = [i for i in range(4) if len({w[i] for w in workloads}) > 1]
    same = [i for i in range(4) if i not in varying]
    facets = [
        (w, g, c)
        for w in workloads
        for g in gpu_names
        for c in connector_names
        if any(r["gpu"] == g and r["connector"] == c and _workload_key(r) == w for r in rows)
    ]
    series: dict[tuple[Any, str, str, str], list[tuple[int, float]]] = {}
    for r in rows:
        key = (_workload_key(r), r["gpu"], r["connector"], r["model"])
        series.setdefault(key, []).append((int(r["gpus"]), _per_gpu(r)))

    # A row per workload when the GPU x connector panels fit in a row; otherwise wrap at 4.
    columns = len({(g, c) for _, g, c in facets})
    ncols = columns if len(workloads) > 1 and 1 < columns <= 4 else min(len(facets), 4)
    nrows = math.ceil(len(facets) / ncols)
    legend_cols = max(1, math.ceil(len(shown) / 24))
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(4.6 * ncols + 0.8 + 1.9 * legend_cols, 3.9 * nrows + 0.9),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(facets) :]:
        ax.remove()
    budgets_all = sorted({int(r["gpus"]) for r in rows})
    styles = {m: _style(i) for i, m in enumerate(shown)}
    for ax, (w, g, c) in zip(flat, facets):
        for m in shown:
            pts = sorted(series.get((w, g, c, m), []))
            if pts:
                xs, ys = zip(*pts)
                # About eight markers per line, wherever the budgets are.
                every = {"markevery": max(1, len(xs) // 8)} if "marker" in styles[m] else {}
                ax.plot(xs, ys, label=m, **styles[m], **every)
        parts = [g] if len(gpu_names) > 1 else []
        if len(connector_names) > 1:
            parts.append(f"connector: {c}")
        if len(workloads) > 1:
            parts.append(_workload_label(w, varying))
        label = "\n".join(parts) if parts else g
        if len(label) <= 16:  # a GPU or connector name: bold, like a heading
            ax.set_title(label, fontsize=12, fontweight="bold")
        else:
            ax.set_title(label, fontsize=9.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        if budgets_all:
            lo, hi = budgets_all[0], budgets_all[-1]
            ticks = [2**k for k in range(24) if lo <= 2**k <= hi]
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlim(lo, max(hi, lo + 1))
    for i, ax in enumerate(flat[: len(facets)]):
        if i + ncols >= len(facets):  # the lowest panel of its column
            ax.set_xlabel("GPU budget (GPUs, log scale)")
            ax.xaxis.set_tick_params(labelbottom=True)
    for row in axes:
        row[0].set_ylabel("requests/s per GPU (log scale)")

    handles: dict[str, Any] = {}
    for ax in flat[: len(facets)]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    ordered = [m for m in shown if m in handles]
    legend_title = (
        f"model: top {len(shown)} of {len(model_names)}\nby peak requests/s per GPU"
        if cut
        else "model"
    )
    fig.legend(
        [handles[m] for m in ordered],
        ordered,
        loc="outside right center",
        title=legend_title,
        frameon=False,
        ncols=legend_cols,
        fontsize=9 if len(ordered) <= 24 else 8,
    )
    if title is None:
        title = "Best valid P/D plan: requests/s per GPU vs GPU budget"
        shared = []
        if len(gpu_names) == 1 and len(facets) > 1:
            shared.append(f"GPU: {gpu_names[0]}")
        if same:
            shared.append(_workload_label(workloads[0], same))
        if len(connector_names) == 1:
            shared.append(f"connector: {connector_names[0]}")
        if cut:
            shared.append(f"top {len(shown)} of {len(model_names)} models by peak")
        if shared:
            title += "\n" + "; ".join(shared)
    fig.suptitle(title, fontsize=12)
    _save(fig, path)
    return fig


def pairs_grid(
    model: Any, connector: str, sizes: Sequence[int], *, max_acks: int | None = None
) -> list[list[str]]:
    """``grid[i][j]``: the state of (prefill ``sizes[i]``, decode ``sizes[j]``): ``valid``,
    ``valid_warning`` or the code of the first violated rule."""
    from .check import check, model_shape

    shape = model_shape(model)
    out = []
    for p in sizes:
        row = []
        for d in sizes:
            r = check(shape, p, d, connector=connector, max_acks=max_acks, alternatives=0)
            if r.violations:
                row.append(r.violations[0].code)
            else:
                row.append(_WARN if r.warnings else _VALID)
        out.append(row)
    return out


def pairs_chart(
    models: Any = PAIR_MODELS,
    connectors: Iterable[str] = VENDOR_DEFAULTS,
    path: str | os.PathLike[str] | None = None,
    *,
    max_tp: int = 8,
    sizes: Sequence[int] | None = None,
    max_acks: int | None = None,
    title: str | None = None,
) -> Any:
    """A heatmap per model (columns) and connector (rows) over (prefill TP, decode TP): each
    cell valid, valid with a warning, or the code of the first rule vLLM rejects it with.
    A connector ``"name@X.Y.Z"`` is that vLLM release's rules (default: the newest).
    Returns the matplotlib Figure."""
    if path is not None:
        _chart_suffix(path)
    plt = _matplotlib()
    listed_colormap = importlib.import_module("matplotlib.colors").ListedColormap
    patch = importlib.import_module("matplotlib.patches").Patch

    from .catalog import resolve_model
    from .check import model_shape
    from .connectors import resolve_connector

    ms = [resolve_model(m) for m in ([models] if isinstance(models, str) else list(models))]
    # "nixl@0.13.0" keeps its release (one row per release compares them); a bare name is
    # the newest release's rules.
    cs = [
        (lambda conn: conn.key if isinstance(c, str) and "@" in c else conn.name)(
            resolve_connector(c)
        )
        for c in ([connectors] if isinstance(connectors, str) else connectors)
    ]
    if not ms or not cs:
        raise InvalidArgumentError("give at least one model and one connector")
    if sizes:
        tps = sorted(set(sizes))
    else:
        # Sizes that load at least one of the models (others would be all grey).
        loadable = {int(t) for m in ms for t in loadable_tp_sizes(m, max(1, max_tp))}
        tps = sorted(loadable) or list(range(1, max_tp + 1))
    states = list(_CELLS)
    grids = {(m.name, c): pairs_grid(m, c, tps, max_acks=max_acks) for m in ms for c in cs}
    extra = sorted({s for g in grids.values() for row in g for s in row} - set(states))
    states += extra
    colors = [_CELLS.get(s, _OTHER)[1] for s in states]
    cmap = listed_colormap(colors)
    cell = 0.5 if len(tps) <= 8 else 0.32
    side = len(tps) * cell + 0.7
    fig, axes = plt.subplots(
        len(cs),
        len(ms),
        figsize=(side * len(ms) + 0.8, side * len(cs) + 1.6),
        squeeze=False,
        layout="constrained",
    )
    used: set[str] = set()
    for i, c in enumerate(cs):
        for j, m in enumerate(ms):
            ax = axes[i][j]
            grid = grids[(m.name, c)]
            idx = [[states.index(s) for s in row] for row in grid]
            ax.imshow(idx, cmap=cmap, vmin=-0.5, vmax=len(states) - 0.5, origin="lower")
            for a, row in enumerate(grid):
                for b, s in enumerate(row):
                    used.add(s)
                    ax.text(
                        b,
                        a,
                        _CELLS.get(s, _OTHER)[0],
                        ha="center",
                        va="center",
                        fontsize=8 if len(tps) <= 8 else 5.5,
                        color="#1b1b1b",
                    )
            ax.set_xticks(range(len(tps)), [str(t) for t in tps], fontsize=8)
            ax.set_yticks(range(len(tps)), [str(t) for t in tps], fontsize=8)
            ax.set_xticks([x - 0.5 for x in range(1, len(tps))], minor=True)
            ax.set_yticks([y - 0.5 for y in range(1, len(tps))], minor=True)
            ax.grid(which="minor", color="white", linewidth=1.5)
            ax.tick_params(which="minor", length=0)
            if i == 0:
                shape = model_shape(m)
                kind = "MLA" if shape.is_mla else f"{shape.num_kv_heads} KV heads"
                ax.set_title(
                    f"{m.name}\n{shape.num_attention_heads} heads, {kind}",
                    fontsize=9.5,
                )
            if i == len(cs) - 1:
                ax.set_xlabel("decode TP", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"connector: {c}\n\nprefill TP", fontsize=9.5)
    legend = [
        patch(
            facecolor=_CELLS.get(s, _OTHER)[1],
            label=f"{_CELLS.get(s, _OTHER)[0]}: {_CELLS.get(s, _OTHER)[2] if s in _CELLS else s}",
        )
        for s in states
        if s in used
    ]
    fig.legend(
        handles=legend,
        loc="outside lower center",
        ncols=2 if len(ms) >= 2 else 1,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        title or "Which (prefill TP, decode TP) pairs vLLM accepts, and the rule each other breaks",
        fontsize=11,
    )
    _save(fig, path)
    return fig


# ---- the Pareto frontier ----------------------------------------------------------------

_MODE_STYLE = {
    "disagg": {"marker": "o", "color": "C0", "label": "disaggregated (P/D)"},
    "agg": {"marker": "s", "color": "C3", "label": "aggregated"},
}


def pareto_chart(
    data: Any, path: str | os.PathLike[str] | None = None, *, title: str | None = None
) -> Any:
    """Draw a :class:`pdtp.Pareto`: tokens/s per GPU against tokens/s per user. The valid
    frontier is the solid line (a point per TPOT target on it, marked by mode and labelled
    with its instances), the other targets' plans small grey dots, and the rule-blind
    frontier (what ignoring the connector's pair rules would promise) a faint dashed line
    behind: the gap between the two lines is what the rules cost."""
    from .planning.pareto import Pareto

    if not isinstance(data, Pareto):
        raise ArgumentTypeError(f"pareto_chart draws a pdtp.Pareto, got {type(data).__name__}")
    if path is not None:
        _chart_suffix(path)
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(8.0, 5.2))
    blind = data.rule_blind
    if blind:
        ax.plot(
            [p.tokens_per_s_per_user for p in blind],
            [p.tokens_per_s_per_gpu for p in blind],
            linestyle="--",
            color="0.6",
            alpha=0.45,
            linewidth=1.4,
            zorder=1,
            label="rule-blind frontier (ignores the connector's pair rules)",
        )
    on_front = {id(p) for p in data.frontier}
    rest = [p for p in data.points if id(p) not in on_front]
    if rest:
        ax.scatter(
            [p.tokens_per_s_per_user for p in rest],
            [p.tokens_per_s_per_gpu for p in rest],
            s=10,
            color="0.7",
            zorder=2,
            label="dominated plans",
        )
    front = data.frontier
    ax.plot(
        [p.tokens_per_s_per_user for p in front],
        [p.tokens_per_s_per_gpu for p in front],
        color="0.2",
        linewidth=1.6,
        zorder=3,
        label="valid frontier",
    )
    for mode, style in _MODE_STYLE.items():
        pts = [p for p in front if p.serving == mode]
        if pts:
            ax.scatter(
                [p.tokens_per_s_per_user for p in pts],
                [p.tokens_per_s_per_gpu for p in pts],
                marker=style["marker"],
                color=style["color"],
                s=36,
                zorder=4,
                label=style["label"],
            )
    for p in front:
        ax.annotate(
            p.summary.replace("aggregated", "agg"),
            (p.tokens_per_s_per_user, p.tokens_per_s_per_gpu),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=6.5,
            color="0.25",
        )
    ax.set_xlabel("output tokens/s per user (1000 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper right", frameon=False)
    ax.set_title(
        title or f"{data.model} on {data.gpu} ({data.connector}): throughput vs interactivity",
        fontsize=10,
    )
    fig.tight_layout()
    _save(fig, path)
    return fig


# ---- `pdtp plot` --------------------------------------------------------------------------


def latency_chart(
    target: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    rates: Sequence[float] | None = None,
    workload: Any = None,
    requests: int = 4000,
    seed: int = 0,
    title: str | None = None,
) -> Any:
    """Simulated TTFT and TPOT (p50, p90, p99) against the request rate, one panel each,
    with the SLOs as horizontal lines. ``target``: a :class:`pdtp.Plan`, a ``pdtp solve
    --json`` dict or a :func:`pdtp.sim_config`; ``workload`` defaults to the plan's.
    ``rates`` (requests/s) default to twelve from 10% to 125% of the rate at which the p90s
    stop meeting the SLOs (:func:`pdtp.max_rate_within_slo`), which is marked, as is the
    plan's analytic capacity. Returns the matplotlib Figure."""
    from .simulate import max_rate_within_slo, simulate

    plt = _matplotlib()
    capacity = getattr(target, "requests_per_s", None)
    if capacity is None and isinstance(target, dict):
        capacity = target.get("requests_per_s")
    knee = None
    if rates is None:
        search = max_rate_within_slo(target, workload=workload, seed=seed, tolerance=0.02)
        if search.rate_rps > 0:
            knee = search.rate_rps
        top = search.failing_rps if math.isfinite(search.failing_rps) else capacity
        if not top:
            raise InvalidArgumentError("give rates: no SLO rate or plan capacity to scale them")
        rates = [top * (0.1 + 1.15 * i / 11) for i in range(12)]
    rates = sorted(float(r) for r in rates)
    if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise InvalidArgumentError(f"rates must be positive finite numbers, got {rates!r}")
    results = [
        simulate(target, rate_rps=r, workload=workload, requests=requests, seed=seed) for r in rates
    ]
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.4), squeeze=False, layout="constrained")
    styles = (("p50", "-", "#1f77b4"), ("p90", "--", "#d62728"), ("p99", ":", "#9467bd"))
    for ax, metric, label, slo in (
        (axes[0][0], "ttft_ms", "TTFT (ms)", results[0].ttft_slo_ms),
        (axes[0][1], "tpot_ms", "TPOT (ms)", results[0].tpot_slo_ms),
    ):
        for q, ls, color in styles:
            ys = [getattr(getattr(r, metric), q) for r in results]
            ax.plot(rates, ys, ls, color=color, marker="o", markersize=3, label=q)
        if slo is not None:
            ax.axhline(slo, color="black", linewidth=1.2, label=f"SLO {slo:g} ms")
        if knee is not None:
            ax.axvline(knee, color="#2ca02c", linewidth=1, alpha=0.8, label="p90 meets SLOs up to")
        if capacity:
            ax.axvline(capacity, color="gray", linestyle="-.", linewidth=1, label="analytic plan")
        ax.set_xlabel("request rate (req/s, Poisson)")
        ax.set_ylabel(label)
        if metric == "ttft_ms":
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    if title is None:
        cfg = results[0]
        name = getattr(target, "model", None) or (
            target.get("model") if isinstance(target, dict) else ""
        )
        title = f"Simulated latency vs request rate{f' — {name}' if name else ''}"
        title += f"\n{cfg.requests} requests per rate, seed {seed}"
    fig.suptitle(title, fontsize=12)
    _save(fig, path)
    return fig


def cli_main(args: Any) -> int:
    from .sweeps import parse_ints, parse_names

    def names(text: str | None, default: Sequence[str]) -> list[str]:
        if not text:
            return list(default)
        v = parse_names(text)
        return [v] if isinstance(v, str) else list(v)

    _chart_suffix(args.output)
    if args.max_tp is not None and args.max_tp < 1:
        raise InvalidArgumentError(f"max_tp must be a positive integer (>= 1), got {args.max_tp}")
    plt = _matplotlib()
    if args.chart == "throughput":
        everything = (args.models or "").strip().lower() == "all"
        chosen = names(args.models, ()) if args.models and not everything else None
        # A file is plotted whole unless filtered; a new sweep needs its GPU types and connector.
        gpus = names(args.gpu, ["mi300x"]) if args.gpu or not args.input else None
        # No connector named: the sweep takes each GPU's vendor default (moriio/nixl).
        connectors = names(args.connector, ()) if args.connector else None
        top = args.top if args.top is not None else (0 if everything else TOP_MODELS)
        if args.input:
            data: Any = args.input
        else:
            from .catalog import models as catalog_models
            from .sweeps import sweep

            swept = chosen or (
                [m.name for m in catalog_models()] if everything else list(DEFAULT_MODELS)
            )
            data = sweep(
                swept,
                gpus=parse_ints(args.gpus or "1-512"),
                gpu=gpus,
                connector=connectors,
                max_tp=args.max_tp,
                as_frame=False,
            )
        fig = throughput_chart(
            data,
            args.output,
            models=chosen,
            gpu=gpus,
            connector=connectors,
            top=top or None,
            title=args.title,
        )
    elif args.chart == "pareto":
        from .planning.pareto import pareto

        model = names(args.models, ())
        gpu = names(args.gpu, ["mi300x"])
        connector = names(args.connector, [NO_GPU_CONNECTOR])
        if len(model) != 1 or len(gpu) != 1 or len(connector) != 1:
            raise InvalidArgumentError(
                "a pareto chart is one model on one GPU type and connector: give --models "
                "NAME, and at most one --gpu and --connector"
            )
        targets = None
        if args.tpot_targets:
            try:
                targets = [float(t) for t in args.tpot_targets.split(",") if t.strip()]
            except ValueError:
                raise InvalidArgumentError(
                    f"tpot_targets must be numbers in ms, e.g. 10,20,50, got {args.tpot_targets!r}"
                ) from None
        budget = parse_ints(args.gpus or "16")
        if len(budget) != 1:
            raise InvalidArgumentError("a pareto chart takes one --gpus budget, e.g. --gpus 16")
        front = pareto(
            model[0],
            gpus=budget[0],
            gpu=gpu[0],
            connector=connector[0],
            tpot_ms=targets,
            mode=args.mode,
            layouts=args.layouts,
            max_tp=args.max_tp,
        )
        fig = pareto_chart(front, args.output, title=args.title)
    else:
        fig = pairs_chart(
            names(args.models, PAIR_MODELS),
            names(args.connector, list(VENDOR_DEFAULTS)),
            args.output,
            max_tp=args.max_tp or 8,
            title=args.title,
        )
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0
