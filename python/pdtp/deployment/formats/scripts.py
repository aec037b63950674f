"""``--format scripts``: ``node-N.sh`` per node, ``proxy.sh`` and ``README.md``
(``pdtp.deployment.scripts`` renders them)."""

from __future__ import annotations

from . import Format

FORMAT = Format("scripts", "node-N.sh per node, proxy.sh and README.md", lambda d: d.scripts())
