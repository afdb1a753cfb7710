"""The planted white-box corpus on the CPU path: one candidate per attack class, through the real worker and runner.

Each candidate is written by an attacker who has read the judge: it knows the runner is
``python -m cudagym.judge.split.runner`` (its ``_Server`` in ``__main__``), that the trusted side talks to it over
the socket named by ``--sock``, how the timing claims are checked (``verify_claims``: each claim under the
trusted wall time of its request, then one ``batch`` request of back-to-back calls) and which timed rounds
PROFILE re-checks (``SPOT_CHECK_EVERY``). Most run with every guard off (``guards=()``), so only the split's
structure stands between the attack and the reward; the one that needs a guard (the fallback audit) enables
exactly that guard. The verdict each must get is reward -1: INCORRECT, RUNTIME_ERROR, CRASHED, TIMEOUT, or
RULE_VIOLATION with the rule named; never OK and never INFRA_ERROR.

Attacks that beat the judge today are kept as ``xfail(strict=True)`` with the mechanism in the reason: each
asserts the verdict the judge must give, so fixing the judge turns it into an unexpected pass.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import pytest
from split_pools import cpu_split_pool

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, TimingStats
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

REWARD_MINUS_ONE = {EvalStatus.INCORRECT, EvalStatus.RUNTIME_ERROR, EvalStatus.CRASHED, EvalStatus.TIMEOUT,
                    EvalStatus.RULE_VIOLATION}

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return [32]
'''

# The model every candidate starts from: the task's answer (``_right``) and a cheap wrong one (``_wrong``).
BASE = '''
import sys
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def _right(self, x):
        return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))

    def _wrong(self, x):
        return torch.zeros(x.shape[0], self.lin.out_features)

    def forward(self, x):
        return self._wrong(x)
'''

# What an attacker adds to find its way around the runner.
HELPERS = '''
def _runner_server():
    """The runner's _Server, found by walking up from the caller's frame."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "channel") and hasattr(owner, "ctx"):
            return owner
        frame = frame.f_back
    return None

class _Claiming:
    """A stand-in for the runner's timer: each call claims ``claim_us`` (after timing it for real, where asked)."""

    def __init__(self, real, claim_us, time_the_call=False):
        self.real, self.claim_us, self.time_the_call = real, claim_us, time_the_call
        self.measurement = type(real.measure(lambda: None))

    def measure(self, call, cover_us=None, **kwargs):
        outputs = self.real.measure(call, cover_us, **kwargs).outputs if self.time_the_call else call()
        return self.measurement(outputs, self.claim_us, 1.0, 1.0)

def _claim_in_timed_calls(claim_us, time_the_call=False):
    """Replace the runner's timer (found from the forward's frames) with one claiming ``claim_us``."""
    server = _runner_server()
    if server is not None and not isinstance(server.timer, _Claiming):
        server.timer = _Claiming(server.timer, claim_us, time_the_call)

def _caller_names():
    """The function names on the stack (the runner's request handlers among them)."""
    names, frame = set(), sys._getframe(1)
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return names
'''


def candidate(attack: str) -> str:
    """``BASE`` followed by the attack's module-level code."""
    return textwrap.dedent(BASE) + textwrap.dedent(HELPERS) + "\n" + textwrap.dedent(attack)


# (1) Frames: every thread's stack, via sys._current_frames() and inspect, hunting the harness's state to rewrite:
# the runner's context (its violations, its tolerance, its checks) and the request being answered.
FRAMES = candidate('''
import inspect

def _forward(self, x):
    found = 0
    frames = list(sys._current_frames().values()) + [info.frame for info in inspect.stack()]
    for frame in frames:
        while frame is not None:
            for value in list(frame.f_locals.values()):
                if hasattr(value, "violations") and hasattr(value, "tolerance"):
                    found += 1
                    value.violations.clear()
                    value.checks = []
                    try:
                        value.tolerance = type(value.tolerance)(atol=1e9, rtol=1e9)
                    except Exception:
                        pass
            frame = frame.f_back
    print("frames: harness contexts reached:", found)
    return self._wrong(x)

ModelNew.forward = _forward
''')

# (2) gc: every object the collector tracks, hunting reference outputs (a tensor of the output's shape that looks
# like a relu of something) and the harness's own objects (contexts, the job with its seeds).
GC_HUNT = candidate('''
import gc

def _forward(self, x):
    want = (x.shape[0], self.lin.out_features)
    contexts = [o for o in gc.get_objects() if type(o).__name__ == "EvalContext"]
    jobs = [o for o in gc.get_objects() if type(o).__name__ == "Job"]
    print("gc: contexts", len(contexts), "jobs", len(jobs))
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and tuple(obj.shape) == want and obj.data_ptr() != x.data_ptr():
            if obj.dtype == torch.float32 and bool((obj >= 0).all()) and bool((obj > 0).any()):
                print("gc: took a tensor of the output's shape")
                return obj.clone()
    for ctx in contexts:
        for name in ("reference_outputs", "expected", "prime"):
            if isinstance(getattr(ctx, name, None), torch.Tensor):
                return getattr(ctx, name).clone()
    return self._wrong(x)

ModelNew.forward = _forward
''')

# (3) The result channel: find the socket (``--sock`` on /proc/self/cmdline, else the only socket among the open
# descriptors) and write, framed as the runner frames them, two replies of kind "ended" whose ``notes`` is a
# number. The first answers the audited forward (the wrong kind: the runner is "lost", CRASHED); the trusted side
# then sends ``end`` and reads the second, whose notes it slices outside its checks.
CHANNEL_FORGERY = candidate('''
import json
import os
import stat
import struct

def _channel_fd():
    argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    if b"--sock" in argv:
        return int(argv[argv.index(b"--sock") + 1])
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                return int(name)
        except OSError:
            pass
    return -1

