"""Registers the environment ids with Gymnasium; imported by ``import cudagym``.

Gymnasium 1.x has no plugin auto-loading, so ``gym.make("CudaKernel-L1-v0")`` works after
``import cudagym``, and ``gym.make("cudagym:CudaKernel-L1-v0")`` imports cudagym itself. Registering
is cheap: no task data, judge, tokenizer or torch is touched until an env is reset. ``gym.make_vec(id,
num_envs=N)`` (no ``vectorization_mode``) makes a :class:`~cudagym.vector.CudaKernelVectorEnv`: the
sub-envs step at once on threads and share one judge.

===========================  ===================================================
id                           tasks
===========================  ===================================================
``CudaKernel-L1-v0``         KernelBench level 1 (single operators)
``CudaKernel-L2-v0``         KernelBench level 2 (fused operator chains)
``CudaKernel-L3-v0``         KernelBench level 3 (full architectures)
``CudaKernel-L4-v0``         KernelBench level 4 (Hugging Face models)
``CudaKernel-Ops6K-v0``      CUDA-Agent-Ops-6K (composed operators)
``CudaKernel-Bundled-v0``    the bundled suite shipped with cudagym
===========================  ===================================================
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

ENTRY_POINT = "cudagym.env:CudaKernelEnv"
VECTOR_ENTRY_POINT = "cudagym.vector:CudaKernelVectorEnv"  # gym.make_vec(id, num_envs=N) without a mode
MAX_EPISODE_STEPS = 200  # equals CudaKernelEnv's default max_turns, so TimeLimit and the env agree

ENV_IDS: dict[str, dict[str, Any]] = {
    **{f"CudaKernel-L{level}-v0": {"suite": "kernelbench", "level": level} for level in (1, 2, 3, 4)},
    "CudaKernel-Ops6K-v0": {"suite": "ops6k"},
    "CudaKernel-Bundled-v0": {"suite": "bundled"},
}


def register_envs() -> None:
    """Register every id in :data:`ENV_IDS` (ids already registered are left alone)."""
    for env_id, kwargs in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point=ENTRY_POINT,
            vector_entry_point=VECTOR_ENTRY_POINT,
            kwargs=dict(kwargs),
            nondeterministic=True,  # timings vary run to run, and so can the reward
            max_episode_steps=MAX_EPISODE_STEPS,
        )


register_envs()
