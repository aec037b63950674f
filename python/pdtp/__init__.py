"""pdtp — valid, throughput-optimal prefill/decode tensor-parallel splits for vLLM.

Importing pdtp is cheap: the Rust core loads at once, the catalog and the performance model
on first use, and OR-Tools only when a solve needs CP-SAT.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._core import expected_ack_count, remote_tp_rank, validate_kv_heads
from .check import CheckResult, CheckWarning, ModelShape, Violation, check
from .connectors import Connector, connectors, resolve_connector
from .errors import (
    ConfigError,
    InfeasibleError,
    InvalidArgumentError,
    PdtpError,
    RuleAssertionError,
    RuleConnectorError,
    RuleNotImplementedError,
    RuleValueError,
    RuleZeroDivisionError,
    UnknownNameError,
    UnworkablePairError,
)
from .transfer import TransferMap, transfer_map

__version__ = "0.1.0"

# Public names served from modules loaded on first access (PEP 562).
_LAZY: dict[str, str] = {
    "Model": "pdtp._model",
    "GPU": "pdtp._gpu",
    "model": "pdtp.catalog",
    "models": "pdtp.catalog",
    "gpu": "pdtp.catalog",
    "gpus": "pdtp.catalog",
    "Workload": "pdtp.workload",
    "Constants": "pdtp.constants",
    "predict_prefill": "pdtp.perf",
    "predict_decode": "pdtp.perf",
    "evaluate": "pdtp.perf",
    "Estimate": "pdtp.perf",
    "solve": "pdtp.planner",
    "Plan": "pdtp.planner",
    "size_for": "pdtp.autoscale",
    "replan": "pdtp.autoscale",
    "Replan": "pdtp.autoscale",
    "MoveCost": "pdtp.autoscale",
    "solve_fleet": "pdtp.fleet",
    "FleetPlan": "pdtp.fleet",
    "calibrate": "pdtp.calibration",
    "sweep": "pdtp.sweeps",
}

if TYPE_CHECKING:
    from ._gpu import GPU
    from ._model import Model
    from .autoscale import MoveCost, Replan, replan, size_for
    from .calibration import calibrate
    from .catalog import gpu, gpus, model, models
    from .constants import Constants
    from .fleet import FleetPlan, solve_fleet
    from .perf import Estimate, evaluate, predict_decode, predict_prefill
    from .planner import Plan, solve
    from .sweeps import sweep
    from .workload import Workload


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pdtp' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "GPU",
    "Constants",
    "Estimate",
    "Plan",
    "Workload",
    "evaluate",
    "predict_decode",
    "predict_prefill",
    "calibrate",
    "solve",
    "size_for",
    "replan",
    "Replan",
    "MoveCost",
    "solve_fleet",
    "FleetPlan",
    "sweep",
    "CheckResult",
    "CheckWarning",
    "ConfigError",
    "Connector",
    "InfeasibleError",
    "InvalidArgumentError",
    "Model",
    "ModelShape",
    "PdtpError",
    "RuleAssertionError",
    "RuleConnectorError",
    "RuleNotImplementedError",
    "RuleValueError",
    "RuleZeroDivisionError",
    "TransferMap",
    "UnknownNameError",
    "UnworkablePairError",
    "Violation",
    "check",
    "connectors",
    "resolve_connector",
    "expected_ack_count",
    "gpu",
    "gpus",
    "model",
    "models",
    "remote_tp_rank",
    "transfer_map",
    "validate_kv_heads",
]
