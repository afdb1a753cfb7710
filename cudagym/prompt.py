"""The task prompt an agent reads at reset (also written to the workspace as ``INSTRUCTIONS.md``).

Sections, in order: the task, the rules, the tools and how to call them, the solution format with a worked
example (one whose operators the task does not use: :func:`cudagym.templates.pick_example`), how the solution
is judged (the GPU, the protocol's inputs, tolerances, precision, timing and reward thresholds), the episode's
limits, and the reference source. Deterministic: the same inputs give the same text (no paths, times or random
ids), so a seeded reset is reproducible.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cudagym.judge.protocol import Protocol
from cudagym.judge.records import Hardware
from cudagym.reward import RewardConfig
from cudagym.solution import SolutionFormat
from cudagym.task import Task
from cudagym.templates import pick_example
from cudagym.toolcalls import EXPECTED_FORM, TOOL_SCHEMAS, signature
from cudagym.workspace import INSTRUCTIONS, REFERENCE, WorkspaceLimits

logger = logging.getLogger(__name__)

_RULES = """\
- Write `class ModelNew(nn.Module)` in `model_new.py`. Its constructor takes the same arguments as
  `Model`'s and creates parameters and buffers with the same names and shapes: the judge copies the
  reference's `state_dict()` into it.
- Do the computation in your own CUDA kernels. In `ModelNew.forward`, PyTorch may only allocate outputs
  (`torch.empty`, `torch.empty_like`), make views and read metadata (shape, dtype, strides); no
  `torch.*` / `torch.nn.functional.*` / Tensor math, no calls into `Model` or `model.py`.
- Compute every output from its inputs on every call: no caching across calls, no hard-coded results,
  no try/except fallbacks to PyTorch, no side streams or extra threads, no changes to timers,
  synchronisation or the inputs.
- Keep the precision of the reference (fp32 unless the reference says otherwise); see "How it is judged".
- Read-only files (`{instructions}`, `{reference}`{protected}) cannot be changed; the judge uses its own
  copies. {isolation}"""


def isolation_sentence() -> str:
    """What the prompt says about files and the network, from this host's sandbox facts (true on every host)."""
    from cudagym.judge import confine

    try:
        facts = confine.isolation()
    except Exception:  # noqa: BLE001 - the judge fails closed on its own; the prompt never claims a sandbox
        return "Use no file outside this workspace and no network."
    if facts.confined:
        return ("Compilers and your code run in a sandbox: nothing outside this workspace exists there (no host "
                "files, caches or other jobs), and there is no network.")
    return ("This host runs the judge without its sandbox (CUDAGYM_SANDBOX=off), so nothing stops your code from "
            "reaching files or the network: using any file outside this workspace, or the network, is against the "
            "rules all the same.")


@dataclass(frozen=True)
class EpisodeLimits:
    """Limits the prompt states.

    Attributes:
        max_turns: Tool calls before the episode is truncated.
        token_budget: Tokens (prompt + actions + observations) before the episode is truncated.
        token_counter: Name of the tokenizer that counts them.
        workspace: File caps.
    """

    max_turns: int
    token_budget: int
    token_counter: str
    workspace: WorkspaceLimits = WorkspaceLimits()


def build_prompt(
    task: Task,
    *,
    fmt: SolutionFormat,
    protocol: Protocol,
    hardware: Hardware,
    reward: RewardConfig,
    limits: EpisodeLimits,
) -> str:
    """The reset observation for ``task``."""
    sections = [
        f"# Task: make `{task.name}` fast in CUDA\n\n"
        f"Task id `{task.id}` (suite {task.suite}, level {task.level}). `{REFERENCE}` holds a PyTorch module "
        "`Model` with `get_inputs()` and `get_init_inputs()`. Write `ModelNew`, a drop-in replacement whose "
        "forward runs your CUDA kernels, gives the same outputs and is faster. Work through tool calls; "
        "call `submit` when done.",
        "## Rules\n\n" + _rules(fmt),
        "## Tools\n\n" + _tools(),
        "## Solution format: " + fmt.name + "\n\n" + _format(fmt, task),
        "## How it is judged\n\n" + _judging(protocol, hardware, reward),
        "## Limits\n\n" + _limits(limits),
        f"## Reference: `{REFERENCE}`\n\n```python\n{task.source.rstrip()}\n```",
    ]
    return "\n\n".join(sections) + "\n"


