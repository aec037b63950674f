"""Shell command lines from argument lists: every word quoted, so a value that came from input
(a model id from a config's ``_name_or_path``, a folder name, a JSON config, an address) is one
literal argument however it is spelled — ``org/x;touch${IFS}PWNED;#`` runs nothing.

Generated commands (``vllm serve`` lines, and scripts built from them) are written as an
environment and an argv list and turned into text here, never by pasting strings.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

__all__ = ["command_line"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def command_line(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """``NAME=value ... argv...`` for a POSIX shell (bash, sh): each value and each argument
    quoted with :func:`shlex.quote` (words that need no quoting stay bare, so ordinary lines
    read as before). ``env`` names are pdtp's own and must be plain identifiers."""
    words = []
    for name, value in (env or {}).items():
        if not _ENV_NAME.match(name):  # a bug in pdtp, not user input
            raise ValueError(f"not an environment variable name: {name!r}")
        words.append(f"{name}={shlex.quote(str(value))}")
    words.append(shlex.join(str(a) for a in argv))
    return " ".join(words)
