"""The trusted clock on the GPU: stream-ordered signals the trusted process and its runner share.

A runner's timing claim is its own CUDA events around the candidate's call, in a process the candidate
controls: it can say anything. What the trusted process can know is when, on the GPU's own timeline, the
runner's work for one timed call began and when its outputs were in place. One timed call, bracketed::

    trusted stream:  wait ARMED >= n | A | inputs into the arena, words reset, L2 flush | GO := n
                     | wait DONE >= n | B | copy the outputs out of the heap, from where the words say
    runner stream:   wait GO >= n | start | forward | end | a word per output: where it lies | DONE := n
    runner, beside:  ARMED := n once the whole call is queued (the GPU never waits for its host inside [A, B])

The heap is memory the trusted process allocated and shares with the runner, whose allocations lie there while it
answers (:mod:`cudagym.judge.split.heap`): the outputs are read where the forward made them, so no copy of the
runner's is in the call's time or in an empty call's (with ``extra["delivery"] = "copy"``, a probe's comparison,
the runner copies them into the output arena instead, and the trusted stream copies them out of that).

``A`` and ``B`` are the trusted process's own timing events. The runner cannot start before ``GO`` (its
inputs are not in the arena before it), and whatever it leaves unfinished when the trusted stream copies
the outputs out, right after ``B``, is missing from what the judge compares. Two contexts share a GPU by
time slices and never run at once, so the runner's GPU work for the call lies between ``A`` and the
copy-out: ``B - A`` bounds it from above, whatever the runner reports or when it writes its words. A runner
that never writes them only delays ``B`` (the trusted side writes them itself after the reply), which can
only count against it.

A series of ``K`` calls back to back (``RemoteModel.series``) is one bracket whose calls are chained, rounds
``n .. n+K-1``: call ``k`` waits for ``GO >= n+k`` and signals ``DONE := n+k``; between the two the trusted stream
copies call ``k``'s outputs and its copy of the inputs out, then places call ``k+1``'s inputs::

    trusted stream:  wait ARMED >= n+K-1 | A | set 0 in, outputs poisoned, L2 flush | GO := n
                     | wait DONE >= n | call 0's outputs and inputs copied out | set 1 in | GO := n+1 | ...
                     | wait DONE >= n+K-1 | B | call K-1's copied out

So no call's input set is in the runner's view before the call ahead of it delivered its outputs: a forward can
neither read the later sets ahead and answer them in one batch, nor keep its inputs and answer later.

An audited forward (a correctness check, ``RemoteModel.__call__``) is gated the same way, so that a forward cannot
tell it from a timed call by its caller's stream being idle: the runner queues a wait for ``GATE >= g`` on the call's
stream, and opens the gate once the forward has returned and the side-stream check has queued its reads behind it
(or once it raised). Under a launch cover the wait is the cover's own spin, which goes on until the gate is open
(``LaunchCover.launch_gated``): it holds every SM, so work the forward sends to another stream cannot run, and be
done, before the forward's checks (a wait in the stream's front end holds none). Every audited forward but the
candidate's first, which loads its kernels with nothing waiting (a lazy module load waits for the context)::

    runner stream:   launch cover, on until GATE >= g | the forward's work | the guards' checks of its outputs
    runner, beside:  GATE := g once the forward returned and the checks' reads are queued (the host-side call behind
                     a busy stream)

The trusted side opens it too, on a stream of its own that waits for nothing: after the arm wait where the runner
has not (its forward waits for the GPU inside), and after the reply in every case.

The words are 32-bit counters in a small arena both map (:mod:`cudagym.judge.split.arena`); the waits and
writes are CUDA stream memory operations (``cuStreamWaitValue32`` with ``CU_STREAM_WAIT_VALUE_GEQ``,
``cuStreamWriteValue32``), which wait in the GPU's front end without occupying an SM.
"""

from __future__ import annotations

# The host path (no GPU clock) chains a series' calls over the channel: the runner's word after each call, and
# the trusted side's go for the next one, sent once that call's results are copied out and the next inputs placed.
CALL_DONE, CALL_GO = "series_call_done", "series_go"
CALL_SPIN_S = 0.0005  # each side looks for the other's word this long without sleeping (Channel.spin) before it waits

GO, DONE, ARMED, GATE = 0, 256, 512, 768  # byte offsets of the four words (a line apart)
# then, from byte 1024, one word per output of each call saying where it lies in the shared heap
# (cudagym.judge.split.heap: 64 calls of 256 outputs)
SIGNAL_BYTES = 1024 + 64 * 256 * 4


def write_value(stream: int, address: int, value: int) -> None:
    """Queue ``*address = value`` (32 bits) on ``stream`` (a ``CUstream`` handle)."""
    from cudagym.cuda_driver import stream_write_value32

    stream_write_value32(stream, address, value & 0xFFFFFFFF)


def wait_value(stream: int, address: int, value: int) -> None:
    """Queue a wait on ``stream`` until ``*address >= value`` (32 bits, compared cyclically)."""
    from cudagym.cuda_driver import stream_wait_value32

    stream_wait_value32(stream, address, value & 0xFFFFFFFF)
