"""Token counting: the shipped BPE, the offline-first default, every spec kind, and the trainer."""

from __future__ import annotations

import base64
import hashlib
import inspect
import logging
import pickle
import random
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
from hypothesis import given, settings
from hypothesis import strategies as st

from cudagym import tokens
from cudagym.bpe import (
    CODE_SPLIT_PATTERN,
    BpeVocabulary,
    Merge,
    count_words,
    main,
    train_bpe,
    write_tiktoken_file,
)
from cudagym.errors import ConfigError, DataUnavailableError
from cudagym.tokens import SHIPPED_NAME, TokenCounter, get_token_counter, shipped_encoding

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_FILE = ROOT / "cudagym" / "data" / "cudagym_code_bpe.tiktoken"

CUDA_SAMPLE = """\
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = fmaxf(x[i], 0.0f);
    }
}

void launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    relu_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(x, y, n);
}
"""

PY_SAMPLE = '''\
import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    """ReLU through a custom CUDA kernel."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        cuda_extension.relu(x.contiguous(), y)
        return y


def get_inputs():
    return [torch.randn(4096, 16384, device="cuda")]
'''

UNICODE_SAMPLE = "naïve café — Grüße, 東京 🚀 ∑ᵢ xᵢ² ≤ ε; Ελληνικά <|endoftext|> \r\n\t\x00 end"


@pytest.fixture(autouse=True)
def _fresh_loader_state(monkeypatch, tmp_path):
    """Every test starts with no remembered load outcome, no warning given, and a private tiktoken cache."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "test-cache"))
    monkeypatch.setattr(tokens, "_LOADED", {})


@pytest.fixture
def no_network(monkeypatch):
    """Make every attempt to reach the network fail at once, and record the attempts."""
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


@pytest.fixture
def empty_cache(monkeypatch, tmp_path):
    """Point tiktoken's cache at an empty folder and allow the network (unless a test sets otherwise)."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    for var in tokens.OFFLINE_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "tiktoken-cache"


