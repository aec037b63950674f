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
    RuleKeyError,
    RuleNotImplementedError,
    RuleRuntimeError,
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
    "HandshakeError": RuleConnectorError,
    "RuntimeError": RuleRuntimeError,
    "KeyError": RuleKeyError,
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
    #: When it reaches the user: ``model_load``, ``engine_start``, ``handshake``,
    #: ``first_transfer``, ``serving`` (no exception: ``consequence`` says what happens) or
    #: ``planning`` (pdtp's own limit).
    when: str = "planning"
    #: The exception class and text that reach the user, where vLLM raises ``vllm_error`` in
    #: a thread that only logs it (a MoRIIO handshake future): else ``vllm_error``/``message``.
    user_error: str | None = None
    user_message: str = ""
    #: For a pair vLLM raises nothing for: ``hang``, ``leak`` or ``wrong_bytes``.
    consequence: str | None = None

    def exception(self) -> PdtpError:
        """The exception vLLM would raise, as a pdtp error (also an instance of vLLM's
        built-in class), carrying vLLM's message; where that message is empty, the hint."""
        if self.user_error:  # raised in a thread that only logs it: what the user sees
            return _ERROR_CLASSES.get(self.user_error, UnworkablePairError)(
                f"{self.user_message} ({self.hint})"
            )
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
    """Valid, but worth knowing (e.g. prefill ranks that are never read). ``consequence``:
    ``blocks_held_until_timeout``, ``round_robin_source``, ``ranks_idle`` or
    ``needs_setting`` (an environment variable vLLM does not default to, which ``pdtp
    deploy`` sets)."""

    code: str
    message: str
    consequence: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@int64_arguments
def _check_layouts(
    model: tuple[int, int, bool, int, int, bool, bool, bool, int, int],
    prefill: tuple[int, int, int, bool],
    decode: tuple[int, int, int, bool],
    connector: str,
    max_acks: int | None,
) -> Any:
    """``_core.check_layouts``, an integer beyond 64 bits named (``max_acks=2**70``), not
    PyO3's bare ``OverflowError``."""
    return _core.check_layouts(model, prefill, decode, connector, max_acks)


def pair_rules(
    shape: Any, prefill_tp: int, decode_tp: int, connector: str, max_acks: int | None
) -> tuple[list[Violation], tuple[CheckWarning, ...]]:
    """The connector's rule violations and warnings for one pair (``shape``: anything with
    ``num_attention_heads``, ``num_kv_heads``, ``is_mla``), in vLLM's order. ``connector``
    is a ``_core`` key: ``"name"`` or ``"name@X.Y.Z"``. Shorthand of :func:`layout_rules`:
    TP size ``t`` is the layout ``tp{t}``."""
    from .layout import layout_model

    raw_violations, raw_warnings = _check_layouts(
        layout_model(shape),
        (prefill_tp, 1, 1, False),
        (decode_tp, 1, 1, False),
        connector,
        max_acks,
    )
    return [core_violation(v) for v in raw_violations], core_warnings(raw_warnings)


def layout_rules(
    model: Any, prefill: Any, decode: Any, connector: str, max_acks: int | None
) -> tuple[list[Violation], tuple[CheckWarning, ...]]:
    """The rule violations and warnings of a (prefill layout, decode layout) pair
    (``pdtp.Layout`` each; TP-only layouts give exactly :func:`pair_rules`' answer).
    ``model``: a ``pdtp.Model``, anything with the attention numbers, or the facts
    ``pdtp.layout.layout_model`` already read of it (a planner's, read once per scenario)."""
    from .layout import layout_model

    facts = model if isinstance(model, tuple) else layout_model(model)
    raw_violations, raw_warnings = _check_layouts(
        facts, prefill.core, decode.core, connector, max_acks
    )
    return [core_violation(v) for v in raw_violations], core_warnings(raw_warnings)


def load_rules(model: Any, layout: Any, side: str, connector: str) -> list[Violation]:
    """The load violations of one instance's layout (``side``: prefill, decode or
    aggregated — an aggregated instance has no KV connector)."""
    from .layout import layout_model

    return [
        core_violation(v)
        for v in _core.layout_load_violations(layout_model(model), layout.core, side, connector)
    ]


def core_violation(raw: tuple[str, str, str, str, str, str, str, str, str]) -> Violation:
    """A :class:`Violation` from the core's tuple."""
    code, side, message, hint, err, when, user_err, user_message, consequence = raw
    return Violation(
        code,
        side,
        message,
        hint,
        err or None,
        when,
        user_err or None,
        user_message,
        consequence or None,
    )


def core_warnings(raw: list[tuple[str, str, str]]) -> tuple[CheckWarning, ...]:
    return tuple(CheckWarning(c, m, q or None) for c, m, q in raw)
