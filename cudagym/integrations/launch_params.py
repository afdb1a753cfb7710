"""The launch-configuration grid every kernel family is rendered over, and what a family is.

A configuration is threads per block, items per thread (vectors each thread handles per pass,
``#pragma unroll``-ed) and vector width (1, 2 or 4 floats per load: ``float``, ``float2``, ``float4``).
The grid is 5 x 4 x 3 = 60 configurations, in the fixed order of :func:`all_params`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from cudagym.errors import ConfigError

BLOCK_SIZES: tuple[int, ...] = (64, 128, 256, 512, 1024)
ITEMS_PER_THREAD: tuple[int, ...] = (1, 2, 4, 8)
VECTOR_WIDTHS: tuple[int, ...] = (1, 2, 4)
VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}
LANES = {1: ("",), 2: (".x", ".y"), 4: (".x", ".y", ".z", ".w")}


@dataclass(frozen=True)
class LaunchParams:
    """One launch configuration.

    Attributes:
        block_size: Threads per block.
        items_per_thread: Vectors each thread handles.
        vector_width: Floats per load and store (1, 2 or 4).
    """

    block_size: int = 256
    items_per_thread: int = 1
    vector_width: int = 4

    def __post_init__(self) -> None:
        if self.block_size not in BLOCK_SIZES or self.items_per_thread not in ITEMS_PER_THREAD \
                or self.vector_width not in VECTOR_WIDTHS:
            raise ConfigError(
                f"expected block_size in {BLOCK_SIZES}, items_per_thread in {ITEMS_PER_THREAD}, vector_width in "
                f"{VECTOR_WIDTHS}; got {self.block_size}, {self.items_per_thread}, {self.vector_width}"
            )

    @property
    def per_block(self) -> int:
        """Floats one block covers in one pass."""
        return self.block_size * self.items_per_thread * self.vector_width


def all_params() -> Iterator[LaunchParams]:
    """Every configuration of the grid (block size x items per thread x vector width), in a fixed order."""
    for b, i, v in itertools.product(BLOCK_SIZES, ITEMS_PER_THREAD, VECTOR_WIDTHS):
        yield LaunchParams(b, i, v)


class Family(Protocol):
    """A bundled task's raw-format solution as a function of the launch configuration."""

    @property
    def task_id(self) -> str:
        """The bundled task it solves."""
        ...

    @property
    def name(self) -> str:
        """The kernel's (and the ``.cu`` file's) name."""
        ...

    def files(self, params: LaunchParams) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        ...
