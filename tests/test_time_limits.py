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
