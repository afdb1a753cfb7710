"""Solution formats and the solution snapshot the judge receives.

A *format* says which files an agent writes and how the judge builds them:

- ``extension`` (default; the CUDA Agent layout): ``model_new.py`` + ``kernels/<op>.cu`` (pure CUDA, an
  ``extern "C"`` launcher taking raw pointers and a stream) + ``kernels/<op>_binding.cpp`` (tensor glue,
  registered with ``REGISTER_BINDING``), behind the protected ``binding.cpp`` / ``binding_registry.h``;
  built as one torch extension imported as ``cuda_extension``.
- ``inline`` (KernelBench's): one ``model_new.py`` calling ``torch.utils.cpp_extension.load_inline``.
- ``raw`` (the fast path): ``kernels/*.cu`` holding ``extern "C" __global__`` kernels, compiled to cubin
  and launched from ``model_new.py`` through :mod:`cudagym.runtime` with torch tensors.

A :class:`Solution` is a snapshot of the agent's files for one format: only the files the format allows,
text only. The judge adds the protected files from its own copy, never the agent's.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from cudagym.errors import ConfigError

TEMPLATES = "cudagym.templates"


@dataclass(frozen=True)
class SolutionFormat:
    """What an agent writes for one solution format.

    Attributes:
        name: ``extension``, ``inline`` or ``raw``.
        summary: One line for the task prompt.
        editable: Glob patterns (relative to the workspace) of the files the agent may write.
        required: Files that must exist for a build.
        protected: Files the judge supplies (from ``cudagym/templates/<name>/``); read-only in the workspace.
        build_inputs: Globs of the editable files that the build compiles (``model_new.py`` is loaded,
            not compiled, in the ``extension`` and ``raw`` formats).
    """

    name: str
    summary: str
    editable: tuple[str, ...]
    required: tuple[str, ...]
    protected: tuple[str, ...] = ()
    build_inputs: tuple[str, ...] = ()

    def is_editable(self, relpath: str) -> bool:
        """True when the agent may write ``relpath`` in this format."""
        return relpath not in self.protected and any(_match(relpath, pat) for pat in self.editable)

    def template_files(self) -> dict[str, str]:
        """The protected files' contents, from the package (never from a workspace)."""
        root = resources.files(TEMPLATES).joinpath(self.name)
        return {rel: root.joinpath(rel).read_text(encoding="utf-8") for rel in self.protected}

    def example_files(self, example: str = "relu") -> dict[str, str]:
        """A worked example solution in this format (``cudagym.templates.EXAMPLES`` names them)."""
        root = resources.files(TEMPLATES).joinpath("examples").joinpath(example).joinpath(self.name)
        out: dict[str, str] = {}
        stack = [(root, "")]
        while stack:
            node, prefix = stack.pop()
            for child in node.iterdir():
                rel = f"{prefix}{child.name}"
                if child.is_dir():
                    stack.append((child, rel + "/"))
                elif not child.name.startswith("__") and not child.name.endswith(".pyc"):
                    out[rel] = child.read_text(encoding="utf-8")
        return dict(sorted(out.items()))


FORMATS: dict[str, SolutionFormat] = {
    "extension": SolutionFormat(
        name="extension",
        summary="model_new.py + kernels/<op>.cu (CUDA, extern \"C\" launcher) + kernels/<op>_binding.cpp "
        "(torch glue), built as the torch extension `cuda_extension`",
        editable=("model_new.py", "kernels/*.cu", "kernels/*.cuh", "kernels/*.h", "kernels/*.cpp"),
        required=("model_new.py",),
        protected=("binding.cpp", "binding_registry.h"),
        build_inputs=("kernels/*.cu", "kernels/*.cuh", "kernels/*.h", "kernels/*.cpp"),
    ),
    "inline": SolutionFormat(
        name="inline",
        summary="one model_new.py that builds its CUDA with torch.utils.cpp_extension.load_inline "
        "(KernelBench's format)",
        editable=("model_new.py",),
        required=("model_new.py",),
        build_inputs=("model_new.py",),
    ),
    "raw": SolutionFormat(
        name="raw",
        summary="kernels/*.cu with extern \"C\" __global__ kernels, compiled to cubin and launched from "
        "model_new.py through cudagym.runtime",
        editable=("model_new.py", "kernels/*.cu", "kernels/*.cuh"),
        required=("model_new.py",),
        build_inputs=("kernels/*.cu", "kernels/*.cuh"),
    ),
}

