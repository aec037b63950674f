"""pdtp — valid, throughput-optimal prefill/decode tensor-parallel splits for vLLM.

Importing pdtp is cheap: the Rust core loads at once, the catalog and the performance model
on first use, and OR-Tools only when a planner needs CP-SAT.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from . import _core
from ._validate import int64_arguments
from .check import CheckResult, ModelShape, check
from .connectors import Connector, connectors, resolve_connector
from .errors import (
    ArgumentTypeError,
    ConfigError,
    InfeasibleError,
    InvalidArgumentError,
    OutputFileError,
    PdtpError,
    RuleAssertionError,
    RuleConnectorError,
    RuleNotImplementedError,
    RuleValueError,
    RuleZeroDivisionError,
    TimeLimitError,
    UnknownNameError,
    UnworkablePairError,
)

# Imported now, not lazily: the module `pdtp.simulate` would otherwise shadow the function.
from .simulate import (
    RateSearch,
    SimConfig,
    SimResult,
    load_trace,
    max_rate_within_slo,
    sim_config,
    simulate,
)
from .violations import CheckWarning, Violation

# vLLM's rule functions straight from the Rust core, with out-of-range and wrong-type
# arguments reported as pdtp errors naming the argument (not PyO3's bare OverflowError).
remote_tp_rank = int64_arguments(_core.remote_tp_rank)
validate_kv_heads = int64_arguments(_core.validate_kv_heads)
expected_ack_count = int64_arguments(_core.expected_ack_count)

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
    "predict_serving": "pdtp.perf",
    "ServingEstimate": "pdtp.perf",
    "Scenario": "pdtp.scenario",
    "SolverConfig": "pdtp.scenario",
    "solve": "pdtp.planning.solve",
    "Plan": "pdtp.planning.plan",
    "size_for": "pdtp.planning.size_for",
    "replan": "pdtp.planning.replan",
    "Replan": "pdtp.planning.replan",
    "MoveCost": "pdtp.planning.replan",
    "solve_fleet": "pdtp.planning.fleet",
    "pareto": "pdtp.planning.pareto",
    "Pareto": "pdtp.planning.pareto",
    "ParetoPoint": "pdtp.planning.pareto",
    "Layout": "pdtp.layout",
    "FleetPlan": "pdtp.planning.fleet",
    "calibrate": "pdtp.calibration",
    "sweep": "pdtp.sweeps",
    "deploy": "pdtp.deployment",
    "deploy_diff": "pdtp.deployment",
    "Deployment": "pdtp.deployment",
    "transfer_map": "pdtp.transfer",
    "TransferMap": "pdtp.transfer",
}

if TYPE_CHECKING:
    from ._gpu import GPU
    from ._model import Model
    from .calibration import calibrate
    from .catalog import gpu, gpus, model, models
    from .constants import Constants
    from .deployment import Deployment, deploy, deploy_diff
    from .layout import Layout
    from .perf import (
        Estimate,
        ServingEstimate,
        evaluate,
        predict_decode,
        predict_prefill,
        predict_serving,
    )
    from .planning.fleet import FleetPlan, solve_fleet
    from .planning.pareto import Pareto, ParetoPoint, pareto
    from .planning.plan import Plan
    from .planning.replan import MoveCost, Replan, replan
    from .planning.size_for import size_for
    from .planning.solve import solve
    from .scenario import Scenario, SolverConfig
    from .sweeps import sweep
    from .transfer import TransferMap, transfer_map
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
    "ArgumentTypeError",
    "GPU",
    "Constants",
    "Estimate",
    "Plan",
    "Scenario",
    "SolverConfig",
    "Workload",
    "evaluate",
    "predict_decode",
    "predict_prefill",
    "predict_serving",
    "ServingEstimate",
    "calibrate",
    "solve",
    "size_for",
    "replan",
    "Replan",
    "MoveCost",
    "solve_fleet",
    "FleetPlan",
    "pareto",
    "Pareto",
    "ParetoPoint",
    "Layout",
    "sweep",
    "deploy",
    "deploy_diff",
    "Deployment",
    "simulate",
    "sim_config",
    "max_rate_within_slo",
    "load_trace",
    "SimConfig",
    "SimResult",
    "RateSearch",
    "CheckResult",
    "CheckWarning",
    "ConfigError",
    "Connector",
    "InfeasibleError",
    "InvalidArgumentError",
    "Model",
    "ModelShape",
    "OutputFileError",
    "PdtpError",
    "RuleAssertionError",
    "RuleConnectorError",
    "RuleNotImplementedError",
    "RuleValueError",
    "RuleZeroDivisionError",
    "TimeLimitError",
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
