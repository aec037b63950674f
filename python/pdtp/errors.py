"""The exception hierarchy: every error pdtp raises is a :class:`PdtpError`.

Where vLLM itself raises ``ValueError`` or ``NotImplementedError`` for a rule, pdtp raises a
class that is *also* an instance of that built-in, carrying vLLM's exact message, so code
written against vLLM's behaviour (``except ValueError``) keeps working.
"""

from __future__ import annotations

__all__ = [
    "ArgumentTypeError",
    "ConfigError",
    "InfeasibleError",
    "InvalidArgumentError",
    "OutputFileError",
    "PdtpError",
    "RuleAssertionError",
    "RuleConnectorError",
    "RuleNotImplementedError",
    "RuleValueError",
    "RuleZeroDivisionError",
    "TimeLimitError",
    "UnknownNameError",
    "UnworkablePairError",
]


# The longest message an error carries. Messages quote input (a model name, a path, a
# value): a hostile one can be megabytes long, and a message is for a person to read. A
# longer text keeps its start and its end (where the hint is) and says how much was cut.
MAX_MESSAGE_CHARS = 2000


def bounded_message(text: str) -> str:
    """``text``, at most about :data:`MAX_MESSAGE_CHARS` characters."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    head, tail = MAX_MESSAGE_CHARS * 3 // 4, MAX_MESSAGE_CHARS // 4
    cut = len(text) - head - tail
    return f"{text[:head]}... [{cut:,} characters cut] ...{text[-tail:]}"


class PdtpError(Exception):
    """Base class of every error pdtp raises. Its message is bounded (at most about
    :data:`MAX_MESSAGE_CHARS` characters, whatever the input it quotes)."""

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            args = (bounded_message(args[0]), *args[1:])
        super().__init__(*args)


class RuleValueError(PdtpError, ValueError):
    """A vLLM rule raised ``ValueError``; the message is vLLM's text verbatim."""


class RuleNotImplementedError(PdtpError, NotImplementedError):
    """A vLLM rule raised ``NotImplementedError``; the message is vLLM's text verbatim."""


class InvalidArgumentError(PdtpError, ValueError):
    """An argument is outside its allowed values; the message names the field."""


class UnworkablePairError(InvalidArgumentError):
    """The pair is invalid although vLLM raises nothing for it: it cannot work (a rank waits
    for a peer rank that does not exist, or copies a block holding other KV heads) or it
    breaks a pdtp limit (``max_acks``, memory). The message says which."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type; the message names the field and what it accepts.
    Also a ``TypeError``, so ``except TypeError`` keeps working."""


class OutputFileError(InvalidArgumentError):
    """An output file cannot be used: another run is writing it, pdtp did not write it, a
    row in it is damaged, or it cannot be written. The message names the file (and the
    line) and what to do; the file is left as it is."""


class ConfigError(PdtpError, ValueError):
    """A model config cannot be modelled; the message names the file, the field and what
    was expected."""


class UnknownNameError(PdtpError, LookupError):
    """A catalog name (model, GPU, connector) is unknown; the message lists the closest."""


class InfeasibleError(PdtpError):
    """No configuration satisfies the constraints; ``reasons`` says why, rule by rule."""

    def __init__(self, message: str, reasons: tuple[str, ...] | list[str] = ()) -> None:
        super().__init__(message)
        self.reasons: tuple[str, ...] = tuple(reasons)


class TimeLimitError(InfeasibleError):
    """The time limit ran out before any answer was found: not a proof that none exists
    (raise ``time_limit_s``). An :class:`InfeasibleError`, so code that treats "no plan" as
    one case keeps working; ``reasons`` names what the limit cut."""


class RuleAssertionError(PdtpError, AssertionError):
    """A vLLM assertion failed (KV heads not divisible by the TP size at load, NIXL's
    handshake checks). vLLM's text verbatim; where vLLM's ``assert`` has no message, pdtp's
    hint says what failed."""


class RuleZeroDivisionError(PdtpError, ZeroDivisionError):
    """vLLM crashed with ``ZeroDivisionError`` and no message of its own (NIXL before
    0.11.1 computes ``decode_tp // prefill_tp`` and divides by it); the message explains."""


class RuleRuntimeError(PdtpError, RuntimeError):
    """vLLM raised ``RuntimeError`` (MoRIIO's worker without AMD's MoRI, as on NVIDIA GPUs);
    vLLM's text verbatim."""


class RuleKeyError(PdtpError, KeyError):
    """vLLM raised ``KeyError`` (a MoRIIO read of a peer whose failed handshake stored no
    metadata); the message names the key."""

    def __str__(self) -> str:  # KeyError's repr-quoting would hide the text
        return str(self.args[0]) if self.args else ""


class RuleConnectorError(PdtpError):
    """vLLM raised an exception class of its own connector (``MoRIIOError``), which pdtp
    cannot subclass without importing vLLM; the message is vLLM's text verbatim."""
