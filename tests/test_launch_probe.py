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
