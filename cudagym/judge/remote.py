"""One judge per host, shared by processes: a server on a local socket and a small client.

Async vector envs, trainer rollout workers without a GPU (``CUDA_VISIBLE_DEVICES=""``) and any other process
of the host reach the host's judge through :class:`RemoteJudge` instead of each starting GPU workers. The
process that owns the judge runs a :class:`JudgeServer` (``with serve_judge(): ...`` or ``cudagym judge
serve``); it puts the socket's address and key in ``CUDAGYM_JUDGE_ADDRESS`` / ``CUDAGYM_JUDGE_AUTHKEY`` of
its environment, so processes it starts afterwards find it, and envs made with ``judge="local"`` there use
it instead of a judge of their own.

The wire: the stdlib's :mod:`multiprocessing.connection` over a Unix socket in a folder only this user can
enter, with an HMAC handshake on a random key (a peer without the key is dropped before it sends a byte);
then JSON messages both ways (never pickles: neither side unpickles what a peer sends). Each connection is
one client of the pipeline's fair dispatch with its own cap of queued jobs; when it closes, its jobs that
no GPU has started are cancelled. The key never reaches sandboxed processes: their environment drops
``*AUTH*`` names.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge.interface import EvalMode, Judge
from cudagym.judge.pipeline import PipelineJudge
from cudagym.judge.protocol import PROTOCOLS, Protocol, get_protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, Hardware, from_dict, to_dict
from cudagym.solution import Solution
from cudagym.task import Task, content_hash

log = logging.getLogger(__name__)

ADDRESS_ENV = "CUDAGYM_JUDGE_ADDRESS"
AUTHKEY_ENV = "CUDAGYM_JUDGE_AUTHKEY"
MAX_MESSAGE_BYTES = 256 << 20
WIRE_VERSION = 1


# ----------------------------------------------------------------------------------------------------
# Values on the wire
# ----------------------------------------------------------------------------------------------------

def encode_request(op: str, n: int, **fields: Any) -> bytes:
    """A request message: ``op``, its number ``n`` and JSON fields."""
    return json.dumps({"op": op, "n": n, **fields}).encode()


def task_to_wire(task: Task) -> dict[str, Any]:
    """The task as JSON data."""
    return task.to_dict()


def task_from_wire(data: Mapping[str, Any]) -> Task:
    """A task from JSON data; a ValueError when a field is missing or of the wrong type."""
    fields = {"id": str, "suite": str, "level": int, "name": str, "content_hash": str, "source": str}
    for name, kind in fields.items():
        if not isinstance(data.get(name), kind):
            raise ValueError(f"task field {name!r}: expected {kind.__name__}, got {type(data.get(name)).__name__}")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError("task field 'metadata': expected an object")
    # the hash keys the host's shared baseline cache and journal: it must be the source's, not the peer's word
    try:
        actual = content_hash(data["source"])
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"task field 'source': not Python the judge can parse ({type(exc).__name__})") from None
    if data["content_hash"] != actual:
        raise ValueError(f"task field 'content_hash': {data['content_hash'][:80]!r} is not the hash of its source "
                         f"({actual})")
    return Task(data["id"], data["suite"], data["level"], data["name"], data["source"], data["content_hash"], metadata)


def solution_from_wire(data: Mapping[str, Any]) -> Solution:
    """A solution from JSON data (its format checks the paths)."""
    files = data.get("files")
    if not isinstance(data.get("format"), str) or not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValueError("solution: expected {'format': str, 'files': {path: text}}")
    return Solution(data["format"], files)


def protocol_from_wire(data: Mapping[str, Any]) -> Protocol:
    """A protocol record from JSON data (its own checks run).

    A record under a known protocol's id may differ from it only in its guards (which judge the peer's own
    candidates): the id keys the host's shared build memo and caches, so another record under it would have
    its builds and times served to every peer that asks for the real one.
    """
    if not isinstance(data, dict):
        raise ValueError("protocol: expected an object")
    protocol = from_dict(Protocol, data)
    try:
        named = get_protocol(protocol.id) if protocol.id in PROTOCOLS or protocol.id.endswith("]") else None
    except ConfigError:
        named = None
    if named is not None and (protocol.with_changes(guards=named.guards) != named or protocol.extra != named.extra):
        raise ValueError(f"protocol: a record under the id {protocol.id!r} that is not that protocol; give a "
                         "protocol of your own another id (Protocol.with_changes(id=...))")
    return protocol


# ----------------------------------------------------------------------------------------------------
# The server
# ----------------------------------------------------------------------------------------------------

class JudgeServer:
    """Serves one pipeline judge to the processes of this host over a Unix socket.

    Args:
        judge: The judge to serve (a pipeline judge: ``LocalJudge``, ``RayJudge``); the server does not close it.
    """

    def __init__(self, judge: PipelineJudge) -> None:
        if not isinstance(judge, PipelineJudge):
            raise ConfigError(f"expected a pipeline judge (LocalJudge, RayJudge) to serve, got {type(judge).__name__}")
        self.judge = judge
        self.folder = Path(tempfile.mkdtemp(prefix="cudagym-judge-sock-"))  # mode 0700: only this user enters
        self.address = str(self.folder / "judge.sock")
        self.authkey = secrets.token_bytes(32)
        self._listener = Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        self._closing = threading.Event()
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="cudagym-judge-server", daemon=True)
        self._thread.start()

    @property
    def environment(self) -> dict[str, str]:
        """The variables a client process needs to reach this server."""
        return {ADDRESS_ENV: self.address, AUTHKEY_ENV: self.authkey.hex()}

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn = self._listener.accept()
            except (OSError, EOFError, AuthenticationError) as exc:  # a peer without the key: drop it, go on
                if self._closing.is_set():
                    return
                log.warning("judge server: refused a connection (%s)", exc)
                continue
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="cudagym-judge-peer", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        client = uuid.uuid4().hex
        send_lock = threading.Lock()

        def reply(message: dict[str, Any]) -> None:
            try:
                with send_lock:
                    conn.send_bytes(json.dumps(message).encode())
            except OSError:
                pass  # the peer left; its jobs are cancelled below

        try:
            while not self._closing.is_set():
                try:
                    message = json.loads(conn.recv_bytes(MAX_MESSAGE_BYTES))
                except (EOFError, OSError):
                    return
                except (ValueError, RecursionError) as exc:  # RecursionError: nesting past the stack
                    reply({"n": -1, "error": f"malformed message: {str(exc)[:2000]}"})
                    return
                if isinstance(message, dict) and message.get("op") == "bye":
                    return
                self._handle(message, client, reply)
        finally:
            self.judge.pipeline.cancel(client)
            with self._lock:
                self._connections.discard(conn)
            conn.close()

    def _handle(self, message: Any, client: str, reply: Callable[[dict[str, Any]], None]) -> None:
        n = message.get("n", -1) if isinstance(message, dict) else -1
        try:
            op = message["op"]
            if op == "hello":
                reply({"n": n, "version": WIRE_VERSION, "hardware": to_dict(self.judge.hardware())})
            elif op == "submit":
                self._submit(message, client, n, reply)
            elif op == "build":
                protocol = protocol_from_wire(message["protocol"])
                build = self.judge.pipeline.builds.build(task_from_wire(message["task"]),
                                                         solution_from_wire(message["solution"]), protocol)
                build.add_done_callback(lambda f: reply({"n": n, "build": to_dict(f.result())}))
            elif op == "cancel":
                reply({"n": n, "cancelled": self.judge.pipeline.cancel(client)})
            else:
                reply({"n": n, "error": f"unknown op {op!r}"})
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError, ConfigError) as exc:
            reply({"n": n, "error": f"bad request: {str(exc)[:2000]}"})

    def _submit(self, message: dict[str, Any], client: str, n: int, reply: Callable[[dict[str, Any]], None]) -> None:
        task, solution = task_from_wire(message["task"]), solution_from_wire(message["solution"])
        protocol, mode = protocol_from_wire(message["protocol"]), EvalMode(message["mode"])
        job_id = str(message.get("job_id") or uuid.uuid4().hex)  # a journaled id answers only its own job (pipeline)
        future = self.judge.pipeline.submit(task, solution, mode, protocol, job_id=job_id, client=client,
                                            journal=self.judge.journal)  # waits at this peer's cap: back-pressure
        future.add_done_callback(lambda f: reply({"n": n, "result": to_dict(f.result())}))

    def close(self) -> None:
        """Stop accepting, drop every peer and remove the socket; safe to call twice."""
        if self._closing.is_set():
            return
        self._closing.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            peers = list(self._connections)
        for conn in peers:
            conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> JudgeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def serve_judge(judge: PipelineJudge | None = None, **judge_options: Any) -> Iterator[JudgeServer]:
    """Serve ``judge`` (default: the local judge made from ``judge_options``) to this host's processes.

    While the block runs, ``CUDAGYM_JUDGE_ADDRESS`` and ``CUDAGYM_JUDGE_AUTHKEY`` are set in this process's
    environment, so processes started inside it (async vector envs, trainer workers) use this judge.
    """
    from cudagym.judge.local import LocalJudge

    own = judge is None
    served = judge if judge is not None else LocalJudge(**judge_options)
    server = JudgeServer(served)
    saved = {k: os.environ.get(k) for k in server.environment}
    os.environ.update(server.environment)
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.close()
        if own:
            served.close()


# ----------------------------------------------------------------------------------------------------
# The client
# ----------------------------------------------------------------------------------------------------

class RemoteJudge(Judge):
    """A judge handle on the host's :class:`JudgeServer`; thread-safe, cheap (no workers of its own).

    Args:
        protocol: This handle's protocol (default ``cudagym-v1``).
        address: The server's socket (default ``$CUDAGYM_JUDGE_ADDRESS``).
        authkey: The server's key (default ``$CUDAGYM_JUDGE_AUTHKEY``, hex).

    Raises:
        ConfigError: No address or key, or the server cannot be reached.
    """

    def __init__(self, protocol: str | Protocol | None = None, *, address: str | None = None,
                 authkey: bytes | None = None) -> None:
        self.protocol = get_protocol(protocol)
        self.address = address or os.environ.get(ADDRESS_ENV, "")
        key = authkey if authkey is not None else bytes.fromhex(os.environ.get(AUTHKEY_ENV, ""))
        if not self.address or not key:
            raise ConfigError(f"expected a judge server: set {ADDRESS_ENV} and {AUTHKEY_ENV} (serve_judge() or "
                              "`cudagym judge serve` print them), or pass address= and authkey=")
        try:
            self._conn = Client(self.address, family="AF_UNIX", authkey=key)
        except (OSError, EOFError, AuthenticationError) as exc:
            raise ConfigError(f"cannot reach the judge server at {self.address}: {exc}; is it running, and is "
                              f"{AUTHKEY_ENV} its key?") from exc
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[Future[Any], Callable[[dict[str, Any]], Any]]] = {}
        self._next = 0
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="cudagym-judge-client", daemon=True)
        self._reader.start()
        hello = self._call("hello", lambda m: m).result()
        self._hardware = from_dict(Hardware, hello.get("hardware", {}))

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy in another process opens its own connection (the key comes from that process's environment)
        return (_reconnect, (self.protocol, self.address))

    def _call(self, op: str, decode: Callable[[dict[str, Any]], Any], **fields: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise ConfigError("this RemoteJudge is closed; create a new one")
            n = self._next
            self._next += 1
            self._pending[n] = (future, decode)
            try:
                self._conn.send_bytes(encode_request(op, n, **fields))
            except OSError as exc:
                del self._pending[n]
                future.set_exception(ConfigError(f"lost the judge server at {self.address}: {exc}"))
        return future

    def _read(self) -> None:
        while True:
            try:
                message = json.loads(self._conn.recv_bytes(MAX_MESSAGE_BYTES))
            except (EOFError, OSError, ValueError):
                break
            with self._lock:
                entry = self._pending.pop(message.get("n", -1), None)
            if entry is None:
                continue
            future, decode = entry
            if "error" in message:
                future.set_exception(ConfigError(f"the judge server refused a request: {message['error']}"))
                continue
            try:
                future.set_result(decode(message))
            except Exception as exc:  # a reply this client cannot read
                future.set_exception(ConfigError(f"unreadable reply from the judge server: {exc!r}"))
        self._fail_pending()

    def _fail_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            future.set_exception(ConfigError(f"lost the judge server at {self.address}"))

    def build(self, task: Task, solution: Solution) -> BuildResult:
        """Compile on the host's judge (cached by content)."""
        try:
            return self._call("build", lambda m: from_dict(BuildResult, m["build"]), task=task_to_wire(task),
                              solution={"format": solution.format, "files": dict(solution.files)},
                              protocol=to_dict(self.protocol)).result()
        except ConfigError as exc:
            return BuildResult(BuildStatus.TOOL_ERROR, solution.format, message=str(exc))

    def submit(self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE, *,
               job_id: str | None = None) -> Future[EvalResult]:
        """Send the job to the host's judge; a lost server is an ``INFRA_ERROR`` result."""
        out: Future[EvalResult] = Future()
        try:
            sent = self._call("submit", lambda m: from_dict(EvalResult, m["result"]), task=task_to_wire(task),
                              solution={"format": solution.format, "files": dict(solution.files)},
                              protocol=to_dict(self.protocol), mode=mode.value, job_id=job_id or "")
        except ConfigError as exc:
            out.set_result(EvalResult(EvalStatus.INFRA_ERROR, str(exc), protocol_id=self.protocol.id))
            return out

        def deliver(f: Future[EvalResult]) -> None:
            problem = f.exception()
            out.set_result(f.result() if problem is None else EvalResult(
                EvalStatus.INFRA_ERROR, str(problem), protocol_id=self.protocol.id, hardware=self._hardware))
        sent.add_done_callback(deliver)
        return out

    def cancel_pending(self) -> int:
        """Ask the server to drop this connection's jobs that no GPU has started."""
        with self._lock:
            if not self._pending:
                return 0  # nothing in flight: no round trip (an env calls this on every reset)
        try:
            return int(self._call("cancel", lambda m: m["cancelled"]).result(timeout=60))
        except ConfigError:
            return 0

    def hardware(self) -> Hardware:
        """The server's GPU (asked once, when connecting)."""
        return self._hardware

    def close(self) -> None:
        """Close the connection; the server cancels this client's queued jobs. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._conn.send_bytes(encode_request("bye", -1))  # the server closes its end: the reader ends
            except OSError:
                pass
        self._reader.join(timeout=5)
        self._conn.close()
        self._fail_pending()


def _reconnect(protocol: Protocol, address: str) -> RemoteJudge:
    return RemoteJudge(protocol, address=address)
