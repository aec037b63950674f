"""Argument checks shared by the public API: one clear error naming the field and the
allowed values, before anything reaches the Rust core.

Wrong types raise :class:`~pdtp.errors.ArgumentTypeError` (a ``PdtpError`` that is also a
``TypeError``); wrong values raise :class:`~pdtp.errors.InvalidArgumentError`.
"""

from __future__ import annotations

import functools
import numbers
import reprlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from .errors import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    import inspect

# TP sizes beyond this are not real deployments and would only make enumeration slow.
MAX_TP = 1 << 16
# The Rust core's integers are 64-bit.
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

P = ParamSpec("P")
R = TypeVar("R")


def positive_int(field: str, value: Any, *, maximum: int | None = None) -> int:
    """``value`` as an int ≥ 1 (and ≤ ``maximum``); bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(
            f"{field} must be a positive integer, got {type(value).__name__} {_short(value)}"
        )
    value = int(value)
    if value < 1:
        raise InvalidArgumentError(f"{field} must be a positive integer (>= 1), got {value}")
    if maximum is not None and value > maximum:
        raise InvalidArgumentError(f"{field} must be at most {maximum}, got {_short(value)}")
    return value


def optional_positive_int(field: str, value: Any, *, maximum: int | None = None) -> int | None:
    return None if value is None else positive_int(field, value, maximum=maximum)


def positive_number(field: str, value: Any) -> float:
    """``value`` as a finite float > 0; bools are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{field} must be a positive number, got {type(value).__name__} {_short(value)}"
        )
    try:
        v = float(value)
    except OverflowError:  # an int beyond the float range
        v = float("inf")
    if not v > 0 or v == float("inf"):
        raise InvalidArgumentError(f"{field} must be a positive finite number, got {_short(value)}")
    return v


def flag(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(
            f"{field} must be True or False, got {type(value).__name__} {_short(value)}"
        )
    return value


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 6, 6, 60, 60
_REPR.maxlong = 40


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message, bounded in size and in time: a hostile value
    can be megabytes long or a YAML alias bomb nested many levels deep."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a repr that fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_short = short_repr


def int64_arguments(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, a Rust core function, with its argument errors named: PyO3 reports an
    integer beyond 64 bits as a bare ``OverflowError`` and a wrong type as a ``TypeError``;
    they become :class:`InvalidArgumentError` / :class:`ArgumentTypeError` naming the
    argument and its allowed range. Nothing is checked on the way in, so a good call costs
    nothing extra (and the signature is read on the first error: ``inspect`` costs ~10 ms
    of ``import pdtp``)."""

    @functools.cache
    def signature() -> inspect.Signature:
        import inspect

        return inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (OverflowError, TypeError) as e:
            named = _argument_error(signature(), args, kwargs, e)
            if named is None:
                raise
            raise named from None

    return checked


def _argument_error(
    signature: inspect.Signature, args: Any, kwargs: Any, error: Exception
) -> Exception | None:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None  # a wrong call (missing or extra arguments): Python's own error says so
    text = str(error)
    if isinstance(error, TypeError) and text.startswith("argument '"):
        # PyO3's text is "argument 'NAME': <what was wrong>"; keep it, as a pdtp error.
        name, _, why = text.removeprefix("argument '").partition("': ")
        value = bound.arguments.get(name)
        return ArgumentTypeError(f"{name}: {why} (got {type(value).__name__} {_short(value)})")
    if isinstance(error, OverflowError):
        # PyO3 converts in order, so the first integer out of range is the one it hit.
        for name, value in bound.arguments.items():
            if isinstance(value, int) and not I64_MIN <= value <= I64_MAX:
                return InvalidArgumentError(
                    f"{name} must be an integer from -2**63 to 2**63 - 1 (64-bit), "
                    f"got {_short(value)}"
                )
    return None
