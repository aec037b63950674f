"""The ``pdtp`` command line (also ``python -m pdtp``).

Human-readable tables by default, ``--json`` for machines. Exit codes: 0 = valid / success,
1 = invalid pair or infeasible plan, 2 = usage error (bad flags or values).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ._table import ranges, table
from .errors import PdtpError

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

EPILOG = """\
examples:
  pdtp solve llama-3.1-70b --gpus 24
  pdtp solve deepseek-v3 --gpus 64 --gpu h200 --connector nixl --tpot 30 --json
  pdtp models
  pdtp check --heads 64 --kv-heads 8 --prefill-tp 4 --decode-tp 8
  pdtp check --config ./Llama-3.1-70B/config.json --prefill-tp 8 --decode-tp 8 --json
  pdtp map --kv-heads 4 --prefill-tp 4 --decode-tp 8 --connector nixl

exit codes: 0 valid, 1 invalid, 2 usage error
"""


def _add_model_flags(p: argparse.ArgumentParser, *, need_heads: bool = True) -> None:
    g = p.add_argument_group("model (give a catalog name, a config, or the head counts)")
    g.add_argument("--model", metavar="NAME", help="catalog name or HF id, e.g. llama-3.1-70b")
    g.add_argument("--config", metavar="PATH", help="HF config.json (or a model folder)")
    if need_heads:
        g.add_argument("--heads", type=int, metavar="A", help="total attention heads")
    g.add_argument("--kv-heads", type=int, metavar="H", help="total KV heads")
    g.add_argument(
        "--mla", action="store_true", help="the model uses MLA (DeepSeek-V3, Kimi-K2 ...)"
    )


def _add_workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--isl", type=int, default=2048, help="prompt tokens (default 2048)")
    g.add_argument("--osl", type=int, default=512, help="output tokens (default 512)")
    g.add_argument(
        "--ttft", type=_slo, default=2000.0, metavar="MS",
        help="TTFT bound in ms or 'none' (default 2000)",
    )  # fmt: skip
    g.add_argument(
        "--tpot", type=_slo, default=50.0, metavar="MS",
        help="TPOT bound in ms or 'none' (default 50)",
    )  # fmt: skip


def _add_pair_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prefill-tp", "-P", type=int, required=True, metavar="P", help="prefill TP size"
    )
    p.add_argument("--decode-tp", "-D", type=int, required=True, metavar="D", help="decode TP size")
    p.add_argument(
        "--connector",
        default="moriio",
        help=(
            "KV connector: moriio (MoRIIO READ mode, default), moriio-write (MoRIIO WRITE "
            "mode), nixl, nixl-legacy (NIXL before vLLM 0.14.0)"
        ),
    )
    p.add_argument(
        "--vllm-version",
        metavar="X.Y.Z",
        help=(
            "the vLLM release whose rules apply (default: the newest pdtp knows; a newer one "
            "uses the newest known rules)"
        ),
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdtp",
        description=(
            "Plan vLLM prefill/decode disaggregated deployments before loading any weights: "
            "find the throughput-optimal valid split of a GPU budget (solve), check that a "
            "prefill/decode tensor-parallel pair is one vLLM's KV connector accepts (check), "
            "see who reads from whom (map), and sweep whole catalogs (sweep, plot)."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser(
        "check",
        help="is this P/D pair valid for the model and connector?",
        description=(
            "Check a (prefill TP, decode TP) pair against vLLM's rules: model loading, the "
            "connector's size rule and (MoRIIO) the replicated-KV-head guard. Prints every "
            "violation with vLLM's exact message, a hint, warnings and the nearest valid pairs."
        ),
        epilog="example: pdtp check --heads 64 --kv-heads 8 --prefill-tp 4 --decode-tp 8",
    )
    _add_model_flags(c)
    _add_pair_flags(c)
    c.add_argument("--max-acks", type=int, metavar="K", help="cap on release acks per prefill rank")
    c.add_argument("--max-tp", type=int, metavar="T", help="largest TP size to propose instead")
    c.add_argument(
        "--gpu",
        help="also check that each side fits in this GPU's memory (needs --model or --config)",
    )
    c.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F")

    s = sub.add_parser(
        "solve",
        help="the throughput-optimal valid P/D split for a GPU budget",
        description=(
            "Find the prefill/decode split (TP size x instances per side) that serves the most "
            "requests/s on --gpus GPUs while vLLM accepts it, the model fits and the SLOs hold. "
            "Prints the plan, predicted numbers, the bottleneck, why a better-looking split was "
            "rejected, and one `vllm serve` line per instance."
        ),
        epilog=(
            "examples:\n  pdtp solve llama-3.1-70b --gpus 24\n"
            "  pdtp solve meta-llama/Llama-3.1-8B-Instruct --gpus 8 --gpu h100 --connector nixl\n"
            "  pdtp solve --config ./my-model/config.json --gpus 16 --tpot none --json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("model", nargs="?", help="catalog name or HF id (see `pdtp models`)")
    s.add_argument(
        "--config", metavar="PATH", help="HF config.json or model folder instead of MODEL"
    )
    s.add_argument("--gpus", type=int, required=True, help="GPU budget")
    s.add_argument("--gpu", default="mi300x", help="GPU type (see `pdtp gpus`; default mi300x)")
    s.add_argument("--connector", default="moriio", help="moriio (default), nixl, nixl-legacy")
    _add_workload_flags(s)
    o = s.add_argument_group("options")
    o.add_argument(
        "--weight-dtype", help="serve weights as bf16, fp8, fp4 ... (default: the checkpoint's)"
    )
    o.add_argument("--kv-dtype", help="KV-cache dtype: bf16 (default) or fp8")
    o.add_argument("--max-tp", type=int, help="largest TP size (default: GPUs per node)")
    o.add_argument("--max-acks", type=int, help="cap on release acks per prefill rank")
    o.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F")
    o.add_argument("--method", choices=["cpsat", "enumerate"], default="cpsat")
    o.add_argument(
        "--time-limit", type=float, default=10.0, metavar="S", help="seconds (default 10)"
    )
    o.add_argument("--no-commands", action="store_true", help="omit the vllm serve lines")
    o.add_argument("--json", action="store_true", help="print JSON instead of text")

    z = sub.add_parser(
        "size-for",
        help="the fewest GPUs that serve a demand (autoscaler sizing)",
        description=(
            "The plan with the fewest GPUs that serves --demand requests/s within the SLOs, "
            "at most --max-gpus (ties: most headroom)."
        ),
        epilog="example: pdtp size-for llama-3.1-70b --demand 25 --max-gpus 64 --gpu h100",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    z.add_argument("model", nargs="?", help="catalog name or HF id (see `pdtp models`)")
    z.add_argument("--config", metavar="PATH", help="HF config.json or model folder instead")
    z.add_argument("--demand", type=float, required=True, metavar="RPS", help="requests/s to serve")
    z.add_argument("--max-gpus", type=int, required=True, help="GPU budget ceiling")
    z.add_argument("--gpu", default="mi300x", help="GPU type (default mi300x)")
    z.add_argument("--connector", default="moriio", help="moriio (default), nixl, nixl-legacy")
    _add_workload_flags(z)
    z.add_argument("--weight-dtype", help="serve weights as bf16, fp8, fp4 ...")
    z.add_argument("--kv-dtype", help="KV-cache dtype: bf16 (default) or fp8")
    z.add_argument("--max-tp", type=int, help="largest TP size (default: GPUs per node)")
    z.add_argument("--max-acks", type=int, help="cap on release acks per prefill rank")
    z.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F")
    z.add_argument("--no-commands", action="store_true", help="omit the vllm serve lines")
    z.add_argument("--json", action="store_true", help="print JSON instead of text")

    r = sub.add_parser(
        "replan",
        help="re-plan a running deployment for a new demand with the fewest moves",
        description=(
            "Given the current deployment (a `pdtp solve --json` output or a JSON dict with "
            "model, gpu, prefill {tp, instances}, decode {tp, instances}), find a plan that "
            "serves --demand within --max-gpus while starting and stopping the fewest GPUs."
        ),
        epilog=(
            "examples:\n  pdtp solve llama-3.1-70b --gpus 16 --json > now.json\n"
            "  pdtp replan --current now.json --demand 30 --max-gpus 64\n"
            "  cat now.json | pdtp replan --current - --demand 5 --max-gpus 64 "
            "--move-cost start=1,stop=1,gpu=1"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--current", required=True, metavar="FILE", help="JSON file, or - for stdin")
    r.add_argument("--demand", type=float, required=True, metavar="RPS", help="requests/s to serve")
    r.add_argument("--max-gpus", type=int, required=True, help="GPU budget ceiling")
    r.add_argument("--gpu", help="GPU type (default: the current plan's)")
    r.add_argument("--connector", help="connector (default: the current plan's)")
    r.add_argument("--move-cost", metavar="K=V,...", help="weights: start, stop, restart, gpu")
    r.add_argument("--no-commands", action="store_true", help="omit the vllm serve lines")
    r.add_argument("--json", action="store_true", help="print JSON instead of text")

    f = sub.add_parser(
        "fleet",
        help="share one GPU pool among many models (CP-SAT, node placement)",
        description=(
            "Split --gpus GPUs (nodes of --gpus-per-node) among the models of a CSV "
            "(columns model,demand_rps[,weight,isl,osl,ttft_ms,tpot_ms]), every instance inside "
            "one node, maximising the minimum served fraction of demand (or the weighted total)."
        ),
        epilog="example: pdtp fleet --demands demands.csv --gpus 512 --gpu mi300x",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    f.add_argument("--demands", required=True, metavar="CSV", help="model,demand_rps[,weight,...]")
    f.add_argument("--gpus", type=int, required=True, help="GPUs in the pool")
    f.add_argument("--gpu", default="mi300x", help="GPU type (default mi300x)")
    f.add_argument("--gpus-per-node", type=int, default=8)
    f.add_argument("--objective", choices=["max_min", "weighted"], default="max_min")
    f.add_argument("--connector", default="moriio")
    f.add_argument("--time-limit", type=float, default=10.0, metavar="S")
    f.add_argument("--json", action="store_true", help="print JSON instead of a table")

    sub.add_parser("models", help="list the built-in model catalog").add_argument(
        "--json", action="store_true"
    )
    sub.add_parser("gpus", help="list the built-in GPU catalog").add_argument(
        "--json", action="store_true"
    )

    sw = sub.add_parser(
        "sweep",
        help="best plans for a grid of models x GPU types x workloads x budgets",
        description=(
            "Solve every scenario of a grid (the product of models, GPU types, workloads, "
            "connectors and GPU budgets) exactly, fast, on every core. The grid comes from "
            "flags or a YAML/TOML file (flags override its keys). Rows go to --output by "
            "extension (.csv, .parquet, .jsonl); rerunning with the same file skips finished "
            "scenarios. Without --output, CSV (or JSON Lines with --json) goes to stdout."
        ),
        epilog=(
            "examples:\n  pdtp sweep --models all --gpus 1-512 --gpu mi300x,h200 -o sweep.csv\n"
            "  pdtp sweep --models llama-3.1-70b,deepseek-v3 --gpus 8-64:8 --isl 1024,8192 "
            "--connector moriio,nixl -o s.parquet\n"
            "  pdtp sweep grid.yaml --workers 4\n\n"
            "grid file keys: models, gpus, gpu, workloads (list of {isl, osl, ttft_ms, "
            "tpot_ms}) or isl, osl, ttft_ms, tpot_ms, connector, max_tp, max_acks, "
            "gpu_memory_utilization, output, workers, backend, chunk_size"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sw.add_argument("grid", nargs="?", metavar="GRID_FILE", help="YAML or TOML grid file")
    sw.add_argument("--models", help="all (default) or names a,b,...")
    sw.add_argument("--gpus", help="GPU budgets: 1-512, 8,16,32 or 8-64:8 (a step)")
    sw.add_argument("--gpu", help="GPU types: mi300x (default), a list h200,mi300x, or all")
    sw.add_argument("--isl", help="prompt tokens, one or a list (default 2048)")
    sw.add_argument("--osl", help="output tokens, one or a list (default 512)")
    sw.add_argument("--ttft", metavar="MS", help="TTFT bounds in ms or none (default 2000)")
    sw.add_argument("--tpot", metavar="MS", help="TPOT bounds in ms or none (default 50)")
    sw.add_argument("--connector", help="moriio (default), nixl, nixl-legacy, or a list")
    sw.add_argument("--max-tp", type=int, help="largest TP size (default: GPUs per node)")
    sw.add_argument("--max-acks", type=int, help="cap on release acks per prefill rank")
    sw.add_argument("--gpu-memory-utilization", type=float, metavar="F")
    sw.add_argument("-o", "--output", metavar="FILE", help=".csv, .parquet or .jsonl")
    sw.add_argument("--workers", type=int, help="processes (default: every core)")
    sw.add_argument("--backend", choices=["local", "ray"], help="local (default) or ray")
    sw.add_argument("--chunk-size", type=int, metavar="N", help="scenarios per chunk/flush")
    sw.add_argument("--json", action="store_true", help="JSON Lines on stdout (no --output)")
    sw.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: only on a terminal)",
    )

    pl = sub.add_parser(
        "plot",
        help="charts (PNG/SVG): requests/s per GPU vs budget; valid P/D pairs",
        description=(
            "throughput: requests/s per GPU against the GPU budget, one line per model and a "
            "panel per GPU type (from a `pdtp sweep` file, or sweeps it). pairs: for each "
            "model and connector, which (prefill TP, decode TP) pairs vLLM accepts, and the "
            "rule each other pair breaks. Needs matplotlib (pip install 'pdtp[plot]')."
        ),
        epilog=(
            "examples:\n  pdtp plot throughput -o throughput.png --gpu mi300x,h200\n"
            "  pdtp plot throughput --input sweep.csv -o throughput.svg\n"
            "  pdtp plot pairs --models llama-3.1-70b,deepseek-v3 --connector moriio,nixl "
            "-o pairs.png"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pl.add_argument("chart", choices=["throughput", "pairs"])
    pl.add_argument("-o", "--output", required=True, metavar="FILE", help=".png or .svg")
    pl.add_argument("--input", metavar="FILE", help="throughput: a `pdtp sweep` output file")
    pl.add_argument("--models", help="names a,b,... (default: a representative set)")
    pl.add_argument("--gpu", help="throughput: GPU types (default mi300x)")
    pl.add_argument("--gpus", help="throughput: budgets (default 1-512)")
    pl.add_argument("--connector", help="moriio (default); pairs: a list, e.g. moriio,nixl")
    pl.add_argument("--max-tp", type=int, help="pairs: largest TP size shown (default 8)")
    pl.add_argument("--title", help="chart title")

    m = sub.add_parser(
        "map",
        help="which prefill rank(s) each decode rank reads, and the KV heads moved",
        description=(
            "Print the transfer map of a valid pair: per decode rank the prefill rank(s) it "
            "reads and the KV heads received; per prefill rank its heads, readers and acks."
        ),
        epilog="example: pdtp map --kv-heads 4 --prefill-tp 4 --decode-tp 8",
    )
    _add_model_flags(m, need_heads=False)
    _add_pair_flags(m)
    return parser


class UsageError(Exception):
    pass


def _slo(text: str) -> float | None:
    if text.strip().lower() in ("none", "off", "inf"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds or 'none', got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 ms or 'none', got {text!r}")
    return value


def _shape(args: argparse.Namespace) -> Any:
    from .check import ModelShape, model_shape

    given = [x for x in ("model", "config") if getattr(args, x, None)]
    if len(given) > 1:
        raise UsageError("give only one of --model and --config")
    if given:
        return model_shape(getattr(args, given[0]))
    heads = getattr(args, "heads", None)
    if args.kv_heads is None:
        raise UsageError("give --model NAME, --config PATH, or the head counts (--kv-heads H)")
    if heads is None:
        heads = args.kv_heads  # `map` needs no attention-head count
    return ModelShape(heads, args.kv_heads, args.mla)


def _cmd_check(args: argparse.Namespace) -> int:
    from .check import check

    model = _shape(args)
    if args.gpu:
        if not (args.model or args.config):
            raise UsageError("--gpu needs the whole model: give --model NAME or --config PATH")
        from .catalog import resolve_model

        model = resolve_model(args.model or args.config)
    r = check(
        model,
        args.prefill_tp,
        args.decode_tp,
        connector=args.connector,
        max_acks=args.max_acks,
        max_tp=args.max_tp,
        gpu=args.gpu,
        gpu_memory_utilization=args.gpu_memory_utilization,
        vllm_version=args.vllm_version,
    )
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return EXIT_OK if r.ok else EXIT_INVALID
    from .connectors import resolve_connector

    label = resolve_connector(r.connector, r.vllm_version).label
    print(f"{r.model}: prefill_tp={r.prefill_tp}  decode_tp={r.decode_tp}  connector={label}")
    print("VALID" if r.ok else f"INVALID ({len(r.violations)} violation(s))")
    if r.gpu is not None:
        fit = {True: "fits", False: "does not fit"}
        p_fit, d_fit = fit[bool(r.prefill_fits)], fit[bool(r.decode_fits)]
        print(f"memory on {r.gpu}: prefill {p_fit}, decode {d_fit}")
    for v in r.violations:
        err = f"  [vLLM {v.vllm_error}]" if v.vllm_error else ""
        message = v.message or "(vLLM's assert has no message)"
        print(f"\n  x {v.code} ({v.side}){err}\n    {message}\n    hint: {v.hint}")
    for w in r.warnings:
        print(f"\n  ! {w.code}\n    {w.message}")
    if r.alternatives:
        alts = ", ".join(f"P{p}/D{d}" for p, d in r.alternatives)
        print(f"\nnearest valid pairs: {alts}")
    return EXIT_OK if r.ok else EXIT_INVALID


def _cmd_map(args: argparse.Namespace) -> int:
    from .transfer import transfer_map

    shape = _shape(args)
    tm = transfer_map(
        args.prefill_tp,
        args.decode_tp,
        kv_heads=shape.num_kv_heads,
        is_mla=shape.is_mla,
        connector=args.connector,
        vllm_version=args.vllm_version,
    )
    if args.json:
        print(json.dumps(tm.to_dict(), indent=2))
        return EXIT_OK
    from .connectors import resolve_connector

    kind = "MLA latent" if tm.is_mla else f"{tm.kv_heads} KV heads"
    label = resolve_connector(tm.connector, tm.vllm_version).label
    print(f"P{tm.prefill_tp} -> D{tm.decode_tp}, {kind}, connector={label}\n")
    print(
        table(
            ["decode rank", "holds heads", "reads (prefill rank: heads)"],
            [
                [
                    d.rank,
                    ranges(d.heads),
                    "  ".join(f"{r.prefill_rank}: {ranges(r.heads)}" for r in d.reads),
                ]
                for d in tm.decode
            ],
        )
    )
    print()
    print(
        table(
            ["prefill rank", "holds heads", "KV to decode ranks", "released by", "acks expected"],
            [
                [
                    p.rank,
                    ranges(p.heads),
                    ranges(p.readers) if p.readers else "(none)",
                    "(decode scheduler)"
                    if tm.mode == "write"
                    else (ranges(p.released_by) if p.released_by else "(nobody)"),
                    p.expected_acks,
                ]
                for p in tm.prefill
            ],
        )
    )
    for w in tm.warnings:
        print(f"\n! {w.code}: {w.message}")
    return EXIT_OK


def _solve_model(args: argparse.Namespace) -> Any:
    from .catalog import resolve_model

    if bool(args.model) == bool(args.config):
        raise UsageError("give a MODEL name or --config PATH (one of them)")
    model = resolve_model(args.model or args.config)
    if args.weight_dtype or args.kv_dtype:
        model = model.with_dtypes(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype)
    return model


def _fmt_slo(v: float | None) -> str:
    return "none" if v is None else f"{v:g} ms"


def _workload(args: argparse.Namespace) -> Any:
    from .workload import Workload

    return Workload(isl=args.isl, osl=args.osl, ttft_ms=args.ttft, tpot_ms=args.tpot)


def _print_infeasible(e: Any, as_json: bool) -> int:
    if as_json:
        out = {"status": "INFEASIBLE", "reason": str(e), "reasons": list(e.reasons)}
        print(json.dumps(out, indent=2))
    else:
        print(f"INFEASIBLE: {e}")
        for r in e.reasons[1:]:
            print(f"  - {r}")
    return EXIT_INVALID


def _print_plan(plan: Any, *, commands: bool, header: str = "") -> None:
    w = plan.workload
    print(
        f"{plan.model} on {plan.gpus} x {plan.gpu} ({plan.connector}); isl={w.isl} osl={w.osl} "
        f"ttft<={_fmt_slo(w.ttft_ms)} tpot<={_fmt_slo(w.tpot_ms)}"
    )
    print(header or f"plan: {plan.status} ({plan.method}, {plan.solve_ms:.1f} ms)")
    print()
    rows = [
        ["prefill", plan.prefill.instances, plan.prefill.tp, plan.prefill.gpus,
         f"{plan.prefill_capacity_rps:,.2f}", f"TTFT {plan.ttft_ms:,.0f} ms"],
        ["decode", plan.decode.instances, plan.decode.tp, plan.decode.gpus,
         f"{plan.decode_capacity_rps:,.2f}",
         f"TPOT {plan.tpot_ms:,.1f} ms at batch {plan.decode_batch}"],
    ]  # fmt: skip
    print(
        table(["side", "instances", "tp", "GPUs", "capacity req/s", "latency"], rows, indent="  ")
    )
    print(
        f"\nserves {plan.requests_per_s:,.2f} req/s = {plan.output_tokens_per_s:,.0f} output "
        f"tok/s on {plan.gpus_used} of {plan.gpus} GPUs; bottleneck: {plan.bottleneck}"
    )
    for r in plan.rejected:
        print(f"\nrejected: {r}")
    for wr in plan.warnings:
        print(f"\n! {wr.code}: {wr.message}")
    if commands:
        print("\nlaunch (one line per instance):")
        for line in plan.vllm_commands():
            print(f"  {line}")


def _plan_json(plan: Any, commands: bool) -> dict[str, Any]:
    d: dict[str, Any] = plan.to_dict()
    if commands:
        d["vllm_commands"] = plan.vllm_commands()
    return d


def _emit_plan(make: Any, args: argparse.Namespace, header: str = "") -> int:
    """Run a planner; print its plan (table or JSON) or why nothing fits."""
    from .errors import InfeasibleError

    try:
        plan = make()
    except InfeasibleError as e:
        return _print_infeasible(e, args.json)
    if args.json:
        print(json.dumps(_plan_json(plan, not args.no_commands), indent=2))
    else:
        _print_plan(plan, commands=not args.no_commands, header=header)
    return EXIT_OK


def _cmd_solve(args: argparse.Namespace) -> int:
    from .planner import solve

    return _emit_plan(
        lambda: solve(
            _solve_model(args),
            args.gpus,
            gpu=args.gpu,
            workload=_workload(args),
            connector=args.connector,
            max_tp=args.max_tp,
            max_acks=args.max_acks,
            gpu_memory_utilization=args.gpu_memory_utilization,
            time_limit_s=args.time_limit,
            method=args.method,
        ),
        args,
    )


def _cmd_size_for(args: argparse.Namespace) -> int:
    from .autoscale import size_for

    return _emit_plan(
        lambda: size_for(
            _solve_model(args),
            args.demand,
            max_gpus=args.max_gpus,
            gpu=args.gpu,
            workload=_workload(args),
            connector=args.connector,
            max_tp=args.max_tp,
            max_acks=args.max_acks,
            gpu_memory_utilization=args.gpu_memory_utilization,
        ),
        args,
        header=f"fewest GPUs serving {args.demand:g} req/s (at most {args.max_gpus})",
    )


def _read_json_arg(path: str, what: str) -> Any:
    text = sys.stdin.read() if path == "-" else None
    if text is None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise UsageError(f"{what}: cannot read {path!r}: {e.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{what}: {path!r} is not JSON ({e.msg} at line {e.lineno})") from None


def _cmd_replan(args: argparse.Namespace) -> int:
    from .autoscale import replan
    from .errors import InfeasibleError

    current = _read_json_arg(args.current, "--current")
    move_cost: dict[str, float] = {}
    for item in (args.move_cost or "").split(","):
        if item.strip():
            key, _, value = item.partition("=")
            try:
                move_cost[key.strip()] = float(value)
            except ValueError:
                raise UsageError(f"--move-cost: expected key=number, got {item!r}") from None
    try:
        r = replan(
            current,
            args.demand,
            max_gpus=args.max_gpus,
            gpu=args.gpu,
            connector=args.connector,
            move_cost=move_cost or None,
        )
    except InfeasibleError as e:
        return _print_infeasible(e, args.json)
    if args.json:
        d = r.to_dict()
        if not args.no_commands:
            d["plan"]["vllm_commands"] = r.plan.vllm_commands()
        print(json.dumps(d, indent=2))
        return EXIT_OK
    print(f"replan: {r.summary()}\n")
    _print_plan(r.plan, commands=not args.no_commands, header=f"new plan (move cost {r.cost:g})")
    return EXIT_OK


def _cmd_fleet(args: argparse.Namespace) -> int:
    import csv

    from .fleet import solve_fleet

    try:
        with open(args.demands, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise UsageError(f"--demands: cannot read {args.demands!r}: {e.strerror}") from None
    demands = []
    for i, row in enumerate(rows, start=2):
        try:
            entry: dict[str, Any] = {"model": row["model"], "demand_rps": float(row["demand_rps"])}
            if row.get("weight"):
                entry["weight"] = float(row["weight"])
            wl = {k: row[k] for k in ("isl", "osl", "ttft_ms", "tpot_ms") if row.get(k)}
            if wl:
                entry["workload"] = {
                    k: (int(v) if k in ("isl", "osl") else float(v)) for k, v in wl.items()
                }
        except (KeyError, ValueError) as e:
            raise UsageError(
                f"--demands line {i}: needs columns model,demand_rps[,weight,isl,osl,ttft_ms,"
                f"tpot_ms] with numbers ({e})"
            ) from None
        demands.append(entry)
    fp = solve_fleet(
        demands,
        gpus=args.gpus,
        gpu=args.gpu,
        gpus_per_node=args.gpus_per_node,
        objective=args.objective,
        time_limit_s=args.time_limit,
        connector=args.connector,
    )
    if args.json:
        print(json.dumps(fp.to_dict(), indent=2))
        return EXIT_OK
    from .catalog import resolve_model

    head = f"fleet on {args.gpus} x {args.gpu}: {fp.status} (gap {fp.gap:.2%})"
    print(f"{head}, {fp.gpus_used} GPUs used\n")
    out = []
    for d in demands:
        name = resolve_model(d["model"]).name
        plan, frac = fp.plans.get(name), fp.served_fraction.get(name, 0.0)
        cells = ["-", "-", "-"]
        if plan is not None:
            cells = [
                f"{plan.prefill.instances}xP{plan.prefill.tp}",
                f"{plan.decode.instances}xD{plan.decode.tp}",
                str(plan.gpus_used),
            ]
        out.append([name, f"{d['demand_rps']:g}", *cells, f"{frac:.0%}"])
    print(table(["model", "demand req/s", "prefill", "decode", "GPUs", "served"], out, indent="  "))
    return EXIT_OK


def _cmd_models(args: argparse.Namespace) -> int:
    from .catalog import models

    ms = models()
    if args.json:
        print(json.dumps([m.to_dict() for m in ms], indent=2))
        return EXIT_OK
    print(
        table(
            [
                "name",
                "attn",
                "layers",
                "heads/kv",
                "params (B)",
                "active (B)",
                "weights",
                "KV B/token",
                "HF id",
            ],
            [
                [
                    m.name,
                    m.attention_type,
                    m.num_layers,
                    f"{m.num_attention_heads}/{m.num_kv_heads}",
                    f"{m.total_params / 1e9:,.1f}",
                    f"{m.active_params / 1e9:,.1f}",
                    m.weight_dtype,
                    f"{m.kv_bytes_per_token:,}",
                    m.hf_id or "-",
                ]
                for m in ms
            ],
        )
    )
    return EXIT_OK


def _cmd_gpus(args: argparse.Namespace) -> int:
    from .catalog import gpus

    gs = gpus()
    if args.json:
        print(json.dumps([g.to_dict() for g in gs], indent=2))
        return EXIT_OK

    def tf(x: float | None) -> str:
        return "-" if not x else f"{x / 1e12:,.0f}"

    print(
        table(
            [
                "name",
                "vendor",
                "memory GiB",
                "HBM TB/s",
                "bf16 TF",
                "fp8 TF",
                "fp4 TF",
                "link GB/s",
                "per node",
            ],
            [
                [
                    g.name,
                    g.vendor,
                    f"{g.memory_bytes / 2**30:,.0f}",
                    f"{g.hbm_bandwidth / 1e12:.2f}",
                    tf(g.bf16_flops),
                    tf(g.fp8_flops),
                    tf(g.fp4_flops),
                    f"{g.link_bandwidth / 1e9:,.0f}",
                    g.gpus_per_node,
                ]
                for g in gs
            ],
        )
    )
    return EXIT_OK


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweeps import cli_main

    return cli_main(args)


def _cmd_plot(args: argparse.Namespace) -> int:
    from .plot import cli_main

    return cli_main(args)


COMMANDS = {
    "size-for": _cmd_size_for,
    "replan": _cmd_replan,
    "fleet": _cmd_fleet,
    "check": _cmd_check,
    "map": _cmd_map,
    "solve": _cmd_solve,
    "models": _cmd_models,
    "gpus": _cmd_gpus,
    "sweep": _cmd_sweep,
    "plot": _cmd_plot,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        parser.error(str(e))  # exits 2
    except (PdtpError, TypeError, ValueError, OverflowError) as e:
        # Rule errors from `map` (an invalid pair) are a "no", not a usage mistake.
        from .errors import (
            RuleAssertionError,
            RuleConnectorError,
            RuleNotImplementedError,
            RuleValueError,
            RuleZeroDivisionError,
            UnworkablePairError,
        )

        rule_errors = (
            RuleValueError,
            RuleNotImplementedError,
            RuleAssertionError,
            RuleZeroDivisionError,
            RuleConnectorError,
            UnworkablePairError,
        )
        if isinstance(e, rule_errors):
            print(f"pdtp {args.command}: invalid pair: {e}", file=sys.stderr)
            return EXIT_INVALID
        print(f"pdtp {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
