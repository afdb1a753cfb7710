"""Launch-parameter spaces the kernel families are rendered over, and what a family is.

A family's configurations are the product of a few knobs (:class:`Knob`), each a short tuple of values;
:class:`ParamSpace` orders them, turns action indices into a configuration record and back, and lists every
configuration in a fixed order. Each family kind has its own record type (a frozen dataclass whose fields
are the knobs) and its own space:

- :data:`LAUNCH_GRID` (:class:`LaunchParams`): threads per block, items per thread (vectors each thread
  handles per pass, ``#pragma unroll``-ed) and vector width (1, 2 or 4 floats per load: ``float``,
  ``float2``, ``float4``); 5 x 4 x 3 = 60 configurations, shared by the elementwise, row-reduction and scan
  families.
- Tiled GEMMs, depthwise stencils, the column reduction, the L3 blocks and attention define theirs beside
  their kernels (:mod:`cudagym.integrations.matmul_families`, :mod:`cudagym.integrations.stencil_families`,
  :mod:`cudagym.integrations.scan_families`, :mod:`cudagym.integrations.block_families`,
  :mod:`cudagym.integrations.attention_families`).

Every value of every knob combines with every value of the others: a space has no holes, so any action
an agent picks names a configuration that builds and computes the task's result.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from cudagym.errors import ConfigError

BLOCK_SIZES: tuple[int, ...] = (64, 128, 256, 512, 1024)
ITEMS_PER_THREAD: tuple[int, ...] = (1, 2, 4, 8)
VECTOR_WIDTHS: tuple[int, ...] = (1, 2, 4)
VECTOR_TYPES = {1: "float", 2: "float2", 4: "float4"}
LANES = {1: ("",), 2: (".x", ".y"), 4: (".x", ".y", ".z", ".w")}
MAX_KNOBS = 4  # the widest space; the SB3 observation has this many configuration slots

P = TypeVar("P")


def check_knobs(record: Any, space: ParamSpace[Any]) -> None:
    """Raise unless each of ``record``'s fields holds one of its knob's values.

    Raises:
        ConfigError: A field holds a value its knob does not offer.
    """
    got = tuple(getattr(record, k.name) for k in space.knobs)
    if any(v not in k.values for v, k in zip(got, space.knobs, strict=True)):
        expected = ", ".join(f"{k.name} in {k.values}" for k in space.knobs)
        raise ConfigError(f"expected {expected}; got {', '.join(map(str, got))}")


@dataclass(frozen=True)
class Knob:
    """One tunable parameter.

    Attributes:
        name: The configuration record's field.
        values: What it may be, in the order of its action index.
    """

    name: str
    values: tuple[int, ...]


@dataclass(frozen=True)
class ParamSpace(Generic[P]):
    """An ordered product of knobs, each configuration one record of type ``record``.

    Attributes:
        record: The configuration's frozen dataclass; its fields are the knobs' names.
        knobs: The knobs, in action order.
    """

    record: type[P]
    knobs: tuple[Knob, ...]

    def __post_init__(self) -> None:
        fields = tuple(f.name for f in dataclasses.fields(self.record))  # type: ignore[arg-type]
        if fields != tuple(k.name for k in self.knobs) or not 1 <= len(self.knobs) <= MAX_KNOBS:
            raise ConfigError(f"expected up to {MAX_KNOBS} knobs named as {self.record.__name__}'s fields "
                              f"{fields}; got {tuple(k.name for k in self.knobs)}")

    @property
    def nvec(self) -> tuple[int, ...]:
        """How many values each knob has (a ``MultiDiscrete``'s ``nvec``)."""
        return tuple(len(k.values) for k in self.knobs)

    @property
    def size(self) -> int:
        """How many configurations there are."""
        return math.prod(self.nvec)

    def decode(self, indices: Sequence[int]) -> P:
        """The configuration of one index per knob.

        Raises:
            ConfigError: Wrong count or an index out of range.
        """
        if len(indices) != len(self.knobs) or any(not 0 <= i < n for i, n in zip(indices, self.nvec, strict=True)):
            raise ConfigError(f"expected {len(self.knobs)} indices below {self.nvec}, got {tuple(indices)}")
        return self.record(**{k.name: k.values[i] for k, i in zip(self.knobs, indices, strict=True)})

    def indices(self, params: P) -> tuple[int, ...]:
        """Each knob's index in ``params`` (the inverse of :meth:`decode`)."""
        return tuple(k.values.index(getattr(params, k.name)) for k in self.knobs)

    def flat(self, params: P) -> int:
        """The configuration's position in :meth:`configs` (a ``Discrete`` action)."""
        index = 0
        for i, n in zip(self.indices(params), self.nvec, strict=True):
            index = index * n + i
        return index

    def configs(self) -> Iterator[P]:
        """Every configuration, first knob slowest (the order of :meth:`flat`)."""
        for combo in itertools.product(*(range(n) for n in self.nvec)):
            yield self.decode(combo)

    def make(self, **values: int) -> P:
        """The configuration with these knob values (as ``dataclasses.asdict`` gives them)."""
        return self.record(**values)

    def label(self, params: P) -> str:
        """A short name, the knob values joined by ``x`` (``256x1x4``)."""
        return "x".join(str(getattr(params, k.name)) for k in self.knobs)


@dataclass(frozen=True)
class LaunchParams:
    """One configuration of :data:`LAUNCH_GRID`.

    Attributes:
        block_size: Threads per block.
        items_per_thread: Vectors each thread handles.
        vector_width: Floats per load and store (1, 2 or 4).
    """

    block_size: int = 256
    items_per_thread: int = 1
    vector_width: int = 4

    def __post_init__(self) -> None:
        check_knobs(self, LAUNCH_GRID)

    @property
    def per_block(self) -> int:
        """Floats one block covers in one pass."""
        return self.block_size * self.items_per_thread * self.vector_width


LAUNCH_GRID: ParamSpace[LaunchParams] = ParamSpace(LaunchParams, (
    Knob("block_size", BLOCK_SIZES), Knob("items_per_thread", ITEMS_PER_THREAD), Knob("vector_width", VECTOR_WIDTHS),
))


def all_params() -> Iterator[LaunchParams]:
    """Every configuration of :data:`LAUNCH_GRID` (block size x items per thread x vector width), in order."""
    return LAUNCH_GRID.configs()


class OnLaunchGrid:
    """Mixin for the families rendered over :data:`LAUNCH_GRID`, starting at 256 threads x 1 x float4."""

    @property
    def space(self) -> ParamSpace[LaunchParams]:
        """The 60-configuration launch grid."""
        return LAUNCH_GRID

    @property
    def default(self) -> LaunchParams:
        """256 threads, one item per thread, float4."""
        return LaunchParams()


class Family(Protocol):
    """A bundled task's raw-format solution as a function of a launch configuration."""

    @property
    def task_id(self) -> str:
        """The bundled task it solves."""
        ...

    @property
    def name(self) -> str:
        """The kernel's (and the ``.cu`` file's) name."""
        ...

    @property
    def space(self) -> ParamSpace[Any]:
        """The configurations it renders."""
        ...

    @property
    def default(self) -> Any:
        """A sensible configuration to start from (a record of ``space``)."""
        ...

    def files(self, params: Any) -> dict[str, str]:
        """The raw-format solution for ``params``: ``model_new.py`` and ``kernels/<name>.cu``."""
        ...
