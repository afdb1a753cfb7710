"""The trusted process's job function: judge one job whose candidate runs in the job's runner."""

from __future__ import annotations

import dataclasses
import time

from cudagym.judge.job import Job
from cudagym.judge.records import EvalResult
from cudagym.judge.split import RunnerHandoff
from cudagym.judge.split.channel import Channel
from cudagym.judge.split.remote import RunnerLink
from cudagym.judge.split.trace import trace


def run_job(job: Job, runner: RunnerHandoff | None = None) -> EvalResult:
    """Evaluate ``job`` on this process's current CUDA device, the candidate in ``runner``.

    Without a runner (a pool configured without the split) the candidate runs in this process, as the
    harness's :func:`~cudagym.judge.harness.run_job` does.
    """
    return _run(job, runner, None)


def run_job_on_cpu(job: Job, runner: RunnerHandoff | None = None) -> EvalResult:
    """:func:`run_job` on the CPU (the test path: host arenas instead of device memory).

    One torch thread, here and in the runner: on a small host the thread pools' spinning would otherwise
    land in the other process's timed requests.
    """
    import torch

    torch.set_num_threads(1)
    return _run(job, runner, "cpu")


def _run(job: Job, runner: RunnerHandoff | None, device: str | None) -> EvalResult:
    from cudagym.judge.harness.runner import evaluate

    if runner is None:
        return evaluate(job, device)
    link = RunnerLink(Channel.from_fd(runner.fd), time.monotonic() + job.protocol.eval_timeout_s)
    link.on_candidate = runner.on_candidate
    trace("job", task=job.task.id, job_id=job.job_id, mode=job.mode.value, protocol=job.protocol.id)
    try:
        result = evaluate(job, device, runner=link, runner_job=runner.job)
        trace("verdict", task=job.task.id, job_id=job.job_id, status=result.status.value,
              message=result.message[:300])
    finally:
        try:  # the verdict is made: nothing the runner says while it ends can replace it
            files, network = link.end()
        except Exception:
            files, network = [], []
    from cudagym.judge.worker import _with_escapes

    result = _with_escapes(result, job, files, network)
    notes = [n for n in link.notes if n not in result.log]
    log = "\n".join([result.log, "verdict: made by the trusted process; the candidate ran in a fresh runner",
                     *notes[-20:]]).strip()
    return dataclasses.replace(result, log=log)
