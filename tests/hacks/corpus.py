"""The planted-hack corpus: one folder per exploit, each a complete ``extension``-format solution.

Every ``<hack>/model_new.py`` opens with comment lines naming the exploit and the guard that must catch it::

    # EXPLOIT: what the candidate does and why it would pay off
    # GUARD: the guard's registered name
    # TASK: bundled/L1/01_Swish  (a bundled task id) or hacks/<name> (a file in tests/hacks/tasks/)
    # PROTOCOL: key=value ...   (optional: protocol fields, mode=..., baselines=fast)
    # WORKER: incorrect: why   (optional: the verdict through the worker, where the GUARD cannot be reached there)

``baselines=fast`` means cached baselines that make any candidate look >10x faster than eager.
``WORKER: incorrect`` says that through the worker (trusted process, sandboxed runner) the hack's premise does not
hold and it gets tier -1 as INCORRECT from the checks of its timed calls; the reason follows the colon.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TASKS = HERE / "tasks"
_HEADER = re.compile(r"^#\s*(EXPLOIT|GUARD|TASK|PROTOCOL|WORKER):\s*(.*)$")


@dataclass(frozen=True)
class Hack:
    """One planted exploit."""

    name: str
    folder: Path
    exploit: str
    guard: str
    task: str
    protocol: dict[str, Any] = field(default_factory=dict)
    worker: str = ""  # "" (the worker names ``guard`` too) or "incorrect"
    worker_reason: str = ""

    def solution(self) -> Any:
        from cudagym.solution import Solution

        return Solution.from_dir(self.folder, "extension")


def load_hacks() -> list[Hack]:
    """Every hack folder, parsed from its header."""
    hacks = []
    for folder in sorted(p for p in HERE.iterdir() if (p / "model_new.py").is_file()):
        fields: dict[str, str] = {}
        last = ""
        for line in (folder / "model_new.py").read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            match = _HEADER.match(line)
            if match:
                last = match.group(1)
                fields[last] = match.group(2).strip()
            elif last in ("EXPLOIT", "WORKER"):
                fields[last] += " " + line.lstrip("#").strip()
        worker, _, reason = fields.get("WORKER", "").partition(":")
        hacks.append(Hack(folder.name, folder, fields.get("EXPLOIT", ""), fields.get("GUARD", ""),
                          fields.get("TASK", ""), _protocol(fields.get("PROTOCOL", "")), worker.strip(),
                          reason.strip()))
    return hacks


def load_task(ref: str) -> Any:
    """The task a hack names: a bundled task id, or ``hacks/<name>`` for a file in tests/hacks/tasks/."""
    from cudagym.task import make_task

    if ref.startswith("hacks/"):
        name = ref.split("/", 1)[1]
        path = TASKS / f"{name}.py"
        return make_task(path.read_text(encoding="utf-8"), id=ref, suite="hacks", level=1, name=name,
                         origin=str(path))
    from cudagym.suites import get_task

    return get_task(ref)


def _protocol(text: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for item in text.split():
        key, _, value = item.partition("=")
        if key == "guards":
            settings[key] = tuple(value.split(","))
        elif value.replace(".", "", 1).isdigit():
            settings[key] = float(value) if "." in value else int(value)
        else:
            settings[key] = value
    return settings
