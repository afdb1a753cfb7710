"""Planted sandbox escapes, tried the way an attacker would: through the env's tool calls (build stage) and
through the real GPU worker process (run time), never by calling a guard in-process.

Each candidate tries to read host files (/etc/passwd, a secret in the env's $HOME, the cache folder, a bundled
reference solution), to reach a listener on the host's loopback, to resolve a name, and to write outside its
folder and into /dev/shm; compile-time candidates #include absolute paths, probe with __has_include, and pass
forbidden flags. Each attempt must be refused or find nothing, and what the agent reads must name the rule and
no host path.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import gymnasium as gym
import pytest
from faults import FAULTS_DIR, make_job, script

import cudagym  # noqa: F401  (registers the env ids)
from cudagym.judge.records import EvalStatus
from cudagym.judge.worker import PoolOptions, WorkerPool

SECRET = "cudagym-secret-" + uuid.uuid4().hex


def _bundled_solution() -> Path:
    import cudagym.envs

    return Path(cudagym.envs.__file__).parent / "bundled" / "solutions" / "L1" / "01_Swish" / "kernels" / "swish.cu"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback_listener):
    """A host with secrets where an escape would find them: a home folder, an env variable, the cache folder."""
    from cudagym.judge.build.cache import default_cache_root

    home = tmp_path / "home"
    home.mkdir()
    (home / ".token").write_text(SECRET)
    cache = default_cache_root()  # the real cache folder (warm builds), with a secret planted in it
    (cache / "baselines").mkdir(parents=True, exist_ok=True)
    planted = cache / "baselines" / f"planted-{uuid.uuid4().hex}.json"
    planted.write_text(SECRET)
    user_home = Path.home() / f".cudagym-escape-{uuid.uuid4().hex}"  # the env user's real $HOME
    user_home.write_text(SECRET)
    monkeypatch.setenv("CUDAGYM_API_TOKEN", SECRET)
    marker = f"escape-{uuid.uuid4().hex}"
    yield {"home": home, "cache": cache, "port": loopback_listener.port, "listener": loopback_listener,
           "marker": marker, "targets": {
               "passwd": "/etc/passwd", "home": str(home / ".token"), "user_home": str(user_home),
               "cache": str(planted), "solution": str(_bundled_solution())}}
    planted.unlink(missing_ok=True)
    user_home.unlink(missing_ok=True)


def _probe_code(h: dict) -> str:
    """Python that tries every escape and returns what it found, as JSON."""
    return f'''
import json, os, socket
def probe():
    found = {{}}
    for name, path in {h["targets"]!r}.items():
        try:
            found[name] = open(path).read()[:200]
        except OSError as exc:
            found[name] = "refused: " + type(exc).__name__
    found["env"] = "{SECRET}" in json.dumps(dict(os.environ))
    try:
        socket.create_connection(("127.0.0.1", {h["port"]}), timeout=2).close()
        found["loopback"] = "connected"
    except OSError as exc:
        found["loopback"] = "refused: " + type(exc).__name__
    if found["loopback"] != "connected":  # never send a lookup out of an unconfined process
        try:
            socket.getaddrinfo("cudagym-escape-test.invalid", 80)
            found["resolve"] = "resolved"
        except OSError as exc:
            found["resolve"] = "refused: " + type(exc).__name__
    for name, path in (("tmp", "/tmp/{h["marker"]}"), ("shm", "/dev/shm/{h["marker"]}"),
                       ("cache_write", "{h["cache"]}/{h["marker"]}")):
        try:
            with open(path, "w") as fh:
                fh.write("x")
            found[name] = "wrote"
        except OSError as exc:
            found[name] = "refused: " + type(exc).__name__
    return found
'''


def _assert_contained(found: dict, h: dict) -> None:
    for name in h["targets"]:
        assert found[name].startswith("refused"), f"{name} was readable: {found[name]!r}"
    assert found["env"] is False
    assert found["loopback"].startswith("refused") and h["listener"].accepted == 0
    assert found["resolve"].startswith("refused")
    # writes either failed or landed in the sandbox's private, discarded folders: never on the host
    assert not Path(f"/tmp/{h['marker']}").exists() and not Path(f"/dev/shm/{h['marker']}").exists()
    assert not (h["cache"] / h["marker"]).exists()
    assert found["shm"].startswith("refused")


def _no_host_paths(text: str, h: dict) -> None:
    assert SECRET not in text and "root:x:0" not in text
    for path in (str(h["home"]), str(h["cache"]), str(Path(cudagym.__file__).parent), str(Path.home())):
        assert path not in text, f"host path {path} in the observation"


def _step(env, name: str, **arguments) -> str:
    obs, *_ = env.step(json.dumps({"name": name, "arguments": arguments}))
    return obs


@pytest.fixture
def judge():
    """A judge of this test's own (the process-wide default may belong to another test), on the user cache."""
    from cudagym.judge.local import LocalJudge

    with LocalJudge(devices="none") as j:
        yield j


