"""The connector seam: a connector is one object in the Rust core and one module in
``pdtp/deployment/connectors/``; nothing else in pdtp branches on a connector's name.

- ``test_nothing_else_names_a_connector`` reads every module of ``python/pdtp`` and fails on a
  connector's name or vLLM class written as a string outside the registry;
- ``test_a_toy_connector_goes_check_solve_deploy`` adds a connector the way a contributor
  would (its core object, here registered at run time with NIXL's rules; its deploy module,
  defined in this file) and runs check → solve → deploy with it, in a fresh interpreter
  (the registration lasts for the process).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pdtp
from pdtp.connectors import connector_names, resolve_connector
from pdtp.deployment import connectors as registry

PACKAGE = Path(pdtp.__file__).parent
# The registry: the core's names (connectors.py) and the deploy modules (one per connector).
ALLOWED = (PACKAGE / "connectors.py", PACKAGE / "deployment" / "connectors")
SKIP = (PACKAGE / "deployment" / "vendored",)


def _names() -> set[str]:
    out = set()
    for name in connector_names():
        c = resolve_connector(name)
        out |= {name, *c.aliases, c.kv_connector}
    return {n.lower() for n in out}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def connector_literals(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every string constant in ``source`` that is a connector's name or
    class, or a prefix match (``startswith("moriio")``), docstrings aside."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value.strip().lower()
            if text in names or any(text.startswith(f"{n}@") for n in names):
                found.append((node.lineno, node.col_offset, node.value))
    return [(line, text) for line, _, text in sorted(found)]


def test_the_scan_finds_branches():
    names = _names()
    code = textwrap.dedent(
        '''
        """Docstrings may name "moriio"."""
        def f(kv):
            if kv == "MoRIIOConnector":
                return {"NixlConnector": 1}.get(kv, "nixl")
            return g(connector="moriio-write") or key.startswith("nixl@")
        '''
    )
    got = [t for _, t in connector_literals(code, names)]
    assert got == ["MoRIIOConnector", "NixlConnector", "nixl", "moriio-write", "nixl@"]


def test_nothing_else_names_a_connector():
    names = _names()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path == a or a in path.parents for a in ALLOWED + SKIP):
            continue
        for line, text in connector_literals(path.read_text(encoding="utf-8"), names):
            offenders.append(f"{path.relative_to(PACKAGE)}:{line}: {text!r}")
    assert not offenders, "connector names outside the registry:\n" + "\n".join(offenders)


def test_every_core_connector_has_a_deploy_module():
    for name in connector_names():
        module = registry.named(name)
        assert module is not None, name
        assert registry.connector_of(resolve_connector(name).kv_connector) is module
    for module in registry.connectors():
        for name in module.names:
            assert resolve_connector(name).kv_connector == module.kv_connector
    with pytest.raises(pdtp.InvalidArgumentError, match="MoRIIOConnector or NixlConnector"):
        registry.connector_of("LMCacheConnectorV1")


def test_the_registry_refuses_taken_names():
    with pytest.raises(pdtp.InvalidArgumentError, match="taken"):
        registry.register(type("Again", (registry.KvConnector,), {"names": ("nixl",)})())


TOY = """
import json
import pdtp
from pdtp.connectors import register_connector
from pdtp.deployment import connectors as registry
from pdtp.deployment.connectors import KvConnector, Pairing, ProxySpec
from pdtp.deployment.connectors.nixl import NIXL_PROXY_PATH

# 1. The core object: a pull connector with NIXL's rules that starts on NVIDIA GPUs only
#    and pairs nothing across GPU types.
toy = register_connector(
    "toy-pull",
    kv_connector="ToyConnector",
    rules_of="nixl",
    prefill_role="kv_producer",
    decode_role="kv_consumer",
    gpu_vendor="NVIDIA",
    summary="a test connector",
)

# 2. Its deploy module: transfer config, environment, ports, proxy, DP pairing.
class Toy(KvConnector):
    names = ("toy-pull",)
    display = "Toy"
    proxy_kind = "toy"

    def transfer(self, view, inst, ports, *, version, host, proxy_host, bases, backend):
        return {"toy_port": ports.side_channel}, [("TOY_HOST", host)]

    def instance_ports(self, bases, slot):
        return {"side_channel": bases.nixl_side_channel + 100 + slot}

    def bound_ports(self, version, owner, ports, tp, dp, dps):
        return [(ports.side_channel + d, f"toy listener (dp {d})") for d in dps]

    def proxy(self, version, bases, backends, listen_host):
        args = ("--port", str(bases.proxy_http))
        return ProxySpec(NIXL_PROXY_PATH, args, ("fastapi",), False, None, self.proxy_kind)

    def describe_proxy(self, discovery_port):
        return "the toy proxy"

    def pairing(self, prefill_dp):
        return Pairing("the toy router", prefill_dp, False)

registry.register(Toy())

out = {"connector": toy.to_dict()}
# 3. check -> solve -> deploy.
out["check_h100"] = pdtp.check("llama-3.1-8b", 2, 4, connector="toy-pull", gpu="h100").ok
bad = pdtp.check("llama-3.1-8b", 2, 4, connector="toy-pull", gpu="mi300x")
out["check_mi300x"] = [v.code for v in bad.violations]
same = pdtp.check("llama-3.1-8b", 2, 4, connector="nixl", gpu="h100")
out["same_as_nixl"] = [v.code for v in same.violations] == [
    v.code for v in pdtp.check("llama-3.1-8b", 2, 4, connector="toy-pull", gpu="h100").violations
]
plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", connector="toy-pull", mode="disagg")
out["plan"] = {"connector": plan.connector, "kv_connector": plan.kv_connector}
try:
    pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", connector="toy-pull", mode="disagg")
except pdtp.PdtpError as e:
    out["solve_mi300x"] = type(e).__name__
dep = pdtp.deploy(plan)
out["deploy"] = {
    "label": dep.connector_label,
    "configs": [i.launch.kv_transfer_config for i in dep.instances],
    "env": [dict(i.launch.env).get("TOY_HOST") for i in dep.instances],
    "bound": [b.purpose for b in dep.bound_ports_by_host()["127.0.0.1"]],
    "proxy": dep.proxy.kind,
}
print(json.dumps(out))
"""


def test_a_toy_connector_goes_check_solve_deploy():
    done = subprocess.run(
        [sys.executable, "-c", TOY], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["connector"]["name"] == "toy-pull"
    assert out["connector"]["kv_connector"] == "ToyConnector"
    assert out["connector"]["gpu_vendor"] == "NVIDIA"
    # Checked with NIXL's rules, refused where its worker cannot start.
    assert out["check_h100"] is True and out["same_as_nixl"] is True
    assert out["check_mi300x"]
    assert out["solve_mi300x"] == "InfeasibleError"
    assert out["plan"] == {"connector": "toy-pull", "kv_connector": "ToyConnector"}
    # Deployed by the toy's module alone: its config, environment, ports and proxy.
    d = out["deploy"]
    assert d["label"] == "Toy" and d["proxy"] == "toy"
    configs = d["configs"]
    assert configs and all(c["kv_connector"] == "ToyConnector" for c in configs)
    assert {c["kv_role"] for c in configs} == {"kv_producer", "kv_consumer"}
    assert all(isinstance(c["kv_connector_extra_config"]["toy_port"], int) for c in configs)
    assert all(h == "127.0.0.1" for h in d["env"])
    assert any(p.startswith("toy listener") for p in d["bound"])
