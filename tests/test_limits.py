"""Issue 23: limits that hold and every error a pdtp error.

* Every public function, each argument in turn given a wrong type or an extreme value
  (hypothesis), ends in a result or one :class:`pdtp.PdtpError` (type errors as
  :class:`pdtp.ArgumentTypeError`), with a bounded message.
* Every file input is bounded by what is read: devices, folders and FIFOs are refused or read
  with a cap, never read whole or waited on.
* The node-pattern memory bound (``gpus_per_node``), checked under a memory cap.
* The Hub lookup against fake huggingface_hub modules of the 0.24 and the 2.x shapes.
* The sweep lock keyed by the real path; ``pareto`` reporting a time cut as a time cut.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pdtp
from hostile import assert_cli_error, assert_pdtp_error, call_api, call_here, run_cli_here
from pdtp.errors import MAX_MESSAGE_CHARS

# ---- every public function: wrong types and extreme values ---------------------------------

PLAN_DICT = {
    "model": "llama-3.1-8b",
    "gpu": "h100",
    "connector": "nixl",
    "prefill": {"tp": 1, "instances": 1},
    "decode": {"tp": 1, "instances": 1},
}
POINT = {
    "model": "llama-3.1-8b",
    "gpu": "h100",
    "tp": 1,
    "isl": 1024,
    "osl": 128,
    "concurrency": 8,
    "output_tokens_per_s": 900.0,
    "ttft_ms": 80.0,
    "tpot_ms": 9.0,
}


def _sim_config() -> Any:
    return pdtp.sim_config("llama-3.1-8b", gpu="h100", tp=1)


# function -> (positional args, keyword args): a valid, cheap call each argument of which
# the property test replaces in turn.
BASE: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "solve": (("llama-3.1-8b", 8), {"gpu": "h100", "time_limit_s": 0.5}),
    "size_for": (("llama-3.1-8b", 5.0), {"max_gpus": 8, "gpu": "h100", "time_limit_s": 0.5}),
    "replan": ((PLAN_DICT, 5.0), {"max_gpus": 8, "time_limit_s": 0.5}),
    "solve_fleet": (
        ([("llama-3.1-8b", 5.0), ("qwen3-8b", 2.0)],),
        {"gpus": 16, "gpu": "h100", "time_limit_s": 0.5},
    ),
    "pareto": (
        ("llama-3.1-8b", 8),
        {"gpu": "h100", "tpot_ms": [20, 50], "time_limit_s": 0.5},
    ),
    "check": (("llama-3.1-8b", 2, 4), {"connector": "nixl"}),
    "evaluate": (
        ("llama-3.1-8b",),
        {
            "gpu": "h100",
            "prefill_tp": 1,
            "prefill_instances": 1,
            "decode_tp": 1,
            "decode_instances": 1,
            "connector": "nixl",
        },
    ),
    "predict_prefill": (("llama-3.1-8b",), {"gpu": "h100", "tp": 1, "isl": 1024}),
    "predict_decode": (
        ("llama-3.1-8b",),
        {"gpu": "h100", "tp": 1, "isl": 1024, "osl": 128, "batch": 8},
    ),
    "predict_serving": (
        ("llama-3.1-8b",),
        {"gpu": "h100", "tp": 1, "isl": 1024, "osl": 128, "concurrency": 8},
    ),
    "calibrate": (([POINT, {**POINT, "concurrency": 16}],), {"fit": ("mbu",)}),
    "simulate": ((PLAN_DICT,), {"rate_rps": 2.0, "requests": 50}),
    "sim_config": (("llama-3.1-8b",), {"gpu": "h100", "tp": 1}),
    "max_rate_within_slo": ((PLAN_DICT,), {"requests": 50, "tolerance": 0.2}),
    "deploy": ((PLAN_DICT,), {"node_hosts": ["10.0.0.1"]}),
    "deploy_diff": ((PLAN_DICT, {**PLAN_DICT, "decode": {"tp": 1, "instances": 2}}), {}),
    "transfer_map": ((2, 4), {"kv_heads": 8, "connector": "nixl"}),
    "resolve_connector": (("nixl",), {}),
    "connectors": ((), {}),
    "model": (("llama-3.1-8b",), {}),
    "gpu": (("h100",), {}),
    "remote_tp_rank": ((0, 2, 4), {}),
    "expected_ack_count": ((2, 4), {}),
    "validate_kv_heads": ((4, 4, 8, False), {}),
    "load_trace": (("/nonexistent/trace.csv",), {}),
    "sweep": (
        (["llama-3.1-8b"],),
        {"gpus": [8], "gpu": "h100", "as_frame": False},
    ),
    "Workload": ((), {"isl": 1024, "osl": 128}),
    "Layout": ((2,), {}),
    "MoveCost": ((), {}),
    "ModelShape": ((32, 8), {}),
}


def _nested(depth: int) -> Any:
    out: Any = 1
    for _ in range(depth):
        out = [out]
    return out


HOSTILE: list[Any] = [
    None,
    True,
    0,
    -1,
    2**63,
    2**70,
    -(2**70),
    1.5,
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    "",
    "x" * 100_000,
    "\ud800",
    "a\0b",
    b"bytes",
    [],
    [1, "a", None],
    {},
    {"a": 1},
    (1, 2, 3),
    1j,
    np.int64(3),
    np.float64(2.0),
    np.int64(-(2**62)),
    _nested(2000),
    object(),
]


def _parameters(name: str) -> list[str]:
    import inspect

    args, kwargs = BASE[name]
    sig = inspect.signature(getattr(pdtp, name))
    names = list(sig.parameters)[: len(args)] + list(kwargs)
    # Also every keyword the base call leaves at its default (wrong values for those too).
    names += [p for p in sig.parameters if p not in names and p not in ("self",)]
    return [n for n in names if sig.parameters[n].kind is not inspect.Parameter.VAR_KEYWORD]


def _call(name: str, field: str, value: Any) -> Any:
    import inspect

    fn = getattr(pdtp, name)
    args, kwargs = BASE[name]
    sig = inspect.signature(fn)
    bound = sig.bind_partial(*args, **kwargs)
    bound.arguments[field] = value
    return fn(*bound.args, **bound.kwargs)


def test_every_public_function_is_in_the_table():
    import inspect

    public = {
        n
        for n in pdtp.__all__
        if callable(getattr(pdtp, n))
        and not (inspect.isclass(getattr(pdtp, n)) and issubclass(getattr(pdtp, n), Exception))
        and (inspect.isfunction(getattr(pdtp, n)) or inspect.isbuiltin(getattr(pdtp, n)))
    }
    assert public - {"models", "gpus"} <= set(BASE), sorted(public - set(BASE))


def _outcome_is_a_result_or_a_pdtp_error(name: str, field: str, value: Any) -> None:
    out = call_here(_call, name, field, value, timeout_s=120)
    shown = f"{name}({field}={type(value).__name__})"
    assert out.how in ("returned", "raised"), f"{shown}: {out.describe()[:2000]}"
    if out.how == "returned":
        return
    assert out.is_a(pdtp.PdtpError), f"{shown}: {out.describe()[:3000]}"
    if out.is_a(TypeError):
        assert out.is_a(pdtp.ArgumentTypeError), f"{shown}: {out.describe()[:3000]}"
    assert len(out.message) <= MAX_MESSAGE_CHARS + 100, (shown, len(out.message))


@pytest.mark.parametrize("name", sorted(BASE))
def test_the_base_calls_are_valid(name):
    if name == "load_trace":
        with pytest.raises(pdtp.InvalidArgumentError, match="cannot read trace"):
            _call(name, "path", BASE[name][0][0])
        return
    args, kwargs = BASE[name]
    getattr(pdtp, name)(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(BASE))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_wrong_types_and_extreme_values_end_in_a_pdtp_error(name, data):
    field = data.draw(st.sampled_from(_parameters(name)), label="field")
    value = data.draw(
        st.one_of(
            st.sampled_from(HOSTILE),
            st.integers(min_value=-(2**80), max_value=2**80),
            st.floats(allow_nan=True, allow_infinity=True),
            st.text(st.characters(codec=None), max_size=20),
            st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=4),
        ),
        label="value",
    )
    _outcome_is_a_result_or_a_pdtp_error(name, field, value)


@pytest.mark.parametrize("name", sorted(BASE))
def test_every_argument_with_every_hostile_value(name):
    # Exhaustive over the fixed list (a few hundred calls per function, most refused at
    # once): the cases issue 23 found (connector=5, max_acks=2**70, fit=None, a lone
    # surrogate, a list nested 2,000 deep) are all in it.
    for field in _parameters(name):
        for value in HOSTILE:
            _outcome_is_a_result_or_a_pdtp_error(name, field, value)


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (lambda: pdtp.solve("llama-3.1-8b", 8, connector=5), pdtp.ArgumentTypeError, ["connector"]),
        (
            lambda: pdtp.evaluate(
                "llama-3.1-8b",
                prefill_tp=1,
                prefill_instances=1,
                decode_tp=1,
                decode_instances=1,
                max_acks=2**70,
            ),
            pdtp.InvalidArgumentError,
            ["max_acks", "64-bit"],
        ),
        (lambda: pdtp.calibrate([POINT], fit=None), pdtp.ArgumentTypeError, ["fit"]),
        (lambda: pdtp.model("\ud800x"), pdtp.InvalidArgumentError, ["name", "surrogate"]),
        (
            lambda: pdtp.solve("llama-3.1-8b", 8, layouts=_nested(100_000)),
            pdtp.InvalidArgumentError,
            ["layouts", "nested"],
        ),
        (lambda: pdtp.solve("llama-3.1-8b", nodes="8,8"), pdtp.ArgumentTypeError, ["nodes"]),
        (lambda: pdtp.pareto("llama-3.1-8b", 8, tpot_ms=True), pdtp.ArgumentTypeError, ["tpot_ms"]),
    ],
)
def test_issue_23_reproducers_are_pdtp_errors(call, error, names):
    with pytest.raises(error) as info:
        call()
    for n in names:
        assert n in str(info.value)


def test_a_1mb_name_is_not_echoed_whole():
    with pytest.raises(pdtp.UnknownNameError) as info:
        pdtp.model("x" * 1_000_000)
    message = str(info.value)
    assert len(message) <= MAX_MESSAGE_CHARS + 100
    assert "characters cut" in message and "closest" in message  # the hint at the end stays
    out = run_cli_here(["solve", "y" * 1_000_000, "--gpus", "8"])
    assert out.returncode == 2 and len(out.stderr) <= MAX_MESSAGE_CHARS + 200, len(out.stderr)


def test_a_numpy_port_writes_as_json():
    dep = pdtp.deploy(PLAN_DICT, node_hosts=["10.0.0.1"], ports={"http": np.int64(9000)})
    assert json.loads(json.dumps(dep.to_dict()))  # was: Object of type int64 is not JSON


# ---- the CLI: exit codes from the documented set ---------------------------------------------


def _write_nested_plan(path: pathlib.Path, depth: int) -> None:
    path.write_text("[" * depth + "]" * depth)


@pytest.mark.parametrize(
    "argv",
    [
        ["deploy", "--plan", "{f}", "--node-hosts", "a"],
        ["simulate", "--plan", "{f}", "--rate", "1"],
        ["replan", "--current", "{f}", "--demand", "1", "--max-gpus", "8"],
        ["deploy", "--diff", "{f}", "{f}"],
    ],
)
def test_a_plan_nested_100000_deep_is_a_usage_error(tmp_path, argv):
    f = tmp_path / "deep.json"
    _write_nested_plan(f, 100_000)
    out = run_cli_here([a.replace("{f}", str(f)) for a in argv])
    assert out.returncode == 2, out.describe()
    assert "nested" in out.stderr and "internal error" not in out.stderr, out.stderr


def test_json_with_a_huge_integer_is_a_usage_error(tmp_path):
    f = tmp_path / "big.json"
    f.write_text('{"model": "llama-3.1-8b", "prefill": {"tp": ' + "9" * 5000 + "}}")
    out = run_cli_here(["deploy", "--plan", str(f), "--node-hosts", "a"])
    assert out.returncode == 2 and "--plan" in out.stderr, out.describe()


def test_readme_lists_every_exit_code():
    from pdtp import cli

    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    codes = {v for k, v in vars(cli).items() if k.startswith("EXIT_") and isinstance(v, int)}
    section = " ".join(readme[readme.index("exit codes are") :][:900].split())
    for code in codes:
        assert f"{code} (" in section, (code, section)
    for code in codes:
        assert str(code) in cli.EPILOG, code


# ---- every file input bounded by what is read ------------------------------------------------


@pytest.fixture
def specials(tmp_path):
    """Special files: a device, a FIFO no one writes to, a folder."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"device": "/dev/zero", "fifo": str(fifo), "folder": str(tmp_path)}


