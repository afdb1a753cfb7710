"""The judge: builds candidate solutions, checks them against the reference, times them, guards the reward."""

from __future__ import annotations

from cudagym.judge.interface import EvalMode, Judge
from cudagym.judge.protocol import DEFAULT_PROTOCOL, PROTOCOLS, Protocol, get_protocol
from cudagym.judge.records import (
    BuildResult,
    BuildStatus,
    Diagnostic,
    EvalResult,
    EvalStatus,
    Hardware,
    InputCheck,
    KernelResources,
    KernelTime,
    Severity,
    TimingStats,
    Violation,
)

__all__ = [
    "Judge", "EvalMode", "Protocol", "PROTOCOLS", "DEFAULT_PROTOCOL", "get_protocol",
    "BuildResult", "BuildStatus", "Diagnostic", "EvalResult", "EvalStatus", "Hardware", "InputCheck",
    "KernelResources", "KernelTime", "Severity", "TimingStats", "Violation",
]
