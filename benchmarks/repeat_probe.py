"""Is one task's verdict repeatable? The same code judged in fresh processes, and its kernels outside the judge.

Run on the GPU host (one GPU; a KernelBench task needs ``CUDAGYM_KERNELBENCH_DIR``)::

    python benchmarks/repeat_probe.py --task L2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool \\
        --protocol kernelbench --rounds 3 --out "$OUT/repeat"

Each round runs two fresh processes:

* ``cudagym baselines check`` on the task (the reference as its own candidate, guards off) with its own empty
  cache folder, so eager, torch.compile and the candidate are all timed in that round: the judge's three medians,
  the verdict's own ratio (the protocol's statistic) and the candidate's profiled kernels;
* a plain process (no judge, no sandbox) that builds the task's model (in the protocol's module mode) and inputs,
  applies the protocol's precision flags, and times the forward with CUDA events (median of ``--runs``), once
  with cuDNN's TF32 as the protocol sets it and once with it flipped, each with the kernels the profiler saw.

While each judge round runs, ``nvidia-smi`` samples the GPU every 200 ms (SM and memory clock, power, temperature,
the active clock-event reasons), so a slow round can be told apart as slower clocks or a different kernel.

A verdict is repeatable when the candidate/eager ratio of the reference against itself stays near 1 in every
round; a round far from 1 that names a different main kernel than the others points at the library's algorithm
choice, not at the judge's clock. Writes ``rounds.json`` and ``summary.md`` under ``--out`` (the table is printed
too).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cudagym.judge.harness.runner import BASELINE_KERNELS_NOTE

_PLAIN = r"""
import json, statistics, sys, types
import torch
from cudagym.suites import get_task
from cudagym.judge.protocol import get_protocol

task = get_task(sys.argv[1]); protocol = get_protocol(sys.argv[2]); runs = int(sys.argv[3])
module = types.ModuleType("reference"); exec(compile(task.source, task.id, "exec"), module.__dict__)
torch.manual_seed(0)
model = module.Model(*module.get_init_inputs()).cuda()
model.train(protocol.extra.get("module_mode", "eval") == "train")  # as the judge builds it
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
out = {}
for label, cudnn_tf32 in (("protocol", protocol.cudnn_tf32), ("flipped", not protocol.cudnn_tf32)):
    torch.backends.cuda.matmul.allow_tf32 = protocol.matmul_tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32
    torch.backends.cudnn.benchmark = False
    with torch.no_grad():
        for _ in range(5):
            model(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); model(*inputs); b.record(); b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            model(*inputs); torch.cuda.synchronize()
    kernels = sorted(((e.key, e.device_time_total) for e in prof.key_averages() if e.device_time_total > 0),
                     key=lambda kv: -kv[1])
    out[label] = {"cudnn_tf32": cudnn_tf32, "median_us": statistics.median(times),
                  "kernels": [[k, round(t, 1)] for k, t in kernels[:4]]}
print("PLAIN " + json.dumps(out))
"""


_QUERY = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"


class _ClockSampler:
    """``nvidia-smi`` polled every 200 ms while the block runs; :meth:`summary` condenses what it saw."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc: subprocess.Popen[bytes] | None = None
        self.error = ""

    def __enter__(self) -> _ClockSampler:
        try:
            with self.path.open("wb") as fh:
                self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits",
                                              "-i", "0", "-lms", "200"], stdout=fh, stderr=subprocess.STDOUT)
        except OSError as exc:
            self.error = f"no clock samples: {exc}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def summary(self) -> dict[str, Any]:
        """Median and lowest SM clock (MHz), highest power (W) and temperature (C), the clock-event reasons seen."""
        if self.error:
            return {"error": self.error}
        sm, power, temp, reasons = [], [], [], set()
        for line in self.path.read_text(errors="replace").splitlines():
            fields = [f.strip() for f in line.split(",")]
            try:
                sm.append(float(fields[0]))
                power.append(float(fields[2]))
                temp.append(float(fields[3]))
            except (IndexError, ValueError):
                continue
            if len(fields) > 4 and fields[4] not in ("0x0000000000000000", "[N/A]"):
                reasons.add(fields[4])
        if not sm:
            return {"error": "no clock samples: " + self.path.read_text(errors="replace")[-300:]}
        return {"samples": len(sm), "sm_mhz_median": statistics.median(sm), "sm_mhz_min": min(sm),
                "power_w_max": max(power), "temp_c_max": max(temp), "event_reasons": sorted(reasons)}