# (what, a call reading PATH) for every Python API that reads a file.
API_READERS = {
    "trace": lambda p: pdtp.load_trace(p),
    "hosts_file": lambda p: pdtp.deploy(PLAN_DICT, hosts_file=p),
    "points file": lambda p: pdtp.calibrate(p),
    "grid file": lambda p: pdtp.sweeps.load_grid(p + "/g.yaml" if os.path.isdir(p) else p),
    "config": lambda p: pdtp.Model.from_hf_config(pathlib.Path(p)),
}


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
@pytest.mark.parametrize("what", sorted(API_READERS))
def test_api_file_inputs_refuse_special_files_at_once(specials, what, kind):
    import pdtp.sweeps

    path = specials[kind]
    if what == "grid file" and kind != "folder":
        link = pathlib.Path(specials["folder"]) / "g.yaml"  # a grid file must end in .yaml
        link.symlink_to(path)
        path = str(link)
    out = call_here(API_READERS[what], path, timeout_s=30)
    if kind == "fifo" and out.how == "returned":
        return  # a FIFO no one writes to reads as empty (an empty grid is a valid one)
    assert out.how == "raised" and out.is_a(pdtp.PdtpError), out.describe()
    if kind == "device":
        assert "is a device" in out.message, out.message
    assert "Traceback" not in out.message


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100", "--trace", "{f}"],
        ["deploy", "--plan", "{plan}", "--hosts-file", "{f}"],
        ["deploy", "--plan", "{f}", "--node-hosts", "a"],
        ["simulate", "--plan", "{f}", "--rate", "1"],
        ["replan", "--current", "{f}", "--demand", "1", "--max-gpus", "8"],
        ["fleet", "--demands", "{f}", "--gpus", "8"],
        ["solve", "--config", "{f}", "--gpus", "8"],
    ],
)
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_cli_file_inputs_end_at_once_on_special_files(tmp_path, specials, argv, kind):
    # Issue 23: `--trace /dev/zero` reached 16.9 GB in 60 s; `--hosts-file /dev/zero` never
    # ended. Now: one usage error, no read of the device, no wait on the FIFO.
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN_DICT))
    args = [a.replace("{f}", specials[kind]).replace("{plan}", str(plan)) for a in argv]
    out = run_cli_here(args, timeout_s=60)
    assert out.how == "exited" and out.returncode == 2, out.describe()
    assert "internal error" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_a_large_file_is_refused_after_the_limit_is_read(tmp_path):
    from pdtp import _io

    big = tmp_path / "big.csv"
    with open(big, "wb") as f:
        f.truncate(200 << 20)  # sparse: 200 MiB on paper
    with pytest.raises(pdtp.InvalidArgumentError, match="larger than 1 MiB"):
        _io.read_capped(big, limit=1 << 20, what="trace")
    with pytest.raises(pdtp.InvalidArgumentError, match="trace .*larger than 64 MiB"):
        pdtp.load_trace(big)
    exact = tmp_path / "exact"
    exact.write_bytes(b"a" * 1000)
    assert _io.read_capped(exact, limit=1000, what="x") == b"a" * 1000
    with pytest.raises(pdtp.InvalidArgumentError, match="larger than 999 bytes"):
        _io.read_capped(exact, limit=999, what="x")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_pipe_is_read_with_the_cap():
    # A pipe (process substitution `<(cmd)`, `/dev/stdin` fed by a pipe) is a legitimate
    # input: read, within the cap.
    from pdtp import _io

    def pipe_holding(data: bytes) -> tuple[str, int]:
        r, w = os.pipe()
        os.write(w, data)
        os.close(w)
        return f"/proc/self/fd/{r}", r

    path, fd = pipe_holding(b"0,10,5\n0.5,10,5\n")
    try:
        assert _io.read_capped_text(path, limit=1 << 10, what="trace") == "0,10,5\n0.5,10,5\n"
    finally:
        os.close(fd)
    path, fd = pipe_holding(b"x" * 5000)
    try:
        with pytest.raises(pdtp.InvalidArgumentError, match="larger than 1,000 bytes"):
            _io.read_capped(path, limit=1000, what="trace")
    finally:
        os.close(fd)


