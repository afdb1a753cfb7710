"""Does queueing a forward behind a stream wait put GPU work beside it? One process, two streams, a profile.

`L2/19`'s honest reference is `unverifiable_timing` because the judge's staging before its go grows by about 2.1 ms
in every timed call (`benchmarks/staging_probe.py`: only where cuDNN's `ConvTranspose2d` runs at batch 128; at
batch 120 or 64, without cuDNN, and for a conv, GELU, GroupNorm or a copy of the same size, it does not). This
probe asks the same question in one process, where the profiler sees every stream: a forward is queued on a stream
that waits for a word
(``cuStreamWaitValue32``, as the runner's call waits for the judge's go), then a staging of the same size as the
judge's (a 2 GiB copy, a 2 GiB fill, the L2 flush's 256 MiB fill) runs on another stream between two events, then
the word is written. Per forward it prints the staging's median time and every other GPU activity of the round up
to the staging's end (name, start and length), from ``torch.profiler``, and the host's CUDA API calls per round.

With ``--split`` the forwards are queued in a second process instead (its own CUDA context, as the judge's runner's),
which reports its context's GPU work that began before the go and its host's CUDA calls; the staging is timed here.
Both processes run under ``--protocol``'s precision switches (default: the default protocol's, cuDNN TF32 off, under
which the judge saw the excess; cuDNN then takes another algorithm for the transposed conv than with TF32 on). Its
first run (session 41, H100) had torch's defaults instead (cuDNN TF32 on): cuDNN ran the transposed conv through its
TF32 path (``nchwToNhwcKernel`` first, after the go), no variant put work beside the staging in either mode, and
the staging took 2.15-2.24 ms (median) with every forward, ``none`` included: not the judge's conditions.

    python3 benchmarks/launch_probe.py [--split [--stage-first]] [--rounds N] [--variants NAME ...] [--protocol SPEC]
                                       [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

GIB = 1 << 30
ARM_WAIT_S = 5.0  # --split: the staging goes ahead of a forward not queued by then (late: its host waits inside)
MARK = "spin_kernel"  # torch.cuda._sleep's kernel: each round's first GPU work, queued before the forward's launch
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor"
# the forwards queued behind the wait, in the order they run: the key pair first. Of the staging probe's variants
# only the transposed conv at batch 128 had the excess, and only its output (2.18 GB) passed 2^31 bytes (a GELU or
# padded conv at 128 make 2 GiB exactly, the transposed conv at 120 2.04 GB); so a GELU past it, and the transposed
# conv without its bias (whose add ran as two kernels there), tell size from cuDNN. And a GELU run on a second stream
# that waits for the queued one (a second channel of the context with work behind the go, as a library's internal
# stream would have): whether a waiting channel alone takes GPU time slices from the staging. And 2,000 tiny kernels
# (cuDNN's fp32 FFT path launches about 1,900 a forward for L1/71's transposed conv, 3,700 for L1/57's): whether a
# deep queue behind the wait blocks the host or slows the other context (in one process a launch that blocks there
# never returns: run it with --split, whose late path lets the staging and the go through)
# Session 43 (H100, split, the default's fp32): the staging grew by ~2.04 ms with every forward that had a second
# stream behind the go (the three transposed convs: cuDNN's fp32 path waits on events 97 times a forward; the GELU on
# a side stream), with none of the single-stream ones (GELU, conv, 2,000 kernels), and no GPU work of the second
# context began before the go. So three more: two side streams (one slice each, or one for all?), a side stream
# behind the go with no kernel on it (is a waiting channel enough?), and --stage-first (the staging done before the
# other process queues anything: does the excess vanish, or move into the round?)
VARIANTS = ("none", "conv_transpose_b128", "conv_transpose_b120", "conv_transpose_b128_nobias", "gelu_b136",
            "gelu_b128", "conv_b128", "gelu_b128_side_stream", "small_kernels_2000", "gelu_b128_two_side_streams",
            "gelu_b128_empty_side_stream")
SPLIT_ONLY = ("small_kernels_2000",)


def forwards(torch: Any) -> dict[str, Callable[[], Any]]:
    """The forwards queued behind the wait, each on its own module and input (built on first use)."""
    nn = torch.nn
    made: dict[str, Any] = {}

    def batch_of(batch: int) -> Any:
        if f"x{batch}" not in made:
            made[f"x{batch}"] = torch.rand(batch, 64, 256, 256, device="cuda")
        return made[f"x{batch}"]

    def module(key: str, build: Callable[[], Any]) -> Any:
        if key not in made:
            made[key] = build().cuda()
        return made[key]

    def conv_transpose(batch: int, bias: bool = True) -> Callable[[], Any]:
        return lambda: module(f"ct{bias}", lambda: nn.ConvTranspose2d(64, 64, 3, bias=bias))(batch_of(batch))

    def gelu(batch: int) -> Callable[[], Any]:
        return lambda: torch.nn.functional.gelu(batch_of(batch))

    def conv() -> Any:
        return module("conv", lambda: nn.Conv2d(64, 64, 3, padding=1))(batch_of(128))

    def side_stream_gelu() -> Any:
        queued = torch.cuda.current_stream()
        if "side_stream" not in made:
            made["side_stream"] = torch.cuda.Stream()
        stream = made["side_stream"]
        stream.wait_stream(queued)  # behind the queued stream's wait for the word
        with torch.cuda.stream(stream):
            out = torch.nn.functional.gelu(batch_of(128))
        queued.wait_stream(stream)
        return out

    def side_streams(count: int) -> Any:
        queued = torch.cuda.current_stream()
        if f"side{count}" not in made:  # made once: a stream created per call would add its API calls to the round's
            made[f"side{count}"] = [torch.cuda.Stream() for _ in range(count)]
        streams = made[f"side{count}"]
        x = batch_of(128)
        parts = x.chunk(count)
        outs = []
        for stream, part in zip(streams, parts, strict=True):
            stream.wait_stream(queued)  # each behind the queued stream's wait for the word
            with torch.cuda.stream(stream):
                outs.append(torch.nn.functional.gelu(part))
        for stream in streams:
            queued.wait_stream(stream)
        return outs

    def empty_side_stream() -> Any:
        queued = torch.cuda.current_stream()
        if "empty_side" not in made:
            made["empty_side"] = torch.cuda.Stream()
        stream = made["empty_side"]
        stream.wait_stream(queued)  # a channel waiting behind the go, with nothing queued after its wait
        queued.wait_stream(stream)
        return torch.nn.functional.gelu(batch_of(128))

    def small_kernels(count: int) -> Callable[[], Any]:
        def queue() -> Any:
            if "one" not in made:
                made["one"] = torch.zeros(1, device="cuda")
            for _ in range(count):
                made["one"].add_(1.0)
            return made["one"]
        return queue

    return {"none": lambda: None, "conv_transpose_b128": conv_transpose(128),
            "conv_transpose_b120": conv_transpose(120), "conv_transpose_b128_nobias": conv_transpose(128, bias=False),
            "gelu_b136": gelu(136), "gelu_b128": gelu(128), "conv_b128": conv,
            "gelu_b128_side_stream": side_stream_gelu, "small_kernels_2000": small_kernels(2000),
            "gelu_b128_two_side_streams": lambda: side_streams(2), "gelu_b128_empty_side_stream": empty_side_stream}


def staging_buffers(torch: Any) -> tuple[Any, Any, Any, Any]:
    """A staging's buffers as the judge's (2 GiB of inputs and their place, 2 GiB of outputs to poison, the L2
    flush's 256 MiB), each of its kernels run once (a first launch may load a module, which waits for the context)."""
    src = torch.rand(GIB // 2, device="cuda")
    dst, out, flush = torch.empty_like(src), torch.empty(GIB // 2, device="cuda"), torch.empty(64 << 20, device="cuda")
    dst.copy_(src)
    out.fill_(float("nan"))
    flush.fill_(1.0)
    return src, dst, out, flush


def stage(torch: Any, stream: Any, buffers: tuple[Any, Any, Any, Any], word: int, n: int, go: bool = True) -> float:
    """One staging as the judge's, timed on ``stream`` (µs), then the word set to ``n``, then the GPU idle.

    ``buffers``: the inputs' source and place, the outputs to poison, the L2 flush's buffer. ``go=False``: the
    word is left as it is (``--stage-first`` writes it once the other process has queued).
    """
    from cudagym.judge.split.signals import write_value

    src, dst, out, flush = buffers
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    dst.copy_(src)
    out.fill_(float("nan"))
    flush.fill_(1.0)
    end.record(stream)
    if go:
        write_value(stream.cuda_stream, word, n)
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) * 1000.0


def _expect(child: Any, prefix: str, within_s: float | None = None) -> str | None:
    """The queueing process's next line, which must start with ``prefix`` (else what it said, and its end).

    ``within_s``: None if it has said nothing by then (only where it has nothing else to say first: the
    line is looked for on its pipe, not in what an earlier read may have buffered).
    """
    if within_s is not None:
        import select

        if not select.select([child.stdout], [], [], within_s)[0]:
            return None
    line = child.stdout.readline()
    if not line.startswith(prefix):
        child.kill()
        raise RuntimeError(f"the queueing process said {line!r} where {prefix!r} was due (exit {child.wait()})")
    return line[len(prefix):].strip()


def use_precision(spec: str) -> str:
    """Sets torch's switches as protocol ``spec``'s evaluations run (its TF32 for matmuls and cuDNN); says which."""
    from cudagym.judge.harness.integrity import protocol_flags
    from cudagym.judge.protocol import get_protocol

    protocol = get_protocol(spec)
    protocol_flags(protocol.matmul_tf32, protocol.cudnn_tf32).apply()
    return (f"{protocol.id}: TF32 {'on' if protocol.matmul_tf32 else 'off'} for matmuls, "
            f"{'on' if protocol.cudnn_tf32 else 'off'} for cuDNN")


def split(names: list[str], rounds: int, json_path: str, spec: str, stage_first: bool = False,
          child_env: dict[str, str] | None = None) -> int:
    """The staging here, the forwards queued behind the word in a second process (its own context, as the runner's).

    ``stage_first``: each round's staging is done (the GPU idle) before the other process queues its forward, and the
    word is written once it has: no channel of the other context waits behind the go during the staging. Each row
    also has the round's wall time on this host's clock (from asking for the round to its end), which compares the
    two orders: an excess that vanished, or one that moved from the staging into the round. ``child_env``: variables
    set in the second process alone (e.g. ``CUDA_DEVICE_MAX_CONNECTIONS=1``: all its streams on one hardware queue).
    """
    import os
    import subprocess
    import time

    import torch

    from cudagym.judge.split.arena import DeviceArena
    from cudagym.judge.split.signals import write_value

    arena = DeviceArena(4096, torch.device("cuda", torch.cuda.current_device()))
    arena.tensor.zero_()
    word = arena.tensor.data_ptr()
    fd = arena.descriptor()
    buffers = staging_buffers(torch)
    stream = torch.cuda.current_stream()
    write_value(stream.cuda_stream, word, 0)
    torch.cuda.synchronize()
    child = subprocess.Popen([sys.executable, __file__, "--child", str(fd), "--rounds", str(rounds), "--protocol",
                              spec, "--variants", *names], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             bufsize=1, pass_fds=[fd], env={**os.environ, **(child_env or {})})
    os.close(fd)
    assert child.stdin is not None and child.stdout is not None
    rows: list[dict[str, Any]] = []
    n = 0
    try:
        _expect(child, "ready")
        for name in names:
            _expect(child, f"variant {name}")
            times: list[float] = []
            walls: list[float] = []
            late = 0
            for _ in range(rounds):
                n += 1
                began = time.perf_counter()
                if stage_first:
                    times.append(stage(torch, stream, buffers, word, n, go=False))
                child.stdin.write(f"round {n}\n")
                child.stdin.flush()
                # the whole forward queued behind the word in the other context; else (a forward that waits for
                # its GPU inside would never finish queueing) the staging and the word go ahead, as the judge's go
                armed = _expect(child, f"armed {n}", ARM_WAIT_S) is not None
                late += not armed
                if stage_first:
                    write_value(stream.cuda_stream, word, n)
                    torch.cuda.synchronize()
                else:
                    times.append(stage(torch, stream, buffers, word, n))
                if not armed:
                    _expect(child, f"armed {n}")
                _expect(child, f"done {n}")
                walls.append((time.perf_counter() - began) * 1e6)
            seen = json.loads(_expect(child, "report ") or "{}")
            row = {"forward": name, "split": True, "stage_first": stage_first, "rounds": len(times),
                   "late_rounds": late, "staging_median_us": round(statistics.median(times), 1),
                   "staging_max_us": round(max(times), 1), "round_wall_median_us": round(statistics.median(walls), 1),
                   **seen}
            rows.append(row)
            order = "staged first" if stage_first else "second process"
            print(f"{name:22s} ({order}) staging median {row['staging_median_us']:9.1f} us, max "
                  f"{row['staging_max_us']:9.1f} us ({late} late); round {row['round_wall_median_us']:9.1f} us; its "
                  f"forward {row['forward_median_us']:9.1f} us after the go; its context's GPU work before the go "
                  "(rounds, median start from the go, length):", flush=True)
            api = seen["api_calls_per_round"]
            print("    its host API calls per round: " + ", ".join(f"{k} {v:g}" for k, v in api.items()))
            for b in seen["before_go"]:
                print(f"    {b['rounds']:3d} x  {b['start_us']:+10.1f} us  {b['length_us']:9.1f} us  {b['name']}")
        child.stdin.close()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


def queue_report(every: list[Any], rounds: int) -> dict[str, Any]:
    """What :func:`queue_side` saw of its last ``rounds`` rounds in a profile's events (``torch.profiler``'s).

    Each round is a ``round N`` host range holding its queueing; its GPU work is what began from there to the next
    round's range, the go's mark (:data:`MARK`) among it. Reported: the work that began before the mark (before
    the go, so beside the other process's staging), per name with its rounds, median start from the mark (µs,
    negative) and length; the median span from the mark to the round's last GPU work; the host's CUDA calls per
    round.
    """
    def on_gpu(e: Any) -> bool:
        return str(getattr(e, "device_type", "")).endswith("CUDA")

    gpu = sorted((e for e in every if on_gpu(e)), key=lambda e: e.time_range.start)
    starts = sorted(e.time_range.start for e in every if not on_gpu(e) and e.name.startswith("round "))[-rounds:]
    marks = [e for e in gpu if MARK in e.name][-rounds:]
    found: dict[str, list[tuple[float, float]]] = {}
    spans: list[float] = []
    for i, (began, mark) in enumerate(zip(starts, marks, strict=False)):
        until = starts[i + 1] if i + 1 < len(starts) else float("inf")
        mine = [e for e in gpu if began <= e.time_range.start < until and e is not mark]
        for e in mine:
            if e.time_range.start < mark.time_range.start:
                found.setdefault(e.name[:110], []).append((e.time_range.start - mark.time_range.start,
                                                            e.time_range.end - e.time_range.start))
        spans.append(max((e.time_range.end for e in mine), default=mark.time_range.end) - mark.time_range.start)
    calls: dict[str, int] = {}
    for e in every:
        if not on_gpu(e) and e.name.startswith(("cuda", "cu")):
            calls[e.name] = calls.get(e.name, 0) + 1
    return {
        "forward_median_us": round(statistics.median(spans), 1) if spans else 0.0,
        "api_calls_per_round": {k: round(v / rounds, 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])},
        "before_go": [{"name": k, "rounds": len(v), "start_us": round(statistics.median(a for a, _ in v), 1),
                       "length_us": round(statistics.median(b for _, b in v), 1)} for k, v in found.items()]}


def queue_side(fd: int, names: list[str], rounds: int) -> int:
    """The second process of :func:`split`: each round queues a forward behind the word, told by its stdin."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from cudagym.judge.split.arena import attach_arena
    from cudagym.judge.split.signals import wait_value

    arena = attach_arena(fd, 4096, torch.device("cuda", torch.cuda.current_device()))
    word = arena.tensor.data_ptr()
    table = forwards(torch)
    blocked = torch.cuda.Stream()
    torch.cuda._sleep(1)  # every kernel runs once before a stream waits (a lazy module load would wait for it)
    with torch.cuda.stream(blocked):
        torch.cuda._sleep(1)
    wait_value(blocked.cuda_stream, word, 0)
    torch.cuda.synchronize()
    print("ready", flush=True)
    for name in names:
        forward = table[name]
        with torch.cuda.stream(blocked):  # warm-up on the stream it runs on
            for _ in range(2):
                forward()
        torch.cuda.synchronize()
        print(f"variant {name}", flush=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(rounds):
                n = int(sys.stdin.readline().split()[1])
                with record_function(f"round {n}"), torch.cuda.stream(blocked):
                    wait_value(blocked.cuda_stream, word, n)
                    torch.cuda._sleep(1)  # the go's mark: runs as soon as the word is written
                    kept = forward()
                print(f"armed {n}", flush=True)
                torch.cuda.synchronize()
                del kept
                print(f"done {n}", flush=True)
        report = queue_report(list(prof.events()), rounds)
        print("report " + json.dumps(report), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=None,
                        help="default: all (in one process, all but " + ", ".join(SPLIT_ONLY) + ")")
    parser.add_argument("--json", default="", help="also write the rows here")
    parser.add_argument("--protocol", default="cudagym",
                        help="the protocol whose precision switches both processes run under (default: %(default)s)")
    parser.add_argument("--split", action="store_true",
                        help="queue the forwards in a second process (its own CUDA context, as the judge's runner)")
    parser.add_argument("--stage-first", action="store_true",
                        help="with --split: stage before the second process queues (nothing of it waits behind the go)")
    parser.add_argument("--child-env", nargs="+", default=[], metavar="NAME=VALUE",
                        help="with --split: environment variables for the second process alone")
    parser.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)  # the second process: the word's fd
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.stage_first and not args.split:
        parser.error("--stage-first needs --split (in one process the staging and the forward share a context)")
    if any(item.partition("=")[0] == "" or "=" not in item for item in args.child_env):
        parser.error("--child-env takes NAME=VALUE pairs")
    child_env = dict(item.split("=", 1) for item in args.child_env)
    if child_env and not args.split:
        parser.error("--child-env needs --split (the variables are for the second process)")
    one_process = not args.split and args.child < 0
    if args.variants is None:
        args.variants = [v for v in VARIANTS if not (one_process and v in SPLIT_ONLY)]
    elif one_process and set(args.variants) & set(SPLIT_ONLY):
        parser.error(f"{', '.join(sorted(set(args.variants) & set(SPLIT_ONLY)))} runs only with --split (in one "
                     "process a launch that blocks behind the wait would never return)")
    from cudagym.errors import ConfigError

    try:
        precision = use_precision(args.protocol)
    except ConfigError as exc:
        parser.error(str(exc))
    import torch

    if not torch.cuda.is_available():
        print("no GPU: nothing to probe", file=sys.stderr)
        return 1
    if args.child >= 0:
        return queue_side(args.child, args.variants, args.rounds)
    print(f"precision: {precision}", flush=True)
    if args.split:
        return split(args.variants, args.rounds, args.json, args.protocol, args.stage_first, child_env)
    from torch.profiler import ProfilerActivity, profile

    from cudagym.judge.split.signals import wait_value, write_value

    table = forwards(torch)
    names = args.variants
    word = torch.zeros(64, dtype=torch.int32, device="cuda")
    main_stream, blocked = torch.cuda.current_stream(), torch.cuda.Stream()
    # every kernel this process queues beside a blocked stream runs once first: a kernel's first launch may load its
    # module, and a module load can wait for the whole context, the blocked stream included (it would never end)
    torch.cuda._sleep(1)
    buffers = staging_buffers(torch)
    wait_value(blocked.cuda_stream, word.data_ptr(), 0)
    write_value(main_stream.cuda_stream, word.data_ptr(), 0)
    torch.cuda.synchronize()
    rows: list[dict[str, Any]] = []
    n = 0
    for name in names:
        forward = table[name]
        with torch.cuda.stream(blocked):  # warm-up on the stream it runs on: cuDNN's plan, the allocator's blocks
            for _ in range(2):
                forward()
        torch.cuda.synchronize()
        times: list[float] = []
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.rounds):
                n += 1
                torch.cuda._sleep(1)  # the round's mark: the previous round's GPU work has all ended before it
                with torch.cuda.stream(blocked):
                    wait_value(blocked.cuda_stream, word.data_ptr(), n)
                    kept = forward()
                times.append(stage(torch, main_stream, buffers, word.data_ptr(), n))
                del kept
        events = sorted((e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")),
                        key=lambda e: e.time_range.start)
        copies = [e for e in events if e.name.startswith("Memcpy DtoD")][-len(times):]
        marks = [e for e in events if MARK in e.name][-len(times):]
        found: dict[str, list[tuple[float, float]]] = {}
        for mark, copy, length in zip(marks, copies, times, strict=False):  # a staging: its copy's start + its time
            lo, hi = copy.time_range.start, copy.time_range.start + length
            for e in events:  # from the round's mark to the staging's end, but the staging's own copy and fills
                own = lo <= e.time_range.start <= hi and e.name.startswith(("Memcpy DtoD", FILL))
                if not own and e is not mark and e.time_range.start <= hi and e.time_range.end >= mark.time_range.start:
                    found.setdefault(e.name[:110], []).append((e.time_range.start - lo,
                                                                e.time_range.end - e.time_range.start))
        beside = [{"name": k, "rounds": len(v), "start_us": round(statistics.median(a for a, _ in v), 1),
                   "length_us": round(statistics.median(b for _, b in v), 1)} for k, v in found.items()]
        calls: dict[str, int] = {}  # the CUDA runtime and driver calls the host made (per round)
        for e in prof.events():
            if not str(getattr(e, "device_type", "")).endswith("CUDA") and e.name.startswith(("cuda", "cu")):
                calls[e.name] = calls.get(e.name, 0) + 1
        api = {k: round(v / max(len(times), 1), 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])}
        row = {"forward": name, "api_calls_per_round": api, "rounds": len(times),
               "staging_median_us": round(statistics.median(times), 1),
               "staging_max_us": round(max(times), 1), "beside_staging": beside}
        rows.append(row)
        print(f"{name:22s} staging median {row['staging_median_us']:9.1f} us, max {row['staging_max_us']:9.1f} us; "
              "the round's other GPU work until then (rounds, median start from the staging's, length):", flush=True)
        print("    host API calls per round: " + ", ".join(f"{k} {v:g}" for k, v in api.items()))
        for b in beside:
            print(f"    {b['rounds']:3d} x  +{b['start_us']:9.1f} us  {b['length_us']:9.1f} us  {b['name']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