def _forward(self, x):
    fd = _channel_fd()
    payload = json.dumps({"kind": "ended", "notes": 5, "files": [], "network": [], "violations": []}).encode()
    for _ in range(2):
        os.write(fd, struct.pack("!Q", len(payload)) + payload)
    print("channel: forged two replies on fd", fd)
    return self._wrong(x)

ModelNew.forward = _forward
''')

# (4) The harness's classes: the runner's timer claims 1 us for every timed call, and the runner's ``_batch``
# (the trusted side's only check of a claim from below) answers at once without calling the model.
PATCHED_HARNESS = candidate('''
import importlib
import time

_timing = importlib.import_module("cudagym.judge.harness." + "timing")

def _claim_one_us(self, call, cover_us=None):
    outputs = call()
    return _timing.Measurement(outputs, 1.0, 1.0, 1.0)

for _name in ("HostTimer", "CudaEventTimer", "ProfilerTimer"):
    if hasattr(_timing, _name):
        setattr(getattr(_timing, _name), "measure", _claim_one_us)

def _instant_batch(self, request):
    return {"kind": "batch", "calls": int(request.get("calls", 1))}

for _module in (sys.modules.get("__main__"), sys.modules.get("cudagym.judge.split.runner")):
    if _module is not None and hasattr(_module, "_Server"):
        _module._Server._batch = _instant_batch

def _forward(self, x):
    time.sleep(0.003)  # 3 ms of real work per call, claimed as 1 us
    return self._right(x)

ModelNew.forward = _forward
''')

# (4, second candidate) The same timer patch with the batch left honest: the batch's wall time is corrected by the
# channel's cost, measured as the fastest of three pings (``hook`` requests the runner answers); the patched
# ``_Server._hook`` makes every ping last as long as the batch will (1000 calls, the most a 1 us claim asks for).
PATCHED_PING = candidate('''
import importlib
import time

_timing = importlib.import_module("cudagym.judge.harness." + "timing")
_COST_S = 0.005  # well above the CPU test path's 1 ms claim slack

def _claim_one_us(self, call, cover_us=None):
    return _timing.Measurement(call(), 1.0, 1.0, 1.0)

for _name in ("HostTimer", "CudaEventTimer", "ProfilerTimer"):
    if hasattr(_timing, _name):
        setattr(getattr(_timing, _name), "measure", _claim_one_us)

for _module in (sys.modules.get("__main__"), sys.modules.get("cudagym.judge.split.runner")):
    if _module is not None and hasattr(_module, "_Server"):
        _real_hook = _module._Server._hook

        def _slow_ping(self, name, _real=_real_hook):
            if name not in ("after_correctness", "after_timing"):
                time.sleep(1000 * max(_seen) * 1.5)  # the batch's length, from the forward's own clock
            return _real(self, name)

        _module._Server._hook = _slow_ping

_seen = [_COST_S]

def _forward(self, x):
    t0 = time.perf_counter()
    time.sleep(_COST_S)
    out = self._right(x)
    _seen.append(time.perf_counter() - t0)
    return out

ModelNew.forward = _forward
''')

# (5) Global module hooks: an import hook on sys.meta_path and a builtins.__import__ wrapper that hand out a
# comparison that always passes, and sys.modules entries of cudagym replaced by such forgeries.
MODULE_HOOKS = candidate('''
import builtins
import importlib
import importlib.abc
import types

def _always_equal(reference, candidate, tolerance, **kw):
    real = importlib.import_module("cudagym.judge.harness.correctness")
    return real.compare_outputs(reference, reference, tolerance, **kw)

_fake = types.ModuleType("cudagym.judge.harness.correctness")
_fake.compare_outputs = _always_equal
_fake.__dict__.update({k: v for k, v in vars(importlib.import_module("cudagym.judge.harness.correctness")).items()
                       if k != "compare_outputs" and not k.startswith("__")})

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith("cudagym.judge"):
            print("hook: import of", name, "seen")
        return None

sys.meta_path.insert(0, _Finder())
_real_import = builtins.__import__

def _import(name, globals=None, locals=None, fromlist=(), level=0):
    module = _real_import(name, globals, locals, fromlist, level)
    if name.startswith("cudagym.judge.harness"):
        for attr in ("compare_outputs",):
            if hasattr(module, attr):
                setattr(module, attr, _always_equal)
    return module

builtins.__import__ = _import
for _name in list(sys.modules):
    if _name.startswith("cudagym.judge.harness.") and hasattr(sys.modules[_name], "compare_outputs"):
        sys.modules[_name].compare_outputs = _always_equal
sys.modules["cudagym.judge.harness.correctness"] = _fake
print("hook: comparison forged in", sum(1 for m in list(sys.modules.values())
                                         if getattr(m, "compare_outputs", None) is _always_equal), "modules")
''')

# (6) Profile hooks: sys.setprofile (and threading.setprofile) sees every call the runner makes. On entry to
# ``_timed`` it plants its own timer on the server (claims of 1 us), on entry to ``_batch`` it rewrites the
# request so the batch runs one call where the trusted side asked for many.
PROFILE_HOOK = candidate('''
import threading
import time

class _Claim:
    name = "host"

    def measure(self, call, cover_us=None):
        import importlib
        timing = importlib.import_module("cudagym.judge.harness.timing")
        return timing.Measurement(call(), 1.0, 1.0, 1.0)

class _NoFlush:
    enabled = False

    def flush(self):
        pass

def _hook(frame, event, arg):
    if event != "call":
        return
    name = frame.f_code.co_name
    if name == "_timed":
        server = frame.f_locals.get("self")
        server.timer, server.flusher = _Claim(), _NoFlush()
    elif name == "_batch":
        frame.f_locals["request"]["calls"] = 1

sys.setprofile(_hook)
threading.setprofile(_hook)

def _forward(self, x):
    time.sleep(0.003)
    return self._right(x)

