"""Benchmarking agents: judge one solution, run agents over suites, report Table-1 metrics, export trajectories.

One concept per module:

- :mod:`cudagym.bench.evaluate`: ``cudagym eval``, one solution folder (or ``model_new.py``) judged once.
- :mod:`cudagym.bench.agents`: the agents ``cudagym bench`` can run, by name.
- :mod:`cudagym.bench.journal`: a run folder: its manifest and the JSONL journal of finished episodes.
- :mod:`cudagym.bench.runner`: ``cudagym bench``, episodes in parallel through one shared judge, resumable.
- :mod:`cudagym.bench.metrics`: pure metric functions (pass rate, speedup tiers, geomean, fast_p, pass@k).
- :mod:`cudagym.bench.report`: ``cudagym report``, Markdown and CSV tables of a run.
- :mod:`cudagym.bench.plots`: the report's PNG figures (matplotlib, the ``plots`` extra).
- :mod:`cudagym.bench.export`: ``cudagym export``, a run's episodes as RFT, SFT or chat training data.

Nothing here is imported by ``import cudagym``.
"""

from __future__ import annotations
