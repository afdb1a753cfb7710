"""The judge's persistent state trusts nothing a job or a peer controls: red-team attacks on its caches and service.

Each test is one finding, tried through the real code: the baseline cache (which jobs may write it, where its
files go, whose times a file holds), the build cache (what a confined tool leaves in its output, what a job is
handed from an entry), the solution hash that keys builds and the journal, the journal's resume by id, and the
host's judge server (a peer's task, protocol, job ids and malformed messages). The GPU service is a stand-in
that times the way the real worker does: a job that finds no cached baselines times them beside its own
candidate, so only a job that runs nothing but the reference gives clean times. Tests marked ``xfail`` keep a
finding whose fix lies outside the files this suite's fixes touch (the report names the fix).
"""

from __future__ import annotations

import json
from multiprocessing.connection import Client
from pathlib import Path

import pytest
from faults import RELU_SOURCE, relu_task, script
from judge_stubs import STUB_GPU, StubGpus, stub_judge

from cudagym.judge.baselines import BaselineCache, BaselineKey, reference_solution
from cudagym.judge.build.artifact import export_artifact
from cudagym.judge.build.cache import BuildCache
from cudagym.judge.build.process import BuildLimits, Deadline
from cudagym.judge.build.units import CompileUnit, compile_unit
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import JobSpec
from cudagym.judge.journal import Journal
from cudagym.judge.local import LocalBuilds
from cudagym.judge.pipeline import Pipeline, PipelineJudge
from cudagym.judge.protocol import DEFAULT_PROTOCOL, Protocol, get_protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, TimingStats
from cudagym.judge.remote import JudgeServer, RemoteJudge
from cudagym.solution import Solution
from cudagym.task import Task

CLEAN_US = 100.0  # the reference's eager time, timed with nothing else on the GPU
SLOW_US = 10_000.0  # the eager time of a reference whose forward sleeps
CANDIDATE_US = 50.0
CROWDED = 50.0  # how much slower a baseline comes out when timed beside a candidate that keeps the GPU busy
SLOW_SOURCE = RELU_SOURCE.replace("return torch.relu(x)", "import time\n        time.sleep(0.01)\n"
                                  "        return torch.relu(x)")


def solution(i: int = 0) -> Solution:
    return script(f"def run():\n    return {i}\n")


def runs_only_the_reference(spec: JobSpec) -> bool:
    """Ground truth for the stand-in: the job's candidate is the task's reference, file for file, in its format."""
    reference = reference_solution(spec.task)
    return spec.solution.format == reference.format and dict(spec.solution.files) == dict(reference.files)


class TimingGpus(StubGpus):
    """GPUs that time as the worker does: unknown baselines are timed in the job itself, beside its candidate.

    The reference costs :data:`CLEAN_US` (:data:`SLOW_US` where its source sleeps, three times as long with the
    models in ``.train()``); a baseline timed beside any other candidate comes out :data:`CROWDED` times slower.
    """

    def _run(self, spec: JobSpec) -> EvalResult:
        self.gate.wait(timeout=60)
        cost = SLOW_US if "time.sleep" in spec.task.source else CLEAN_US
        if spec.protocol.extra.get("module_mode") == "train":
            cost *= 3
        if spec.baselines.known:
            eager, compiled = spec.baselines.eager, spec.baselines.compiled
        else:
            crowd = 1.0 if runs_only_the_reference(spec) else CROWDED
            eager = TimingStats(median_us=cost * crowd, runs=10)
            compiled = TimingStats(median_us=0.9 * cost * crowd, runs=10)
        return EvalResult(EvalStatus.OK, f"ran {spec.job_id}", build=spec.build, hardware=STUB_GPU,
                          candidate=TimingStats(median_us=CANDIDATE_US, runs=10), eager=eager, compiled=compiled)


def cached(tmp_path: Path, task: Task, protocol: Protocol | str = "cudagym") -> float:
    """The eager median the judge's baseline cache under ``tmp_path`` holds for ``task`` (0 when none)."""
    key = BaselineKey.of(task, STUB_GPU, get_protocol(protocol))
    return BaselineCache(tmp_path / "baselines").get(key).eager.median_us