def test_one_bounded_reader_serves_every_file_input():
    # One helper: no file input opens files on its own (a new reader must use pdtp._io).
    import re

    root = pathlib.Path(pdtp.__file__).parent
    readers = {
        "cli.py",
        "simulate.py",
        "calibration.py",
        "_model.py",
        "sweeps.py",
        "deployment/hosts.py",
    }
    for rel in readers:
        text = (root / rel).read_text()
        assert "read_capped" in text, rel
        assert not re.search(r"open\([^)]*\)[^\n]*\n[^\n]*\.read\(\)", text), rel


# ---- memory: gpus_per_node is bounded by the patterns it makes -------------------------------


def test_large_nodes_are_refused_up_front_naming_the_bound():
    with pytest.raises(pdtp.InvalidArgumentError) as info:
        pdtp.solve("llama-3.1-8b", gpus=256, gpu="h100", gpus_per_node=256, time_limit_s=1)
    message = str(info.value)
    assert "gpus_per_node=256" in message and "50000" in message
    # The node size it names is accepted.
    import re

    within = int(re.search(r"gpus_per_node of at most (\d+)", message).group(1))
    assert 64 <= within < 256
    plan = pdtp.solve(
        "llama-3.1-8b", gpus=within, gpu="h100", gpus_per_node=within, time_limit_s=0.5
    )
    assert plan.gpus_used <= within
    out = run_cli_here(
        ["solve", "llama-3.1-8b", "--gpus", "1024", "--gpu", "h100", "--gpus-per-node", "1024"]
    )
    assert out.returncode == 2 and "--gpus-per-node" in out.stderr, out.describe()


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is Linux's")
@pytest.mark.parametrize("per_node", [256, 512, 1024])
def test_large_nodes_stay_within_a_2_gib_cap(per_node):
    # Issue 23: 512/1,024 GPUs per node ran past 180 s at 12-18 GB; under a 2 GiB cap the
    # core aborted (exit 134). Under the cap now: one clear error, no crash.
    out = call_api(
        f"pdtp.solve('llama-3.1-8b', gpus={per_node}, gpu='h100', gpus_per_node={per_node}, "
        "time_limit_s=1)",
        memory_bytes=2 << 30,
        timeout_s=120,
    )
    assert out.how == "raised" and out.is_a(pdtp.InvalidArgumentError), out.describe()
    assert "gpus_per_node" in out.message


