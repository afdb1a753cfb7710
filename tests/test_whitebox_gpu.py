"""The planted white-box corpus on the H200: the GPU-only attack classes, through LocalJudge (worker + runner).

Each candidate is the bundled Swish extension solution (x * sigmoid(x) on 4096 x 16384 fp32, ~0.5 GB moved,
about the length of the default protocol's 100 us launch cover) with an attack added to ``model_new.py`` by
someone who read the judge: they move the work where the timer does not look, or hide it from the audit.

Their outputs are right, so the verdict that stops them is reward -1 with the rule named
(``unverifiable_timing``, ``torch_fallback``) or, where the structure simply removes the advantage, OK at no
better a time than the honest solution's (``HONEST_MARGIN``). Two attacks the CPU corpus found
(``tests/test_whitebox.py``: a patched timer with a patched ``_batch``; a lazy output computed when the runner
copies it) are repeated here with the CUDA timer; the calibrated claim check stops them on the CPU path, the
judge's GPU bracket (``cudagym.judge.split.signals``) here, and so it must stop a runner that plays the
bracket's signals early.
"""

from __future__ import annotations

from typing import Any

import pytest

from cudagym.judge.interface import EvalMode
from cudagym.judge.local import LocalJudge, probe_gpus
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import EvalResult, EvalStatus
from cudagym.solution import Solution

pytestmark = pytest.mark.gpu

TASK_ID = "bundled/L1/01_Swish"
NO_GUARDS = DEFAULT_PROTOCOL.with_changes(id="whitebox-gpu", guards=())
FALLBACK_ONLY = DEFAULT_PROTOCOL.with_changes(id="whitebox-gpu-fallback", guards=("torch_fallback",))
HONEST_MARGIN = 0.95  # an attack judged OK must not be timed faster than this share of the honest median

# (14) A side stream during the launch cover: the timer launches a ~100 us spin kernel on the current stream, then
# records its start event. The forward enqueues the real kernel on a stream that does not wait for the cover, so
# it runs beside the spin kernel; the join (a legitimate wait_stream) then costs only what is left of it.
SIDE_STREAM_UNDER_COVER = '''
import torch as _torch
_side = _torch.cuda.Stream()
_forward = ModelNew.forward
def _beside_the_cover(self, x):
    main = _torch.cuda.current_stream()
    with _torch.cuda.stream(_side):
        y = _forward(self, x)
    main.wait_stream(_side)
    y.record_stream(main)
    return y
ModelNew.forward = _beside_the_cover
'''

# (15) A host thread finishing the work after the timer's synchronize: forward returns at once a buffer (wrapped in
# a tensor subclass) and starts a thread that waits half a millisecond, past the end event and the sync, then
# computes into the buffer on its own stream. The runner reads ``.shape`` before copying the output out: the
# property joins the thread, so the copied bytes are right. The claim check's batch never reads ``.shape``.
THREAD_AFTER_SYNC = '''
import threading as _threading
import time as _time
import torch as _torch
_forward = ModelNew.forward
_stream = _torch.cuda.Stream()
_buffers = {}
class _Late(_torch.Tensor):
    @property
    def shape(self):
        worker = self.__dict__.get("_worker")
        if worker is not None:
            worker.join()
        return _torch.Tensor.shape.__get__(self, _torch.Tensor)
def _after_sync(self, x):
    out = _buffers.get(tuple(x.shape))
    if out is None:
        out = _buffers.setdefault(tuple(x.shape), _torch.empty_like(x))
    def work():
        _time.sleep(0.0005)
        with _torch.cuda.stream(_stream):
            out.copy_(_forward(self, x))
        _stream.synchronize()
    worker = _threading.Thread(target=work, daemon=True)
    worker.start()
    late = out.as_subclass(_Late)
    late.__dict__["_worker"] = worker
    return late
ModelNew.forward = _after_sync
'''

# (16) A CUDA graph captured in a method nobody audits: ``train()`` (build_models calls ``.train(False)`` after
# ``.to(device)``) captures torch's own x * sigmoid(x) on static buffers; forward only copies in, replays and
# returns, so the fallback audit (a dispatch mode around audited forwards) sees a copy and no compute. The name
# of the torch function is assembled at run time, past the source scan.
GRAPH_IN_TRAIN = '''
import torch as _torch
_act = getattr(_torch, "sig" + "moid")
def _train(self, mode=True):
    result = _torch.nn.Module.train(self, mode)
    if "_graph" not in self.__dict__:
        self._sx = _torch.zeros(4096, 16384, device="cuda")
        warm = _torch.cuda.Stream()
        warm.wait_stream(_torch.cuda.current_stream())
        with _torch.cuda.stream(warm):
            for _ in range(2):
                self._sy = self._sx * _act(self._sx)
        _torch.cuda.current_stream().wait_stream(warm)
        graph = _torch.cuda.CUDAGraph()
        with _torch.cuda.graph(graph):
            self._sy = self._sx * _act(self._sx)
        self.__dict__["_graph"] = graph
    return result
def _replay(self, x):
    self._sx.copy_(x)
    self.__dict__["_graph"].replay()
    return self._sy
ModelNew.train = _train
ModelNew.forward = _replay
'''