# ------------------------------------------------------------------------------------------ the baseline cache


def test_the_reference_files_in_another_format_are_not_a_reference_job(tmp_path):
    """Attack: the reference's own files as an ``extension`` solution (same content hash, another format and build)
    used to count as a reference job, so the baselines timed in that job (beside whatever it loaded) were cached."""
    task = relu_task()
    twin = Solution("extension", dict(reference_solution(task).files))
    gpus = TimingGpus()
    with stub_judge(tmp_path, gpus=gpus) as judge:
        judge.evaluate(task, twin)
    assert any(s.job_id.startswith("baselines:") for s in gpus.started), "a clean baseline job ran first"
    assert cached(tmp_path, task) == CLEAN_US


def test_a_task_hash_that_climbs_out_stays_inside_the_baseline_cache(tmp_path):
    """Attack: a task whose content hash is a path (``../../../../escaped``): the baseline job's times were written
    as ``escaped.json`` beside the cache folder, not in it (any folder the judge may write, by a peer's task)."""
    task = Task("test/escape", "test", 1, "escape", RELU_SOURCE, "../../../../escaped")
    with stub_judge(tmp_path, gpus=TimingGpus()) as judge:
        assert judge.evaluate(task, solution()).status is EvalStatus.OK
    assert not (tmp_path / "escaped.json").exists()
    inside = list((tmp_path / "baselines").rglob("*.json"))
    assert len(inside) == 1 and inside[0].resolve().is_relative_to((tmp_path / "baselines").resolve())


def test_a_file_holds_only_its_own_keys_times(tmp_path):
    """Attack: two keys whose names sanitize to one file name (``Stub GPU`` and ``Stub_GPU``) read each other's
    times; a file now answers only for the key it records."""
    cache = BaselineCache(tmp_path)
    spaced = BaselineKey("a" * 64, "Stub GPU", "2.11", "cudagym-v5-0123456789")
    underscored = BaselineKey("a" * 64, "Stub_GPU", "2.11", "cudagym-v5-0123456789")
    assert cache.path(spaced) == cache.path(underscored)
    cache.put(spaced, TimingStats(median_us=SLOW_US, runs=10), TimingStats(median_us=SLOW_US, runs=10))
    assert not cache.get(underscored).eager.measured
    assert cache.get(spaced).eager.median_us == SLOW_US


def test_train_mode_baselines_are_not_served_to_the_eval_protocol(tmp_path):
    """Attack: ``extra["module_mode"]`` changes a baseline's time but not ``Protocol.timing_key``, so a protocol
    record that kept the preset's id with the models in ``.train()`` cached its times for the preset."""
    training = get_protocol("cudagym").with_changes(extra={"module_mode": "train"})
    with stub_judge(tmp_path, gpus=TimingGpus()) as judge:
        trainer = PipelineJudge(training, judge.pipeline)
        assert trainer.evaluate(relu_task(), solution(1)).eager.median_us == 3 * CLEAN_US
        trainer.close()
        assert judge.evaluate(relu_task(), solution(2)).eager.median_us == CLEAN_US
    assert cached(tmp_path, relu_task()) == CLEAN_US


# ------------------------------------------------------------------------------------------ the solution hash


def _nul_builds(task: Task, sol: Solution, protocol: Protocol) -> BuildResult:
    """A build stage that rejects a source holding a NUL, as a compiler reads it: not the code it looks like."""
    if any("\0" in text for text in sol.files.values()):
        return BuildResult(BuildStatus.COMPILE_ERROR, sol.format, message="null character in kernels/a.cu")
    return BuildResult(BuildStatus.OK, sol.format, artifact_key=sol.build_hash()[:8], artifact_path="/built")


