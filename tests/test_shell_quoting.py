"""Launch lines quote every value that came from input: a hostile model name or folder is one
literal argument of ``vllm serve``, both for a shell lexer and for a real bash."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import stat
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pdtp
from conftest import REFERENCE
from pdtp._shell import command_line

BASE_CONFIG = json.loads(
    (REFERENCE / "hf-configs" / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text()
)
HOSTILE = [
    "org/x;touch${IFS}PWNED;#",
    "$(touch PWNED)",
    "`touch PWNED`",
    "a' ; touch PWNED ; echo '",
    'a" ; touch PWNED ; echo "',
    "x && touch PWNED",
    "x | tee PWNED",
    "x > PWNED",
    "x\ntouch PWNED",
    "\\'$(touch PWNED)",
    "name with spaces # and a hash",
    "ünïcødé/模型",
]


def plan_with_model_id(model_id: str, **kwargs):
    """A real plan whose launch lines serve ``model_id``: the quoting layer is tested
    whatever the model loader does with odd names (refuses them or keeps them)."""
    plan = pdtp.solve("llama-3.1-8b", gpus=4, mode="disagg", **kwargs)  # P/D launch lines
    return dataclasses.replace(plan, model_id=model_id)


def launched(line: str) -> tuple[dict[str, str], list[str]]:
    """A launch line as the shell reads it: the environment assignments, then argv."""
    words = shlex.split(line, comments=True)
    env = {}
    while "=" in words[0] and not words[0].startswith("vllm"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("connector", ["moriio", "nixl"])
def test_hostile_model_id_is_one_argument(name, connector):
    plan = plan_with_model_id(name, connector=connector)
    for line in plan.vllm_commands():
        env, argv = launched(line)
        assert argv[:3] == ["vllm", "serve", name]
        config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert config["kv_role"] in ("kv_producer", "kv_consumer", "kv_both")
        assert set(env) <= {plan.visible_devices_env, "CUDA_VISIBLE_DEVICES",
                            "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST"}  # fmt: skip


@pytest.fixture
def stub_vllm(tmp_path):
    """A ``vllm`` on PATH that records its argv (NUL-separated) and its device list."""
    if shutil.which("bash") is None:
        pytest.fail("bash is needed to run the launch lines")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "vllm"
    stub.write_text(
        "#!/bin/sh\n"
        'printf "%s\\0" "$@" > "$RECORD"\n'
        'printf "%s" "${HIP_VISIBLE_DEVICES-${CUDA_VISIBLE_DEVICES-}}" > "$RECORD.devices"\n'
    )
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    return bin_dir, work


def run_in_bash(line: str, bin_dir, work) -> tuple[list[str], str]:
    record = work.parent / "argv.bin"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "RECORD": str(record),
        "HOME": str(work),
    }
    subprocess.run(["bash", "-c", line], cwd=work, env=env, check=True, timeout=30)
    argv = record.read_bytes().split(b"\0")[:-1]
    return [a.decode() for a in argv], (work.parent / "argv.bin.devices").read_text()


@pytest.mark.parametrize("name", HOSTILE)
def test_bash_runs_nothing_but_vllm_serve(name, stub_vllm):
    bin_dir, work = stub_vllm
    plan = plan_with_model_id(name)
    # A hostile proxy address is refused (it would end up in URLs and configs) ...
    with pytest.raises(pdtp.InvalidArgumentError, match="proxy_host"):
        plan.vllm_commands(proxy_ip="10.0.0.1'; touch PWNED; echo '")
    line = plan.vllm_commands(proxy_ip="10.0.0.9")[0]
    argv, devices = run_in_bash(line, bin_dir, work)
    assert argv == launched(line)[1][1:]  # the stub saw exactly the lexer's argv
    assert argv[:2] == ["serve", name]
    extra = json.loads(argv[argv.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    assert extra["proxy_ip"] == "10.0.0.9"
    assert devices == launched(line)[0][plan.visible_devices_env]
    assert list(work.iterdir()) == [], "the line ran something besides vllm"


def served_or_refused(source, stub_vllm):
    """From a hostile config (issue 13's reproducers) pdtp either refuses it with a
    ConfigError, writes no launch line (nothing names what to serve), or launches it with
    the name intact; bash runs nothing else."""
    bin_dir, work = stub_vllm
    try:
        plan = pdtp.solve(source, gpus=4)
    except pdtp.ConfigError:
        return None
    if plan.serve_error:  # a config naming no folder and no HF id: no line at all
        with pytest.raises(pdtp.InvalidArgumentError, match="model_path"):
            plan.vllm_commands()
        return plan
    argv, _ = run_in_bash(plan.vllm_commands()[0], bin_dir, work)
    assert argv[:2] == ["serve", plan.model_id]
    assert list(work.iterdir()) == [], "the line ran something besides vllm"
    return plan


def test_hostile_name_or_path(stub_vllm):
    name = "org/x;touch${IFS}PWNED;#"
    # Refused, served under another reference, or served as given: the line is safe.
    served_or_refused(dict(BASE_CONFIG, _name_or_path=name), stub_vllm)


def test_hostile_model_folder(tmp_path, stub_vllm):
    folder = tmp_path / "dir$(touch PWNED)"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(BASE_CONFIG))
    plan = served_or_refused(str(folder), stub_vllm)
    assert plan is None or "dir$(touch PWNED)" in plan.model_id
    assert not (tmp_path / "PWNED").exists()


def test_ordinary_lines_read_as_before():
    """Quoting adds nothing where nothing needs it: the README's line is unchanged."""
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    line = pdtp.solve("llama-3.1-70b", gpus=24).vllm_commands(node_hosts=hosts)[0]
    assert line.startswith(
        "HIP_VISIBLE_DEVICES=0,1 CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Meta-Llama-3.1-70B "
        "--tensor-parallel-size 2 --port 8100 --gpu-memory-utilization 0.9 "
        """--kv-transfer-config '{"kv_connector":"MoRIIOConnector","kv_role":"kv_producer","""
    )
    assert line.endswith("'  # node 0, prefill 0")


@settings(max_examples=100, deadline=None)
@given(
    argv=st.lists(st.text(st.characters(exclude_characters="\0"), max_size=20), min_size=1),
    value=st.text(st.characters(exclude_characters="\0"), max_size=20),
)
def test_command_line_round_trips(argv, value):
    line = command_line(argv, {"SOME_ENV": value})
    words = shlex.split(line)
    assert words == [f"SOME_ENV={value}", *argv]


def test_env_names_are_checked():
    with pytest.raises(ValueError, match="environment variable name"):
        command_line(["vllm"], {"A;touch x": "1"})