@pytest.fixture
def inline_env(host, judge, tmp_path: Path):
    env = gym.make("CudaKernel-Bundled-v0", solution_format="inline", workspace_dir=str(tmp_path), judge=judge)
    env.reset(options={"task": "bundled/L1/01_Swish"})
    yield env
    env.close()


def test_build_stage_candidate_python_finds_nothing_of_the_host(host, inline_env) -> None:
    source = _probe_code(host) + "raise RuntimeError('FOUND=' + json.dumps(probe()))\n"
    _step(inline_env, "write_file", path="model_new.py", content=source)
    obs = _step(inline_env, "compile")
    found = json.loads(re.search(r"RuntimeError: FOUND=(\{.*\})", obs).group(1))
    assert "inline_record" not in obs and "cudagym/judge" not in obs  # no frame of the judge's own files
    _assert_contained(found, host)
    _no_host_paths(obs, host)


@pytest.mark.parametrize("flags, named", [
    ("extra_cflags=['-wrapper', '/bin/sh,-c,touch /tmp/MARK']", "-wrapper"),
    ("extra_cflags=['@/etc/passwd']", "@/etc/passwd"),
    ("extra_cuda_cflags=['-Xcompiler', '-B/tmp']", "-B<tmp>"),  # named as every text is: no host path, /tmp neither
    ("extra_ldflags=['-Wl,--script=/etc/passwd']", "-Wl,--script=/etc/passwd"),
    ("extra_include_paths=['/etc']", "/etc"),
    ("extra_cuda_cflags=['--use_fast_math']", "fast math"),
])
def test_forbidden_build_flags_are_refused_and_named(host, inline_env, flags: str, named: str) -> None:
    marker = Path("/tmp") / host["marker"]
    swish = FAULTS_DIR.parent / "formats" / "swish_inline" / "model_new.py"
    source = swish.read_text().replace("load_inline(", f"load_inline({flags.replace('MARK', host['marker'])}, ", 1)
    _step(inline_env, "write_file", path="model_new.py", content=source)
    obs = _step(inline_env, "compile")
    assert "Build OK" not in obs and named in obs and "nothing was compiled" in obs
    assert not marker.exists()


@pytest.fixture
def extension_env(host, judge, tmp_path: Path):
    env = gym.make("CudaKernel-Bundled-v0", workspace_dir=str(tmp_path), judge=judge)
    env.reset(options={"task": "bundled/L1/01_Swish"})
    yield env
    env.close()


def _write_swish(env, kernel_prefix: str) -> None:
    """The bundled Swish solution's files, with ``kernel_prefix`` put before its kernel source."""
    root = _bundled_solution().parents[1]
    for path in sorted(root.rglob("*")):
        if path.is_file():
            text = path.read_text()
            if path.name == "swish.cu":
                text = kernel_prefix + text
            _step(env, "write_file", path=str(path.relative_to(root)), content=text)


@pytest.mark.parametrize("target", ["passwd", "home", "user_home", "cache", "solution"])
def test_compiler_includes_of_host_files_find_nothing(host, extension_env, target: str) -> None:
    path = host["targets"][target]
    _write_swish(extension_env, f'#include "{path}"\n')
    obs = _step(extension_env, "compile")
    assert "Build OK" not in obs and "No such file or directory" in obs
    _no_host_paths(obs.replace(path, "<the path the agent wrote>"), host)
    if target == "solution":
        assert "swish_kernel" not in obs


@pytest.fixture
def raw_env(host, judge, tmp_path: Path):
    env = gym.make("CudaKernel-Bundled-v0", solution_format="raw", workspace_dir=str(tmp_path), judge=judge)
    env.reset(options={"task": "bundled/L1/01_Swish"})
    yield env
    env.close()


@pytest.mark.parametrize("target", ["passwd", "user_home", "solution"])
def test_raw_format_includes_of_host_files_find_nothing(host, raw_env, target: str) -> None:
    path = host["targets"][target]
    swish = FAULTS_DIR.parent / "formats" / "swish_raw"
    for rel in ("model_new.py", "kernels/swish.cu"):
        text = (swish / rel).read_text()
        _step(raw_env, "write_file", path=rel, content=f'#include "{path}"\n' + text if rel.endswith(".cu") else text)
    obs = _step(raw_env, "compile")
    assert "Build OK" not in obs and ("No such file" in obs or "cannot open source file" in obs), obs
    _no_host_paths(obs.replace(path, "<the path the agent wrote>"), host)


