"""The sandbox: scrubbed environment, private folders, rlimits, network and judge isolation, group kills."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest
from faults import processes_running

from cudagym.judge.sandbox import (
    CappedLog,
    GiB,
    MiB,
    SandboxPolicy,
    check_workdir,
    describe_exit,
    judge_paths,
    prepare_workdir,
    run_sandboxed,
    scrub_env,
)
from cudagym.judge.watchdog import disk_usage_bytes
from cudagym.solution import Solution

SECRETS = {
    "HF_TOKEN": "hf_secret",
    "AWS_SECRET_ACCESS_KEY": "aws_secret",
    "GITHUB_TOKEN": "gh_secret",
    "HTTPS_PROXY": "http://proxy:3128",
    "CUDAGYM_HF_TOKEN": "cg_secret",
    "TORCH_HUB_API_KEY": "hub_secret",
    "SSH_AUTH_SOCK": "/tmp/agent.sock",
}


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


# ------------------------------------------------------------------------------------------ environment


def test_scrub_env_keeps_the_toolchain_and_drops_credentials():
    parent = {
        "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "3", "CUDA_HOME": "/usr/local/cuda", "LC_ALL": "C",
        "TORCH_CUDA_ARCH_LIST": "9.0", "PYTHONPATH": "/src", "HOME": "/root", "XDG_CACHE_HOME": "/root/.cache",
        **SECRETS,
    }
    env = scrub_env(parent, home="/sbx/home", tmpdir="/sbx/tmp", extra={"CUDAGYM_TEST_TOKEN": "x", "FOO": "1"})
    for kept in ("PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LC_ALL", "TORCH_CUDA_ARCH_LIST", "PYTHONPATH"):
        assert env[kept] == parent[kept]
    assert not set(SECRETS) & set(env)
    assert "CUDAGYM_TEST_TOKEN" not in env  # a secret-looking name is dropped even when passed explicitly
    assert env["FOO"] == "1"
    assert env["HOME"] == "/sbx/home" and env["TMPDIR"] == env["TMP"] == env["TEMP"] == "/sbx/tmp"
    assert "XDG_CACHE_HOME" not in env


def test_sandboxed_process_sees_no_credentials_even_in_proc_environ(tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    code = ("import json, os; print(json.dumps({'env': dict(os.environ), "
            "'raw': open('/proc/self/environ', 'rb').read().decode(), 'cwd': os.getcwd()}))")
    run = run_sandboxed(_python(code), cwd=tmp_path, timeout_s=60)
    assert run.ok, run.output
    facts = json.loads(run.output.strip().splitlines()[-1])
    for name, value in SECRETS.items():
        assert name not in facts["env"] and value not in facts["raw"]
    assert facts["cwd"] == str(tmp_path)
    home, tmp = Path(facts["env"]["HOME"]), Path(facts["env"]["TMPDIR"])
    assert home != Path.home() and home.parent == tmp.parent
    assert not home.exists() and not tmp.exists()  # private folders are removed afterwards


# ---------------------------------------------------------------------------------------------- rlimits


def test_rlimits_apply_to_the_sandboxed_command(tmp_path):
    policy = SandboxPolicy(file_size_bytes=8 * MiB, open_files=256)
    code = ("import json, resource as r; print(json.dumps([r.getrlimit(x)[0] for x in "
            "(r.RLIMIT_FSIZE, r.RLIMIT_NOFILE, r.RLIMIT_CORE, r.RLIMIT_CPU)]))")
    run = run_sandboxed(_python(code), cwd=tmp_path, policy=policy, timeout_s=60)
    fsize, nofile, core, cpu = json.loads(run.output.strip().splitlines()[-1])
    assert (fsize, nofile, core) == (8 * MiB, 256, 0)
    assert 0 < cpu <= policy.cpu_time_s + 60


def test_file_size_limit_stops_a_growing_file(tmp_path):
    code = ("f = open('big.bin', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20)); f.flush()")
    run = run_sandboxed(_python(code), cwd=tmp_path, policy=SandboxPolicy(file_size_bytes=4 * MiB), timeout_s=60)
    assert not run.ok and "File too large" in run.output
    assert (tmp_path / "big.bin").stat().st_size <= 4 * MiB


# -------------------------------------------------------------------------------- kills of the whole group


def test_timeout_kills_the_group_including_grandchildren(tmp_path):
    code = "import subprocess, time; p = subprocess.Popen(['sleep', '1000.4343']); time.sleep(1000)"
    started = time.monotonic()
    run = run_sandboxed(_python(code), cwd=tmp_path, timeout_s=6)  # room for a slow interpreter start
    assert run.timed_out and not run.ok
    assert "timed out" in run.describe()
    assert time.monotonic() - started < 30
    assert not processes_running("1000.4343")


def test_output_past_the_cap_kills_and_keeps_only_head_and_tail(tmp_path):
    code = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"
    policy = SandboxPolicy(output_bytes=2 * MiB, log_bytes=4096)
    run = run_sandboxed(_python(code), cwd=tmp_path, policy=policy, timeout_s=60)
    assert "stdout/stderr" in run.violation
    assert len(run.output) < 4096 + 200 and "omitted" in run.output
    assert 2 * MiB < run.output_bytes < 64 * MiB


def test_too_many_processes_kills_the_group(tmp_path):
    # found by their argument: a confined process's pids are its PID namespace's
    code = ("import subprocess, time\nkids = [subprocess.Popen(['sleep', '1000.6161']) for _ in range(40)]\n"
            "time.sleep(1000)")
    run = run_sandboxed(_python(code), cwd=tmp_path, policy=SandboxPolicy(max_processes=16), timeout_s=60)
    assert "processes" in run.violation and not run.timed_out
    time.sleep(0.2)
    assert not processes_running("1000.6161")


def test_host_memory_past_the_limit_kills_the_group(tmp_path):
    code = "import time\nhoard = []\nwhile True:\n    hoard.append(b'\\x01' * (32 << 20)); time.sleep(0.01)"
    run = run_sandboxed(_python(code), cwd=tmp_path, policy=SandboxPolicy(host_rss_bytes=256 * MiB), timeout_s=120)
    assert "host memory" in run.violation, run.describe()


def test_disk_use_past_the_limit_kills_the_group(tmp_path):
    code = ("n = 0\nwhile True:\n    open(f'f{n}.bin', 'wb').write(b'x' * (1 << 20)); n += 1")
    policy = SandboxPolicy(disk_bytes=32 * MiB, file_size_bytes=4 * MiB)
    run = run_sandboxed(_python(code), cwd=tmp_path, policy=policy, timeout_s=120)
    assert "disk" in run.violation, run.describe()


def test_disk_use_in_an_extra_writable_folder_counts_toward_the_limit(tmp_path):
    # a folder handed over with writes= is as watched as the working folder: no unwatched place to fill
    work, extra = tmp_path / "work", tmp_path / "extra"
    work.mkdir()
    extra.mkdir()
    code = (f"import time\nfor n in range(128):\n    open(f'{extra}/f{{n}}.bin', 'wb').write(b'x' * (1 << 20))\n"
            "time.sleep(5)")  # 128 MiB, then time for the watchdog to sum it
    policy = SandboxPolicy(disk_bytes=32 * MiB, file_size_bytes=4 * MiB)
    run = run_sandboxed(_python(code), cwd=work, policy=policy, timeout_s=120, writes=[extra])
    assert "disk" in run.violation, run.describe()
    assert disk_usage_bytes([str(work)]) == 0


def test_describe_exit_names_signals_and_statuses():
    assert "SIGSEGV" in describe_exit(-signal.SIGSEGV)
    assert "SIGKILL" in describe_exit(-signal.SIGKILL) and "OOM" in describe_exit(-signal.SIGKILL)
    assert describe_exit(3) == "exited with status 3"


# ------------------------------------------------------------------------------- network and judge code


def _probe_isolation(tmp_path: Path) -> dict:
    code = (
        "import json, os, socket, ctypes\n"
        "out = {'netns': os.readlink('/proc/self/ns/net')}\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2).close(); out['net'] = 'ok'\n"
        "except OSError as e:\n    out['net'] = str(e)\n"
        "try:\n    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); out['loopback'] = True\n"
        "except OSError:\n    out['loopback'] = False\n"
        f"target = {json.dumps(judge_paths()[0])} + '/.sandbox-probe'\n"
        "try:\n    open(target, 'w').close(); os.unlink(target); out['judge_writable'] = True\n"
        "except OSError:\n    out['judge_writable'] = False\n"
        "out['unshare'] = ctypes.CDLL(None, use_errno=True).unshare(0x40000000)\n"
        "print(json.dumps(out))\n"
    )
    run = run_sandboxed(_python(code), cwd=tmp_path, timeout_s=60)
    return json.loads(run.output.strip().splitlines()[-1])


def test_network_namespace_cuts_the_network_where_the_host_allows_it(tmp_path):
    facts = _probe_isolation(tmp_path)
    if facts["netns"] == os.readlink("/proc/self/ns/net"):
        pytest.skip("this host does not allow network namespaces (needs CAP_SYS_ADMIN); the worker reports "
                    "network_isolated=False there")
    assert facts["net"] != "ok"
    assert facts["loopback"] is True


def test_judge_code_is_read_only_and_namespaces_cannot_be_undone(tmp_path):
    facts = _probe_isolation(tmp_path)
    if facts["netns"] == os.readlink("/proc/self/ns/net"):
        pytest.skip("this host does not allow namespaces; judge code is protected by file permissions only")
    assert facts["judge_writable"] is False
    assert facts["unshare"] != 0  # CAP_SYS_ADMIN was dropped: the candidate cannot make new namespaces


# ------------------------------------------------------------------------------------- private folders


def test_prepare_workdir_adds_protected_files_read_only_and_check_finds_tampering(tmp_path):
    solution = Solution("extension", {"model_new.py": "import cuda_extension\n", "kernels/a.cu": "// a\n"})
    work = prepare_workdir(tmp_path / "work", solution)
    assert (work / "model_new.py").read_text() == "import cuda_extension\n"
    protected = work / "binding.cpp"
    assert protected.exists() and not protected.stat().st_mode & stat.S_IWUSR
    assert check_workdir(work, solution) == []
    protected.chmod(0o644)
    protected.write_text("// tampered\n")
    (work / "kernels" / "a.cu").write_text("// changed after the snapshot\n")
    (work / "binding_registry.h").unlink()
    problems = check_workdir(work, solution)
    assert any(p.startswith("binding.cpp: differs from the protected template") for p in problems)
    assert any(p.startswith("kernels/a.cu: differs from the snapshot") for p in problems)
    assert any(p.startswith("binding_registry.h: missing") for p in problems)


def test_disk_usage_counts_allocated_bytes_and_stops_past_the_limit(tmp_path):
    for i in range(4):
        (tmp_path / f"f{i}").write_bytes(b"x" * MiB)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g").write_bytes(b"x" * MiB)
    assert 5 * MiB <= disk_usage_bytes([str(tmp_path)]) < 6 * MiB
    assert disk_usage_bytes([str(tmp_path)], limit=MiB) > MiB


# -------------------------------------------------------------------------------------------- captured log


def test_capped_log_keeps_head_and_tail_in_bounded_memory():
    log = CappedLog(100)
    for i in range(10_000):
        log.feed(f"line {i}\n".encode())
    text = log.text()
    assert text.startswith("line 0\n") and text.rstrip().endswith("line 9999")
    assert "omitted" in text and len(log.head) + len(log.tail) <= 100
    assert log.total_bytes == sum(len(f"line {i}\n") for i in range(10_000))
    assert log.last_lines(2).splitlines() == ["line 9998", "line 9999"]


def test_policy_round_trips_through_json():
    policy = SandboxPolicy(cpu_time_s=5, host_rss_bytes=3 * GiB, isolate_network=False)
    assert SandboxPolicy.from_json(policy.to_json()) == policy


def test_the_nproc_backstop_counts_threads_not_just_processes():
    import threading

    from cudagym.judge.sandbox import _count_user_threads

    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(8)]
    for w in workers:
        w.start()
    try:
        assert _count_user_threads(os.getuid()) >= threading.active_count() >= 9
    finally:
        stop.set()
        for w in workers:
            w.join()


LEFTOVERS = '''
import json, os, shutil
from cudagym.judge.sandbox import remove_tree

def leave(root):  # what a candidate leaves: a read-only folder with a file, a folder with no bits, a link out
    outside = os.path.abspath(root + "-outside")
    os.makedirs(outside, mode=0o500)
    os.makedirs(os.path.join(root, "keep", "locked"))
    open(os.path.join(root, "keep", "ballast"), "wb").write(b"x" * 4096)
    os.symlink(outside, os.path.join(root, "keep", "out"))
    os.chmod(os.path.join(root, "keep", "locked"), 0)
    os.chmod(os.path.join(root, "keep"), 0o500)
    return outside

leave("plain")
shutil.rmtree("plain", ignore_errors=True)
outside = leave("mended")
remove_tree("mended")
print(json.dumps({"plain_left": os.path.lexists("plain"), "mended_left": os.path.lexists("mended"),
                  "outside_mode": oct(os.stat(outside).st_mode & 0o777)}))
'''


def test_what_a_confined_process_leaves_read_only_is_removed_by_a_judge_without_root(tmp_path):
    # In the sandbox the process is a user without capabilities, as a judge that does not run as root is: the
    # permission bits bind it. shutil.rmtree leaves a read-only folder's files; remove_tree mends the folders'
    # modes first, never through the link (the folder it names keeps its mode).
    run = run_sandboxed(_python(LEFTOVERS), cwd=tmp_path, policy=SandboxPolicy(), timeout_s=60)
    assert run.ok, run.output
    found = json.loads(run.output.strip().splitlines()[-1])
    assert found == {"plain_left": True, "mended_left": False, "outside_mode": "0o500"}, found
