"""The sandbox's own contract: it fails closed, an explicit opt-out is stated, and the view is an allow-list."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from faults import relu_task

from cudagym.errors import SandboxUnavailableError
from cudagym.judge import confine
from cudagym.judge.build import build
from cudagym.judge.local import LocalJudge
from cudagym.judge.records import BuildStatus
from cudagym.prompt import isolation_sentence
from cudagym.solution import Solution, get_format


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(confine.BWRAP_ENV, str(tmp_path / "no-such-bwrap"))


def test_without_bubblewrap_the_judge_refuses_to_start_and_says_how_to_fix_it(no_bwrap) -> None:
    with pytest.raises(SandboxUnavailableError, match="CUDAGYM_BWRAP") as err:
        LocalJudge(devices="none")
    assert "CUDAGYM_SANDBOX=off" in str(err.value)


def test_without_bubblewrap_a_build_is_a_tool_error_not_an_unconfined_compile(no_bwrap, tmp_path: Path) -> None:
    from cudagym.judge.build.cache import BuildCache

    solution = Solution("raw", get_format("raw").example_files())
    result = build(relu_task(), solution, None, BuildCache(tmp_path / "cache"))
    assert result.status is BuildStatus.TOOL_ERROR and "bubblewrap" in result.message
    assert not result.isolation.confined


def test_the_opt_out_is_explicit_and_stated_in_results_and_the_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(confine.MODE_ENV, "off")
    facts = confine.isolation()
    assert facts.sandbox == "off" and not facts.confined and "unconfined" in facts.notes[0]
    assert "without its sandbox" in isolation_sentence()
    monkeypatch.setenv(confine.MODE_ENV, "bwrap")
    assert confine.isolation().confined and "there is no network" in isolation_sentence()
    monkeypatch.setenv(confine.MODE_ENV, "maybe")
    with pytest.raises(SandboxUnavailableError, match="CUDAGYM_SANDBOX"):
        confine.isolation()


def test_the_view_binds_only_what_it_names_and_masks_the_bundled_solutions(tmp_path: Path) -> None:
    import cudagym.envs

    solutions = Path(cudagym.envs.__file__).parent / "bundled" / "solutions"
    secret = tmp_path / "not-named" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("x")
    named = tmp_path / "named"
    named.mkdir()
    # the bundled solutions' own folder named read-only on purpose: the mask still hides what is in it
    view = confine.View(read_only=(str(solutions.parent),), writable=(str(named),),
                        masked=(str(solutions),), chdir=str(named))
    script = f"ls {solutions} | wc -l; cat {secret} 2>&1; touch {named}/ok && echo wrote; touch {tmp_path}/no 2>&1"
    out = subprocess.run(confine.wrap(["sh", "-c", script], view), capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert lines[0].strip() == "0"  # the folder is there, empty
    assert "No such file" in lines[1] and "wrote" in lines[2] and (named / "ok").exists()
    assert not (tmp_path / "no").exists()