def test_has_include_probes_find_nothing(host, extension_env) -> None:
    probes = "".join(f'#if __has_include("{p}")\n#error FOUND {name}\n#endif\n' for name, p in host["targets"].items())
    _write_swish(extension_env, probes + '#if !__has_include(<cuda_runtime.h>)\n#error TOOLKIT_MISSING\n#endif\n')
    obs = _step(extension_env, "compile")
    assert "FOUND" not in obs and "TOOLKIT_MISSING" not in obs and "Build OK" in obs


def test_a_compiler_bomb_stops_at_the_memory_limit_not_the_hosts(host, tmp_path: Path) -> None:
    # every macro doubles the one before: the preprocessor's memory grows until something stops it; the
    # protocol caps each compiler process at 2 GiB here (6 GiB by default), far below this host's memory
    from cudagym.judge.local import LocalJudge
    from cudagym.judge.protocol import DEFAULT_PROTOCOL

    protocol = DEFAULT_PROTOCOL.with_changes(id="test-bomb", extra={"build_compiler_memory_bytes": 2 << 30})
    judge = LocalJudge(protocol, devices="none")
    env = gym.make("CudaKernel-Bundled-v0", solution_format="raw", workspace_dir=str(tmp_path), judge=judge)
    env.reset(options={"task": "bundled/L1/01_Swish"})
    bomb = "#define A0 1+\n" + "".join(f"#define A{i} A{i - 1} A{i - 1}\n" for i in range(1, 40))
    bomb += 'extern "C" __global__ void bomb(int* x) { x[0] = A39 1; }\n'
    swish = FAULTS_DIR.parent / "formats" / "swish_raw"
    _step(env, "write_file", path="model_new.py", content=(swish / "model_new.py").read_text())
    _step(env, "write_file", path="kernels/swish.cu", content=bomb + (swish / "kernels" / "swish.cu").read_text())
    obs = _step(env, "compile")
    env.close()
    judge.close()
    assert "Build OK" not in obs and "memory" in obs, obs


def test_run_time_escapes_in_the_real_worker_are_refused_and_named(host) -> None:
    source = _probe_code(host) + "def run():\n    return json.dumps(probe())\n"
    options = PoolOptions(job_fn="jobs:run_script", pythonpath=(str(FAULTS_DIR),), startup_timeout_s=120.0)
    with WorkerPool(["0"], options=options) as pool:
        result = pool.submit(make_job(script(source))).result(timeout=300)
    assert result.status is EvalStatus.RULE_VIOLATION
    guards = {v.guard for v in result.violations}
    assert {"file_access", "network"} <= guards
    found = json.loads(result.message.rsplit("\n", 1)[-1])
    _assert_contained(found, host)
    text = result.message + result.log
    _no_host_paths(text, host)
    assert result.isolation.confined


def test_orphans_die_with_the_judge_process(tmp_path: Path) -> None:
    """kill -9 of the process that started confined compilers and workers ends them within seconds."""
    import signal
    import subprocess
    import sys
    import time

    from faults import processes_running

    token = f"{uuid.uuid4().int % 10**6}.{uuid.uuid4().int % 10**6}"
    code = f"""
import sys, time
sys.path.insert(0, {str(FAULTS_DIR.parent)!r})
from pathlib import Path
from faults import make_job, script
from cudagym.judge.build.process import run_tool, Deadline
from cudagym.judge.worker import PoolOptions, WorkerPool
import threading
pool = WorkerPool(["0"], options=PoolOptions(job_fn="jobs:run_script", pythonpath=({str(FAULTS_DIR)!r},)))
child = "import subprocess, time\\ndef run():\\n    subprocess.Popen(['sleep', '{token}'])\\n    time.sleep(1000)\\n"
pool.submit(make_job(script(child), timeout_s=1000))
compile_args = dict(cwd={str(tmp_path)!r}, deadline=Deadline(1000), max_output_bytes=100)
threading.Thread(target=run_tool, args=(["sleep", "{token}"],), kwargs=compile_args, daemon=True).start()
print("started", flush=True)
time.sleep(1000)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 120
    # the compiler stand-in (and the bubblewrap processes around it) and the worker's child, by their argument
    while len(processes_running(token)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    assert len(processes_running(token)) >= 3, "the stand-in compiler and the worker's child did not start"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while processes_running(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_running(token), "sandboxed processes outlived the judge"
