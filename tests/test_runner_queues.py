"""``Protocol.runner_queues``: the candidate's CUDA context is made with that many hardware work queues.

On the GPU a second stream of the runner's context waiting behind the judge's go doubled the judge's staging
(``L2/19``'s false ``unverifiable_timing``); one queue for all the runner's streams removed it (session 46, H100).
Here, on the CPU path through the real worker pool and its sandboxed runners: every runner a job gets, spare or
new, was started with the setting its protocol asks for, and no other.
"""

from __future__ import annotations

import textwrap

import pytest
from split_pools import cpu_split_pool

from cudagym.errors import ConfigError
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0, DEFAULT_PROTOCOL, get_protocol, runner_queues
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return []
'''

# What the candidate's own process was started with, in its output (the job's log keeps it).
SAYS_ITS_QUEUES = '''
import os
import torch
import torch.nn as nn

print("runner queues:", os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "unset"), flush=True)

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''

pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


def judge(pool: WorkerPool, queues: int, job_id: str) -> EvalResult:
    proto = CUDAGYM_V0.with_changes(id=f"test-runner-queues-{queues}", guards=(), num_inputs=1, warmup_runs=1,
                                    warmup_ms=0.0, min_runs=3, max_runs=3, target_ci_pct=0.0, runner_queues=queues)
    job = Job(job_id=job_id, task=make_task(TASK, id="test/runner-queues", suite="test", level=1, name="rq",
                                            origin="test"),
              solution=Solution("inline", {"model_new.py": textwrap.dedent(SAYS_ITS_QUEUES)}),
              build=BuildResult(BuildStatus.OK, "inline"), mode=EvalMode.PROFILE, protocol=proto,
              baselines=KnownBaselines())
    return pool.submit(job).result(timeout=300)


def test_each_jobs_runner_has_the_queues_its_protocol_asks_for_spare_or_new(pool: WorkerPool) -> None:
    # the pool keeps a spare runner started ahead of the jobs: one of the wrong kind must not serve the next job
    for job_id, queues, said in (("plain", 0, "unset"), ("one", 1, "1"), ("one-again", 1, "1"),
                                 ("four", 4, "4"), ("plain-again", 0, "unset")):
        result = judge(pool, queues, job_id)
        assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
        assert f"runner queues: {said}\n" in result.log, (job_id, result.log[-2000:])
        assert result.log.count("runner queues:") == 1, result.log[-2000:]  # one process loaded the candidate


def test_the_setting_is_off_in_the_default_keys_the_baselines_and_is_checked() -> None:
    assert runner_queues(DEFAULT_PROTOCOL) == 0
    one = DEFAULT_PROTOCOL.with_changes(runner_queues=1)
    assert one.timing_key != DEFAULT_PROTOCOL.timing_key  # the cached yardstick was timed in such a runner
    assert DEFAULT_PROTOCOL.with_changes(runner_queues=0).timing_key == DEFAULT_PROTOCOL.timing_key
    probe = get_protocol("cudagym[runner_queues=1]")
    assert runner_queues(probe) == 1 and probe.id.endswith("[runner_queues=1]")
    with pytest.raises(ConfigError, match=r"runner_queues.*\[0, 32\], got 33"):
        get_protocol("cudagym[runner_queues=33]")
    with pytest.raises(ConfigError, match=r"runner_queues.*got -1"):
        DEFAULT_PROTOCOL.with_changes(runner_queues=-1)