# (17) A persisting-L2 window (driver API through ctypes): every forward raises the persisting carve-out to the
# device's maximum and puts the input under a persisting access policy on the stream the kernel runs on, hoping
# the lines survive the judge's L2 flush into the next timed call.
PERSISTING_L2 = '''
import ctypes as _ctypes
import torch as _torch
_cuda = _ctypes.CDLL("libcuda.so.1")
_stream = _torch.cuda.Stream()
_forward = ModelNew.forward
class _Window(_ctypes.Structure):
    _fields_ = [("base_ptr", _ctypes.c_void_p), ("num_bytes", _ctypes.c_size_t), ("hitRatio", _ctypes.c_float),
                ("hitProp", _ctypes.c_int), ("missProp", _ctypes.c_int)]
class _Value(_ctypes.Union):
    _fields_ = [("window", _Window), ("pad", _ctypes.c_char * 64)]
_max = _ctypes.c_int(0)  # CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: more is refused (H200: 3/4 of L2 was)
_cuda.cuDeviceGetAttribute(_ctypes.byref(_max), 108, 0)
_carve = _max.value
_status = []
def _persist(self, x):
    _status.append(_cuda.cuCtxSetLimit(0x06, _ctypes.c_size_t(_carve)))  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    value = _Value()
    value.window = _Window(x.data_ptr(), min(x.numel() * x.element_size(), _carve), 1.0, 2, 1)  # persisting hits
    _status.append(_cuda.cuStreamSetAttribute(_ctypes.c_void_p(_stream.cuda_stream), 1, _ctypes.byref(value)))
    main = _torch.cuda.current_stream()
    _stream.wait_stream(main)
    with _torch.cuda.stream(_stream):
        y = _forward(self, x)
    main.wait_stream(_stream)
    y.record_stream(main)
    if len(_status) == 2:
        print("persisting L2: driver status", _status)
    return y
ModelNew.forward = _persist
'''

# (17b) The same window set up before the judge's go, where no bracket looks (session 26's review of the GPU path):
# on a stream that never waits for the go, each forward reads its input under a persisting policy while the runner
# is still queueing the call, so the read runs before the judge's bracket opens, on the last round's inputs at the
# same arena addresses. If the lines stay persisting while the judge writes the next inputs over them and flushes
# L2, the timed forward reads its input from L2. The input is 16 MiB, so all of it fits the carve-out.
PERSIST_BEFORE_THE_GO = PERSISTING_L2.replace("def _persist(self, x):", "def _persist_before(self, x):").replace(
    """    main = _torch.cuda.current_stream()
    _stream.wait_stream(main)
    with _torch.cuda.stream(_stream):
        y = _forward(self, x)
    main.wait_stream(_stream)
    y.record_stream(main)
""", """    with _torch.cuda.stream(_stream):  # no wait on the current stream: this runs now, before the go
        _torch.sum(x)
    y = _forward(self, x)
""").replace("ModelNew.forward = _persist", "ModelNew.forward = _persist_before")
SMALL_SWISH_ELEMENTS = (2048, 2048)  # 16 MiB of fp32 in, 16 MiB out: inside the H200's persisting carve-out

# Repeats of the CPU corpus's findings with the CUDA event timer.
# the forged timer itself: it plays the bracket by its rules and claims 1 us (the attacks below install it)
FORGED_TIMER = '''
import importlib as _il
import sys as _sys
import torch as _torch
_t = _il.import_module("cudagym.judge.harness." + "timing")
def _claim(self, call, cover_us=None, bracket=None):
    # plays the trusted side's bracket by its rules (waits for go, delivers, signals done): only the claim is forged
    stream = _torch.cuda.current_stream()
    if bracket is not None:
        bracket.open(stream)
    outputs = call()
    if bracket is not None:
        bracket.close(outputs, stream)
    _torch.cuda.synchronize()
    return _t.Measurement(outputs, 1.0, 1.0, 1.0)
def _timed_by_the_rules(call, bracket):
    # the bracket played by its rules around the call, timed by events as the runner's timer does: (outputs, us)
    stream = _torch.cuda.current_stream()
    if bracket is not None:
        bracket.open(stream)
    start, end = _torch.cuda.Event(enable_timing=True), _torch.cuda.Event(enable_timing=True)
    start.record(stream)
    outputs = call()
    end.record(stream)
    if bracket is not None:
        bracket.close(outputs, stream)
    _torch.cuda.synchronize()
    return outputs, start.elapsed_time(end) * 1000.0
'''

PATCHED_TIMER_AND_BATCH = FORGED_TIMER + '''_t.CudaEventTimer.measure = _claim
for _m in (_sys.modules.get("__main__"), _sys.modules.get("cudagym.judge.split.runner")):
    if _m is not None and hasattr(_m, "_Server"):
        _m._Server._batch = lambda self, request: {"kind": "batch", "calls": int(request.get("calls", 1))}
'''

