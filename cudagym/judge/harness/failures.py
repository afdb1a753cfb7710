"""Failures of candidate code, told apart from failures of the harness.

Inside the harness, an exception raised by candidate code is wrapped in :class:`CandidateFailure` at the
call site, with its traceback trimmed to the candidate's own frames. The runner turns it into a status;
it never leaves :func:`~cudagym.judge.harness.run_job`. Any other exception is the harness's own bug or
a task problem (``INFRA_ERROR``).
"""

from __future__ import annotations

import traceback
from pathlib import Path

# Text of the errors after which the CUDA context may be unusable (sticky errors) or the device state
# is unknown. We treat every CUDA runtime error as poisoning: replacing a worker costs seconds, trusting
# a broken context costs wrong verdicts on later jobs.
_CUDA_ERROR_SIGNS = (
    "CUDA error",
    "CUDA_ERROR",
    "cudaError",
    "illegal memory access",
    "misaligned address",
    "device-side assert",
    "unspecified launch failure",
    "an illegal instruction",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "CUDNN_STATUS_EXECUTION_FAILED",
)

_MAX_MESSAGE_CHARS = 4000


class CandidateFailure(Exception):
    """Candidate code raised, or a CUDA error surfaced while it ran (internal to the harness).

    Attributes:
        stage: What the harness was doing (``load``, ``init``, ``forward``, ...).
        text: The trimmed traceback (candidate frames and the exception line).
        cuda: True when the error is a CUDA error: the worker's context must be considered poisoned.
    """

    def __init__(self, stage: str, text: str, cuda: bool = False) -> None:
        super().__init__(f"{stage}: {text}")
        self.stage = stage
        self.text = text
        self.cuda = cuda


class TaskProblem(Exception):
    """The reference task itself failed (does not load, raises, or gives non-finite outputs): INFRA_ERROR."""


class TaskTooLarge(TaskProblem):
    """The task's own inputs, reference run or baselines ran out of device memory: TASK_TOO_LARGE."""


def is_cuda_error(exc: BaseException) -> bool:
    """True when ``exc`` is a CUDA runtime error (not an out-of-memory, which leaves the context usable)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return False
    if type(exc).__name__ == "AcceleratorError":  # torch >= 2.8 raises this for CUDA runtime errors
        return True
    text = str(exc)
    return any(sign in text for sign in _CUDA_ERROR_SIGNS)


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a CUDA or host out-of-memory error (torch's CPU allocator's, or Python's ``MemoryError``)."""
    text = str(exc).lower()
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text
            or "can't allocate memory" in text)


def candidate_traceback(exc: BaseException, roots: tuple[Path, ...]) -> str:
    """The traceback of ``exc`` trimmed to frames in files under ``roots``, plus the exception line.

    Paths are shown relative to their root. When no frame is the candidate's (the error came from inside
    a library the candidate called), the innermost frame is kept so the message still says where, unless it
    is one of the judge's own files: those are never shown.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    kept: list[traceback.FrameSummary] = []
    for frame in frames:
        shown = _relative(frame.filename, roots)
        if shown is not None:
            kept.append(traceback.FrameSummary(shown, frame.lineno, frame.name, line=frame.line))
    if not kept and frames and not _is_judge_file(frames[-1].filename):
        kept = [frames[-1]]
    lines = ["Traceback (the candidate's frames):"]
    lines.extend(item.rstrip("\n") for item in traceback.format_list(kept))
    lines.extend(item.rstrip("\n") for item in traceback.format_exception_only(type(exc), exc))
    text = "\n".join(lines)
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS // 2] + "\n[... trimmed ...]\n" + text[-_MAX_MESSAGE_CHARS // 2 :]
    return text


_JUDGE_DIR = Path(__file__).resolve().parents[1]  # cudagym/judge


def _is_judge_file(filename: str) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(_JUDGE_DIR)
    except (OSError, ValueError):
        return False


def exception_line(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line, capped."""
    text = " ".join("".join(traceback.format_exception_only(type(exc), exc)).split())
    return text[:_MAX_MESSAGE_CHARS]


def _relative(filename: str, roots: tuple[Path, ...]) -> str | None:
    try:
        path = Path(filename).resolve()
    except (OSError, RuntimeError):
        return None
    for root in roots:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            continue
    return None
