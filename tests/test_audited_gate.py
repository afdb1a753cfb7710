"""The audited forward's gate (``signals.GATE``): the request's word, and where it is (not) used.

On a GPU the trusted side sends each audited forward a gate round, and the runner's call stream waits behind it until
the forward has returned, so a forward cannot tell an audited call from a timed one by its caller's stream being idle
(``tests/test_guards_gpu.py`` has the GPU's side). Here, on the CPU path: the runner refuses a gate that is no round,
and through the real worker pool no gate is sent, none is used, and none is counted.
"""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest
import torch
from split_pools import cpu_split_pool
from test_split import HONEST, TASK

from cudagym.judge.harness.claims import LATE_GATES_NOTE, late_gates_note
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.sandbox import SandboxPolicy
from cudagym.judge.split.channel import Channel
from cudagym.judge.split.runner import MAX_GATE, _Server
from cudagym.judge.split.signals import ARMED, GATE, SIGNAL_BYTES
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


@pytest.fixture
def server(tmp_path: Path):
    """A runner's request handler on the CPU path, before any job (no arenas, no candidate)."""
    mine, theirs = socket.socketpair()
    handler = _Server(Channel(mine), tmp_path, SandboxPolicy())
    handler.device = torch.device("cpu")
    yield handler
    mine.close()
    theirs.close()


@pytest.mark.parametrize("gate", [0, -1, MAX_GATE + 1, 1.5, "3", True, [1], {"n": 1}])
def test_the_runner_refuses_a_forward_whose_gate_is_no_round(server: _Server, gate: object) -> None:
    with pytest.raises(ValueError, match="a forward's gate is a round from 1 to"):
        server._forward({"kind": "forward", "gate": gate, "args": [], "outputs": [], "container": "tensor"})


@pytest.mark.parametrize("gate", [1, 7, MAX_GATE])
def test_a_round_is_taken_but_gates_nothing_off_the_gpu(server: _Server, gate: int) -> None:
    assert server._gate({"kind": "forward", "gate": gate}) is None
    assert server._gate({"kind": "forward"}) is None
    assert server.side is None  # no stream was made for it


def test_the_gate_has_a_line_of_its_own_before_the_heaps_words() -> None:
    from cudagym.judge.split.heap import DESCRIPTORS

    assert GATE == ARMED + 256 and GATE + 4 <= DESCRIPTORS < SIGNAL_BYTES


def test_the_note_of_gates_the_judge_opened() -> None:
    assert late_gates_note([0, 12], 0.25, 0.005) == ""
    note = late_gates_note([3, 12], 0.25, 0.005)
    assert note.startswith(f"{LATE_GATES_NOTE}: 3 of 12") and "250 ms" in note and "5 ms" in note


# The runner's module (run as ``__main__``), its forward request handler wrapped to say what each request named as
# its gate, and the candidate saying what gate its audited call ran behind (run_candidate's own, on the stack).
SAYS_ITS_GATES = '''
import sys as _sys

_R = next(m for m in (_sys.modules.get("__main__"), _sys.modules.get("cudagym.judge.split.runner"))
          if m is not None and hasattr(m, "_Server"))
_real_forward = _R._Server._forward


def _forward(self, request):
    print("gate sent:", request.get("gate", "none"), flush=True)
    return _real_forward(self, request)


_R._Server._forward = _forward


def _gate_in_use():
    frame = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run_candidate":
            return frame.f_locals.get("gate", "unseen")
        frame = frame.f_back
    return "unseen"
''' + HONEST.replace("    def forward(self, x):\n", '''    def forward(self, x):
        print("gate used:", _gate_in_use(), flush=True)
''')

# The same handler, handed a gate that is no round: as a runner patched to break the protocol would be.
MALFORMED_GATE = SAYS_ITS_GATES.replace('''    return _real_forward(self, request)''',
                                        '''    return _real_forward(self, {**request, "gate": "open"})''')


def judge(pool: WorkerPool, candidate: str, job_id: str) -> EvalResult:
    """``candidate`` on :data:`test_split.TASK` through the pool, correctness only (two inputs, no guards)."""
    job = Job(job_id=job_id,
              task=make_task(textwrap.dedent(TASK), id=f"test/audited_gate_{job_id}", suite="test", level=1,
                             name="audited_gate", origin="test"),
              solution=Solution("inline", {"model_new.py": textwrap.dedent(candidate)}),
              build=BuildResult(BuildStatus.OK, "inline"), mode=EvalMode.VERIFY,
              protocol=CUDAGYM_V0.with_changes(id="test-audited-gate", guards=(), num_inputs=2),
              baselines=KnownBaselines())
    return pool.submit(job).result(timeout=300)


def test_on_the_cpu_path_no_gate_is_sent_used_or_counted(pool: WorkerPool) -> None:
    result = judge(pool, SAYS_ITS_GATES, "cpu_no_gate")
    assert result.status is EvalStatus.OK, f"{result.message[:1500]}\n{result.log[-3000:]}"
    sent = [line for line in result.log.splitlines() if line.startswith("gate sent:")]
    used = [line for line in result.log.splitlines() if line.startswith("gate used:")]
    assert len(sent) >= 2 and set(sent) == {"gate sent: none"}, result.log[-3000:]
    assert len(used) == len(sent) and set(used) == {"gate used: None"}, result.log[-3000:]
    assert (result.cost.audited_calls, result.cost.late_audited_calls) == (0, 0)
    assert LATE_GATES_NOTE not in result.log


def test_a_gate_that_is_no_round_fails_the_forward_and_names_the_gate(pool: WorkerPool) -> None:
    result = judge(pool, MALFORMED_GATE, "cpu_malformed_gate")
    assert result.status is EvalStatus.RUNTIME_ERROR, f"{result.status}: {result.message[:1500]}"
    assert "a forward's gate is a round from 1 to" in result.message, result.message[:1500]
