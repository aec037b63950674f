"""``sglang-nixl``: SGLang's nixl transfer backend as ``pdtp deploy`` sees it (its plans are
launched by :mod:`pdtp.deployment.connectors.sglang_deploy`, not by vLLM's launch lines)."""

from __future__ import annotations

from .sglang_deploy import SglangKvConnector

CONNECTOR = SglangKvConnector("sglang-nixl")
