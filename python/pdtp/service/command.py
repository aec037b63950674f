"""``pdtp serve``'s flags and command. Importing this module loads no web framework."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="the CLI's commands over HTTP/JSON, replica metrics and a web page",
        description=(
            "Serve POST /v1/<operation> (check, transfer_map, solve, size_for, replan, "
            "solve_fleet, pareto, pairs, simulate, deploy, deploy_diff, demand): each takes its "
            "command's flags as JSON fields and answers what `pdtp COMMAND --json` prints. "
            "OpenAPI at /v1/openapi.json, Prometheus replica metrics at /metrics, the planner "
            "page at /. Needs the serve extra: pip install 'pdtp[serve]'."
        ),
        epilog=(
            "examples:\n"
            "  pdtp serve                       # http://127.0.0.1:8750/\n"
            "  PDTP_SERVE_TOKEN=s3cret pdtp serve --host 0.0.0.0 --port 8080\n"
            "  pdtp serve --prometheus-url http://prometheus:9090 --target target.json \\\n"
            "      --demand-query 'sum(rate(vllm:request_success_total[2m]))'\n"
            '  curl -s localhost:8750/v1/solve -d \'{"model": "llama-3.1-70b", "gpus": 16}\''
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8750, help="port (default 8750)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="require `Authorization: Bearer <the file's first line>` (or set PDTP_SERVE_TOKEN)",
    )
    p.add_argument(
        "--max-body",
        type=int,
        default=1 << 20,
        metavar="BYTES",
        help="largest request body (default 1 MiB)",
    )
    p.add_argument(
        "--max-time",
        type=float,
        default=60.0,
        metavar="S",
        help="a computation's time limit, planners' included (default 60)",
    )
    p.add_argument("--workers", type=int, default=4, help="computations at once (default 4)")
    g = p.add_argument_group("replica metrics from Prometheus (all three, or none)")
    g.add_argument("--prometheus-url", metavar="URL", help="e.g. http://prometheus:9090")
    g.add_argument("--demand-query", metavar="PROMQL", help="the demand in req/s (one number)")
    g.add_argument(
        "--target",
        metavar="FILE",
        help="JSON: size_for's fields (model, max_gpus, SLOs ...) without demand",
    )
    g.add_argument(
        "--interval",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds between queries (default 30)",
    )


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from ..cli import UsageError, _read_json_arg, _read_text

    token = os.environ.get("PDTP_SERVE_TOKEN") or None
    if args.token_file:
        lines = _read_text(args.token_file, "--token-file").splitlines()
        token = lines[0].strip() if lines else ""
        if not token:
            raise UsageError(f"--token-file {args.token_file}: the first line is empty")
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port: expected 1..65535, got {args.port}")
    for flag, value in (("--max-body", args.max_body), ("--workers", args.workers)):
        if value < 1:
            raise UsageError(f"{flag}: expected a positive integer, got {value}")
    for flag, value in (("--max-time", args.max_time), ("--interval", args.interval)):
        if not value > 0:
            raise UsageError(f"{flag}: expected a positive number of seconds, got {value:g}")
    watch = [args.prometheus_url, args.demand_query, args.target]
    if any(watch) and not all(watch):
        raise UsageError("give --prometheus-url, --demand-query and --target together")
    target: dict[str, Any] = {}
    if args.target:
        target = _read_json_arg(args.target, "--target")
        if not isinstance(target, dict) or "demand" in target:
            raise UsageError("--target: expected a JSON object of size_for's fields, no demand")
        from .ops import OPS, ServiceError, argv_for

        try:  # its fields are checked now, not at the first query
            import tempfile

            with tempfile.TemporaryDirectory() as folder:
                argv_for(OPS["size_for"], {**target, "demand": 1.0}, folder)
        except ServiceError as e:
            raise UsageError(f"--target {args.target}: {e.message}") from None
    return {
        "token": token,
        "max_body_bytes": args.max_body,
        "max_time_s": args.max_time,
        "workers": args.workers,
        "prometheus_url": args.prometheus_url,
        "demand_query": args.demand_query,
        "target": target,
        "interval_s": args.interval,
    }


def cmd_serve(args: argparse.Namespace) -> int:
    from ..cli import UsageError

    settings = _settings(args)
    try:
        import uvicorn

        from . import create_app
    except ImportError as e:
        raise UsageError(
            f"pdtp serve needs the serve extra ({e.name} is missing): pip install 'pdtp[serve]'"
        ) from None
    if args.host not in LOOPBACK and not settings["token"]:
        print(
            f"pdtp serve: warning: {args.host} is reachable from other machines and no token "
            "is set (--token-file or PDTP_SERVE_TOKEN)",
            file=sys.stderr,
        )
    app = create_app(**settings)
    print(
        json.dumps({"listening": f"http://{args.host}:{args.port}/", "api": "/v1/openapi.json"}),
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