def _rules(fmt: SolutionFormat) -> str:
    protected = "".join(f", `{p}`" for p in fmt.protected)
    return _RULES.format(instructions=INSTRUCTIONS, reference=REFERENCE, protected=protected,
                         isolation=isolation_sentence())


def _tools() -> str:
    lines = [f"- `{signature(s['function']['name'])}`: {s['function']['description']}" for s in TOOL_SCHEMAS]
    return "\n".join(lines) + "\n\n" + EXPECTED_FORM


def _format(fmt: SolutionFormat, task: Task) -> str:
    parts = [
        f"{fmt.summary}.",
        f"Writable: {', '.join(f'`{p}`' for p in fmt.editable)}. Required: {', '.join(fmt.required)}.",
    ]
    if fmt.protected:
        parts.append(f"Protected (read them, do not edit): {', '.join(f'`{p}`' for p in fmt.protected)}.")
    example = pick_example(task)  # never one that computes an operator this task uses
    shown = _example(fmt, example.name) if example is not None else ""
    if example is not None and shown:
        parts.append(f"A worked example for another task ({example.summary}; your task does not use this "
                     f"operator), file by file:\n\n{shown}")
    else:
        parts.append("(No worked example is shown: every shipped example computes an operator this task uses.)"
                     if example is None else "(No worked example is shipped for this format.)")
    return "\n".join(parts)


def _example(fmt: SolutionFormat, name: str) -> str:
    try:
        files = fmt.example_files(name)
    except (OSError, ModuleNotFoundError) as exc:  # the examples ship with the templates; tolerate their absence
        logger.debug("no worked example %s for the %s format: %s", name, fmt.name, exc)
        return ""
    fence = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp"}
    blocks = []
    for rel, text in files.items():
        lang = next((v for k, v in fence.items() if rel.endswith(k)), "")
        blocks.append(f"`{rel}`:\n```{lang}\n{text.rstrip()}\n```")
    return "\n\n".join(blocks)


