"""What a KV connector's module tells ``pdtp deploy``: the base class every connector module
subclasses (``CONNECTOR = MyConnector()``), with the defaults a connector without the
feature keeps.

A connector module depends on nothing else of the deployment package (it takes the plan's
view, ports and bases as its callers hand them over and returns plain values), so the
launch-line maker, the port ledger and the proxy ask it without an import cycle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgumentError
from ..versions import Version

if TYPE_CHECKING:
    from ...connectors import Connector
    from ..adapter import PlannedInstance, PlanView
    from ..ports import InstancePorts, PortBases

# Where a proxy file of vLLM's repository is fetched from (at the release's tag).
REPO_RAW = "https://raw.githubusercontent.com/vllm-project/vllm"


def port_offset(dp_rank: int, tp_rank: int, tp_size: int = 1) -> int:
    """vLLM's ``get_port_offset`` (moriio_common.py): MoRIIO's bind calls it without
    ``tp_size`` (``dp_rank + tp_rank``), NIXL 0.11.0's side channel with it."""
    return dp_rank * tp_size + tp_rank


def plan_read_mode(plan: Any) -> bool | None:
    """The transfer mode a plan states (MoRIIO's READ: True, WRITE: False), under any of the
    names plans have used for it; None when it states none."""
    for attr in ("read_mode", "moriio_read_mode", "moriio_mode", "mode"):
        value = getattr(plan, attr, None)
        if value is not None:
            return read_mode_value(value)
    return None


def read_mode_value(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("read", "true", "1"):
        return True
    if text in ("write", "false", "0"):
        return False
    raise InvalidArgumentError(f"plan MoRIIO mode must be 'read' or 'write', got {value!r}")


@dataclass(frozen=True)
class ProxySpec:
    """A P/D proxy as a connector runs it: the file of vLLM's repository (``source_path``),
    its arguments and what it needs; ``deployment.proxy`` adds the host and bundled copy."""

    source_path: str
    args: tuple[str, ...]
    pip_packages: tuple[str, ...]
    needs_vllm: bool
    discovery_port: int | None
    kind: str


@dataclass(frozen=True)
class Pairing:
    """How the data-parallel ranks of two sides pair (``pdtp.transfer``'s
    ``DataParallelPairing`` without the sizes): what pins a request's prefill DP rank, how
    many prefill engines a decode rank connects to, and whether it does so at startup."""

    pinned_by: str
    handshakes: int
    eager: bool


class KvConnector:
    """One KV connector as ``pdtp deploy`` launches it. ``names`` are the pdtp connector
    names (the Rust core's objects, ``src/connector/``) it launches; its vLLM class, roles
    and mode come from that object, never restated here."""

    #: The pdtp connector names this module launches, the first its default.
    names: tuple[str, ...] = ()
    #: How deploy output names it (``"NIXL"``).
    display: str = ""
    #: ``Proxy.kind``: which P/D proxy fronts it.
    proxy_kind: str = ""
    #: The first release that ships the connector (None: every release deploy supports).
    since: Version | None = None
    #: Whether instances register with the proxy on ``PortBases.proxy_discovery``.
    registers_with_proxy: bool = False

    @cached_property
    def core(self) -> Connector:
        """The Rust core's object of the default name (class name, roles, modes)."""
        from ...connectors import resolve_connector

        return resolve_connector(self.names[0])

    @property
    def engine(self) -> str:
        """The serving engine that launches it (the core object's; ``pdtp.engine.ENGINES``)."""
        return self.core.engine

    @property
    def kv_connector(self) -> str:
        """vLLM's ``kv_connector`` class (the core object's)."""
        return self.core.kv_connector

    # -- the plan -----------------------------------------------------------------------
    def read_mode(self, name: str, given: bool | None) -> bool | None:
        """The transfer mode a plan of connector ``name`` runs (``given``: the plan's own);
        None for a connector without modes."""
        return None

    def label(self, read_mode: bool | None) -> str:
        """``"NIXL"`` / ``"MoRIIO READ mode"``: what deploy output calls the connector."""
        return self.display

    def check_version(self, version: Version) -> None:
        """Refuse a release that does not ship the connector."""
        if self.since is not None and version < self.since:
            raise InvalidArgumentError(
                f"vllm_version {version} has no {self.kv_connector} (it ships from {self.since})"
            )

    # -- the launch line ------------------------------------------------------------------
    def transfer(
        self,
        view: PlanView,
        inst: PlannedInstance,
        ports: InstancePorts,
        *,
        version: Version,
        host: str,
        proxy_host: str,
        bases: PortBases,
        backend: str | None,
    ) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
        """``(kv_connector_extra_config or None, environment)`` of one instance."""
        return None, []

    def engine_args(self, view: PlanView, version: Version) -> list[str]:
        """Launch flags the connector needs for this model on this release (none here)."""
        return []

    def transfer_argv(self, config: dict[str, Any]) -> list[str]:
        """The launch arguments that carry the transfer config (vLLM's
        ``--kv-transfer-config`` JSON; an engine with other flags overrides this)."""
        return ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]

    # -- transport --------------------------------------------------------------------------
    def backend(
        self,
        placed: tuple[PlannedInstance, ...],
        version: Version,
        requested: str | None,
    ) -> tuple[str | None, str]:
        """The transport to state and why (``(None, "")``: the connector picks its own)."""
        if requested is not None:
            raise InvalidArgumentError(
                f"backend applies to MoRIIO only ({self.display} picks its transport)"
            )
        return None, ""

    def why_backend_restarts(self, old: str | None, new: str | None) -> str:
        """Why every instance restarts when the transport deploy states changes."""
        return f"the transport changes from {old} to {new}"

    def k8s_backend(self, version: Version) -> str | None:
        """The transport of Kubernetes deployments (node placement is not pinned there)."""
        return None

    def host_notes(self, not_ip: list[str]) -> list[str]:
        """What to know when nodes are named by host names ``not_ip`` rather than IPs."""
        return []

    # -- ports ------------------------------------------------------------------------------
    def instance_ports(self, bases: PortBases, slot: int) -> dict[str, int]:
        """The connector's fields of ``InstancePorts`` for an instance at device ``slot``."""
        return {}

    def bound_ports(
        self,
        version: Version,
        owner: str,
        ports: InstancePorts,
        tp: int,
        dp: int,
        dps: range,
    ) -> list[tuple[int, str]]:
        """``(port, purpose)`` of every port the connector binds for DP ranks ``dps``."""
        return []

    def proxy_ports(self, bases: PortBases) -> list[tuple[int, str]]:
        """``(port, purpose)`` the proxy binds for the connector besides its HTTP API."""
        return []

    # -- the proxy ---------------------------------------------------------------------------
    def proxy(
        self, version: Version, bases: PortBases, backends: list[Any], listen_host: str
    ) -> ProxySpec:
        raise NotImplementedError

    def describe_proxy(self, discovery_port: int | None) -> str:
        """One sentence for the proxy script: what the proxy does."""
        return ""

    def readme_mode(self, read_mode: bool | None) -> str:
        """What the README adds after the connector's label (the mode stated, and why)."""
        return ""

    def restart_proxy(self, stops: bool, proxy_changes: bool) -> str:
        """Why the proxy restarts when a deployment changes ('' when it need not)."""
        return "the proxy's command changes" if proxy_changes else ""

    # -- data parallel -------------------------------------------------------------------------
    def pairing(self, prefill_dp: int) -> Pairing:
        raise NotImplementedError
