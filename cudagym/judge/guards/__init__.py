"""Reward-hacking guards: each a named check with its own planted-hack test.

Each guard is a small class in one module per family, registered by name; a protocol selects them
(``guards=("all",)`` or a tuple of names) and the in-worker harness calls their hooks at fixed points of an
evaluation (:mod:`cudagym.judge.guards.base`). A guard that fires makes the verdict ``RULE_VIOLATION``
(tier -1) with a :class:`~cudagym.judge.records.Violation` naming it.

========================  ==================================================  =========================
guard                     stops                                               module
========================  ==================================================  =========================
``torch_fallback``        torch/F/aten compute in the forward                 :mod:`.fallback`
``reference_reuse``       importing/subclassing ``Model``; try/except paths   :mod:`.reference`
``timer_patch``           replacing timers, synchronize, comparisons          :mod:`.patching`
``side_stream``           GPU work the timed region does not wait for         :mod:`.concurrency`
``host_threads``          extra host threads                                  :mod:`.concurrency`
``lazy_output``           subclassed, lazy or aliasing outputs                :mod:`.outputs`
``degenerate_output``     constant outputs under the tolerance                :mod:`.outputs`
``result_cache``          results cached across calls                         :mod:`.caching`
``stale_memory``          returning memory the candidate never wrote          :mod:`.memory`
``input_mutation``        writing to the inputs                               :mod:`.inputs`
``hard_coding``           answers only right for the published seeds          :mod:`.inputs`
``precision``             TF32/fp16/bf16 on an fp32 task; torch switches      :mod:`.precision`
``decoy_kernels``         compiled kernels that do not do the work            :mod:`.kernels`
``tampering``             changed protected files; importing the judge        :mod:`.tampering`
``file_access``           files outside the workspace (sandbox-reported)      :mod:`.escape`
``network``               network access (sandbox-reported)                   :mod:`.escape`
``suspicious_speedup``    >10x speedups are re-verified                       :mod:`.speedup`
========================  ==================================================  =========================

Importing this package is cheap; the guard modules (which need torch) load on first use of the registry.
"""

from __future__ import annotations

from cudagym.judge.guards.base import ALL, GUARD_MODULES, Guard, guard_names, register, registry, select_guards

__all__ = ["ALL", "GUARD_MODULES", "Guard", "guard_names", "register", "registry", "select_guards"]
