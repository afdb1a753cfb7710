"""Text spaces that hold any Unicode string: the env's actions (tool calls) and observations (tool output).

Gymnasium's :class:`~gymnasium.spaces.Text` accepts only characters of its charset (alphanumeric by
default), but compiler logs, source files and LLM output hold newlines, punctuation and any Unicode.
:class:`UnicodeText` keeps ``Text``'s length bounds and uses its charset only for :meth:`sample`; membership
accepts every character. Like MiniWoB++'s ``Unicode`` space, it cannot be flattened to character indices, so
vector envs must not put it in shared memory (``AsyncVectorEnv(..., shared_memory=False)``).
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium.spaces import Text

from cudagym.errors import ConfigError

# What sample() draws from: printable ASCII (whitespace included) and a few multi-byte characters, so
# random actions exercise the parser with the kinds of text an LLM writes.
SAMPLE_CHARSET = string.printable + "éß→∑√中文😀"


class UnicodeText(Text):
    """A string of any Unicode characters with ``min_length <= len <= max_length``.

    Args:
        max_length: Longest string, in characters (inclusive).
        min_length: Shortest string, in characters (inclusive).
        charset: Characters :meth:`sample` draws from; membership ignores it.
        seed: Seed of the sampler.
    """

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        charset: str = SAMPLE_CHARSET,
        seed: int | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)

    def contains(self, x: Any) -> bool:
        """True for any ``str`` whose length is within the bounds, whatever its characters."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """False: characters outside the sampling charset have no index to flatten to."""
        return False

    def __repr__(self) -> str:
        """Gives a string representation of this space."""
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        """Equal to another ``UnicodeText`` with the same length bounds."""
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.min_length, self.max_length))


def _refuse_shared_memory(space: UnicodeText, n: int = 1, ctx: Any = None) -> Any:
    raise ConfigError(
        f"expected a space with a fixed character set for shared memory, got {space!r}, which holds any "
        "Unicode; create the vector env with AsyncVectorEnv(..., shared_memory=False) "
        "or gym.make_vec(..., vector_kwargs={'shared_memory': False})"
    )


def _register_vector_hooks() -> None:
    # Text's shared-memory writer turns each character into its charset index, which fails deep inside
    # a worker for characters outside the charset; refuse up front with a message that says what to do.
    from gymnasium.vector.utils import shared_memory

    shared_memory.create_shared_memory.register(UnicodeText)(_refuse_shared_memory)


_register_vector_hooks()
