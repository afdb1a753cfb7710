"""Adapters to RL libraries and trainers; each module loads its optional dependency only when used.

=============================================  ======================================================
module                                         for
=============================================  ======================================================
:mod:`cudagym.integrations.sb3`                Stable-Baselines3: launch-configuration tuning as a numeric env
:mod:`cudagym.integrations.kernel_families`    the parametrised raw-format kernels that env tunes (elementwise)
:mod:`cudagym.integrations.reduction_families` the same for row and channel reductions (softmax, norms)
:mod:`cudagym.integrations.scan_families`      the same for the row scan and the middle-axis reduction
:mod:`cudagym.integrations.matmul_families`    the same for tiled GEMMs with fused epilogues, tiny batched GEMMs
:mod:`cudagym.integrations.stencil_families`   the same for depthwise 3x3 convolutions
:mod:`cudagym.integrations.block_families`     the same for the L3 blocks (fused MLP, separable and SE blocks)
:mod:`cudagym.integrations.attention_families` the same for causal attention (flash-style, online softmax)
:mod:`cudagym.integrations.launch_params`      the launch-parameter spaces the families are rendered over
:mod:`cudagym.integrations.trl`                TRL ``GRPOTrainer(environment_factory=...)``
:mod:`cudagym.integrations.openenv`            an OpenEnv ``Environment`` and its ``create_app`` server
:mod:`cudagym.integrations.verl`               a verl ``AgentLoopBase`` keyed by request id
=============================================  ======================================================
"""
