"""A byte-level BPE trainer that writes tiktoken's vocabulary format; it produced the shipped tokenizer.

Training reads as the steps run: split text into pieces with a regex (:data:`CODE_SPLIT_PATTERN`), count
the unique pieces as byte strings (:func:`count_words`), then repeatedly merge the most frequent adjacent
pair of tokens, keeping pair counts up to date incrementally so each merge only touches the words that
contain the pair (:func:`train_bpe`). The result is a rank table: the 256 single bytes first, then one rank
per learned token in the order learned, which is the merge priority tiktoken's encoder expects
(:func:`write_tiktoken_file`, loadable with ``tiktoken.load.load_tiktoken_bpe``).

Regenerate the shipped vocabulary (the corpus list is fixed in :func:`default_corpus`)::

    python -m cudagym.bpe --out cudagym/data/cudagym_code_bpe.tiktoken --vocab-size 16384

Pure Python; the regex split runs in a process pool, the merge loop in one process.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import heapq
import logging
import math
import os
import sys
import sysconfig
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Literal

from cudagym import pyparse
from cudagym.errors import ConfigError, DataUnavailableError

log = logging.getLogger(__name__)

# The pre-tokenizer: text is cut into pieces and merges never cross a piece boundary. o200k-style, tuned for
# code: camelCase humps split (``threadIdx`` -> ``thread`` ``Idx``), numbers in groups of at most 3 digits,
# punctuation runs kept together with one leading space and trailing newlines (``);\n``), indentation kept
# apart from the word after it. Every character matches some branch, so no text is dropped.
CODE_SPLIT_PATTERN = "|".join(
    (
        # a lower-case word after optional capitals (``Kernel``, ``CUDAKernel``), one optional leading
        # non-letter (space, ``_``, ``.``, ``#``), an optional English contraction
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        # an all-capitals word (``HIDDEN``, ``CUDA``)
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        # digits, three at a time
        r"""\p{N}{1,3}""",
        # a run of punctuation with one optional leading space and the line breaks right after it
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        # line breaks with the blanks before them
        r"""\s*[\r\n]+""",
        # blanks not followed by text (trailing space), then any other blanks
        r"""\s+(?!\S)""",
        r"""\s+""",
    )
)

N_BYTE_TOKENS = 256


@dataclass(frozen=True)
class Merge:
    """One learned merge.

    Attributes:
        left: Bytes of the left token.
        right: Bytes of the right token.
        count: Occurrences of the pair in the corpus when it was chosen.
    """

    left: bytes
    right: bytes
    count: int

    @property
    def token(self) -> bytes:
        """Bytes of the merged token."""
        return self.left + self.right


@dataclass(frozen=True)
class BpeVocabulary:
    """The outcome of training.

    Attributes:
        merges: Every merge in the order learned. A merge whose bytes already were a token (reached by
            another split) is listed but takes no new rank.
        ranks: Token bytes -> rank: the 256 single bytes (rank = byte value), then learned tokens in order.
            Contiguous from 0, as tiktoken expects.
    """

    merges: tuple[Merge, ...]
    ranks: Mapping[bytes, int]

    @property
    def size(self) -> int:
        """Number of tokens (single bytes included)."""
        return len(self.ranks)


def count_words(texts: Iterable[str], pattern: str = CODE_SPLIT_PATTERN) -> Counter[bytes]:
    """Split texts into pieces with a regex and count each unique piece's UTF-8 bytes.

    Args:
        texts: Documents to split.
        pattern: The split regex (``regex`` module syntax, as tiktoken uses).

    Returns:
        Piece bytes -> occurrences.
    """
    import regex  # tiktoken's dependency; imported here so `import cudagym` stays cheap

    splitter = regex.compile(pattern)
    pieces: Counter[str] = Counter()
    for text in texts:
        pieces.update(splitter.findall(text))
    words: Counter[bytes] = Counter()
    for piece, n in pieces.items():
        words[piece.encode("utf-8", errors="surrogatepass")] += n
    return words


def train_bpe(word_counts: Mapping[bytes, int], vocab_size: int, *, min_pair_count: int = 2) -> BpeVocabulary:
    """Learn byte-pair merges until the vocabulary has ``vocab_size`` tokens or no pair repeats.

    Each step merges the adjacent token pair with the highest count; ties go to the pair whose
    (left bytes, right bytes) sorts first, so training is deterministic.

    Args:
        word_counts: Pre-tokenized pieces as bytes -> occurrences (see :func:`count_words`).
        vocab_size: Target number of tokens, the 256 single bytes included.
        min_pair_count: Stop once the best pair occurs fewer times than this.

    Returns:
        The merges and the rank table.

    Raises:
        ConfigError: ``vocab_size`` is below 256.
    """
    if vocab_size < N_BYTE_TOKENS:
        raise ConfigError(
            f"expected vocab_size >= {N_BYTE_TOKENS} (every single byte is a token), got {vocab_size}; "
            "pass a larger vocab_size"
        )
    state = _MergeState(word_counts)
    merges: list[Merge] = []
    while len(state.ranks) < vocab_size:
        best = state.pop_best_pair()
        if best is None or state.pair_counts[best] < min_pair_count:
            break
        left, right = best
        merges.append(Merge(state.token_bytes[left], state.token_bytes[right], state.pair_counts[best]))
        state.merge(left, right)
    return BpeVocabulary(merges=tuple(merges), ranks=dict(state.ranks))


class _MergeState:
    """Words as token-id lists, with pair counts, the words holding each pair, and a lazy max-heap of pairs."""

    def __init__(self, word_counts: Mapping[bytes, int]) -> None:
        # token id == rank: single bytes are ids 0..255, learned tokens follow
        self.token_bytes: list[bytes] = [bytes([b]) for b in range(N_BYTE_TOKENS)]
        self.ranks: dict[bytes, int] = {tok: i for i, tok in enumerate(self.token_bytes)}
        self.words: list[list[int]] = []
        self.counts: list[int] = []
        self.pair_counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.holders: defaultdict[tuple[int, int], set[int]] = defaultdict(set)
        for word, n in word_counts.items():
            if len(word) < 2 or n <= 0:
                continue  # a single byte has no pair to merge
            index = len(self.words)
            self.words.append(list(word))
            self.counts.append(n)
            for pair in pairwise(word):
                self.pair_counts[pair] += n
                self.holders[pair].add(index)
        # entries are (-count, left bytes, right bytes, pair); stale entries are skipped when popped
        self.heap = [self._entry(pair, n) for pair, n in self.pair_counts.items()]
        heapq.heapify(self.heap)

    def _entry(self, pair: tuple[int, int], n: int) -> tuple[int, bytes, bytes, tuple[int, int]]:
        return (-n, self.token_bytes[pair[0]], self.token_bytes[pair[1]], pair)

    def pop_best_pair(self) -> tuple[int, int] | None:
        """Remove and return the most frequent pair whose heap entry is current, or None when none is left."""
        while self.heap:
            neg_count, _, _, pair = heapq.heappop(self.heap)
            if self.pair_counts.get(pair, 0) == -neg_count and neg_count < 0:
                return pair
        return None

    def merge(self, left: int, right: int) -> None:
        """Replace every non-overlapping (left, right) occurrence, left to right, by the merged token."""
        merged = self.token_bytes[left] + self.token_bytes[right]
        new_id = self.ranks.get(merged)
        if new_id is None:  # bytes reached by another split already own a rank: reuse it
            new_id = len(self.token_bytes)
            self.token_bytes.append(merged)
            self.ranks[merged] = new_id
        delta: defaultdict[tuple[int, int], int] = defaultdict(int)
        for index in sorted(self.holders.pop((left, right), ())):
            self._merge_word(index, left, right, new_id, delta)
        self.pair_counts.pop((left, right), None)
        delta.pop((left, right), None)
        for pair, change in delta.items():
            if change == 0:
                continue
            n = self.pair_counts[pair] + change
            if n > 0:
                self.pair_counts[pair] = n
                heapq.heappush(self.heap, self._entry(pair, n))
            else:
                del self.pair_counts[pair]

    def _merge_word(
        self, index: int, left: int, right: int, new_id: int, delta: defaultdict[tuple[int, int], int]
    ) -> None:
        old = self.words[index]
        new: list[int] = []
        i = 0
        while i < len(old):
            if i + 1 < len(old) and old[i] == left and old[i + 1] == right:
                new.append(new_id)
                i += 2
            else:
                new.append(old[i])
                i += 1
        n = self.counts[index]
        old_pairs = list(pairwise(old))
        new_pairs = list(pairwise(new))
        for pair in old_pairs:
            delta[pair] -= n
        for pair in new_pairs:
            delta[pair] += n
        for pair in set(old_pairs).difference(new_pairs):
            if pair != (left, right):
                self.holders[pair].discard(index)
        for pair in new_pairs:
            self.holders[pair].add(index)
        self.words[index] = new


def write_tiktoken_file(ranks: Mapping[bytes, int], path: Path) -> None:
    """Write a rank table in tiktoken's format: one ``<base64 token> <rank>`` line per token, by rank.

    Args:
        ranks: Token bytes -> rank; must hold all 256 single bytes and contiguous ranks from 0.
        path: Destination file; parent folders are created.

    Raises:
        ConfigError: The table misses a single byte or its ranks are not 0..n-1.
    """
    missing = [b for b in range(N_BYTE_TOKENS) if bytes([b]) not in ranks]
    if missing:
        raise ConfigError(
            f"expected all 256 single bytes in the rank table, got {len(missing)} missing "
            f"(first: {missing[0]}); train with train_bpe, which seeds them"
        )
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ConfigError(f"expected contiguous ranks 0..{len(ranks) - 1}, got gaps or repeats; rebuild the table")
    lines = [base64.b64encode(tok) + b" " + str(rank).encode() for tok, rank in sorted(ranks.items(), key=_by_rank)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")


def _by_rank(item: tuple[bytes, int]) -> int:
    return item[1]


# ---------------------------------------------------------------------------------------------------------
# The corpus: code and prose resembling the env's traffic (CUDA kernels, torch Python, English instructions)


@dataclass(frozen=True)
class CorpusSource:
    """A named set of files and how text is taken from them.

    Attributes:
        name: Short label for logs and the README.
        files: Files in reading order.
        extract: ``"text"`` reads whole files; ``"prose"`` takes the long string literals (docstrings,
            help texts) of Python files.
    """

    name: str
    files: tuple[Path, ...]
    extract: Literal["text", "prose"] = "text"

    def documents(self) -> Iterator[str]:
        """Yield the text of each file (undecodable bytes replaced)."""
        for path in self.files:
            text = path.read_text(encoding="utf-8", errors="replace")
            yield _prose_of(text) if self.extract == "prose" else text


def _prose_of(python_source: str) -> str:
    """Long string literals with several words (docstrings, help texts) of a Python file, blank-line separated."""
    try:
        tree = pyparse.parse(python_source)
    except (SyntaxError, ValueError):
        return ""
    strings = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and len(node.value) >= 40
        and node.value.count(" ") >= 5
    ]
    return "\n\n".join(strings)


def _spread(files: Sequence[Path], cap_bytes: int) -> tuple[Path, ...]:
    """Pick files at an even stride through the sorted list so their total is about ``cap_bytes``."""
    ordered = sorted(files)
    total = sum(f.stat().st_size for f in ordered)
    stride = max(1, math.ceil(total / cap_bytes)) if cap_bytes > 0 else 1
    picked: list[Path] = []
    size = 0
    for path in ordered[::stride]:
        if size >= cap_bytes:
            break
        picked.append(path)
        size += path.stat().st_size
    return tuple(picked)


def _glob(root: Path, suffixes: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[Path]:
    if not root.is_dir():
        log.warning("corpus folder %s is missing; skipping it", root)
        return []
    return [
        p
        for p in root.rglob("*")
        if p.suffix in suffixes and p.is_file() and not any(part in exclude for part in p.relative_to(root).parts)
    ]


def default_corpus(megabytes: float = 1.0) -> list[CorpusSource]:
    """The fixed corpus the shipped vocabulary was trained on, read from this machine's installs.

    Sources (caps in MB at ``megabytes=1``): torch's Python files (12), torch's C++/CUDA headers (8), the
    CUDA toolkit headers under ``$CUDA_HOME/include`` (default ``/usr/local/cuda``) (8), and English prose
    from ``pydoc_data/topics.py`` (the language reference) plus the long string literals (docstrings) of
    the Python standard library's modules (10 MB of source files, about a third of it prose).

    Args:
        megabytes: Scale applied to every cap.

    Returns:
        The sources; a missing install is skipped with a warning.
    """
    import torch  # the corpus is torch's own source tree; only needed when training

    torch_dir = Path(torch.__file__).parent
    cuda_dir = Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda") / "include"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    headers = (".h", ".hpp", ".cuh", ".inl")
    mb = int(1_000_000 * megabytes)
    prose_files = _glob(stdlib, (".py",), exclude=("site-packages", "dist-packages", "test", "tests", "idlelib"))
    topics = stdlib / "pydoc_data" / "topics.py"  # the language reference as text: always in
    prose = (topics, *_spread([f for f in prose_files if f != topics], 10 * mb)) if topics.is_file() else ()
    return [
        CorpusSource("torch-python", _spread(_glob(torch_dir, (".py",), exclude=("include",)), 12 * mb)),
        CorpusSource("torch-headers", _spread(_glob(torch_dir / "include", headers), 8 * mb)),
        CorpusSource("cuda-headers", _spread(_glob(cuda_dir, headers), 8 * mb)),
        CorpusSource("python-prose", prose, extract="prose"),
    ]


def _count_source_chunk(args: tuple[CorpusSource, str]) -> tuple[Counter[bytes], int, str]:
    source, pattern = args
    digest = hashlib.sha256()
    n_chars = 0
    texts = []
    for text in source.documents():
        digest.update(text.encode("utf-8", errors="surrogatepass"))
        n_chars += len(text)
        texts.append(text)
    return count_words(texts, pattern), n_chars, digest.hexdigest()


def count_corpus(sources: Sequence[CorpusSource], workers: int = 1) -> tuple[Counter[bytes], str]:
    """Count the pieces of every source, splitting the files over a process pool.

    Args:
        sources: The corpus.
        workers: Processes to use (1 runs in this process).

    Returns:
        Piece bytes -> occurrences, and a SHA-256 over the corpus text (same text, same digest).

    Raises:
        DataUnavailableError: The corpus has no files.
    """
    chunks = [CorpusSource(s.name, s.files[i : i + 64], s.extract) for s in sources for i in range(0, len(s.files), 64)]
    if not chunks:
        raise DataUnavailableError(
            "expected corpus files, got none; install torch and the CUDA toolkit or pass --input FILE..."
        )
    jobs = [(chunk, CODE_SPLIT_PATTERN) for chunk in chunks]
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_count_source_chunk, jobs))
    else:
        results = [_count_source_chunk(job) for job in jobs]
    words: Counter[bytes] = Counter()
    digest = hashlib.sha256()
    for (chunk, _), (chunk_words, n_chars, chunk_digest) in zip(jobs, results, strict=True):
        words.update(chunk_words)
        digest.update(chunk_digest.encode())
        log.debug("%s: %d files, %d chars", chunk.name, len(chunk.files), n_chars)
    return words, digest.hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    """Train a vocabulary on the default corpus (or given files) and write it in tiktoken's format."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m cudagym.bpe", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="destination .tiktoken file")
    parser.add_argument("--vocab-size", type=int, default=16384, help="tokens, the 256 single bytes included")
    parser.add_argument("--input", type=Path, nargs="*", help="train on these text files instead of the default corpus")
    parser.add_argument("--corpus-scale", type=float, default=1.0, help="scale the default corpus caps")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes for the regex split")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    start = time.perf_counter()
    sources = [CorpusSource("input", tuple(args.input))] if args.input else default_corpus(args.corpus_scale)
    for source in sources:
        size_mb = sum(f.stat().st_size for f in source.files) / 1e6
        log.info("source %-14s %5d files %6.1f MB (%s)", source.name, len(source.files), size_mb, source.extract)
    words, digest = count_corpus(sources, workers=args.workers)
    log.info("corpus sha256 %s: %d unique pieces, %.1fs", digest, len(words), time.perf_counter() - start)
    vocab = train_bpe(words, args.vocab_size)
    write_tiktoken_file(vocab.ranks, args.out)
    log.info(
        "wrote %s: %d tokens (%d merges, last count %d), %.1f kB, %.1fs total",
        args.out,
        vocab.size,
        len(vocab.merges),
        vocab.merges[-1].count if vocab.merges else 0,
        args.out.stat().st_size / 1e3,
        time.perf_counter() - start,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
