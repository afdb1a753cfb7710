"""Every bundled task id the README and the CLI's help name exists, and the README's `tasks show` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cudagym import cli
from cudagym.sources.bundled import BundledSource

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "baselines/demo.py", "cudagym/suites.py", "cudagym/commands/tasks.py", "baselines/scripted.py"]
BUNDLED_ID = re.compile(r"bundled/L\d+/\w+")


@pytest.mark.parametrize("doc", DOCS)
def test_every_bundled_id_in_the_docs_exists(doc: str) -> None:
    named = set(BUNDLED_ID.findall((ROOT / doc).read_text(encoding="utf-8")))
    assert not named - set(BundledSource().ids())


def test_the_readme_tasks_show_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (command,) = re.findall(r"^cudagym (tasks show bundled/\S+)$", readme, re.M)
    assert cli.main(command.split()) == 0
    assert "--- reference source ---" in capsys.readouterr().out


def test_demo_help_names_a_bundled_id_that_exists(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--help"]) == 0
    named = BUNDLED_ID.findall(capsys.readouterr().out)
    assert named and set(named) <= set(BundledSource().ids())
