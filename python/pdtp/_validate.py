"""Argument checks shared by the public API: one clear error naming the field and the
allowed values, before anything reaches the Rust core."""

from __future__ import annotations

import numbers
from typing import Any

from .errors import InvalidArgumentError

# TP sizes beyond this are not real deployments and would only make enumeration slow.
MAX_TP = 1 << 16


def positive_int(field: str, value: Any, *, maximum: int | None = None) -> int:
    """``value`` as an int ≥ 1 (and ≤ ``maximum``); bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be a positive integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < 1:
        raise InvalidArgumentError(f"{field} must be a positive integer (>= 1), got {value}")
    if maximum is not None and value > maximum:
        raise InvalidArgumentError(f"{field} must be at most {maximum}, got {value}")
    return value


def optional_positive_int(field: str, value: Any, *, maximum: int | None = None) -> int | None:
    return None if value is None else positive_int(field, value, maximum=maximum)


def positive_number(field: str, value: Any) -> float:
    """``value`` as a finite float > 0; bools are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a positive number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not v > 0 or v == float("inf"):
        raise InvalidArgumentError(f"{field} must be a positive finite number, got {value!r}")
    return v


def flag(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{field} must be True or False, got {type(value).__name__} {value!r}")
    return value
