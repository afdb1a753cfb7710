"""One judge per host: the local-socket server and its client, judge_options sharing, and vector envs
(threaded by default, async sub-processes inside serve_judge) on one judge."""

from __future__ import annotations

import json
import os
import time
from multiprocessing.connection import Client

import gymnasium as gym
import pytest
from conftest_env import TOKENIZER, small_kernelbench
from faults import relu_task, script
from judge_stubs import STUB_GPU, StubGpus, stub_judge

from cudagym.errors import ConfigError
from cudagym.judge import backends
from cudagym.judge.interface import EvalMode
from cudagym.judge.pipeline import CANCELLED_MESSAGE
from cudagym.judge.records import EvalStatus
from cudagym.judge.remote import ADDRESS_ENV, AUTHKEY_ENV, JudgeServer, RemoteJudge, serve_judge


def solution(i: int = 0):
    return script(f"def run():\n    return {i}\n")


def test_a_client_submits_builds_and_reads_the_hardware_of_the_hosts_judge(tmp_path):
    with stub_judge(tmp_path) as judge, JudgeServer(judge) as server:
        client = RemoteJudge("cudagym", address=server.address, authkey=server.authkey)
        assert client.hardware() == STUB_GPU and client.has_gpu
        result = client.submit(relu_task(), solution(), EvalMode.VERIFY, job_id="remote-1").result(timeout=30)
        assert result.status is EvalStatus.OK and result.message == "ran remote-1"
        assert client.build(relu_task(), script("BROKEN")).message == "BROKEN"
        assert client.evaluate(relu_task(), solution(2)).eager.median_us == 100.0  # baselines on the host
        client.close()
        client.close()


def test_a_peer_without_the_key_is_refused_and_the_server_serves_on(tmp_path):
    with stub_judge(tmp_path) as judge, JudgeServer(judge) as server:
        with pytest.raises(Exception):  # noqa: B017 - the stdlib's handshake raises AuthenticationError
            Client(server.address, family="AF_UNIX", authkey=b"wrong key")
        with pytest.raises(ConfigError, match="cannot reach"):
            RemoteJudge(address=server.address, authkey=b"also wrong")
        client = RemoteJudge(address=server.address, authkey=server.authkey)
        assert client.evaluate(relu_task(), solution()).status is EvalStatus.OK
        client.close()


def test_malformed_requests_get_an_error_reply_not_a_crash(tmp_path):
    with stub_judge(tmp_path) as judge, JudgeServer(judge) as server:
        conn = Client(server.address, family="AF_UNIX", authkey=server.authkey)
        conn.send_bytes(json.dumps({"op": "submit", "n": 7, "task": {"id": 3}}).encode())
        reply = json.loads(conn.recv_bytes())
        assert reply["n"] == 7 and "bad request" in reply["error"]
        conn.send_bytes(json.dumps({"op": "nope", "n": 8}).encode())
        assert "unknown op" in json.loads(conn.recv_bytes())["error"]
        conn.close()


def test_a_client_that_leaves_has_its_queued_jobs_cancelled(tmp_path):
    gpus = StubGpus(slots=1, hold=True)
    with stub_judge(tmp_path, gpus=gpus) as judge, JudgeServer(judge) as server:
        first = judge.submit(relu_task(), solution(0), job_id="host-0")
        time.sleep(0.3)
        client = RemoteJudge(address=server.address, authkey=server.authkey)
        queued = [client.submit(relu_task(), solution(i), job_id=f"peer-{i}") for i in range(1, 3)]
        time.sleep(0.5)
        assert client.cancel_pending() == 2
        assert all(f.result(timeout=10).message == CANCELLED_MESSAGE for f in queued)
        gone = client.submit(relu_task(), solution(5), job_id="peer-5")
        time.sleep(0.3)
        client.close()  # the server cancels what it still held for this peer
        assert gone.result(timeout=10).status is EvalStatus.INFRA_ERROR
        gpus.gate.set()
        assert first.result(timeout=30).status is EvalStatus.OK
    assert not {"peer-1", "peer-2", "peer-5"} & set(gpus.candidates())


def test_serve_judge_sets_the_environment_and_local_then_means_the_server(tmp_path):
    judge = stub_judge(tmp_path)
    with serve_judge(judge) as server:
        assert os.environ[ADDRESS_ENV] == server.address and os.environ[AUTHKEY_ENV] == server.authkey.hex()
        handle = backends.local(judge.protocol)
        assert isinstance(handle, RemoteJudge)
        assert handle.evaluate(relu_task(), solution()).hardware == STUB_GPU
        handle.close()
    assert ADDRESS_ENV not in os.environ
    judge.close()