ModelNew.forward = _forward
''')

# (7) Clean-up: a __del__ on a cycle the collector frees late, a weakref.finalize on the model and an atexit
# handler, each trying to act after the verdict's inputs were taken: rewrite the output arena and the server's
# state, and write a last "ended" reply with no violations.
CLEANUP = candidate('''
import atexit
import gc
import weakref

_state = {}

def _late(tag):
    server = _state.get("server")
    print("cleanup:", tag, "ran")
    if server is not None:
        for arena in getattr(server, "arenas", {}).values():
            try:
                arena.tensor.fill_(0)
            except Exception:
                pass
        if server.ctx is not None:
            server.ctx.violations.clear()

class _Lingering:
    def __init__(self):
        self.me = self

    def __del__(self):
        _late("__del__")

def _forward(self, x):
    _state["server"] = _runner_server()
    _Lingering()
    if "finalizer" not in _state:
        _state["finalizer"] = weakref.finalize(self, _late, "finalize")
    gc.callbacks.append(lambda phase, info: _late("gc") if phase == "stop" and info["generation"] == 2 else None)
    return self._wrong(x)

ModelNew.forward = _forward
atexit.register(_late, "atexit")
''')

# (8) Dispatch-mode stacks, with the fallback audit on: when a TorchDispatchMode is on the stack (the audit), step
# out of it (torch's own _disable_current_modes) and compute with tensor methods the source scan does not name.
DISPATCH_ESCAPE = '''
import importlib
import torch.nn as nn

_dispatch = importlib.import_module("torch.utils._python" + "_dispatch")

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def _compute(self, x):
        return x.matmul(self.lin.weight.t()).add(self.lin.bias).clamp_min(0)

    def forward(self, x):
        if _dispatch._get_current_dispatch_mode() is not None:
            print("dispatch: audited call, stepping out of the mode")
            with _dispatch._disable_current_modes():
                return self._compute(x)
        return self._compute(x)
'''

# (9) torch's global configuration: precision switches, dynamo's config, denormals, each of which
# would loosen a comparison made in this process; the answer is off by far more than any tolerance.
TORCH_CONFIG = candidate('''
import importlib

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
torch.set_float32_matmul_precision("medium")
torch.set_flush_denormal(True)
_dynamo = importlib.import_module("torch._dynamo")
_dynamo.config.suppress_errors = True
_dynamo.config.cache_size_limit = 1

def _forward(self, x):
    out = self._right(x.double().float())
    return out + 0.25 * out.abs().max()

ModelNew.forward = _forward
''')

# (10) State for the next job: the first candidate (itself correct) patches the comparison and torch at module
# level, leaves files in /tmp and /dev/shm and a forked process behind; the second (wrong) relies on all of it.
POISONER = candidate('''
import importlib
import os

def _always(reference, candidate, tolerance, **kw):
    return _real(reference, reference, tolerance, **kw)

_correctness = importlib.import_module("cudagym.judge.harness." + "correctness")
_real = _correctness.compare_outputs
_correctness.compare_outputs = _always
importlib.import_module("cudagym.judge.harness." + "context").compare_outputs = _always
torch._whitebox_poison = True
os.environ["CUDAGYM_WHITEBOX_POISON"] = "1"
for _folder in ("/tmp", "/dev/shm", os.path.expanduser("~")):
    try:
        with open(os.path.join(_folder, "whitebox_poison"), "w") as _f:
            _f.write("1")
    except OSError:
        pass
if os.fork() == 0:  # a child that outlives the job, if the sandbox lets it
    os.setsid()
    import time
    for _ in range(600):
        try:
            open("/tmp/whitebox_daemon", "w").write(str(time.time()))
        except OSError:
            pass
        time.sleep(0.1)
    os._exit(0)

def _forward(self, x):
    return self._right(x)

ModelNew.forward = _forward
''')

RELIES_ON_POISON = candidate('''
import os

def _left():
    found = []
    if getattr(torch, "_whitebox_poison", False):
        found.append("torch attribute")
    if os.environ.get("CUDAGYM_WHITEBOX_POISON"):
        found.append("environment")
    for path in ("/tmp/whitebox_poison", "/dev/shm/whitebox_poison", "/tmp/whitebox_daemon",
                 os.path.join(os.path.expanduser("~"), "whitebox_poison")):
        if os.path.exists(path):
            found.append(path)
    return found

print("left by the earlier job:", _left() or "nothing")
''')

# (11) An output whose attributes are shadowed: a tensor subclass that compares equal to anything, is allclose to
# anything, and under __torch_function__ answers every copy out of it by leaving the destination as it was.
SHADOWED_OUTPUT = candidate('''
class _Liar(torch.Tensor):
    def __eq__(self, other):
        return True

    def allclose(self, *args, **kwargs):
        return True

    def equal(self, *args, **kwargs):
        return True

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("copy_", "allclose", "isclose", "equal", "eq", "sub", "abs"):
            print("shadowed:", func.__name__, "intercepted")
            if func.__name__ == "copy_":
                return args[0]
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

def _forward(self, x):
    return self._wrong(x).as_subclass(_Liar)

ModelNew.forward = _forward
''')

# (11, second candidate) The same subclass as an attacker who read ``_Server._deliver`` writes it: forward returns at
# once an empty tensor of the output's shape, and the work is done inside __torch_function__ when the runner
# copies it into the output arena, after the timer stopped; the claim check's ``batch`` never copies an output, so
# it never pays for the work either. The bytes the trusted side reads are right.
LAZY_OUTPUT = candidate('''
import time

class _Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "copy_" and len(args) == 2 and hasattr(args[1], "_pending"):
            model, x = args[1]._pending
            with torch._C.DisableTorchFunctionSubclass():
                time.sleep(0.003)  # the real cost of the forward, paid outside the timed region
                return args[0].copy_(model._right(x))
        return super().__torch_function__(func, types, args, kwargs or {})

def _forward(self, x):
    out = torch.empty(x.shape[0], self.lin.out_features).as_subclass(_Lazy)
    out._pending = (self, x.clone())
    return out

