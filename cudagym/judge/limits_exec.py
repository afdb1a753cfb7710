"""Set resource limits, then exec a command: the first program inside every sandbox (stdlib only).

Run as ``python -I -S limits_exec.py LIMITS_JSON -- COMMAND...``; ``LIMITS_JSON`` maps ``as`` (address space,
bytes), ``cpu`` (seconds), ``fsize`` (bytes), ``nofile`` and ``core`` to values (absent keys are left as
they are). It also creates the folders named in ``$HOME`` and ``$TMPDIR``. Importing nothing from cudagym
keeps it at an interpreter start (tens of milliseconds) per compiler call.
"""

from __future__ import annotations

import json
import os
import resource
import sys

_LIMITS = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE,
           "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}


def main(argv: list[str]) -> int:
    """Apply the limits in ``argv[0]`` and exec the command after ``--``."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: limits_exec.py LIMITS_JSON -- COMMAND...", file=sys.stderr)
        return 2
    for name, value in json.loads(argv[0]).items():
        which = _LIMITS[name]
        _, hard = resource.getrlimit(which)
        value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        resource.setrlimit(which, (value, hard))
    for var in ("HOME", "TMPDIR"):
        if os.environ.get(var):
            os.makedirs(os.environ[var], exist_ok=True)
    command = argv[2:]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"cudagym sandbox: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
