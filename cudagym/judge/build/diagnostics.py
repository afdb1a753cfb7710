"""Compiler output as records: located diagnostics and per-kernel resources.

Understands the message formats of the tools a build runs:

- gcc/g++ (``file:line:col: error: msg``), also how nvcc reports a missing include;
- nvcc's and NVRTC's EDG front end (``file(line): error: msg``, then the source line and a caret);
- ptxas (``ptxas error   : msg``) and nvlink / nvcc fatal errors;
- the linker (``undefined reference to `x'``, ``multiple definition of `x'``, ``cannot find -lfoo``, any other
  ``ld:`` message).

Files are mapped back to the agent's relative paths (``kernels/relu.cu``): build directories are
stripped, other host paths become placeholders (``<torch>/include/...``, :mod:`cudagym.judge.hostpaths`),
messages located in toolchain headers are folded into one line per header, and lines of generated files
(load_inline's ``main.cpp``) are mapped into the file the source
came from. ``ptxas -v`` output becomes one :class:`KernelResources` per entry function, names demangled
with ``c++filt`` when it is installed.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cudagym.judge import hostpaths
from cudagym.judge.records import Diagnostic, KernelResources, Severity

_GCC = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? "
    r"(?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
_EDG = re.compile(
    r"^(?P<file>\S.*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)"
    r"(?: #(?P<code>[\w-]+))?: (?P<msg>.*)$"
)
_TOOL = re.compile(r"^(?P<tool>ptxas|nvlink|nvcc|fatbinary)\s+(?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_LD_UNDEF = re.compile(r"^(?P<obj>[^:]+):\([^)]*\): (?P<msg>undefined reference to .*)$")
_LD_PROGRAM = r"^(?:\S*/)?ld(?:\.\w+)?"
_LD_MULTIPLE = re.compile(_LD_PROGRAM + r": (?P<obj>[^:]+):\([^)]*\): (?P<msg>multiple definition of `[^']*')"
                          r"(?:; (?P<first>[^:]+):\([^)]*\): first defined here)?$")
# the judge names the module's init with --defsym: nothing defines it when load_inline(functions=None) sources
# hold no PYBIND11_MODULE
_LD_NO_INIT = re.compile(_LD_PROGRAM + r":--defsym:\d+: undefined symbol `PyInit_\w+' referenced in expression$")
_LD_CONTEXT = re.compile(_LD_PROGRAM + r": .*: in function `.*':$")  # names where the next message is
_LD = re.compile(_LD_PROGRAM + r": (?P<warn>warning: )?(?P<msg>.*\S.*)$")
NO_MODULE_INIT = ("the extension defines no Python module: nothing defines PYBIND11_MODULE(TORCH_EXTENSION_NAME, m); "
                  "with load_inline(functions=None) the sources must define it themselves (or pass functions=[...])")
_SEVERITY = {
    "fatal error": Severity.ERROR, "catastrophic error": Severity.ERROR, "fatal": Severity.ERROR,
    "error": Severity.ERROR, "warning": Severity.WARNING, "note": Severity.NOTE, "remark": Severity.NOTE,
}

_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '(?P<name>[^']+)'")
_PROPS_FOR = re.compile(r"ptxas info\s*: Function properties for (?P<name>\S+)")
_PROPS = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads"
)
_USED = re.compile(r"ptxas info\s*: Used (?P<regs>\d+) registers(?P<rest>.*)$")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")


@dataclass(frozen=True)
class Segment:
    """Lines ``first..last`` (1-based, inclusive) of a generated file came from ``file`` at ``file_line``."""

    first: int
    last: int
    file: str
    file_line: int


@dataclass(frozen=True)
class PathMap:
    """How build paths map back to the agent's files.

    Attributes:
        prefixes: Build directories to strip from paths (with or without a trailing slash).
        generated: Generated file name -> its segments, for files assembled from the agent's sources.
        names: Host file -> the agent's name for it (a cached object -> the source it was compiled from).
    """

    prefixes: tuple[str, ...] = ()
    generated: Mapping[str, tuple[Segment, ...]] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)

    def relative(self, path: str) -> str:
        """``path`` with any build directory stripped, or the agent's name of a known host file."""
        if path in self.names:
            return self.names[path]
        for prefix in sorted(self.prefixes, key=len, reverse=True):
            root = prefix.rstrip("/") + "/"
            if path.startswith(root):
                return path[len(root):]
        return path.removeprefix("./")

    def locate(self, path: str, line: int) -> tuple[str, int]:
        """The agent's file and line for a (possibly generated) build file's line."""
        rel = self.relative(path)
        for seg in self.generated.get(rel, ()):
            if seg.first <= line <= seg.last:
                return seg.file, seg.file_line + (line - seg.first)
        return rel, line

    def scrub(self, text: str) -> str:
        """Tool output with build directories removed and other host paths as placeholders.

        The agent sees its own relative paths; the rest become :mod:`cudagym.judge.hostpaths` placeholders.
        """
        return hostpaths.scrub(text, more=[*((p, "") for p in self.prefixes), *self.names.items()])