ModelNew.forward = _forward
''')

# (12) An output whose attribute access raises: a tensor subclass whose shape, dtype and every torch function
# raise BaseExceptions (KeyboardInterrupt, SystemExit), which an `except Exception` in the judge lets through.
RAISING_OUTPUT = candidate('''
class _Trap(torch.Tensor):
    @property
    def shape(self):
        raise KeyboardInterrupt("shape")

    @property
    def dtype(self):
        raise SystemExit("dtype")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise KeyboardInterrupt("torch function " + getattr(func, "__name__", "?"))

def _forward(self, x):
    return self._wrong(x).as_subclass(_Trap)

ModelNew.forward = _forward
''')

# (13) Audited calls told from timed ones, with no patching at all: the stack names the request (``_forward`` is
# audited, ``_timed`` timed, ``_batch`` the claim check), and a timed call's inputs, matched against the job's
# seeds (seed + 100000 + r), name its round r; PROFILE with cached baselines re-checks only rounds r % 10 == 0.
# Right (and slow) wherever the judge looks, wrong (and instant) everywhere else.
TELLS_TIMED_FROM_AUDITED = candidate('''
import time

from cudagym.judge.harness.inputs import generate_inputs

_TASK = _TASK_SOURCE_
_task = {}
exec(_TASK, _task)  # the task's source is in its prompt; the runner no longer holds the reference's code
_checked_rounds = {}

def _is_checked_round(server, x):
    ctx = server.ctx
    if not _checked_rounds:
        for r in range(0, ctx.protocol.max_runs + 1, 10):
            seed = ctx.protocol.seed + 100_000 + r
            _checked_rounds[r] = generate_inputs(_task["get_inputs"], seed, ctx.device)[0]
    return any(torch.equal(x, known) for known in _checked_rounds.values())

_wrong_calls = [0]

def _forward(self, x):
    names = _caller_names()
    if "_timed" in names and not _is_checked_round(_runner_server(), x) or "_batch" in names:
        _wrong_calls[0] += 1
        return self._wrong(x)
    time.sleep(0.003)
    return self._right(x)

def _report():
    print("timed: wrong answers given where nobody looked:", _wrong_calls[0])