def test_a_nul_in_a_file_cannot_make_two_solutions_one(tmp_path):
    """Attack: paths and texts were hashed with NUL separators, so ``a.cu = "A\\0kernels/b.cu\\0B"`` hashed as
    ``a.cu = "A"`` plus ``b.cu = "B"``: the build memo handed the second solution's OK build to the first, which
    does not compile (a -1 judged as another solution's verdict)."""
    model = "class ModelNew:\n    pass\n"
    split = Solution("raw", {"kernels/a.cu": "A", "kernels/b.cu": "B", "model_new.py": model})
    folded = Solution("raw", {"kernels/a.cu": "A\0kernels/b.cu\0B", "model_new.py": model})
    assert folded.content_hash != split.content_hash and folded.build_hash() != split.build_hash()
    pipeline = Pipeline(LocalBuilds(_nul_builds, tmp_path, workers=1), StubGpus(), BaselineCache(tmp_path / "b"))
    with PipelineJudge("cudagym", pipeline) as judge:
        assert judge.evaluate(relu_task(), split).status is EvalStatus.OK
        assert judge.evaluate(relu_task(), folded).status is EvalStatus.BUILD_FAILED


# ------------------------------------------------------------------------------------------ the build cache


def _stand_in_compile(tmp_path: Path, script_text: str, key: str) -> Path:
    """Run ``script_text`` as a confined compiler (``$1``: its output) through the real cache; the entry."""
    cache = BuildCache(tmp_path / "cache")
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    unit = CompileUnit(source="kernels/k.cu", kind="cubin", key=key, tool="sh", artifact="k.cubin",
                       argv=("/bin/sh", "-c", script_text, "sh", "{out}"))
    result = compile_unit(unit, cache=cache, cwd=cwd, deadline=Deadline(60), limits=BuildLimits())
    assert result.returncode == 0, result.output
    return cache.entry_dir("cubin", key)


def _handed(tmp_path: Path, entry: Path) -> tuple[Path | None, str]:
    """What a worker is handed of ``entry`` (its folder, or why it could not be)."""
    build = BuildResult(BuildStatus.OK, "raw", artifact_path=str(entry / "k.cubin"))
    try:
        return Path(export_artifact(build, tmp_path / "job").artifact_path).parent, ""
    except OSError as exc:
        return None, str(exc)


