"""``cudagym train rft | critic | ppo``: CUDA Agent's three stages as commands.

Each stage has a typed ``Args`` dataclass; the docstring under each field is its ``--help`` line. Stages
chain through ``--init``: ``rft`` writes ``<out-dir>/policy.pt``, which ``critic`` starts from, and so on::

    cudagym train rft --journal runs/scripted.jsonl --out-dir runs/rft
    cudagym train critic --init runs/rft/policy.pt --env-id CudaKernel-Bundled-v0 --out-dir runs/critic
    cudagym train ppo --init runs/critic/policy.pt --env-id CudaKernel-Bundled-v0 --out-dir runs/ppo

``--policy tiny`` is the built-in tiny transformer; any other value is a local Hugging Face model folder.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import logging
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cudagym.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class PolicyArgs:
    """Which policy, where, and where its weights go."""

    policy: str = "tiny"
    """'tiny' (the built-in transformer over cudagym's BPE) or a local Hugging Face model folder."""
    tiny_vocab: str = "full"
    """Output vocabulary of the tiny policy: 'full', or 'toy-tools' (the toy env's tool-call ids only)."""
    init: str = ""
    """A policy.pt written by an earlier stage to start from (empty: fresh or pretrained weights)."""
    device: str = "cpu"
    """Torch device, e.g. cpu or cuda."""
    seed: int = 0
    """Seeds weights (tiny), sampling and env resets."""
    out_dir: str = "runs/train"
    """Folder for policy.pt, metrics and checkpoints."""


@dataclass
class EnvArgs:
    """The env episodes run in."""

    env_id: str = "CudaKernel-Bundled-v0"
    """Gymnasium id (cudagym's, or CudaGymToy-ToolCall-v0)."""
    env_kwargs: str = "{}"
    """JSON object of keyword arguments for gym.make."""
    max_new_tokens: int = 512
    """Longest assistant turn, in tokens."""
    max_tokens: int = 8192
    """Longest episode, in tokens; longer ones are truncated."""
    temperature: float = 1.0
    """Sampling temperature."""


@dataclass
class RFTArgs(PolicyArgs):
    """Rejection fine-tuning: SFT on a journal's good episodes."""

    journal: str = ""
    """JSONL trajectory journal, one episode per line: {"messages": [...], "reward": float}."""
    min_reward: float = 0.0
    """Keep episodes whose reward is above this."""
    keep_all: bool = False
    """Keep every episode whatever its reward (format warm-up); invalid calls and loops are still dropped."""
    max_repeats: int = 3
    """Drop episodes that repeat one action this many times in a row (loops)."""
    steps: int = 200
    """Optimiser steps."""
    lr: float = 1e-5
    """Learning rate."""
    batch_size: int = 8
    """Episodes per step."""


@dataclass
class CriticArgs(PolicyArgs, EnvArgs):
    """Critic pretraining: fit the critic alone to the returns of the frozen actor's rollouts."""

    episodes: int = 64
    """Rollout episodes to fit on."""
    steps: int = 200
    """Optimiser steps."""
    lr: float = 6e-6
    """Critic learning rate (CUDA Agent: 6e-6)."""
    batch_size: int = 8
    """Episodes per step."""


@dataclass
class PPOArgs(PolicyArgs, EnvArgs):
    """Agentic PPO with CUDA Agent's defaults."""

    updates: int = 200
    """PPO updates."""
    episodes_per_update: int = 16
    """Episodes collected per update."""
    actor_lr: float = 3e-6
    """Actor learning rate (CUDA Agent: 3e-6)."""
    critic_lr: float = 6e-6
    """Critic learning rate (CUDA Agent: 6e-6)."""
    epochs: int = 1
    """Passes over each batch (CUDA Agent: one update per batch)."""
    minibatches: int = 1
    """Minibatches per pass."""
    clip_low: float = 0.2
    """Lower PPO clip (CUDA Agent: 0.2)."""
    clip_high: float = 0.28
    """Upper PPO clip, clip-higher (CUDA Agent: 0.28)."""
    dual_clip: float = 3.0
    """Dual-clip constant for negative advantages (0 disables)."""
    kl_coef: float = 0.0
    """KL-to-reference weight (0 disables; the reference is the --init policy)."""
    tis: str = "token"
    """Truncated importance sampling of trainer over sampler: token, sequence or none."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (0 disables)."""
    target_reward: float | None = None
    """Stop once the mean reward of the last 10 updates reaches this (default: run every update)."""
    checkpoint_every: int = 50
    """Updates between checkpoints."""
    resume: bool = False
    """Continue from <out-dir>/checkpoint.pt."""
    journal: bool = False
    """Append every rollout episode to <out-dir>/rollouts.jsonl."""


STAGES: dict[str, tuple[type, str]] = {
    "rft": (RFTArgs, "rejection fine-tuning on a trajectory journal"),
    "critic": (CriticArgs, "pretrain the critic on rollouts of the frozen actor"),
    "ppo": (PPOArgs, "agentic token-level PPO"),
}


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass and of its bases (the ``--help`` lines)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[node.target.id] = nxt.value.value.strip()
    return docs


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--flag`` per field of ``cls``, typed, defaulted, with the field's docstring as help."""
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{docs.get(f.name, '')} (default: {f.default!r})"
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        else:
            kind = {"int": int, "float": float, "str": str}[str(f.type).removesuffix(" | None")]
            parser.add_argument(flag, type=kind, default=f.default, help=help_text)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the three stages as subcommands."""
    stages = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for name, (cls, summary) in STAGES.items():
        sub = stages.add_parser(name, help=summary, description=f"{summary}. {cls.__doc__}")
        add_arguments(sub, cls)


def run(args: argparse.Namespace) -> int:
    """Run the chosen stage; returns the exit code."""
    cls, _ = STAGES[args.stage]
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    check_args(cls(**values))
    from cudagym.baselines.ppo import stages

    getattr(stages, f"run_{args.stage}")(cls(**values))
    return 0


# counts that must be whole and at least one (the rest may be 0: max_repeats, checkpoint_every, ...)
_AT_LEAST_ONE = ("steps", "batch_size", "episodes", "updates", "episodes_per_update", "epochs", "minibatches",
                 "max_new_tokens", "max_tokens")


def check_args(args: PolicyArgs) -> None:
    """Refuse a stage's arguments that mean nothing, before any model is built or any env made.

    Raises:
        ConfigError: a count below 1, a device torch cannot use here, or a learning rate that is not positive.
    """
    for name in _AT_LEAST_ONE:
        value = getattr(args, name, 1)
        if value < 1:
            raise ConfigError(f"expected --{name.replace('_', '-')} >= 1, got {value}")
    for name in ("lr", "actor_lr", "critic_lr"):
        value = getattr(args, name, 1.0)
        if not value > 0:
            raise ConfigError(f"expected --{name.replace('_', '-')} > 0, got {value}")
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        raise ConfigError(f"expected --device to be a torch device such as cpu or cuda, got {args.device!r}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {args.device}: torch here has no CUDA device (use --device cpu)")


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs`` as a dict (a clear error when it is not a JSON object)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"expected --env-kwargs to be a JSON object, got {text!r} ({exc})") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"expected --env-kwargs to be a JSON object, got {type(value).__name__}")
    return value


def save_policy(policy: Any, out_dir: str) -> Path:
    """Write ``<out_dir>/policy.pt`` (the weights) and return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "policy.pt"
    torch.save(policy.state_dict(), path)
    return path
