"""Judge backends by name, and one shared judge per set of options in a process.

An env names its judge as ``judge="local" | "ray" | <a Judge>`` with ``judge_options`` (plain, picklable
data: the options of :class:`~cudagym.judge.local.LocalJudge` or :class:`~cudagym.judge.ray_judge.RayJudge`).
Envs of one process with the same name and options share one pipeline (one worker per GPU, one build pool,
one baseline cache): each gets its own handle, so fairness, caps and cancellation are per env. In a process
that finds a host's judge server in its environment (``CUDAGYM_JUDGE_ADDRESS``, see
:mod:`cudagym.judge.remote`), ``"local"`` means that server: the process starts no workers of its own.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge.interface import Judge
from cudagym.judge.pipeline import Pipeline, PipelineJudge
from cudagym.judge.protocol import Protocol

_shared: dict[tuple[str, str], Pipeline] = {}
_shared_lock = threading.Lock()


def options_key(options: Mapping[str, Any]) -> str:
    """A canonical text of ``options``; a ConfigError when they are not plain data.

    ``judge_options`` must be plain data (numbers, strings, lists, dicts) so an env that names them can be
    pickled into a sub-process and make the same judge there.
    """
    try:
        return json.dumps(dict(options), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"expected judge_options to be plain data (numbers, strings, lists, dicts), got "
                          f"{dict(options)!r} ({exc}); pass a Judge instance as judge= for anything else") from exc


# Where each backend's pipeline factory is, whose keyword arguments (and ``journal``) are its judge_options;
# imported only to read its signature.
_PIPELINE_FACTORIES: dict[str, tuple[str, str]] = {
    "local": ("cudagym.judge.local", "local_pipeline"),
    "ray": ("cudagym.judge.ray_judge", "ray_pipeline"),
}


def check_option_names(name: str, options: Mapping[str, Any]) -> None:
    """Refuse a judge_options key the backend ``name`` does not take, before any judge is made.

    The values are checked where the judge is made (the first reset), but a misspelt key is known now.

    Raises:
        ConfigError: A key the backend has no option of, with the closest one when there is one.
    """
    where = _PIPELINE_FACTORIES.get(name)
    if where is None:
        return
    factory = getattr(importlib.import_module(where[0]), where[1])
    accepted = sorted({"journal", *inspect.signature(factory).parameters})
    unknown = sorted(str(k) for k in options if k not in accepted)
    if unknown:
        hints = [f"did you mean {close[0]!r} for {k!r}?" for k in unknown
                 if (close := difflib.get_close_matches(k, accepted, n=1, cutoff=0.75))]
        raise ConfigError(f"judge {name!r}: unknown judge_options {', '.join(map(repr, unknown))}; expected keys "
                          f"among {', '.join(accepted)}" + (f"; {' '.join(hints)}" if hints else ""))


def shared_judge(name: str, protocol: Protocol, options: Mapping[str, Any],
                 make_pipeline: Callable[..., Pipeline]) -> PipelineJudge:
    """A handle on this process's pipeline for ``(name, options)``, made by ``make_pipeline`` the first time."""
    opts = dict(options)
    journal = opts.pop("journal", None)
    key = (name, options_key(opts))
    with _shared_lock:
        pipeline = _shared.get(key)
        if pipeline is None or pipeline.closed or pipeline.pid != os.getpid():  # new, closed, or forked
            try:
                pipeline = make_pipeline(**opts)
            except TypeError as exc:
                raise ConfigError(f"judge {name!r}: bad judge_options {sorted(opts)}: {exc}") from exc
            _shared[key] = pipeline
        return PipelineJudge(protocol, pipeline, journal)


def local(protocol: Protocol, **options: Any) -> Judge:
    """``judge="local"``: the host's judge server when this process has one, else this process's local judge."""
    from cudagym.judge.remote import ADDRESS_ENV, RemoteJudge

    if os.environ.get(ADDRESS_ENV):
        return RemoteJudge(protocol)  # the server's options rule; this process starts no workers
    if not options:
        from cudagym.judge.local import default_judge

        return default_judge(protocol)
    from cudagym.judge.local import local_pipeline

    return shared_judge("local", protocol, options, local_pipeline)


def ray(protocol: Protocol, **options: Any) -> Judge:
    """``judge="ray"``: this process's Ray judge for these options (``pip install "cudagym[ray]"``)."""
    from cudagym.judge.ray_judge import ray_pipeline

    return shared_judge("ray", protocol, options, ray_pipeline)


# Judge backends by name: a factory ``(protocol, **judge_options) -> Judge``.
JUDGES: dict[str, Callable[..., Judge]] = {
    "local": local,
    "ray": ray,
}