# (22, white-box 22 on the GPU path) The forged timer above, with its warm-ups vouching for it: for the first 90 ms
# of timed requests (the protocol warms up for 100 ms, and nobody compares warm-up outputs) the forward returns zeros
# at once, so most brackets are an empty call's and the 20th percentile of all gaps would be one of theirs; only the
# calls whose outputs were checked may confirm a claim.
WARMUPS_VOUCH = PATCHED_TIMER_AND_BATCH + '''
import time as _time
_first_timed = []
_forward_real = ModelNew.forward
def _in_timed_request():
    frame = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_timed":
            return True
        frame = frame.f_back
    return False
def _forward(self, x):
    if _in_timed_request():
        if not _first_timed:
            _first_timed.append(_time.monotonic())
        if _time.monotonic() - _first_timed[0] < 0.09:
            return _torch.zeros_like(x)
    return _forward_real(self, x)
ModelNew.forward = _forward
'''

# (28) Claims forged in three calls of four: the timer patch above, but every fourth timed call is timed by the
# runner's own timer (an honest claim), the rest claim 1 us for the same work. The bracket rule judges the 20th
# percentile of the calls' gaps, an honest one here, while the median claim was a forged one; each on-time call now
# counts at least what the judge's clock shows of it.
MIXED_FORGERY = FORGED_TIMER + '''
_honest = _t.CudaEventTimer.measure
_calls = [0]
def _mostly_forged(self, call, cover_us=None, bracket=None):
    _calls[0] += 1
    if _calls[0] % 4 == 0:
        return _honest(self, call, cover_us=cover_us, bracket=bracket)
    return _claim(self, call, cover_us, bracket)
_t.CudaEventTimer.measure = _mostly_forged
'''

# (25) The device filled from the runner: at import the candidate takes all but 64 MiB of the GPU's free memory and
# lets it go at its first call, into its own allocator's cache (room for its outputs, none for the judge's); its
# answer is wrong (zeros). The judge's next input set or reference run then cannot be allocated: without
# attribution that read as task_too_large (reward 0, not the agent's fault) instead of the -1 a wrong answer earns.
FILLS_THE_DEVICE = '''
import torch as _torch
_free, _total = _torch.cuda.mem_get_info()
_hog = [_torch.empty(_free - (64 << 20), dtype=_torch.uint8, device="cuda")]
def _forward(self, x):
    _hog.clear()  # the blocks stay in this process's cache
    return _torch.zeros_like(x)
ModelNew.forward = _forward
'''

LAZY_OUTPUT = '''
import torch as _torch
_forward = ModelNew.forward
class _Lazy(_torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "copy_" and len(args) == 2 and hasattr(args[1], "_pending"):
            model, x = args[1]._pending
            with _torch._C.DisableTorchFunctionSubclass():
                return args[0].copy_(_forward(model, x))
        return super().__torch_function__(func, types, args, kwargs or {})
def _lazy(self, x):
    out = _torch.empty_like(x).as_subclass(_Lazy)
    out._pending = (self, x)
    return out
ModelNew.forward = _lazy
'''

# The bracket's own signals, played early: the runner says done (and armed) before its outputs are in the arena,
# then copies them, and forges its timer. The judge's stream closes its bracket at once and copies out what is there.
EARLY_DONE = PATCHED_TIMER_AND_BATCH + '''
_r = next(m for m in (_sys.modules.get("__main__"), _sys.modules.get("cudagym.judge.split.runner"))
          if m is not None and hasattr(m, "_RunnerBracket"))
_close = _r._RunnerBracket.close
def _early(self, outputs, stream):
    # done and armed on the idle side stream: they land at once, ahead of the call's own work on its stream
    from cudagym.judge.split.signals import ARMED, DONE, write_value
    write_value(self.server.side.cuda_stream, self.base + DONE, self.round)
    write_value(self.server.side.cuda_stream, self.base + ARMED, self.round)
    _close(self, outputs, stream)
_r._RunnerBracket.close = _early
'''


# (19) A library kernel the candidate never calls: the forward steps out of the dispatcher audit and leaves the
# work to torch's cuBLAS GEMM, by tensor methods the source scan does not name; the compiled kernel never runs.
# cuBLAS kernels count as the candidate's only where its sources call a library (``decoy_kernels``).
LIBRARY_VIA_TORCH = '''
import importlib as _importlib
_dispatch = _importlib.import_module("torch.utils._python" + "_dispatch")
def _escape(self, A, B):
    with _dispatch._disable_current_modes():
        return A.diag().matmul(B)
ModelNew.forward = _escape
'''
GEMM_TASK_ID = "bundled/L1/09_DiagMatmul"  # diag(A) @ B: the reference's own cuBLAS GEMM, the solution's row scaling
FALLBACK_AND_DECOY = DEFAULT_PROTOCOL.with_changes(id="whitebox-gpu-decoy", guards=("torch_fallback", "decoy_kernels"))


@pytest.fixture(scope="module")
def swish() -> tuple[Any, Solution]:
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    return source.get(TASK_ID), source.solution(TASK_ID)


@pytest.fixture(scope="module")
def judge() -> Any:
    with LocalJudge(NO_GUARDS, devices=list(probe_gpus("auto").device_ids[:1])) as j:
        yield j


