"""vLLM release numbers (``0.33.0``), parsed one way in Python: as the Rust core's
``connector::version::Version::parse`` reads them — an optional ``v``, then two to four
numeric components (``0.10.1.1`` exists), compared numerically; ``0.33`` is ``0.33.0``."""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import ArgumentTypeError, InvalidArgumentError

_RELEASE = re.compile(r"v?(\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?(?:\.(\d{1,6}))?")
# A release named inside free text: "vLLM v0.8.5", "vllm 0.12.0 (CUDA 12.4)".
_NAMED = re.compile(r"\bvllm\s*(v?\d{1,6}(?:\.\d{1,6}){1,3})\b", re.IGNORECASE)


class Version(NamedTuple):
    major: int
    minor: int
    patch: int = 0
    post: int = 0

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return f"{base}.{self.post}" if self.post else base


def parse_version(text: str, field: str = "vllm_version") -> Version:
    """``"0.33.0"`` (also ``"v0.33.0"``, ``"0.33"``, ``"0.10.1.1"``) as a :class:`Version`;
    anything else is one :class:`~pdtp.errors.InvalidArgumentError` naming ``field``."""
    if not isinstance(text, str):
        raise ArgumentTypeError(
            f"{field} must be a string like '0.33.0', got {type(text).__name__}"
        )
    m = _RELEASE.fullmatch(text.strip())
    if m is None:
        raise InvalidArgumentError(f"{field} must look like 0.33.0, got {text[:40]!r}")
    return Version(*(int(g or 0) for g in m.groups()))


def named_vllm_release(text: str) -> Version | None:
    """The vLLM release a free-text engine description names (``"vllm 0.8.5"``), if any."""
    m = _NAMED.search(text)
    return None if m is None else parse_version(m.group(1))
