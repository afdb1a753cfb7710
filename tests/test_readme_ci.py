"""CI runs exactly the README's test command, and the README opens with the two set-up commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README must open with a bash block of set-up commands"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_install_plus_demo_then_tests():
    text = (ROOT / "README.md").read_text()
    assert text.index("```bash") < text.index("## "), "the set-up commands come before any section"
    install, tests = _readme_commands()
    assert "pip install" in install and install.endswith("cudagym demo")
    assert "pytest" in tests


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert _readme_commands()[1] in ci_lines
