"""benchmarks/repeat_probe.py: its clock summary, and on a host without a GPU a clear account of each failed round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script

rp = load_script("benchmarks/repeat_probe.py", "repeat_probe")


def test_the_clock_summary_reads_nvidia_smi_samples_and_skips_what_is_not_one(tmp_path: Path) -> None:
    samples = tmp_path / "clocks.csv"
    samples.write_text("1980, 3201, 410.5, 51, 0x0000000000000000\n"
                       "garbage line\n"
                       "1500, 3201, 699.9, 63, 0x0000000000000004\n"
                       "1830, 3201, 650.0, 60, 0x0000000000000004\n")
    sampler = rp._ClockSampler(samples)
    summary = sampler.summary()
    assert summary == {"samples": 3, "sm_mhz_median": 1830.0, "sm_mhz_min": 1500.0, "power_w_max": 699.9,
                       "temp_c_max": 63.0, "event_reasons": ["0x0000000000000004"]}


def test_without_samples_the_summary_says_so(tmp_path: Path) -> None:
    samples = tmp_path / "clocks.csv"
    samples.write_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert "no clock samples" in rp._ClockSampler(samples).summary()["error"]


def test_a_round_on_a_host_without_a_gpu_fails_with_both_reasons_in_the_summary(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]
                                                                               ) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this is the CPU host's account; on a GPU the round runs")
    out = tmp_path / "out"
    rc = rp.main(["--task", "bundled/L1/01_Swish", "--protocol", "cudagym", "--rounds", "1", "--runs", "1",
                  "--out", str(out)])
    assert rc == 1
    text = (out / "summary.md").read_text()
    assert "round 0: the judge's check exited 1" in text and "no GPU" in text
    assert "round 0: the plain run failed" in text
    assert text in capsys.readouterr().out
    rounds = json.loads((out / "rounds.json").read_text())
    assert rounds[0]["judge"]["rc"] == 1 and "error" in rounds[0]["plain"]


def test_rounds_must_be_positive_and_env_items_key_value() -> None:
    with pytest.raises(SystemExit):
        rp.main(["--task", "bundled/L1/01_Swish", "--rounds", "0"])
    with pytest.raises(SystemExit):
        rp.main(["--task", "bundled/L1/01_Swish", "--env", "CUDNN_LOGLEVEL_DBG"])
