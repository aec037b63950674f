"""Who decides a plan, within the caller's time limit: CP-SAT (the one model, ``cpsat.py``)
or, when OR-Tools cannot be imported in time, the exhaustive Rust oracle.

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
from typing import Any

from .cpsat import MARGIN_S, Decision, OneModel, OutOfTime, Solution

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


def by_oracle(cands: Any, deadline: float, note: str = "") -> Decision:
    """The exhaustive oracle within ``deadline``; OPTIMAL only when its search finished."""
    left = max(1e-3, deadline - time.perf_counter() - MARGIN_S)
    best, complete = cands.oracle(time_limit_s=left, reduced=True)
    if best is None:
        if complete:
            return Decision(None, "INFEASIBLE", None, None, "enumerate")
        best = cands.hint()  # cut short before any plan: the closed forms' feasible plan
        if best is None:
            return Decision(None, "UNKNOWN", None, None, "enumerate")
    status = "OPTIMAL" if complete else "FEASIBLE"
    return Decision(best, status, 0.0 if complete else None, None, "enumerate")


def starting_plan(cands: Any) -> Solution | None:
    """CP-SAT's starting plan: the Rust closed forms' best (single-model planners)."""
    return cands.hint()


def decide(
    cands: Any,
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
        return by_oracle(cands, deadline)
    if not ortools_ready(deadline - oracle_reserve(limit)):
        if fallback is not None:
            return fallback
        return by_oracle(cands, deadline)
    start = hint if hint is not None else starting_plan(cands)
    try:
        model = OneModel(
            cands, presolve=presolve, workers=workers, deadline=deadline, excluded=excluded
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
