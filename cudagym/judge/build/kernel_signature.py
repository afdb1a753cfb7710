"""Parameter lists of ``extern "C" __global__`` kernels, read from CUDA source.

The ``raw`` format launches kernels by name through the driver API, which takes untyped argument
buffers: marshalling a Python ``int`` as 8 bytes for an ``int`` parameter would silently shift every
later argument. So the launcher needs each parameter's C type, and this module reads it from the
source. Supported: any pointer, ``bool``, 8/16/32/64-bit integers (``int``, ``unsigned``, ``long long``,
``int64_t``, ``size_t``, ...), ``float`` and ``double``. A pointer parameter may be marked
``/*strided*/`` (right before its name) to accept non-contiguous tensors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# kind -> (struct format character, size in bytes); "ptr" is a device address
KINDS: dict[str, tuple[str, int]] = {
    "ptr": ("Q", 8), "bool": ("?", 1),
    "i8": ("b", 1), "u8": ("B", 1), "i16": ("h", 2), "u16": ("H", 2),
    "i32": ("i", 4), "u32": ("I", 4), "i64": ("q", 8), "u64": ("Q", 8),
    "f32": ("f", 4), "f64": ("d", 8),
}

_TYPE_KINDS = {
    "bool": "bool", "char": "i8", "signed char": "i8", "int8_t": "i8", "unsigned char": "u8", "uint8_t": "u8",
    "short": "i16", "short int": "i16", "signed short": "i16", "int16_t": "i16",
    "unsigned short": "u16", "unsigned short int": "u16", "uint16_t": "u16",
    "int": "i32", "signed": "i32", "signed int": "i32", "int32_t": "i32",
    "unsigned": "u32", "unsigned int": "u32", "uint32_t": "u32",
    # LP64 (Linux x86-64 and aarch64): long is 64-bit
    "long": "i64", "long int": "i64", "signed long": "i64", "long long": "i64", "long long int": "i64",
    "signed long long": "i64", "int64_t": "i64", "ptrdiff_t": "i64", "ssize_t": "i64",
    "unsigned long": "u64", "unsigned long int": "u64", "unsigned long long": "u64",
    "unsigned long long int": "u64", "uint64_t": "u64", "size_t": "u64",
    "float": "f32", "double": "f64",
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "struct"}
_STRIDED_MARK = re.compile(r"/\*\s*strided\s*\*/")
_STRIDED_TOKEN = " __cudagym_strided__ "
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"')
_EXTERN_C = re.compile(r'extern\s+"C"')
_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*|__cluster_dims__\s*\([^)]*\)\s*|static\s+|inline\s+)*"
    r"void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^)]*)\)"
)


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    Attributes:
        name: Parameter name (``arg<i>`` when unnamed).
        ctype: The C type as written, qualifiers dropped (``float*``, ``int``).
        kind: ``ptr``, ``bool``, ``i8``..``u64``, ``f32``, ``f64``, or ``unsupported``.
        strided: A pointer marked ``/*strided*/``: non-contiguous tensors are allowed.
    """

    name: str
    ctype: str
    kind: str
    strided: bool = False


@dataclass(frozen=True)
class KernelSignature:
    """An ``extern "C" __global__`` kernel's name and parameters."""

    name: str
    params: tuple[Param, ...]

    def to_dict(self) -> dict[str, object]:
        """JSON form (stored in the build manifest)."""
        return {"name": self.name, "params": [[p.name, p.ctype, p.kind, p.strided] for p in self.params]}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> KernelSignature:
        """Inverse of :meth:`to_dict`."""
        params = data["params"]
        assert isinstance(params, list)
        return cls(name=str(data["name"]), params=tuple(Param(str(a), str(b), str(c), bool(d))
                                                         for a, b, c, d in params))


def parse_kernels(source: str) -> tuple[KernelSignature, ...]:
    """Every ``extern "C" __global__`` kernel in ``source`` (single declarations and ``extern "C" {}`` blocks)."""
    text = _STRIDED_MARK.sub(_STRIDED_TOKEN, source)
    text = _STRINGS.sub(lambda m: '"C"' if m.group(0) == '"C"' else '""', _COMMENTS.sub(" ", text))
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    found: dict[str, KernelSignature] = {}
    for region in _extern_c_regions(text):
        for m in _KERNEL.finditer(region):
            if m["name"] not in found:
                found[m["name"]] = KernelSignature(m["name"], _parse_params(m["params"]))
    return tuple(found.values())


def _extern_c_regions(text: str) -> list[str]:
    regions = []
    for m in _EXTERN_C.finditer(text):
        rest = text[m.end():]
        stripped = rest.lstrip()
        if stripped.startswith("{"):
            start = m.end() + (len(rest) - len(stripped))
            regions.append(text[start:_matching_brace(text, start)])
        else:
            # a single declaration: up to its body or its semicolon
            end = min((i for i in (rest.find("{"), rest.find(";")) if i >= 0), default=len(rest))
            regions.append(rest[:end])
    return regions


def _matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _parse_params(text: str) -> tuple[Param, ...]:
    text = text.strip()
    if not text or text == "void":
        return ()
    return tuple(_parse_param(part, i) for i, part in enumerate(_split_top(text)))


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _parse_param(text: str, index: int) -> Param:
    text = text.split("=")[0]
    strided = _STRIDED_TOKEN.strip() in text
    text = text.replace(_STRIDED_TOKEN.strip(), " ")
    is_ptr = "*" in text or "[" in text or "&" in text
    words = [w for w in re.findall(r"[A-Za-z_][\w:]*", text) if w not in _QUALIFIERS]
    words = [w.removeprefix("std::") for w in words]
    type_words = words
    name = f"arg{index}"
    if len(words) >= 2 and " ".join(words) not in _TYPE_KINDS:
        type_words, name = words[:-1], words[-1]
    base = " ".join(type_words)
    if is_ptr:
        return Param(name, f"{base}*", "ptr", strided)
    return Param(name, base, _TYPE_KINDS.get(base, "unsupported"), strided)