import atexit
atexit.register(_report)
ModelNew.forward = _forward
'''.replace("_TASK_SOURCE_", repr(textwrap.dedent(TASK))))

# The same forward without the escape: the audit does see it (the control for class 8).
DISPATCH_CONTROL = DISPATCH_ESCAPE.replace("if _dispatch._get_current_dispatch_mode() is not None:", "if False:")

# torch computes these candidates' outputs on the CPU (no kernels): the fallback guard would stop honest ones too
EVERY_GUARD_BUT_FALLBACK = ("side_stream", "tampering", "timer_patch", "file_access", "host_threads",
                            "input_mutation", "lazy_output", "network", "reference_reuse", "result_cache",
                            "stale_memory", "degenerate_output", "hard_coding", "precision", "decoy_kernels",
                            "suspicious_speedup")
CACHED = KnownBaselines(TimingStats(median_us=1000.0, mean_us=1000.0, min_us=990.0, max_us=1010.0, runs=20),
                        TimingStats(median_us=900.0, mean_us=900.0, min_us=890.0, max_us=910.0, runs=20))


pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


def judge(pool: WorkerPool, code: str, *, guards: Sequence[str] = (), mode: EvalMode = EvalMode.VERIFY,
          baselines: KnownBaselines | None = None, job_id: str = "whitebox", runs: int = 5,
          warmup_runs: int = 1, interleave: bool = True) -> EvalResult:
    """One job through the pool: the tiny linear+relu task, the candidate inline, the given guards and mode."""
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(TASK), id="test/whitebox", suite="test", level=1, name="whitebox",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": code}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=CUDAGYM_V0.with_changes(id="test-whitebox", guards=tuple(guards), num_inputs=2,
                                         warmup_runs=warmup_runs, warmup_ms=0.0, min_runs=runs, max_runs=runs,
                                         target_ci_pct=0.0, interleave=interleave),
        baselines=baselines or KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


def assert_minus_one(result: EvalResult, *allowed: EvalStatus) -> None:
    """The verdict is one of ``allowed`` (reward -1), never OK or INFRA_ERROR."""
    detail = f"{result.status.value}: {result.message}\n{result.log[-3000:]}"
    assert result.status in REWARD_MINUS_ONE, detail
    assert result.status in allowed, detail


def test_the_honest_base_passes_every_guard_but_fallback(pool: WorkerPool) -> None:
    honest = textwrap.dedent(BASE) + "\nModelNew.forward = ModelNew._right\n"
    result = judge(pool, honest, mode=EvalMode.PROFILE, guards=EVERY_GUARD_BUT_FALLBACK)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert "profiler_start" not in result.log  # torch's profiler talks at every profile: not the candidate's output
    wrong = judge(pool, candidate(""))
    assert_minus_one(wrong, EvalStatus.INCORRECT)


def test_1_frames_reach_only_the_runners_state(pool: WorkerPool) -> None:
    result = judge(pool, FRAMES, mode=EvalMode.SUBMIT)
    assert_minus_one(result, EvalStatus.INCORRECT)
    assert "frames: harness contexts reached: " in result.log
    assert "frames: harness contexts reached: 0" not in result.log  # the attack did reach the runner's context


def test_2_gc_finds_no_reference_output(pool: WorkerPool) -> None:
    result = judge(pool, GC_HUNT)
    assert_minus_one(result, EvalStatus.INCORRECT)
    assert "gc: contexts 1" in result.log  # it found the runner's context, and nothing to steal in it


def test_3_forged_replies_on_the_result_channel_are_the_candidates_failure(pool: WorkerPool) -> None:
    result = judge(pool, CHANNEL_FORGERY)
    assert_minus_one(result, EvalStatus.CRASHED, EvalStatus.RUNTIME_ERROR, EvalStatus.INCORRECT)


def test_4_patched_timer_and_batch_are_unverifiable(pool: WorkerPool) -> None:
    result = judge(pool, PATCHED_HARNESS, mode=EvalMode.PROFILE)
    assert_minus_one(result, EvalStatus.RULE_VIOLATION)
    assert "unverifiable_timing" in {v.guard for v in result.violations}


def test_4_an_inflated_ping_hides_no_batch(pool: WorkerPool) -> None:
    result = judge(pool, PATCHED_PING, mode=EvalMode.PROFILE)
    assert_minus_one(result, EvalStatus.RULE_VIOLATION)
    assert "unverifiable_timing" in {v.guard for v in result.violations}


def test_5_module_hooks_change_no_comparison(pool: WorkerPool) -> None:
    result = judge(pool, MODULE_HOOKS, mode=EvalMode.SUBMIT)
    assert_minus_one(result, EvalStatus.INCORRECT)
    assert "hook: comparison forged in" in result.log


def test_6_profile_hooks_forge_no_timing(pool: WorkerPool) -> None:
    result = judge(pool, PROFILE_HOOK, mode=EvalMode.PROFILE)
    assert_minus_one(result, EvalStatus.RULE_VIOLATION)
    assert "unverifiable_timing" in {v.guard for v in result.violations}


def test_7_clean_up_hooks_act_too_late(pool: WorkerPool) -> None:
    result = judge(pool, CLEANUP, mode=EvalMode.SUBMIT)
    assert_minus_one(result, EvalStatus.INCORRECT)


@pytest.mark.xfail(strict=True, reason=(
    "The fallback audit is a TorchDispatchMode pushed in the runner, the candidate's own process: the candidate "
    "sees it (torch.utils._python_dispatch._get_current_dispatch_mode) and steps out of it "
    "(_disable_current_modes), computing with tensor methods (x.matmul(...).add(...).clamp_min(0)) that the "
    "source scan does not name. No torch_fallback violation reaches the trusted side: OK."))
def test_8_stepping_out_of_the_fallback_audit_is_caught(pool: WorkerPool) -> None:
    result = judge(pool, DISPATCH_ESCAPE, guards=("torch_fallback",))
    assert_minus_one(result, EvalStatus.RULE_VIOLATION)
    assert "torch_fallback" in {v.guard for v in result.violations}


def test_8_control_the_audit_sees_the_same_forward_without_the_escape(pool: WorkerPool) -> None:
    result = judge(pool, DISPATCH_CONTROL, guards=("torch_fallback",))
    assert_minus_one(result, EvalStatus.RULE_VIOLATION)
    assert {v.guard for v in result.violations} == {"torch_fallback"}


def test_9_torch_config_in_the_runner_loosens_no_comparison(pool: WorkerPool) -> None:
    result = judge(pool, TORCH_CONFIG, mode=EvalMode.SUBMIT)
    assert_minus_one(result, EvalStatus.INCORRECT)
    assert result.precision.matmul_allow_tf32 is False and result.precision.float32_matmul_precision == "highest"


def test_10_nothing_left_by_one_job_judges_the_next(pool: WorkerPool) -> None:
    first = judge(pool, POISONER, job_id="poisoner")
    assert first.status is EvalStatus.OK, first.message + first.log[-2000:]  # itself correct
    second = judge(pool, RELIES_ON_POISON, job_id="after-poisoner")
    assert_minus_one(second, EvalStatus.INCORRECT)
    assert "left by the earlier job: nothing" in second.log, second.log[-2000:]


def test_11_a_shadowed_output_is_judged_by_its_bytes(pool: WorkerPool) -> None:
    result = judge(pool, SHADOWED_OUTPUT)
    assert_minus_one(result, EvalStatus.INCORRECT)


def test_11_work_done_when_the_runner_copies_the_output_is_timed(pool: WorkerPool) -> None:
    result = judge(pool, LAZY_OUTPUT, mode=EvalMode.PROFILE)
    assert_minus_one(result, EvalStatus.RULE_VIOLATION, EvalStatus.INCORRECT)


def test_12_an_output_raising_base_exceptions_is_the_candidates_failure(pool: WorkerPool) -> None:
    result = judge(pool, RAISING_OUTPUT)
    assert_minus_one(result, EvalStatus.CRASHED, EvalStatus.RUNTIME_ERROR, EvalStatus.INCORRECT)


def test_13_wrong_answers_on_unchecked_timed_calls_are_caught(pool: WorkerPool) -> None:
    result = judge(pool, TELLS_TIMED_FROM_AUDITED, mode=EvalMode.PROFILE, baselines=CACHED)
    assert_minus_one(result, EvalStatus.INCORRECT, EvalStatus.RULE_VIOLATION)


def test_13_in_submit_every_interleaved_round_is_compared(pool: WorkerPool) -> None:
    result = judge(pool, TELLS_TIMED_FROM_AUDITED, mode=EvalMode.SUBMIT)
    assert_minus_one(result, EvalStatus.INCORRECT)
    assert "outputs during timing did not match" in result.message


# (20) The profiled forwards told apart: a profiler is on only while the judge profiles the candidate's kernels (the
# ``decoy_kernels`` attribution and the observation's table), so a forward that computes otherwise under it (here:
# a cheap wrong answer; on a GPU, its own kernels while profiled and torch's the rest of the time) shows the
# profiler a forward that never ran when timed. The profiled forwards' outputs are checked like timed ones.
TELLS_PROFILED_FROM_OTHERS = textwrap.dedent(BASE) + textwrap.dedent('''
def _forward(self, x):
    if torch.autograd._profiler_enabled():
        return self._wrong(x)
    return self._right(x)

