"""``pdtp serve``: the CLI's commands over HTTP/JSON, replica metrics, and a web page.

Install with the ``serve`` extra (``pip install 'pdtp[serve]'``): FastAPI, uvicorn and
prometheus_client load only here, never on ``import pdtp``.

One schema: an operation's request fields are its CLI command's flags (``--max-tp 8`` is
``"max_tp": 8``) read from the CLI's own parser, and its answer is what ``pdtp COMMAND
--json`` prints, because the service runs that command (its parsing, validation, defaults
and JSON) in a worker thread. See :mod:`pdtp.service.ops`.
"""

from __future__ import annotations

from typing import Any

# The HTTP API's version: the path prefix (/v1/...) and the OpenAPI document's version.
# Raise it when a field or an answer changes in a way an existing client would notice.
API_VERSION = "1"


def create_app(**settings: Any) -> Any:
    """The ASGI application (see :class:`pdtp.service.app.Settings` for ``settings``)."""
    from .app import Settings, build_app

    return build_app(Settings(**settings))


__all__ = ["API_VERSION", "create_app"]