@pytest.fixture(scope="module")
def honest(swish: tuple[Any, Solution], judge: Any) -> EvalResult:
    task, reference = swish
    result = judge.evaluate(task, reference, EvalMode.SUBMIT)
    assert result.status is EvalStatus.OK and not result.violations, result.message + result.log[-3000:]
    print(f"honest: {result.message}")
    return result


def _with(reference: Solution, attack: str) -> Solution:
    return Solution("extension", {**reference.files, "model_new.py": reference.files["model_new.py"] + "\n" + attack})


def _submit(swish: tuple[Any, Solution], judge: Any, attack: str) -> EvalResult:
    task, reference = swish
    result = judge.evaluate(task, _with(reference, attack), EvalMode.SUBMIT)
    print(f"{result.status.value}: {result.message[:600]}\n{result.log[-1500:]}")
    return result


def assert_no_gain(result: EvalResult, honest: EvalResult) -> None:
    """Caught (INCORRECT or a named rule), or OK with no better a time than the honest solution's.

    A RUNTIME_ERROR or CRASHED here would mean the attack itself is broken (its outputs are right when it
    works), so those fail the test rather than pass it.
    """
    detail = f"{result.status.value}: {result.message}\n{result.log[-3000:]}"
    if result.status is EvalStatus.OK:
        assert result.candidate.median_us >= HONEST_MARGIN * honest.candidate.median_us, \
            f"timed at {result.candidate.median_us:.1f} us vs honest {honest.candidate.median_us:.1f} us: " + detail
    else:
        assert result.status in (EvalStatus.INCORRECT, EvalStatus.RULE_VIOLATION), detail


def test_14_a_side_stream_under_the_launch_cover_gains_nothing(swish, judge, honest) -> None:
    assert_no_gain(_submit(swish, judge, SIDE_STREAM_UNDER_COVER), honest)


def test_15_a_thread_finishing_after_the_synchronize_gains_nothing(swish, judge, honest) -> None:
    assert_no_gain(_submit(swish, judge, THREAD_AFTER_SYNC), honest)


@pytest.mark.xfail(strict=True, reason=(
    "H200, call 3: a CUDA graph of torch's sigmoid captured in train() and replayed in forward dispatches no aten "
    "op, so the runner's dispatch audit (torch_fallback) sees nothing; the verdict was unverifiable_timing only "
    "because the claim allowance was then 10% + 30 us (claim 444.3 us, 626.5 us seen). Under today's allowance the "
    "fallback goes unnamed: kernel attribution outside the candidate's process is not built."))
def test_16_a_cuda_graph_captured_in_train_is_a_fallback(swish) -> None:
    task, reference = swish
    with LocalJudge(FALLBACK_ONLY, devices=list(probe_gpus("auto").device_ids[:1])) as fallback_judge:
        clean = fallback_judge.evaluate(task, reference, EvalMode.VERIFY)
        assert clean.status is EvalStatus.OK, clean.message  # the honest kernel passes the fallback audit
        result = _submit(swish, fallback_judge, GRAPH_IN_TRAIN)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-2000:]
    assert "torch_fallback" in {v.guard for v in result.violations}


def test_16b_the_same_graph_is_torchs_work_to_decoy_kernels(swish) -> None:
    """The graph test 16's audit cannot see replays torch's kernels, which the profiler names: ``decoy_kernels``."""
    with LocalJudge(FALLBACK_AND_DECOY, devices=list(probe_gpus("auto").device_ids[:1])) as decoy_judge:
        result = _submit(swish, decoy_judge, GRAPH_IN_TRAIN)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-2000:]
    assert {v.guard for v in result.violations} == {"decoy_kernels"}, result.message  # the audit saw nothing
    assert "compiled kernel(s) ran" in result.message and "at::native" in result.message, result.message


def test_19_a_cublas_gemm_the_sources_never_call_is_torchs_work() -> None:
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    task, reference = source.get(GEMM_TASK_ID), source.solution(GEMM_TASK_ID)
    with LocalJudge(FALLBACK_AND_DECOY, devices=list(probe_gpus("auto").device_ids[:1])) as decoy_judge:
        clean = decoy_judge.evaluate(task, reference, EvalMode.VERIFY)
        assert clean.status is EvalStatus.OK and not clean.violations, clean.message  # its own kernel: passes
        result = decoy_judge.evaluate(task, _with(reference, LIBRARY_VIA_TORCH), EvalMode.VERIFY)
    print(f"{result.status.value}: {result.message[:600]}")
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-2000:]
    assert {v.guard for v in result.violations} == {"decoy_kernels"}, result.message  # the audit saw nothing
    assert "compiled kernel(s) ran" in result.message or "your sources call neither" in result.message


def test_17_a_persisting_l2_window_gains_nothing(swish, judge, honest) -> None:
    assert_no_gain(_submit(swish, judge, PERSISTING_L2), honest)


def _small_swish(task: Any, rows: int, cols: int) -> Any:
    """The bundled Swish task on a ``rows`` x ``cols`` input (the extension solution runs any size)."""
    from cudagym.task import make_task

    source = task.source.replace("batch_size = 4096", f"batch_size = {rows}").replace("dim = 16384", f"dim = {cols}")
    assert source != task.source
    return make_task(source, id=f"test/whitebox_swish_{rows}x{cols}", suite="test", level=1,
                     name=f"swish_{rows}x{cols}", origin="test")


