"""The ``pdtp`` CLI: tables, ``--json``, exit codes 0 valid / 1 invalid / 2 usage error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