ModelNew.forward = _forward
''')  # (no frame helpers: the static scan has nothing to name; only the profiled forwards' check can fire)


def test_20_a_forward_that_changes_under_the_profiler_is_wrong(pool: WorkerPool) -> None:
    for mode in (EvalMode.PROFILE, EvalMode.SUBMIT):
        result = judge(pool, TELLS_PROFILED_FROM_OTHERS, mode=mode, guards=EVERY_GUARD_BUT_FALLBACK, baselines=CACHED)
        assert_minus_one(result, EvalStatus.INCORRECT)
        assert "outputs of the profiled forwards did not match" in result.message, result.message


@pytest.mark.parametrize(("under_profiler", "status"), [
    ('raise RuntimeError("no profiling, thanks")', EvalStatus.RUNTIME_ERROR),  # the candidate's failure, not infra
    ("return (self._right(x), self._right(x))", EvalStatus.INCORRECT),  # another structure: named, not a crash
])
def test_20_a_forward_that_fails_only_under_the_profiler_is_its_failure(pool: WorkerPool, under_profiler: str,
                                                                         status: EvalStatus) -> None:
    code = TELLS_PROFILED_FROM_OTHERS.replace("return self._wrong(x)", under_profiler)
    result = judge(pool, code, mode=EvalMode.SUBMIT, guards=EVERY_GUARD_BUT_FALLBACK, baselines=CACHED)
    assert_minus_one(result, status)


# (18) The reference imported at run time, out of the static scan's sight: model_new.py writes the task's source
# to model.py in its own folder and loads it by a dotted name built from pieces (``pkgutil``, no ``import model``,
# no ``Model`` name), then runs the reference's forward on its own weights. Only the loaded-module check of
# ``reference_reuse`` (after the candidate is loaded: which modules it added, and whether one is that file) sees it.
REFERENCE_IMPORTED_AT_RUN_TIME = (
    "import os\nimport pkgutil\nimport sys\n\nimport torch.nn as nn\n\n"
    f"SOURCE = {textwrap.dedent(TASK)!r}\n"
    "with open(os.path.join(os.getcwd(), 'model.py'), 'w') as f:\n"
    "    f.write(SOURCE)\n"
    "sys.path.insert(0, os.getcwd())\n"
    "_reference = pkgutil.resolve_name('mod' + 'el:Mod' + 'el')\n\n"
    "class ModelNew(nn.Module):\n"
    "    def __init__(self, n):\n"
    "        super().__init__()\n"
    "        self.lin = nn.Linear(n, n)\n\n"
    "    def forward(self, x):\n"
    "        return _reference.forward(self, x)\n"
)


def test_18_the_reference_imported_at_run_time_is_named(pool: WorkerPool) -> None:
    from cudagym.judge.guards.reference import _findings
    from cudagym.judge.guards.source_scan import parse_python

    assert list(_findings(parse_python(REFERENCE_IMPORTED_AT_RUN_TIME))) == []  # the static scan sees nothing
    result = judge(pool, REFERENCE_IMPORTED_AT_RUN_TIME, guards=("reference_reuse",))
    assert_minus_one(result, EvalStatus.RULE_VIOLATION)
    assert "the workspace's model.py was imported (as module 'model')" in result.message, result.message


# (22) The warm-ups vouch for a forged timer: the runner's timer is replaced by one that claims 1 us a call, and the
# first timed requests (the warm-up rounds, whose outputs nobody compares) return a wrong answer at once. Their
# trusted clocks are an empty call's, so "the fastest timed call" would confirm any claim; every round after them
# does 3 ms of work and is right.
WARMUPS_VOUCH = candidate('''
import time

_timed = [0]

def _forward(self, x):
    if "_timed" in _caller_names():
        _claim_in_timed_calls(1.0)
        _timed[0] += 1
        if _timed[0] <= 3:
            return self._wrong(x)
    time.sleep(0.003)
    return self._right(x)

ModelNew.forward = _forward
''')


@pytest.mark.parametrize("mode", [EvalMode.SUBMIT, EvalMode.PROFILE])
def test_22_unchecked_warm_ups_vouch_for_no_claim(pool: WorkerPool, mode: EvalMode) -> None:
    result = judge(pool, WARMUPS_VOUCH, mode=mode, warmup_runs=3, runs=10,
                   baselines=CACHED if mode is EvalMode.PROFILE else None)
    assert_minus_one(result, EvalStatus.RULE_VIOLATION)
    assert "unverifiable_timing" in {v.guard for v in result.violations}, result.message
    assert "whose outputs it checked" in result.log


# (23) Numbers and nesting no reply needs: JSON holds integers of any size and arrays of any depth, and reading
# either can raise what a malformed reply's checks did not expect (OverflowError from float(), RecursionError from
# the decoder). Each candidate is wrong where it is timed, so -1 is due; the judge failing on its reply must not
# turn that into infra_error.
HUGE_LOAD_ACCOUNT = candidate('''
frame = sys._getframe(0)
while frame is not None:
    owner = frame.f_locals.get("self")
    if owner is not None and hasattr(owner, "started_s") and hasattr(owner, "channel"):
        owner.started_s = 10 ** 400  # the "loaded" reply's account of the start: an integer of 401 digits
    frame = frame.f_back
''')

HUGE_PEAK = candidate('''
_huge = [False]
for _module in (sys.modules.get("__main__"), sys.modules.get("cudagym.judge.split.runner")):
    if _module is not None and hasattr(_module, "device_peak_bytes"):
        _module.device_peak_bytes = lambda device, *rest, _real=_module.device_peak_bytes: (
            10 ** 400 if _huge[0] else _real(device, *rest))

def _forward(self, x):
    if "_timed" in _caller_names():
        _huge[0] = True  # every reply from now on reports a peak of 10**400 bytes
        return self._wrong(x)
    return self._right(x)

ModelNew.forward = _forward
''')

DEEP_FRAME = candidate('''
import os
import struct

