"""The proxy/router in front of a disaggregated deployment, run as vLLM's own examples run it.

Every request goes to a prefill instance (``max_tokens=1``, ``do_remote_decode``) and then to a
decode instance that pulls (NIXL, MoRIIO READ) or receives (MoRIIO WRITE) its KV cache.

- MoRIIO: ``moriio_toy_proxy_server.py`` from vLLM's examples. Instances register themselves
  (heartbeats to ``proxy_ip:proxy_ping_port``, carrying their HTTP address, handshake/notify
  address, TP size and transfer mode) and the proxy embeds both peers' addresses in each
  request id — the MoRIIO handshake needs it. It lives in
  ``examples/online_serving/disaggregated_serving/`` until 0.20.x and
  ``examples/disaggregated/disaggregated_serving/`` from 0.21.0; it takes ``--port`` from 0.21.0
  (10001 fixed before) and ``--service-discovery-port`` from 0.33.0 (36367 fixed before); it
  imports vLLM itself from 0.18.0 and hypercorn from 0.26.0.
- NIXL: ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``, given every prefill
  and decode instance's host and HTTP port (same options in every supported release).

Neither file ships in vLLM's wheel. pdtp bundles both as vLLM v0.33.0's sdist has them
(``vendored/vllm-0.33.0/``, Apache-2.0, with vLLM's LICENSE): a deployment of that release
carries its proxy and downloads nothing. For another release the proxy script uses
``$PDTP_PROXY_PY`` (a local copy) or fetches the file from vLLM's repository at the release
tag, and the deployment says so.

Aggregated plans have no P/D proxy: their instances sit behind pdtp's router (``router.py``,
the standard library only), each request to the least-loaded instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from .adapter import MORIIO
from .ports import PortBases
from .versions import Version

REPO_RAW = "https://raw.githubusercontent.com/vllm-project/vllm"
MORIIO_EXAMPLES_MOVED = Version(0, 21, 0)
MORIIO_PORT_OPTION_SINCE = Version(0, 21, 0)
MORIIO_DISCOVERY_OPTION_SINCE = Version(0, 33, 0)
MORIIO_IMPORTS_VLLM_SINCE = Version(0, 18, 0)
MORIIO_HYPERCORN_SINCE = Version(0, 26, 0)
MORIIO_REGEX = (Version(0, 16, 0), Version(0, 19, 1))  # releases importing `regex`
# The proxies' fixed ports before they became options (vLLM's defaults ever since).
MORIIO_FIXED_HTTP_PORT = 10001
MORIIO_FIXED_DISCOVERY_PORT = 36367
NIXL_PROXY_PATH = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
ROUTER_FILE = "router.py"
# The releases whose proxies pdtp carries (vendored/vllm-X/<file>.txt, from the sdist).
VENDORED = Path(__file__).parent / "vendored"
BUNDLED_RELEASES = (Version(0, 33, 0),)
# The module each pip package installs, where the names differ (checked before starting).
_IMPORT_NAME = {"pyzmq": "zmq"}


@dataclass(frozen=True)
class Backend:
    """One prefill or decode instance as the proxy reaches it."""

    role: str
    host: str
    port: int


@dataclass(frozen=True)
class Proxy:
    """The proxy: runs ``python3 <file> <args>`` on ``host``; clients call
    ``http://host:http_port/v1/...``."""

    host: str
    http_port: int
    discovery_port: int | None
    source_path: str
    source_url: str
    args: tuple[str, ...]
    pip_packages: tuple[str, ...]
    needs_vllm: bool
    #: "moriio" / "nixl" (vLLM's P/D proxies) or "router" (pdtp's, for aggregated plans).
    kind: str = "moriio"
    #: The proxy's source as pdtp carries it (written next to the scripts, or into a
    #: ConfigMap), None when it must come from $PDTP_PROXY_PY or be downloaded at run time.
    bundled: str | None = None

    @property
    def file_name(self) -> str:
        return self.source_path.rsplit("/", 1)[-1]

    @property
    def downloads(self) -> tuple[str, ...]:
        """What starting the proxy may fetch over the network (empty: nothing)."""
        out = () if self.bundled is not None else (self.source_url,)
        return out + tuple(f"pip: {p}" for p in self.pip_packages)

    @property
    def import_check(self) -> str:
        """Python that fails unless the proxy's packages are installed."""
        return "import " + ", ".join(_IMPORT_NAME.get(p, p) for p in self.pip_packages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "http_port": self.http_port,
            "discovery_port": self.discovery_port,
            "url": f"http://{self.host}:{self.http_port}",
            "source_path": self.source_path,
            "source_url": self.source_url,
            "args": list(self.args),
            "pip_packages": list(self.pip_packages),
            "needs_vllm": self.needs_vllm,
            "kind": self.kind,
            "bundled": self.bundled is not None,
        }


