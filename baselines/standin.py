"""A stand-in chat-completions endpoint on loopback, for testing chat agents without a model.

:class:`ChatStandIn` serves ``POST /v1/chat/completions`` on ``127.0.0.1`` and answers each request from
a reply function (request body -> :class:`Reply`: a status, a JSON body, a delay). It is bounded: it
stops by itself after ``lifetime_s`` seconds or ``max_requests`` requests, whichever comes first, and its
threads are daemons, so a forgotten server never outlives the process or hangs a test run.

:func:`solution_replies` is the reply function of a model that knows the answer: it sends the files of a
solution with ``write_file`` tool calls, then ``compile``, ``verify``, ``profile`` and ``submit``, as an
LLM would send them (native tool calls, or ``<tool_call>`` text), choosing the next call from how many
assistant turns the conversation already holds.

Example:
    >>> from cudagym.baselines.standin import ChatStandIn, solution_replies
    >>> with ChatStandIn(solution_replies({"model_new.py": "..."})) as server:  # doctest: +SKIP
    ...     agent = ChatAgent(base_url=server.url, model="stand-in")
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from cudagym.baselines.scripted import JUDGE_STEPS

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 20


@dataclass(frozen=True)
class Reply:
    """What the stand-in answers to one request.

    Attributes:
        body: A JSON-serialisable body, or raw text sent as is.
        status: HTTP status.
        delay_s: Seconds to wait before answering (a slow model).
        headers: Extra response headers (e.g. ``Retry-After``).
    """

    body: Mapping[str, Any] | str
    status: int = 200
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)


def completion(message: Mapping[str, Any], *, prompt_tokens: int = 0, completion_tokens: int = 0,
               finish_reason: str = "stop") -> dict[str, Any]:
    """A chat-completions response body holding one choice with ``message``."""
    return {
        "id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()), "model": "stand-in",
        "choices": [{"index": 0, "message": dict(message), "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def tool_call_message(name: str, arguments: Mapping[str, Any], call_id: str) -> dict[str, Any]:
    """An assistant message with one native tool call (arguments as a JSON string, as OpenAI sends them)."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def text_message(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant message that reasons in a line of text, then makes the call in ``<tool_call>`` tags."""
    call = json.dumps({"name": name, "arguments": dict(arguments)})
    return {"role": "assistant", "content": f"Next I call {name}.\n<tool_call>{call}</tool_call>"}


def solution_replies(
    files: Mapping[str, str],
    *,
    steps: Sequence[str] = JUDGE_STEPS,
    form: Literal["native", "text"] = "native",
) -> Callable[[Mapping[str, Any]], Reply]:
    """A reply function that sends ``files`` with ``write_file``, then the ``steps`` (then ``submit`` forever).

    In ``native`` form it answers with tool calls when the request offers ``tools`` and falls back to text
    when it does not, as a model served without a tool parser would.
    """
    plan = [("write_file", {"path": p, "content": t}) for p, t in sorted(files.items())]
    plan += [(name, {}) for name in steps]

    def reply(request: Mapping[str, Any]) -> Reply:
        messages = request.get("messages") or []
        done = sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant")
        name, arguments = plan[done] if done < len(plan) else ("submit", {})
        prompt = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, Mapping)) // 4
        if form == "native" and request.get("tools"):
            message = tool_call_message(name, arguments, f"call_{done}")
        else:
            message = text_message(name, arguments)
        size = len(json.dumps(message)) // 4
        return Reply(completion(message, prompt_tokens=prompt, completion_tokens=size,
                                finish_reason="tool_calls" if "tool_calls" in message else "stop"))

    return reply


class ChatStandIn:
    """A bounded chat-completions server on loopback that answers from a reply function.

    Attributes:
        requests: Every request body received, in order.
        headers: The headers of each request, in the same order (names lower-cased).
    """

    def __init__(
        self,
        reply: Callable[[Mapping[str, Any]], Reply],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lifetime_s: float = 120.0,
        max_requests: int = 10_000,
    ) -> None:
        """Build (not yet start) the server.

        Args:
            reply: Request body -> :class:`Reply`; an exception becomes a 500 with its message.
            host: Interface to bind (loopback by default).
            port: Port (0: any free one; :attr:`url` says which).
            lifetime_s: The server stops by itself this many seconds after :meth:`start`.
            max_requests: ... or after answering this many requests.
        """
        self._reply = reply
        self.lifetime_s = lifetime_s
        self.max_requests = max_requests
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        """The API root to hand a client, ``http://127.0.0.1:<port>/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ChatStandIn:
        """Serve on a daemon thread until :meth:`stop`, the lifetime or the request cap."""
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="cudagym-standin", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice and from any thread."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._server.shutdown()
        self._server.server_close()

    @property
    def stopped(self) -> bool:
        """True once the server stopped (asked to, or by its lifetime or request cap)."""
        return self._stopped.is_set()

    def __enter__(self) -> ChatStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def answer(self, body: dict[str, Any], headers: Mapping[str, str]) -> Reply:
        """The reply to one request (called by the handler threads)."""
        with self._lock:
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in headers.items()})
            count = len(self.requests)
        if count > self.max_requests:
            threading.Thread(target=self.stop, daemon=True).start()
            return Reply({"error": {"message": "stand-in request cap reached"}}, status=503)
        try:
            return self._reply(body)
        except Exception as exc:  # a reply function's bug is the test's to see, as a 500
            logger.exception("stand-in reply function failed")
            return Reply({"error": {"message": f"{type(exc).__name__}: {exc}"}}, status=500)


def _handler_for(server: ChatStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True  # the body is left unread: this connection cannot be reused
                self._send(Reply({"error": {"message": "request too large"}}, status=413))
                return
            raw = self.rfile.read(length)  # read before any answer, so a kept-alive connection stays in step
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(Reply({"error": {"message": f"no route {self.path}"}}, status=404))
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError as exc:
                self._send(Reply({"error": {"message": f"bad JSON: {exc}"}}, status=400))
                return
            reply = server.answer(body if isinstance(body, dict) else {}, dict(self.headers.items()))
            if reply.delay_s > 0:
                # a slow model; never past the server's own lifetime
                server._stopped.wait(min(reply.delay_s, server.lifetime_s))
            self._send(reply)

        def _send(self, reply: Reply) -> None:
            data = (reply.body if isinstance(reply.body, str) else json.dumps(reply.body)).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout)
                pass

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            logger.debug("stand-in: " + format, *args)

    return Handler