def _honest_and_attack(task: Any, reference: Solution, attack: str) -> tuple[EvalResult, EvalResult]:
    """SUBMIT of the honest solution, then of the attack, on ``task`` through a judge of their own."""
    with LocalJudge(NO_GUARDS, devices=list(probe_gpus("auto").device_ids[:1])) as small_judge:
        honest = small_judge.evaluate(task, reference, EvalMode.SUBMIT)
        assert honest.status is EvalStatus.OK and not honest.violations, honest.message + honest.log[-3000:]
        result = small_judge.evaluate(task, _with(reference, attack), EvalMode.SUBMIT)
    print(f"honest {honest.candidate.median_us:.2f} us ({honest.message[:200]}); attack {result.status.value} "
          f"{result.candidate.median_us:.2f} us: {result.message[:400]}\n{result.log[-1500:]}")
    return honest, result


def test_17b_a_persisting_window_set_up_before_the_go_gains_nothing(swish) -> None:
    task, reference = swish
    small = _small_swish(task, *SMALL_SWISH_ELEMENTS)
    attack = _with(reference, PERSIST_BEFORE_THE_GO).files["model_new.py"]
    assert "_persist_before" in attack and "wait_stream" not in attack
    honest, result = _honest_and_attack(small, reference, PERSIST_BEFORE_THE_GO)
    assert "persisting L2: driver status [0, 0]" in result.log, result.log[-2000:]  # the window was really set
    assert_no_gain(result, honest)


# (33) The forged timer (1 us claims) on a task whose honest kernel takes a few microseconds: 256 x 1024 fp32, 1 MiB
# in and out. Each call's claim may fall short of what the judge's clock shows by the bracket rule's allowance (5%
# and 10 us, sized to the clock's own noise: honest calls' gaps lay within -6.0 and +3.1 us of an empty call's on
# the H200), so a claim of 1 us on a 5 us kernel stood (session 27: 8.1x eager). The judge now reads series of 32
# calls back to back behind one go (harness.runner._series_check) and floors every call at what they showed.
TINY_SWISH_ELEMENTS = (256, 1024)
TIMER_FORGED = FORGED_TIMER + "_t.CudaEventTimer.measure = _claim\n"


def test_33_a_claim_forged_within_the_allowance_on_a_tiny_kernel_gains_nothing(swish) -> None:
    task, reference = swish
    honest, result = _honest_and_attack(_small_swish(task, *TINY_SWISH_ELEMENTS), reference, TIMER_FORGED)
    if result.status is EvalStatus.OK and result.candidate.median_us >= honest.candidate.median_us:
        assert "calls back to back" in result.log and "each counts at least" in result.log, result.log[-3000:]
    assert_no_gain(result, honest)


# (34) The forged timer again, and a forward that finds the series on its stack, reads every later call's input set
# out of the runner's request and computes them in one batched call, answering the later calls from its cache: the
# series then showed a batched kernel's time per call, not one call's (session 28 on the H200: 3.22 us against the
# honest 5.12, 2.61x eager). A series' calls are now chained on the GPU (cudagym.judge.split.signals): a later
# call's input set is placed only after the call ahead of it signalled done and its outputs were copied out, so
# what the batch read ahead is not those calls' inputs (tests/test_series_claims.py has its CPU twin).
READ_AHEAD = TIMER_FORGED + """
import sys as _s34
_forward34 = ModelNew.forward
_cache34 = {}
def _read_ahead(self, x):
    held = _cache34.pop(x.data_ptr(), None)
    if held is not None:
        return held
    frame = _s34._getframe(1)
    while frame is not None and frame.f_code.co_name != "_series":
        frame = frame.f_back
    if frame is None:
        return _forward34(self, x)
    xs = [args[0] for args, _ in frame.f_locals["calls"]]
    ys = _forward34(self, _torch.cat(xs))
    for t, y in zip(xs, ys.split(xs[0].shape[0])):
        _cache34[t.data_ptr()] = y
    return _cache34.pop(x.data_ptr())
ModelNew.forward = _read_ahead
"""


def test_34_a_forward_that_batches_a_series_read_ahead_gains_nothing(swish) -> None:
    task, reference = swish
    honest, result = _honest_and_attack(_small_swish(task, *TINY_SWISH_ELEMENTS), reference, READ_AHEAD)
    if result.status is EvalStatus.OK and "calls back to back" not in result.log:
        raise RuntimeError("no series was read: not the hole this test is about\n" + result.log[-3000:])
    assert_no_gain(result, honest)