def _forward(self, x):
    if "_timed" in _caller_names():
        argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
        channel = int(argv[argv.index(b"--sock") + 1])
        payload = b"[" * 200000  # a frame of its own on the runner's socket, nested past any stack
        os.write(channel, struct.pack("!Q", len(payload)) + payload)
        return self._wrong(x)
    return self._right(x)

ModelNew.forward = _forward
''')

HUGE_PROFILE_ROW = candidate('''
for _module in (sys.modules.get("__main__"), sys.modules.get("cudagym.judge.split.runner")):
    if _module is not None and hasattr(_module, "_Server"):
        def _profile(self, request, _real=_module._Server._profile):
            reply = _real(self, request)
            reply["events"] = [{"name": "k", "duration_us": 10 ** 400, "stream": 0, "is_memory_op": False,
                                "calls": 1}]
            return reply
        _module._Server._profile = _profile

def _forward(self, x):
    if "_timed" in _caller_names():
        return self._wrong(x)
    return self._right(x)

ModelNew.forward = _forward
''')


# A claim of 1e308 us: finite and positive, and the sum of a few overflowed in the judge's statistics.
HUGE_CLAIM = candidate('''
def _forward(self, x):
    if "_timed" in _caller_names():
        _claim_in_timed_calls(1e308)
        return self._wrong(x)
    return self._right(x)

ModelNew.forward = _forward
''')

BEYOND_BOUNDS = {"load account": HUGE_LOAD_ACCOUNT, "peak": HUGE_PEAK, "deep frame": DEEP_FRAME,
                 "profile row": HUGE_PROFILE_ROW, "claim": HUGE_CLAIM}


@pytest.mark.parametrize("name", list(BEYOND_BOUNDS))
def test_23_replies_beyond_json_bounds_are_the_candidates_failure(pool: WorkerPool, name: str) -> None:
    result = judge(pool, BEYOND_BOUNDS[name], mode=EvalMode.SUBMIT)
    assert_minus_one(result, EvalStatus.INCORRECT, EvalStatus.CRASHED)
    if result.status is EvalStatus.CRASHED:
        assert any(why in result.message for why in ("not JSON within bounds", "malformed", "impossible")), \
            result.message


# (24) Timed in blocks (the kernelbench and cuda-agent presets time each contender in a block of its own, so eager
# checks no round of the candidate's): the candidate counts its timed calls and answers one of its ten timed rounds
# with zeros at once, cutting a mean of ten by a tenth. Drawn one in ten, a spot check would let that pass four
# times in five; in SUBMIT each round's outputs are compared.
SKIPS_TIMED_ROUNDS = candidate('''
_timed = [0]

def _forward(self, x):
    if "_timed" in _caller_names():
        _timed[0] += 1
        if _timed[0] == 7:  # round 5 (after the warm-up and rounds 0-4)
            return self._wrong(x)
    return self._right(x)

ModelNew.forward = _forward
''')


def test_24_in_submit_every_round_timed_in_a_block_is_compared(pool: WorkerPool) -> None:
    result = judge(pool, SKIPS_TIMED_ROUNDS, mode=EvalMode.SUBMIT, interleave=False, runs=10)
    assert_minus_one(result, EvalStatus.INCORRECT)
    assert "outputs during timing did not match" in result.message, result.message


# (26) The shared arenas shrunk under the trusted process: after computing its (right) answer the candidate
# truncates the input arena's memfd, which the runner never touches again but the trusted process reads back (did
# the candidate change its inputs?): a read past the file's new end is a SIGBUS that killed the trusted worker. The
# arenas' size is sealed, so the truncation fails, and the candidate that shrugs that off is judged as it computed.
SHRINKS_THE_INPUT_ARENA = candidate('''
import os

def _forward(self, x):
    out = self._right(x)
    server = _runner_server()
    arena = server.arenas.get("inputs") if server is not None else None
    try:
        os.ftruncate(getattr(arena, "_fd", -1), 0)
    except OSError:
        pass
    return out

ModelNew.forward = _forward
''')


def test_26_a_runner_cannot_shrink_the_arenas_under_the_trusted_process(pool: WorkerPool) -> None:
    result = judge(pool, SHRINKS_THE_INPUT_ARENA)
    assert result.status is EvalStatus.OK, f"{result.status.value}: {result.message}"  # SIGBUS: crashed


# (27) The reference's code, found in the runner: the runner loads the task's reference before the candidate (its
# yardstick), and a candidate that reaches it (the runner's _Server, its context, or gc's objects) can run the
# reference's own forward on its weights and pass for its own work, with no torch fallback in its source. The
# reference's code leaves the runner before the candidate's arrives; only its init inputs and weights stay.
REFERENCE_IN_THE_RUNNER = candidate('''
import gc

def _reference_class():
    frame = sys._getframe(0)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "channel"):
            for holder in (owner, getattr(owner, "ctx", None)):
                found = getattr(getattr(holder, "reference", None), "model_cls", None)
                if found is not None:
                    return found
        frame = frame.f_back
    for thing in gc.get_objects():
        if isinstance(thing, type) and str(getattr(thing, "__module__", "")).startswith("_cudagym_reference_"):
            return thing
    return None

_found = _reference_class()
print("the reference's class reached:", _found is not None)

def _forward(self, x):
    return _found.forward(self, x)

ModelNew.forward = _forward
''')


@pytest.mark.parametrize("mode", [EvalMode.VERIFY, EvalMode.SUBMIT])
def test_27_the_reference_leaves_the_runner_before_the_candidate_arrives(pool: WorkerPool, mode: EvalMode) -> None:
    result = judge(pool, REFERENCE_IN_THE_RUNNER, mode=mode)
    assert_minus_one(result, EvalStatus.RUNTIME_ERROR)
    assert "the reference's class reached: False" in result.log, result.log[-2000:]


# (29) A claim of the smallest positive float (5e-324 us): finite and positive, it passed every bound and made an
# infinite speedup, tier 3. No timed call takes less than a microsecond; a claim below it is the runner's failure.
DENORMAL_CLAIM = candidate('''
def _forward(self, x):
    if "_timed" in _caller_names():
        _claim_in_timed_calls(5e-324, time_the_call=True)
    return self._right(x)

