"""The trusted side's reading of what a runner sends: JSON within bounds, or the runner's failure (RunnerLost)."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator

import pytest

from cudagym.judge.split.channel import MAX_INT_DIGITS, Channel, RunnerLost


@pytest.fixture
def ends() -> Iterator[tuple[Channel, socket.socket]]:
    """The trusted side's channel and the raw socket a runner would write to."""
    trusted, runner = socket.socketpair()
    yield Channel(trusted), runner
    trusted.close()
    runner.close()


def _frame(raw: socket.socket, payload: bytes) -> None:
    raw.sendall(struct.pack("!Q", len(payload)) + payload)


def test_a_message_within_bounds_arrives_whole(ends: tuple[Channel, socket.socket]) -> None:
    channel, raw = ends
    big = 10 ** (MAX_INT_DIGITS - 1)
    _frame(raw, b'{"kind": "timed", "peak_bytes": %d, "time_us": 1e400, "rows": [[1, -2]]}' % big)
    message, fds = channel.receive(5.0)
    assert message["peak_bytes"] == big and message["rows"] == [[1, -2]] and fds == []
    assert message["time_us"] == float("inf")  # a float beyond range is inf: the readers check finiteness


@pytest.mark.parametrize("payload", [b'{"peak_bytes": 1%s}' % (b"0" * 400), b'{"n": -1%s}' % (b"0" * 30)])
def test_an_integer_longer_than_any_count_is_the_runners_failure(ends: tuple[Channel, socket.socket],
                                                                  payload: bytes) -> None:
    channel, raw = ends
    _frame(raw, payload)
    with pytest.raises(RunnerLost, match="not JSON within bounds"):
        channel.receive(5.0)


def test_nesting_past_the_stack_is_the_runners_failure(ends: tuple[Channel, socket.socket]) -> None:
    channel, raw = ends
    _frame(raw, b"[" * 200_000)
    with pytest.raises(RunnerLost, match="RecursionError"):
        channel.receive(5.0)


def test_a_message_that_is_not_an_object_is_the_runners_failure(ends: tuple[Channel, socket.socket]) -> None:
    channel, raw = ends
    _frame(raw, b"[1, 2]")
    with pytest.raises(RunnerLost, match="not a JSON object"):
        channel.receive(5.0)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_descriptors_the_runner_was_not_asked_for_are_closed_not_kept(ends: tuple[Channel, socket.socket]) -> None:
    channel, raw = ends
    leak = os.memfd_create("cudagym-test-leak")  # what a runner would pin in the trusted process: a memfd
    os.ftruncate(leak, 1 << 20)
    before = _open_fds()
    payload = b'{"kind": "ended"}'
    socket.send_fds(raw, [struct.pack("!Q", len(payload))], [leak, leak])
    raw.sendall(payload)
    with pytest.raises(RunnerLost, match="file descriptors it was not asked for"):
        channel.receive(5.0)
    assert _open_fds() == before  # the two received copies are closed again
    os.close(leak)


def test_descriptors_beside_a_malformed_message_are_closed(ends: tuple[Channel, socket.socket]) -> None:
    channel, raw = ends
    leak = os.memfd_create("cudagym-test-leak")
    before = _open_fds()
    payload = b"[not json"
    socket.send_fds(raw, [struct.pack("!Q", len(payload))], [leak])
    raw.sendall(payload)
    with pytest.raises(RunnerLost):
        channel.receive(5.0, max_fds=1)
    assert _open_fds() == before
    os.close(leak)
