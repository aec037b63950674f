"""``pdtp.solve``: CP-SAT equals the exhaustive oracle, every plan passes ``pdtp.check`` and
``pdtp.evaluate``, infeasibility reasons are truthful and minimal, and solves are
deterministic, bounded and thread-safe."""

from __future__ import annotations

import json
import random
import re
import threading

import pytest
from ortools.sat.python import cp_model  # noqa: F401  (the tests time the search, not the import)

import pdtp
from pdtp.catalog import models
from pdtp.deployment import HostsNeededError

REQUIRED_GPUS = ["mi300x", "mi325x", "mi355x", "a100", "h100", "h200", "b200"]
ORACLE_BUDGETS = [1, 2, 3, 5, 8, 13, 24, 64, 128]


def solve_or_none(*args, **kwargs):
    try:
        return pdtp.solve(*args, **kwargs)
    except pdtp.InfeasibleError:
        return None


def key(plan):
    """What a plan deploys: its mode and each kind of instance (layout, count, GPU type)."""
    if plan is None:
        return None
    return (
        plan.serving,
        tuple((role, str(s.layout), s.instances, s.gpu) for role, s in plan.sides),
    )


def passes_check(m, plan, **kw):
    """Every plan passes ``pdtp.check``: its P/D layouts, or its aggregated layout."""
    if plan.serving == "agg":
        return pdtp.check(m, aggregated=plan.aggregated.layout, **kw).ok
    return pdtp.check(m, plan.prefill.layout, plan.decode.layout, connector=plan.connector, **kw).ok


def evaluate_plan(m, plan, gpu):
    if plan.serving == "agg":
        return pdtp.evaluate(
            m,
            gpu=gpu,
            aggregated=plan.aggregated.layout,
            aggregated_instances=plan.aggregated.instances,
        )
    return pdtp.evaluate(
        m,
        gpu=gpu,
        prefill_tp=plan.prefill.layout,
        prefill_instances=plan.prefill.instances,
        decode_tp=plan.decode.layout,
        decode_instances=plan.decode.instances,
        connector=plan.connector,
    )


def test_required_gpus_are_in_the_catalog():
    assert set(REQUIRED_GPUS) <= {g.name for g in pdtp.gpus()}


def sampled_pools(n: int, seed: int):
    """Pools as ``solve`` keywords: GPU counts (full nodes, a partial last one) and lists of
    partly free nodes, on the required GPU types."""
    rng = random.Random(seed)
    for _ in range(n):
        gpu = rng.choice(REQUIRED_GPUS)
        if rng.random() < 0.5:
            yield {"gpus": rng.choice(ORACLE_BUDGETS), "gpu": gpu}
        else:
            yield {"nodes": [rng.randint(1, 8) for _ in range(rng.randint(1, 5))], "gpu": gpu}


@pytest.mark.parametrize("connector", ["moriio", "nixl"])
def test_cpsat_agrees_with_oracle(connector):
    # CP-SAT against the exhaustive Rust oracle on sampled catalog models, GPU types and
    # pools (whole nodes, partial last nodes, partly free nodes).
    rng = random.Random(7)
    catalog = models()
    agreed = 0
    for pool in sampled_pools(90, seed=1 if connector == "moriio" else 2):
        m = rng.choice(catalog)
        cp = solve_or_none(m, connector=connector, **pool)
        ex = solve_or_none(m, connector=connector, method="enumerate", **pool)
        assert key(cp) == key(ex), (m.name, connector, pool)
        if cp is not None:
            assert cp.status == "OPTIMAL" and cp.proof in ("cpsat", "enumeration") and cp.gap == 0.0
            assert cp.requests_per_s == ex.requests_per_s
            agreed += 1
    # MoRIIO plans no P/D pair on NVIDIA GPUs (its worker needs AMD's MoRI).
    assert agreed > (20 if connector == "moriio" else 40)


@pytest.mark.parametrize("gpu", [g.name for g in pdtp.gpus()])
def test_every_plan_passes_check_and_evaluate(gpu):
    plans = 0
    for m in models():
        for budget in range(1, 65):
            plan = solve_or_none(m, budget, gpu=gpu, method="enumerate")
            if plan is None:
                continue
            plans += 1
            assert passes_check(m, plan, gpu=gpu), (m.name, budget)
            assert plan.gpus_used <= budget
            # Every TP group inside one node (DP ranks and pipeline stages may span nodes).
            assert max(s.tp for _, s in plan.sides) <= pdtp.gpu(gpu).gpus_per_node
            w = plan.workload
            assert plan.ttft_ms <= w.ttft_ms and plan.tpot_ms <= w.tpot_ms
            if budget in (8, 64):  # evaluate() is the slower, user-facing path
                est = evaluate_plan(m, plan, gpu)
                assert est.valid, est.violations
                assert est.requests_per_s == plan.requests_per_s
                assert est.gpus == plan.gpus_used
    assert plans > 500