def parse_diagnostics(output: str, *, tool: str, paths: PathMap | None = None) -> tuple[Diagnostic, ...]:
    """Errors, warnings and notes in one tool's output, in order.

    Args:
        output: What the tool printed (stdout and stderr).
        tool: Name recorded on messages whose format does not name a tool (``nvcc``, ``c++``, ``nvrtc``).
        paths: Build-path mapping; ``None`` keeps paths as printed.
    """
    paths = paths or PathMap()
    lines = output.splitlines()
    found: list[Diagnostic] = []
    for i, line in enumerate(lines):
        diag = _parse_line(line, tool, paths)
        if diag is None:
            continue
        if tool in ("nvcc", "nvrtc") and diag.line and not diag.column:
            diag = _with_caret_column(diag, lines, i)
        found.append(dataclasses.replace(diag, file=paths.scrub(diag.file), message=paths.scrub(diag.message)))
    return _fold_toolchain(found)


def _fold_toolchain(found: list[Diagnostic]) -> tuple[Diagnostic, ...]:
    """Messages located in toolchain or system headers, reduced to one line per header (at the first one)."""
    out: list[Diagnostic] = []
    folded: dict[str, int] = {}
    counts: dict[str, int] = {}
    for diag in found:
        if not (diag.file and hostpaths.is_toolchain_file(diag.file)):
            out.append(diag)
            continue
        counts[diag.file] = counts.get(diag.file, 0) + 1
        if diag.file not in folded:
            folded[diag.file] = len(out)
            out.append(dataclasses.replace(diag, line=0, column=0))
        elif _RANK[diag.severity] > _RANK[out[folded[diag.file]].severity]:
            out[folded[diag.file]] = dataclasses.replace(out[folded[diag.file]], severity=diag.severity)
    for file, index in folded.items():
        if counts[file] > 1:
            first = out[index]
            out[index] = dataclasses.replace(first, message=f"{counts[file]} messages in this header "
                                             f"(toolchain header; first: {first.message})")
    return tuple(out)


_RANK = {Severity.NOTE: 0, Severity.WARNING: 1, Severity.ERROR: 2}


def _parse_line(line: str, tool: str, paths: PathMap) -> Diagnostic | None:
    if m := _EDG.match(line):
        file, lineno = paths.locate(m["file"], int(m["line"]))
        msg = f"#{m['code']}: {m['msg']}" if m["code"] else m["msg"]
        return Diagnostic(_SEVERITY[m["sev"]], msg.strip(), file, lineno, 0, tool)
    if m := _GCC.match(line):
        file, lineno = paths.locate(m["file"], int(m["line"]))
        return Diagnostic(_SEVERITY[m["sev"]], m["msg"].strip(), file, lineno, int(m["col"] or 0), tool)
    if m := _TOOL.match(line):
        return Diagnostic(_SEVERITY[m["sev"]], m["msg"].strip(), tool=m["tool"])
    return _parse_ld_line(line, paths)


