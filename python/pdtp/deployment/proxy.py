"""The proxy/router in front of a disaggregated deployment, run as vLLM's own examples run it.

Every request goes to a prefill instance (``max_tokens=1``, ``do_remote_decode``) and then to a
decode instance that pulls (NIXL, MoRIIO READ) or receives (MoRIIO WRITE) its KV cache. Which
proxy of vLLM's repository fronts a connector, with which arguments and packages per
release, is the connector module's (``deployment/connectors/``): MoRIIO's
``moriio_toy_proxy_server.py`` (instances register with it), NIXL's ``toy_proxy_server.py``
(given every instance's host and port).

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

from .connectors import connector_of
from .connectors.base import REPO_RAW
from .ports import PortBases
from .versions import Version

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
    #: The connector module's ``proxy_kind`` (vLLM's P/D proxies: ``"moriio"``, ``"nixl"``)
    #: or ``"router"`` (pdtp's, for aggregated plans).
    kind: str = "router"
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
    (and registrations on ``bases.proxy_discovery`` where the connector has them);
    ``kv_connector`` None: pdtp's
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
    spec = connector_of(kv_connector).proxy(version, bases, backends, listen_host)
    return Proxy(
        host=host,
        http_port=bases.proxy_http,
        discovery_port=spec.discovery_port,
        source_path=spec.source_path,
        source_url=f"{REPO_RAW}/{tag}/{spec.source_path}",
        args=spec.args,
        pip_packages=spec.pip_packages,
        needs_vllm=spec.needs_vllm,
        kind=spec.kind,
        bundled=bundled(version, spec.source_path),
    )


def bundled(version: Version, path: str) -> str | None:
    """The proxy file ``path`` of release ``version`` as pdtp carries it, or None."""
    if version not in BUNDLED_RELEASES:
        return None
    name = path.rsplit("/", 1)[-1]
    return (VENDORED / f"vllm-{version}" / f"{name}.txt").read_text(encoding="utf-8")