def test_the_largest_accepted_node_stays_within_a_2_gib_cap():
    out = call_api(
        "import re\n"
        "try:\n"
        "    pdtp.solve('llama-3.1-8b', gpus=256, gpu='h100', gpus_per_node=256)\n"
        "except pdtp.InvalidArgumentError as e:\n"
        "    n = int(re.search(r'at most (\\d+)', str(e)).group(1))\n"
        "result = pdtp.solve('llama-3.1-8b', gpus=n, gpu='h100', gpus_per_node=n,"
        " time_limit_s=1).status",
        memory_bytes=2 << 30,
        timeout_s=120,
    )
    assert out.how == "returned" and out.value.strip("'") in ("OPTIMAL", "FEASIBLE"), out.describe()


# ---- the Hub lookup: huggingface_hub 0.24 and 2.x ---------------------------------------------

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def _fake_hub(shape: str, root: pathlib.Path, files: dict[str, dict[str, Any]], *, fail=None):
    """Modules standing in for huggingface_hub, of the 0.24 shape (errors in ``utils``,
    ``constants`` loaded with the package) or the 2.x shape (errors in ``errors``,
    ``constants`` loaded lazily: ``huggingface_hub.constants`` is an AttributeError until
    the submodule is imported)."""
    top = types.ModuleType("huggingface_hub")
    errors = types.ModuleType("huggingface_hub.errors")
    utils = types.ModuleType("huggingface_hub.utils")
    constants = types.ModuleType("huggingface_hub.constants")
    constants.ENDPOINT = "https://hub.example"

    class HfHubHTTPError(OSError):
        pass

    class RepositoryNotFoundError(HfHubHTTPError):
        pass

    class GatedRepoError(RepositoryNotFoundError):
        pass

    class RevisionNotFoundError(HfHubHTTPError):
        pass

    class EntryNotFoundError(HfHubHTTPError if shape == "0.24" else Exception):
        pass

    class LocalEntryNotFoundError(EntryNotFoundError, FileNotFoundError):
        pass

    class OfflineModeIsEnabled(ConnectionError):
        pass

    classes = {
        c.__name__: c
        for c in (
            HfHubHTTPError,
            RepositoryNotFoundError,
            GatedRepoError,
            RevisionNotFoundError,
            EntryNotFoundError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
        )
    }
    if shape == "0.24":
        errors.OfflineModeIsEnabled = OfflineModeIsEnabled
        for name, cls in classes.items():
            setattr(utils, name, cls)
        top.constants = constants
    else:
        for name, cls in classes.items():
            setattr(errors, name, cls)
            setattr(utils, name, cls)

        def lazy(name: str) -> Any:
            raise AttributeError(f"No huggingface_hub attribute {name}")

        top.__getattr__ = lazy  # type: ignore[attr-defined]
    calls: list[tuple[str, str, bool]] = []

    def hf_hub_download(repo_id, filename, *, revision=None, local_files_only=False, **kw):
        calls.append((repo_id, filename, local_files_only))
        if fail is not None:
            raise fail
        if repo_id not in files:
            raise RepositoryNotFoundError(repo_id)
        if filename not in files[repo_id]:
            raise EntryNotFoundError(filename)
        snap = root / repo_id.replace("/", "--")
        snap.mkdir(parents=True, exist_ok=True)
        (snap / filename).write_text(json.dumps(files[repo_id][filename]))
        return str(snap / filename)

    top.hf_hub_download = hf_hub_download
    mods = {
        "huggingface_hub": top,
        "huggingface_hub.errors": errors,
        "huggingface_hub.utils": utils,
        "huggingface_hub.constants": constants,
    }
    return mods, calls