def test_plan_is_at_least_as_good_as_any_valid_configuration():
    # Brute force over every configuration of a small budget through the public evaluate().
    m, gpu, budget = pdtp.model("llama-3.1-8b"), "h100", 6
    plan = pdtp.solve(m, budget, gpu=gpu, mode="disagg", layouts="tp")
    best = 0.0
    for p in (1, 2, 4, 8):
        for d in (1, 2, 4, 8):
            for np_ in range(1, budget + 1):
                for nd in range(1, budget + 1):
                    if p * np_ + d * nd > budget:
                        continue
                    e = pdtp.evaluate(
                        m,
                        gpu=gpu,
                        prefill_tp=p,
                        prefill_instances=np_,
                        decode_tp=d,
                        decode_instances=nd,
                    )
                    if e.valid:
                        best = max(best, e.requests_per_s)
    assert plan.requests_per_s == pytest.approx(best, rel=1e-6)
    # Aggregated instances of every TP size, through evaluate(aggregated=...).
    agg = pdtp.solve(m, budget, gpu=gpu, mode="agg", layouts="tp")
    best_agg = 0.0
    for t in (1, 2, 4, 8):
        for n in range(1, budget // t + 1):
            e = pdtp.evaluate(m, gpu=gpu, aggregated=t, aggregated_instances=n)
            if e.valid:
                best_agg = max(best_agg, e.requests_per_s)
    assert agg.requests_per_s == pytest.approx(best_agg, rel=1e-6)
    both = pdtp.solve(m, budget, gpu=gpu, layouts="tp")
    assert both.requests_per_s == pytest.approx(max(best, best_agg), rel=1e-6)
    assert both.alternative.requests_per_s == pytest.approx(min(best, best_agg), rel=1e-6)


def test_main_job_example():
    plan = pdtp.solve("llama-3.1-70b", gpus=24)
    assert plan.status == "OPTIMAL" and plan.gpu == "mi300x" and plan.connector == "moriio"
    assert plan.serving == "disagg" and plan.alternative.serving == "agg"
    assert plan.gpus_used <= 24
    assert plan.bottleneck in ("prefill", "decode", "balanced")
    d = json.loads(plan.to_json())
    assert d["prefill"]["tp"] == plan.prefill.tp and d["gpus_used"] == plan.gpus_used


def test_rejected_split_is_explained():
    plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    assert plan.rejected, "MoRIIO forbids the rule-blind optimum here"
    assert "KV heads per rank" in plan.rejected[0]  # vLLM 0.33.0 MoRIIO READ's message
    nixl = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", connector="nixl")
    assert nixl.requests_per_s >= plan.requests_per_s


def test_deterministic_across_threads():
    results: list[dict] = []

    def work():
        for _ in range(5):
            d = pdtp.solve("qwen3-30b-a3b", 40, gpu="h200").to_dict()
            d.pop("solve_ms")
            results.append(d)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 30
    assert all(r == results[0] for r in results)


def test_tiny_time_limit_still_returns_a_valid_plan():
    plan = pdtp.solve("llama-3.1-70b", 4096, gpu="mi300x", time_limit_s=1e-6)
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert passes_check("llama-3.1-70b", plan)
    assert plan.gpus_used <= 4096


# ---- infeasibility: truthful and minimal --------------------------------------------------


def test_weights_do_not_fit_then_fixes_work():
    with pytest.raises(pdtp.InfeasibleError) as info:
        pdtp.solve("llama-3.1-405b", 64, gpu="h100", layouts="tp")
    msg = str(info.value)
    assert "no tp <= 8 fits" in msg and "bf16 weights" in msg
    assert "use fp8 weights" in msg and "allow tp=16" in msg
    assert info.value.reasons[0] == msg and len(info.value.reasons) >= 3
    fp8 = pdtp.model("llama-3.1-405b").with_dtypes(weight_dtype="fp8")
    assert pdtp.solve(fp8, 64, gpu="h100", layouts="tp")
    assert pdtp.solve("llama-3.1-405b", 64, gpu="h100", max_tp=16, layouts="tp")
    # By default the pipeline layouts find a plan: no TP group crosses a node.
    plan = pdtp.solve("llama-3.1-405b", 64, gpu="h100")
    assert all(s.pp > 1 and s.tp <= 8 for _, s in plan.sides)


def test_tpot_unreachable_names_the_best_and_relaxing_fixes_it():
    w = pdtp.Workload(tpot_ms=1)
    with pytest.raises(pdtp.InfeasibleError) as info:
        pdtp.solve("llama-3.1-70b", 64, gpu="h100", workload=w, mode="disagg")
    m = re.search(
        r"tpot_ms=1 unreachable: best decode TPOT is ([0-9.]+) ms at tp=(\d+)", str(info.value)
    )
    assert m, str(info.value)
    best = float(m.group(1))
    plan = pdtp.solve(
        "llama-3.1-70b", 64, gpu="h100", workload=pdtp.Workload(tpot_ms=best * 1.01), mode="disagg"
    )
    assert plan.decode.tp == int(m.group(2))


def test_ttft_unreachable_names_the_best_and_relaxing_fixes_it():
    w = pdtp.Workload(ttft_ms=5)
    with pytest.raises(pdtp.InfeasibleError) as info:
        pdtp.solve("llama-3.1-70b", 64, gpu="h100", workload=w, mode="disagg")
    m = re.search(r"ttft_ms=5 unreachable: best prefill TTFT is ([0-9.]+) ms", str(info.value))
    assert m, str(info.value)
    relaxed = pdtp.Workload(ttft_ms=float(m.group(1)) + 1)
    assert pdtp.solve("llama-3.1-70b", 64, gpu="h100", workload=relaxed, mode="disagg")


def test_budget_too_small_names_the_smallest_split():
    with pytest.raises(pdtp.InfeasibleError, match="at least 2 GPUs"):
        pdtp.solve("llama-3.1-8b", 1, gpu="h100", mode="disagg")
    # One aggregated instance needs no second GPU.
    assert pdtp.solve("llama-3.1-8b", 1, gpu="h100").serving == "agg"
    with pytest.raises(pdtp.InfeasibleError) as info:
        pdtp.solve("llama-3.1-70b", 3, gpu="h100", mode="disagg")
    m = re.search(r"needs (\d+) GPUs", str(info.value))
    assert m, str(info.value)
    assert pdtp.solve("llama-3.1-70b", int(m.group(1)), gpu="h100", mode="disagg")


def test_infeasible_is_pdtp_error_with_reasons():
    with pytest.raises(pdtp.PdtpError) as info:
        pdtp.solve("llama-3.1-405b", 64, gpu="h100", layouts="tp")
    assert isinstance(info.value, pdtp.InfeasibleError)
    assert all(isinstance(r, str) and r for r in info.value.reasons)


# ---- outputs --------------------------------------------------------------------------------


@pytest.mark.parametrize(("gpu", "connector"), [("mi300x", "moriio"), ("h100", "nixl")])
def test_vllm_commands(gpu, connector):
    plan = pdtp.solve("llama-3.1-8b", 20, gpu=gpu, connector=connector, mode="disagg")
    with pytest.raises(HostsNeededError, match="pdtp deploy --plan"):
        plan.vllm_commands()  # 3 nodes: the lines hold addresses only a deployment knows
    lines = plan.vllm_commands(node_hosts=["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    dep = pdtp.deploy(plan, node_hosts=["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    deployed = {i.launch.command for i in dep.instances}
    assert len(lines) == plan.prefill.instances + plan.decode.instances
    env = "HIP_VISIBLE_DEVICES" if gpu.startswith("mi") else "CUDA_VISIBLE_DEVICES"
    per_node: dict[str, list[tuple[int, set[int]]]] = {}
    roles = {"prefill": 0, "decode": 0}
    for line in lines:
        assert line.startswith(env + "=")
        # The same line `pdtp deploy` writes (one launch-line maker).
        assert line.split("  # ")[0] in deployed
        devices = {int(x) for x in re.match(env + r"=([0-9,]+)", line).group(1).split(",")}
        port = int(re.search(r"--port (\d+)", line).group(1))
        tp = int(re.search(r"--tensor-parallel-size (\d+)", line).group(1))
        assert len(devices) == tp
        node, role = re.search(r"# node (\d+), (prefill|decode) \d+$", line).groups()
        roles[role] += 1
        assert tp == (plan.prefill.tp if role == "prefill" else plan.decode.tp)
        cfg = json.loads(re.search(r"--kv-transfer-config '(.+?)'", line).group(1))
        if connector == "moriio":
            assert cfg["kv_connector"] == "MoRIIOConnector"
            assert cfg["kv_role"] == ("kv_producer" if role == "prefill" else "kv_consumer")
            assert cfg["kv_connector_extra_config"]["http_port"] == port
        else:
            assert cfg == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
            assert f"VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.{int(node) + 1}" in line
        per_node.setdefault(node, []).append((port, devices))
    assert roles == {"prefill": plan.prefill.instances, "decode": plan.decode.instances}
    for entries in per_node.values():
        ports = [p for p, _ in entries]
        assert len(set(ports)) == len(ports)  # distinct ports on a node
        used = [d for _, ds in entries for d in ds]
        assert len(set(used)) == len(used) and max(used) < 8  # no GPU shared, inside node


@pytest.mark.parametrize(
    ("kwargs", "exc", "field"),
    [
        ({"gpus": 0}, pdtp.InvalidArgumentError, "gpus"),
        ({"gpus": 2.5}, TypeError, "gpus"),
        ({"method": "milp"}, pdtp.InvalidArgumentError, "method"),
        ({"max_tp": 0}, pdtp.InvalidArgumentError, "max_tp"),
        ({"gpu": "tpu-v5"}, pdtp.UnknownNameError, "tpu-v5"),
        ({"connector": "mooncake"}, pdtp.UnknownNameError, "connector"),
        ({"time_limit_s": 0}, pdtp.InvalidArgumentError, "time_limit_s"),
        ({"gpu_memory_utilization": 1.5}, pdtp.InvalidArgumentError, "gpu_memory_utilization"),
        ({"workload": {"isl": 0}}, pdtp.InvalidArgumentError, "isl"),
        ({"workload": {"foo": 1}}, pdtp.InvalidArgumentError, "foo"),
    ],
)
def test_bad_arguments(kwargs, exc, field):
    args = {"gpus": 8, **kwargs}
    with pytest.raises(exc, match=field):
        pdtp.solve("llama-3.1-8b", **args)


def test_cli_solve(capsys):
    from pdtp.cli import main

    assert main(["solve", "llama-3.1-70b", "--gpus", "24"]) == 0
    out = capsys.readouterr().out
    assert "OPTIMAL" in out and "pdtp deploy --plan" in out and "bottleneck" in out
    assert main(["solve", "llama-3.1-70b", "--gpus", "24", "--json", "--gpu", "h100"]) == 0
    d = json.loads(capsys.readouterr().out)
    # Three nodes: no line that looks ready but is not; the deploy command instead.
    assert d["status"] == "OPTIMAL" and d["vllm_commands"] is None
    assert "pdtp deploy --plan plan.json --node-hosts ADDR0,ADDR1,ADDR2" in d["launch_note"]
    assert main(["solve", "llama-3.1-8b", "--gpus", "8", "--json", "--gpu", "h100"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["vllm_commands"]) == d["aggregated"]["instances"]  # one node: ready
    assert main(["solve", "llama-3.1-405b", "--gpus", "8", "--gpu", "h100"]) == 1
    assert "INFEASIBLE" in capsys.readouterr().out


def test_first_solve_with_a_short_limit_does_not_wait_for_ortools():
    # In a fresh interpreter OR-Tools is not imported yet (0.4-1 s): with a 0.2 s limit the
    # solve does not wait for it past the limit; the exhaustive oracle proves the plan within
    # it and says so, and the import carries on for later calls. Here the import never ends
    # (a finder that blocks it): a solve that waited for it would never return, and the
    # subprocess's timeout (a backstop against that hang, not a speed bound) would fail it.
    # Tokens per dollar: a ratio the enumeration proof does not bound, so CP-SAT is asked
    # for; a throughput solve is proven by the enumeration without OR-Tools at all.
    import subprocess
    import sys

    code = (
        "import sys, threading, pdtp\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ortools' or name.startswith('ortools.'):\n"
        "            threading.Event().wait()\n"
        "        return None\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "pdtp.model('llama-3.1-70b')\n"
        "p = pdtp.solve('llama-3.1-70b', 24, time_limit_s=0.2, objective='tokens_per_dollar')\n"
        "print(p.status, p.method, len(p.notes), flush=True)\n"
        "p = pdtp.solve('llama-3.1-70b', 24, time_limit_s=0.2)\n"
        "print(p.status, p.method, p.proof, flush=True)\n"
        "import os; os._exit(0)\n"  # the blocked import thread must not hold the exit
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    first, second = out.stdout.splitlines()
    assert tuple(first.split()) == ("OPTIMAL", "enumerate", "1"), out.stdout
    status, method, proof = second.split()
    assert (status, proof) == ("OPTIMAL", "enumeration") and method != "enumerate", out.stdout


def test_method_and_status_are_reported():
    plan = pdtp.solve("llama-3.1-70b", 24)
    # The enumeration of the competitive pairs' counts proved it (CP-SAT where that is too
    # large); who decided is the closed forms' plan when the proof kept it.
    assert (plan.proof, plan.status, plan.gap) == ("enumeration", "OPTIMAL", 0.0)
    assert plan.method in ("closed-form", "enumeration")
    d = plan.to_dict()
    assert d["proof"] == "enumeration" and d["gap"] == 0.0 and d["objective"] == "throughput"
    assert d["method"] == plan.method
    assert len(d["placement"]) == sum(s.instances for _, s in plan.sides)
    oracle = pdtp.solve("llama-3.1-70b", 24, method="enumerate")
    assert oracle.method == "enumerate" and key(oracle) == key(plan)