def test_equal_judge_options_share_one_pipeline_and_other_options_get_their_own(tmp_path):
    made = []

    def make(**options):
        made.append(options)
        return stub_judge(tmp_path).pipeline

    first = backends.shared_judge("stub", judge_protocol(), {"devices": "0", "journal": str(tmp_path / "a")}, make)
    second = backends.shared_judge("stub", judge_protocol(), {"devices": "0"}, make)
    third = backends.shared_judge("stub", judge_protocol(), {"devices": "1"}, make)
    assert first.pipeline is second.pipeline and third.pipeline is not first.pipeline
    assert made == [{"devices": "0"}, {"devices": "1"}] and first.journal is not None and second.journal is None
    for handle in (first, second, third):
        handle.close()
    with pytest.raises(ConfigError, match="plain data"):
        backends.shared_judge("stub", judge_protocol(), {"build_fn": print}, make)


def judge_protocol():
    from cudagym.judge.protocol import get_protocol

    return get_protocol("cudagym")


# ------------------------------------------------------------------------------------------ vector envs


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return small_kernelbench(tmp_path_factory.mktemp("kb"))


WRITE = '{"name": "write_file", "arguments": {"path": "model_new.py", "content": "x = 1\\n"}}'


def test_make_vec_without_a_mode_steps_sub_envs_on_threads_with_one_judge(tree, tmp_path):
    gpus = StubGpus(devices=4, job_s=0.2)
    judge = stub_judge(tmp_path, gpus=gpus)
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=4, judge=judge, token_counter=TOKENIZER,
                        suite_options={"root": str(tree)})
    assert venv.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
    obs, info = venv.reset(seed=0)
    assert len(obs) == 4 and all(o.startswith("# Task:") for o in obs)
    venv.step([WRITE] * 4)
    venv.step(['{"name": "verify"}'] + ['{"name": "list_files"}'] * 3)  # the task's baselines get cached
    gpus.together, gpus.most_running = 3, 0  # each job of the next step waits until all three run
    obs, reward, terminated, truncated, info = venv.step(['{"name": "verify"}'] * 2 + ['{"name": "list_files"}',
                                                                                      '{"name": "submit"}'])
    assert gpus.most_running == 3  # the three GPU jobs ran at once, not one after another
    assert list(terminated) == [False, False, False, True]
    assert "_episode_end" in info and list(info["_episode_end"]) == [False, False, False, True]
    obs, *_ , info = venv.step(['{"name": "list_files"}'] * 4)
    assert list(info["turn"]) == [4, 4, 4, 0]  # NEXT_STEP: the ended sub-env was reset, its action ignored
    venv.close()
    judge.close()


def test_async_sub_processes_inside_serve_judge_use_the_parents_judge(tree, tmp_path):
    gpus = StubGpus()
    judge = stub_judge(tmp_path, gpus=gpus)
    with serve_judge(judge):
        venv = gym.make_vec("CudaKernel-L1-v0", num_envs=2, vectorization_mode="async", token_counter=TOKENIZER,
                            suite_options={"root": str(tree)}, vector_kwargs={"shared_memory": False,
                                                                              "context": "spawn"})
        obs, info = venv.reset(seed=0)
        assert all(STUB_GPU.gpu in o for o in obs)  # the prompt names the server's GPU
        venv.step([WRITE, WRITE])
        obs, reward, terminated, truncated, info = venv.step(['{"name": "submit"}'] * 2)
        venv.close()
    judge.close()
    assert list(terminated) == [True, True] and len(gpus.candidates()) == 2


def test_cudagym_judge_serve_prints_the_variables_a_client_connects_with(capsys, tmp_path):
    import argparse
    import threading

    from cudagym.commands import judge as command

    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(["serve", "--devices", "none", "--cache-dir", str(tmp_path)])
    stop = threading.Event()
    thread = threading.Thread(target=command.run, args=(args, stop))
    thread.start()
    deadline = time.monotonic() + 60
    out = ""
    while ADDRESS_ENV not in out and time.monotonic() < deadline:
        time.sleep(0.2)
        out += capsys.readouterr().out
    exports = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines() if line.startswith("export"))
    client = RemoteJudge(address=exports[ADDRESS_ENV], authkey=bytes.fromhex(exports[AUTHKEY_ENV]))
    assert not client.has_gpu
    assert client.evaluate(relu_task(), script("BROKEN")).status in (EvalStatus.BUILD_FAILED, EvalStatus.NO_GPU)
    client.close()
    stop.set()
    thread.join(timeout=60)
    assert not thread.is_alive()
