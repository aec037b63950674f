"""Who decides a plan, within the caller's time limit: for a single model the Rust closed
forms' plan proven by enumerating the few competitive pairs' counts (``by_enumeration``,
no OR-Tools needed), else CP-SAT (the one model, ``cpsat.py``) or, when OR-Tools cannot be
imported in time, the exhaustive Rust oracle.

The time limit covers the whole call, OR-Tools' first import included. The first planner
call in a process starts that import (about 0.5-1 s) in a background thread and waits for
it as long as the limit allows; if it is not done by then, the oracle answers within what
is left (``method="enumerate"``, ``status`` saying whether its search finished) and the
import carries on, so later calls use CP-SAT. ``import pdtp`` never loads OR-Tools.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from .cpsat import MARGIN_S, Decision, OneModel, OutOfTime, Solution

if TYPE_CHECKING:
    from .._core import Candidates

METHODS = ("cpsat", "enumerate")

# Why the plan may lack a comparison: what the closed-form help skipped at the time limit.
CUT_NOTE = (
    "the time limit ended the closed-form comparisons early (the best plan of refused pairs, "
    "the other serving mode): raise time_limit_s for them"
)

_lock = threading.Lock()
_loader: threading.Thread | None = None
_done = threading.Event()
_error: list[BaseException] = []


def _import_ortools() -> None:
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except BaseException as e:  # an import that fails is reported to every planner call
        _error.append(e)
    finally:
        _done.set()


def _loaded() -> bool:
    mod = sys.modules.get("ortools.sat.python.cp_model")
    return mod is not None and hasattr(mod, "CpSolver")


def ortools_ready(until: float) -> bool:
    """Whether OR-Tools is imported by ``until`` (a ``time.perf_counter`` value)."""
    global _loader
    if _done.is_set():
        return not _error
    if _loaded() and _loader is None:
        return True
    with _lock:
        if _loader is None:
            _loader = threading.Thread(
                target=_import_ortools, name="pdtp-ortools-import", daemon=True
            )
            _loader.start()
    _done.wait(timeout=max(0.0, until - time.perf_counter()))
    return _done.is_set() and not _error


def candidates(sc: Any, started: float, limit: float) -> Any:
    """The Rust candidates of a scenario, their exact node searches (in the build and in
    the hint, rule-blind and other-mode help asked of them later) bounded by the call's
    deadline: past it they give way to the relaxation, so every Rust step ends in time."""
    from .. import _core

    left = started + limit - time.perf_counter() - MARGIN_S
    return _core.candidates(sc.core, time_limit_s=max(0.0, left))


def oracle_reserve(limit: float) -> float:
    """Seconds of a time limit kept for the oracle when OR-Tools is still loading."""
    return max(0.02, min(0.25 * limit, 0.5))


def by_oracle(cands: Candidates, deadline: float, full: bool = False) -> Decision:
    """The exhaustive oracle within ``deadline``; OPTIMAL only when its search finished.
    ``full``: every pair × every instance count × (for shared pools) every packing, with
    none of the hint's dominance shortcuts (``method="enumerate"``, what tests hold CP-SAT
    to); otherwise the reduced search (the stand-in while OR-Tools loads)."""
    left = max(1e-3, deadline - time.perf_counter() - MARGIN_S)
    best, complete = cands.oracle(time_limit_s=left, reduced=not full)
    if best is None:
        if complete:
            return Decision(None, "INFEASIBLE", None, None, "enumerate")
        best = cands.hint()  # cut short before any plan: the closed forms' feasible plan
        if best is None:
            return Decision(None, "UNKNOWN", None, None, "enumerate")
    status = "OPTIMAL" if complete else "FEASIBLE"
    proof = "enumerate" if complete else None
    return Decision(best, status, 0.0 if complete else None, None, "enumerate", proof)


def starting_plan(cands: Candidates) -> Solution | None:
    """CP-SAT's starting plan: the Rust closed forms' best (single-model planners)."""
    hint: Solution | None = cands.hint()
    return hint


def beaten(cands: Candidates, incumbent: Solution | None) -> tuple[list[int] | None, int | None]:
    """The indices of the pairs that can be part of an optimum, given a feasible
    ``incumbent`` (None: every pair), and the best bound among them (stage 0's bound; None
    when unknown). A pair is left out when its valid stage-0 bound (Rust ``pair_bounds``:
    each pair's relaxed optimum, a re-plan's moves + GPUs at the fewest or running counts)
    is worse than the incumbent's value, or it has no relaxed plan at all: it cannot match
    the incumbent, so no optimum uses it. CP-SAT's proof then costs what the few pairs that
    can still match the incumbent cost, not every pair (1,600 for qwen3-30b-a3b's default
    layouts at 256 GPUs). Rust compares them (``competitive``)."""
    if incumbent is None or incumbent[0] is None:
        return None, None
    got = cands.competitive(incumbent)
    return (None, None) if got is None else got


def by_enumeration(
    cands: Candidates, incumbent: Solution | None, kept: list[int], deadline: float
) -> Decision | None:
    """The optimum proven by enumeration (Rust ``plan::prove``): every instance count of the
    ``kept`` pairs whose first term can tie or beat the feasible ``incumbent``'s, each
    count's fit checked by the exact node search, none of the closed forms' dominance
    shortcuts. None when it proves nothing here (a ratio or re-plan order, a box too large
    for its budget, the deadline): CP-SAT proves instead. ``method`` says who decided
    (``closed-form`` when the enumeration kept the starting plan, else ``enumeration``);
    ``proof="enumeration"``."""
    if incumbent is None:
        return None
    left = deadline - time.perf_counter() - MARGIN_S
    if left <= 0:
        return None
    best = cands.prove(incumbent, kept, time_limit_s=left)
    if best is None or best[0] is None:
        return None
    method = "closed-form" if best == incumbent else "enumeration"
    return Decision(best, "OPTIMAL", 0.0, None, method, "enumeration")


def decide(
    cands: Candidates,
    *,
    started: float,
    limit: float,
    method: str,
    hint: Solution | None = None,
    fallback: Decision | None = None,
    bound: Any = None,
    presolve: bool = False,
    workers: int = 1,
    excluded: Collection[tuple[int, int]] = (),
) -> Decision:
    """Decide over ``cands`` by ``method`` within ``limit`` seconds of ``started``.

    ``hint``: a starting plan (default: the Rust closed forms' plan). ``fallback``: what a
    shared pool answers when OR-Tools is not there in time (its oracle is exponential).
    ``bound``: valid stage bounds replacing the Rust relaxation's. ``excluded``: (prefill
    row, decode row) pairs to leave out (CP-SAT only: the oracle, or OR-Tools not loaded in
    time, answers UNKNOWN)."""
    deadline = started + limit
    if excluded and (method == "enumerate" or not ortools_ready(deadline)):
        return Decision(None, "UNKNOWN", None, None, method)
    if method == "enumerate":
        return by_oracle(cands, deadline, full=True)
    start = hint if hint is not None else starting_plan(cands)
    # Only the Rust closed forms' own plan is known feasible here (a caller's hint may be
    # deliberately wrong, and a shared pool's pairs are not bounded one by one).
    kept, first = beaten(cands, start) if hint is None and not excluded else (None, None)
    if kept is not None and not presolve:
        # Rust alone: a plan proven here never waits for OR-Tools' import.
        proved = by_enumeration(cands, start, kept, deadline)
        if proved is not None:
            return proved
    if not ortools_ready(deadline - oracle_reserve(limit)):
        if fallback is not None:
            return fallback
        return by_oracle(cands, deadline)
    if bound is None and first is not None:
        # Stage 0's relaxation bound is the best pair bound: reuse it, not recompute it.
        def bound(stage: int, fixed: list[int]) -> int | None:
            return first if stage == 0 else cands.bound(stage, fixed)

    try:
        model = OneModel(
            cands,
            presolve=presolve,
            workers=workers,
            deadline=deadline,
            excluded=excluded,
            keep=kept,
        )
    except OutOfTime:
        # A model too large to build within the limit: the starting plan stands.
        if fallback is not None:
            return fallback
        if excluded:
            return Decision(None, "UNKNOWN", None, None, "cpsat")
        if start is None:
            return by_oracle(cands, deadline)
        return Decision(start, "FEASIBLE", None, None, "closed-form")
    return model.decide(start, deadline, bound)