def _in_thread(fn, bound_s: float = 20.0):
    """Run fn in a thread; fail if it has not returned within bound_s (a functional 'does not hang' check)."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised below in the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(bound_s)
    assert not thread.is_alive(), f"did not return within {bound_s} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


# ---------------------------------------------------------------------------------------------------------
# The shipped tokenizer


def test_shipped_file_is_tiktoken_format_with_all_bytes_and_contiguous_ranks():
    lines = SHIPPED_FILE.read_bytes().splitlines()
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in lines)}
    assert len(ranks) == len(lines)  # no token listed twice
    assert all(bytes([b]) in ranks for b in range(256))
    assert sorted(ranks.values()) == list(range(len(ranks)))
    assert 8_000 <= len(ranks) <= 16_384
    assert SHIPPED_FILE.stat().st_size < 1_000_000
    assert hashlib.sha256(SHIPPED_FILE.read_bytes()).hexdigest() == tokens.SHIPPED_SHA256


def test_shipped_tokenizer_loads_with_the_network_refused(no_network, empty_cache):
    shipped_encoding.cache_clear()
    enc = shipped_encoding()
    assert enc.n_vocab == 16_384
    counter = get_token_counter(SHIPPED_NAME)
    assert counter.name == SHIPPED_NAME
    assert counter.count(CUDA_SAMPLE) > 0
    assert get_token_counter("code-bpe-16k").name == SHIPPED_NAME
    assert no_network == []


def test_shipped_tokenizer_loads_when_the_cache_cannot_be_written(monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where tiktoken wants its cache folder")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(blocker))
    shipped_encoding.cache_clear()
    try:
        assert shipped_encoding().n_vocab == 16_384
    finally:
        shipped_encoding.cache_clear()


def test_shipped_file_is_in_the_wheel(tmp_path):
    import subprocess
    import sys
    import zipfile

    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    built = subprocess.run([*pip_wheel, "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert built.returncode == 0, f"pip wheel failed:\n{built.stderr[-3000:]}"
    wheel = next(tmp_path.glob("cudagym-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("cudagym/data/cudagym_code_bpe.tiktoken") == SHIPPED_FILE.read_bytes()


@pytest.mark.parametrize("text", [CUDA_SAMPLE, PY_SAMPLE, UNICODE_SAMPLE, "", " ", "\n\n\n", "x" * 5000])
def test_shipped_round_trip_on_samples(text):
    enc = shipped_encoding()
    assert enc.decode(enc.encode_ordinary(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_shipped_round_trip_on_any_unicode(text):
    enc = shipped_encoding()
    assert enc.decode(enc.encode_ordinary(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_shipped_round_trip_on_random_bytes(raw):
    enc = shipped_encoding()
    # tiktoken's byte-level entry (private in 0.14): any bytes encode because all 256 single bytes are tokens
    assert enc.decode_bytes(enc._encode_bytes(raw)) == raw
    if raw:  # tiktoken 0.14's single-piece entry panics on b"" (its own bug; counting never sends an empty piece)
        assert enc.decode_bytes(enc._encode_single_piece(raw)) == raw
    as_text = raw.decode("latin-1")  # every byte value as one code point
    assert enc.decode(enc.encode_ordinary(as_text)) == as_text


def test_split_pattern_covers_every_character():
    import regex

    rng = random.Random(0)
    text = "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(20_000)) + CUDA_SAMPLE + UNICODE_SAMPLE
    assert "".join(regex.findall(CODE_SPLIT_PATTERN, text)) == text


def test_split_pattern_cuts_code_where_expected():
    import regex

    pieces = regex.findall(CODE_SPLIT_PATTERN, "    int idx = threadIdx.x;\n    HIDDEN_SIZE 12345")
    assert pieces == [
        "   ",
        " int",
        " idx",
        " =",
        " thread",
        "Idx",
        ".x",
        ";\n",
        "   ",
        " HIDDEN",
        "_SIZE",
        " ",
        "123",
        "45",
    ]


@pytest.mark.parametrize(("name", "text"), [("cuda", CUDA_SAMPLE), ("python", PY_SAMPLE)])
def test_counts_on_code_are_plausible(name, text):
    n = get_token_counter(SHIPPED_NAME).count(text)
    assert 2.0 <= len(text) / n <= 6.0, f"{name}: {len(text)} chars / {n} tokens"


def test_count_is_additive_over_lines_within_a_margin():
    # counting per line cannot beat counting the whole (merges never cross pieces, and lines end pieces)
    counter = get_token_counter(SHIPPED_NAME)
    whole = counter.count(CUDA_SAMPLE)
    parts = sum(counter.count(line) for line in CUDA_SAMPLE.splitlines(keepends=True))
    assert whole <= parts <= whole * 1.5


def test_special_token_text_is_counted_as_text_not_rejected():
    counter = get_token_counter(SHIPPED_NAME)
    assert counter.count("<|endoftext|>") > 1


# ---------------------------------------------------------------------------------------------------------
# The default: the shipped counter, on every host; tiktoken's encodings by name, from the cache or a bounded download


def test_default_is_the_shipped_counter_with_no_network_and_no_warning(no_network, empty_cache, caplog):
    with caplog.at_level(logging.DEBUG, logger="cudagym.tokens"):
        first = _in_thread(get_token_counter)
        second = _in_thread(get_token_counter)
    assert first.name == second.name == SHIPPED_NAME == tokens.DEFAULT_TOKENIZER
    assert first.count(CUDA_SAMPLE) == get_token_counter(SHIPPED_NAME).count(CUDA_SAMPLE)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert no_network == []


def test_the_default_does_not_depend_on_what_tiktoken_has_cached(no_network, empty_cache, fake_public_encoding):
    without = _in_thread(get_token_counter)
    cache = tokens.tiktoken_cache_path(fake_public_encoding.url)
    cache.parent.mkdir(parents=True)
    cache.write_bytes(SHIPPED_FILE.read_bytes())
    assert get_token_counter("fake_base").name == "tiktoken:fake_base"  # now loadable by name
    with_cache = _in_thread(get_token_counter)
    assert without.name == with_cache.name == SHIPPED_NAME
    assert without.count(CUDA_SAMPLE) == with_cache.count(CUDA_SAMPLE)


@pytest.mark.parametrize("var", ["CUDAGYM_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_switch_touches_no_network(no_network, empty_cache, monkeypatch, var):
    monkeypatch.setenv(var, "1")
    assert _in_thread(get_token_counter).name == SHIPPED_NAME
    with pytest.raises(DataUnavailableError, match=var):
        _in_thread(lambda: get_token_counter("o200k_base"))
    assert no_network == []


def test_a_hanging_network_is_abandoned_after_the_timeout(empty_cache, monkeypatch):
    release = threading.Event()

    def hang(*args, **kwargs):
        release.wait(60)
        raise OSError("released")

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setenv(tokens.TIMEOUT_ENV_VAR, "0.5")
    try:
        with pytest.raises(DataUnavailableError, match=r"took over 0\.5 s"):
            _in_thread(lambda: get_token_counter("o200k_base"), bound_s=20)
    finally:
        release.set()


def test_explicit_tiktoken_name_that_cannot_load_says_how_to_provide_it(no_network, empty_cache, monkeypatch):
    monkeypatch.setenv("CUDAGYM_OFFLINE", "1")
    with pytest.raises(DataUnavailableError) as err:
        _in_thread(lambda: get_token_counter("cl100k_base"))
    message = str(err.value)
    assert "cl100k_base" in message and str(empty_cache) in message and "CUDAGYM_OFFLINE" in message
    assert no_network == []


def test_cache_path_is_the_one_tiktoken_reads(no_network, empty_cache):
    url = "https://example.invalid/encodings/fake.tiktoken"
    path = tokens.tiktoken_cache_path(url)
    assert path == empty_cache / hashlib.sha1(url.encode()).hexdigest()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"cached bytes")
    assert tiktoken.load.read_file_cached(url, hashlib.sha256(b"cached bytes").hexdigest()) == b"cached bytes"
    assert no_network == []


def test_cache_dir_rules(monkeypatch, tmp_path):
    url = "https://example.invalid/x"
    digest = hashlib.sha1(url.encode()).hexdigest()
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "gym"))
    assert tokens.tiktoken_cache_path(url) == tmp_path / "gym" / digest
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert tokens.tiktoken_cache_path(url) is None
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    monkeypatch.delenv("DATA_GYM_CACHE_DIR")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)  # let tempfile re-read TMPDIR
    (tmp_path / "tmp").mkdir()
    assert tokens.tiktoken_cache_path(url) == tmp_path / "tmp" / "data-gym-cache" / digest


@pytest.fixture
def fake_public_encoding(monkeypatch):
    """A public-encoding entry whose blob is the shipped file, built by a tiktoken-style constructor."""
    url = "https://example.invalid/encodings/fake_base.tiktoken"
    blob = tokens._Blob(url, hashlib.sha256(SHIPPED_FILE.read_bytes()).hexdigest())

    def constructor():
        return {
            "name": "fake_base",
            "pat_str": CODE_SPLIT_PATTERN,
            "mergeable_ranks": tiktoken.load.load_tiktoken_bpe(url, expected_hash=blob.sha256),
            "special_tokens": {},
        }

    monkeypatch.setitem(tokens._BLOBS, "fake_base", blob)
    monkeypatch.setattr(tokens, "_constructor", lambda name: constructor)
    return blob


def test_default_loads_from_a_verified_cache_without_network(no_network, empty_cache, fake_public_encoding):
    cache = tokens.tiktoken_cache_path(fake_public_encoding.url)
    cache.parent.mkdir(parents=True)
    cache.write_bytes(SHIPPED_FILE.read_bytes())
    counter = _in_thread(lambda: get_token_counter("fake_base"))
    assert counter.name == "tiktoken:fake_base"
    assert counter.count(CUDA_SAMPLE) == get_token_counter(SHIPPED_NAME).count(CUDA_SAMPLE)
    assert get_token_counter("tiktoken:fake_base").name == "tiktoken:fake_base"
    assert no_network == []


def test_a_corrupt_cache_file_is_not_trusted(no_network, empty_cache, fake_public_encoding):
    cache = tokens.tiktoken_cache_path(fake_public_encoding.url)
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"truncated download")
    with pytest.raises(DataUnavailableError, match="fake_base"):
        _in_thread(lambda: get_token_counter("fake_base"))
    assert len(no_network) == 1  # it tried to re-fetch, then said so


def test_a_named_encoding_downloads_when_the_network_answers(empty_cache, fake_public_encoding, monkeypatch):
    class FakeConnection:
        def close(self) -> None:
            pass

    def fake_fetch(blobpath: str) -> bytes:
        assert blobpath == fake_public_encoding.url
        return SHIPPED_FILE.read_bytes()

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: FakeConnection())
    monkeypatch.setattr(tiktoken.load, "read_file", fake_fetch)
    counter = _in_thread(lambda: get_token_counter("fake_base"))
    assert counter.name == "tiktoken:fake_base"
    # tiktoken wrote its cache: the next process would load offline
    assert tokens.tiktoken_cache_path(fake_public_encoding.url).read_bytes() == SHIPPED_FILE.read_bytes()


def test_known_blobs_match_installed_tiktoken():
    from tiktoken_ext import openai_public

    for name, blob in tokens._BLOBS.items():
        source = inspect.getsource(openai_public.ENCODING_CONSTRUCTORS[name])
        if blob.url not in source:  # o200k_harmony, p50k_edit reuse another constructor's file
            base = name.replace("_harmony", "_base").replace("_edit", "_base")
            source = inspect.getsource(openai_public.ENCODING_CONSTRUCTORS[base])
        assert blob.url in source and blob.sha256 in source, name


# ---------------------------------------------------------------------------------------------------------
# Other spec kinds


def test_tiktoken_encoding_object():
    enc = shipped_encoding()
    counter = get_token_counter(enc)
    assert counter.name == f"tiktoken:{enc.name}"
    assert counter.count(PY_SAMPLE) == len(enc.encode_ordinary(PY_SAMPLE))


class FakeHFTokenizer:
    """The slice of a Hugging Face tokenizer the counter uses: .encode with add_special_tokens, .name_or_path."""

    name_or_path = "org/fake-coder-7b"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [len(word) for word in text.split()]  # one id per whitespace-separated word
        return [1, *ids] if add_special_tokens else ids  # 1 plays BOS


class PlainEncoder:
    def encode(self, text: str) -> list[int]:
        return list(range(len(text.split())))


def test_hf_like_tokenizer_counts_without_special_tokens():
    counter = get_token_counter(FakeHFTokenizer())
    assert counter.name == "hf:org/fake-coder-7b"
    assert counter.count("a bb ccc") == 3  # no BOS added
    assert counter.count("") == 0


def test_object_with_plain_encode():
    counter = get_token_counter(PlainEncoder())
    assert counter.name == "hf:PlainEncoder"
    assert counter.count("one two three four") == 4


def word_count(text: str) -> int:
    return len(text.split())


def test_callable_returning_a_count():
    counter = get_token_counter(word_count)
    assert counter.name == "callable:word_count"
    assert counter.count("a b c") == 3


def test_callables_returning_sequences():
    counter = get_token_counter(lambda text: [0] * (len(text) // 2))
    assert counter.name == "callable:test_callables_returning_sequences.<locals>.<lambda>"
    assert counter.count("abcdef") == 3
    assert get_token_counter(tuple).count("abc") == 3  # a tuple of characters is a sequence of ids


@pytest.mark.parametrize(
    "bad",
    [
        lambda s: s.encode(),  # bytes: would be a silent byte count
        lambda s: "x",  # a string
        lambda s: 2.5,  # not an int
        lambda s: -1,
        lambda s: True,
    ],
)
def test_callables_with_wrong_return_are_rejected_when_built(bad):
    with pytest.raises(ConfigError, match="token count"):
        get_token_counter(bad)


def test_encode_that_returns_text_is_rejected():
    class TextEncoder:
        def encode(self, text: str) -> str:
            return text.upper()

    with pytest.raises(ConfigError, match="TextEncoder.encode"):
        get_token_counter(TextEncoder())


@pytest.mark.parametrize("bad", [3.5, 42, b"o200k_base", ["o200k_base"], "gpt-7-tokenizer", "hf:org/model"])
def test_bad_spec_names_the_accepted_kinds(bad):
    with pytest.raises(ConfigError) as err:
        get_token_counter(bad)
    message = str(err.value)
    for kind in ("None", "o200k_base", "cl100k_base", SHIPPED_NAME, "tiktoken.Encoding", "Hugging Face", "callable"):
        assert kind in message


def test_bad_timeout_setting(empty_cache, no_network, monkeypatch):
    monkeypatch.setenv(tokens.TIMEOUT_ENV_VAR, "soon")
    with pytest.raises(ConfigError, match=tokens.TIMEOUT_ENV_VAR):
        get_token_counter("o200k_base")


def test_a_counter_passes_through_and_pickles_by_name():
    counter = get_token_counter(SHIPPED_NAME)
    assert get_token_counter(counter) is counter
    clone = pickle.loads(pickle.dumps(counter))
    assert clone.name == SHIPPED_NAME and clone.count(CUDA_SAMPLE) == counter.count(CUDA_SAMPLE)
    by_fn = pickle.loads(pickle.dumps(get_token_counter(word_count)))
    assert by_fn.name == "callable:word_count" and by_fn.count("a b") == 2
    assert isinstance(by_fn, TokenCounter)


# ---------------------------------------------------------------------------------------------------------
# The trainer


def test_trainer_oracle_on_a_hand_computed_corpus():
    # pairs at the start: ug 20, pu 17, un 16, hu 15, gs 5, bu 4 -> merge (u, g); then un 16; then (h, ug) 15;
    # then (p, un) 12; then a tie at 5 between (hug, s) and (p, ug): (b"hug", b"s") sorts first
    vocab = train_bpe({b"hug": 10, b"pug": 5, b"pun": 12, b"bun": 4, b"hugs": 5}, vocab_size=261)
    assert vocab.merges == (
        Merge(b"u", b"g", 20),
        Merge(b"u", b"n", 16),
        Merge(b"h", b"ug", 15),
        Merge(b"p", b"un", 12),
        Merge(b"hug", b"s", 5),
    )
    assert [vocab.ranks[m.token] for m in vocab.merges] == [256, 257, 258, 259, 260]
    assert vocab.size == 261


def test_trainer_merges_repeated_letters_left_to_right():
    # "aaaa" x3: (a, a) occurs 3 times per word -> 9; merging gives [aa, aa] (pair count 3) -> "aaaa"
    vocab = train_bpe({b"aaaa": 3}, vocab_size=300)
    assert vocab.merges == (Merge(b"a", b"a", 9), Merge(b"aa", b"aa", 3))


def test_trainer_stops_when_no_pair_repeats():
    vocab = train_bpe({b"ab": 1, b"cd": 1}, vocab_size=1000)
    assert vocab.merges == () and vocab.size == 256


def test_trainer_rejects_a_vocab_below_256():
    with pytest.raises(ConfigError, match="vocab_size >= 256"):
        train_bpe({b"ab": 5}, vocab_size=100)


def test_trained_vocab_encodes_like_training_in_tiktoken(tmp_path):
    text = (PY_SAMPLE + CUDA_SAMPLE) * 3
    words = count_words([text])
    vocab = train_bpe(words, vocab_size=400)
    out = tmp_path / "tiny.tiktoken"
    write_tiktoken_file(vocab.ranks, out)
    ranks = tiktoken.load.load_tiktoken_bpe(str(out))
    assert ranks == vocab.ranks
    enc = tiktoken.Encoding("tiny", pat_str=CODE_SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert enc.decode(enc.encode_ordinary(text)) == text
    # the most frequent piece of the sample became a single token
    top_piece = max((w for w in words if len(w) > 1), key=lambda w: words[w] * (len(w) - 1))
    assert len(enc._encode_single_piece(top_piece)) <= 2
    assert len(enc.encode_ordinary(text)) < len(text.encode()) / 2


def test_count_words_counts_utf8_pieces():
    words = count_words(["x = x + 1\n", "x = 2\n", "é"])
    expected = {b"x": 2, b" =": 2, b" x": 1, b" +": 1, b" ": 2, b"1": 1, b"2": 1, b"\n": 2, "é".encode(): 1}
    assert words == Counter(expected)


def test_write_rejects_a_table_without_all_bytes(tmp_path):
    with pytest.raises(ConfigError, match="256 single bytes"):
        write_tiktoken_file({b"a": 0}, tmp_path / "x.tiktoken")


def test_cli_trains_on_given_files(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CUDA_SAMPLE * 5 + PY_SAMPLE * 5)
    out = tmp_path / "cli.tiktoken"
    assert main(["--out", str(out), "--vocab-size", "300", "--input", str(corpus), "--workers", "1"]) == 0
    ranks = tiktoken.load.load_tiktoken_bpe(str(out))
    assert len(ranks) == 300
    assert isinstance(train_bpe(count_words([corpus.read_text()]), 300), BpeVocabulary)
    assert ranks == train_bpe(count_words([corpus.read_text()]), 300).ranks


@pytest.mark.parametrize("text", [" " * 1_000_000, "\n" * 1_000_000, " \t" * 600_000, "x " * 700_000])
def test_a_million_characters_of_whitespace_count_without_a_panic(text):
    counter = get_token_counter(SHIPPED_NAME)
    assert counter.count(text) > 0


def test_pieces_cover_the_text_and_prefer_newlines():
    text = ("a" * 40 + "\n") * 5_000
    pieces = list(tokens._pieces(text, size=1000))
    assert "".join(pieces) == text and all(len(p) <= 1000 for p in pieces)
    assert all(p.endswith("\n") for p in pieces)
    assert list(tokens._pieces("abc", size=1000)) == ["abc"]
    assert [len(p) for p in tokens._pieces(" " * 2500, size=1000)] == [1000, 1000, 500]


def test_short_texts_count_as_before():
    counter = get_token_counter(SHIPPED_NAME)
    assert counter.count(CUDA_SAMPLE) == len(shipped_encoding().encode_ordinary(CUDA_SAMPLE))


def test_remembered_counts_equal_counting_again_and_stay_within_their_bound() -> None:
    from cudagym.tokens import MEMO_MIN_CHARS, _CountMemo, count_remembered

    counter = get_token_counter(SHIPPED_NAME)
    texts = [CUDA_SAMPLE * (1 + MEMO_MIN_CHARS // len(CUDA_SAMPLE)) + str(i) for i in range(5)]
    assert [count_remembered(counter, t) for t in texts] == [counter.count(t) for t in texts]
    again = get_token_counter(SHIPPED_NAME)  # another counter of the same name shares the memory
    assert [count_remembered(again, t) for t in texts] == [counter.count(t) for t in texts]
    memo = _CountMemo(max_chars=2 * len(texts[0]) + 1)
    for i, text in enumerate(texts):
        memo.put(text, i)
    assert [memo.get(t) for t in texts] == [None, None, None, 3, 4]  # the least recently used went first


def test_a_users_tokenizer_is_called_every_time() -> None:
    from cudagym.tokens import MEMO_MIN_CHARS, count_remembered

    calls: list[int] = []

    def count(text: str) -> int:
        calls.append(len(text))
        return len(text) // 4

    counter = get_token_counter(count)
    text = "x" * MEMO_MIN_CHARS
    calls.clear()  # the spec check counted a sample
    assert [count_remembered(counter, text) for _ in range(3)] == [len(text) // 4] * 3
    assert calls == [len(text)] * 3
