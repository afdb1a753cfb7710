"""Token counting for episode budgets, with a tokenizer cudagym ships so that counts are the same everywhere.

:func:`get_token_counter` turns what the user passes (nothing, a name, a ``tiktoken.Encoding``, a Hugging
Face tokenizer, or a callable) into a :class:`TokenCounter` whose ``name`` says which tokenizer counts
(the env reports it as ``info["token_counter"]``).

The default is ``cudagym:code-bpe-16k``, a byte-level BPE trained on CUDA, C++, Python and English that
ships in the package (``cudagym/data/README.md``): no network, no cache, and so the same counts, and the same
truncation point of an episode, on every host. Other tokenizers are used only when asked for by name or
object. tiktoken's public encodings (``"o200k_base"``, ``"cl100k_base"``, ...) load without ever hanging:
from tiktoken's on-disk cache when the file is there (no network touched); otherwise downloaded only when
the network is allowed (neither ``CUDAGYM_OFFLINE`` nor ``HF_HUB_OFFLINE`` is set) and within
``CUDAGYM_TOKENIZER_TIMEOUT_S`` seconds (default 10; tiktoken's own download has no timeout, so it runs in
a daemon thread); a named encoding that cannot load is an error saying how to provide it, never a silent
switch to another tokenizer. Text is never estimated from its character count.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.resources
import inspect
import logging
import os
import socket
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cudagym.bpe import CODE_SPLIT_PATTERN
from cudagym.errors import ConfigError, DataUnavailableError

if TYPE_CHECKING:
    import tiktoken

log = logging.getLogger(__name__)

SHIPPED_NAME = "cudagym:code-bpe-16k"
DEFAULT_TOKENIZER = SHIPPED_NAME
SHIPPED_RESOURCE = "data/cudagym_code_bpe.tiktoken"
# sha256 of the shipped file: tiktoken checks it (and any cached copy of it) on load
SHIPPED_SHA256 = "e5b75ce12d946338a5ce48e42178c9997a73bd0343e8b5b4060d77fe2b9f77a1"
OFFLINE_ENV_VARS = ("CUDAGYM_OFFLINE", "HF_HUB_OFFLINE")
TIMEOUT_ENV_VAR = "CUDAGYM_TOKENIZER_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0
_PROBE_TIMEOUT_S = 3.0

TokenizerSpec = Any
"""None, a name, a ``tiktoken.Encoding``, an object with ``.encode(str) -> list``, a callable, or a TokenCounter."""

_ACCEPTED = (
    "None (default: the shipped {shipped}, the same on every host), a name ({names}, {shipped}), "
    "a tiktoken.Encoding, a Hugging Face tokenizer (an object whose .encode(str) returns a list of ids), "
    "a callable str -> int or str -> sequence of ids, or a TokenCounter"
)


@dataclass(frozen=True)
class _Blob:
    """Where tiktoken downloads an encoding's rank file from, and the file's pinned sha256."""

    url: str
    sha256: str


_O200K = _Blob(
    "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
)
_CL100K = _Blob(
    "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
)
_P50K = _Blob(
    "https://openaipublic.blob.core.windows.net/encodings/p50k_base.tiktoken",
    "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
)
_R50K = _Blob(
    "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
)
# tiktoken's public encodings that load from one rank file (as in tiktoken_ext/openai_public.py; a test
# checks these against the installed tiktoken)
_BLOBS: dict[str, _Blob] = {
    "o200k_base": _O200K,
    "o200k_harmony": _O200K,
    "cl100k_base": _CL100K,
    "p50k_base": _P50K,
    "p50k_edit": _P50K,
    "r50k_base": _R50K,
}


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of a text with one named tokenizer.

    Attributes:
        name: Which tokenizer counts: ``tiktoken:o200k_base``, ``cudagym:code-bpe-16k``, ``hf:<name_or_path>``,
            ``callable:<qualname>``. The ``tiktoken:`` and ``cudagym:`` names are valid specs themselves.
    """

    name: str
    _count: Callable[[str], int] = field(repr=False, compare=False)
    _spec: str | None = field(default=None, repr=False, compare=False)  # a name to rebuild from when unpickled

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (special-token markers such as ``<|endoftext|>`` count as plain text)."""
        return self._count(text)

    def __reduce__(self) -> tuple[Any, ...]:
        # named tokenizers travel by name (a worker reloads them from disk), others with their objects
        if self._spec is not None:
            return (get_token_counter, (self._spec,))
        return (TokenCounter, (self.name, self._count))


def get_token_counter(spec: TokenizerSpec = None) -> TokenCounter:
    """Build a token counter from a tokenizer spec.

    Args:
        spec: ``None`` for the default, the shipped ``cudagym:code-bpe-16k`` (loaded from the package: the
            same counts on every host); a name (``"o200k_base"``,
            ``"cl100k_base"``, any of tiktoken's single-file encodings, ``"tiktoken:<name>"``, or
            ``"cudagym:code-bpe-16k"``); a ``tiktoken.Encoding``; a Hugging Face tokenizer or any object whose
            ``.encode(str)`` returns a list of ids (special tokens are not added where it takes
            ``add_special_tokens``); a callable ``str -> int`` or ``str -> sequence of ids``; or a TokenCounter.

    Returns:
        The counter; its ``name`` says which tokenizer counts.

    Raises:
        ConfigError: ``spec`` is of none of the accepted kinds, names no known tokenizer, or its encode
            function returns neither a count nor a sequence of ids.
        DataUnavailableError: A tiktoken encoding named explicitly is neither cached nor downloadable.
    """
    if spec is None:
        return shipped_counter()
    if isinstance(spec, TokenCounter):
        return spec
    if isinstance(spec, str):
        return _counter_from_name(spec)
    import tiktoken

    if isinstance(spec, tiktoken.Encoding):
        return TokenCounter(f"tiktoken:{spec.name}", _EncodingLength(spec))
    if callable(getattr(spec, "encode", None)):
        return _counter_from_tokenizer(spec)
    if callable(spec):
        qualname = getattr(spec, "__qualname__", None) or type(spec).__qualname__
        return TokenCounter(f"callable:{qualname}", _checked(_CallableLength(spec), f"the callable {qualname}"))
    raise ConfigError(
        f"expected a tokenizer spec: {_accepted()}; got {type(spec).__qualname__} {spec!r:.80}; pass one of these"
    )


@functools.lru_cache(maxsize=1)
def shipped_encoding() -> tiktoken.Encoding:
    """The tokenizer cudagym ships, as a ``tiktoken.Encoding`` (loaded from the package; no network).

    Raises:
        DataUnavailableError: The shipped file is missing or does not match its pinned sha256.
    """
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    resource = importlib.resources.files("cudagym").joinpath(SHIPPED_RESOURCE)
    try:
        with importlib.resources.as_file(resource) as path:
            try:
                # tiktoken reads a local path from disk, then keeps a copy in its cache: the pinned hash
                # guards that copy against going stale when the package's file changes
                ranks = load_tiktoken_bpe(str(path), expected_hash=SHIPPED_SHA256)
            except OSError:
                # ... and raises when a TIKTOKEN_CACHE_DIR the user set cannot be written: read it directly
                ranks = _read_rank_file(path, SHIPPED_SHA256)
    except (OSError, ValueError) as exc:
        raise DataUnavailableError(
            f"expected the shipped tokenizer at cudagym/{SHIPPED_RESOURCE} with sha256 {SHIPPED_SHA256}, got "
            f"{type(exc).__name__}: {exc}; reinstall cudagym (or retrain it: see cudagym/data/README.md)"
        ) from exc
    return tiktoken.Encoding(
        SHIPPED_NAME.replace(":", "-"), pat_str=CODE_SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )


def _read_rank_file(path: Path, sha256: str) -> dict[bytes, int]:
    """Parse a tiktoken rank file (``<base64 token> <rank>`` per line) after checking its sha256."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{path} does not match sha256 {sha256}")
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