@pytest.fixture
def install_hub(monkeypatch, tmp_path):
    from pdtp import hub

    seen: list[str] = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(
        hub, "_reachable", lambda endpoint, timeout_s=3.0: seen.append(endpoint) or True
    )

    def install(shape: str, fail: BaseException | None = None):
        mods, calls = _fake_hub(
            shape, tmp_path / shape, {"acme/llama-ft": {"config.json": LLAMA_CONFIG}}, fail=fail
        )
        for name, mod in mods.items():
            monkeypatch.setitem(sys.modules, name, mod)
        hub._fetch.cache_clear()
        return calls, seen

    yield install
    hub._fetch.cache_clear()


@pytest.mark.parametrize("shape", ["0.24", "2.x"])
def test_hub_lookup_works_with_both_client_shapes(install_hub, shape):
    calls, endpoints = install_hub(shape)
    m = pdtp.model("acme/llama-ft")
    assert m.num_attention_heads == 32 and m.hf_id == "acme/llama-ft"
    assert endpoints == ["https://hub.example"]  # the client's own endpoint, found
    assert ("acme/llama-ft", "config.json", False) in calls
    with pytest.raises(pdtp.UnknownNameError, match="nor a model repository"):
        pdtp.model("acme/missing")


class _TransportError(Exception):
    """Like httpx.ConnectError (2.x's client): not an OSError."""


@pytest.mark.parametrize("shape", ["0.24", "2.x"])
@pytest.mark.parametrize("fail", [_TransportError("connection refused"), OSError("reset")])
def test_hub_failures_are_unknown_name_errors_and_exit_2(install_hub, shape, fail):
    install_hub(shape, fail=fail)
    with pytest.raises(pdtp.UnknownNameError, match="looking up config.json .* failed"):
        pdtp.model("acme/llama-ft")
    from pdtp import hub

    hub._fetch.cache_clear()
    out = run_cli_here(["solve", "acme/llama-ft", "--gpus", "8"])
    assert out.returncode == 2 and "internal error" not in out.stderr, out.describe()
    assert "--config path/to/config.json" in out.stderr


# ---- the sweep lock: keyed by the file, not its spelling -------------------------------------