def test_a_link_a_compiler_leaves_in_its_output_hands_no_host_file_to_a_job(tmp_path):
    """Attack: a confined tool's output folder gets a link to a host file the sandbox hides; the entry was
    committed with it, unlisted, and the copy into the job followed it in the judge's process, so the candidate's
    runner read the file (here a secret; ``/proc/self/environ`` is the judge's environment)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("judge-secret")
    entry = _stand_in_compile(tmp_path, f'printf cubin > "$1"; ln -s {secret} "$(dirname "$1")/leak"', "a" * 64)
    folder, why = _handed(tmp_path, entry)
    assert folder is not None, why
    handed = [p.read_text() for p in (tmp_path / "job").rglob("*") if p.is_file()]
    assert "judge-secret" not in handed and not (folder / "leak").exists()
    assert (folder / "k.cubin").read_text() == "cubin"


def test_a_fifo_a_compiler_leaves_in_its_output_does_not_turn_the_job_into_an_infra_error(tmp_path):
    """Attack: a fifo in a tool's output folder was committed with the entry; copying the entry into a job then
    failed (``OSError``: the worker's ``infra_error``, reward 0 instead of the candidate's -1)."""
    entry = _stand_in_compile(tmp_path, 'printf cubin > "$1"; mkfifo "$(dirname "$1")/pipe"', "b" * 64)
    folder, why = _handed(tmp_path, entry)
    assert folder is not None, why
    assert (folder / "k.cubin").read_text() == "cubin" and not (folder / "pipe").exists()


def test_entry_files_are_plain_and_nothing_added_later_is_handed_to_a_job(tmp_path):
    """Attack: a setuid bit and a hard link from a tool's output kept in the entry; a file added to an entry after
    its commit is in no listing, so no check saw it, and the whole entry was copied into jobs."""
    entry = _stand_in_compile(tmp_path, 'printf cubin > "$1"; chmod 4755 "$1"; ln "$1" "$(dirname "$1")/twin"',
                              "c" * 64)
    for path in entry.iterdir():
        info = path.lstat()
        assert not info.st_mode & 0o7000 and info.st_nlink == 1, path.name
    (entry / "planted.py").write_text("print('not built by the judge')")
    folder, why = _handed(tmp_path, entry)
    assert folder is not None, why
    assert not (folder / "planted.py").exists() and (folder / "k.cubin").read_text() == "cubin"


# ------------------------------------------------------------------------------------------ the judge server


def test_a_peer_whose_task_hash_is_not_its_sources_cannot_poison_the_hosts_baselines(tmp_path):
    """Attack: a keyed peer sends ReLU's content hash with a source that sleeps; the clean baseline job timed that
    source and cached 10 ms under ReLU's key, so every other peer's 50 us ReLU candidate was judged 200x eager."""
    honest_task = relu_task()
    forged = Task(honest_task.id, honest_task.suite, honest_task.level, honest_task.name, SLOW_SOURCE,
                  honest_task.content_hash)
    with stub_judge(tmp_path, gpus=TimingGpus()) as judge, JudgeServer(judge) as server:
        attacker = RemoteJudge("cudagym", address=server.address, authkey=server.authkey)
        refused = attacker.evaluate(forged, solution(1))
        attacker.close()
        victim = RemoteJudge("cudagym", address=server.address, authkey=server.authkey)
        result = victim.evaluate(honest_task, solution(2))
        victim.close()
    assert result.eager.median_us == CLEAN_US and cached(tmp_path, honest_task) == CLEAN_US
    assert refused.status is EvalStatus.INFRA_ERROR and "not the hash of its source" in refused.message


def test_a_peer_reusing_a_journaled_job_id_gets_its_own_verdict(tmp_path):
    """Attack: the served journal answered a job id from its record whatever the job, so a peer naming another
    job's id (or a run reusing ids) got that job's OK verdict for a solution that does not build."""
    gpus = StubGpus()
    with stub_judge(tmp_path, gpus=gpus) as judge, JudgeServer(judge) as server:
        judge.journal = Journal(tmp_path / "served.jsonl")
        first = RemoteJudge("cudagym", address=server.address, authkey=server.authkey)
        done = first.submit(relu_task(), solution(1), EvalMode.VERIFY, job_id="job-7").result(30)
        assert done.status is EvalStatus.OK
        second = RemoteJudge("cudagym", address=server.address, authkey=server.authkey)
        stolen = second.submit(relu_task(), script("BROKEN"), EvalMode.VERIFY, job_id="job-7").result(30)
        assert stolen.status is EvalStatus.BUILD_FAILED, stolen.message
        ran = len(gpus.candidates())
        resumed = first.submit(relu_task(), solution(1), EvalMode.VERIFY, job_id="job-7").result(30)
        assert resumed.message == "ran job-7" and len(gpus.candidates()) == ran  # the same job still resumes
        first.close()
        second.close()


def _memory_bound_builds(task: Task, sol: Solution, protocol: Protocol) -> BuildResult:
    """A build stage whose compiler runs out of memory under a small ``build_compiler_memory_bytes``."""
    if protocol.extra.get("build_compiler_memory_bytes", 1 << 40) < 1 << 30:
        return BuildResult(BuildStatus.COMPILE_ERROR, sol.format, message="cc1plus: out of memory")
    return BuildResult(BuildStatus.OK, sol.format, artifact_key="k", artifact_path="/built")


def test_a_peers_protocol_record_under_a_presets_id_is_refused(tmp_path):
    """Attack: a peer's protocol record kept the preset's id with a tiny compiler memory cap; the host's build memo
    is keyed by the id, so its failed build was every other peer's verdict for that solution (-1 for good code)."""
    pipeline = Pipeline(LocalBuilds(_memory_bound_builds, tmp_path, workers=1), StubGpus(),
                        BaselineCache(tmp_path / "baselines"))
    starved = DEFAULT_PROTOCOL.with_changes(extra={"build_compiler_memory_bytes": 1 << 20})
    good = solution(3)
    with PipelineJudge("cudagym", pipeline) as judge, JudgeServer(judge) as server:
        attacker = RemoteJudge(starved, address=server.address, authkey=server.authkey)
        refused = attacker.build(relu_task(), good)
        attacker.close()
        victim = RemoteJudge("cudagym", address=server.address, authkey=server.authkey)
        assert victim.build(relu_task(), good).status is BuildStatus.OK
        victim.close()
    assert refused.status is BuildStatus.TOOL_ERROR and "not that protocol" in refused.message


