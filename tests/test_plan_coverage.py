"""benchmarks/plan_coverage.py: each plan's checks run on their own, a failure is counted
with its first line (never raised), and the table reports the shares it measured."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def cov():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "plan_coverage.py"
    spec = importlib.util.spec_from_file_location("bench_plan_coverage", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_p_d_plan_passes_the_checks_that_work_and_simulates(cov):
    row = cov.check_scenario("llama-3.1-8b", "h100", 8)
    assert row["feasible"] and set(row["results"]) == {k for k, _ in cov.CHECKS}
    # The simulator takes every plan kind: this check must pass whatever else fails.
    assert row["results"]["simulate"] is None, row["results"]
    assert row["kind"].startswith(("agg", "P/D"))


def test_failures_are_counted_not_raised(cov, monkeypatch):
    def broken(argv):
        raise RuntimeError("boom")

    monkeypatch.setattr(cov, "_cli", lambda argv: (70, "", "Traceback\nRuntimeError: boom"))
    monkeypatch.setattr(cov, "_round_trip", broken)
    row = cov.check_scenario("llama-3.1-8b", "h100", 8)
    results = row["results"]
    assert all(v is not None for v in results.values())
    assert results["simulate"] == "exit 70: RuntimeError: boom"
    assert results["round_trip"] == "RuntimeError: boom"
    assert results["scripts_valid"] == "not deployed (scripts failed)"
    summary = cov.summarize([row, {"model": "x", "gpu": "h100", "gpus": 8, "feasible": False}])
    assert summary["feasible"] == 1 and summary["infeasible"] == 1
    assert all(c == {"ok": 0, "of": 1} for c in summary["checks"].values())
    table = cov.render(summary, "header")
    assert "| all (1) | 0% (0) |" in table and "simulate: 1x exit 70: RuntimeError: boom" in table


def test_fast_mode_runs_a_seeded_sample(cov, tmp_path, capsys, monkeypatch):
    calls = []

    def fake(args):
        calls.append(args)
        return {"model": args[0], "gpu": args[1], "gpus": args[2], "feasible": False}

    monkeypatch.setattr(cov, "_check", fake)
    out = tmp_path / "cov.json"
    assert cov.main(["--fast", "--workers", "1", "--json", str(out)]) == 0
    assert len(calls) == cov.FAST_SAMPLE and calls == sorted(calls)
    assert "a sample of 10 (seed 0)" in capsys.readouterr().out
    assert json.loads(out.read_text())["summary"]["scenarios"] == cov.FAST_SAMPLE