def shipped_counter() -> TokenCounter:
    """A counter over the shipped tokenizer, ``cudagym:code-bpe-16k``."""
    return TokenCounter(SHIPPED_NAME, _EncodingLength(shipped_encoding()), SHIPPED_NAME)


def tiktoken_cache_path(url: str) -> Path | None:
    """Where tiktoken caches the file it downloads from ``url``, or None when caching is disabled.

    tiktoken's rule: ``$TIKTOKEN_CACHE_DIR``, else ``$DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``;
    an empty ``TIKTOKEN_CACHE_DIR`` disables the cache; the file name is the sha1 hex digest of the URL.
    To use ``o200k_base`` offline, copy ``o200k_base.tiktoken`` to this path.
    """
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if cache_dir == "":
        return None
    return Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Remembered counts of long texts

MEMO_MIN_CHARS = 1024  # shorter texts count about as fast as they are looked up
MEMO_MAX_CHARS = 1 << 22  # characters of text remembered per tokenizer; the least recently used go first


class _CountMemo:
    """Token counts of recently counted long texts, least recently used dropped first; thread-safe."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> int | None:
        with self._lock:
            count = self._counts.get(text)
            if count is not None:
                self._counts.move_to_end(text)
            return count

    def put(self, text: str, count: int) -> None:
        with self._lock:
            if text in self._counts or len(text) > self.max_chars:
                return
            self._counts[text] = count
            self._chars += len(text)
            while self._chars > self.max_chars:
                old, _ = self._counts.popitem(last=False)
                self._chars -= len(old)


_MEMOS: dict[str, _CountMemo] = {}
_MEMOS_LOCK = threading.Lock()


def count_remembered(counter: TokenCounter, text: str) -> int:
    """``counter.count(text)``; a long text that a named tokenizer counted before is answered from memory.

    Agents read unchanged files again and again, and every sub-env of a vector env starts on the same
    prompt: their counts are looked up (a hash and a compare) instead of run through the BPE again. Only
    named tokenizers are remembered (the shipped one and tiktoken's public encodings: fixed, hash-pinned
    files), one memory per name shared by every counter of that name; a user's tokenizer or callable is
    always called.
    """
    if counter._spec is None or len(text) < MEMO_MIN_CHARS:
        return counter.count(text)
    memo = _MEMOS.get(counter.name)
    if memo is None:
        with _MEMOS_LOCK:
            memo = _MEMOS.setdefault(counter.name, _CountMemo(MEMO_MAX_CHARS))
    count = memo.get(text)
    if count is None:
        count = counter.count(text)
        memo.put(text, count)
    return count


# ---------------------------------------------------------------------------------------------------------
# Counting functions: small picklable objects, one per kind of tokenizer


# tiktoken's pre-tokenizer regex overflows its stack on a run of about a million whitespace characters and
# panics (pyo3's PanicException, a BaseException); 300,000 are fine. Longer texts are counted in pieces of
# at most this many characters, cut after a newline where there is one in the second half of a piece.
CHUNK_CHARS = 1 << 16


@dataclass(frozen=True)
class _EncodingLength:
    """Counts with a tiktoken encoding; special-token text is ordinary text (agent output must not raise)."""

    encoding: tiktoken.Encoding

    def __call__(self, text: str) -> int:
        if len(text) <= CHUNK_CHARS:
            return len(self.encoding.encode_ordinary(text))
        return sum(len(self.encoding.encode_ordinary(piece)) for piece in _pieces(text))


def _pieces(text: str, size: int = CHUNK_CHARS) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``size`` characters, preferably ending after a newline."""
    start = 0
    while len(text) - start > size:
        cut = text.rfind("\n", start + size // 2, start + size)
        end = cut + 1 if cut >= 0 else start + size
        yield text[start:end]
        start = end
    yield text[start:]


@dataclass(frozen=True)
class _EncodeLength:
    """Counts the ids an ``.encode`` method returns (a Hugging Face tokenizer or look-alike)."""

    tokenizer: Any
    kwargs: dict[str, Any]
    label: str  # how errors name it, e.g. ``org/model.encode``

    def __call__(self, text: str) -> int:
        return _length_of(self.tokenizer.encode(text, **self.kwargs), self.label)


@dataclass(frozen=True)
class _CallableLength:
    """Counts with a user callable that returns a count or a sequence of ids."""

    fn: Callable[[str], Any]

    def __call__(self, text: str) -> int:
        return _length_of(self.fn(text), getattr(self.fn, "__qualname__", "the token-count callable"))


def _length_of(result: Any, what: str) -> int:
    """A token count from what a tokenizer returned: a non-negative int as is, a sequence of ids by length."""
    if isinstance(result, int) and not isinstance(result, bool) and result >= 0:
        return result
    if isinstance(result, Sized) and not isinstance(result, str | bytes | bytearray | dict):
        return len(result)
    raise ConfigError(
        f"expected {what} to return a token count (int >= 0) or a sequence of token ids, "
        f"got {type(result).__qualname__} {result!r:.80}; return len(ids) or the ids themselves"
    )


def _checked(count: Callable[[str], int], what: str) -> Callable[[str], int]:
    """Call ``count`` once on a sample so a wrong return type fails when the counter is built."""
    try:
        count("Check: __global__ void k(float* x) {}")
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"expected {what} to count a sample text, got {type(exc).__name__}: {exc}; pass a working tokenizer"
        ) from exc
    return count


