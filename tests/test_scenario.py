"""Issue 24 part 2: one public ``pdtp.Scenario`` (and ``pdtp.SolverConfig``), validated once,
accepted by every planner, the simulator, the sweep and the CLI; the keyword signatures are
thin wrappers that build one, so a keyword call and a Scenario call ask the same question.

The answers compared are live calls of both forms (no predicted number is written here)."""

from __future__ import annotations

import dataclasses
import json

import pytest

import pdtp
from pdtp.scenario import FIELDS, SolverConfig, load

SMALL = {"model": "llama-3.1-8b", "gpus": 8, "gpu": "h100", "connector": "nixl"}


def _same_plan(a: pdtp.Plan, b: pdtp.Plan) -> None:
    """The same plan, but for how long each search took."""
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        for key in [k for k in d if k.endswith("_ms") and "solve" in k]:
            d.pop(key)
    assert da == db


# ---- the same question, asked either way ----------------------------------------------------


def test_solve_of_a_scenario_is_solve_of_its_keywords():
    keywords = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", mode="disagg")
    sc = pdtp.Scenario(model="llama-3.1-70b", gpus=24, gpu="mi300x", mode="disagg")
    _same_plan(pdtp.solve(sc), keywords)
    assert pdtp.solve(sc).serving == "disagg"


def test_keywords_beside_a_scenario_replace_its_fields():
    sc = pdtp.Scenario(**SMALL)
    smaller = pdtp.solve(sc, gpus=4)
    _same_plan(smaller, pdtp.solve("llama-3.1-8b", gpus=4, gpu="h100", connector="nixl"))
    assert smaller.gpus_used <= 4
    assert sc.gpus == 8  # the scenario itself is unchanged


def test_size_for_replan_and_pareto_take_a_scenario():
    sc = pdtp.Scenario(model="llama-3.1-70b", gpus=64, gpu="mi300x", demand_rps=10.0)
    _same_plan(pdtp.size_for(sc), pdtp.size_for("llama-3.1-70b", 10.0, max_gpus=64, gpu="mi300x"))
    now = {
        "model": "llama-3.1-70b",
        "gpu": "mi300x",
        "prefill": {"tp": 2, "instances": 2},
        "decode": {"tp": 2, "instances": 1},
    }
    asked = pdtp.replan(now, pdtp.Scenario(demand_rps=12.0, gpus=64))
    told = pdtp.replan(now, 12.0, max_gpus=64)
    _same_plan(asked.plan, told.plan)
    assert (asked.cost, asked.start, asked.stop) == (told.cost, told.start, told.stop)
    frontier = pdtp.pareto(pdtp.Scenario(**SMALL), tpot_ms=[10, 50])
    direct = pdtp.pareto("llama-3.1-8b", gpus=8, gpu="h100", connector="nixl", tpot_ms=[10, 50])
    assert [p.summary for p in frontier.points] == [p.summary for p in direct.points]


def test_fleet_evaluate_simulate_and_sweep_take_a_scenario():
    demands = [("llama-3.1-8b", 20.0), ("llama-3.1-70b", 5.0)]
    fleet = pdtp.solve_fleet(pdtp.Scenario(demands=demands, gpus=16))
    direct_fleet = pdtp.solve_fleet(demands, gpus=16)
    assert {k: p.summary() for k, p in fleet.plans.items()} == {
        k: p.summary() for k, p in direct_fleet.plans.items()
    }
    assert fleet.served_fraction == direct_fleet.served_fraction

    sc = pdtp.Scenario(model="llama-3.1-70b", gpu="h100", connector="nixl", gpus=24)
    split = dict(prefill_tp=4, prefill_instances=2, decode_tp=8, decode_instances=2)
    e = pdtp.evaluate(sc, **split)
    assert e == pdtp.evaluate("llama-3.1-70b", gpu="h100", connector="nixl", **split)

    # A scenario simulates as the plan pdtp.solve gives it.
    on = pdtp.Scenario(model="llama-3.1-70b", gpus=24, gpu="mi300x")
    a = pdtp.simulate(on, rate_rps=10, requests=300)
    b = pdtp.simulate(pdtp.solve(on), rate_rps=10, requests=300)
    assert (a.ttft_ms.p90, a.tpot_ms.p90) == (b.ttft_ms.p90, b.tpot_ms.p90)

    rows = pdtp.sweep(
        pdtp.Scenario(model="llama-3.1-70b", gpu="h100"), gpus=[1, 24], workers=1, as_frame=False
    )
    direct = pdtp.sweep("llama-3.1-70b", gpu="h100", gpus=[1, 24], workers=1, as_frame=False)
    assert [(r["status"], r["mode"]) for r in rows] == [(r["status"], r["mode"]) for r in direct]


