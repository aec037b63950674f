"""Argument checks shared by the public API: one clear error naming the field and the
allowed values, before anything reaches the Rust core.

Wrong types raise :class:`~pdtp.errors.ArgumentTypeError` (a ``PdtpError`` that is also a
``TypeError``); wrong values raise :class:`~pdtp.errors.InvalidArgumentError`.
"""

from __future__ import annotations

import functools
import itertools
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
    v = int(value)
    if v < 1:
        raise InvalidArgumentError(f"{field} must be a positive integer (>= 1), got {v}")
    if maximum is not None and v > maximum:
        raise InvalidArgumentError(f"{field} must be at most {maximum}, got {_short(v)}")
    return v


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


# Nesting deeper than this is no argument of pdtp's (a plan dict nests 4 levels); deeper
# would make a message's repr (or the JSON encoder) recurse past Python's limit.
MAX_ARGUMENT_DEPTH = 64
# How many values of one argument the up-front scan visits (a 150,000-row points list is
# checked by its first rows; the rest is checked where it is read).
_SCAN_BUDGET = 20_000


# Arguments that may be file paths: a path may hold ``surrogateescape``'s surrogates (they
# stand for undecodable bytes in a file name). Every other string reaches the Rust core,
# a launch line or a UTF-8 file, none of which can carry any surrogate.
PATH_ARGUMENTS = frozenset(
    {"model", "config", "source", "path", "hosts_file", "trace", "points", "grid", "demands"}
    | {"output", "directory", "model_path", "models", "plan_or_config", "workloads"}
    | {"plan", "current", "old", "new"}  # a plan's own strings: checked where it is read
)


def _bad_text(value: str, strict: bool = True) -> int | None:
    """Where ``value`` holds a lone surrogate (``strict``), or one no file name can carry
    (not ``surrogateescape``'s); None if none."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8", "strict" if strict else "surrogateescape")
    except UnicodeEncodeError as e:
        return e.start
    return None


_SCALARS = frozenset({int, float, bool, type(None)})


def _place(where: Any) -> str:
    """A place in an argument, kept as ``(parent, key)`` links until a message needs it."""
    keys: list[str] = []
    while isinstance(where, tuple):
        where, key = where
        keys.append(f"[{key}]" if isinstance(key, int) else f"[{short_repr(key, 40)}]")
    return str(where) + "".join(reversed(keys))


def argument_problem(name: str, value: Any, *, strict: bool = True) -> InvalidArgumentError | None:
    """A lone surrogate in a string (``strict=False``: but ``surrogateescape``'s, as a path
    may hold), or nesting past :data:`MAX_ARGUMENT_DEPTH`, anywhere in ``value`` (scanned
    iteratively, within a budget; a list of numbers, such as a million nodes' free GPUs,
    at C speed)."""
    stack: list[tuple[Any, int, Any]] = [(value, 0, name)]
    budget = _SCAN_BUDGET
    while stack and budget > 0:
        v, depth, where = stack.pop()
        budget -= 1
        if isinstance(v, str):
            at = _bad_text(v, strict)
            if at is not None:
                return InvalidArgumentError(
                    f"{_place(where)} is not valid Unicode text: a lone surrogate "
                    f"({v[at]!a}) at position {at}"
                )
        elif isinstance(v, list | tuple | dict | set | frozenset):
            if depth >= MAX_ARGUMENT_DEPTH:
                return InvalidArgumentError(
                    f"{name} is nested more than {MAX_ARGUMENT_DEPTH} levels deep"
                )
            # Each value by its place (``plan['prefill']['layout']``), so the message says
            # which field; a key by its mapping's.
            if isinstance(v, dict):
                for k, x in list(v.items())[:budget]:
                    # ASCII keys and scalar or ASCII values need no visit of their own (a
                    # plan's placement lists a dict per instance: thousands of them).
                    if type(k) is not str or not k.isascii():
                        stack.append((k, depth + 1, where))
                    tx = type(x)
                    if tx in _SCALARS or (tx is str and x.isascii()):
                        budget -= 1
                    else:
                        stack.append((x, depth + 1, (where, k)))
            elif isinstance(v, list | tuple):
                kinds = set(map(type, v))
                if _SCALARS.issuperset(kinds):
                    continue  # numbers only: no text, no nesting
                if kinds <= {list, tuple} and depth + 1 < MAX_ARGUMENT_DEPTH:
                    inner = set(map(type, itertools.chain.from_iterable(v)))
                    if _SCALARS.issuperset(inner):
                        continue  # lists of numbers (nodes' device ids)
                stack.extend((x, depth + 1, (where, i)) for i, x in enumerate(v[:budget]))
            else:
                stack.extend((x, depth + 1, where) for x in list(v)[:budget])
    return None


def public_api(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, a public function, with two checks every argument gets before ``fn`` sees it
    (so no ``RecursionError`` or ``UnicodeEncodeError`` comes out of a message, the JSON
    encoder or PyO3): strings are valid Unicode, containers nest at most
    :data:`MAX_ARGUMENT_DEPTH` deep. Each is an :class:`InvalidArgumentError` naming the
    argument. A wrong call (missing or extra arguments) is still Python's ``TypeError``."""

    # The signature is read on the first call: ``inspect`` is not imported by ``import pdtp``.
    @functools.cache
    def signature() -> inspect.Signature:
        import inspect

        return inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            bound = signature().bind(*args, **kwargs)
        except TypeError:
            return fn(*args, **kwargs)  # Python's own error for a wrong call
        for name, value in bound.arguments.items():
            if isinstance(value, str | list | tuple | dict | set | frozenset):
                problem = argument_problem(name, value, strict=name not in PATH_ARGUMENTS)
                if problem is not None:
                    raise problem
        return fn(*args, **kwargs)

    return checked