def _counter_from_tokenizer(tokenizer: Any) -> TokenCounter:
    """A counter over an object with ``.encode(str)``; special tokens (BOS/EOS) are left out when possible."""
    try:
        takes_flag = "add_special_tokens" in inspect.signature(tokenizer.encode).parameters
    except (TypeError, ValueError):  # some builtins have no introspectable signature
        takes_flag = False
    kwargs = {"add_special_tokens": False} if takes_flag else {}
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__qualname__
    return TokenCounter(f"hf:{name}", _checked(_EncodeLength(tokenizer, kwargs, f"{name}.encode"), f"{name}.encode"))


# ---------------------------------------------------------------------------------------------------------
# Named tokenizers: the shipped one, and tiktoken's, loaded offline-first and never hanging


def _counter_from_name(spec: str) -> TokenCounter:
    name = spec.strip()
    if name in (SHIPPED_NAME, SHIPPED_NAME.partition(":")[2]):
        return shipped_counter()
    bare = name.removeprefix("tiktoken:")
    if bare not in _BLOBS:
        raise ConfigError(f"expected a tokenizer spec: {_accepted()}; got the unknown name {spec!r}; pass one of these")
    loaded = _load_public_encoding(bare)
    if loaded.encoding is None:
        raise DataUnavailableError(
            f"expected tiktoken's {bare} to load, got: {loaded.reason}; {_how_to_cache(bare)}, "
            f"or leave token_counter unset for the shipped {SHIPPED_NAME} (the default)"
        )
    return TokenCounter(f"tiktoken:{bare}", _EncodingLength(loaded.encoding), bare)