@pytest.mark.parametrize("message", [b"[" * 200_000, json.dumps({"op": "submit", "n": 4, "task": [1]}).encode()],
                         ids=["nested-past-the-stack", "task-is-a-list"])
def test_a_malformed_message_gets_a_reply_not_a_dead_peer_thread(tmp_path, message):
    """Attack: nesting past the stack (``RecursionError``) or a task that is a list (``AttributeError``) escaped the
    server's handler: the peer's thread died without a reply and the client waited for ever."""
    with stub_judge(tmp_path) as judge, JudgeServer(judge) as server:
        conn = Client(server.address, family="AF_UNIX", authkey=server.authkey)
        conn.send_bytes(message)
        assert conn.poll(20), "the server answered"
        assert "error" in json.loads(conn.recv_bytes())
        conn.close()
        client = RemoteJudge(address=server.address, authkey=server.authkey)
        assert client.evaluate(relu_task(), solution()).status is EvalStatus.OK
        client.close()


# ------------------------------------------------------------------------------------------ fixes outside these files


def test_a_failure_under_a_probes_memory_cap_is_not_cached_for_the_preset(tmp_path):
    """A real raw build (NVRTC) under ``cudagym[build_compiler_memory_bytes=50000000]`` fails for want of memory;
    that failure was cached by the unit's key alone, so the same correct solution under the preset was a
    compile error (-1) from the cache."""
    from cudagym.judge.build import build
    from cudagym.solution import get_format
    from cudagym.templates import example_task

    task, good = example_task("test"), Solution("raw", get_format("raw").example_files())
    cache = BuildCache(tmp_path)
    starved = get_protocol("cudagym[build_compiler_memory_bytes=50000000]")
    assert build(task, good, starved, cache).status is BuildStatus.COMPILE_ERROR
    assert build(task, good, DEFAULT_PROTOCOL, cache).status is BuildStatus.OK


def test_a_candidate_is_never_judged_against_baselines_timed_beside_itself(tmp_path):
    """When the clean baseline job ends without times (an infra error, a timeout), the pipeline queued the
    candidate anyway with no cached baselines, so the job timed eager beside the candidate, with no clean time
    to bound it: a candidate that kept the GPU busy was judged 100x eager."""

    class FailingBaselines(TimingGpus):
        def _run(self, spec: JobSpec) -> EvalResult:
            if spec.job_id.startswith("baselines:"):
                return EvalResult(EvalStatus.INFRA_ERROR, "worker lost", hardware=STUB_GPU)
            return super()._run(spec)

    with stub_judge(tmp_path, gpus=FailingBaselines()) as judge:
        result = judge.evaluate(relu_task(), solution())
    assert result.status is not EvalStatus.OK or result.eager.median_us <= CLEAN_US


def test_a_local_journal_replays_a_job_id_only_for_the_same_job(tmp_path):
    """The pipeline answers a known job id from the journal whatever the task, solution, mode or protocol."""
    with stub_judge(tmp_path) as judge:
        judge.journal = Journal(tmp_path / "local.jsonl")
        assert judge.submit(relu_task(), solution(1), EvalMode.VERIFY, job_id="same").result(30).status is EvalStatus.OK
        other = judge.submit(relu_task(), script("BROKEN"), EvalMode.VERIFY, job_id="same").result(30)
    assert other.status is EvalStatus.BUILD_FAILED