def proxy(
    version: Version,
    kv_connector: str | None,
    host: str,
    bases: PortBases,
    backends: list[Backend],
    *,
    listen_host: str = "0.0.0.0",
) -> Proxy:
    """The proxy command of ``version`` for ``kv_connector`` listening on ``bases.proxy_http``
    (and MoRIIO's registrations on ``bases.proxy_discovery``); ``kv_connector`` None: pdtp's
    router over ``backends`` (an aggregated plan)."""
    tag = f"v{version}"
    if kv_connector is None:
        routed = ["--host", listen_host, "--port", str(bases.proxy_http)]
        for b in backends:
            routed += ["--backend", f"{b.host}:{b.port}"]
        return Proxy(
            host=host,
            http_port=bases.proxy_http,
            discovery_port=None,
            source_path=ROUTER_FILE,
            source_url="",
            args=tuple(routed),
            pip_packages=(),
            needs_vllm=False,
            kind="router",
            bundled=(Path(__file__).parent / ROUTER_FILE).read_text(encoding="utf-8"),
        )
    if kv_connector == MORIIO:
        folder = (
            "examples/disaggregated/disaggregated_serving"
            if version >= MORIIO_EXAMPLES_MOVED
            else "examples/online_serving/disaggregated_serving"
        )
        path = f"{folder}/moriio_toy_proxy_server.py"
        args: list[str] = []
        if version >= MORIIO_PORT_OPTION_SINCE:
            args += ["--port", str(bases.proxy_http)]
        else:
            _fixed("proxy_http", bases.proxy_http, MORIIO_FIXED_HTTP_PORT, version)
        if version >= MORIIO_DISCOVERY_OPTION_SINCE:
            args += ["--service-discovery-port", str(bases.proxy_discovery)]
        else:
            _fixed("proxy_discovery", bases.proxy_discovery, MORIIO_FIXED_DISCOVERY_PORT, version)
        packages = ["quart", "aiohttp", "msgpack", "pyzmq"]
        if MORIIO_REGEX[0] <= version <= MORIIO_REGEX[1]:
            packages.append("regex")
        if version >= MORIIO_HYPERCORN_SINCE:
            packages.append("hypercorn")
        return Proxy(
            host=host,
            http_port=bases.proxy_http,
            discovery_port=bases.proxy_discovery,
            source_path=path,
            source_url=f"{REPO_RAW}/{tag}/{path}",
            args=tuple(args),
            pip_packages=tuple(packages),
            needs_vllm=version >= MORIIO_IMPORTS_VLLM_SINCE,
            kind="moriio",
            bundled=bundled(version, path),
        )
    prefill = [b for b in backends if b.role == "prefill"]
    decode = [b for b in backends if b.role == "decode"]
    args = ["--host", listen_host, "--port", str(bases.proxy_http)]
    args += ["--prefiller-hosts", *(b.host for b in prefill)]
    args += ["--prefiller-ports", *(str(b.port) for b in prefill)]
    args += ["--decoder-hosts", *(b.host for b in decode)]
    args += ["--decoder-ports", *(str(b.port) for b in decode)]
    return Proxy(
        host=host,
        http_port=bases.proxy_http,
        discovery_port=None,
        source_path=NIXL_PROXY_PATH,
        source_url=f"{REPO_RAW}/{tag}/{NIXL_PROXY_PATH}",
        args=tuple(args),
        pip_packages=("fastapi", "httpx", "uvicorn"),
        needs_vllm=False,
        kind="nixl",
        bundled=bundled(version, NIXL_PROXY_PATH),
    )


def bundled(version: Version, path: str) -> str | None:
    """The proxy file ``path`` of release ``version`` as pdtp carries it, or None."""
    if version not in BUNDLED_RELEASES:
        return None
    name = path.rsplit("/", 1)[-1]
    return (VENDORED / f"vllm-{version}" / f"{name}.txt").read_text(encoding="utf-8")


def _fixed(field: str, given: int, fixed: int, version: Version) -> None:
    if given != fixed:
        raise InvalidArgumentError(
            f"ports.{field} must be {fixed} with vLLM {version}: its MoRIIO proxy has that port "
            f"fixed, got {given}"
        )
