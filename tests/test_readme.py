"""The README's examples run as written (documentation that cannot rot)."""

from __future__ import annotations

import re
import shlex

from conftest import REPO

README = (REPO / "README.md").read_text()


def test_readme_python_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert "vllm serve" in capsys.readouterr().out


def test_readme_names_the_two_commands():
    # The install line brings what the documented commands need (sweep files, charts).
    assert "pip install '.[sweep,plot]' && pdtp solve" in README
    assert "bash .ci/run" in README


def first_ten_minutes() -> list[str]:
    section = README.split("## First ten minutes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [line for b in blocks for line in b.splitlines() if line.startswith("pdtp ")]


def test_first_ten_minutes_commands_run(tmp_path, monkeypatch, capsys):
    """Every `pdtp` command of the newcomer's section, from a folder like the repository's
    root, exits as the section says (0, or 1 where it says `exit 1`), without a traceback,
    and the sweep/chart files appear. (In one process: the program is `pdtp.cli.main`.)"""
    from pdtp.cli import main

    commands = first_ten_minutes()
    assert {c.split()[1] for c in commands} >= {"solve", "check", "map", "sweep", "plot"}
    (tmp_path / "tests").symlink_to(REPO / "tests")
    monkeypatch.chdir(tmp_path)
    for command in commands:
        expected = 1 if "# exit 1" in command else 0
        try:
            code = main(shlex.split(command, comments=True)[1:])
        except SystemExit as e:  # argparse
            code = e.code
        out = capsys.readouterr()
        assert code == expected, (command, out.out[-2000:], out.err[-2000:])
    assert (tmp_path / "sweep.parquet").exists()
    assert (tmp_path / "sweep.png").read_bytes().startswith(b"\x89PNG")
