"""Bundled solution-format templates: protected files and worked examples (data, not code).

``example_task.py`` is the task every worked example solves (ReLU on 1024 floats, in KernelBench format).
"""

from __future__ import annotations

from importlib.resources import files

from cudagym.task import Task, make_task


def example_task(suite: str = "cudagym") -> Task:
    """The task the formats' worked examples solve (``<suite>/example_relu``)."""
    source = files(__name__).joinpath("example_task.py").read_text(encoding="utf-8")
    return make_task(source, id=f"{suite}/example_relu", suite=suite, level=1, name="example_relu",
                     origin="cudagym.templates")