# (35) A timer that times the call itself and claims a few percent less, on every call, on a task too long for a
# series (about 1.8 ms on the H200): under the on-time charge's old allowance (the bracket rule's 5% + 10 us) a claim
# 4% short stood uncharged on every call (up to 96 us of it at this size), so a copy of eager read 1.04x. The
# charge's allowance is now 1% of the claim, 1% of an empty call's path (a few ms of copies here) and 10 us
# (cudagym.judge.split.remote.on_time_allowance_us): about 55 us against the 72 us this claim leaves out.
LARGE_SWISH_ELEMENTS = (65536, 16384)  # 4 GiB of fp32 in, 4 GiB out
SHORT_CLAIM = 0.96
TIMER_SHORT = FORGED_TIMER + f"""
def _short(self, call, cover_us=None, bracket=None):
    outputs, took = _timed_by_the_rules(call, bracket)
    claim = {SHORT_CLAIM} * took
    return _t.Measurement(outputs, claim, claim, 1.0)
_t.CudaEventTimer.measure = _short
"""


def test_35_claims_a_few_percent_short_on_every_call_gain_nothing(swish) -> None:
    task, reference = swish
    honest, result = _honest_and_attack(_small_swish(task, *LARGE_SWISH_ELEMENTS), reference, TIMER_SHORT)
    assert "calls back to back" not in honest.log, "a series was read: not the allowance this test is about"
    if result.status is EvalStatus.OK:  # each call counted the clock's time, so no better than the honest by 1%
        assert "on-time calls counted by the judge's clock beyond their claims" in result.log, result.log[-3000:]
        assert result.candidate.median_us >= 0.99 * honest.candidate.median_us, \
            f"timed at {result.candidate.median_us:.1f} us vs honest {honest.candidate.median_us:.1f} us"
    else:
        assert result.status is EvalStatus.RULE_VIOLATION, result.message


def test_patched_timer_and_batch_are_unverifiable_on_the_gpu(swish, judge) -> None:
    result = _submit(swish, judge, PATCHED_TIMER_AND_BATCH)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message
    assert "unverifiable_timing" in {v.guard for v in result.violations}


def test_22_unchecked_warm_ups_vouch_for_no_claim_on_the_gpu(swish, judge) -> None:
    result = _submit(swish, judge, WARMUPS_VOUCH)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message
    assert "unverifiable_timing" in {v.guard for v in result.violations}
    assert "on time whose outputs were checked" in result.log


def test_28_claims_forged_in_most_calls_count_what_the_clock_showed(swish, judge, honest) -> None:
    result = _submit(swish, judge, MIXED_FORGERY)
    if result.status is EvalStatus.OK:
        assert_no_gain(result, honest)
        assert "on-time calls counted by the judge's clock beyond their claims" in result.log
    else:
        assert result.status is EvalStatus.RULE_VIOLATION, result.message
        assert "unverifiable_timing" in {v.guard for v in result.violations}


def test_25_a_runner_that_fills_the_device_is_the_candidates_failure_not_the_tasks(swish, judge) -> None:
    result = _submit(swish, judge, FILLS_THE_DEVICE)
    assert result.status in (EvalStatus.INCORRECT, EvalStatus.RUNTIME_ERROR), result.message + result.log[-2000:]
    if result.status is EvalStatus.RUNTIME_ERROR:
        assert "the candidate's process took" in result.message or "out of memory" in result.message.lower()


def test_work_done_when_the_runner_copies_the_output_is_timed_on_the_gpu(swish, judge, honest) -> None:
    assert_no_gain(_submit(swish, judge, LAZY_OUTPUT), honest)


def test_signalling_done_before_the_outputs_gains_nothing(swish, judge, honest) -> None:
    result = _submit(swish, judge, EARLY_DONE)
    assert result.status in (EvalStatus.INCORRECT, EvalStatus.RULE_VIOLATION), result.message + result.log[-2000:]


# (36) Outputs written in place: the forward finds the output arena's slot of its timed call on the runner's stack,
# computes straight into it with the solution's own fused kernel (a binding added for that) and returns the slot, and
# its timer claims what it timed less what the runner's copy of such an output costs (measured once, outside any
# bracket). The runner used to copy the outputs into that slot (a copy onto itself: torch skips it), and the judge
# took an empty call's cost, which holds that copy, off what its clock showed: so the claim matched the judge's
# clock and stood, at the kernel's time less a copy of its output, which on a memory-bound kernel is next to
# nothing. The judge now reads outputs where they lie in the heap it shares with the runner
# (cudagym.judge.split.heap): an empty call holds no copy, and the clock shows the kernel's whole time.
INTO_BINDING = """

namespace {

void swish_into(const torch::Tensor& x, torch::Tensor y) {
  TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.numel() == x.numel(), "swish_into: expected an output like x");
  const int err = launch_swish(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                               at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "swish_into: kernel launch failed");
}

}  // namespace

REGISTER_BINDING(swish_into, swish_into);
"""
WRITES_THE_ARENA = FORGED_TIMER + """
_copy_us36 = []
def _less_the_copy(self, call, cover_us=None, bracket=None):
    outputs, took = _timed_by_the_rules(call, bracket)
    if not _copy_us36 and isinstance(outputs, _torch.Tensor):  # what the runner's copy of such an output costs
        spare = _torch.empty_like(outputs)
        a, b = _torch.cuda.Event(enable_timing=True), _torch.cuda.Event(enable_timing=True)
        a.record()
        spare.copy_(outputs)
        b.record()
        b.synchronize()
        _copy_us36.append(a.elapsed_time(b) * 1000.0)
    claim = max(1.0, took - (_copy_us36[0] if _copy_us36 else 0.0))
    return _t.Measurement(outputs, claim, claim, 1.0)
_t.CudaEventTimer.measure = _less_the_copy
_forward36 = ModelNew.forward
def _slot36():
    from cudagym.judge.split.arena import Slot, views
    frame = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_timed_call" and "request" in frame.f_locals:
            server, request = frame.f_locals["self"], frame.f_locals["request"]
            return views(server.arenas["outputs"].tensor, [Slot.from_json(s) for s in request["outputs"]])[0]
        frame = frame.f_back
    return None
def _in_place(self, x):
    out = _slot36()
    if out is None:
        return _forward36(self, x)
    cuda_extension.swish_into(x, out)
    return out
ModelNew.forward = _in_place
"""
COPY_DELIVERY = NO_GUARDS.with_changes(id="whitebox-gpu-copy-delivery", extra={"delivery": "copy"})


