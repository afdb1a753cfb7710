"""The sandbox around real GPU workers (H200): candidates judged through LocalJudge with the real build stage,
harness and worker process, every guard on.

- a Swish solution whose model_new.py tries every escape at import and in forward (host files, the cache,
  the bundled solutions, the host's loopback, a name lookup, writes outside its folder) still computes the
  right answer: the verdict is a rule violation naming ``file_access`` and ``network``, found nothing, and
  the observation names no host path;
- the result records the isolation: bubblewrap, no network, a private file-system view, a PID namespace;
- kill -9 of the judge process while a worker spins in an endless kernel frees the GPU within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from faults import FAULTS_DIR

from cudagym.judge.interface import EvalMode
from cudagym.judge.local import LocalJudge, probe_gpus
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import EvalStatus
from cudagym.observation import render_eval
from cudagym.solution import Solution

pytestmark = pytest.mark.gpu

TASK_ID = "bundled/L1/01_Swish"
SECRET = "cudagym-secret-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def swish():
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    return source.get(TASK_ID), source.solution(TASK_ID)


def _escaping_model_new(reference: str, port: int, home: Path) -> str:
    solution_file = Path(__import__("cudagym.envs", fromlist=["x"]).__file__).parent / "bundled" / "solutions"
    targets = {"passwd": "/etc/passwd", "home": str(home / ".token"), "solutions": str(solution_file / "L1"),
               "cache": os.environ.get("CUDAGYM_CACHE_DIR", "/tmp/cudagym-cache")}
    # no try/except (the reference_reuse guard rejects it statically, before any code runs): contextlib.suppress
    # and connect_ex, so the attempts really happen at import
    probe = f'''
import contextlib as _cl, json as _json, socket as _socket
FOUND = {{}}
for _name, _path in {targets!r}.items():
    FOUND[_name] = "refused"
    with _cl.suppress(OSError):
        FOUND[_name] = open(_path).read()[:100]
_sock = _socket.socket()
_sock.settimeout(2)
_code = _sock.connect_ex(("127.0.0.1", {port}))
_sock.close()
FOUND["loopback"] = "connected" if _code == 0 else f"refused: errno {{_code}}"
if _code != 0:
    FOUND["resolve"] = "refused"
    with _cl.suppress(OSError):
        _socket.getaddrinfo("cudagym-escape-test.invalid", 80)
        FOUND["resolve"] = "resolved"
print("FOUND=" + _json.dumps(FOUND), flush=True)
'''
    return reference + "\n" + probe


def test_run_time_escapes_are_stopped_and_named_through_the_real_judge(swish, tmp_path, loopback_listener,
                                                                        monkeypatch) -> None:
    task, reference = swish
    home = tmp_path / "home"
    home.mkdir()
    (home / ".token").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    source = _escaping_model_new(reference.files["model_new.py"], loopback_listener.port, home)
    solution = Solution("extension", {**reference.files, "model_new.py": source})
    with LocalJudge(DEFAULT_PROTOCOL, devices=list(probe_gpus("auto").device_ids[:1])) as judge:
        result = judge.evaluate(task, solution, EvalMode.SUBMIT)
    text = render_eval(result, "submit")
    print(text)
    assert result.status is EvalStatus.RULE_VIOLATION
    assert {"file_access", "network"} <= {v.guard for v in result.violations}
    found = json.loads(result.log.split("FOUND=", 1)[1].splitlines()[0])
    assert all(str(v).startswith("refused") for v in found.values()), found
    assert not {v.guard for v in result.violations} - {"file_access", "network"}  # no unrelated static match
    assert loopback_listener.accepted == 0
    assert SECRET not in text and "root:x:0" not in text and str(home) not in text
    assert result.isolation.confined and result.isolation.pid_namespace and "bubblewrap" in result.isolation.sandbox


def test_the_bundled_solution_passes_in_the_sandbox_with_no_guard_firing(swish) -> None:
    task, reference = swish
    with LocalJudge(DEFAULT_PROTOCOL, devices=list(probe_gpus("auto").device_ids[:1])) as judge:
        result = judge.evaluate(task, reference, EvalMode.SUBMIT)
        workers = judge.workers()
    assert result.status is EvalStatus.OK and not result.violations, result.message
    assert result.isolation.confined and workers[0].network_isolated


def _gpu_memory_mib() -> int:
    # memory in use on the first GPU: a worker's CUDA context holds hundreds of MiB (process lists are not
    # always visible from inside a VM or container, memory is)
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, timeout=60).stdout
    return int(out.split()[0])


def test_kill_9_of_the_judge_frees_the_gpu_of_a_spinning_worker(swish, tmp_path) -> None:
    task, reference = swish
    folder = FAULTS_DIR / "gpu_kernel_loop"
    files = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()
             and "__pycache__" not in p.parts}
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"files": files}))
    code = f"""
import json, sys, time
from cudagym.judge.interface import EvalMode
from cudagym.judge.local import LocalJudge
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.solution import Solution
from cudagym.sources.bundled import BundledSource
task = BundledSource().get({TASK_ID!r})
judge = LocalJudge(DEFAULT_PROTOCOL.with_changes(id="kill-test", guards=(), eval_timeout_s=600))
files = json.load(open({str(job)!r}))["files"]
judge.submit(task, Solution("extension", files), EvalMode.VERIFY)
print("submitted", flush=True)
time.sleep(1000)
"""
    before = _gpu_memory_mib()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "submitted"
    deadline = time.monotonic() + 240
    while _gpu_memory_mib() < before + 200 and time.monotonic() < deadline:
        time.sleep(1)
    busy = _gpu_memory_mib()
    assert busy >= before + 200, "the worker never took the GPU"
    time.sleep(5)  # the endless kernel is running now
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = time.monotonic()
    while _gpu_memory_mib() > before + 100 and time.monotonic() - killed_at < 30:
        time.sleep(0.5)
    freed_s = time.monotonic() - killed_at
    print(f"GPU memory {before} MiB before, {busy} MiB with the worker, {_gpu_memory_mib()} MiB "
          f"{freed_s:.1f} s after kill -9 of the judge")
    assert _gpu_memory_mib() <= before + 100, "a worker outlived the judge and still holds the GPU"
