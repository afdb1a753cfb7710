"""benchmarks/sync_probe.py: its verdict on a forward that waits for the GPU inside, its refusals off the GPU, and
(on a GPU) a whole run on a bundled task."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import sync_probe  # noqa: E402

torch = pytest.importorskip("torch")


def found(alone_us: float, behind_us: float) -> dict:
    return {"task": "t", "protocol": "cudagym", "cover_ms": 0.1,
            "waits": [{"call": "cudaLaunchKernel", "per_forward": 1261.0, "host_us_per_forward": 7583.1}],
            "spin": {"host_us_alone": alone_us, "host_us_behind_spin": behind_us, "spin_ms": 50.0},
            "timed": {"fastest_us": 9880.0, "median_us": 11732.9,
                      "windows": [{"calls": "1-20", "median_us": 12296.3, "slow_share": 0.6, "host_us": 12321.0}]}}


def test_the_table_says_whether_the_forward_waits_for_the_gpu_inside() -> None:
    launch_bound = sync_probe.render(found(10_703.3, 10_867.3))  # L1/71 on the H200: host-bound, no wait
    assert "does not wait for the GPU inside" in launch_bound and "| `cudaLaunchKernel` | 1261.0 |" in launch_bound
    assert "| 1-20 | 12,296.3 | 0.60 |" in launch_bound
    waits = sync_probe.render(found(12_552.9, 50_786.7))  # L1/78: its host waits out the spin
    assert "the forward waits for the GPU inside." in waits


def test_the_probe_loads_the_task_as_the_judge_does(tmp_path: Path) -> None:
    from cudagym.judge.harness.integrity import TorchFlags

    before = TorchFlags.capture()  # the probe sets the judge's switches for its process (grad mode off among them)
    try:
        model, inputs, flush = sync_probe._setup("bundled/L1/01_Swish", "cudagym", "cpu")
        assert not torch.is_grad_enabled() and not torch.backends.cudnn.allow_tf32  # cudagym: strict fp32
        with torch.no_grad():
            out = model(*inputs)
    finally:
        before.apply()  # the rest of this test process (a TRL training step among it) needs them back
    assert out.shape == inputs[0].shape and flush.numel() * 4 == 256 << 20
    assert torch.is_grad_enabled()


def test_off_the_gpu_it_says_so_and_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the refusal is for hosts without one")
    assert sync_probe.main(["--task", "bundled/L1/01_Swish"]) == 2
    assert "no CUDA device here" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sync_probe.main(["--task", "bundled/L1/01_Swish", "--runs", "0"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_run_on_the_gpu_writes_its_three_looks(tmp_path: Path) -> None:
    assert sync_probe.main(["--task", "bundled/L1/01_Swish", "--runs", "40", "--window", "20", "--spin-ms", "20",
                            "--out", str(tmp_path)]) == 0
    data = json.loads(next(tmp_path.glob("sync-*.json")).read_text())
    assert len(data["timed"]["windows"]) == 2 and data["timed"]["fastest_us"] > 0
    assert any(w["call"].startswith("cudaLaunchKernel") for w in data["waits"])
    assert data["spin"]["host_us_behind_spin"] < data["spin"]["host_us_alone"] + 10_000  # Swish never waits
