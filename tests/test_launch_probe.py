"""benchmarks/launch_probe.py on the CPU: its forwards are the ones it names, bad input and no GPU stop clearly."""

from __future__ import annotations

import pytest
import torch
from script_module import load_script

probe = load_script("benchmarks/launch_probe.py", "launch_probe")


def test_the_forwards_are_the_variants_it_offers() -> None:
    assert tuple(probe.forwards(torch)) == probe.VARIANTS
    assert probe.VARIANTS[:2] == ("none", "conv_transpose_b128")  # the key pair runs first


def test_an_unknown_variant_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        probe.main(["--variants", "conv_transpose_b999"])
    assert stop.value.code == 2
    assert "invalid choice: 'conv_transpose_b999'" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_without_a_gpu_it_says_so_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--rounds", "1"]) == 1
    assert "no GPU" in capsys.readouterr().err


def test_a_variant_that_may_block_its_host_runs_only_split(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        probe.main(["--variants", "none", "small_kernels_2000"])
    assert stop.value.code == 2
    assert "small_kernels_2000 runs only with --split" in capsys.readouterr().err


def test_an_unknown_protocol_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        probe.main(["--protocol", "cudagym-v99"])
    assert stop.value.code == 2
    assert "unknown protocol 'cudagym-v99'" in capsys.readouterr().err


@pytest.mark.parametrize(("spec", "matmul", "cudnn"), [("cudagym", False, False), ("kernelbench", False, True)])
def test_the_probe_takes_the_protocols_precision_switches(spec: str, matmul: bool, cudnn: bool) -> None:
    # the judge saw L2/19's excess under the default (cuDNN TF32 off: another algorithm than torch's default picks);
    # the second process takes the same --protocol on its command line
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.get_float32_matmul_precision())
    try:
        torch.backends.cudnn.allow_tf32 = not cudnn
        said = probe.use_precision(spec)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (matmul, cudnn)
        assert said.endswith(f"TF32 off for matmuls, {'on' if cudnn else 'off'} for cuDNN")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[:2]
        torch.set_float32_matmul_precision(before[2])
        torch.set_grad_enabled(True)


def test_rounds_below_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        probe.main(["--rounds", "0"])
    assert stop.value.code == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err


def test_the_split_mode_stops_on_an_unexpected_word_naming_it() -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "print('ready'); print('oops 1'); import time; time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    assert probe._expect(child, "ready") == ""
    with pytest.raises(RuntimeError, match=r"said 'oops 1\\n' where 'armed 1' was due \(exit -9\)"):
        probe._expect(child, "armed 1")
    assert child.poll() == -9  # the process it gave up on is ended, not left running


def test_the_split_mode_goes_ahead_when_the_forward_is_not_queued_in_time() -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5); print('armed 1', flush=True)"],
                             stdout=subprocess.PIPE, text=True)
    assert probe._expect(child, "armed 1", within_s=0.2) is None  # late: the staging would go ahead
    assert probe._expect(child, "armed 1", within_s=10.0) == ""
    child.wait(timeout=10)


def _event(name: str, start: float, end: float, gpu: bool = True) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(name=name, device_type="DeviceType.CUDA" if gpu else "DeviceType.CPU",
                           time_range=SimpleNamespace(start=start, end=end))


def test_the_queueing_report_names_work_that_began_before_the_go() -> None:
    events = [  # two rounds: the second has a memset queued beside the wait, which runs before the go's mark
        _event("round 1", 0.0, 10.0, gpu=False), _event("cudaLaunchKernel", 1.0, 2.0, gpu=False),
        _event(probe.MARK, 100.0, 101.0), _event("fft2d_r2c", 101.0, 150.0),
        _event("round 2", 200.0, 210.0, gpu=False), _event("cudaLaunchKernel", 201.0, 202.0, gpu=False),
        _event("cudaMemsetAsync", 203.0, 204.0, gpu=False),
        _event("Memset (Device)", 215.0, 217.0), _event(probe.MARK, 300.0, 301.0), _event("fft2d_r2c", 301.0, 360.0),
    ]
    report = probe.queue_report(events, rounds=2)
    assert report["before_go"] == [{"name": "Memset (Device)", "rounds": 1, "start_us": -85.0, "length_us": 2.0}]
    assert report["forward_median_us"] == 55.0  # from each mark to the round's last GPU work: 50 and 60
    assert report["api_calls_per_round"] == {"cudaLaunchKernel": 1.0, "cudaMemsetAsync": 0.5}


def test_staging_first_is_refused_without_a_second_process(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        probe.main(["--stage-first"])
    assert stop.value.code == 2
    assert "--stage-first needs --split" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "said"), [
    (["--split", "--child-env", "CUDA_DEVICE_MAX_CONNECTIONS"], "--child-env takes NAME=VALUE pairs"),
    (["--split", "--child-env", "=1"], "--child-env takes NAME=VALUE pairs"),
    (["--child-env", "CUDA_DEVICE_MAX_CONNECTIONS=1"], "--child-env needs --split"),
])
def test_the_second_process_environment_is_checked_before_anything_runs(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        probe.main(argv)
    assert stop.value.code == 2
    assert said in capsys.readouterr().err
