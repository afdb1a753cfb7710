"""Pretrained models that tasks load: found in a task's source, fetched into the judge's model cache.

KernelBench's level 4 builds Hugging Face models (``AutoModelForCausalLM.from_pretrained(model_name)``). The
judge's processes have no network, so they read such models from a hub cache of their own
(:func:`cudagym.paths.model_cache_dir`, mounted read-only, ``HF_HUB_OFFLINE=1``), which :func:`fetch_models`
fills on a host that can reach the hub (``cudagym tasks fetch-models``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cudagym import pyparse
from cudagym.errors import DataUnavailableError
from cudagym.task import Task

WEIGHT_SUFFIXES = (".safetensors", ".bin")  # the first a repository has is fetched, not both


def pretrained_models(source: str) -> list[str]:
    """Repository ids that ``source`` passes to a ``from_pretrained`` call, in order.

    Literals, or module-level names bound to one (``model_name = "gpt2"`` then
    ``AutoConfig.from_pretrained(model_name)``).
    """
    try:
        tree = pyparse.parse(source)
    except SyntaxError:
        return []
    names = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name)
             and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "from_pretrained" and node.args):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found[arg.value] = None
        elif isinstance(arg, ast.Name) and arg.id in names:
            found[names[arg.id]] = None
    return list(found)


def models_of(tasks: Iterable[Task]) -> dict[str, list[str]]:
    """Each repository id the tasks load, with the ids of the tasks that load it."""
    users: dict[str, list[str]] = {}
    for task in tasks:
        for repo in pretrained_models(task.source):
            users.setdefault(repo, []).append(task.id)
    return users


def fetch_models(repo_ids: Sequence[str], cache_dir: Path) -> list[Path]:
    """Download each repository's configs and one set of weights into the hub cache ``cache_dir``.

    Returns the snapshot folders. Raises :class:`DataUnavailableError` with the repository and the reason
    when ``huggingface_hub`` is missing or a download fails (offline, unknown id, gated model).
    """
    hub = _hub()
    cache_dir.mkdir(parents=True, exist_ok=True)
    snapshots = []
    for repo in repo_ids:
        try:
            files = list(hub.list_repo_files(repo))
            weights = next((s for s in WEIGHT_SUFFIXES if any(f.endswith(s) for f in files)), "")
            patterns = ["*.json", *([f"*{weights}"] if weights else [])]
            snapshots.append(Path(hub.snapshot_download(repo, cache_dir=str(cache_dir), allow_patterns=patterns)))
        except Exception as exc:  # the boundary: no stack trace from inside huggingface_hub
            raise DataUnavailableError(f"could not fetch the model {repo} into {cache_dir}: "
                                       f"{type(exc).__name__}: {str(exc)[:500]}") from exc
    return snapshots


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise DataUnavailableError("fetching models needs huggingface_hub, which is not installed; "
                                   "pip install 'cudagym[hf]'") from None
    return huggingface_hub