def _judging(protocol: Protocol, hardware: Hardware, reward: RewardConfig) -> str:
    if hardware.gpu == "none":
        gpu = ("No GPU is available to this judge: `compile` runs for real, but `verify`, `profile` and "
               "`submit` cannot check or time the solution.")
    else:
        cc = f" (compute capability {hardware.compute_capability})" if hardware.compute_capability else ""
        gpu = f"GPU: {hardware.gpu}{cc}."
    if protocol.baseline_precision == "fp32":
        precision = ("Baselines are plain fp32, TF32 off (for matmuls and convolutions): eager PyTorch and "
                     "torch.compile run at full fp32 precision, and so must your kernels; TF32, fp16 or bf16 "
                     "arithmetic is a rule violation.")
    elif protocol.baseline_precision == "torch_default":
        precision = ("Baselines run at PyTorch's default precision: TF32 off for matmuls, on for cuDNN convolutions; "
                     "your kernels may use TF32 where the baselines do (convolutions), nowhere else.")
    else:
        precision = ("TF32 is allowed for matmuls and convolutions, in the baselines and in your kernels; "
                     "other reduced precision (fp16, bf16) is a rule violation.")
    timer = {"cuda_events": "CUDA events around forward() with a device synchronize",
             "profiler": "the sum of the kernels' device time under the profiler"}[protocol.timing]
    if protocol.timing == "cuda_events" and protocol.launch_cover_max_us:
        timer += (f" behind a launch cover: the GPU is kept busy before the start event, so launch latency is not "
                  f"timed. Eager and torch.compile get a cover as long as their host code takes (up to "
                  f"{protocol.launch_cover_max_us:g} us), so they are timed at their device work. Your forward() "
                  f"runs in a process of its own and is queued whole before the clock starts, so it is timed at its "
                  f"device work too, except where it waits for the GPU (a synchronize, .item(), a copy to the host): "
                  f"that wait and the host work after it are timed. (A judge run without that split gives yours a "
                  f"{protocol.launch_cover_us:g} us cover: host time beyond it is timed.)")
    elif protocol.timing == "cuda_events" and protocol.launch_cover_us:
        timer += (f" (the GPU is kept busy {protocol.launch_cover_us:g} us before the start event, so the host's "
                  f"latency in launching your first kernel is not timed; host work beyond that and every gap "
                  f"between kernels is)")
    runs = (f"{protocol.min_runs} timed runs" if protocol.target_ci_pct == 0 else
            f"{protocol.min_runs}-{protocol.max_runs} timed runs, until the median's 95% CI is within "
            f"{protocol.target_ci_pct:g}%")
    te, tc = reward.threshold_vs_eager, reward.threshold_vs_compile
    reward_text = (
        f"Reward at the end (tiered): -1 if it does not build, crashes, times out, is wrong or breaks a rule; "
        f"1 if correct; 2 if correct and more than {te:.0%} faster than eager PyTorch; 3 if also more than "
        f"{tc:.0%} faster than torch.compile."
        + (" Each step up must hold beyond the timing's own 95% interval too (a noisy, host-bound time earns no "
           "step its noise could explain)." if reward.interval else "")
        if reward.mode == "tier" else
        "Reward at the end: torch.compile time / your time when correct, -1 otherwise."
    )
    if reward.scoring == "best":
        reward_text += " The best state you evaluated during the episode is scored (judged again in full)."
    else:
        reward_text += " The state you submit is scored."
    return "\n".join([
        gpu,
        f"Protocol `{protocol.id}`: {protocol.description}.",
        f"Correctness: {protocol.num_inputs} input sets from seeds {protocol.input_seeds()}; every output "
        f"element must satisfy |out - ref| <= {protocol.atol:g} + {protocol.rtol:g} * |ref|"
        f"{_correctness_extras(protocol)}.",
        precision,
        f"Timing: {timer}; {protocol.warmup_runs} warm-up runs"
        f"{f' (and at least {protocol.warmup_ms:g} ms of them)' if protocol.warmup_ms else ''}, {runs}; "
        f"statistic: {protocol.statistic}"
        f"{'; L2 cache flushed before each run' if protocol.l2_flush else ''}."
        + (" Speedups are taken against the reference as timed the same way in your forward's own process (before "
           "your code loads there): eager's and torch.compile's times are scaled by how that process runs the "
           "reference against the judge's, so how fast a process runs the same code counts for neither side."
           if protocol.runner_reference_runs else ""),
        reward_text,
    ])


def _limits(limits: EpisodeLimits) -> str:
    ws = limits.workspace
    return (
        f"The episode ends when you call `submit`, or is cut off after {limits.max_turns} tool calls or "
        f"{limits.token_budget} tokens (this prompt, your actions and the tool results, counted with "
        f"{limits.token_counter}); a cut-off episode is judged on the files as they are. Files: at most "
        f"{ws.max_files} writable files of {ws.max_file_bytes} bytes each, UTF-8 text only."
    )


def _correctness_extras(protocol: Protocol) -> str:
    """What cudagym-v2's correctness adds, in words (empty for protocols without it)."""
    parts = []
    if protocol.atol_scale > 0:
        parts.append(f"the absolute term is at most {protocol.atol_scale:g} x the RMS of that reference output")
    for factor in protocol.scaled_inputs:
        parts.append(f"one more input set from an unpublished seed with the signed floating-point inputs x{factor:g}")
    parts.append("timed calls are checked too, on rounds you cannot predict")
    if protocol.sanitizer:
        tools = ", ".join(protocol.sanitizer)
        parts.append(f"submit also runs the correctness inputs under compute-sanitizer ({tools}): any error it "
                     "reports (an out-of-bounds or uninitialised access, a race, a bad barrier) fails the submission")
    return "; " + "; ".join(parts)
