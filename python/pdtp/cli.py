"""The ``pdtp`` command line (also ``python -m pdtp``).

Human-readable tables by default, ``--json`` for machines. Exit codes: 0 = valid / success,
1 = invalid pair or infeasible plan, 2 = usage error (bad flags, values or files), 130 =
interrupted (Ctrl-C), 141 = the reader of stdout went away (``pdtp models | head``).

Errors reach the user as one line in CLI words: :func:`in_cli_words` turns the library's
Python argument names (``max_tp=16``) into this command's flags (``--max-tp 16``), so library
messages stay written for Python callers and the CLI translates them at this one boundary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from ._table import ranges, table
from .connectors import NO_GPU_CONNECTOR, connector_help, connector_names
from .errors import PdtpError

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
# The shell's codes for a process ended by SIGINT / SIGPIPE (128 + signal number).
EXIT_INTERRUPTED, EXIT_PIPE_CLOSED = 130, 141
# An error pdtp did not expect (a bug): one line, and the traceback only on request.
EXIT_INTERNAL = 70

EPILOG = """\
examples:
  pdtp solve llama-3.1-70b --gpus 24
  pdtp solve deepseek-v3 --gpus 64 --gpu h200 --connector nixl --tpot 30 --json
  pdtp models
  pdtp check --heads 64 --kv-heads 8 --prefill-tp 4 --decode-tp 8
  pdtp check --config ./Llama-3.1-70B/config.json --prefill-tp 8 --decode-tp 8 --json
  pdtp map --kv-heads 4 --prefill-tp 4 --decode-tp 8 --connector nixl
  pdtp deploy --plan plan.json --node-hosts 10.0.0.1,10.0.0.2 -o deploy/

exit codes: 0 valid, 1 invalid or infeasible, 2 usage error, 130 interrupted,
141 output closed, 70 internal error (a bug in pdtp: please report it)
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``pdtp solve: error: argument --gpus: ...`` (exit 2),
    pointing at ``--help`` instead of printing the usage block."""

    def error(self, message: str) -> Any:  # argparse's hook; never returns
        _say(f"{self.prog}: error: {message} (see `{self.prog} --help`)")
        raise SystemExit(EXIT_USAGE)


def _count(text: str) -> int:
    """A head count: a positive integer (``map`` derives the attention heads from it)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _add_model_flags(p: argparse.ArgumentParser, *, need_heads: bool = True) -> None:
    g = p.add_argument_group(
        "model (give a catalog name or a config; without either, the head counts)"
    )
    g.add_argument("--model", metavar="NAME", help="catalog name or HF id, e.g. llama-3.1-70b")
    g.add_argument("--config", metavar="PATH", help="HF config.json (or a model folder)")
    if need_heads:
        g.add_argument("--heads", type=_count, metavar="A", help="total attention heads")
    g.add_argument("--kv-heads", type=_count, metavar="H", help="total KV heads")
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


def _layout(text: str) -> Any:
    """A side of a pair: a TP size (``4``) or a layout (``tp2dp4ep``, ``tp8pp2``)."""
    from .layout import Layout

    if text.strip().isdigit():
        return _count(text)
    try:
        return Layout.parse(text)
    except Exception as e:  # argparse turns this into one usage line naming the flag
        raise argparse.ArgumentTypeError(str(e)) from None


CONNECTOR_HELP = connector_help()
VLLM_VERSION_HELP = (
    "the vLLM release whose rules apply and whose launch settings are written (default: the "
    "newest pdtp knows; a newer one uses the newest known rules)"
)


GPU_MEMORY_HELP = (
    "the share of GPU memory weights and KV cache get (default: the engine's own: vLLM 0.9, "
    "SGLang's mem_fraction_static for each layout and role)"
)
SGLANG_VERSION_HELP = (
    "for an SGLang connector (sglang-mooncake, sglang-nixl, sglang-mori): the SGLang release "
    "whose rules apply and whose launch lines are written (default: the newest pdtp knows; "
    "not with a vLLM connector or --vllm-version)"
)


def _add_vllm_version_flag(p: Any, help: str = VLLM_VERSION_HELP) -> None:
    """``--vllm-version`` and, beside it on every command, ``--sglang-version``."""
    p.add_argument("--vllm-version", metavar="X.Y.Z", help=help)
    p.add_argument("--sglang-version", metavar="X.Y.Z", help=SGLANG_VERSION_HELP)


def _fold_sglang_version(args: argparse.Namespace) -> None:
    """``--sglang-version X`` into the connector's key (``sglang-nixl@X``), which every call
    taking ``connector`` and ``vllm_version`` resolves: one meaning on every command. A vLLM
    connector (or none) with it, or ``--vllm-version`` with an SGLang connector, is an error
    naming both flags. ``deploy --plan`` checks it against the plan's own release instead."""
    from .deployment.connectors.sglang import is_sglang_connector

    version = getattr(args, "sglang_version", None)
    given = getattr(args, "connector", None)
    if getattr(args, "vllm_version", None) is not None and is_sglang_connector(given):
        raise UsageError(
            f"--vllm-version is for vLLM's connectors; --connector {given} runs in SGLang: "
            "give --sglang-version"
        )
    if version is None:
        return
    from .connectors import engine_connector

    if given is None:
        if getattr(args, "diff", None):
            raise UsageError("--sglang-version: --diff deploys each plan at its own release")
        if getattr(args, "plan", None):
            return  # deploy: the plan names its connector; deploy() compares the release
        raise UsageError(
            f"--sglang-version {version} needs an SGLang --connector (sglang-mooncake, "
            "sglang-nixl or sglang-mori); the default engine is vLLM"
        )
    items = [c.strip() for c in given.split(",")] if isinstance(given, str) else [given]
    if len(items) == 1:
        args.connector, args.vllm_version = engine_connector(
            given, vllm_version=args.vllm_version, sglang_version=version
        )
        return
    # A list (sweep): the release applies to its SGLang connectors, which must be there.
    if not any(is_sglang_connector(c) for c in items):
        raise UsageError(
            f"--sglang-version {version} is for SGLang's connectors (sglang-mooncake, "
            f"sglang-nixl, sglang-mori); --connector {given} names none"
        )
    args.connector = ",".join(
        engine_connector(c, sglang_version=version)[0] if is_sglang_connector(c) else c
        for c in items
    )


