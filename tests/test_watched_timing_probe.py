"""benchmarks/watched_timing_probe.py: its table, its refusals off the GPU, and (on a GPU) a run on a bundled task."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import watched_timing_probe  # noqa: E402

torch = pytest.importorskip("torch")


def found(plain_us: float, profiled_us: float) -> dict:
    return {"task": "bundled/L1/01_Swish", "protocol": "cudagym",
            "blocks": {"window": 20, "pairs": 5, "cover_ms": 0.1, "plain_us": plain_us, "profiled_us": profiled_us,
                       "plain_host_us": 40.0, "profiled_host_us": 52.0, "events_per_call": 1.0,
                       "stop_ms_per_1000_events": 120.0, "read_ms_per_1000_events": 35.5, "busy_over_timed": 0.987}}


def test_the_table_gives_the_ratio_a_protocol_would_pay() -> None:
    text = watched_timing_probe.render(found(139.0, 141.78))
    assert "| plain | 139.0 | 40.0 |" in text and "| profiled | 141.8 | 52.0 |" in text
    assert "**Profiled / plain: 1.020x the device time, 1.300x the host time per call.**" in text
    assert "Busy GPU time per call over the same calls' timed median: 0.987." in text
    assert "`events()` 35.50 ms per 1,000 events" in text


def test_off_the_gpu_it_says_so_and_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the refusal is for hosts without one")
    assert watched_timing_probe.main(["--task", "bundled/L1/01_Swish"]) == 2
    assert "no CUDA device here" in capsys.readouterr().err
    for bad in (["--window", "0"], ["--pairs", "0"], ["--cover-ms", "-1"]):
        with pytest.raises(SystemExit):
            watched_timing_probe.main(["--task", "bundled/L1/01_Swish", *bad])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_run_on_the_gpu_times_both_modes_and_fits_the_profile_to_them(tmp_path: Path) -> None:
    assert watched_timing_probe.main(["--task", "bundled/L1/01_Swish", "--window", "10", "--pairs", "2",
                                      "--out", str(tmp_path)]) == 0
    data = json.loads(next(tmp_path.glob("watched-*.json")).read_text())["blocks"]
    assert data["plain_us"] > 0 and data["profiled_us"] > 0
    assert data["events_per_call"] >= 1  # Swish's one elementwise kernel, the flush and spin left out
    assert 0.5 < data["busy_over_timed"] < 1.5
    assert (tmp_path / "watched-bundled_L1_01_Swish.md").exists()