def test_a_field_the_function_cannot_use_is_refused_not_dropped():
    with pytest.raises(pdtp.InvalidArgumentError, match="sweep does not take a scenario's layouts"):
        pdtp.sweep(pdtp.Scenario(model="llama-3.1-8b", layouts="tp"), gpus=[8], workers=1)
    with pytest.raises(pdtp.InvalidArgumentError, match="needs the scenario's demands"):
        pdtp.solve_fleet(pdtp.Scenario(**SMALL))
    with pytest.raises(pdtp.InvalidArgumentError, match="objective must be one of gpus, cost"):
        pdtp.size_for(pdtp.Scenario(**SMALL, demand_rps=1.0, objective="throughput"))
    with pytest.raises(pdtp.InvalidArgumentError, match="pareto .* objective does not apply"):
        pdtp.pareto(pdtp.Scenario(**SMALL, objective="cost"))


# ---- solver settings apart ------------------------------------------------------------------


def test_solver_settings_travel_apart_from_the_question():
    sc = pdtp.Scenario(**SMALL)
    oracle = pdtp.solve(sc, solver=pdtp.SolverConfig(method="enumerate"))
    assert oracle.method == "enumerate"
    assert pdtp.solve(sc, solver={"method": "enumerate"}).method == "enumerate"
    # A keyword beside the solver wins, as beside a scenario.
    assert pdtp.solve(sc, solver=SolverConfig(method="enumerate"), method="cpsat").method != (
        "enumerate"
    )
    with pytest.raises(pdtp.InvalidArgumentError, match="method must be one of cpsat, enumerate"):
        SolverConfig(method="simplex")
    with pytest.raises(pdtp.ArgumentTypeError, match="solver must be a pdtp.SolverConfig"):
        pdtp.solve(sc, solver=3)
    with pytest.raises(pdtp.InvalidArgumentError, match="time_limit_s"):
        SolverConfig(time_limit_s=0)


# ---- validated once -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "names"),
    [
        ({"mode": "both"}, pdtp.InvalidArgumentError, ["mode", "auto", "disagg", "agg"]),
        ({"objective": "speed"}, pdtp.InvalidArgumentError, ["objective", "throughput", "max_min"]),
        ({"layouts": "zz"}, pdtp.PdtpError, ["layouts"]),
        ({"gpu_memory_utilization": 1.5}, pdtp.InvalidArgumentError, ["gpu_memory_utilization"]),
        ({"max_tp": 0}, pdtp.InvalidArgumentError, ["max_tp"]),
        ({"gpus": 8, "nodes": [8]}, pdtp.InvalidArgumentError, ["gpus=", "nodes="]),
        ({"model": 3}, pdtp.ArgumentTypeError, ["model"]),
        ({"model": "no-such-model"}, pdtp.UnknownNameError, ["no-such-model"]),
        ({"connector": "carrier-pigeon"}, pdtp.UnknownNameError, ["carrier-pigeon"]),
        ({"slo_percentile": 1.0}, pdtp.InvalidArgumentError, ["slo_percentile"]),
        ({"demand_rps": -1}, pdtp.InvalidArgumentError, ["demand_rps"]),
        ({"constants": {"mbu": 9}}, pdtp.InvalidArgumentError, ["mbu"]),
        ({"workload": {"isl": 0}}, pdtp.InvalidArgumentError, ["isl"]),
        ({"demands": []}, pdtp.InvalidArgumentError, ["demands"]),
        (
            {"model": "llama-3.1-8b", "demands": [("llama-3.1-8b", 1.0)]},
            pdtp.InvalidArgumentError,
            ["model=", "demands="],
        ),
    ],
)
def test_a_bad_field_is_one_pdtp_error_naming_it(fields, error, names):
    with pytest.raises(error) as info:
        pdtp.Scenario(**fields)
    for name in names:
        assert name in str(info.value)


def test_size_for_names_the_budget_max_gpus():
    with pytest.raises(pdtp.InvalidArgumentError, match="max_gpus"):
        pdtp.size_for("llama-3.1-8b", 1.0, max_gpus=-3)
    with pytest.raises(pdtp.InvalidArgumentError, match="^gpus must be"):
        pdtp.solve("llama-3.1-8b", gpus=-3)


def test_the_model_is_resolved_once_and_handed_down(monkeypatch):
    import pdtp.catalog as catalog

    sc = pdtp.Scenario(**SMALL)
    looked_up: list[object] = []
    real = catalog.resolve_model

    def counting(x, **kw):
        if isinstance(x, str):
            looked_up.append(x)
        return real(x, **kw)

    monkeypatch.setattr(catalog, "resolve_model", counting)
    assert sc.resolved_model.name == "llama-3.1-8b"
    pdtp.solve(sc)
    pdtp.solve(sc, gpus=4)  # a replaced field keeps the resolved model
    pdtp.solve(sc, slo_percentile=0.9)  # the goodput path: plan → simulator → rate search
    assert looked_up == []


