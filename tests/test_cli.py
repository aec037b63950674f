"""The ``pdtp`` CLI: tables, ``--json``, exit codes 0 valid / 1 invalid / 2 usage error."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pdtp
from conftest import HangGuard
from pdtp.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse usage errors
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_invalid_table(capsys):
    code, out, _ = run(capsys, "check", "--heads", "64", "--kv-heads", "8", "-P", "4", "-D", "8")
    assert code == 1
    assert "INVALID" in out and "kv_heads_not_replicated" in out and "P4/D4" in out


def test_check_valid_json(capsys):
    code, out, _ = run(
        capsys,
        "check",
        "--heads",
        "64",
        "--kv-heads",
        "8",
        "-P",
        "4",
        "-D",
        "8",
        "--connector",
        "nixl",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["ok"] is True


def test_check_config_file(capsys, reference_dir):
    cfg = reference_dir / "hf-configs" / "meta-llama--Meta-Llama-3.1-70B_config.json"
    code, out, _ = run(capsys, "check", "--config", str(cfg), "-P", "8", "-D", "8", "--json")
    assert code == 0, out
    code, out, _ = run(capsys, "check", "--config", str(cfg), "-P", "2", "-D", "8")
    assert code == 1


def test_map_table_and_json(capsys):
    code, out, _ = run(
        capsys, "map", "--kv-heads", "4", "-P", "8", "-D", "4", "--vllm-version", "0.32.0"
    )
    assert code == 0 and "(nobody)" in out and "unread_prefill_ranks" in out
    assert "moriio (READ mode), vLLM 0.32.0" in out
    code, out, _ = run(capsys, "map", "--kv-heads", "4", "-P", "4", "-D", "8", "--json")
    assert code == 0
    assert [r["reads"][0]["prefill_rank"] for r in json.loads(out)["decode"]] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]


def test_map_invalid_pair_exits_1(capsys):
    code, _, err = run(capsys, "map", "--kv-heads", "8", "-P", "4", "-D", "8")
    assert code == 1 and "KV heads per rank" in err
    code, _, err = run(
        capsys, "map", "--kv-heads", "8", "-P", "4", "-D", "8", "--vllm-version", "0.25.0"
    )
    assert code == 1 and "requires replicated KV heads" in err
    code, _, err = run(
        capsys, "map", "--kv-heads", "8", "-P", "4", "-D", "8", "--vllm-version", "0.9"
    )
    assert code == 2 and "0.14.0 to 0.33.0" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "-P", "4", "-D", "8"],  # no model
        ["check", "--heads", "64", "--kv-heads", "8", "-P", "0", "-D", "8"],
        ["check", "--heads", "64", "--kv-heads", "8", "-P", "4", "-D", "8", "--connector", "x"],
        ["check", "--heads", "64", "--kv-heads", "8", "-P", "four", "-D", "8"],
        ["nope"],
        [],
    ],
)
def test_usage_errors_exit_2(capsys, argv):
    code, _, _ = run(capsys, *argv)
    assert code == 2


def test_python_dash_m_and_help():
    out = subprocess.run(
        [sys.executable, "-m", "pdtp", "check", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--prefill-tp" in out and "example" in out


def test_size_for_replan_fleet(capsys, tmp_path):
    code, out, _ = run(
        capsys, "size-for", "llama-3.1-70b", "--demand", "25", "--max-gpus", "64", "--json"
    )
    assert code == 0
    sized = json.loads(out)
    assert sized["requests_per_s"] >= 25 and sized["gpus_used"] <= 64
    now = tmp_path / "now.json"
    code, out, _ = run(capsys, "solve", "llama-3.1-70b", "--gpus", "16", "--json")
    now.write_text(out)
    code, out, _ = run(
        capsys, "replan", "--current", str(now), "--demand", "30", "--max-gpus", "64", "--json"
    )
    assert code == 0
    r = json.loads(out)
    assert r["plan"]["requests_per_s"] >= 30 and r["changed"] is True
    code, out, _ = run(
        capsys, "replan", "--current", str(now), "--demand", "30", "--max-gpus", "64"
    )
    assert code == 0 and out.startswith("replan: ")
    demands = tmp_path / "d.csv"
    demands.write_text("model,demand_rps,weight\nllama-3.1-70b,20,1\nqwen3-30b-a3b,50,1\n")
    code, out, _ = run(
        capsys, "fleet", "--demands", str(demands), "--gpus", "64", "--time-limit", "2"
    )
    assert code == 0 and "OPTIMAL" in out and "qwen3-30b-a3b" in out
    code, _, _ = run(
        capsys, "size-for", "llama-3.1-405b", "--demand", "5", "--max-gpus", "8", "--gpu", "h100"
    )
    assert code == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    code, _, err = run(capsys, "replan", "--current", str(bad), "--demand", "1", "--max-gpus", "8")
    assert code == 2 and "not JSON" in err


def test_check_with_gpu_reports_memory(capsys):
    code, out, _ = run(
        capsys, "check", "--model", "llama-3.1-405b", "-P", "8", "-D", "8", "--gpu", "h100"
    )
    assert code == 1 and "weights_do_not_fit" in out and "P16/D16" in out
    code, out, _ = run(
        capsys, "check", "--model", "llama-3.1-405b", "-P", "8", "-D", "8", "--gpu", "mi300x"
    )
    assert code == 0 and "prefill fits, decode fits" in out
    code, _, _ = run(
        capsys, "check", "--heads", "64", "--kv-heads", "8", "-P", "8", "-D", "8", "--gpu", "h100"
    )
    assert code == 2


# ---- every subcommand, bad input: exit 2, one line naming the flag, no traceback -------------

# (argv, what the one line on stderr must name). {tmp} is a folder with the files below.
BAD_INPUT = [
    (["check", "-P", "4", "-D", "8"], "--kv-heads"),
    (["check", "--heads", "64", "--kv-heads", "8", "-P", "0", "-D", "8"], "--prefill-tp"),
    (["check", "--heads", "64", "--kv-heads", "8", "-P", "four", "-D", "8"], "--prefill-tp"),
    (
        ["check", "--heads", "64", "--kv-heads", "8", "-P", "4", "-D", "8", "--connector", "x"],
        "--connector",
    ),
    (
        ["check", "--heads", "64", "--kv-heads", "8", "-P", "4", "-D", "8", "--max-acks", "0"],
        "--max-acks",
    ),
    (["check", "--model", "llama-3.1-70b", "--kv-heads", "4", "-P", "4", "-D", "8"], "--kv-heads"),
    (["check", "--config", "{tmp}/nowhere/config.json", "-P", "4", "-D", "8"], "--config"),
    (["check", "--model", "no-such-model", "-P", "4", "-D", "8"], "--model"),
    (["check", "--heads", "64", "--kv-heads", "8", "-P", "8", "-D", "8", "--gpu", "h100"], "--gpu"),
    (["solve", "llama-3.1-70b", "--gpus", "0"], "--gpus"),
    (["solve", "llama-3.1-70b", "--gpus", "8", "--gpu", "zz"], "--gpu"),
    (["solve", "llama-3.1-70b", "--gpus", "8", "--max-tp", "0"], "--max-tp"),
    (["solve", "llama-3.1-70b", "--gpus", "8", "--ttft", "-5"], "--ttft"),
    (
        ["solve", "llama-3.1-70b", "--gpus", "8", "--gpu-memory-utilization", "2"],
        "--gpu-memory-utilization",
    ),
    (["solve", "llama-3.1-70b", "--gpus", "8", "--weight-dtype", "int3"], "--weight-dtype"),
    (["solve", "llama-3.1-70b", "--gpus", "8", "--time-limit", "-1"], "--time-limit"),
    (["solve", "llama-3.1-70b", "--gpus", "8", "--slo-percentile", "1.5"], "--slo-percentile"),
    (
        ["size-for", "llama-3.1-70b", "--demand", "5", "--max-gpus", "8", "--slo-percentile", "0"],
        "--slo-percentile",
    ),
    (["solve", "--config", "{tmp}/nowhere/config.json", "--gpus", "8"], "--config"),
    (["solve", "./nowhere/config.json", "--gpus", "8"], "MODEL ./nowhere/config.json: no such"),
    (
        [
            "check",
            "--model",
            "llama-3.1-70b",
            "-P",
            "8",
            "-D",
            "8",
            "--gpu-memory-utilization",
            "0.5",
        ],
        "--gpu",
    ),
    (["solve", "llama-3.1-70b", "--gpus", "8", "--gpus-per-node", "0"], "--gpus-per-node"),
    (["size-for", "llama-3.1-70b", "--demand", "-1", "--max-gpus", "8"], "--demand"),
    (["size-for", "llama-3.1-70b", "--demand", "5", "--max-gpus", "0"], "--max-gpus"),
    (
        ["replan", "--current", "{tmp}/missing.json", "--demand", "5", "--max-gpus", "8"],
        "--current",
    ),
    (["replan", "--current", "{tmp}/bad.json", "--demand", "5", "--max-gpus", "8"], "--current"),
    (
        [
            "replan",
            "--current",
            "{tmp}/now.json",
            "--demand",
            "5",
            "--max-gpus",
            "64",
            "--move-cost",
            "start=x",
        ],
        "--move-cost",
    ),
    (["fleet", "--demands", "{tmp}/no-header.csv", "--gpus", "64"], "--demands"),
    (["fleet", "--demands", "{tmp}/bad-number.csv", "--gpus", "64"], "--demands"),
    (["fleet", "--demands", "{tmp}/bad-model.csv", "--gpus", "64"], "--demands"),
    (["fleet", "--demands", "{tmp}/missing.csv", "--gpus", "64"], "--demands"),
    (["fleet", "--demands", "{tmp}/good.csv", "--gpus", "0"], "--gpus"),
    (["models", "--bogus"], "--bogus"),
    (["gpus", "--bogus"], "--bogus"),
    (["sweep", "--gpus", "x"], "--gpus"),
    (["sweep", "--gpus", "1-4", "--models", "no-such-model"], "--models"),
    (["sweep", "--gpus", "1-4", "-o", "{tmp}/out.txt"], "--output"),
    (["sweep", "--gpus", "1-4", "-o", "{tmp}/good.csv/out.csv"], "--output"),
    (["sweep", "--gpus", "1-4", "--json", "-o", "{tmp}/out.csv"], "--json"),
    (["sweep", "{tmp}/missing.yaml"], "GRID_FILE"),
    (["plot", "throughput", "--input", "{tmp}/missing.csv", "-o", "{tmp}/c.png"], "--input"),
    (["plot", "throughput", "--top", "-1", "-o", "{tmp}/c.png"], "--top"),
    (["plot", "pairs", "-o", "{tmp}/c.gif"], "--output"),
    (["plot", "pairs", "--models", "qwen3-8b", "-o", "{tmp}/good.csv/c.png"], "--output"),
    (["plot", "pairs", "--max-tp", "0", "-o", "{tmp}/c.png"], "--max-tp"),
    (["simulate", "llama-3.1-70b", "--rate", "5"], "--gpus"),
    (["simulate", "llama-3.1-70b", "--gpus", "8", "--rate", "-5"], "--rate"),
    (["simulate", "llama-3.1-70b", "--gpus", "8", "--rate", "5", "--requests", "0"], "--requests"),
    (["simulate", "llama-3.1-70b", "--gpus", "8", "--concurrency", "0"], "--concurrency"),
    (["simulate", "llama-3.1-70b", "--gpus", "8", "--rate", "5", "--arrival", "zig"], "--arrival"),
    (["simulate", "--plan", "{tmp}/bad.json", "--rate", "5"], "--plan"),
    (
        ["simulate", "--plan", "{tmp}/now.json", "--rate", "5", "--length-range", "1,0.5"],
        "--length-range",
    ),
    (["simulate", "--plan", "{tmp}/now.json", "--rate", "5", "--seed", "-1"], "--seed"),
    (["simulate", "--plan", "{tmp}/now.json", "--trace", "{tmp}/missing.csv"], "--trace"),
    (["deploy"], "--plan"),
    (["deploy", "--plan", "{tmp}/bad.json"], "--plan"),
    (["deploy", "llama-3.1-8b", "--gpus", "8", "--node-hosts", "a;b"], "--node-hosts"),
    (["deploy", "llama-3.1-8b", "--gpus", "8", "--ports", "http=x"], "--ports"),
    (
        ["deploy", "llama-3.1-8b", "--gpus", "8", "--node-hosts", "h0", "-o", "{tmp}/good.csv/d"],
        "--output",
    ),
    (["map", "--kv-heads", "0", "-P", "1", "-D", "1"], "--kv-heads"),
    (["map", "--kv-heads", "4", "-P", "4", "-D", "8", "--connector", "zz"], "--connector"),
    (["map", "--model", "llama-3.1-70b", "--mla", "-P", "4", "-D", "8"], "--mla"),
    (["serve", "--port", "0"], "--port"),
]


@pytest.fixture
def files(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "no-header.csv").write_text("llama-3.1-70b,20\nqwen3-30b-a3b,50\n")
    (tmp_path / "bad-number.csv").write_text("model,demand_rps\nllama-3.1-70b,lots\n")
    (tmp_path / "bad-model.csv").write_text("model,demand_rps\nno-such-model,3\n")
    (tmp_path / "good.csv").write_text("model,demand_rps\nllama-3.1-8b,3\n")
    _, out, _ = run(capsys, "solve", "llama-3.1-70b", "--gpus", "16", "--json")
    (tmp_path / "now.json").write_text(out)
    return tmp_path


def test_bad_input_covers_every_subcommand():
    from pdtp.cli import COMMANDS

    assert {argv[0] for argv, _ in BAD_INPUT} == set(COMMANDS)


@pytest.mark.parametrize(("argv", "flag"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_one_line_naming_the_flag(capsys, files, argv, flag):
    code, out, err = run(capsys, *(a.replace("{tmp}", str(files)) for a in argv))
    assert code == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert err.endswith("\n") and err.count("\n") == 1, err  # exactly one line
    assert err.startswith(f"pdtp {argv[0]}: error: ") or err.startswith("pdtp: error: "), err
    assert flag in err, err


def test_hints_use_flags_not_python_arguments(capsys):
    tp_only = ("--layouts", "tp")  # pipeline layouts would find a plan
    code, out, _ = run(capsys, "solve", "llama-3.1-405b", "--gpus", "64", "--gpu", "h100", *tp_only)
    assert code == 1 and out.startswith("INFEASIBLE")
    assert "--max-tp 16" in out and "--gpu-memory-utilization 0.9" in out
    assert "max_tp" not in out and "gpu_memory_utilization" not in out
    # JSON is for programs: the library's own words.
    code, out, _ = run(
        capsys, "solve", "llama-3.1-405b", "--gpus", "64", "--gpu", "h100", "--json", *tp_only
    )
    assert "max_tp=16" in json.loads(out)["reason"]


def test_in_cli_words():
    from pdtp.cli import build_parser, flag_names, in_cli_words

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["solve"]
    flags = flag_names(sub)
    assert (
        flags["max_tp"] == "--max-tp" and flags["ttft_ms"] == "--ttft" and flags["model"] == "MODEL"
    )
    assert in_cli_words("allow tp=16: max_tp=16 (TP then spans nodes)", flags) == (
        "allow tp=16: --max-tp 16 (TP then spans nodes)"
    )
    assert (
        in_cli_words("at gpu_memory_utilization=0.9)", flags) == "at --gpu-memory-utilization 0.9)"
    )
    assert in_cli_words("0 meet ttft_ms (none)", flags) == "0 meet --ttft (none)"
    assert (
        in_cli_words("gpus must be a positive integer", flags)
        == "--gpus must be a positive integer"
    )
    assert in_cli_words("kv_dtype='q' is\nnot known", flags) == "--kv-dtype q is not known"
    assert in_cli_words("(all 9: pdtp.gpus())", flags) == "(all 9: `pdtp gpus`)"
    # vLLM's own variables, and names that are not flags of this command, stay as they are.
    text = "Got total_num_kv_heads=8, local_tp_size=4, remote_tp_size=1. isl=2048"
    assert in_cli_words(text, flags) == text.replace("isl=2048", "--isl 2048")
    assert in_cli_words("max_acks_per_rank=2", flags) == "max_acks_per_rank=2"


def test_fleet_csv_errors_name_file_line_and_column(capsys, files):
    code, _, err = run(capsys, "fleet", "--demands", str(files / "no-header.csv"), "--gpus", "64")
    assert code == 2 and "line 1" in err and "no header" in err and "model,demand_rps" in err
    code, _, err = run(capsys, "fleet", "--demands", str(files / "bad-number.csv"), "--gpus", "64")
    assert "line 2, column demand_rps" in err and "'lots'" in err
    ragged = files / "ragged.csv"
    ragged.write_text("model,demand_rps\nllama-3.1-8b,3,9\n")
    code, _, err = run(capsys, "fleet", "--demands", str(ragged), "--gpus", "64")
    assert code == 2 and "line 2: 3 values for 2 columns" in err


def test_sources(capsys):
    from pdtp.catalog import model_source

    code, out, _ = run(capsys, "models", "--sources")
    assert code == 0
    source, _ = model_source("llama-2-7b")
    assert "llama-2-7b  (meta-llama/Llama-2-7b-hf)\n    mlc-ai/mlc-llm@" in out
    assert source.split()[0] in out
    # One block per model: a heading line, then its source indented.
    headings = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")]
    assert headings == [m.name for m in pdtp.models()]
    assert "[unverified" in out
    code, out, _ = run(capsys, "models", "--sources", "--json")
    rows = json.loads(out)
    assert all(r["source"] for r in rows) and {r["verified"] for r in rows} == {True, False}
    code, out, _ = run(capsys, "gpus", "--sources")
    assert code == 0 and "mi300x  (AMD Instinct MI300X)" in out and "ROCm/ROCm@" in out


def test_ctrl_c_is_one_line_and_130(capsys, monkeypatch):
    from pdtp import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "solve", interrupted)
    code, out, err = run(capsys, "solve", "llama-3.1-70b", "--gpus", "8")
    assert code == 130 and err == "pdtp solve: interrupted\n" and out == ""


def test_internal_errors_are_one_line(capsys, monkeypatch):
    from pdtp import cli

    def broken(args):
        raise KeyError("boom")

    monkeypatch.setitem(cli.COMMANDS, "gpus", broken)
    code, _, err = run(capsys, "gpus")
    assert code == 70 and err.count("\n") == 1 and "internal error: KeyError" in err
    monkeypatch.setenv("PDTP_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["gpus"])


# ---- the real program: signals and pipes ------------------------------------------------------


def pdtp_process(*argv, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "pdtp", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C would see it
        **kwargs,
    )


def test_ctrl_c_during_a_parallel_sweep(tmp_path):
    import signal

    out = tmp_path / "s.csv"
    p = pdtp_process(
        "sweep", "--models", "all", "--gpus", "1-2048", "--gpu", "all", "--workers", "2",
        "--chunk-size", "500", "-o", str(out),
    )  # fmt: skip
    guard = HangGuard(polls=1200, interval_s=0.05)
    while not (out.exists() and out.stat().st_size > 0) and p.poll() is None:
        guard.tick("the sweep wrote no row")
    assert p.poll() is None, "the sweep finished before it could be interrupted"
    os.killpg(p.pid, signal.SIGINT)  # the whole group: the parent and its workers
    try:
        _, err = p.communicate(timeout=120)  # a shared, busy machine: generous
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert err.decode() == "pdtp sweep: interrupted\n"


def test_closed_pipe_is_quiet():
    # 512 rows: more than the pipe and stdout buffers hold, so writes go on after the close.
    p = pdtp_process("sweep", "--models", "llama-3.1-8b", "--gpus", "1-512")
    assert p.stdout is not None
    assert p.stdout.readline().startswith(b"model,")
    p.stdout.close()  # `| head -1`
    _, err = p.communicate(timeout=60)
    assert err == b"" and p.returncode == 141


def test_every_planning_command_takes_vllm_version(capsys, tmp_path):
    """--vllm-version reaches every planner: MoRIIO WRITE before 0.33.0 needs equal TP sizes
    (the newest rules plan unequal ones for this model and pool)."""
    old = ("--connector", "moriio-write", "--vllm-version", "0.32.0")
    pool = ("--gpu", "mi300x")
    code, out, _ = run(capsys, "solve", "llama-3.1-70b", "--gpus", "16", *pool, *old, "--json")
    plan = json.loads(out)
    assert code == 0 and (plan["vllm_version"], plan["mode"]) == ("0.32.0", "write")
    assert plan["prefill"]["tp"] == plan["decode"]["tp"]
    # Before 0.23.0 the launch line selects the mode with vLLM's environment variable.
    code, out, _ = run(
        capsys, "solve", "llama-3.1-70b", "--gpus", "8", *pool, "--vllm-version", "0.17.1",
        "--mode", "disagg",
    )  # fmt: skip
    assert "moriio (READ mode), vLLM 0.17.1" in out
    assert "VLLM_MORIIO_CONNECTOR_READ_MODE=true" in out and '"read_mode"' not in out
    code, out, _ = run(
        capsys, "size-for", "llama-3.1-70b", "--demand", "10", "--max-gpus", "64", *pool, *old,
        "--json",
    )  # fmt: skip
    sized = json.loads(out)
    assert code == 0 and sized["vllm_version"] == "0.32.0"
    assert sized["prefill"]["tp"] == sized["decode"]["tp"]
    now = tmp_path / "now.json"
    now.write_text(json.dumps(plan))
    code, out, _ = run(capsys, "replan", "--current", str(now), "--demand", "5", "--max-gpus",
                       "64", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["plan"]["vllm_version"] == "0.32.0"
    code, out, _ = run(capsys, "replan", "--current", str(now), "--demand", "5", "--max-gpus",
                       "64", "--vllm-version", "0.33.0", "--json")  # fmt: skip
    moved = json.loads(out)
    assert code == 0 and moved["plan"]["vllm_version"] == "0.33.0" and moved["stop"]
    demands = tmp_path / "d.csv"
    demands.write_text("model,demand_rps\nllama-3.1-70b,10\n")
    code, out, _ = run(capsys, "fleet", "--demands", str(demands), "--gpus", "16", *pool, *old,
                       "--json")  # fmt: skip
    fleet = json.loads(out)["plans"]["llama-3.1-70b"]
    assert code == 0 and fleet["vllm_version"] == "0.32.0"
    assert fleet["prefill"]["tp"] == fleet["decode"]["tp"]
    code, out, _ = run(capsys, "sweep", "--models", "llama-3.1-70b", "--gpus", "16", *pool, *old,
                       "--workers", "1", "--json")  # fmt: skip
    row = json.loads(out.splitlines()[0])
    assert code == 0 and row["connector"] == "moriio-write@0.32.0"
    assert row["prefill_tp"] == row["decode_tp"]
    code, out, _ = run(capsys, "deploy", "llama-3.1-70b", "--gpus", "16", *pool, *old,
                       "--format", "json", "--node-hosts", "10.0.0.1,10.0.0.2")  # fmt: skip
    dep = json.loads(out)
    assert code == 0 and dep["vllm_version"] == "0.32.0" and dep["read_mode"] is False
    code, out, _ = run(capsys, "check", "--model", "llama-3.1-70b", "-P", "1", "-D", "4", *old)
    assert code == 1 and "moriio-write (WRITE mode), vLLM 0.32.0" in out
    code, _, err = run(capsys, "solve", "llama-3.1-70b", "--gpus", "16", "--vllm-version", "0.9")
    assert code == 2 and "--vllm-version" in err and "0.14.0 to 0.33.0" in err
