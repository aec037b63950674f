"""The README's Python example runs as written (documentation that cannot rot)."""

from __future__ import annotations

import re

from conftest import REPO


def test_readme_python_blocks_run(capsys):
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert "vllm serve" in capsys.readouterr().out


def test_readme_names_the_two_commands():
    text = (REPO / "README.md").read_text()
    assert "pip install . && pdtp solve" in text
    assert "bash .ci/run" in text
