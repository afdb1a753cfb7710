"""The ``cudagym`` console script: a small table of subcommands, each a module imported when it runs.

A subcommand module provides ``configure(parser: argparse.ArgumentParser) -> None`` (adds its arguments)
and ``run(args: argparse.Namespace) -> int`` (the exit code). Importing it only when its command runs keeps
``cudagym --help`` fast and lets commands whose modules are not installed fail with a message, not a
traceback.

Exit codes: 0 ok; 2 usage or data errors (message on stderr; a path that cannot be read or written is
one); 1 when the reader of stdout closed the pipe (``| head``), the command's work failed (``demo``: a
solution did not build or scored -1) or an unexpected error was caught (its one-line message on stderr,
the traceback with ``-v``); 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from cudagym import __version__
from cudagym.errors import CudaGymError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 1
EXIT_UNEXPECTED = 1
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Command:
    """One subcommand.

    Attributes:
        module: Dotted module providing ``configure`` and ``run``.
        summary: One line for ``cudagym --help``.
    """

    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "tasks": Command("cudagym.commands.tasks", "list the tasks of a suite, or show one task"),
    "demo": Command("cudagym.baselines.demo", "replay bundled reference solutions through the env's tool calls"),
    "baselines": Command("cudagym.commands.baselines", "time eager and torch.compile baselines for tasks"),
    "judge": Command("cudagym.commands.judge", "serve this host's judge to its other processes (judge serve)"),
    "train": Command("cudagym.baselines.ppo.commands", "PPO baseline stages: rft, critic, ppo"),
    "eval": Command("cudagym.bench.evaluate", "judge one solution folder or model_new.py against a task"),
    "bench": Command("cudagym.bench.runner", "run an agent over tasks, K episodes each, journaled and resumable"),
    "report": Command("cudagym.bench.report", "Table-1 metrics, fast_p, pass@k and plots of a bench run"),
    "export": Command("cudagym.bench.export", "a bench run's episodes as RFT, SFT or chat training data"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cudagym`` command line; returns the exit code."""
    parser = _top_parser()
    try:
        top = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return _exit_code(exc)
    logging.basicConfig(
        level=logging.DEBUG if top.verbose > 1 else logging.INFO if top.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if top.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    command = COMMANDS.get(top.command)
    if command is None:
        _error(f"unknown command {top.command!r}; expected one of: {', '.join(COMMANDS)}")
        return EXIT_USAGE
    module = _import_command(top.command, command)
    if module is None:
        return EXIT_USAGE
    sub = argparse.ArgumentParser(prog=f"cudagym {top.command}", description=command.summary)
    module.configure(sub)
    try:
        args = sub.parse_args(top.args)
        return int(module.run(args))
    except SystemExit as exc:
        return _exit_code(exc)
    except CudaGymError as exc:
        _error(f"{top.command}: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_went_away()
    except OSError as exc:  # a path given on the command line that cannot be read or written
        _error(f"{top.command}: {os_error_text(exc)}")
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the last net: one line, not a traceback from deep inside
        if top.verbose:
            traceback.print_exc()
        _error(f"{top.command}: unexpected {type(exc).__name__}: {exc} (a cudagym bug, or input it does not "
               f"check yet; `cudagym -v {top.command} ...` shows the traceback)")
        return EXIT_UNEXPECTED


def _top_parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:<12}{cmd.summary}" for name, cmd in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="cudagym",
        description="Gymnasium environments for RL agents that write fast, correct CUDA kernels.",
        epilog=f"commands:\n{listing}\n\nRun `cudagym COMMAND --help` for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cudagym {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)")
    parser.add_argument("command", nargs="?", metavar="COMMAND", help=f"one of: {', '.join(COMMANDS)}")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _import_command(name: str, command: Command) -> ModuleType | None:
    try:
        module = importlib.import_module(command.module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (command.module == exc.name or command.module.startswith(exc.name + ".")):
            _error(f"`cudagym {name}` is not available in this install (module {command.module} not found)")
        else:
            _error(f"`cudagym {name}` needs the module {exc.name!r}, which is not installed")
        return None
    missing = [fn for fn in ("configure", "run") if not callable(getattr(module, fn, None))]
    if missing:
        _error(f"`cudagym {name}`: expected {command.module} to define configure() and run(); "
               f"missing {', '.join(missing)}")
        return None
    return module


def _reader_went_away() -> int:
    # `cudagym tasks list | head`: the reader closed the pipe. Point stdout at devnull so the flush at
    # interpreter exit does not raise again, and exit 1 (as the Python docs on SIGPIPE suggest).
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


def os_error_text(exc: OSError) -> str:
    """An OSError as one line that names the path: ``cannot use PATH: Permission denied``."""
    what = exc.strerror or str(exc)
    if exc.filename is None:
        return what
    path = str(exc.filename) if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
    return f"cannot use {path}: {what}"


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return EXIT_OK
    return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def _error(message: str) -> None:
    print(f"cudagym: error: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
