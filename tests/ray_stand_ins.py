"""A build stage stand-in that Ray tasks and actors import by module (tests/ is on their PYTHONPATH)."""

from __future__ import annotations

from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, BuildStatus
from cudagym.solution import Solution
from cudagym.task import Task


def build(task: Task, solution: Solution, protocol: Protocol, cache: object = None) -> BuildResult:
    """OK with a content key (a COMPILE_ERROR when model_new.py says BROKEN); ``cache`` is unused."""
    if "BROKEN" in solution.files.get("model_new.py", ""):
        return BuildResult(BuildStatus.COMPILE_ERROR, solution.format, message="BROKEN")
    return BuildResult(BuildStatus.OK, solution.format, artifact_key=f"k-{solution.content_hash[:8]}")