def test_two_sweeps_into_one_file_through_a_symlink_serialise(tmp_path):
    from pdtp._sweep_output import Store

    real = tmp_path / "out.csv"
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    first = Store(link)
    first.open()
    try:
        for spelling in (real, tmp_path / "sub" / ".." / "out.csv"):
            (tmp_path / "sub").mkdir(exist_ok=True)
            with pytest.raises(pdtp.OutputFileError, match="being written by another"):
                Store(spelling).open()
    finally:
        first.close()
    second = Store(real)  # free again once the first is done
    second.open()
    second.close()
    assert link.is_symlink()


def test_parquet_merge_through_a_symlink_keeps_the_link(tmp_path):
    pytest.importorskip("pyarrow")
    real = tmp_path / "out.parquet"
    link = tmp_path / "link.parquet"
    link.symlink_to(real)
    pdtp.sweep(["llama-3.1-8b"], gpus=[8], gpu="h100", output=link, as_frame=False)
    assert link.is_symlink() and real.is_file()
    from pdtp._sweep_output import read_rows

    assert read_rows(real) == read_rows(link) and read_rows(real)


# ---- pareto: a time cut is a time cut ---------------------------------------------------------


def test_pareto_reports_a_time_cut_not_infeasibility():
    with pytest.raises(pdtp.TimeLimitError) as info:
        pdtp.pareto("llama-3.1-8b", gpus=8, gpu="h100", time_limit_s=1e-6)
    message = str(info.value)
    assert "time_limit_s" in message and "add GPUs" not in message
    assert isinstance(info.value, pdtp.InfeasibleError)  # callers of "no plan" still catch it
    # Truly infeasible targets stay an InfeasibleError that is not a time cut.
    with pytest.raises(pdtp.InfeasibleError) as info:
        pdtp.pareto("llama-3.1-70b", gpus=8, gpu="h100", tpot_ms=[0.01])
    assert not isinstance(info.value, pdtp.TimeLimitError)


def test_pareto_lists_the_targets_its_time_limit_cut():
    full = pdtp.pareto("llama-3.1-8b", gpus=8, gpu="h100", tpot_ms=[20, 50])
    assert full.time_cut == () and full.to_dict()["time_cut"] == []
    # Every target answered or listed as cut: none silently dropped.
    f = pdtp.pareto("llama-3.1-8b", gpus=8, gpu="h100", time_limit_s=0.05)
    answered = {p.tpot_target_ms for p in f.points}
    assert answered.isdisjoint(f.time_cut)


# ---- .ci/run: a failing step does not hide the later ones ------------------------------------


def test_ci_runs_every_check_and_fails_at_the_end(tmp_path):
    # Issue 23: a failing pytest under `set -e` skipped the doctests. Every check runs,
    # and the run still fails (listing which checks did).
    import shutil
    import stat
    import subprocess

    repo = pathlib.Path(__file__).parents[1]
    (tmp_path / ".ci").mkdir()
    shutil.copy(repo / ".ci" / "run", tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    stubs = {
        # `python3 -m venv DIR` makes a venv whose activate changes nothing.
        "python3": 'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; : > "$3/bin/activate"; fi',
        "python": 'echo "python $*" >> "$LOG"',
        # clippy fails, the Rust tests pass.
        "cargo": 'echo "cargo $*" >> "$LOG"; [ "$1" != clippy ]',
        "ruff": 'echo "ruff $*" >> "$LOG"',
        "mypy": 'echo "mypy $*" >> "$LOG"',
        "env": 'shift; echo "env $*" >> "$LOG"; exit 3',  # the pytest run fails
    }
    for name, body in stubs.items():
        f = bin_dir / name
        f.write_text(f"#!/bin/bash\n{body}\n")
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), "HOME": str(tmp_path)}
    out = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    ran = log.read_text()
    assert out.returncode == 1, out.stdout + out.stderr
    assert "--doctest-modules" in ran  # the last check ran after two failures
    assert "cargo test" in ran and "mypy" in ran and "mypy.stubtest" in ran
    assert "FAILED: rust: clippy rust: clippy (python) pytest" in out.stdout, out.stdout


# ---- minor items --------------------------------------------------------------------------


def test_a_plan_with_gpus_per_node_0_is_refused_not_defaulted():
    plan = {**PLAN_DICT, "gpus_per_node": 0}
    with pytest.raises(pdtp.InvalidArgumentError, match="gpus_per_node"):
        pdtp.deploy(plan, node_hosts=["10.0.0.1"])
    with pytest.raises(pdtp.InvalidArgumentError, match="gpus_per_node"):
        pdtp.solve("llama-3.1-8b", 8, gpus_per_node=0)


