"""The "before" column of the accuracy table: performance model v1 (pdtp up to commit
3479d96) with its shipped default constants, on the measured data.

    python benchmarks/accuracy_v1.py [--json PATH]     # run with a v1 install of pdtp

v1 predicted each row with ``pdtp.calibration.predict_point``: TPOT = decode step at batch C
plus the prefill share, TTFT = 1.8 × prefill time, throughput by Little's law. Its defaults
were fitted on ``perf-points.csv`` (in sample there) and never saw ``measured-serving.csv``
(out of sample). Rows are mapped to v1's columns: nominal isl/osl, mean TTFT and TPOT, KV
dtype fp8 for the vLLM runs (their launch flag). This script is kept to document how the
"before" numbers in README.md were produced; v2's own benchmark is ``accuracy.py``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from pathlib import Path

REF = Path(__file__).resolve().parents[1] / "tests" / "data" / "reference"


def _serving_rows() -> list[dict[str, object]]:
    out = []
    with open(REF / "measured-serving.csv", newline="") as f:
        for r in csv.DictReader(f):
            model = "deepseek-r1" if r["model"].startswith("DeepSeek") else r["model"]
            out.append(
                {
                    "model": model,
                    "gpu": r["hw"],
                    "weight_dtype": r["precision"],
                    "kv_dtype": "fp8" if r["framework"] == "vllm" else "bf16",
                    "tp": r["tp"],
                    "isl": r["isl"],
                    "osl": r["osl"],
                    "concurrency": r["concurrency"],
                    "ttft_ms": r["ttft_mean_ms"],
                    "tpot_ms": r["tpot_mean_ms"],
                    "output_tokens_per_s": r["output_tps"],
                }
            )
    return out


def main() -> int:
    from pdtp.calibration import point_errors

    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    # The whole run takes well under a second: CI's fast mode is the run itself.
    parser.add_argument("--fast", action="store_true", help="CI's run (the same run)")
    args = parser.parse_args()
    result: dict[str, dict[str, dict[str, float]]] = {}
    for label, rows in (
        ("measured-serving.csv", _serving_rows()),
        ("perf-points.csv", str(REF / "perf-points.csv")),
    ):
        errors = point_errors(rows)
        table: dict[str, dict[str, float]] = {}
        for kind in ("tpot_ms", "ttft_ms", "output_tokens_per_s"):
            for vendor in ("AMD", "NVIDIA"):
                xs = sorted(
                    e.rel_error for e in errors if e.kind == kind and e.point.gpu.vendor == vendor
                )
                if xs:
                    # Linear interpolation between closest ranks, as accuracy.py's summaries.
                    pos = 0.9 * (len(xs) - 1)
                    lo = math.floor(pos)
                    hi = min(lo + 1, len(xs) - 1)
                    p90 = xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
                    table[f"{kind}/{vendor}"] = {
                        "n": len(xs),
                        "median": statistics.median(xs),
                        "p90": p90,
                    }
        result[label] = table
        for key, v in table.items():
            med, p90 = 100 * v["median"], 100 * v["p90"]
            print(f"{label} {key}: n={v['n']} median {med:.1f}% p90 {p90:.1f}%")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
