# EXPLOIT: call-count detection ("warm-up detection", GPU MODE's pygpubench cheats): run the real kernel on
#          the first calls the judge checks and skip the work afterwards. The test times it against a cached
#          eager baseline that makes it look >10x faster, in a protocol whose other run-time checks (and the
#          hard_coding guard) are off, so only the re-verification of suspicious speedups is left to catch it.
# GUARD: suspicious_speedup
# TASK: bundled/L1/01_Swish
# PROTOCOL: guards=suspicious_speedup min_runs=5 max_runs=5 warmup_runs=1 target_ci_pct=0 mode=profile baselines=fast
# WORKER: incorrect: the worker times eager itself (a job's cached baselines are not taken from it), so this
#         candidate is about 5x faster than eager there, not above the 10x the guard re-verifies; its zeros are
#         found by the checks of its timed calls (seen on the H100, 2026-12-07)
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 12:  # 5 checks + 1 warm-up + 5 timed + 1 audited re-check after timing
            return torch.zeros_like(x)
        return cuda_extension.swish_forward(x)
