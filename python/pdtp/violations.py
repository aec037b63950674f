"""What a rule check reports — :class:`Violation` and :class:`CheckWarning` — and the pair
rules' violations from the core. Below both ``check`` (which adds memory and alternatives)
and ``perf`` (whose ``evaluate`` reports rule, memory and SLO violations together), so
neither imports the other to share them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import _core
from ._validate import int64_arguments
from .errors import (
    PdtpError,
    RuleAssertionError,
    RuleConnectorError,
    RuleNotImplementedError,
    RuleValueError,
    RuleZeroDivisionError,
    UnworkablePairError,
)

_ERROR_CLASSES: dict[str, type[PdtpError]] = {
    "ValueError": RuleValueError,
    "NotImplementedError": RuleNotImplementedError,
    "AssertionError": RuleAssertionError,
    "ZeroDivisionError": RuleZeroDivisionError,
    "MoRIIOError": RuleConnectorError,
}


@dataclass(frozen=True)
class Violation:
    """One broken rule. ``code`` is a stable identifier; ``message`` is vLLM's exact text
    where vLLM has one (possibly empty: a bare ``assert``; ``hint`` then says what failed);
    ``vllm_error`` names the exception vLLM raises (``AssertionError``, ``ValueError``,
    ``NotImplementedError``, ``ZeroDivisionError``, ``MoRIIOError``), ``None`` where vLLM
    raises nothing: pdtp-only limits (``max_acks``, memory) and pairs vLLM accepts but that
    cannot work (a rank waits for a peer that does not exist, or copies the wrong KV heads)."""

    code: str
    side: str
    message: str
    hint: str
    vllm_error: str | None = None

    def exception(self) -> PdtpError:
        """The exception vLLM would raise, as a pdtp error (also an instance of vLLM's
        built-in class), carrying vLLM's message; where that message is empty, the hint."""
        cls = _ERROR_CLASSES.get(self.vllm_error or "", UnworkablePairError)
        if not self.message:  # a bare `assert`: vLLM says nothing, the hint says what failed
            return cls(self.hint)
        if self.vllm_error == "ZeroDivisionError":  # Python's text names no cause
            return cls(f"{self.message} ({self.hint})")
        return cls(self.message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CheckWarning:
    """Valid, but worth knowing (e.g. prefill ranks that are never read)."""

    code: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@int64_arguments
def _check_pair(
    num_attention_heads: int,
    num_kv_heads: int,
    is_mla: bool,
    prefill_tp: int,
    decode_tp: int,
    connector: str,
    max_acks: int | None,
) -> Any:
    """``_core.check_pair``, an integer beyond 64 bits named (``max_acks=2**70``), not
    PyO3's bare ``OverflowError``."""
    return _core.check_pair(
        num_attention_heads, num_kv_heads, is_mla, prefill_tp, decode_tp, connector, max_acks
    )


def pair_rules(
    shape: Any, prefill_tp: int, decode_tp: int, connector: str, max_acks: int | None
) -> tuple[list[Violation], tuple[CheckWarning, ...]]:
    """The connector's rule violations and warnings for one pair (``shape``: anything with
    ``num_attention_heads``, ``num_kv_heads``, ``is_mla``), in vLLM's order. ``connector``
    is a ``_core`` key: ``"name"`` or ``"name@X.Y.Z"``."""
    raw_violations, raw_warnings = _check_pair(
        shape.num_attention_heads,
        shape.num_kv_heads,
        shape.is_mla,
        prefill_tp,
        decode_tp,
        connector,
        max_acks,
    )
    violations = [
        Violation(code, side, message, hint, err or None)
        for code, side, message, hint, err in raw_violations
    ]
    return violations, tuple(CheckWarning(c, m) for c, m in raw_warnings)


def layout_rules(
    model: Any, prefill: Any, decode: Any, connector: str, max_acks: int | None
) -> tuple[list[Violation], tuple[CheckWarning, ...]]:
    """The rule violations and warnings of a (prefill layout, decode layout) pair
    (``pdtp.Layout`` each; TP-only layouts give exactly :func:`pair_rules`' answer).
    ``model``: a ``pdtp.Model`` or anything with the attention numbers."""
    from .layout import layout_model

    raw_violations, raw_warnings = _core.check_layouts(
        layout_model(model), prefill.core, decode.core, connector, max_acks
    )
    violations = [
        Violation(code, side, message, hint, err or None)
        for code, side, message, hint, err in raw_violations
    ]
    return violations, tuple(CheckWarning(c, m) for c, m in raw_warnings)


def load_rules(model: Any, layout: Any, side: str, connector: str) -> list[Violation]:
    """The load violations of one instance's layout (``side``: prefill, decode or
    aggregated — an aggregated instance has no KV connector)."""
    from .layout import layout_model

    return [
        Violation(code, s, message, hint, err or None)
        for code, s, message, hint, err in _core.layout_load_violations(
            layout_model(model), layout.core, side, connector
        )
    ]