def _writes_the_arena(reference: Solution) -> Solution:
    files = dict(_with(reference, WRITES_THE_ARENA).files)
    binding = "kernels/swish_binding.cpp"
    files[binding] = files[binding] + INTO_BINDING
    return Solution("extension", files)


def test_36_outputs_written_in_place_skip_no_copy(swish, judge, honest) -> None:
    task, reference = swish
    attack = _writes_the_arena(reference)
    result = judge.evaluate(task, attack, EvalMode.SUBMIT)
    print(f"heap: {result.status.value} {result.candidate.median_us:.1f} us: {result.message[:400]}\n"
          f"{result.log[-2000:]}")
    assert "outputs read from the heap shared with the runner" in result.log, result.log[-3000:]
    assert_no_gain(result, honest)
    with LocalJudge(COPY_DELIVERY, devices=list(probe_gpus("auto").device_ids[:1])) as copy_judge:
        control = copy_judge.evaluate(task, attack, EvalMode.SUBMIT)
    print(f"control (copy delivery): {control.status.value} {control.candidate.median_us:.1f} us: "
          f"{control.message[:400]}")
    if not (control.status is EvalStatus.OK and control.candidate.median_us < 0.5 * honest.candidate.median_us):
        raise RuntimeError("the attack did not beat the old copy delivery: not the hole this test is about\n"
                           f"{control.status.value}: {control.message}\n{control.log[-2000:]}")


# (36b) The words skipped: the runner says nowhere where its outputs lie (its delivery patched to do nothing) while
# the forward computes them as the honest solution does. The judge resets every word before each go, so nothing an
# earlier call wrote can stand in: the calls' outputs are not delivered.
WORDS_UNWRITTEN = """
import sys as _s36
for _m36 in (_s36.modules.get("__main__"), _s36.modules.get("cudagym.judge.split.runner")):
    if _m36 is not None and hasattr(_m36, "_Server"):
        _m36._Server._heap_outputs = lambda self, expected, tensors, call: ""
"""


def test_36b_outputs_whose_place_is_not_said_are_not_delivered(swish, judge) -> None:
    result = _submit(swish, judge, WORDS_UNWRITTEN)
    assert result.status is EvalStatus.INCORRECT, result.message + result.log[-2000:]
    assert "did not say where" in result.message + result.log, result.message


# (20) A forward that shows the profiler other work than it does when timed: with a profiler on (only while the judge
# profiles its kernels for the attribution), it runs its kernel four times; otherwise once. Its outputs are right
# either way; the profiled kernels take four timed medians per forward, which no timed call of that forward could
# hold (on a GPU the same test stands for own kernels shown to the profiler and torch's run when timed).
SHOWN_TO_THE_PROFILER = '''
import torch as _torch
_forward = ModelNew.forward
def _shown_to_the_profiler(self, x):
    if _torch.autograd._profiler_enabled():
        for _ in range(3):
            _forward(self, x)
    return _forward(self, x)
ModelNew.forward = _shown_to_the_profiler
'''
DECOY_ONLY = DEFAULT_PROTOCOL.with_changes(id="whitebox-gpu-decoy-only", guards=("decoy_kernels",))
# (20b) The same forward counting its profiled calls: to the first profile (three calls) its own kernel four times,
# which does not fit the timed median; to the retake torch's sigmoid, which fits; never profiled, its own kernel once.
# The retake is held to the kernel mix too.
SHOWN_THEN_HIDDEN = '''
import torch as _torch
_forward = ModelNew.forward
_profiled_calls = [0]
def _shown_then_hidden(self, x):
    if _torch.autograd._profiler_enabled():
        _profiled_calls[0] += 1
        if _profiled_calls[0] > 3:
            return x * getattr(_torch, "sig" + "moid")(x)
        for _ in range(3):
            _forward(self, x)
    return _forward(self, x)
ModelNew.forward = _shown_then_hidden
'''


