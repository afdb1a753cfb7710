"""Attacks on the chained series (``harness.runner._series_check``) through the real worker and sandboxed runner.

The series' reading is the median per-call interval on the trusted clock less what an empty call of the judge's own
runner held beyond its own time. Both halves were attacked: what a white-box candidate's runner can leave out of
that empty call's cost (below: now on the GPU), and how it can learn a later call's input set before that set is
placed.
"""

from __future__ import annotations

# The delivery copy: a forward that wrote its outputs straight into the output arena's slot skipped the runner's copy
# of them, which the reading had taken off as an empty call's cost (session 29: 266 us counted against the honest
# 2,664 us on an 8 MiB ReLU here). On the GPU path the runner no longer copies: the judge reads outputs where they lie
# in a heap it shares with the runner (cudagym.judge.split.heap), and an empty call holds no copy either; white-box
# 36 (tests/test_whitebox_gpu.py) is that attack on the H200, with the old copy delivery as its control. This host
# path, which times nothing a verdict is given on (a judge without a GPU answers ``no_gpu``), keeps the copy: its
# allocations cannot be routed into shared memory, so it would show the skipped copy still (and did, by the host's
# noise, only some of the time: a threshold test of it flaked).


# --------------------------------------------------------------------------------- the later sets' seeds

def test_a_series_sets_seeds_are_drawn_each_on_its_own() -> None:
    # The chain places call k + 1's set only after call k is done, but a set's values give away its seed to a search of
    # the 2**30 seeds (on a GPU: Philox, seconds), and the sets were drawn from base + index: the loaded calibration
    # (its time counts for nothing) is handed series 0's first set, so a runner that searched it there knew all 96
    # sets of the three series before any was placed, and answered each call from memory.
    from cudagym.judge.harness.runner import TIMING_SEED_OFFSET, series_seeds

    for _ in range(3):
        seeds = series_seeds(32)
        assert len(seeds) == 32 and all(TIMING_SEED_OFFSET <= s < TIMING_SEED_OFFSET + 2**30 for s in seeds)
        steps = {b - a for a, b in zip(seeds, seeds[1:], strict=False)}
        assert len(steps) > 1, seeds  # no set's seed follows from another's (32 draws from 2**30: never all equal)
