"""Issue 23's 14 problem classes, each re-run from the issue's reproducer: one figure per
class for one or two checkouts of pdtp (the before/after table of the issue's closing note).

    python benchmarks/limits_classes.py                          # this checkout
    python benchmarks/limits_classes.py --before /work/main/python --after python
    python benchmarks/limits_classes.py --only 1,5 --json

``--before`` / ``--after`` name a checkout's ``python/`` folder (its Rust extension built);
each reproducer runs in a fresh interpreter with that folder first on ``sys.path``, a memory
cap (``--memory-gib``, default 4) and a time cap (``--timeout``, default 120 s), so a
checkout that hangs or blows up shows as ``timeout`` / ``crashed`` instead of stopping the
run. Times are the call's own: ``solve_ms`` where a planner reports it, else CPU time of the
call (``time.process_time``: the shared machine's load shows in the wall time only).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

# What the issue reported for each class (the "reported" column).
REPORTED = {
    1: "256 nodes tp,pp @0.05 s: 1.5 s; 1,024 nodes: 24.6 s; calibrate 150k rows @0.5 s: 1.75 s",
    2: "gpus_per_node=256: 10-11 s, 634 MB; 512/1,024: >180 s at 12-18 GB (abort under 2 GiB)",
    3: "simulate --trace /dev/zero: 16.9 GB in 60 s; deploy --hosts-file /dev/zero: never ends",
    4: "pdtp.model('org/name'): AttributeError; CLI exit 70",
    5: "deploy 16,000 + 16,000 instances: 11 s",
    6: "deploy wrote scripts for 7 of 7 tampered plans",
    7: "2 of 2 alias collisions passed",
    8: "405B fp8 on H100 without --quantization fp8; 56 ports bound twice on 128-GPU nodes",
    9: "0.33.0 -> 0.25.0: keep 12",
    10: "pareto @0.001 s: 'no TPOT target ... has a valid plan ... add GPUs'",
    11: "two sweeps through a symlink: both done, every row twice",
    12: "1,008 of 4,014 misuse calls not PdtpError (bare TypeError, OverflowError, ...)",
    13: "--name 0pdtp and invalid images accepted",
    14: "1 MB name echoed whole (1,000,119 chars); gpus_per_node 0 -> 8; dict config launches "
    "`vllm serve llama`; any engine read as vLLM; predict_serving(deepseek-r1 b200 sglang) "
    "refused suggesting fp8",
}

PRELUDE = """
import json, os, random, sys, time, warnings, tempfile, resource
warnings.simplefilter("ignore")
import pdtp
FAST = os.environ.get("PDTP_LIMITS_FAST") == "1"  # --fast: smaller sizes (CI)
def cpu_ms(fn):
    c = time.process_time()
    try:
        out = fn()
    except Exception as e:
        out = e
    return out, (time.process_time() - c) * 1e3
def what(x):
    if isinstance(x, BaseException):
        kind = "PdtpError" if isinstance(x, pdtp.PdtpError) else "NOT PdtpError"
        return f"{type(x).__name__} ({kind})"
    return "returned"
def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def report(text):
    print("FIGURE " + json.dumps(text))
def partly_free(n, seed=0):
    rng = random.Random(seed)
    return [rng.randint(1, 8) for _ in range(n)]
"""

CASES: dict[int, str] = {
    1: """
from ortools.sat.python import cp_model
pdtp.solve("llama-3.1-8b", 8, gpu="h100")
parts = []
for n in (256,) if FAST else (256, 1024, 131072):
    nodes = partly_free(n)
    best = None
    for _ in range(3):
        out, cpu = cpu_ms(lambda: pdtp.solve("llama-3.1-70b", nodes=nodes, gpu="mi300x",
                                             layouts="tp,pp", time_limit_s=0.05))
        ms = getattr(out, "solve_ms", None)
        if best is None or (ms or 1e12) < (best[0] or 1e12):
            best = (ms, cpu, out)
    ms, cpu, out = best
    shown = f"solve_ms {ms:.0f} (cpu {cpu:.0f})" if ms is not None else what(out)
    parts.append(f"{n:,} nodes tp,pp @0.05 s: {shown}")
row = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "isl": 1000, "osl": 200,
       "concurrency": 32, "tpot_ms": 9.5}
rows = 15_000 if FAST else 150_000
out, cpu = cpu_ms(lambda: pdtp.calibrate([row] * rows, time_limit_s=0.5))
parts.append(f"calibrate {rows:,} rows @0.5 s: cpu {cpu:.0f} ms ({what(out)})")
report("; ".join(parts))
""",
    2: """
t = time.perf_counter()
out, cpu = cpu_ms(lambda: pdtp.solve("llama-3.1-8b", gpus=256, gpu="h100", gpus_per_node=256,
                                     time_limit_s=1))
report(f"gpus_per_node=256: {what(out)} after cpu {cpu:.0f} ms, peak RSS {rss_mb():.0f} MB")
""",
    3: """
import subprocess
def cli(argv):
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "pdtp", *argv], capture_output=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        return f"exit {p.returncode} in {time.perf_counter() - t:.1f} s"
    except subprocess.TimeoutExpired:
        return "still running at 30 s"
plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", mode="disagg")
f = tempfile.mktemp(suffix=".json")
open(f, "w").write(plan.to_json())
a = cli(["simulate", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100", "--trace", "/dev/zero"])
b = cli(["deploy", "--plan", f, "--hosts-file", "/dev/zero"])
report(f"simulate --trace /dev/zero: {a}; deploy --hosts-file /dev/zero: {b}")
""",
    4: """
os.environ["HF_HUB_OFFLINE"] = "1"
out, _ = cpu_ms(lambda: pdtp.model("acme/not-cached-model"))
import subprocess
p = subprocess.run([sys.executable, "-m", "pdtp", "solve", "acme/not-cached-model", "--gpus",
                    "8"], capture_output=True, timeout=60, env={**os.environ})
report(f"pdtp.model('org/name') offline: {what(out)}; CLI exit {p.returncode}")
""",
    5: """
n = 1600 if FAST else 16000
d = {"model": "llama-3.1-8b", "gpu": "h100", "connector": "nixl",
     "prefill": {"tp": 1, "instances": n}, "decode": {"tp": 1, "instances": n}}
hosts = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(n // 4)]
dep, cpu = cpu_ms(lambda: pdtp.deploy(d, node_hosts=hosts))
parts = [f"deploy {n:,} + {n:,} instances: cpu {cpu / 1e3:.1f} s ({what(dep)})"]
if not isinstance(dep, BaseException):
    for fmt in ("scripts", "json"):
        out, cpu = cpu_ms(lambda: dep.files(fmt))
        parts.append(f"{fmt} {cpu / 1e3:.1f} s")
report(", ".join(parts))
""",
    6: """
import copy
base = pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x", mode="disagg").to_dict()
def side(d, role, tp, n, drop=True):
    d[role].update(tp=tp, layout=f"tp{tp}", instances=n, gpus=tp * n)
    if drop:
        d.pop("placement", None); d.pop("gpus_used", None)
def p4d8(d): side(d, "prefill", 4, 2); side(d, "decode", 8, 1, False)
def tp3(d): side(d, "prefill", 3, 2)
def h100(d):
    d.update(gpu="h100", visible_devices_env="CUDA_VISIBLE_DEVICES"); d.pop("placement")
    for r in ("prefill", "decode"): d[r]["gpu"] = "h100"
def shared(d): d["placement"][1]["devices"] = list(d["placement"][0]["devices"])
def twice(d): d["placement"][1]["index"] = d["placement"][0]["index"]
tampers = [p4d8, tp3, lambda d: d.update(prefill_role="bogus"), h100, shared, twice,
           lambda d: d["prefill"].update(layout="tp2zz")]
refused = 0
for t in tampers:
    d = copy.deepcopy(base); t(d)
    out, _ = cpu_ms(lambda: pdtp.deploy(d, need_hosts=False).scripts())
    refused += isinstance(out, pdtp.PdtpError)
report(f"{refused} of {len(tampers)} tampered plans refused (deploy)")
""",
    7: """
plan = pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x", mode="disagg", vllm_version="0.25.0")
one = pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", mode="disagg")
a, _ = cpu_ms(lambda: pdtp.deploy(plan, node_hosts=["node-a", "NODE-A."]))
b, _ = cpu_ms(lambda: pdtp.deploy(one, node_hosts=["node-a"], proxy_host="NODE-A.",
                                  ports={"proxy_http": 8100}))
n = sum(isinstance(x, pdtp.PdtpError) for x in (a, b))
report(f"{n} of 2 alias collisions refused")
""",
    8: """
p = pdtp.solve(pdtp.model("llama-3.1-405b", weight_dtype="fp8"), gpus=16, gpu="h100")
lines = pdtp.deploy(p, node_hosts=["10.0.0.1", "10.0.0.2"]).scripts()
q = sum("--quantization fp8" in t for t in lines.values())
big = pdtp.solve("llama-3.1-8b", gpus=128, gpu="h100", gpus_per_node=128, mode="disagg")
dep = pdtp.deploy(big)
ports = [(i.node, b) for i in dep.instances for b in i.bound]
dup = len(ports) - len(set(ports))
report(f"405B fp8 on H100: --quantization fp8 in {q} node script(s); 128-GPU nodes: {dup} "
       "ports bound twice")
""",
    9: """
new = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", mode="disagg")
old = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", mode="disagg", vllm_version="0.25.0")
d = pdtp.deploy_diff(old, new, need_hosts=False)
report(f"release change 0.25.0 -> 0.33.0: keep {d.instances_kept}")
""",
    10: """
out, _ = cpu_ms(lambda: pdtp.pareto("llama-3.1-70b", 16, gpu="mi300x", time_limit_s=0.001))
text = str(out) if isinstance(out, BaseException) else f"{len(out.points)} points"
says = "says the time limit" if "time" in text.lower() else "does not name the time limit"
report(f"pareto @0.001 s: {what(out)}, {says}")
""",
    11: """
from pdtp._sweep_output import Store
d = tempfile.mkdtemp()
real = os.path.join(d, "out.csv"); link = os.path.join(d, "link.csv")
os.symlink(real, link)
first = Store(link); first.open()
out, _ = cpu_ms(lambda: Store(real).open())
first.close()
report("second writer through the other spelling: " + (
    "refused" if isinstance(out, pdtp.PdtpError) else "opened (rows would be written twice)"))
""",
    12: """
import numpy as np
base = dict(prefill_tp=1, prefill_instances=1, decode_tp=1, decode_instances=1)
point = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "isl": 1024, "osl": 128,
         "concurrency": 8, "output_tokens_per_s": 900.0, "ttft_ms": 80.0, "tpot_ms": 9.0}
plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", mode="disagg")
calls = [
    lambda: pdtp.solve("llama-3.1-8b", 8, connector=5),
    lambda: pdtp.evaluate("llama-3.1-8b", max_acks=2**70, **base),
    lambda: pdtp.calibrate([point], fit=None),
    lambda: pdtp.model("\\ud800x"),
    lambda: pdtp.solve("llama-3.1-8b", 8, gpu="h100", vllm_version="\\udcff"),
    lambda: pdtp.solve("llama-3.1-8b", 8, gpu="h100", layouts=["\\udcff"]),
    lambda: pdtp.Plan.from_dict({**plan.to_dict(), "vllm_version": "\\udcff"}),
    lambda: json.dumps(pdtp.deploy(plan, ports={"http": np.int64(9000)}).to_dict()),
    lambda: pdtp.solve("llama-3.1-8b", nodes="8,8"),
    lambda: pdtp.pareto("llama-3.1-8b", 8, tpot_ms=True),
]
bad = [i for i, c in enumerate(calls) if isinstance(cpu_ms(c)[0], BaseException)
       and not isinstance(cpu_ms(c)[0], pdtp.PdtpError)]
report(f"{len(bad)} of {len(calls)} misuse calls not a PdtpError" + (f" (#{bad})" if bad else ""))
""",
    13: """
plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", mode="disagg")
a, _ = cpu_ms(lambda: pdtp.deploy(plan, name="0pdtp").manifests_yaml())
b, _ = cpu_ms(lambda: pdtp.deploy(plan, image="bad image:tag!").manifests_yaml())
n = sum(isinstance(x, pdtp.PdtpError) for x in (a, b))
report(f"{n} of 2 invalid Kubernetes name/image refused")
""",
    14: """
parts = []
out, _ = cpu_ms(lambda: pdtp.model("x" * 1_000_000))
parts.append(f"1 MB name: {len(str(out)):,} chars")
d = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100").to_dict(); d["gpus_per_node"] = 0
out, _ = cpu_ms(lambda: pdtp.Plan.from_dict(d))
parts.append("gpus_per_node 0: " + ("refused" if isinstance(out, pdtp.PdtpError) else
                                    f"read as {getattr(out, 'gpus_per_node', '?')}"))
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
       "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
       "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}
p = pdtp.solve(cfg, gpus=8, gpu="h100")
out, _ = cpu_ms(p.vllm_commands)
parts.append("dict config: " + ("no launch lines (says why)" if isinstance(out, pdtp.PdtpError)
                                else f"launches `{out[0].split(' vllm ')[1][:16]}...`"))
row = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "isl": 1000, "osl": 200,
       "concurrency": 32, "tpot_ms": 9.5, "engine": "foo-engine"}
out, _ = cpu_ms(lambda: pdtp.calibrate([row]))
parts.append("engine 'foo-engine': " + ("refused" if isinstance(out, pdtp.PdtpError) else
                                        "read as vLLM"))
out, _ = cpu_ms(lambda: pdtp.predict_serving("deepseek-r1", gpu="b200", tp=4, isl=7373, osl=927,
                                             concurrency=32, weight_dtype="fp8",
                                             engine="sglang"))
if isinstance(out, BaseException):
    m = str(out)
    util = m.split("do not fit in ")[1].split(" of each")[0] if "do not fit in" in m else "?"
    fp8 = "suggests fp8" if "fp8 weights" in m.split(";")[-1] else "no fp8 suggestion"
    parts.append(f"predict_serving deepseek-r1 b200 sglang: refused at {util}, {fp8}")
else:
    parts.append(f"predict_serving deepseek-r1 b200 sglang: {out.tpot_ms:.1f} ms TPOT")
report("; ".join(parts))
""",
}


def run_case(
    number: int, python_dir: str | None, timeout: float, memory_gib: float, fast: bool = False
) -> str:
    env = dict(os.environ, PDTP_LIMITS_FAST="1" if fast else "0")
    if python_dir:
        env["PYTHONPATH"] = os.path.abspath(python_dir) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    code = PRELUDE + textwrap.dedent(CASES[number])
    limit = int(memory_gib * (1 << 30))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        p = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=cap,
            cwd=Path(__file__).resolve().parent,
        )
    except subprocess.TimeoutExpired:
        return f"timeout ({timeout:g} s)"
    figures = [ln[7:] for ln in p.stdout.splitlines() if ln.startswith("FIGURE ")]
    if figures:
        return str(json.loads(figures[-1]))
    tail = (p.stderr.strip().splitlines() or ["?"])[-1]
    return f"crashed (exit {p.returncode}): {tail[:160]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", metavar="DIR", help="a checkout's python/ folder (before)")
    ap.add_argument("--after", metavar="DIR", help="a checkout's python/ folder (after)")
    ap.add_argument("--only", help="class numbers, e.g. 1,5")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--memory-gib", type=float, default=4.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fast", action="store_true", help="smaller sizes for classes 1 and 5")
    args = ap.parse_args(argv)
    numbers = sorted(CASES) if not args.only else [int(x) for x in args.only.split(",")]
    columns = [("before", args.before), ("after", args.after)] if args.before else []
    if not columns:
        columns = [("this checkout", args.after)]
    rows = []
    for n in numbers:
        row: dict[str, Any] = {"class": n, "reported": REPORTED[n]}
        for name, folder in columns:
            row[name] = run_case(n, folder, args.timeout, args.memory_gib, args.fast)
        rows.append(row)
        if not args.json:
            print(f"{n}: " + " | ".join(str(row[c]) for c, _ in columns), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        heads = ["class", "reported in the issue", *(c for c, _ in columns)]
        print("\n| " + " | ".join(heads) + " |")
        print("|" + "---|" * len(heads))
        for row in rows:
            cells = [str(row["class"]), row["reported"], *(row[c] for c, _ in columns)]
            print("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