def test_a_grid_files_yaml_error_is_one_line(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("gpus: [4\n")
    out = run_cli_here(["sweep", str(grid)])
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "line 2, column 1" in out.stderr


def test_calibrate_refuses_an_engine_it_does_not_model():
    with pytest.raises(pdtp.InvalidArgumentError, match=r"row 1.*engine.*'bogus-engine'.*SGLang"):
        pdtp.calibrate([{**POINT, "engine": "bogus-engine"}], fit=("mbu",))
    for engine in ("vllm 0.12.0", "TensorRT-LLM", "NIM (TensorRT-LLM)", "sglang 0.5", ""):
        (p,) = pdtp.calibration.load_points([{**POINT, "engine": engine}])
        assert p.engine == ("sglang" if "sglang" in engine else "vllm")


def test_calibrate_warns_about_speculative_decoding():
    import pdtp.calibration as cal

    with pytest.warns(cal.SpeculativeDecodingWarning, match="row 1.*speculative decoding"):
        cal.load_points([{**POINT, "note": "MTP speculative decoding, 3 draft tokens"}])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the reference data has no such row: no warning
        cal.load_points(str(pathlib.Path(__file__).parent / "data/reference/perf-points.csv"))


def test_a_fit_refusal_does_not_suggest_the_dtype_the_weights_have():
    with pytest.raises(pdtp.InvalidArgumentError) as info:
        pdtp.predict_serving(
            "llama-3.1-405b",
            gpu="h100",
            tp=1,
            isl=1024,
            osl=128,
            concurrency=1,
            weight_dtype="fp8",
        )
    assert "use fp8" not in str(info.value) and "raise tp/pp" in str(info.value)
    with pytest.raises(pdtp.InvalidArgumentError, match="use fp8 weights"):
        pdtp.predict_serving("llama-3.1-405b", gpu="h100", tp=1, isl=1024, osl=128, concurrency=1)


# ---- every CLI flag with hostile text: an exit code from the documented set -----------------

CLI_BASE = {
    "solve": ["solve", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100", "--time-limit", "0.3"],
    "check": ["check", "--model", "llama-3.1-8b", "-P", "2", "-D", "4"],
    "map": ["map", "--kv-heads", "8", "-P", "2", "-D", "4"],
    "size-for": [
        "size-for",
        "llama-3.1-8b",
        "--demand",
        "5",
        "--max-gpus",
        "8",
        "--gpu",
        "h100",
        "--time-limit",
        "0.3",
    ],
    "simulate": [
        "simulate",
        "llama-3.1-8b",
        "--gpus",
        "8",
        "--gpu",
        "h100",
        "--rate",
        "1",
        "--requests",
        "50",
    ],
}
CLI_VALUES = ["", "-1", "0", "1e400", "nan", "9" * 30, "x" * 5000, "\udcff", "[[[[", "a,b,,"]


@pytest.mark.parametrize("command", sorted(CLI_BASE))
def test_every_flag_with_hostile_text_exits_0_1_or_2(command):
    import argparse

    from pdtp import cli

    parser = cli.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = [
        a.option_strings[-1]
        for a in subs.choices[command]._actions
        if a.option_strings
        and a.nargs != 0
        and "--help" not in a.option_strings
        and "--output" not in a.option_strings
    ]
    assert flags
    for flag in flags:
        for value in CLI_VALUES:
            argv = list(CLI_BASE[command])
            if flag in argv:
                argv[argv.index(flag) + 1] = value
            else:
                argv += [flag, value]
            out = run_cli_here(argv, timeout_s=120)
            shown = f"pdtp {command} {flag} {value[:20]!r}"
            assert out.how == "exited" and out.returncode in (0, 1, 2), (shown, out.describe())
            assert "Traceback" not in out.stderr and "internal error" not in out.stderr, shown
            if out.returncode == 2:
                assert len(out.stderr.strip().splitlines()) == 1, (shown, out.stderr[:500])
                assert len(out.stderr) <= MAX_MESSAGE_CHARS + 200, (shown, len(out.stderr))


# ---- a model given as a config dict: nothing to serve, said once, never `vllm serve llama` --

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("mode", ["disagg", "agg"])
def test_a_dict_config_plan_has_no_launch_lines_until_deploy_names_the_model(mode, tmp_path):
    plan = pdtp.solve(LLAMA_CONFIG, gpus=8, gpu="h100", mode=mode, time_limit_s=5)
    assert plan.serve_error and "model_path" in plan.serve_error
    outcome = call_here(plan.vllm_commands)
    assert_pdtp_error(outcome, "no model path", "--model-path", error=pdtp.InvalidArgumentError)
    assert_pdtp_error(call_here(pdtp.deploy, plan), "model_path", error=pdtp.InvalidArgumentError)
    # The plan file keeps why: deploy --plan refuses it the same way, until --model-path.
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert pdtp.Plan.from_json(path.read_text()).serve_error == plan.serve_error
    assert_cli_error(run_cli_here(["deploy", "--plan", str(path)]), "--model-path")
    for named, served in (("org/Llama-8B", "org/Llama-8B"), ("./m", str(tmp_path / "m"))):
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            dep = pdtp.deploy(plan, model_path=named)
            out = run_cli_here(["deploy", "--plan", str(path), "--model-path", named])
        finally:
            os.chdir(cwd)
        assert {i.launch.argv[:3] for i in dep.instances} == {("vllm", "serve", served)}
        assert out.returncode == 0, out.describe()
        assert f"vllm serve {served} " in out.stdout and "vllm serve llama" not in out.stdout


def test_a_catalog_model_or_a_model_folder_still_serves(tmp_path):
    plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", time_limit_s=5)
    assert plan.serve_error is None and plan.serve_ref == plan.model_spec.hf_id
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    plan = pdtp.solve(pdtp.Model.from_hf_config(folder), gpus=8, gpu="h100", time_limit_s=5)
    assert plan.serve_error is None and plan.serve_ref == str(folder.resolve())
    # A config dict naming its HF id serves that id.
    named = pdtp.Model.from_hf_config(LLAMA_CONFIG, hf_id="org/llama-8b")
    plan = pdtp.solve(named, gpus=8, gpu="h100", time_limit_s=5)
    assert plan.serve_error is None and "vllm serve org/llama-8b " in plan.vllm_commands()[0]


def test_solve_cli_prints_why_a_dict_config_plan_has_no_launch_lines():
    from pdtp import cli

    plan = pdtp.solve(LLAMA_CONFIG, gpus=8, gpu="h100", time_limit_s=5)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli._print_plan(plan, commands=True)
    assert "launch: none, the model 'llama' was given as a config" in out.getvalue()
    assert "vllm serve" not in out.getvalue().replace("vllm serve to load", "")
    assert cli._plan_json(plan, True)["vllm_commands"] is None


@pytest.mark.parametrize("bad", ["", "  ", "-m", "a\0b", 5, None.__class__])
def test_deploy_model_path_is_checked(bad):
    plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", time_limit_s=5)
    error = pdtp.InvalidArgumentError if isinstance(bad, str) else pdtp.ArgumentTypeError
    assert_pdtp_error(call_here(pdtp.deploy, plan, model_path=bad), "model_path", error=error)


# ---- SGLang's default mem_fraction_static: its own rule, not one constant ------------------


def test_sglang_default_memory_fraction_follows_sglang_rule():
    from pdtp.calibration import engine_defaults, sglang_mem_fraction_static
    from pdtp.catalog import gpu

    b200, h100, h200 = gpu("b200"), gpu("h100"), gpu("h200")
    # SGLang 0.5.12's ServerArgs._handle_gpu_memory_settings, worked by hand (MiB):
    # B200 (184320): 512 + 16384 * 1.5 + 512 * 2 + 4 / 8 * 1024 + 1536 (MLA piecewise graphs)
    assert sglang_mem_fraction_static(b200, tp=4, mla=True) == round((184320 - 28160) / 184320, 3)
    # H100 (81920), tp 1: 512 + 8192 * 1.5 + 256 * 2 + 128 + 8 * 58 capture sizes to 8192.
    assert sglang_mem_fraction_static(h100, tp=1) == round((81920 - 13904) / 81920, 3)
    # DP attention: 512 * tp * 3 + 512 * tp * 1.5 more, no piecewise graphs.
    reserved = 512 + 8192 * 1.5 + 512 * 2 + 1024 + 512 * 8 * 4.5
    assert sglang_mem_fraction_static(h200, tp=8, dp_attention=True) == round(
        (144384 - reserved) / 144384, 3
    )
    for g in (b200, h100, h200):
        by_tp = [sglang_mem_fraction_static(g, tp=t) for t in (1, 2, 4, 8, 16)]
        assert by_tp == sorted(by_tp, reverse=True)  # more ranks, more held back
    assert engine_defaults("sglang", b200, tp=4, mla=True)["util"] == 0.847
    assert engine_defaults("vllm", b200, tp=4, mla=True)["util"] == 0.9


def test_predict_serving_sglang_default_fraction_is_sglang_own_and_said():
    from pdtp.calibration import sglang_mem_fraction_static
    from pdtp.catalog import gpu

    kw = dict(gpu="b200", isl=7373, osl=927, concurrency=32, weight_dtype="fp8")
    frac = sglang_mem_fraction_static(gpu("b200"), tp=4, mla=True)
    # The default is SGLang's own: the same answer as giving that fraction.
    for tp in (4, 8):
        frac = sglang_mem_fraction_static(gpu("b200"), tp=tp, mla=True)
        default = call_here(pdtp.predict_serving, "deepseek-r1", tp=tp, engine="sglang", **kw)
        given = call_here(
            pdtp.predict_serving,
            "deepseek-r1",
            tp=tp,
            engine="sglang",
            gpu_memory_utilization=frac,
            **kw,
        )
        assert default.how == given.how, (default.describe(), given.describe())
        if default.how == "returned":
            assert default.value == given.value
        else:
            # A refusal says whose fraction it is and never suggests what is the case.
            assert_pdtp_error(default, f"{frac:g}", "SGLang's default mem_fraction_static")
            assert "fp8" not in default.message.split(";")[-1]


def test_a_test_run_removes_its_hub_cache(tmp_path):
    """conftest's empty HF_HOME (one per run) is removed when the run ends."""
    import subprocess

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("HF_HOME", None)
    tests = pathlib.Path(__file__).resolve().parent
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"]
    ran = subprocess.run(
        [*argv, str(tests / "test_import.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert not list(tmp_path.glob("pdtp-test-hf-*"))
    # The run did make one (the check above is not vacuous): this run's own still exists.
    assert pathlib.Path(os.environ["HF_HOME"]).name.startswith("pdtp-test-hf-")
    assert pathlib.Path(os.environ["HF_HOME"]).is_dir()