DEFAULT_FORMAT = "extension"


def get_format(name: str | SolutionFormat | None) -> SolutionFormat:
    """Resolve a format name.

    Raises:
        ConfigError: Not a str or a SolutionFormat, or a name other than ``extension``, ``inline`` or ``raw``.
    """
    if name is None:
        return FORMATS[DEFAULT_FORMAT]
    if isinstance(name, SolutionFormat):
        return name
    if not isinstance(name, str):
        raise ConfigError(f"expected solution_format to be one of {', '.join(FORMATS)} (a str), a SolutionFormat or "
                          f"None, got {type(name).__name__} {name!r}")
    try:
        return FORMATS[name]
    except KeyError:
        raise ConfigError(
            f"unknown solution format {name!r} (solution_format); expected one of: {', '.join(FORMATS)}"
        ) from None


@dataclass(frozen=True)
class Solution:
    """The agent's files for one format: what the judge builds and runs.

    Attributes:
        format: Format name.
        files: Relative path -> text, only paths the format marks editable.
    """

    format: str
    files: Mapping[str, str] = field(hash=False)

    def __post_init__(self) -> None:
        fmt = get_format(self.format)
        bad = sorted(p for p in self.files if not fmt.is_editable(p))
        if bad:
            raise ConfigError(
                f"solution format {fmt.name!r} does not allow {', '.join(bad)}; "
                f"expected paths matching {', '.join(fmt.editable)}"
            )
        object.__setattr__(self, "files", MappingProxyType(dict(sorted(self.files.items()))))

    def __reduce__(self) -> tuple[object, ...]:
        # the read-only files view does not pickle; rebuild from a plain dict (jobs cross processes)
        return (Solution, (self.format, dict(self.files)))

    @property
    def content_hash(self) -> str:
        """sha256 over the paths and contents of every file."""
        return _hash_files(self.files)

    def build_hash(self) -> str:
        """sha256 over the files the build compiles (edits to ``model_new.py`` alone need no rebuild)."""
        fmt = get_format(self.format)
        picked = {p: t for p, t in self.files.items() if any(_match(p, g) for g in fmt.build_inputs)}
        return _hash_files(picked)

    @classmethod
    def from_dir(cls, root: str | Path, format: str = DEFAULT_FORMAT) -> Solution:
        """Snapshot the editable files under ``root`` (a workspace or a solution folder)."""
        fmt = get_format(format)
        root = Path(root)
        files: dict[str, str] = {}
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            if fmt.is_editable(rel):
                files[rel] = path.read_text(encoding="utf-8", errors="replace")
        return cls(format=fmt.name, files=files)


def _match(relpath: str, pattern: str) -> bool:
    # fnmatch's '*' crosses '/': compare segment by segment so kernels/*.cu never matches kernels/a/b.cu
    parts, pats = relpath.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pats, strict=True))


def _hash_files(files: Mapping[str, str]) -> str:
    """sha256 of the files' paths and texts.

    NUL separates them, which is unambiguous only while no path or text holds a NUL: one file holding
    ``A<NUL>kernels/b.cu<NUL>B`` would hash as the two files ``A`` and ``B``. Files that hold one are hashed
    with each part length-prefixed, behind a tag of its own; files that do not keep the hash they always had
    (build caches, baseline caches and journals are keyed by it).
    """
    parts = [part for path in sorted(files) for part in (path.encode("utf-8", errors="surrogateescape"),
                                                         files[path].encode("utf-8", errors="surrogateescape"))]
    digest = hashlib.sha256()
    if any(b"\x00" in part for part in parts):
        digest.update(b"cudagym-files-v2\x00")
        for part in parts:
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    else:
        for part in parts:
            digest.update(part)
            digest.update(b"\x00")
    return digest.hexdigest()