def test_a_scenario_is_frozen_and_keeps_no_reference_to_the_callers_lists():
    nodes = [8, 8, 4]
    sc = pdtp.Scenario(model="llama-3.1-8b", nodes=nodes, gpu="h100")
    nodes.append(8)
    assert sc.nodes == (8, 8, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.gpus = 3  # type: ignore[misc]
    with pytest.raises(pdtp.InvalidArgumentError, match="unknown scenario field"):
        sc.replace(gpu_count=3)


# ---- to and from plain data -----------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        SMALL,
        {
            "model": "llama-3.1-70b",
            "nodes": {"mi355x": [8, 8], "mi300x": [[0, 1], [4, 5, 6, 7]]},
            "prices": {"mi355x": 3.0, "mi300x": 2.0},
            "workload": pdtp.Workload(isl=1024, osl=128, ttft_ms=None),
            "objective": "tokens_per_dollar",
            "mode": "disaggregated",
            "layouts": "tp,tp2dp4ep",
            "constants": {"mbu": 0.7},
            "max_acks": 2,
            "gpu_memory_utilization": 0.85,
            "vllm_version": "0.11.0",
        },
        {"demands": [("llama-3.1-8b", 2.0), {"model": "llama-3.1-70b", "demand_rps": 1.0}]},
    ],
)
def test_to_dict_is_json_and_from_dict_reads_it_back(fields):
    sc = pdtp.Scenario(**fields)
    text = json.dumps(sc.to_dict())
    again = pdtp.Scenario.from_dict(json.loads(text))
    assert again == sc
    assert again.to_dict() == sc.to_dict()


def test_a_model_given_whole_round_trips():
    m = pdtp.model("llama-3.1-8b").with_dtypes(weight_dtype="fp8")
    sc = pdtp.Scenario(model=m, gpus=8, gpu="h100")
    again = pdtp.Scenario.from_dict(json.loads(json.dumps(sc.to_dict())))
    assert again.resolved_model == m
    assert pdtp.solve(again).gpus_used == pdtp.solve(sc).gpus_used


def test_from_dict_names_unknown_fields_and_the_allowed_ones():
    with pytest.raises(pdtp.InvalidArgumentError) as info:
        pdtp.Scenario.from_dict({"model": "llama-3.1-8b", "gpu_type": "h100"})
    assert "gpu_type" in str(info.value)
    assert all(f in str(info.value) for f in FIELDS)


def test_a_scenario_file_json_and_yaml(tmp_path):
    sc = pdtp.Scenario(**SMALL, workload={"isl": 1024, "osl": 256})
    j = tmp_path / "sc.json"
    j.write_text(json.dumps({**sc.to_dict(), "solver": {"time_limit_s": 5}}))
    assert load(j) == (sc, SolverConfig(time_limit_s=5))
    yaml = pytest.importorskip("yaml")
    y = tmp_path / "sc.yaml"
    y.write_text(yaml.safe_dump(sc.to_dict()))
    assert pdtp.Scenario.load(y) == sc
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "llama-3.1-8b", "mode": "sideways"}))
    with pytest.raises(pdtp.InvalidArgumentError, match="bad.json: mode must be one of"):
        load(bad)
    with pytest.raises(pdtp.InvalidArgumentError, match=r"\.json, \.yaml or \.yml"):
        load(tmp_path / "sc.toml")


# ---- the CLI: --scenario FILE, flags beside it replace its fields ----------------------------


def _cli_json(capsys, *argv: str) -> dict:
    from pdtp.cli import main

    assert main(list(argv)) == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("solve_ms", None)
    return out


def test_cli_scenario_file_asks_what_the_flags_ask(tmp_path, capsys):
    path = tmp_path / "q.json"
    path.write_text(
        json.dumps(
            {**SMALL, "workload": {"isl": 1024, "osl": 256}, "solver": {"method": "enumerate"}}
        )
    )
    flags = ["llama-3.1-8b", "--gpus", "8", "--gpu", "h100", "--connector", "nixl"]
    flags += ["--isl", "1024", "--osl", "256", "--method", "enumerate", "--json"]
    by_file = _cli_json(capsys, "solve", "--scenario", str(path), "--json")
    assert by_file == _cli_json(capsys, "solve", *flags)
    # A flag given beside the file replaces its field (here the pool and one workload field).
    smaller = _cli_json(
        capsys, "solve", "--scenario", str(path), "--gpus", "4", "--osl", "128", "--json"
    )
    told = [*flags[:2], "4", *flags[3:10], "128", *flags[11:]]
    assert "128" in told and "4" in told
    assert smaller == _cli_json(capsys, "solve", *told)
    sized = _cli_json(capsys, "size-for", "--scenario", str(path), "--demand", "2", "--json")
    assert sized == _cli_json(
        capsys, "size-for", "llama-3.1-8b", "--demand", "2", "--max-gpus", "8", "--gpu", "h100",
        "--connector", "nixl", "--isl", "1024", "--osl", "256", "--method", "enumerate", "--json",
    )  # fmt: skip
