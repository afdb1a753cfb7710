"""The trusted clock on the GPU: stream-ordered signals the trusted process and its runner share.

A runner's timing claim is its own CUDA events around the candidate's call, in a process the candidate
controls: it can say anything. What the trusted process can know is when, on the GPU's own timeline, the
runner's work for one timed call began and when its outputs were in place. One timed call, bracketed::

    trusted stream:  wait ARMED >= n | A | inputs into the arena, outputs poisoned, L2 flush | GO := n
                     | wait DONE >= n | B | copy the outputs out (what the judge compares)
    runner stream:   wait GO >= n | start | forward | end | outputs into the arena | DONE := n
    runner, beside:  ARMED := n once the whole call is queued (the GPU never waits for its host inside [A, B])

``A`` and ``B`` are the trusted process's own timing events. The runner cannot start before ``GO`` (its
inputs are not in the arena before it), and whatever it leaves unfinished when the trusted stream copies
the outputs out, right after ``B``, is missing from what the judge compares. Two contexts share a GPU by
time slices and never run at once, so the runner's GPU work for the call lies between ``A`` and the
copy-out: ``B - A`` bounds it from above, whatever the runner reports or when it writes its words. A runner
that never writes them only delays ``B`` (the trusted side writes them itself after the reply), which can
only count against it.

The words are 32-bit counters in a small arena both map (:mod:`cudagym.judge.split.arena`); the waits and
writes are CUDA stream memory operations (``cuStreamWaitValue32`` with ``CU_STREAM_WAIT_VALUE_GEQ``,
``cuStreamWriteValue32``), which wait in the GPU's front end without occupying an SM.
"""

from __future__ import annotations

GO, DONE, ARMED = 0, 256, 512  # byte offsets of the three words (a line apart)
SIGNAL_BYTES = 1024


def write_value(stream: int, address: int, value: int) -> None:
    """Queue ``*address = value`` (32 bits) on ``stream`` (a ``CUstream`` handle)."""
    from cudagym.cuda_driver import stream_write_value32

    stream_write_value32(stream, address, value & 0xFFFFFFFF)


def wait_value(stream: int, address: int, value: int) -> None:
    """Queue a wait on ``stream`` until ``*address >= value`` (32 bits, compared cyclically)."""
    from cudagym.cuda_driver import stream_wait_value32

    stream_wait_value32(stream, address, value & 0xFFFFFFFF)
