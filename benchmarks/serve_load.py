"""`pdtp serve` under load: requests/s and p50/p99 latency of ``solve`` and ``replan`` at 1, 16
and 64 concurrent clients (keep-alive HTTP/1.1 on loopback), every answer checked against the
Python API's for the same inputs; errors and mismatches must be zero.

    python benchmarks/serve_load.py [--seconds 10] [--workers 4] [--json out.json]
    python benchmarks/serve_load.py --fast        # 1 s per level (CI, a smoke run)

The server runs in this process (uvicorn in a thread, 127.0.0.1, a free port) with its
default settings but ``--workers``; each client is a thread with its own connection sending
the same request back to back. Each level runs ``--seconds`` (bounded: a client starts no
request after that). Exits 1 on any error or mismatch.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from typing import Any

import pdtp
from pdtp import cli
from pdtp.service.server import BackgroundServer

LEVELS = (1, 16, 64)
# The fields that time a computation differ on every call; everything else must be equal.
TIMINGS = {"solve_ms"}
SOLVE = {"model": "llama-3.1-70b", "gpus": 16, "gpu": "mi300x"}
REPLAN_DEMAND, REPLAN_MAX_GPUS = 20.0, 32


def stable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: stable(v) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [stable(v) for v in x]
    return x


def expected() -> dict[str, tuple[dict[str, Any], Any, Any]]:
    """``{op: (request body, the Python API's answer, the part of the answer compared)}``."""
    plan = pdtp.solve(SOLVE["model"], gpus=SOLVE["gpus"], gpu=SOLVE["gpu"])
    solve_answer = cli._plan_json(plan, commands=True)  # the plan + its launch lines
    current = plan.to_dict()
    replan = pdtp.replan(current, REPLAN_DEMAND, max_gpus=REPLAN_MAX_GPUS)
    body = {"current": current, "demand": REPLAN_DEMAND, "max_gpus": REPLAN_MAX_GPUS}
    return {
        "solve": (SOLVE, stable(solve_answer), lambda a: stable(a)),
        # replan's answer: Replan.to_dict() and the stop/start moves (`deploy`) beside it.
        "replan": (body, stable(replan.to_dict()), lambda a: stable(without(a, "deploy"))),
    }


def without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


def run_level(
    host: str,
    port: int,
    op: str,
    body: dict[str, Any],
    want: Any,
    view: Any,
    clients: int,
    seconds: float,
) -> dict[str, Any]:
    payload = json.dumps(body).encode()
    latencies: list[float] = []
    errors: list[str] = []
    mismatches = [0]
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        mine: list[float] = []
        start.wait()
        while time.perf_counter() < stop_at[0]:
            t0 = time.perf_counter()
            try:
                conn.request("POST", f"/v1/{op}", payload, {"content-type": "application/json"})
                r = conn.getresponse()
                text = r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=120)
                continue
            mine.append(time.perf_counter() - t0)
            if status != 200:
                with lock:
                    errors.append(f"HTTP {status}: {text[:200]!r}")
            elif view(json.loads(text)) != want:
                with lock:
                    mismatches[0] += 1
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    began = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    lat = sorted(latencies)
    p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3) if lat else (lambda q: None)
    return {
        "op": op,
        "clients": clients,
        "requests": len(lat),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "mismatches": mismatches[0],
        "requests_per_s": len(lat) / wall if wall > 0 else 0.0,
        "p50_ms": statistics.median(lat) * 1e3 if lat else None,
        "p99_ms": p(0.99),
        "seconds": wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="per op and level (default 10)")
    ap.add_argument("--workers", type=int, default=4, help="the server's workers (default 4)")
    ap.add_argument("--fast", action="store_true", help="1 s per level")
    ap.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = ap.parse_args(argv)
    seconds = 1.0 if args.fast else args.seconds
    cases = expected()
    rows = []
    with BackgroundServer(workers=args.workers) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        for op, (body, want, view) in cases.items():
            run_level(host, int(port), op, body, want, view, 1, min(seconds, 0.5))  # warm-up
            for clients in LEVELS:
                row = run_level(host, int(port), op, body, want, view, clients, seconds)
                rows.append(row)
                print(
                    f"{op:7s} {clients:3d} clients: {row['requests_per_s']:8.1f} req/s  "
                    f"p50 {row['p50_ms'] or 0:8.1f} ms  p99 {row['p99_ms'] or 0:8.1f} ms  "
                    f"({row['requests']} requests, {row['errors']} errors, "
                    f"{row['mismatches']} mismatches)",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workers": args.workers, "seconds": seconds, "rows": rows}, f, indent=2)
    bad = [r for r in rows if r["errors"] or r["mismatches"] or not r["requests"]]
    for r in bad:
        print(f"FAIL {r['op']} at {r['clients']} clients: {r['first_error'] or 'mismatch'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