def _judge_round(task: str, protocol: str, folder: Path, env: dict[str, str]) -> dict[str, Any]:
    """One ``baselines check`` in a fresh process and cache: the three medians and the candidate's top kernels."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", "from cudagym.cli import main; raise SystemExit(main())", "baselines", "check",
           "--tasks", task, "--protocol", protocol, "--cache-dir", str(folder / "cache"),
           "--journal", str(folder / "journal.jsonl"), "--table", str(folder / "check.md")]
    started = time.monotonic()
    with _ClockSampler(folder / "clocks.csv") as clocks:
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    (folder / "check.log").write_text(proc.stdout + proc.stderr)
    row: dict[str, Any] = {"rc": proc.returncode, "wall_s": round(time.monotonic() - started, 1),
                           "clocks": clocks.summary()}
    table = folder / "check.csv"
    if table.exists():
        with table.open(newline="") as fh:
            found = list(csv.DictReader(fh))
        if found:
            row.update({k: found[0].get(k, "") for k in ("status", "eager_us", "compile_us", "candidate_us",
                                                          "runner_reference_us", "speedup_vs_eager", "message")})
    for line in (folder / "journal.jsonl").read_text().splitlines() if (folder / "journal.jsonl").exists() else ():
        record = json.loads(line)
        if record.get("kind") == "result":
            kernels = (record.get("result") or {}).get("kernels") or []
            row["candidate_kernels"] = [[k["name"][:110], round(k["time_us"], 1)] for k in kernels[:4]]
            notes = (record.get("result") or {}).get("notes") or []
            row["baseline_kernels"] = [n for n in notes if n.startswith(BASELINE_KERNELS_NOTE)]
    return row


def _plain_round(task: str, protocol: str, runs: int) -> dict[str, Any]:
    """The forward outside the judge in a fresh process, with the protocol's cuDNN TF32 setting and flipped."""
    proc = subprocess.run([sys.executable, "-c", _PLAIN, task, protocol, str(runs)], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("PLAIN "):
            return json.loads(line[len("PLAIN "):])
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


def _ratio(value: Any) -> str:
    try:
        return f"{float(value):.3f}" if float(value) > 0 else "-"
    except (TypeError, ValueError):
        return "-"


def _us(value: Any) -> str:
    try:
        return f"{float(value):.1f}"
    except (TypeError, ValueError):
        return "-"


def main(argv: list[str] | None = None) -> int:
    """Probe the task's repeatability; exit code 0 when every judge round ran."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--task", required=True, help="task id, e.g. L2/77_ConvTranspose3d_Scale_BatchNorm_...")
    parser.add_argument("--protocol", default="kernelbench", help="protocol name or id (default: kernelbench)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh-process rounds (default 3)")
    parser.add_argument("--runs", type=int, default=50, help="timed forwards per plain measurement (default 50)")
    parser.add_argument("--out", default=None, help="output folder (default: a new temporary folder)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="set in the judge round's processes (repeatable), e.g. CUDNN_LOGLEVEL_DBG=2 "
                             "CUDNN_LOGDEST_DBG=stderr: the sandbox passes CUDNN_*, TORCH_* and CUDA_* through")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.runs < 1:
        parser.error("--rounds and --runs must be at least 1")
    bad = [item for item in args.env if "=" not in item or not item.split("=", 1)[0]]
    if bad:
        parser.error(f"--env expects KEY=VALUE, got {', '.join(map(repr, bad))}")
    env = dict(item.split("=", 1) for item in args.env)
    out = Path(args.out or tempfile.mkdtemp(prefix="repeat-probe-"))
    out.mkdir(parents=True, exist_ok=True)
    rounds = []
    for i in range(args.rounds):
        judged = _judge_round(args.task, args.protocol, out / f"round{i}", env)
        plain = _plain_round(args.task, args.protocol, args.runs)
        rounds.append({"round": i, "judge": judged, "plain": plain})
        (out / "rounds.json").write_text(json.dumps(rounds, indent=1))
    lines = [f"# Repeatability of {args.task} under {args.protocol} ({args.rounds} rounds, fresh processes)", "",
             "| round | status | eager µs | compile µs | candidate µs | cand/eager | runner's reference µs "
             "| verdict vs eager "
             "| plain µs (protocol TF32) "
             "| plain µs (flipped) | SM MHz median / min | candidate's main kernel | plain main kernel (protocol) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    ok = True
    for r in rounds:
        j, p = r["judge"], r["plain"]
        ok = ok and j.get("rc") == 0
        try:
            ratio = f"{float(j['candidate_us']) / float(j['eager_us']):.3f}"
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            ratio = "-"
        cand_k = (j.get("candidate_kernels") or [["-"]])[0][0][:60]
        prot = p.get("protocol", {})
        plain_k = (prot.get("kernels") or [["-"]])[0][0][:60]
        own = _us(j.get("runner_reference_us"))  # the yardstick's time, where the protocol takes one
        own = "-" if own == "0.0" else own
        c = j.get("clocks", {})
        mhz = f"{c['sm_mhz_median']:.0f} / {c['sm_mhz_min']:.0f}" if "sm_mhz_median" in c else "-"
        lines.append(f"| {r['round']} | {j.get('status', 'rc=' + str(j.get('rc')))} | {_us(j.get('eager_us'))} | "
                     f"{_us(j.get('compile_us'))} | {_us(j.get('candidate_us'))} | {ratio} | "
                     f"{own} | {_ratio(j.get('speedup_vs_eager'))} | "
                     f"{_us(prot.get('median_us'))} | {_us(p.get('flipped', {}).get('median_us'))} | {mhz} | "
                     f"`{cand_k}` | `{plain_k}` |")
    for r in rounds:  # what went wrong, in a line each, so a failed round is not just a dash
        if r["judge"].get("rc") != 0:
            log = (out / f"round{r['round']}" / "check.log").read_text(errors="replace").strip().splitlines()
            lines.append(f"\nround {r['round']}: the judge's check exited {r['judge'].get('rc')}: "
                         f"{log[-1] if log else '(no output)'}")
        if "error" in r["plain"]:
            tail = r["plain"]["error"].strip().splitlines()
            lines.append(f"\nround {r['round']}: the plain run failed: {tail[-1] if tail else '(no output)'}")
    for r in rounds:  # the kernels each baseline ran in the judge's own process: a plan change shows here
        for note in r["judge"].get("baseline_kernels") or ():
            lines.append(f"\nround {r['round']}: {note[:400]}")
    ratios = [float(r["judge"]["candidate_us"]) / float(r["judge"]["eager_us"]) for r in rounds
              if r["judge"].get("candidate_us") and r["judge"].get("eager_us")]
    if ratios:
        lines += ["", f"cand/eager: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
