"""On the H200: one full PPO iteration on CudaKernel-Bundled-v0 through the real judge (LLaMA architecture,
random weights, cudagym's BPE); prints rollout and update tokens per second."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")


@pytest.mark.gpu
def test_one_ppo_iteration_through_the_real_judge_on_the_gpu(tmp_path):
    from cudagym.baselines.ppo.gpu_iteration import main

    figures = main(["--episodes", "4", "--max-turns", "3", "--out", str(tmp_path)])
    assert figures["device"] != "cpu"
    assert all(figures["evaluated"])  # every episode was judged (a truncated episode is judged on its files)
    assert figures["rollout_tokens_per_s"] > 0 and figures["update_tokens_per_s"] > 0
    assert (tmp_path / "gpu_iteration.json").is_file()