def _parse_ld_line(line: str, paths: PathMap) -> Diagnostic | None:
    if m := _LD_UNDEF.match(line):
        return Diagnostic(Severity.ERROR, m["msg"].strip(), tool="ld")
    if m := _LD_MULTIPLE.match(line):
        first = f" (first defined in {paths.relative(m['first'])})" if m["first"] else ""
        return Diagnostic(Severity.ERROR, m["msg"] + first, paths.relative(m["obj"]), tool="ld")
    if _LD_NO_INIT.match(line):
        return Diagnostic(Severity.ERROR, NO_MODULE_INIT, tool="ld")
    if _LD_CONTEXT.match(line):
        return None
    if m := _LD.match(line):
        return Diagnostic(Severity.WARNING if m["warn"] else Severity.ERROR, m["msg"].strip(), tool="ld")
    return None


def _with_caret_column(diag: Diagnostic, lines: list[str], i: int) -> Diagnostic:
    # EDG echoes the source line indented by two extra spaces, then a caret under the column
    if i + 2 < len(lines):
        caret = lines[i + 2]
        if caret.strip() == "^":
            return Diagnostic(diag.severity, diag.message, diag.file, diag.line, max(caret.index("^") - 1, 1),
                              diag.tool)
    return diag


def parse_ptxas_resources(output: str, *, cxxfilt: str = "") -> tuple[KernelResources, ...]:
    """Per-entry-function resources from ``ptxas -v`` output (one record per kernel and arch).

    Args:
        output: Compiler output containing ``ptxas info`` lines.
        cxxfilt: Path of ``c++filt`` to demangle names, or ``""`` to keep them mangled.
    """
    entries: list[dict[str, int | str]] = []
    props: dict[str, tuple[int, int, int]] = {}
    current: dict[str, int | str] | None = None
    props_target = ""
    for line in output.splitlines():
        if m := _ENTRY.search(line):
            current = {"kernel": m["name"]}
            entries.append(current)
        elif m := _PROPS_FOR.search(line):
            props_target = m["name"]
        elif (m := _PROPS.search(line)) and props_target:
            props[props_target] = (int(m["stack"]), int(m["st"]), int(m["ld"]))
        elif (m := _USED.search(line)) and current is not None:
            current["registers"] = int(m["regs"])
            current["smem"] = sum(int(x) for x in _SMEM.findall(m["rest"]))
            current["cmem"] = sum(int(x) for x in _CMEM.findall(m["rest"]))
    names = demangle([str(e["kernel"]) for e in entries], cxxfilt=cxxfilt)
    out = []
    for entry, name in zip(entries, names, strict=True):
        stack, spill_st, spill_ld = props.get(str(entry["kernel"]), (0, 0, 0))
        out.append(KernelResources(
            kernel=name, registers=int(entry.get("registers", 0)), shared_mem_bytes=int(entry.get("smem", 0)),
            constant_mem_bytes=int(entry.get("cmem", 0)), stack_frame_bytes=stack,
            spill_stores_bytes=spill_st, spill_loads_bytes=spill_ld,
        ))
    return tuple(out)


def demangle(names: Iterable[str], *, cxxfilt: str = "") -> list[str]:
    """C++ names demangled by ``c++filt`` (unchanged when it is absent or fails)."""
    names = list(names)
    mangled = [n for n in names if n.startswith("_Z")]
    if not cxxfilt or not mangled:
        return names
    try:
        proc = subprocess.run([cxxfilt], input="\n".join(mangled) + "\n", capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return names
    plain = proc.stdout.splitlines()
    if proc.returncode != 0 or len(plain) != len(mangled):
        return names
    table = dict(zip(mangled, plain, strict=True))
    return [table.get(n, n) for n in names]


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    """True when any diagnostic is an error."""
    return any(d.severity is Severity.ERROR for d in diagnostics)
