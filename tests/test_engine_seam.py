"""The engine seam: an engine is one object (``pdtp.engine.ENGINES``: its releases, its
deployment and launch lines, its memory default), and its connectors are the core's objects
naming it. ``pdtp.check``, ``pdtp.transfer`` and deploy's adapter, builder and diff dispatch
through that object; none of them names a connector or an engine's own module, so adding an
engine touches none of them (as ``src/check.rs`` names no engine: test_sglang_seam)."""

from __future__ import annotations

import ast
from importlib import import_module, resources

import pytest

import pdtp
from pdtp import engine
from pdtp.deployment.connectors import connectors as deploy_connectors

connectors = import_module("pdtp.connectors")  # the module (pdtp.connectors is a function)

# The files every engine passes through (package-relative, as installed).
SEAM_FILES = (
    "check.py",
    "transfer.py",
    "deployment/adapter.py",
    "deployment/build.py",
    "deployment/diff.py",
)


def _words() -> set[str]:
    """Every connector's name and alias, and the words they are made of beyond the engine's
    name (``mooncake``, ``nixl``, ``moriio``, ``mori``)."""
    out: set[str] = set()
    for name in connectors.all_connector_names():
        c = connectors.resolve_connector(name)
        for n in (name, *c.aliases):
            out.add(n.lower())
            # The transfer library's word: "moriio-write" -> moriio, "sglang-nixl" -> nixl.
            words = [w for w in n.lower().split("-") if w not in engine.ENGINES]
            out.add(words[0])
        out.add(c.kv_connector.lower())
    for kv in deploy_connectors():
        out |= {n.lower() for n in kv.names}
    return out


def _code_names(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of every identifier, attribute, import and string constant that is
    not a docstring (comments are not in the tree)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                out.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            out.append((node.lineno, node.attr))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            out.append((node.lineno, node.arg))
    return out


def _findings(source: str, words: set[str]) -> list[str]:
    """What names an engine's connector or an engine: a connector word anywhere in the code,
    an engine's name other than as its release keyword (``sglang_version=`` stays public)."""
    keywords = set(engine.version_options())
    found = []
    for line, text in _code_names(ast.parse(source)):
        low = text.lower()
        for w in sorted(words):
            if w in low:
                found.append(f"line {line}: {text!r} names {w!r}")
        rest = low
        for k in keywords:
            rest = rest.replace(k, "")
        for e in engine.ENGINES:
            if e != engine.DEFAULT_ENGINE and e in rest:
                found.append(f"line {line}: {text!r} names engine {e!r}")
    return found


@pytest.mark.parametrize("path", SEAM_FILES)
def test_the_seam_files_name_no_connector_and_no_engine(path):
    source = resources.files("pdtp").joinpath(path).read_text(encoding="utf-8")
    assert _findings(source, _words()) == []


def test_the_scan_finds_what_it_forbids():
    """The scan itself: each kind of mention it exists to catch is caught (and docstrings,
    comments and the release keywords are not)."""
    words = _words()
    assert {"sglang-mooncake", "mooncake", "nixl", "moriio", "nixlconnector"} <= words
    caught = [
        'if conn.name == "nixl":\n    pass\n',
        "from .connectors.sglang_deploy import deploy_sglang\n",
        "x = moriio_read_mode\n",
        'engine = "sglang"\n',
        "def f(v):\n    return v.kv_connector == 'MoRIIOConnector'\n",
    ]
    for src in caught:
        assert _findings(src, words), src
    clean = '"""nixl and sglang-mooncake in a docstring."""\n# moriio\ndef f(sglang_version=None):\n    return sglang_version\n'
    assert _findings(clean, words) == []


def test_every_connector_names_a_registered_engine():
    """One place: each core connector's engine is an ENGINES entry, whose releases resolve it
    and whose label output uses."""
    for name in connectors.all_connector_names():
        c = connectors.resolve_connector(name)
        e = engine.engine(c.engine)
        assert c.engine_label == e.label
        assert (
            c.vllm_version == e.default_version
            or c.rules_version == e.default_version
            or (c.vllm_version in e.releases)
        )
    with pytest.raises(pdtp.PdtpError, match="engine must be one of vllm, sglang"):
        engine.engine("trtllm")


def test_a_release_keyword_of_another_engine_is_refused_by_the_registry():
    with pytest.raises(pdtp.PdtpError, match="runs in SGLang: give sglang_version="):
        connectors.engine_connector("sglang-nixl", vllm_version="0.20.0")
    with pytest.raises(pdtp.PdtpError, match=r"sglang_version='0.5.9' is for SGLang's"):
        connectors.engine_connector("nixl", sglang_version="0.5.9")
    assert connectors.engine_connector("sglang-nixl", sglang_version="0.5.9") == (
        "sglang-nixl@0.5.9",
        None,
    )
    assert connectors.engine_connector("nixl", vllm_version="0.20.0") == ("nixl", "0.20.0")
