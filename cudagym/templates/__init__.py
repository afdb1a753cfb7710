"""Bundled solution-format templates: protected files and worked examples (data, not code).

``<format>/`` holds a format's protected files. ``examples/<name>/`` is one small worked example: ``task.py``
(the task it solves, in KernelBench format) and one complete solution per format (``examples/<name>/<format>/``).
The prompt shows the first example in :data:`EXAMPLES` whose operators the task does not use
(:func:`pick_example`), so a worked example is never the answer to the task at hand.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources import files

from cudagym import pyparse
from cudagym.task import Task, make_task


@dataclass(frozen=True)
class WorkedExample:
    """One worked example and the operators it computes.

    Attributes:
        name: Folder under ``examples/`` (and the task's name, ``example_<name>``).
        summary: What it computes, for the prompt.
        operators: Lower-case names that, met anywhere in a task (a call, an attribute, an ``nn`` module, an
            Ops-6K ``ops`` entry), mean the task computes this operator too.
    """

    name: str
    summary: str
    operators: frozenset[str]


EXAMPLES: tuple[WorkedExample, ...] = (
    WorkedExample("relu", "ReLU, y = max(x, 0)", frozenset({
        "relu", "relu_", "relu6", "leaky_relu", "leakyrelu", "rrelu", "prelu", "celu", "clamp", "clamp_",
        "clamp_min", "clamp_min_", "clip", "clip_", "maximum", "fmax", "threshold", "threshold_", "hardtanh",
        "hardtanh_",
    })),
    WorkedExample("abs", "the absolute value, y = |x|", frozenset({
        "abs", "abs_", "absolute", "fabs", "l1_loss", "l1loss", "smooth_l1_loss", "smoothl1loss",
        "huber_loss", "huberloss",
    })),
    WorkedExample("flip", "reversing a 1-D tensor, y[i] = x[n - 1 - i]", frozenset({
        "flip", "fliplr", "flipud", "reversed",
    })),
)
DEFAULT_EXAMPLE = EXAMPLES[0]


def task_operators(task: Task) -> frozenset[str]:
    """Lower-case names the task's source uses (calls, attributes, names) and its ``ops`` metadata.

    A slice with a negative step (``x[::-1]``) counts as ``flip``. The source is parsed, never run.
    """
    names = {str(op).rsplit(".", 1)[-1].lower() for op in task.ops}
    try:
        tree = pyparse.parse(task.source)
    except (SyntaxError, ValueError):  # make_task parsed it already; tolerate a Task built by hand
        return frozenset(names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id.lower())
        elif isinstance(node, ast.Attribute):
            names.add(node.attr.lower())
        elif isinstance(node, ast.Slice) and isinstance(node.step, ast.UnaryOp) and isinstance(
                node.step.op, ast.USub):
            names.add("flip")
    return frozenset(names)


def pick_example(task: Task, examples: Iterable[WorkedExample] = EXAMPLES) -> WorkedExample | None:
    """The first example whose operators ``task`` does not use; None when every one of them is used."""
    used = task_operators(task)
    return next((ex for ex in examples if not (ex.operators & used)), None)


def example_task(suite: str = "cudagym", example: str = DEFAULT_EXAMPLE.name) -> Task:
    """The task a worked example solves (``<suite>/example_<name>``; ReLU on 1024 floats by default)."""
    source = files(__name__).joinpath("examples").joinpath(example).joinpath("task.py").read_text(encoding="utf-8")
    return make_task(source, id=f"{suite}/example_{example}", suite=suite, level=1, name=f"example_{example}",
                     origin="cudagym.templates")


__all__ = ["DEFAULT_EXAMPLE", "EXAMPLES", "WorkedExample", "example_task", "pick_example", "task_operators"]
