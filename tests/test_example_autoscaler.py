"""``examples/autoscaler.py`` on its demand trace: every plan along the way is valid (as
``pdtp.evaluate`` sees it), serves its tick's demand within the budget, and is reached from
the previous one by exactly the printed stop/start moves."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

import pdtp

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
SCRIPT = EXAMPLES / "autoscaler.py"
TRACE = EXAMPLES / "demand_trace.csv"


@pytest.fixture(scope="module")
def autoscaler():
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT} not found (tests run from a checkout)")
    spec = importlib.util.spec_from_file_location("pdtp_example_autoscaler", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def evaluate(plan: pdtp.Plan) -> pdtp.Estimate:
    return pdtp.evaluate(
        plan.model,
        gpu=plan.gpu,
        workload=plan.workload,
        connector=plan.connector,
        prefill_tp=plan.prefill.tp,
        prefill_instances=plan.prefill.instances,
        decode_tp=plan.decode.tp,
        decode_instances=plan.decode.instances,
    )


def test_trace_is_short_and_realistic(autoscaler):
    trace = autoscaler.read_trace(TRACE)
    assert 20 <= len(trace) <= 40
    times = [t for t, _ in trace]
    assert times == sorted(times) and all(d > 0 for _, d in trace)


@pytest.mark.parametrize(
    ("gpu", "max_gpus", "headroom"), [("h100", 96, 0.1), ("mi300x", 96, 0.0), ("h200", 64, 0.2)]
)
def test_every_tick_serves_its_demand(autoscaler, gpu, max_gpus, headroom):
    trace = autoscaler.read_trace(TRACE)
    ticks = list(
        autoscaler.run(trace, model="llama-3.1-70b", gpu=gpu, max_gpus=max_gpus, headroom=headroom)
    )
    assert len(ticks) == len(trace)
    previous = None
    for tick, (t_s, demand) in zip(ticks, trace):
        plan = tick.plan
        assert (tick.t_s, tick.demand_rps) == (t_s, demand)
        assert not tick.clamped
        est = evaluate(plan)
        assert est.valid, (t_s, est.violations)
        assert plan.requests_per_s == est.requests_per_s
        assert plan.requests_per_s >= demand * (1 + headroom) >= demand
        assert plan.gpus_used <= max_gpus and plan.gpu == gpu
        if previous is None:
            assert tick.replan is None
        else:
            r = tick.replan
            assert (r.current_prefill, r.current_decode) == (previous.prefill, previous.decode)
            state = {("prefill", previous.prefill.tp): previous.prefill.instances,
                     ("decode", previous.decode.tp): previous.decode.instances}  # fmt: skip
            for role, tp, n in r.stop:
                state[(role, tp)] -= n
            for role, tp, n in r.start:
                state[(role, tp)] = state.get((role, tp), 0) + n
            assert {k: v for k, v in state.items() if v} == {
                ("prefill", plan.prefill.tp): plan.prefill.instances,
                ("decode", plan.decode.tp): plan.decode.instances,
            }
        previous = plan


def test_main_prints_moves_and_gpus(autoscaler, capsys):
    autoscaler.main(["--trace", str(TRACE)])
    out = capsys.readouterr().out.splitlines()
    trace = autoscaler.read_trace(TRACE)
    assert out[0].startswith("llama-3.1-70b on h100, at most 96 GPUs")
    assert "gpus" in out[1] and "moves" in out[1]
    rows = out[2 : 2 + len(trace)]
    assert len(rows) == len(trace)
    assert rows[0].split()[0] == "0" and "start" in rows[0]
    assert any("stop" in r for r in rows) and any(r.rstrip().endswith("-") for r in rows)
    assert out[-1].startswith("GPU-hours")


def test_demand_above_the_budget_is_clamped(autoscaler, tmp_path):
    csv = tmp_path / "spike.csv"
    csv.write_text("t_s,demand_rps\n0,5\n30,500\n60,5\n")
    ticks = list(autoscaler.run(autoscaler.read_trace(csv), gpu="h100", max_gpus=32))
    assert [t.clamped for t in ticks] == [False, True, False]
    best = pdtp.solve("llama-3.1-70b", 32, gpu="h100").requests_per_s
    assert ticks[1].plan.requests_per_s == pytest.approx(best)
    assert ticks[1].plan.gpus_used <= 32 and ticks[2].plan.requests_per_s >= 5


def test_bad_trace(autoscaler, tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("time,rps\n0,5\n")
    with pytest.raises(ValueError, match="t_s"):
        autoscaler.read_trace(csv)