@dataclass(frozen=True)
class _Loaded:
    """Outcome of loading a public encoding: the encoding, or None and why not."""

    encoding: Any
    reason: str = ""


_STATE_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, bool], _Loaded] = {}


def _load_public_encoding(name: str) -> _Loaded:
    """Load one of tiktoken's encodings once per process and setting: cache first, then a bounded download."""
    cache = tiktoken_cache_path(_BLOBS[name].url)
    key = (name, str(cache), _offline())
    with _STATE_LOCK:  # held through a download, so concurrent envs wait for one fetch instead of starting many
        if key not in _LOADED:
            _LOADED[key] = _load_uncached(name, cache)
        return _LOADED[key]


def _load_uncached(name: str, cache: Path | None) -> _Loaded:
    import tiktoken
    import tiktoken.registry

    registered = tiktoken.registry.ENCODINGS.get(name)  # already built in this process by tiktoken itself
    if registered is not None:
        return _Loaded(registered)
    blob = _BLOBS[name]
    if cache is not None and cache.is_file() and _sha256_of(cache) == blob.sha256:
        # the verified cache file is what tiktoken reads: no network is touched
        return _Loaded(tiktoken.Encoding(**_constructor(name)()))
    where = f"not in tiktoken's cache ({cache})" if cache is not None else "tiktoken's cache is disabled"
    offline = [var for var in OFFLINE_ENV_VARS if _truthy(os.environ.get(var, ""))]
    if offline:
        return _Loaded(None, f"{where} and {offline[0]} is set")
    return _download(name, blob, _timeout_s(), where)


def _download(name: str, blob: _Blob, timeout_s: float, where: str) -> _Loaded:
    """Run tiktoken's loader (which fetches with no timeout) in a daemon thread and wait at most ``timeout_s``."""
    import tiktoken

    outcome: dict[str, Any] = {}

    def fetch() -> None:
        try:
            # connect first with a timeout: an unreachable host fails here in seconds instead of hanging
            host = urlsplit(blob.url).hostname or ""
            socket.create_connection((host, 443), timeout=min(_PROBE_TIMEOUT_S, timeout_s)).close()
            outcome["kwargs"] = _constructor(name)()  # downloads, checks the sha256, writes tiktoken's cache
        except Exception as exc:  # DNS, refused, HTTP error, hash mismatch: all mean "not available"
            outcome["error"] = exc

    thread = threading.Thread(target=fetch, name=f"cudagym-fetch-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return _Loaded(None, f"{where} and downloading {blob.url} took over {timeout_s:g} s")
    if "error" in outcome:
        error = outcome["error"]
        return _Loaded(None, f"{where} and downloading {blob.url} failed ({type(error).__name__}: {error})")
    log.info("downloaded tiktoken's %s into its cache", name)
    return _Loaded(tiktoken.Encoding(**outcome["kwargs"]))


def _constructor(name: str) -> Callable[[], dict[str, Any]]:
    """The constructor tiktoken itself uses for a public encoding (it loads through tiktoken's cache)."""
    from tiktoken_ext.openai_public import ENCODING_CONSTRUCTORS

    return ENCODING_CONSTRUCTORS[name]


def _sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _offline() -> bool:
    return any(_truthy(os.environ.get(var, "")) for var in OFFLINE_ENV_VARS)


def _truthy(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _timeout_s() -> float:
    raw = os.environ.get(TIMEOUT_ENV_VAR, "")
    if not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigError(f"expected {TIMEOUT_ENV_VAR} to be a number of seconds > 0, got {raw!r}; fix or unset it")
    return value


def _how_to_cache(name: str) -> str:
    blob = _BLOBS[name]
    cache = tiktoken_cache_path(blob.url)
    target = f"copy it to {cache}" if cache is not None else "set TIKTOKEN_CACHE_DIR to a folder and copy it there"
    return f"download {blob.url} on a networked machine and {target} (file name = sha1 of the URL)"


def _accepted() -> str:
    return _ACCEPTED.format(shipped=SHIPPED_NAME, names=", ".join(repr(n) for n in _BLOBS))