def _add_pair_flags(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument(
        "--prefill-tp", "-P", type=_layout, required=required, metavar="P",
        help="prefill TP size, or a layout such as tp2dp4ep (DP attention + EP) or tp8pp2",
    )  # fmt: skip
    p.add_argument(
        "--decode-tp", "-D", type=_layout, required=required, metavar="D",
        help="decode TP size or layout (as -P)",
    )  # fmt: skip
    p.add_argument("--connector", default=None, help=f"KV connector: {CONNECTOR_HELP}")
    _add_vllm_version_flag(
        p,
        "the vLLM release whose rules apply (default: the newest pdtp knows; a newer one uses "
        "the newest known rules)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_solve_flags(p: argparse.ArgumentParser) -> Any:
    """`solve`'s model, pool, objective, workload and option flags (shared with `deploy`);
    returns the options group for more."""
    p.add_argument(
        "model", nargs="?", metavar="MODEL", help="catalog name or HF id (see `pdtp models`)"
    )
    p.add_argument(
        "--config", metavar="PATH", help="HF config.json or model folder instead of MODEL"
    )
    _add_pool_flags(p, "--gpus")
    p.add_argument("--connector", default=None, help=CONNECTOR_HELP)
    _add_vllm_version_flag(p)
    p.add_argument(
        "--objective", choices=["throughput", "tokens_per_dollar", "cost"], default="throughput",
        help="most req/s (default), most output tokens per USD, or the cheapest plan for --demand",
    )  # fmt: skip
    p.add_argument("--demand", type=float, metavar="RPS", help="req/s to serve (--objective cost)")
    _add_mode_flags(p)
    _add_workload_flags(p)
    o = p.add_argument_group("options")
    o.add_argument(
        "--weight-dtype", help="serve weights as bf16, fp8, fp4 ... (default: the checkpoint's)"
    )
    o.add_argument("--kv-dtype", help="KV-cache dtype: bf16 (default) or fp8")
    o.add_argument("--max-tp", type=int, help="largest TP size (default: GPUs per node)")
    o.add_argument("--max-acks", type=int, help="cap on release acks per prefill rank")
    o.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        metavar="F",
        help=GPU_MEMORY_HELP,
    )
    o.add_argument("--method", choices=["cpsat", "enumerate"], default="cpsat")
    o.add_argument(
        "--time-limit", type=float, default=10.0, metavar="S", help="seconds (default 10)"
    )
    o.add_argument(
        "--slo-percentile",
        type=float,
        metavar="P",
        help="plan on goodput: the SLOs must hold at this percentile (0.9 = p90) under "
        "Poisson arrivals, verified by simulation (default: on means)",
    )
    return o


def _add_mode_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("instances (what each instance is, and whether P/D is split)")
    g.add_argument(
        "--mode", choices=["auto", "disagg", "agg"], default="auto",
        help="auto (default): P/D split or aggregated instances, whichever serves more; "
        "disagg: prefill + decode instances; agg: instances doing both phases (no connector)",
    )  # fmt: skip
    g.add_argument(
        "--layouts", metavar="LIST",
        help="restrict each instance's layout: families tp, ep (TP + expert parallel), dp "
        "(DP attention + EP), pp, all, and/or layouts such as tp2dp4ep,tp8pp2 (default: tp; "
        "ep and dp for MoE models; pp where no layout in one node holds the weights)",
    )  # fmt: skip


def _add_host_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hosts (where the plan's nodes and the proxy run)")
    g.add_argument(
        "--node-hosts", metavar="H0,H1,...", help="node N's IP address or host name, in order"
    )
    g.add_argument("--hosts-file", metavar="FILE", help="one host per line, node 0 first")
    g.add_argument("--proxy-host", metavar="HOST", help="where the proxy runs (default: node 0)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
        epilog=(
            "examples:\n  pdtp check --heads 64 --kv-heads 8 --prefill-tp 4 --decode-tp 8\n"
            "  pdtp check --model deepseek-r1 -P tp8 -D tp1dp8ep --gpu mi355x\n"
            "  pdtp check --model llama-3.1-405b -P tp8pp2 -D tp8pp2 --connector nixl --gpu h100\n"
            "  pdtp check --model qwen3-235b-a22b --aggregated tp2dp4ep --gpu mi300x"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_model_flags(c)
    _add_pair_flags(c, required=False)
    c.add_argument(
        "--aggregated", type=_layout, metavar="LAYOUT",
        help="check one aggregated instance's layout instead of a pair (no KV connector)",
    )  # fmt: skip
    c.add_argument("--max-acks", type=int, metavar="K", help="cap on release acks per prefill rank")
    c.add_argument("--max-tp", type=int, metavar="T", help="largest TP size to propose instead")
    c.add_argument(
        "--gpu",
        help="also check that each side fits in this GPU's memory (needs --model or --config)",
    )
    c.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        metavar="F",
        help=GPU_MEMORY_HELP,
    )

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
            "  pdtp solve llama-3.1-70b --nodes 8,8,5,3        # free GPUs per node\n"
            "  pdtp solve llama-3.1-70b --gpus mi355x=16,mi300x=32\n"
            "  pdtp solve llama-3.1-70b --gpus h200=16,b200=16 --connector nixl "
            "--objective tokens_per_dollar\n"
            "  pdtp solve --config ./my-model/config.json --gpus 16 --tpot none --json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    o = _add_solve_flags(s)
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
    z.add_argument(
        "model", nargs="?", metavar="MODEL", help="catalog name or HF id (see `pdtp models`)"
    )
    z.add_argument("--config", metavar="PATH", help="HF config.json or model folder instead")
    z.add_argument("--demand", type=float, required=True, metavar="RPS", help="requests/s to serve")
    _add_pool_flags(z, "--max-gpus")
    _add_mode_flags(z)
    z.add_argument("--connector", default=None, help=CONNECTOR_HELP)
    _add_vllm_version_flag(z)
    z.add_argument(
        "--objective", choices=["gpus", "cost"], default="gpus",
        help="fewest GPUs (default) or fewest USD per hour",
    )  # fmt: skip
    _add_workload_flags(z)
    z.add_argument("--weight-dtype", help="serve weights as bf16, fp8, fp4 ...")
    z.add_argument("--kv-dtype", help="KV-cache dtype: bf16 (default) or fp8")
    z.add_argument("--max-tp", type=int, help="largest TP size (default: GPUs per node)")
    z.add_argument("--max-acks", type=int, help="cap on release acks per prefill rank")
    z.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        metavar="F",
        help=GPU_MEMORY_HELP,
    )
    z.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="seconds")
    z.add_argument("--method", choices=["cpsat", "enumerate"], default="cpsat")
    z.add_argument(
        "--slo-percentile",
        type=float,
        metavar="P",
        help="plan on goodput: the SLOs must hold at this percentile (0.9 = p90) under "
        "Poisson arrivals, verified by simulation (default: on means)",
    )
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
    _add_scenario_flag(r)
    r.add_argument("--demand", type=float, required=True, metavar="RPS", help="requests/s to serve")
    r.add_argument("--max-gpus", metavar="N", help="GPUs in the pool: a count, or TYPE=N,TYPE=N")
    r.add_argument("--nodes", metavar="LIST", help="free GPUs per node instead: 8,8,5,3")
    r.add_argument("--gpu", help="GPU type (default: the current plan's)")
    r.add_argument("--connector", help="connector (default: the current plan's)")
    _add_vllm_version_flag(
        r,
        "the vLLM release of the new plan (default: the current plan's, else the newest pdtp "
        "knows); a different release restarts every instance",
    )
    r.add_argument("--move-cost", metavar="K=V,...", help="weights: start, stop, restart, gpu")
    r.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="seconds")
    r.add_argument(
        "--slo-percentile",
        type=float,
        metavar="P",
        help="plan on goodput: the SLOs must hold at this percentile (0.9 = p90) under "
        "Poisson arrivals, verified by simulation (default: on means)",
    )
    r.add_argument(
        "--no-commands", action="store_true", help="omit the vllm serve lines of started instances"
    )
    r.add_argument("--json", action="store_true", help="print JSON instead of text")
    r.add_argument(
        "--backend",
        choices=["rdma", "xgmi"],
        help="MoRIIO's transport, as `pdtp deploy --backend` set it (default: deploy's choice; "
        "a one-node deployment on xgmi restarts every instance once the plan spans nodes)",
    )
    _add_host_flags(r)

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
    _add_scenario_flag(f)
    f.add_argument("--gpus", metavar="N", help="GPUs in the pool: a count, or TYPE=N,TYPE=N")
    f.add_argument("--nodes", metavar="LIST", help="free GPUs per node instead: 8,8,5,3")
    f.add_argument("--gpu", help="GPU type (default mi300x)")
    f.add_argument("--gpus-per-node", type=int, help="node size (default: the GPU type's)")
    f.add_argument("--objective", choices=["max_min", "weighted"], default="max_min")
    f.add_argument("--connector", default=None, help=CONNECTOR_HELP)
    _add_vllm_version_flag(f)
    f.add_argument("--time-limit", type=float, default=10.0, metavar="S")
    f.add_argument("--json", action="store_true", help="print JSON instead of a table")

    for name, what in (("models", "model"), ("gpus", "GPU")):
        cat = sub.add_parser(
            name,
            help=f"list the built-in {what} catalog",
            description=(
                f"The built-in {what} catalog. Every figure comes from a cited source: "
                "--sources prints it (a repository at a commit and the file, or the vendor's "
                "document) and flags entries that only secondary transcriptions confirm."
            ),
            epilog=f"examples:\n  pdtp {name}\n  pdtp {name} --sources\n  pdtp {name} --json",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cat.add_argument(
            "--sources", action="store_true", help="where each entry's figures come from"
        )
        cat.add_argument("--json", action="store_true", help="print JSON instead of a table")

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
            "tpot_ms}) or isl, osl, ttft_ms, tpot_ms, connector, vllm_version, max_tp, max_acks, "
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
    sw.add_argument(
        "--connector",
        help=f"{CONNECTOR_HELP}, or a list; name@X.Y.Z pins a vLLM release per connector",
    )
    _add_vllm_version_flag(
        sw, "the vLLM release whose rules apply to every connector (default: the newest)"
    )
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
        help="charts (PNG/SVG): requests/s per GPU vs budget; valid P/D pairs; latency; "
        "Pareto frontier",
        description=(
            "throughput: requests/s per GPU against the GPU budget, one line per model and a "
            "panel per GPU type, connector and workload (from a `pdtp sweep` file, or sweeps "
            "it); the 10 models with the highest peak unless --models or --top say otherwise. "
            "pairs: for each model and connector, which (prefill TP, decode TP) pairs vLLM "
            "accepts, and the rule each other pair breaks. latency: simulated TTFT and TPOT "
            "percentiles (p50, p90, p99) of a plan against the request rate, with its SLOs. "
            "pareto: output tokens/s per GPU "
            "against tokens/s per user for one model on --gpus GPUs (default 16), one plan "
            "per TPOT target, aggregated and disaggregated points marked apart, with the "
            "rule-blind frontier faintly behind (what the connector's rules cost). Needs "
            "matplotlib (pip install 'pdtp[plot]')."
        ),
        epilog=(
            "examples:\n  pdtp plot throughput -o throughput.png --gpu mi300x,h200\n"
            "  pdtp plot throughput --input sweep.csv -o throughput.svg\n"
            "  pdtp plot throughput --input sweep.csv --gpu h200 --connector nixl --top 5 "
            "-o top5.png\n"
            "  pdtp plot pairs --models llama-3.1-70b,deepseek-v3 --connector moriio,nixl "
            "-o pairs.png\n"
            "  pdtp plot latency --model llama-3.1-70b --gpus 24 -o latency.png\n"
            "  pdtp plot latency --plan plan.json --rates 5,10,20,25,30,35 -o latency.svg\n"
            "  pdtp plot pareto --models qwen3-30b-a3b --gpu mi300x --gpus 16 -o pareto.png"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pl.add_argument("chart", choices=["throughput", "pairs", "latency", "pareto"])
    pl.add_argument("-o", "--output", required=True, metavar="FILE", help=".png or .svg")
    pl.add_argument("--input", metavar="FILE", help="throughput: a `pdtp sweep` output file")
    pl.add_argument(
        "--models",
        help="names a,b,... or all (default: a representative set; with --input: the file's "
        "models, the --top by peak)",
    )
    pl.add_argument(
        "--top",
        type=int,
        metavar="N",
        help="throughput: draw the N models with the highest peak requests/s per GPU "
        "(default 10; 0 draws all)",
    )
    pl.add_argument("--gpu", help="throughput: GPU types (default mi300x)")
    pl.add_argument("--gpus", help="throughput: budgets (default 1-512)")
    pl.add_argument(
        "--connector",
        help="one or a list, e.g. moriio,nixl (default: throughput moriio, or the file's; "
        "pairs moriio,nixl)",
    )
    pl.add_argument(
        "--max-tp",
        type=int,
        help="pairs: largest TP size shown (default 8); throughput: largest TP swept",
    )
    pl.add_argument("--title", help="chart title")
    _add_latency_plot_flags(pl)
    pl.add_argument(
        "--tpot-targets",
        metavar="MS,...",
        help="pareto: TPOT targets in ms (default 5,6,7.5,10,...,200)",
    )
    pl.add_argument(
        "--mode",
        choices=["auto", "disagg", "agg"],
        default="auto",
        help="pareto: P/D splits (disagg), aggregated instances (agg) or both (auto)",
    )
    pl.add_argument(
        "--layouts",
        metavar="LIST",
        help="pareto: layout families tp, ep, dp, pp, all and/or layouts such as tp2dp4ep",
    )

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

    d = sub.add_parser(
        "deploy",
        help="per-node launch scripts + proxy, Kubernetes manifests or JSON for a plan",
        description=(
            "Turn a plan (--plan FILE from `pdtp solve --json`, or solve's own flags) into what "
            "runs it: --format scripts writes node-N.sh per node (each starts that node's vLLM "
            "instances with their GPUs, ports, roles and KV-transfer config pointing at the "
            "proxy), proxy.sh (vLLM's reference proxy/router for the connector) and README.md "
            "(what runs where, how to start, how to test); --format k8s a StatefulSet per role, "
            "the proxy Deployment and Services; --format json all of it as data. Settings follow "
            "the plan's vLLM release and MoRIIO mode. --diff OLD NEW lists the instances to stop "
            "and start (with launch lines) between two plans."
        ),
        epilog=(
            "examples:\n"
            "  pdtp solve llama-3.1-70b --gpus 24 --json > plan.json\n"
            "  pdtp deploy --plan plan.json --node-hosts 10.0.0.1,10.0.0.2,10.0.0.3 -o deploy/\n"
            "  pdtp deploy llama-3.1-8b --gpus 8 --connector nixl --gpu h100 --format k8s\n"
            "  pdtp deploy --diff plan.json bigger.json --hosts-file hosts.txt"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_solve_flags(d)
    w = d.add_argument_group("deployment")
    w.add_argument("--plan", metavar="FILE", help="a `pdtp solve --json` file (or - for stdin)")
    w.add_argument(
        "--diff", nargs=2, metavar=("OLD", "NEW"), help="instances to stop/start between plans"
    )
    w.add_argument(
        "--format",
        type=_deploy_format,
        default="scripts",
        help="a module of pdtp.deployment.formats: scripts (default), k8s or json as shipped",
    )
    w.add_argument(
        "-o", "--output", metavar="DIR", help="write the files here (default: print them)"
    )
    w.add_argument("--backend", choices=["rdma", "xgmi"], help="force MoRIIO's transport")
    w.add_argument(
        "--model-path", metavar="PATH_OR_HF_ID",
        help="what vllm serve loads (default: the plan's model; a model given as a config "
        "dict or a config file outside its folder has none)",
    )  # fmt: skip
    w.add_argument(
        "--ports", metavar="K=V,...",
        help="port bases: http, moriio_handshake, moriio_notify, nixl_side_channel, proxy_http, "
        "proxy_discovery (SGLang plans: http, bootstrap, router, prometheus, dist_init)",
    )  # fmt: skip
    w.add_argument("--name", default="pdtp", help="k8s: object name prefix (default pdtp)")
    w.add_argument("--namespace", help="k8s: namespace")
    w.add_argument("--image", help="k8s: vLLM container image (default: vLLM's for the release)")
    _add_host_flags(d)
    _add_simulate_parser(sub)
    from .service.command import add_serve_parser  # the parser only: no web framework yet

    add_serve_parser(sub)
    return parser


class UsageError(Exception):
    """A mistake in the command line itself (flags, files); exit 2."""


# ---- errors in CLI words ---------------------------------------------------------------------
#
# The library names its Python arguments (``max_tp=16``, ``ttft_ms``); a CLI user knows flags
# (``--max-tp 16``, ``--ttft``). The flags come from the parser itself (each option's ``dest``),
# so a new flag is translated without touching this table, which holds only the library
# names that differ from a flag's dest.
PY_ARGUMENT_ALIASES = {
    "ttft_ms": "ttft",
    "tpot_ms": "tpot",
    "time_limit_s": "time_limit",
    "demand_rps": "demand",
    "rate_rps": "rate",
    "num_kv_heads": "kv_heads",
    "num_attention_heads": "heads",
}
# Python calls a message may suggest, and the command that does the same.
PY_CALLS = {"pdtp.models()": "`pdtp models`", "pdtp.gpus()": "`pdtp gpus`"}

_ASSIGNMENT = re.compile(r"\b([a-z][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|[^\s,;:()\[\]]+)")
_IDENTIFIER = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
# A plain field name opening a clause: "gpus must be a positive integer", "gpus: expected".
_FIELD_CLAUSE = re.compile(r"(^|[;(]\s*)([a-z][a-z0-9_]*)(?= must\b|:)")


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """``{python argument name: flag}`` for one (sub)command, e.g. ``max_tp -> --max-tp``;
    a positional argument by its metavar (``grid -> GRID_FILE``)."""
    flags: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps no public list of its options
        long = [o for o in action.option_strings if o.startswith("--")]
        if action.dest in ("help", argparse.SUPPRESS):
            continue
        if long:
            flags[action.dest] = long[0]
        elif not action.option_strings and isinstance(action.metavar, str):
            flags[action.dest] = action.metavar
    for py_name, dest in PY_ARGUMENT_ALIASES.items():
        if dest in flags:
            flags.setdefault(py_name, flags[dest])
    return flags


def in_cli_words(message: str, flags: dict[str, str]) -> str:
    """A library message as a CLI user reads it: ``max_tp=16`` -> ``--max-tp 16``, a bare
    ``gpu_memory_utilization`` -> ``--gpu-memory-utilization``, ``pdtp.models()`` -> ``pdtp
    models``; one line. Names that are not this command's flags are left alone (vLLM's own
    messages quote its variables, e.g. ``local_tp_size=8``)."""

    def assignment(m: re.Match[str]) -> str:
        flag = flags.get(m.group(1))
        if flag is None:
            return m.group(0)
        value = m.group(2).strip("'\"")
        return flag if value == "True" else f"{flag} {value}"

    text = " ".join(message.split())
    for call, command in PY_CALLS.items():
        text = text.replace(call, command)
    text = _ASSIGNMENT.sub(assignment, text)
    text = _IDENTIFIER.sub(lambda m: flags.get(m.group(0), m.group(0)), text)
    return _FIELD_CLAUSE.sub(lambda m: m.group(1) + flags.get(m.group(2), m.group(2)), text)


def _name_the_flag(message: str, args: argparse.Namespace, flags: dict[str, str]) -> str:
    """A message that quotes a value the user gave, without naming the flag that gave it, is
    prefixed with that flag: ``--gpu zz: unknown GPU 'zz'; ...``."""
    for dest, flag in flags.items():
        value = getattr(args, dest, None)
        if isinstance(value, str) and value and f"'{value}'" in message:
            if re.search(rf"(^|[\s(`]){re.escape(flag)}\b", message):
                return message
            return f"{flag} {value}: {message}"
    return message


def _name_the_file(e: Exception, message: str, args: argparse.Namespace) -> str:
    """Errors about a file named on the command line start with the flag that named it."""
    from .errors import OutputFileError

    output, grid = getattr(args, "output", None), getattr(args, "grid", None)
    if isinstance(e, OutputFileError) and output and "--output" not in message:
        return f"--output {output}: {message}"
    if grid and str(grid) in message and "GRID_FILE" not in message:
        return f"GRID_FILE {grid}: {message}"
    return message


def _given(args: argparse.Namespace, parser: argparse.ArgumentParser, dest: str) -> bool:
    return getattr(args, dest, None) not in (None, False, parser.get_default(dest))


def _reject_together(
    args: argparse.Namespace, first: Sequence[str], second: Sequence[str], why: str
) -> None:
    """Refuse flags that cannot both take effect (one would be silently ignored)."""
    flags = args._flags
    a = next((d for d in first if _given(args, args._parser, d)), None)
    b = next((d for d in second if _given(args, args._parser, d)), None)
    if a is not None and b is not None:
        raise UsageError(f"{flags[a]} and {flags[b]} cannot be used together: {why}")


def _existing_path(path: str, flag: str) -> str:
    if not os.path.exists(path):
        raise UsageError(f"{flag} {path}: no such file or folder")
    return path


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


SCENARIO_HELP = (
    "a pdtp.Scenario as a .json/.yaml file of its fields (model, gpus or nodes, gpu, workload, "
    "connector, vllm_version, objective, limits, mode, layouts; an optional 'solver' mapping: "
    "time_limit_s, method, num_workers); flags given beside it replace its fields"
)


def _add_scenario_flag(p: Any) -> None:
    p.add_argument("--scenario", metavar="FILE", help=SCENARIO_HELP)


def _add_pool_flags(p: argparse.ArgumentParser, flag: str) -> None:
    _add_scenario_flag(p)
    g = p.add_argument_group(f"GPU pool (give one of {flag} and --nodes)")
    g.add_argument(
        flag, metavar="N",
        help="GPUs: a count on full nodes of the GPU type (the last one partial), or several "
        "types as TYPE=N,TYPE=N (e.g. mi355x=16,mi300x=32)",
    )  # fmt: skip
    g.add_argument(
        "--nodes", metavar="LIST",
        help="free GPUs per node, e.g. 8,8,5,3; several types as TYPE:8,8;TYPE:4",
    )  # fmt: skip
    g.add_argument("--gpu", help="GPU type of a single-type pool (default mi300x)")
    g.add_argument("--gpus-per-node", type=int, help="node size (default: the GPU type's)")
    g.add_argument(
        "--prices", metavar="TYPE=USD,...",
        help="USD per GPU-hour, overriding the catalog's (cost objectives)",
    )  # fmt: skip


def _ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what}: expected integers separated by commas, got {text!r}") from None


def _pool(args: argparse.Namespace, flag: str) -> dict[str, Any]:
    """``gpus``/``nodes`` keywords from ``--gpus N | TYPE=N,...`` and ``--nodes`` (neither:
    the ``--scenario`` file's pool)."""
    gpus = getattr(args, flag.lstrip("-").replace("-", "_"))
    nodes = args.nodes
    out: dict[str, Any] = {}
    if gpus is None and nodes is None and getattr(args, "scenario", None):
        pass
    elif (gpus is None) == (nodes is None):
        raise UsageError(f"give {flag} (a GPU count or TYPE=N,...) or --nodes, one of them")
    elif gpus is not None:
        if "=" in gpus:
            pairs = [item.partition("=") for item in gpus.split(",") if item.strip()]
            out["gpus"] = {k.strip(): _ints(v, flag)[0] if v.strip() else 0 for k, _, v in pairs}
        else:
            values = _ints(gpus, flag)
            if len(values) != 1:
                raise UsageError(f"{flag}: one count or TYPE=N,TYPE=N, got {gpus!r}")
            out["gpus"] = values[0]
    elif nodes is not None and ":" in nodes:
        groups = [g.partition(":") for g in nodes.split(";") if g.strip()]
        out["nodes"] = {k.strip(): _ints(v, "--nodes") for k, _, v in groups}
    elif nodes is not None:
        out["nodes"] = _ints(nodes, "--nodes")
    if getattr(args, "prices", None):
        prices: dict[str, float] = {}
        for item in args.prices.split(","):
            k, _, v = item.partition("=")
            try:
                prices[k.strip()] = float(v)
            except ValueError:
                raise UsageError(f"--prices: expected TYPE=USD, got {item!r}") from None
        out["prices"] = prices
    return out


# Input files larger than this are refused (a demands CSV or a plan JSON is a few kB).
MAX_INPUT_BYTES = 16 << 20


def _read_text(path: str, what: str) -> str:
    """A text file (``-``: stdin), at most MAX_INPUT_BYTES (counted as read: a device or an
    endless pipe is refused, never read whole), without NUL bytes."""
    from ._io import read_capped_text

    return read_capped_text(path, limit=MAX_INPUT_BYTES, what=what, error=UsageError, stdin=True)


def _model_arg(args: argparse.Namespace) -> Any:
    """MODEL/--model as a name; --config as a path, so a missing file is reported as one."""
    from pathlib import Path

    return args.model if getattr(args, "model", None) else Path(args.config)


def _shape(args: argparse.Namespace) -> Any:
    from .check import ModelShape, model_shape

    given = [x for x in ("model", "config") if getattr(args, x, None)]
    if len(given) > 1:
        raise UsageError("give only one of --model and --config")
    _reject_together(
        args,
        ("model", "config"),
        ("heads", "kv_heads", "mla"),
        "the model's config already gives its head counts; drop one",
    )
    if args.config:
        _existing_path(args.config, "--config")
    if given:
        return model_shape(_model_arg(args))
    heads = getattr(args, "heads", None)
    if args.kv_heads is None:
        raise UsageError("give --model NAME, --config PATH, or the head counts (--kv-heads H)")
    if heads is None:
        heads = args.kv_heads  # `map` needs no attention-head count
    return ModelShape(heads, args.kv_heads, args.mla)


def _cmd_check(args: argparse.Namespace) -> int:
    from .check import check

    model = _shape(args)
    if _given(args, args._parser, "gpu_memory_utilization") and not args.gpu:
        raise UsageError("--gpu-memory-utilization only applies to the memory check: add --gpu")
    if args.gpu:
        if not (args.model or args.config):
            raise UsageError("--gpu needs the whole model: give --model NAME or --config PATH")
        from .catalog import resolve_model

        model = resolve_model(_model_arg(args))
    elif args.model or args.config:
        from .catalog import resolve_model

        model = resolve_model(_model_arg(args))  # layouts need the layer and expert counts
    if args.aggregated is not None:
        if args.prefill_tp is not None or args.decode_tp is not None:
            raise UsageError("give --prefill-tp and --decode-tp, or --aggregated, not both")
    elif args.prefill_tp is None or args.decode_tp is None:
        raise UsageError("give --prefill-tp P and --decode-tp D (a pair), or --aggregated LAYOUT")
    r = check(
        model,
        args.prefill_tp,
        args.decode_tp,
        connector=args.connector,
        max_acks=args.max_acks,
        max_tp=args.max_tp,
        gpu=args.gpu,
        gpu_memory_utilization=args.gpu_memory_utilization,
        aggregated=args.aggregated,
        vllm_version=args.vllm_version,
    )
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return EXIT_OK if r.ok else EXIT_INVALID
    from .connectors import resolve_connector

    label = resolve_connector(r.connector, r.vllm_version).labelled(r.connector_default)
    if r.serving == "agg":
        print(f"{r.model}: aggregated {r.prefill_layout}  (no KV connector)")
    elif r.prefill_layout is not None and not (
        r.prefill_layout.is_tp_only and r.decode_layout is not None and r.decode_layout.is_tp_only
    ):
        print(f"{r.model}: prefill {r.prefill_layout}  decode {r.decode_layout}  connector={label}")
    else:
        print(f"{r.model}: prefill_tp={r.prefill_tp}  decode_tp={r.decode_tp}  connector={label}")
    print("VALID" if r.ok else f"INVALID ({len(r.violations)} violation(s))")
    if r.verdict.kind != "valid":
        print(f"verdict: {r.verdict}")
    if r.gpu is not None:
        fit = {True: "fits", False: "does not fit"}
        p_fit, d_fit = fit[bool(r.prefill_fits)], fit[bool(r.decode_fits)]
        if r.serving == "agg":
            print(f"memory on {r.gpu}: {p_fit}")
        else:
            print(f"memory on {r.gpu}: prefill {p_fit}, decode {d_fit}")
    # vLLM's messages verbatim; pdtp's hints and warnings in this command's flags.
    for v in r.violations:
        err = f"  [vLLM {v.vllm_error}]" if v.vllm_error else ""
        message = v.message or "(vLLM's assert has no message)"
        hint = in_cli_words(v.hint, args._flags)
        print(f"\n  x {v.code} ({v.side}){err}\n    {message}\n    hint: {hint}")
    for w in r.warnings:
        print(f"\n  ! {w.code}\n    {in_cli_words(w.message, args._flags)}")
    if r.alternatives:
        alts = ", ".join(
            f"P{p}/D{d}" if isinstance(p, int) else f"P {p}/D {d}" for p, d in r.alternatives
        )
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
    if args.config:
        _existing_path(args.config, "--config")
    elif args.model.endswith(".json") or args.model.startswith(("./", "../", "/", "~")):
        _existing_path(args.model, "MODEL")  # a path, not a name: say the file is missing
    model = resolve_model(_model_arg(args))
    if args.weight_dtype or args.kv_dtype:
        model = model.with_dtypes(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype)
    return model


def _fmt_slo(v: float | None) -> str:
    return "none" if v is None else f"{v:g} ms"


def _workload(args: argparse.Namespace) -> Any:
    from .workload import Workload

    return Workload(isl=args.isl, osl=args.osl, ttft_ms=args.ttft, tpot_ms=args.tpot)


def _print_infeasible(e: Any, args: argparse.Namespace, as_json: bool | None = None) -> int:
    if args.json if as_json is None else as_json:  # for programs: the library's words
        out = {"status": "INFEASIBLE", "reason": str(e), "reasons": list(e.reasons)}
        print(json.dumps(out, indent=2))
    else:
        print(f"INFEASIBLE: {in_cli_words(str(e), args._flags)}")
        for r in e.reasons[1:]:
            print(f"  - {in_cli_words(r, args._flags)}")
    return EXIT_INVALID


def _print_plan(plan: Any, *, commands: bool, header: str = "") -> None:
    w = plan.workload
    print(
        f"{plan.model} on {plan.pool or f'{plan.gpus} x {plan.gpu}'} ({plan.connector_label}); "
        f"isl={w.isl} osl={w.osl} ttft<={_fmt_slo(w.ttft_ms)} tpot<={_fmt_slo(w.tpot_ms)}"
    )
    gap = "" if plan.status == "OPTIMAL" or plan.gap is None else f", gap {plan.gap:.2%}"
    # Who decided, and who proved it when that is someone else (closed forms, CP-SAT).
    proof = "" if plan.proof in (None, plan.method) else f", proof {plan.proof}"
    print(header or f"plan: {plan.status} ({plan.method}{proof}{gap}, {plan.solve_ms:.1f} ms)")
    print()
    tp_only = all(s.layout.is_tp_only for _, s in plan.sides)
    latency = {
        "prefill": f"TTFT {plan.ttft_ms:,.0f} ms",
        "decode": f"TPOT {plan.tpot_ms:,.1f} ms at batch {plan.decode_batch}"
        + (" per DP rank" if plan.decode is not None and plan.decode.dp > 1 else ""),
        "aggregated": f"TTFT {plan.ttft_ms:,.0f} ms, TPOT {plan.tpot_ms:,.1f} ms at "
        f"{plan.concurrency} in flight",
    }
    capacity = {
        "prefill": plan.prefill_capacity_rps,
        "decode": plan.decode_capacity_rps,
        "aggregated": plan.requests_per_s,
    }
    rows = [
        [role, s.instances, s.tp if tp_only else str(s.layout), s.gpus,
         f"{capacity[role]:,.2f}", latency[role]]
        for role, s in plan.sides
    ]  # fmt: skip
    head = ["side", "instances", "tp" if tp_only else "layout", "GPUs", "capacity req/s", "latency"]
    if len({s.gpu for _, s in plan.sides}) > 1:
        head.insert(1, "gpu")
        for row, (_, s) in zip(rows, plan.sides):
            row.insert(1, s.gpu)
    print(table(head, rows, indent="  "))
    cost = f", ${plan.cost_per_hour:,.2f}/h" if plan.cost_per_hour is not None else ""
    print(
        f"\nserves {plan.requests_per_s:,.2f} req/s = {plan.output_tokens_per_s:,.0f} output "
        f"tok/s on {plan.gpus_used} of {plan.gpus} GPUs{cost}; bottleneck: {plan.bottleneck}"
    )
    if plan.slo_basis != "mean":
        print(
            f"SLOs at {plan.slo_basis.split()[0]} (simulated goodput, Poisson arrivals); the "
            f"analytic model on means gives this split {plan.analytic_requests_per_s:,.2f} req/s"
        )
    alt = plan.alternative
    if alt is not None:
        kind = {"agg": "aggregated", "disagg": "disaggregated"}[alt.serving]
        gain = plan.serving_gain
        if plan.objective == "throughput" and gain is not None:
            verdict = f"this plan serves {gain:.1%} more"
        elif alt.gpus_used > plan.gpus_used:
            verdict = f"this plan uses {alt.gpus_used - plan.gpus_used} fewer GPUs"
        else:
            verdict = "this plan comes first by the objective"
        print(
            f"\n{kind} alternative: {alt.summary} serves {alt.requests_per_s:,.2f} req/s on "
            f"{alt.gpus_used} GPUs; {verdict}"
        )
    for note in plan.notes:
        print(f"\nnote: {note}")
    for r in plan.rejected:
        print(f"\nrejected: {r}")
    for wr in plan.warnings:
        print(f"\n! {wr.code}: {wr.message}")
    if commands and plan.serve_error:  # a config file outside its model folder
        print(f"\nlaunch: none, {plan.serve_error}")
    elif commands:
        lines, why = _launch_lines(plan)
        front = "router" if plan.serving == "agg" else "proxy"
        if lines is None:
            print(f"\nlaunch: {why}:")
            print("  pdtp solve <these flags> --json > plan.json")
            print(f"  pdtp deploy --plan plan.json --node-hosts {_hosts_hint(plan)} -o deploy/")
        else:
            print(
                f"\nlaunch (one line per instance; `pdtp deploy` writes them per node with the "
                f"{front}):"
            )
            for line in lines:
                print(f"  {line}")


# What solve says instead of launch lines that would need the nodes' addresses.
_NEEDS_HOSTS = (
    "the plan spans {n} nodes and its launch lines hold the nodes' addresses (the proxy's and "
    "each instance's own), known only at deploy time; write the deployment with"
)


def _launch_lines(plan: Any) -> tuple[list[str] | None, str]:
    """The plan's launch lines, or None and why (a multi-node plan's addresses)."""
    from .deployment import HostsNeededError

    try:
        return plan.vllm_commands(), ""
    except HostsNeededError:
        return None, _NEEDS_HOSTS.format(n=1 + max(p.node for p in _nodes_of(plan)))


def _nodes_of(plan: Any) -> list[Any]:
    from .deployment import view_of

    return list(view_of(plan).instances)


def _hosts_hint(plan: Any) -> str:
    n = 1 + max(p.node for p in _nodes_of(plan))
    return ",".join(f"ADDR{i}" for i in range(n))


def _plan_json(plan: Any, commands: bool) -> dict[str, Any]:
    d: dict[str, Any] = plan.to_dict()
    if commands and plan.serve_error:
        d["vllm_commands"] = None
        d["launch_note"] = plan.serve_error
    elif commands:
        lines, why = _launch_lines(plan)
        d["vllm_commands"] = lines
        if lines is None:
            d["launch_note"] = (
                f"{why} `pdtp deploy --plan plan.json --node-hosts {_hosts_hint(plan)}`"
            )
    return d


def _emit_plan(make: Any, args: argparse.Namespace, header: str = "") -> int:
    """Run a planner; print its plan (table or JSON) or why nothing fits."""
    from .errors import InfeasibleError

    try:
        plan = make()
    except InfeasibleError as e:
        return _print_infeasible(e, args)
    if args.json:
        print(json.dumps(_plan_json(plan, not args.no_commands), indent=2))
    else:
        _print_plan(plan, commands=not args.no_commands, header=header)
    return EXIT_OK


def _solve_options(args: argparse.Namespace) -> dict[str, Any]:
    """`solve`'s keywords from its flags (also `deploy`'s)."""
    return {
        **_pool(args, "--gpus"),
        "gpu": args.gpu,
        "gpus_per_node": args.gpus_per_node,
        "workload": _workload(args),
        "connector": args.connector,
        "vllm_version": args.vllm_version,
        "objective": args.objective,
        "demand_rps": args.demand,
        "max_tp": args.max_tp,
        "max_acks": args.max_acks,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "time_limit_s": args.time_limit,
        "method": args.method,
        "slo_percentile": args.slo_percentile,
        "mode": args.mode,
        "layouts": args.layouts,
    }


# Planner keywords set by more than one flag, or by a flag of another name.
_FLAGS_OF = {
    "demand_rps": ("demand",),
    "time_limit_s": ("time_limit",),
    "workload": ("isl", "osl", "ttft", "tpot"),
}
_WORKLOAD_FLAGS = (("isl", "isl"), ("osl", "osl"), ("ttft_ms", "ttft"), ("tpot_ms", "tpot"))
_SOLVER_KEYS = ("time_limit_s", "method", "num_workers")
_POOL_KEYS = ("gpus", "max_gpus", "nodes")


def _model_or_none(args: argparse.Namespace) -> Any:
    """MODEL/--config as :func:`_solve_model` reads them; None when neither is given and a
    ``--scenario`` file names the model."""
    if getattr(args, "scenario", None) and not (args.model or args.config):
        return None
    return _solve_model(args)


def _planner_call(
    args: argparse.Namespace, first: Any, options: dict[str, Any], first_field: str = "model"
) -> tuple[Any, dict[str, Any]]:
    """A planner's first argument and keywords. Without ``--scenario``: ``first`` and the
    flags' ``options`` as they are. With it: the file's :class:`pdtp.Scenario`, the flags
    given (set to other than their default) replacing its fields, and its solver settings."""
    path = getattr(args, "scenario", None)
    if not path:
        return first, options
    import dataclasses

    from .scenario import load
    from .workload import Workload

    sc, cfg = load(path)
    changes: dict[str, Any] = {}
    solver: dict[str, Any] = {}
    for key, value in options.items():
        if key in _POOL_KEYS or key == "prices":  # in options only when their flags are given
            changes["gpus" if key == "max_gpus" else key] = value
            continue
        dests = _FLAGS_OF.get(key, (key,))
        if not any(_given(args, args._parser, d) for d in dests):
            continue
        if key == "workload":
            value = dataclasses.replace(
                sc.workload or Workload(),
                **{
                    f: getattr(args, d) for f, d in _WORKLOAD_FLAGS if _given(args, args._parser, d)
                },
            )
        (solver if key in _SOLVER_KEYS else changes)[key] = value
    if "gpus" in changes or "nodes" in changes:  # the flags' pool replaces the file's
        changes.setdefault("gpus", None)
        changes.setdefault("nodes", None)
    if first is not None:
        changes[first_field] = first
    elif first_field == "model" and (args.weight_dtype or args.kv_dtype):
        changes["model"] = sc.resolved_model.with_dtypes(
            weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype
        )
    return sc.replace(**changes), {"solver": dataclasses.replace(cfg, **solver)}


def _cmd_solve(args: argparse.Namespace) -> int:
    from .planning.solve import solve

    first, options = _planner_call(args, _model_or_none(args), _solve_options(args))
    return _emit_plan(lambda: solve(first, **options), args)


def _cmd_size_for(args: argparse.Namespace) -> int:
    from .planning.size_for import size_for
    from .scenario import Scenario

    first, options = _planner_call(
        args,
        _model_or_none(args),
        dict(
            demand_rps=args.demand,
            **{"max_gpus" if k == "gpus" else k: v for k, v in _pool(args, "--max-gpus").items()},
            gpu=args.gpu,
            gpus_per_node=args.gpus_per_node,
            workload=_workload(args),
            connector=args.connector,
            vllm_version=args.vllm_version,
            objective=args.objective,
            max_tp=args.max_tp,
            max_acks=args.max_acks,
            gpu_memory_utilization=args.gpu_memory_utilization,
            time_limit_s=args.time_limit,
            method=args.method,
            slo_percentile=args.slo_percentile,
            mode=args.mode,
            layouts=args.layouts,
        ),
    )
    objective = args.objective
    if isinstance(first, Scenario) and first.objective is not None:
        objective = first.objective
    return _emit_plan(
        lambda: size_for(first, **options),
        args,
        header=f"fewest {'USD/h' if objective == 'cost' else 'GPUs'} serving {args.demand:g} req/s",
    )


def _read_json_arg(path: str, what: str) -> Any:
    from ._io import loads_json

    return loads_json(_read_text(path, what), f"{what} {path}", error=UsageError)


def _cmd_replan(args: argparse.Namespace) -> int:
    from .errors import InfeasibleError
    from .planning.replan import replan

    current = _read_json_arg(args.current, "--current")
    move_cost = _key_values(args.move_cost, "--move-cost", float)
    try:
        pool = {"max_gpus" if k == "gpus" else k: v for k, v in _pool(args, "--max-gpus").items()}
        demand, options = _planner_call(
            args,
            args.demand,
            dict(
                **pool,
                gpu=args.gpu,
                connector=args.connector,
                vllm_version=args.vllm_version,
                time_limit_s=args.time_limit,
                slo_percentile=args.slo_percentile,
            ),
            first_field="demand_rps",
        )
        r = replan(current, demand, move_cost=move_cost or None, **options)
    except InfeasibleError as e:
        return _print_infeasible(e, args)
    from .deployment import replan_diff

    # The instances to stop and start, launch lines for the started ones only; none for a
    # model that vllm serve cannot load (a config file outside its model folder).
    why = r.plan.serve_error
    moves = (
        None
        if why
        else replan_diff(r, need_hosts=False, backend=args.backend, **_host_options(args))
    )
    if args.json:
        d = r.to_dict()
        d["deploy"] = moves.to_dict() if moves is not None else {"error": why}
        if args.no_commands and moves is not None:
            for inst in d["deploy"]["start"]:
                for key in ("env", "argv", "kv_transfer_config", "command"):
                    inst.pop(key, None)
        print(json.dumps(d, indent=2))
        return EXIT_OK
    print(f"replan: {r.summary()}\n")
    _print_plan(r.plan, commands=False, header=f"new plan (move cost {r.cost:g})")
    if moves is None:
        print(f"\nno deploy diff: {why}")
    else:
        print(f"\n{moves.text(commands=not args.no_commands)}")
    return EXIT_OK


def _host_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "node_hosts": args.node_hosts,
        "hosts_file": args.hosts_file,
        "proxy_host": args.proxy_host,
    }


def _key_values(text: str | None, flag: str, convert: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if item.strip():
            key, _, value = item.partition("=")
            try:
                out[key.strip()] = convert(value)
            except ValueError:
                raise UsageError(f"{flag}: expected key=number, got {item!r}") from None
    return out


def _cmd_deploy(args: argparse.Namespace) -> int:
    from .deployment import deploy, deploy_diff

    options = {
        **_host_options(args),
        "vllm_version": args.vllm_version,
        "ports": _key_values(args.ports, "--ports", int) or None,
        "backend": args.backend,
    }
    solve_given = bool(args.model or args.config or args.gpus or args.nodes or args.scenario)
    sources = [bool(args.plan), bool(args.diff), solve_given]
    if sum(sources) != 1:
        raise UsageError(
            "give one of: --plan FILE, --diff OLD NEW, or a MODEL with --gpus (as for solve)"
        )
    if args.diff:
        old = _read_json_arg(args.diff[0], "--diff OLD")
        new = _read_json_arg(args.diff[1], "--diff NEW")
        moves = deploy_diff(old, new, **options)
        if args.format == "json" and not args.output:
            print(json.dumps(moves.to_dict(), indent=2))
        elif args.output:
            target = moves.target
            files = {
                **target.files(args.format),
                **(moves.start_scripts() if args.format == "scripts" else {}),
            }
            if args.format == "json":
                files["diff.json"] = json.dumps(moves.to_dict(), indent=2) + "\n"
            _write_files(args.output, files)
            print(moves.text())
        else:
            print(moves.text())
        return EXIT_OK
    if args.plan:
        plan: Any = _read_json_arg(args.plan, "--plan")
    else:
        from .errors import InfeasibleError
        from .planning.solve import solve

        # exactly solve's plan for the same flags
        first, solve_kw = _planner_call(args, _model_or_none(args), _solve_options(args))
        try:
            plan = solve(first, **solve_kw)
        except InfeasibleError as e:
            return _print_infeasible(e, args, as_json=args.format == "json")
    dep = deploy(
        plan,
        sglang_version=args.sglang_version,
        name=args.name,
        namespace=args.namespace,
        image=args.image,
        model_path=args.model_path,
        need_hosts=args.format != "k8s",  # manifests address pods by DNS, not by node
        **options,
    )
    files = dep.files(args.format)
    if args.output:
        _write_files(args.output, files)
        where = f"{args.output}/README.md" if args.format == "scripts" else args.output
        print(f"wrote {len(files)} file(s) to {args.output}; see {where}")
    elif args.format == "scripts":
        for name, text in files.items():
            print(f"==> {name} <==\n{text}")
    else:
        print(next(iter(files.values())), end="")
    return EXIT_OK


def _write_files(directory: str, files: dict[str, str]) -> None:
    import os

    try:
        os.makedirs(directory, exist_ok=True)
        for name, text in files.items():
            path = os.path.join(directory, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            if name.endswith(".sh"):
                os.chmod(path, 0o755)
    except OSError as e:
        raise UsageError(f"--output: cannot write {directory!r}: {e.strerror}") from None


DEMAND_COLUMNS = ("model", "demand_rps")
DEMAND_OPTIONAL = ("weight", "isl", "osl", "ttft_ms", "tpot_ms")


def _read_demands(path: str) -> list[dict[str, Any]]:
    """The ``--demands`` CSV: a header line naming the columns, then one model per line.
    Mistakes are reported by file, line and column."""
    import csv
    import io

    from .catalog import resolve_model
    from .workload import Workload

    columns = ",".join(DEMAND_COLUMNS) + "[," + ",".join(DEMAND_OPTIONAL) + "]"
    text = _read_text(path, "--demands")  # bounded: `--demands /dev/zero` ends at once
    try:
        lines = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise UsageError(f"--demands {path}: not a CSV text file ({e})") from None
    if not lines:
        raise UsageError(f"--demands {path} is empty: expected a header line {columns}")
    header = [h.strip() for h in lines[0]]
    unknown = [h for h in header if h not in DEMAND_COLUMNS + DEMAND_OPTIONAL]
    missing = [c for c in DEMAND_COLUMNS if c not in header]
    if missing or unknown:
        found = ",".join(lines[0])
        looks_like_data = any(h and h[0].isdigit() for h in header)
        if looks_like_data:
            why = "a data line: the file has no header"
        elif unknown:
            why = f"unknown column {', '.join(map(repr, unknown))}"
        else:
            why = f"missing column {', '.join(map(repr, missing))}"
        raise UsageError(
            f"--demands {path}, line 1: expected the header {columns}; got {found!r} ({why})"
        )
    demands = []
    for number, values in enumerate(lines[1:], start=2):
        if not any(v.strip() for v in values):
            continue  # blank line
        if len(values) != len(header):
            raise UsageError(
                f"--demands {path}, line {number}: {len(values)} values for {len(header)} columns "
                f"({','.join(header)})"
            )
        row = {h: v.strip() for h, v in zip(header, values)}
        entry: dict[str, Any] = {"model": row["model"]}
        for column in ("demand_rps", *DEMAND_OPTIONAL):
            text = row.get(column, "")
            if column != "demand_rps" and not text:
                continue
            try:
                value: float = int(text) if column in ("isl", "osl") else float(text)
            except ValueError:
                kind = "an integer" if column in ("isl", "osl") else "a number"
                raise UsageError(
                    f"--demands {path}, line {number}, column {column}: expected {kind}, "
                    f"got {text!r}"
                ) from None
            if column in ("demand_rps", "weight"):
                entry[column] = value
            else:
                entry.setdefault("workload", {})[column] = value
        try:  # name the line of a bad model or workload, not just the value
            resolve_model(entry["model"])
            if "workload" in entry:
                Workload(**entry["workload"])
        except PdtpError as e:
            raise UsageError(f"--demands {path}, line {number}: {e}") from None
        demands.append(entry)
    return demands


def _cmd_fleet(args: argparse.Namespace) -> int:
    from .planning.fleet import solve_fleet

    demands = _read_demands(args.demands)
    first, options = _planner_call(
        args,
        demands,
        dict(
            **_pool(args, "--gpus"),
            gpu=args.gpu,
            gpus_per_node=args.gpus_per_node,
            objective=args.objective,
            time_limit_s=args.time_limit,
            connector=args.connector,
            vllm_version=args.vllm_version,
        ),
        first_field="demands",
    )
    fp = solve_fleet(first, **options)
    if args.json:
        print(json.dumps(fp.to_dict(), indent=2))
        return EXIT_OK
    from .catalog import resolve_model

    gap = "" if fp.gap is None else f" (gap {fp.gap:.2%})"
    head = f"fleet on {fp.pool}: {fp.status}{gap}, {fp.method}"
    print(f"{head}, {fp.gpus_used} GPUs used\n")
    out = []
    for d in demands:
        name = resolve_model(d["model"]).name
        plan, frac = fp.plans.get(name), fp.served_fraction.get(name, 0.0)
        cells = ["-", "-", "-"]
        if plan is not None and plan.prefill is not None and plan.decode is not None:
            cells = [
                f"{plan.prefill.instances}xP{_short(plan.prefill.layout)}",
                f"{plan.decode.instances}xD{_short(plan.decode.layout)}",
                str(plan.gpus_used),
            ]
        elif plan is not None and plan.aggregated is not None:
            agg = f"{plan.aggregated.instances}x agg {plan.aggregated.layout}"
            cells = [agg, "-", str(plan.gpus_used)]
        out.append([name, f"{d['demand_rps']:g}", *cells, f"{frac:.0%}"])
    print(table(["model", "demand req/s", "prefill", "decode", "GPUs", "served"], out, indent="  "))
    return EXIT_OK


def _short(layout: Any) -> str:
    """``2`` for a TP-only layout (the fleet table's ``3xP2``), else ``tp2dp4ep``."""
    return str(layout.tp) if layout.is_tp_only else str(layout)


def _print_sources(entries: list[tuple[str, str, str, bool]]) -> None:
    """``name  (what)`` then its source, wrapped to the terminal, one entry per block."""
    import shutil
    import textwrap

    width = max(60, min(120, shutil.get_terminal_size((100, 24)).columns))
    for name, what, source, verified in entries:
        flag = "" if verified else "  [unverified: only secondary transcriptions found]"
        print(f"{name}  ({what}){flag}")
        print(textwrap.fill(source or "-", width, initial_indent="    ", subsequent_indent="    "))


def _cmd_models(args: argparse.Namespace) -> int:
    from .catalog import model_source, models

    ms = models()
    if args.json:
        out = [m.to_dict() for m in ms]
        if args.sources:
            for d, m in zip(out, ms):
                d["source"], d["verified"] = model_source(m)
        print(json.dumps(out, indent=2))
        return EXIT_OK
    if args.sources:
        _print_sources([(m.name, m.hf_id or "-", *model_source(m)) for m in ms])
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
    if args.json:  # every GPU's dict carries its source
        print(json.dumps([g.to_dict() for g in gs], indent=2))
        return EXIT_OK
    if args.sources:
        _print_sources([(g.name, g.display_name, g.source, g.verified) for g in gs])
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

    _reject_together(
        args, ("json",), ("output",), "--json writes JSON Lines to stdout, -o writes a file"
    )
    return cli_main(args)  # a missing GRID_FILE is an OSError: main names it


def _cmd_plot(args: argparse.Namespace) -> int:
    if args.chart == "latency":
        return _cmd_plot_latency(args)
    from .plot import cli_main

    pareto_only = ("tpot_targets", "mode", "layouts")
    if args.chart != "pareto":
        for dest in pareto_only:
            if _given(args, args._parser, dest):
                raise UsageError(f"{args._flags[dest]} is for pareto charts")
    if args.chart == "pareto":
        for dest in ("input", "top"):
            if _given(args, args._parser, dest):
                raise UsageError(
                    f"{args._flags[dest]} is for throughput charts; a pareto chart takes "
                    "--models (one), --gpu, --gpus, --connector, --tpot-targets, --mode, "
                    "--layouts and --max-tp"
                )
        if not args.models:
            raise UsageError("a pareto chart needs --models NAME (one model)")
    elif args.chart == "pairs":
        for dest in ("input", "gpu", "gpus", "top"):
            if _given(args, args._parser, dest):
                raise UsageError(
                    f"{args._flags[dest]} is for throughput charts; a pairs chart takes "
                    "--models, --connector and --max-tp"
                )
    elif args.input:
        _existing_path(args.input, "--input")
        _reject_together(
            args, ("input",), ("gpus", "max_tp"), "--gpus and --max-tp set up a new sweep; "
            "a chart from --input shows the file's budgets (filter with --gpu, --connector)",
        )  # fmt: skip
    if args.top is not None and args.top < 0:
        raise UsageError(f"--top {args.top}: expected 0 (all models) or a positive count")
    return cli_main(args)


# ---- simulate, plot latency (the discrete-event simulator) ---------------------------------


def _add_simulate_parser(sub: Any) -> None:
    sm = sub.add_parser(
        "simulate",
        help="simulate a deployment request by request: TTFT/TPOT percentiles, goodput",
        description=(
            "Simulate vLLM serving a stream of requests on a deployment — continuous batching, "
            "chunked prefill, the paged KV cache with preemption, and for disaggregated plans "
            "the router and KV transfer — with every step's time from pdtp's performance "
            "model. The deployment is the plan `pdtp solve` picks for MODEL and --gpus, an "
            "explicit split (--prefill-tp ... --decode-instances, or --tp/--instances for "
            "aggregated serving), or a `pdtp solve --json` file (--plan). Prints TTFT, TPOT "
            "and end-to-end percentiles, throughput, goodput at the SLOs, queues and "
            "utilisation per side."
        ),
        epilog=(
            "examples:\n  pdtp simulate llama-3.1-70b --gpus 24 --rate 25\n"
            "  pdtp simulate llama-3.1-70b --gpus 24 --rate 25 --arrival gamma "
            "--burstiness 0.5 --length-range 0.8,1.0\n"
            "  pdtp solve llama-3.1-70b --gpus 24 --json > plan.json && "
            "pdtp simulate --plan plan.json --concurrency 256\n"
            "  pdtp simulate llama-3.3-70b --gpu h100 --weight-dtype fp8 --kv-dtype fp8 "
            "--tp 8 --concurrency 64 --isl 1024 --osl 1024\n"
            "  pdtp simulate llama-3.1-70b --gpus 24 --trace requests.csv --json\n\n"
            "trace CSV: arrival_s,input_tokens,output_tokens (a header naming them, or those "
            "three columns first); replayed at its times, or its lengths at --rate."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sm.add_argument("model", nargs="?", help="catalog name or HF id (see `pdtp models`)")
    sm.add_argument("--config", metavar="PATH", help="HF config.json or model folder instead")
    sm.add_argument("--plan", metavar="FILE", help="a `pdtp solve --json` file (or - for stdin)")
    d = sm.add_argument_group("deployment (default: the plan `pdtp solve` picks for --gpus)")
    d.add_argument("--gpus", type=int, help="GPU budget to solve for")
    d.add_argument("--gpu", default=None, help="GPU type (default mi300x)")
    d.add_argument(
        "--connector",
        default=NO_GPU_CONNECTOR,
        help=", ".join(f"{n} (default)" if n == NO_GPU_CONNECTOR else n for n in connector_names()),
    )
    d.add_argument("--prefill-tp", "-P", type=int, metavar="P")
    d.add_argument("--prefill-instances", type=int, default=1, metavar="N")
    d.add_argument("--decode-tp", "-D", type=int, metavar="D")
    d.add_argument("--decode-instances", type=int, default=1, metavar="N")
    d.add_argument("--tp", type=int, metavar="T", help="aggregated serving: TP of each instance")
    d.add_argument("--instances", type=int, default=1, metavar="N", help="aggregated instances")
    d.add_argument("--weight-dtype", help="serve weights as bf16, fp8, fp4 ...")
    d.add_argument("--kv-dtype", help="KV-cache dtype: bf16 (default) or fp8")
    d.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F")
    d.add_argument("--max-num-seqs", type=int, metavar="N", help="vLLM's (default: its own)")
    d.add_argument("--max-num-batched-tokens", type=int, metavar="N", help="vLLM's token budget")
    d.add_argument("--router", choices=["round_robin", "least_loaded"], default="round_robin")
    w = sm.add_argument_group("workload (default: the plan's, else isl 2048, osl 512)")
    w.add_argument("--isl", type=int, help="nominal prompt tokens")
    w.add_argument("--osl", type=int, help="nominal output tokens")
    # SUPPRESS: an absent flag leaves no attribute, so `--ttft none` (None) differs from it.
    w.add_argument(
        "--ttft",
        type=_slo,
        metavar="MS",
        default=argparse.SUPPRESS,
        help="TTFT SLO in ms or 'none' (default: the plan's, else 2000)",
    )
    w.add_argument("--tpot", type=_slo, metavar="MS", default=argparse.SUPPRESS,
                   help="TPOT SLO in ms or 'none' (default: the plan's, else 50)")  # fmt: skip
    w.add_argument(
        "--length-range",
        metavar="LO,HI",
        help="lengths uniform in [LO, HI] x nominal, e.g. 0.8,1.0",
    )
    w.add_argument(
        "--trace", metavar="CSV", help="request trace: arrival_s,input_tokens,output_tokens"
    )
    ld = sm.add_argument_group("load (one of --rate, --concurrency, or a --trace to replay)")
    ld.add_argument("--rate", type=float, metavar="RPS", help="open loop: requests per second")
    ld.add_argument("--concurrency", type=int, metavar="C", help="closed loop: C clients")
    ld.add_argument("--requests", type=int, metavar="N", help="requests (default 10000)")
    ld.add_argument("--arrival", choices=["poisson", "gamma", "constant"], default="poisson")
    ld.add_argument(
        "--burstiness", type=float, default=1.0, metavar="B",
        help="gamma arrivals: shape (1 = Poisson, < 1 burstier)",
    )  # fmt: skip
    ld.add_argument("--seed", type=int, default=0)
    sm.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_latency_plot_flags(pl: Any) -> None:
    g = pl.add_argument_group("latency (TTFT/TPOT percentiles against the request rate)")
    g.add_argument("--model", metavar="NAME", help="latency: the model (with --gpus N to solve)")
    g.add_argument("--plan", metavar="FILE", help="latency: a `pdtp solve --json` file")
    g.add_argument("--rates", metavar="R1,R2,...", help="latency: request rates (default: auto)")
    g.add_argument("--requests", type=int, default=4000, metavar="N", help="latency: per rate")
    g.add_argument("--isl", type=int, help="latency: nominal prompt tokens")
    g.add_argument("--osl", type=int, help="latency: nominal output tokens")
    g.add_argument(
        "--ttft", type=_slo, metavar="MS", default=argparse.SUPPRESS, help="latency: TTFT SLO (ms)"
    )
    g.add_argument("--tpot", type=_slo, metavar="MS", default=argparse.SUPPRESS,
                   help="latency: TPOT SLO (ms)")  # fmt: skip
    g.add_argument("--seed", type=int, default=0)


def _sim_workload(args: argparse.Namespace, base: Any) -> Any:
    """The plan's workload (or the defaults) with the flags given on top."""
    from .workload import Workload, resolve_workload

    w = resolve_workload(base)
    fields: dict[str, Any] = {
        "isl": args.isl if args.isl is not None else w.isl,
        "osl": args.osl if args.osl is not None else w.osl,
        "ttft_ms": w.ttft_ms,
        "tpot_ms": w.tpot_ms,
    }
    for flag, key in (("ttft", "ttft_ms"), ("tpot", "tpot_ms")):
        if hasattr(args, flag):  # given (`none` gives None); absent: keep the base's
            fields[key] = getattr(args, flag)
    return Workload(**fields)


def _sim_target(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(plan or SimConfig, the workload it was planned for, a one-line description)."""
    from .simulate import config_from_plan, sim_config

    explicit_pd = args.prefill_tp is not None or args.decode_tp is not None
    explicit_agg = getattr(args, "tp", None) is not None
    if sum([bool(args.plan), explicit_pd, explicit_agg]) > 1:
        raise UsageError("give one of --plan, --prefill-tp/--decode-tp, or --tp")
    if args.plan:
        from .planning.plan import Plan

        data = _read_json_arg(args.plan, "--plan")
        if not isinstance(data, dict):
            raise UsageError("--plan: expected a JSON object from `pdtp solve --json`")
        read = Plan.from_dict(data)  # the one reader: every field checked
        cfg = config_from_plan(
            read,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            router=args.router,
        )
        return cfg, read.workload, _describe(cfg)
    if explicit_pd or explicit_agg:
        model = _solve_model(args)
        kw: dict[str, Any] = (
            {"tp": args.tp, "instances": args.instances}
            if explicit_agg
            else {
                "prefill_tp": args.prefill_tp,
                "prefill_instances": args.prefill_instances,
                "decode_tp": args.decode_tp,
                "decode_instances": args.decode_instances,
            }
        )
        cfg = sim_config(
            model,
            gpu=args.gpu,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            router=args.router,
            **kw,
        )
        return cfg, None, _describe(cfg)
    if args.gpus is None:
        raise UsageError(
            "give --gpus N (simulate the plan `pdtp solve` picks), an explicit split, or --plan"
        )
    from .planning.solve import solve

    plan = solve(
        _solve_model(args),
        args.gpus,
        gpu=args.gpu or "mi300x",
        workload=_sim_workload(args, None),
        connector=args.connector,
        gpu_memory_utilization=args.gpu_memory_utilization or 0.9,
    )
    cfg = config_from_plan(
        plan,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        router=args.router,
    )
    return cfg, plan.workload, _describe(cfg) + f" (pdtp solve, {plan.requests_per_s:.2f} req/s)"


def _describe(cfg: Any) -> str:
    sides = " + ".join(
        f"{p.instances}x {'' if p.role == 'aggregated' else p.role + ' '}{p.layout}"
        for p in cfg.pools
    )
    return f"{cfg.model} on {cfg.gpus} x {cfg.gpu}: {sides} ({cfg.mode}, {cfg.router})"


def _length_range_arg(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--length-range: expected LO,HI such as 0.8,1.0, got {text!r}") from None
    return lo, hi


def _cmd_simulate(args: argparse.Namespace) -> int:
    import time

    from .simulate import simulate, slo_met

    cfg, base_workload, title = _sim_target(args)
    w = _sim_workload(args, base_workload)
    started = time.perf_counter()
    r = simulate(
        cfg,
        rate_rps=args.rate,
        concurrency=args.concurrency,
        workload=w,
        requests=args.requests,
        arrival=args.arrival,
        burstiness=args.burstiness,
        seed=args.seed,
        length_range=_length_range_arg(args.length_range),
        trace=args.trace,
    )
    elapsed = time.perf_counter() - started
    if args.json:
        out = {
            "deployment": {
                "model": cfg.model,
                "gpu": cfg.gpu,
                "mode": cfg.mode,
                "router": cfg.router,
                "gpus": cfg.gpus,
                "pools": [
                    {
                        "role": p.role,
                        "tp": p.tp,
                        "layout": p.layout,
                        "pp": p.pp,
                        "dp": p.dp,
                        "ep": p.ep,
                        "instances": p.instances,
                        "max_num_seqs": p.max_num_seqs,
                        "max_num_batched_tokens": p.max_num_batched_tokens,
                        "kv_blocks": p.kv_blocks,
                    }
                    for p in cfg.pools
                ],
            },
            "workload": w.to_dict(),
            "load": {
                "rate_rps": args.rate,
                "concurrency": args.concurrency,
                "arrival": args.arrival,
                "burstiness": args.burstiness,
                "length_range": args.length_range,
                "trace": args.trace,
            },
            "result": r.to_dict(),
            "simulated_in_s": elapsed,
        }
        print(json.dumps(out, indent=2))
        return EXIT_OK
    if args.trace and args.rate is None and args.concurrency is None:
        load = f"trace {args.trace} replayed"
    elif args.rate is not None:
        load = f"{args.arrival} arrivals at {args.rate:g} req/s"
    else:
        load = f"closed loop of {args.concurrency} clients"
    lengths = "from the trace" if args.trace else f"isl {w.isl}, osl {w.osl}"
    if args.length_range and not args.trace:
        lengths += f" x [{args.length_range}]"
    print(title)
    print(f"load: {load}; {r.requests:,} requests ({lengths}); seed {args.seed}\n")
    rows = []
    for name, p, slo in (
        ("TTFT ms", r.ttft_ms, r.ttft_slo_ms),
        ("TPOT ms", r.tpot_ms, r.tpot_slo_ms),
        ("E2E ms", r.e2e_ms, None),
    ):
        rows.append(
            [name, *(f"{v:,.1f}" for v in (p.mean, p.p50, p.p90, p.p99, p.max)),
             "-" if slo is None else f"{slo:g}"]
        )  # fmt: skip
    print(table(["latency", "mean", "p50", "p90", "p99", "max", "SLO"], rows, indent="  "))
    print(
        f"\nthroughput {r.throughput_rps:,.2f} req/s = {r.output_tokens_per_s:,.0f} output "
        f"tok/s; goodput {r.goodput_rps:,.2f} req/s ({r.slo_attainment:.1%} of requests "
        f"within both SLOs); SLOs on the mean (as planned) {'met' if slo_met(r) else 'MISSED'}, "
        f"at p90 {'met' if r.meets_slo(0.9) else 'MISSED'}\n"
    )
    side_rows = [
        [s.role, s.instances, f"{s.utilization:.0%}", f"{s.mean_decode_batch:,.1f}",
         f"{s.queue_mean:,.1f} / {s.queue_max:,}", f"{s.preemptions:,}"]
        for s in r.sides
    ]  # fmt: skip
    print(
        table(
            ["side", "instances", "busy", "decode batch", "queue mean/max", "preemptions"],
            side_rows,
            indent="  ",
        )
    )
    print(f"\nsimulated in {elapsed * 1e3:,.0f} ms")
    return EXIT_OK


def _cmd_plot_latency(args: argparse.Namespace) -> int:
    from .plot import _matplotlib, latency_chart

    if not (args.model or args.plan):
        raise UsageError("plot latency: give --model NAME with --gpus N, or --plan FILE")
    if args.plan:
        from .planning.plan import Plan

        target: Any = Plan.from_dict(_read_json_arg(args.plan, "--plan"))  # the one reader
        base = target.workload
    else:
        from .planning.solve import solve

        try:
            gpus = int(args.gpus) if args.gpus else None
        except ValueError:
            gpus = None
        if gpus is None:
            raise UsageError("plot latency: --gpus must be one GPU budget, e.g. --gpus 24")
        target = solve(
            args.model,
            gpus,
            gpu=args.gpu or "mi300x",
            workload=_sim_workload(args, None),
            connector=args.connector or NO_GPU_CONNECTOR,
        )
        base = target.workload
    rates = None
    if args.rates:
        try:
            rates = [float(x) for x in args.rates.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--rates: expected numbers a,b,c, got {args.rates!r}") from None
    fig = latency_chart(
        target,
        args.output,
        rates=rates,
        workload=_sim_workload(args, base),
        requests=args.requests,
        seed=args.seed,
        title=args.title,
    )
    _matplotlib().close(fig)
    print(f"wrote {args.output}")
    return EXIT_OK


def _cmd_serve(args: argparse.Namespace) -> int:
    from .service.command import cmd_serve  # FastAPI and uvicorn load only here

    return cmd_serve(args)


COMMANDS = {
    "deploy": _cmd_deploy,
    "simulate": _cmd_simulate,
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
    "serve": _cmd_serve,
}


def _say(line: str) -> None:
    """One line on stderr; a closed stderr cannot turn it into a traceback."""
    # A lone surrogate (from a hostile argument) cannot be encoded: escape it, not lose
    # the whole line to a UnicodeEncodeError.
    from .errors import bounded_message

    line = bounded_message(line)  # a 1 MB argument is not echoed whole
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    with contextlib.suppress(LookupError, ValueError):
        line = line.encode(encoding, "backslashreplace").decode(encoding, "replace")
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """After the reader of stdout went away (``pdtp models | head -1``) nothing more can be
    written there; point it at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture stdout)
        pass


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[command]
            return sub
    raise LookupError(command)  # pragma: no cover: every command has a subparser


def _path_flag(args: argparse.Namespace, filename: str) -> str | None:
    """The flag whose value is (or lies inside) ``filename``, for an OSError's message."""
    for dest, flag in args._flags.items():
        value = getattr(args, dest, None)
        if (
            isinstance(value, str)
            and value
            and (
                os.path.abspath(value) == os.path.abspath(filename)
                or os.path.abspath(value).startswith(os.path.abspath(filename) + os.sep)
            )
        ):
            return f"{flag} {value}"
    return None


def main(
    argv: Sequence[str] | None = None, *, parser: argparse.ArgumentParser | None = None
) -> int:
    """The ``pdtp`` program. Every outcome is an exit code and, for an error, one line on
    stderr in CLI words; no traceback reaches the user (``PDTP_DEBUG=1`` shows one for an
    internal error). ``parser``: a :func:`build_parser` to reuse (`pdtp serve` runs many
    commands; building one costs more than a small solve)."""
    command = ""
    try:
        parser = parser or build_parser()
        # Usage errors: one line, SystemExit(2); leftovers are the subcommand's to report.
        args, extras = parser.parse_known_args(argv)
        if not args.command:
            if extras:
                parser.error(f"unrecognized arguments: {' '.join(extras)}")
            parser.print_help()
            return EXIT_USAGE
        command = args.command
        sub = _subparser(parser, command)
        if extras:
            sub.error(f"unrecognized arguments: {' '.join(extras)}")
        args._parser, args._flags = sub, flag_names(sub)
        try:
            _fold_sglang_version(args)
            code = COMMANDS[command](args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
            return code
        except UsageError as e:
            message = in_cli_words(str(e), args._flags)
            _say(f"pdtp {command}: error: {message} (see `pdtp {command} --help`)")
            return EXIT_USAGE
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

            message = str(e)
            grid = getattr(args, "grid", None)
            if not (grid and message.startswith(str(grid))):
                # A grid file's own keys (`max_tp`) are its words, not flags: keep them.
                message = in_cli_words(message, args._flags)
            message = _name_the_file(e, message, args)
            if isinstance(e, rule_errors):
                _say(f"pdtp {command}: invalid pair: {message}")
                return EXIT_INVALID
            _say(f"pdtp {command}: error: {_name_the_flag(message, args, args._flags)}")
            return EXIT_USAGE
        except BrokenPipeError:
            raise
        except OSError as e:  # a file named on the command line cannot be read or written
            if e.filename is None:
                _say(f"pdtp {command}: error: {e.strerror or e}")
                return EXIT_USAGE
            where = _path_flag(args, str(e.filename)) or str(e.filename)
            reason = e.strerror or type(e).__name__
            if os.fspath(e.filename) not in where:
                reason += f" ({e.filename})"
            _say(f"pdtp {command}: error: {where}: {reason}")
            return EXIT_USAGE
    except KeyboardInterrupt:
        # On a terminal, start a fresh line (after the echoed ^C or a progress bar).
        fresh = "\n" if sys.stderr.isatty() else ""
        _say(f"{fresh}pdtp{' ' + command if command else ''}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_PIPE_CLOSED
    except Exception as e:
        if os.environ.get("PDTP_DEBUG"):
            raise
        _say(
            f"pdtp{' ' + command if command else ''}: internal error: {type(e).__name__}: "
            f"{' '.join(str(e).split())} (a bug in pdtp: set PDTP_DEBUG=1 for the traceback "
            "and please report it)"
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def _deploy_format(text: str) -> str:
    """``--format``: a format of ``pdtp.deployment.formats`` (one module per format), read
    when the flag is parsed so that building the parser imports no deployment code."""
    from .deployment.formats import format_of

    try:
        return format_of(text).name
    except PdtpError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