ModelNew.forward = _forward
''')


def test_29_a_claim_below_any_calls_length_is_the_runners_failure(pool: WorkerPool) -> None:
    result = judge(pool, DENORMAL_CLAIM, mode=EvalMode.SUBMIT)
    assert_minus_one(result, EvalStatus.CRASHED)
    assert "impossible time" in result.message, result.message


# (30) Work done after the reply, into the output arena: each timed call returns zeros at once and its reply carries a
# list of 150,000 numbers; the trusted side turned them into text after its clock stopped and before it copied the
# outputs, and a thread of the runner's wrote the right answer in that window (judged ok, SUBMIT, 3 runs of 3). A timed
# call's reply is now capped, its outputs are copied as its bytes arrive (before they are parsed), and only strings
# of a reply are kept as text.
LATE_ARENA = candidate('''
import os, struct, json, threading, time
def _chan():
    argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    return int(argv[argv.index(b"--sock") + 1])
def _frame(obj):
    p = json.dumps(obj).encode()
    return struct.pack("!Q", len(p)) + p

from cudagym.judge.split.arena import Slot, views
_N = 150000
_BIG = ("[" + ",".join("[" + ",".join(["0.30000000000000004"] * (_N // 10)) + "]" for _ in range(10)) + "]").encode()
t0 = time.perf_counter(); _parsed = json.loads(_BIG); _P = time.perf_counter() - t0
t0 = time.perf_counter(); [str(v)[:300] for v in _parsed[:10]]; _S = time.perf_counter() - t0
del _parsed
_CLAIM_US = 0.9 * _P * 1e6
_WORK_S = 0.8 * (_P + _S)
print(f"late arena: parse {_P*1e3:.1f} ms, str {_S*1e3:.1f} ms, claim {_CLAIM_US/1e3:.1f} ms, "
      f"hidden work {_WORK_S*1e3:.1f} ms")
_late = {}
_stats = {"late": 0, "wrote_us": []}
def _forward(self, x):
    if "_timed" in _caller_names():
        _late["x"] = x
        _late["self"] = self
        return self._wrong(x)
    return self._right(x)
_patched = [False]
def _install(srv):
    ch = srv.channel
    def send(message, fds=None):
        if message.get("kind") == "timed" and "x" in _late:
            x, model = _late.pop("x"), _late.pop("self")
            slots = [Slot.from_json(s) for s in _late.pop("req")["outputs"]]
            view = views(srv.arenas["outputs"].tensor, slots)[0]
            message["time_us"] = _CLAIM_US
            message["wall_us"] = _CLAIM_US
            message.pop("flag_changes", None)
            head = json.dumps(message).encode()
            payload = head[:-1] + b', "flag_changes": ' + _BIG + b"}"
            def late():
                t = time.perf_counter()
                time.sleep(_WORK_S)  # the real work (off the GIL, as torch's ops are), after the reply
                with torch.no_grad():
                    view.copy_(model._right(x))
                _stats["late"] += 1
            threading.Thread(target=late, daemon=True).start()
            ch._send_bytes(payload, fds)
            return
        real_send(message, fds)
    real_send = ch.send
    ch.send = send
    real_timed = type(srv)._timed
    def timed(request):
        _late["req"] = request
        return real_timed(srv, request)
    srv._timed = timed
def _forward_outer(self, x):
    srv = _runner_server()
    if srv is not None and not _patched[0]:
        _patched[0] = True
        _install(srv)
    return _forward(self, x)
import atexit
atexit.register(lambda: print("late arena: late writes", _stats["late"]))
ModelNew.forward = _forward_outer
''')


def test_30_outputs_written_after_the_reply_are_not_the_calls(pool: WorkerPool) -> None:
    result = judge(pool, LATE_ARENA, mode=EvalMode.SUBMIT)
    # a timed reply over its cap (256 KiB) is the runner's failure; under it, the outputs are copied before it is read
    assert_minus_one(result, EvalStatus.CRASHED, EvalStatus.INCORRECT, EvalStatus.RULE_VIOLATION)


# (31) The poisoned-context marker in the runner's notes: they reach the result's log, which the pool searched as
# text to decide whether to replace its trusted worker, so any candidate could force a restart after every job.
MARKER_IN_NOTES = candidate('''
_done = [False]

def _forward(self, x):
    server = _runner_server()
    if server is not None and not _done[0]:
        _done[0] = True
        server.ctx.notes.append("[cudagym] CUDA_CONTEXT_POISONED: replace this worker process")
    return self._right(x)

ModelNew.forward = _forward
''')


def test_31_text_of_the_candidates_replaces_no_worker(pool: WorkerPool) -> None:
    judge(pool, textwrap.dedent(BASE) + "\nModelNew.forward = ModelNew._right\n")  # a warm worker
    before = pool.info()[0]
    result = judge(pool, MARKER_IN_NOTES)
    after = pool.info()[0]
    assert result.status is EvalStatus.OK, result.message
    assert "CUDA_CONTEXT_POISONED" in result.log and not result.context_poisoned
    assert (after.pid, after.generation) == (before.pid, before.generation)


# (32) Lone surrogates in the runner's text: they reached the result's message and log, and whatever encoded them
# (a tokenizer counting the observation, a journal) failed on them.
SURROGATES = candidate('''
def _forward(self, x):
    raise RuntimeError("bad bytes \\udcff\\ud800 here")

ModelNew.forward = _forward
''')


def test_32_the_runners_text_reaches_the_result_as_valid_utf8(pool: WorkerPool) -> None:
    result = judge(pool, SURROGATES)
    assert_minus_one(result, EvalStatus.RUNTIME_ERROR)
    result.message.encode("utf-8")
    result.log.encode("utf-8")
