"""Every planner's time limit holds for the whole call, the Rust steps after CP-SAT
included (issue 23, problem 1): the rule-blind comparison, the other serving mode's best
plan and the hint stop their exact node searches at the deadline, the candidate build
falls back to the relaxation there, and calibrate stops reading rows.

Asserted on the planners' own reported timings (``solve_ms``, measured by the code from its
first line) and on behaviour, never on a wall clock around the call. The slack is the
documented 50 ms (building the plan after the deadline); OR-Tools is imported before the
timed calls (its first import is the documented start-up, about 0.5-1 s).
"""

from __future__ import annotations

import random
import warnings

import pytest
from ortools.sat.python import cp_model  # noqa: F401  (imported before any timed call)

import pdtp
from pdtp import _core
from pdtp.planning import scenario
from pdtp.planning.decide import CUT_NOTE

SLACK_MS = 50.0


def partly_free(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, 8) for _ in range(n)]


def within(call, limit_s: float, tries: int = 3):
    """``call()``'s plan, asserting its own ``solve_ms`` is within the limit plus the slack
    on the best of a few tries: a loaded machine may stall one call (load 12 on 2 cores
    was seen), unbounded work overruns them all. Returns the last plan (or Replan)."""
    seen = []
    for _ in range(tries):
        out = call()
        plan = getattr(out, "plan", out)
        seen.append(plan.solve_ms)
        if plan.solve_ms <= limit_s * 1e3 + SLACK_MS:
            return out
    raise AssertionError(f"solve_ms {seen} over time_limit_s={limit_s} + {SLACK_MS} ms")


@pytest.fixture(scope="module", autouse=True)
def warm():
    pdtp.solve("llama-3.1-8b", 8, gpu="h100")  # catalog, performance model, OR-Tools


def test_solve_with_pipeline_layouts_on_many_partly_free_nodes_ends_in_time():
    # Issue 23: 256 nodes took 1.5 s at 0.05 s (the rule-blind comparison's node searches);
    # 1,024 nodes 24.6 s.
    for n in (256, 1024):
        nodes = partly_free(n)
        plan = within(
            lambda nodes=nodes: pdtp.solve(
                "llama-3.1-70b", nodes=nodes, gpu="mi300x", layouts="tp,pp", time_limit_s=0.05
            ),
            0.05,
        )
        assert plan.status in ("OPTIMAL", "FEASIBLE")
        assert plan.gpus_used <= sum(partly_free(n))


def test_solve_at_65536_gpus_with_every_layout_ends_in_time_and_says_what_it_skipped():
    plan = within(
        lambda: pdtp.solve(
            "qwen3-30b-a3b", 65536, gpu="h200", connector="nixl", layouts="all", time_limit_s=0.05
        ),
        0.05,
    )
    assert plan.status in ("OPTIMAL", "FEASIBLE") and plan.gpus_used <= 65536
    # Unhurried, the same call finds a plan at least as good and notes nothing skipped.
    full = pdtp.solve("qwen3-30b-a3b", 65536, gpu="h200", connector="nixl", layouts="all")
    assert CUT_NOTE not in full.notes
    assert full.requests_per_s >= plan.requests_per_s * (1 - 1e-9)


def test_two_gpu_types_on_thousands_of_nodes_end_in_time():
    # Issue 23: two GPU types x 4,096 nodes ran past 4 minutes.
    nodes = {"mi355x": partly_free(4096, 1), "mi300x": partly_free(4096, 2)}
    within(lambda: pdtp.solve("llama-3.1-70b", nodes=nodes, time_limit_s=0.5), 0.5)


def test_size_for_and_replan_end_in_time_on_many_nodes():
    nodes = partly_free(1024, 3)
    plan = within(
        lambda: pdtp.size_for(
            "llama-3.1-70b", 40.0, nodes=nodes, gpu="mi300x", layouts="tp,pp", time_limit_s=0.05
        ),
        0.05,
    )
    within(lambda: pdtp.replan(plan, 60.0, nodes=nodes, layouts="tp,pp", time_limit_s=0.05), 0.05)


def test_candidates_deadline_bounds_the_closed_form_help():
    # The core's own contract: after the deadline passed, the hint, rule-blind and
    # other-mode comparisons skip their exact searches (and say so), never fail.
    pool = scenario.resolve_pool(None, partly_free(1024), "mi300x", None, None)
    sc = scenario.build(
        [("llama-3.1-70b", None, 0.0, 1.0, None)],
        pool,
        connector="moriio",
        vllm_version=None,
        objective="throughput",
        max_tp=None,
        max_acks=None,
        gpu_memory_utilization=0.9,
        constants=None,
        mode="auto",
        layouts="tp,pp",
    )
    late = _core.candidates(sc.core, time_limit_s=0.0)
    unhurried = _core.candidates(sc.core)
    assert late.out_of_time and not unhurried.out_of_time
    best = unhurried.hint()
    assert best is not None and unhurried.rule_blind() is not None
    # Late answers are plans that fit (or none), never better than the unhurried ones.
    hint = late.hint()
    if hint is not None:
        assert late.feasible(hint) is not False and unhurried.compare(hint, best) >= 0
    blind = late.rule_blind()  # a refused pair's plan: compared, never deployed
    if blind is not None:
        assert unhurried.compare(blind, unhurried.rule_blind()) >= 0


