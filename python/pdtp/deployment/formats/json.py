"""``--format json``: the whole deployment as data (``Deployment.to_dict``)."""

from __future__ import annotations

from . import Format

FORMAT = Format(
    "json",
    "deployment.json: instances, ports, proxy, scripts and manifests as data",
    lambda d: {"deployment.json": d.to_json(indent=2) + "\n"},
)
