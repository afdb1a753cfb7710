"""The trusted process's line to its runner: length-prefixed JSON over a Unix socket, file descriptors beside.

JSON only, both ways in shape, so neither side ever unpickles what the other sent (the job itself travels
from trusted to runner pickled: that direction is the judge's own data). Whatever the runner sends is capped
in size and checked before use; a message that is malformed, late or missing is the runner's failure
(:class:`RunnerLost`), which the trusted side turns into the candidate's verdict.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

MAX_MESSAGE_BYTES = 16 << 20
MAX_INT_DIGITS = 20  # an integer the runner sends: a count or a byte size (2**64 has 20 digits), never more
_HEADER = struct.Struct("!Q")


def _bounded_int(text: str) -> int:
    """An integer of the runner's message; longer than any count or size can be: malformed."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


class RunnerLost(RuntimeError):
    """The runner did not answer properly: it died, hung past its deadline, or sent something malformed."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Channel:
    """One end of the socket pair; ``send``/``receive`` move one JSON object (and maybe descriptors)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        """Wrap an inherited socket descriptor."""
        return cls(socket.socket(fileno=fd))

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        """Send ``message`` as JSON, with ``fds`` attached to its header."""
        self._send_bytes(json.dumps(message).encode(), fds)

    def send_pickle(self, obj: Any) -> None:
        """Send a pickled object (trusted to runner only)."""
        self._send_bytes(b"P" + pickle.dumps(obj))

    def _send_bytes(self, payload: bytes, fds: list[int] | None = None) -> None:
        header = _HEADER.pack(len(payload))
        if fds:
            socket.send_fds(self.sock, [header], fds)
            self.sock.sendall(payload)
        else:
            self.sock.sendall(header + payload)

    def receive(self, timeout_s: float | None = None, *, max_fds: int = 0, max_bytes: int = MAX_MESSAGE_BYTES,
                arrived: Callable[[], None] | None = None) -> tuple[dict[str, Any], list[int]]:
        """The next JSON object and any descriptors that came with it.

        ``max_bytes`` caps this message below :data:`MAX_MESSAGE_BYTES`; ``arrived`` runs once its bytes are in,
        before they are parsed (what must be read of the sender's state as it answered, not a parse later).

        Raises:
            RunnerLost: End of stream, a deadline passed, or the message is not a JSON object within the cap.
        """
        payload, fds = self._receive_bytes(timeout_s, max_fds, min(max_bytes, MAX_MESSAGE_BYTES))
        if arrived is not None:
            arrived()
        try:
            message = json.loads(payload, parse_int=_bounded_int)
        except (ValueError, RecursionError) as exc:  # not JSON, an integer no count needs, or nested past the stack
            _close_all(fds)
            raise RunnerLost(f"the runner sent a message that is not JSON within bounds ({type(exc).__name__}: "
                             f"{str(exc)[:200]})") from None
        if not isinstance(message, dict):
            _close_all(fds)
            raise RunnerLost("the runner sent a message that is not a JSON object")
        return message, fds

    def receive_pickle(self, timeout_s: float | None = None) -> Any:
        """The next pickled object (the runner's side: it comes from the trusted process)."""
        payload, _ = self._receive_bytes(timeout_s, 0)
        if not payload.startswith(b"P"):
            raise RunnerLost("expected a pickled job")
        return pickle.loads(payload[1:])

    def readable(self, timeout_s: float) -> bool:
        """Whether a message (or the end of the stream) arrives within ``timeout_s``."""
        import select

        try:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout_s))
        except (OSError, ValueError):
            return True  # let the receive say what is wrong
        return bool(ready)

    def spin(self, spin_s: float) -> None:
        """Look for a message without sleeping, yielding the core each time, for at most ``spin_s`` seconds.

        For replies due within microseconds (a chained series' words): a receive that sleeps first pays the
        scheduler's wake-up on each of them.
        """
        import os

        end = time.perf_counter() + spin_s
        while not self.readable(0.0) and time.perf_counter() < end:
            os.sched_yield()

    def _receive_bytes(self, timeout_s: float | None, max_fds: int,
                       max_bytes: int = MAX_MESSAGE_BYTES) -> tuple[bytes, list[int]]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fds: list[int] = []
        try:
            self._timeout(deadline)
            data, fds, _, _ = socket.recv_fds(self.sock, _HEADER.size, max(1, max_fds))
            if not data:
                raise RunnerLost("the runner closed its channel (it exited or was killed)")
            header = data + self._exactly(_HEADER.size - len(data), deadline)
            (size,) = _HEADER.unpack(header)
            if size > max_bytes:
                raise RunnerLost(f"the runner sent a message of {size} bytes (the cap is {max_bytes})")
            if len(fds) > max_fds:
                raise RunnerLost("the runner sent file descriptors it was not asked for")
            return self._exactly(size, deadline), list(fds)
        except BaseException as exc:
            _close_all(fds)  # a descriptor the runner slipped in would pin what it names (a memfd) in this process
            if isinstance(exc, TimeoutError):
                raise RunnerLost("the runner did not answer in time", timed_out=True) from None
            if isinstance(exc, OSError):
                raise RunnerLost(f"the runner's channel failed: {exc}") from None
            raise

    def _exactly(self, n: int, deadline: float | None) -> bytes:
        chunks, got = [], 0
        while got < n:
            self._timeout(deadline)
            chunk = self.sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise RunnerLost("the runner closed its channel mid-message")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _timeout(self, deadline: float | None) -> None:
        if deadline is None:
            self.sock.settimeout(None)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)

    def close(self) -> None:
        """Close the socket."""
        try:
            self.sock.close()
        except OSError:
            pass
