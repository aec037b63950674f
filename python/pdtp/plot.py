"""Charts (``pdtp[plot]``: matplotlib; PNG or SVG by the file's extension).

* :func:`throughput_chart`: requests/s per GPU against the GPU budget, one line per model,
  one panel per GPU type — from :func:`pdtp.sweep` rows.
* :func:`pairs_chart`: for each model and connector, every (prefill TP, decode TP) pair:
  valid, valid with a warning, or the code of the first rule vLLM would reject it with.
* :func:`latency_chart`: simulated TTFT and TPOT percentiles of a deployment against the
  request rate, with the SLO lines (:func:`pdtp.simulate`).
"""

from __future__ import annotations

import importlib
import math
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

from . import _core
from .errors import InvalidArgumentError

__all__ = [
    "DEFAULT_MODELS",
    "PAIR_MODELS",
    "latency_chart",
    "pairs_chart",
    "pairs_grid",
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


def _save(fig: Any, path: str | os.PathLike[str] | None) -> None:
    if path is None:
        return
    p = pathlib.Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise InvalidArgumentError(f"chart file must end in .png or .svg, got {str(path)!r}")
    p.parent.mkdir(parents=True, exist_ok=True)
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


def throughput_chart(
    data: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    models: Sequence[str] | None = None,
    gpu: str | Sequence[str] | None = None,
    connector: str | None = None,
    title: str | None = None,
) -> Any:
    """Requests/s per budgeted GPU against the GPU budget (log-log), one line per model and
    one panel per GPU type. ``data``: :func:`pdtp.sweep` rows (DataFrame, dicts or a file).
    Budgets a model cannot serve leave a gap. Returns the matplotlib Figure."""
    plt = _matplotlib()
    rows = _rows(data)
    if connector is not None:
        rows = [r for r in rows if r["connector"] == connector]
    gpus_wanted = [gpu] if isinstance(gpu, str) else list(gpu) if gpu else None
    if gpus_wanted is not None:
        rows = [r for r in rows if r["gpu"] in gpus_wanted]
    if models is not None:
        rows = [r for r in rows if r["model"] in set(models)]
    if not rows:
        raise InvalidArgumentError("no sweep rows to plot (check models / gpu / connector)")
    gpu_names = gpus_wanted or sorted({r["gpu"] for r in rows})
    gpu_names = [g for g in gpu_names if any(r["gpu"] == g for r in rows)]
    model_names = list(models) if models else sorted({r["model"] for r in rows})
    model_names = [m for m in model_names if any(r["model"] == m for r in rows)]
    workloads = {(r["isl"], r["osl"], r["slo_ttft_ms"], r["slo_tpot_ms"]) for r in rows}
    connectors = sorted({r["connector"] for r in rows})

    n = len(gpu_names)
    fig, axes = plt.subplots(
        1, n, figsize=(5.2 * n + 2.6, 4.6), sharey=True, squeeze=False, layout="constrained"
    )
    cmap = plt.get_cmap("tab10" if len(model_names) <= 10 else "tab20")
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in rows:
        series.setdefault((r["gpu"], r["model"]), []).append(
            (
                int(r["gpus"]),
                math.nan if _missing(r["requests_per_s"]) else r["requests_per_s"] / r["gpus"],
            )
        )
    budgets_all = sorted({int(r["gpus"]) for r in rows})
    for ax, gname in zip(axes[0], gpu_names):
        for i, mname in enumerate(model_names):
            pts = sorted(series.get((gname, mname), []))
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, label=mname, color=cmap(i % cmap.N), linewidth=1.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(gname, fontsize=12, fontweight="bold")
        ax.set_xlabel("GPU budget (GPUs, log scale)")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        if budgets_all:
            lo, hi = budgets_all[0], budgets_all[-1]
            ticks = [2**k for k in range(20) if lo <= 2**k <= hi]
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlim(lo, hi)
    axes[0][0].set_ylabel("requests/s per GPU (log scale)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="outside right center", title="model", frameon=False)
    if title is None:
        title = "Best valid P/D plan: requests/s per GPU vs GPU budget"
        if len(workloads) == 1:
            isl, osl, ttft, tpot = next(iter(workloads))
            slo = ", ".join(
                f"{k} ≤ {v:g} ms" for k, v in (("TTFT", ttft), ("TPOT", tpot)) if not _missing(v)
            )
            title += f"\nisl={isl}, osl={osl}" + (f", {slo}" if slo else "")
        title += f"; connector: {', '.join(connectors)}"
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
    connectors: Iterable[str] = ("moriio", "nixl"),
    path: str | os.PathLike[str] | None = None,
    *,
    max_tp: int = 8,
    sizes: Sequence[int] | None = None,
    max_acks: int | None = None,
    title: str | None = None,
) -> Any:
    """A heatmap per model (columns) and connector (rows) over (prefill TP, decode TP): each
    cell valid, valid with a warning, or the code of the first rule vLLM rejects it with.
    Returns the matplotlib Figure."""
    plt = _matplotlib()
    listed_colormap = importlib.import_module("matplotlib.colors").ListedColormap
    patch = importlib.import_module("matplotlib.patches").Patch

    from .catalog import resolve_model
    from .check import model_shape
    from .connectors import resolve_connector

    ms = [resolve_model(m) for m in ([models] if isinstance(models, str) else list(models))]
    cs = [
        resolve_connector(c).name
        for c in ([connectors] if isinstance(connectors, str) else connectors)
    ]
    if not ms or not cs:
        raise InvalidArgumentError("give at least one model and one connector")
    if sizes:
        tps = sorted(set(sizes))
    else:
        # Sizes that load at least one of the models (others would be all grey).
        loadable = {
            int(t)
            for m in ms
            for t in _core.loadable_sizes(
                m.num_attention_heads, m.num_kv_heads, m.is_mla, max(1, max_tp)
            )
        }
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

    plt = _matplotlib()
    if args.chart == "throughput":
        models = names(args.models, DEFAULT_MODELS)
        gpus = names(args.gpu, ["mi300x"])
        connector = names(args.connector, ["moriio"])
        if args.input:
            data: Any = args.input
        else:
            from .sweeps import sweep

            if args.models and args.models.strip().lower() == "all":
                models = [m.name for m in importlib.import_module("pdtp.catalog").models()]
            data = sweep(
                models,
                gpus=parse_ints(args.gpus or "1-512"),
                gpu=gpus,
                connector=connector[0],
                max_tp=args.max_tp,
                as_frame=False,
            )
        fig = throughput_chart(
            data,
            args.output,
            models=None if args.input and not args.models else models,
            gpu=gpus if (args.gpu or not args.input) else None,
            connector=connector[0] if (args.connector or not args.input) else None,
            title=args.title,
        )
    else:
        fig = pairs_chart(
            names(args.models, PAIR_MODELS),
            names(args.connector, ["moriio", "nixl"]),
            args.output,
            max_tp=args.max_tp or 8,
            title=args.title,
        )
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0