def test_20_a_forward_that_changes_under_the_profiler_is_named(swish) -> None:
    with LocalJudge(DECOY_ONLY, devices=list(probe_gpus("auto").device_ids[:1])) as decoy_judge:
        clean = _submit(swish, decoy_judge, "")
        assert clean.status is EvalStatus.OK and not clean.violations, clean.message
        assert "timed median" in clean.log, clean.log[-2000:]  # the honest forward's profile next to its timing
        result = _submit(swish, decoy_judge, SHOWN_TO_THE_PROFILER)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-2000:]
    assert {v.guard for v in result.violations} == {"decoy_kernels"}, result.message
    assert "the timed calls ran other work than the profiled ones" in result.message
    assert "a retake: the first profile kept it busy" in result.log  # a decoy is one in the retake too


def test_20b_a_forward_that_shows_the_retake_torchs_kernels_is_named(swish) -> None:
    with LocalJudge(DECOY_ONLY, devices=list(probe_gpus("auto").device_ids[:1])) as decoy_judge:
        result = _submit(swish, decoy_judge, SHOWN_THEN_HIDDEN)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-2000:]
    assert {v.guard for v in result.violations} == {"decoy_kernels"}, result.message
    assert "compiled kernel(s) ran" in result.message and "in the profile's retake" in result.message, result.message


# (21) Torch does the work, and the runner's profile reply is rewritten on its way out: the candidate, in the runner's
# process, wraps the runner's request handler (``_Server._profile`` of ``__main__``) so that every kernel row it sends
# carries the name of the kernel the build compiled. The profile is taken in the runner, so the trusted side has only
# the runner's word for which kernels ran; the busy time it reports is the real one, so the fit holds too.
TORCH_DOES_THE_WORK = '''
import torch as _torch
def _torchs(self, x):
    return x * getattr(_torch, "sig" + "moid")(x)
ModelNew.forward = _torchs
'''
REWRITTEN_PROFILE = TORCH_DOES_THE_WORK + '''
import sys as _sys
def _renaming(profile):
    def _own_names(self, request):
        reply = profile(self, request)
        own = [k.kernel for k in self.ctx.job.build.kernels] or ["swish_kernel"]
        for event in reply.get("events", []):
            if not event.get("is_memory_op"):
                event["name"] = own[0]
        return reply
    return _own_names
for _module in (_sys.modules.get("__main__"), _sys.modules.get("cudagym.judge.split.runner")):
    if _module is not None and hasattr(_module, "_Server"):
        _module._Server._profile = _renaming(_module._Server._profile)
'''


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "The kernel attribution is taken in the runner, the candidate's own process, and sent to the trusted side as a "
    "reply the candidate can rewrite: a forward that leaves the work to torch and renames the reply's kernel rows to "
    "its compiled kernel is judged OK. The busy time in the reply is the real one, so the fit to the bracketed timed "
    "median holds. An observer outside the runner's process (kernel-level probes on the driver's launch calls) is "
    "not built."))
def test_21_a_rewritten_profile_reply_is_believed(swish) -> None:
    with LocalJudge(DECOY_ONLY, devices=list(probe_gpus("auto").device_ids[:1])) as decoy_judge:
        plain = _submit(swish, decoy_judge, TORCH_DOES_THE_WORK)
        if {v.guard for v in plain.violations} != {"decoy_kernels"}:  # the control: unforged, torch's work is named
            raise RuntimeError(f"the unforged fallback was not named by decoy_kernels: {plain.message}")
        result = _submit(swish, decoy_judge, REWRITTEN_PROFILE)
    if result.status not in (EvalStatus.OK, EvalStatus.RULE_VIOLATION):  # the attack itself broke
        raise RuntimeError(f"{result.status.value}: {result.message}\n{result.log[-2000:]}")
    assert result.status is EvalStatus.RULE_VIOLATION, result.message
    assert {v.guard for v in result.violations} == {"decoy_kernels"}, result.message


# (21b) The same rewritten reply under the kernel attribution gate (cudagym.judge.attribution): Nsight Compute's front
# end, outside the runner, names the forward's kernels in a fresh runner of its own, so the rewritten reply no longer
# decides. The honest Swish passes the gate, the fallback is named, and so is the forgery.
ATTRIBUTED = DECOY_ONLY.with_changes(id="whitebox-gpu-attributed", extra={"attribution": "ncu"})


def test_21b_outside_the_runner_the_rewritten_reply_does_not_decide(swish) -> None:
    with LocalJudge(ATTRIBUTED, devices=list(probe_gpus("auto").device_ids[:1])) as judge:
        honest = _submit(swish, judge, "")
        plain = _submit(swish, judge, TORCH_DOES_THE_WORK)
        forged = _submit(swish, judge, REWRITTEN_PROFILE)
    assert honest.status is EvalStatus.OK, honest.message + honest.log[-2000:]
    notes = [n for n in honest.notes if n.startswith("kernel_attribution")]
    assert notes and "swish" in notes[0].lower(), honest.notes
    print("honest:", notes[0])
    assert plain.status is EvalStatus.RULE_VIOLATION, plain.message
    assert forged.status is EvalStatus.RULE_VIOLATION, forged.message + forged.log[-2000:]
    assert "kernel_attribution" in {v.guard for v in forged.violations}, forged.message
    assert "sigmoid" in forged.message, forged.message