def test_calibrate_stops_reading_rows_at_its_limit():
    # Issue 23: 150,000 rows at time_limit_s=0.5 took 1.75 s: every row was materialised
    # before the first deadline check. Now the rows are read one by one under the limit.
    row = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "isl": 1000, "osl": 200,
           "concurrency": 32, "tpot_ms": 9.5}  # fmt: skip
    taken = 0

    def rows():
        nonlocal taken
        for _ in range(150_000):
            taken += 1
            yield row

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(pdtp.InvalidArgumentError, match="time limit"):
            pdtp.calibrate(rows(), time_limit_s=0.05)
    assert taken < 150_000


# ---- the node list is read inside the time limit: C-speed paths, bounds stated up front ----


def test_a_node_list_past_the_bound_is_refused_naming_it():
    over = [1] * (scenario.MAX_NODES + 1)
    with pytest.raises(pdtp.InvalidArgumentError, match=f"{scenario.MAX_NODES:,} nodes"):
        pdtp.solve("llama-3.1-8b", nodes=over, gpu="h100", time_limit_s=0.05)
    # Two GPU types share the bound.
    half = [1] * (scenario.MAX_NODES // 2 + 1)
    with pytest.raises(pdtp.InvalidArgumentError, match="nodes in all"):
        pdtp.solve("llama-3.1-8b", nodes={"h100": half, "h200": half}, time_limit_s=0.05)
    ids = [[0]] * (scenario.MAX_ID_NODES + 1)
    with pytest.raises(pdtp.InvalidArgumentError, match="free GPU count, not its device ids"):
        pdtp.solve("llama-3.1-8b", nodes=ids, gpu="h100", time_limit_s=0.05)
    # At the bounds: planned.
    plan = pdtp.solve("llama-3.1-8b", nodes=[1] * scenario.MAX_NODES, gpu="h100")
    assert plan.gpus_used <= scenario.MAX_NODES
    plan = pdtp.solve("llama-3.1-8b", nodes=[[0, 3]] * scenario.MAX_ID_NODES, gpu="h100")
    assert {d for p in plan.assignment for d in p.devices} <= {0, 3}


@pytest.mark.parametrize("seed", range(6))
def test_the_fast_node_readers_equal_the_checked_one(seed):
    """Counts and device-id lists read at C speed give the pool the per-entry loop gives
    (a numpy integer sends a list down the loop): runs, devices, totals."""
    import numpy as np

    rng = random.Random(seed)
    counts = [rng.randint(0, 8) for _ in range(rng.randint(1, 300))]
    counts[rng.randrange(len(counts))] = 8  # at least one free GPU
    ids = [sorted(rng.sample(range(8), k)) for k in counts]
    for spec in (counts, ids):
        fast = scenario.resolve_pool(None, spec, "mi300x", None, None)
        slow_spec = list(spec)
        last = slow_spec[-1]
        slow_spec[-1] = [np.int64(x) for x in last] if isinstance(last, list) else np.int64(last)
        slow = scenario.resolve_pool(None, slow_spec, "mi300x", None, None)
        assert fast.node_runs == slow.node_runs and fast.devices == slow.devices
        assert fast.gpus == sum(counts) and fast.node_count == len(counts)
    two = scenario.resolve_pool(None, {"mi300x": counts, "mi355x": counts[::-1]}, None, None, None)
    assert two.gpus_of(0) == two.gpus_of(1) == sum(counts) and two.gpus == 2 * sum(counts)


@pytest.mark.parametrize(
    "nodes, names",
    [
        ([[0, 0]], ["nodes[0]", "distinct"]),
        ([[8]], ["nodes[0]", "[0, 7]"]),
        ([[True]], ["nodes[0]", "integer"]),
        ([1, 9], ["nodes[1]", "[0, 8]"]),
        ([1, True], ["nodes[1]", "integer"]),
        ([1, [0, 0]], ["nodes[1]", "distinct"]),
    ],
)
def test_a_bad_node_entry_is_still_named(nodes, names):
    with pytest.raises(pdtp.PdtpError) as info:
        pdtp.solve("llama-3.1-8b", nodes=nodes, gpu="h100", time_limit_s=0.05)
    for n in names:
        assert n in str(info.value)


def test_the_argument_scan_still_finds_text_and_depth_in_lists_of_lists():
    from pdtp._validate import argument_problem

    assert argument_problem("nodes", [[1, 2]] * 100_000) is None
    found = argument_problem("nodes", [[1, 2]] * 1000 + [[1, "\ud800"]])
    assert found is not None and "nodes[1000][1]" in str(found)
    deep: list = [1]
    for _ in range(100):
        deep = [deep]
    assert "nested" in str(argument_problem("nodes", deep))
