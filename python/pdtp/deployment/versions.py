"""The vLLM releases ``pdtp deploy`` writes launch settings for.

Every version-specific fact of the launch modules (``launch``, ``ports``, ``proxy``) is keyed
by the first release it holds for, as a ``Version``. tests/data/vllm_launch_golden.json holds
what each release's own source says (tools/vllm_launch_golden.py reads it), and the tests check
every fact against it.
"""

from __future__ import annotations

from typing import Any

from .._version import Version, parse_version
from ..errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["DEFAULT", "NEWEST", "OLDEST", "Version", "parse_version", "resolve_version"]


# The oldest release whose launch settings pdtp knows (NIXL's first TP-heterogeneous release
# pdtp plans for) and the newest one checked against vLLM's source.
OLDEST = Version(0, 11, 0)
NEWEST = Version(0, 33, 0)
DEFAULT = NEWEST


def resolve_version(value: Any) -> Version:
    """``value`` (``"0.33.0"``, a :class:`Version` or None for the newest) as a supported
    release; outside [OLDEST, NEWEST] is an error naming the range."""
    if value is None:
        return DEFAULT
    if isinstance(value, Version):
        v = value
    elif isinstance(value, str):
        v = parse_version(value)
    else:
        raise ArgumentTypeError(
            f"vllm_version must be a string like '0.33.0', got {type(value).__name__}"
        )
    if not OLDEST <= v <= NEWEST:
        raise InvalidArgumentError(
            f"vllm_version must be between {OLDEST} and {NEWEST} (the releases whose launch "
            f"settings pdtp deploy checks against vLLM's source), got {v}"
        )
    return v
