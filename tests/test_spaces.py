"""UnicodeText: any Unicode within the length bounds; sampling from its charset; no shared memory."""

from __future__ import annotations

import pickle

import pytest
from gymnasium.spaces import Text
from gymnasium.vector.utils import create_shared_memory

from cudagym.errors import ConfigError
from cudagym.spaces import SAMPLE_CHARSET, UnicodeText


def test_contains_any_unicode_within_bounds() -> None:
    space = UnicodeText(20)
    for text in ["", "hello", "{\"name\": 1}\n\t", "中文 😀 é", "\x00\x01", "a" * 20]:
        assert space.contains(text), text
        assert text in space
    assert not space.contains("a" * 21)
    assert not space.contains(b"bytes")
    assert not space.contains(3)
    assert not space.contains(None)


def test_min_length_is_respected() -> None:
    space = UnicodeText(10, min_length=2)
    assert not space.contains("a")
    assert space.contains("ab")


def test_default_text_would_reject_what_unicode_text_accepts() -> None:
    assert not Text(50).contains("a b")
    assert UnicodeText(50).contains("a b")


def test_samples_are_members_and_reproducible() -> None:
    a, b = UnicodeText(64, seed=3), UnicodeText(64, seed=3)
    samples = [a.sample() for _ in range(20)]
    assert samples == [b.sample() for _ in range(20)]
    assert all(a.contains(s) and set(s) <= set(SAMPLE_CHARSET) for s in samples)


def test_equality_hash_repr_and_pickle() -> None:
    assert UnicodeText(5) == UnicodeText(5)
    assert UnicodeText(5) != UnicodeText(6)
    assert UnicodeText(5) != Text(5, min_length=0)
    assert hash(UnicodeText(5)) == hash(UnicodeText(5))
    assert repr(UnicodeText(7)) == "UnicodeText(0, 7)"
    space = UnicodeText(9, min_length=1)
    assert pickle.loads(pickle.dumps(space)) == space


def test_not_flattenable_and_refuses_shared_memory_with_a_clear_message() -> None:
    space = UnicodeText(8)
    assert space.is_np_flattenable is False
    with pytest.raises(ConfigError, match="shared_memory=False"):
        create_shared_memory(space, n=2)
