"""cudagym.cuda_driver: the hand-bound driver calls (stream memory operations; the VMM calls run in the arenas)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
import time

import pytest
import torch

from cudagym import cuda_driver

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_bad_values_are_refused_before_the_driver_is_touched() -> None:
    with pytest.raises(ValueError, match=r"WriteValue32_v2: expected a 32-bit unsigned value .* got 4294967296"):
        cuda_driver.stream_write_value32(0, 4096, 2**32)
    with pytest.raises(ValueError, match=r"cuStreamWaitValue32_v2: expected a 32-bit unsigned value .* got -1"):
        cuda_driver.stream_wait_value32(0, 4096, -1)
    with pytest.raises(ValueError, match="expected a device address, got 0"):
        cuda_driver.stream_write_value32(0, 0, 1)


@pytest.mark.skipif(_has_driver(), reason="checks the message on a machine without the CUDA driver")
def test_without_a_driver_the_error_names_it() -> None:
    with pytest.raises(RuntimeError, match=r"needs the CUDA driver \(libcuda.so.1\), which this machine lacks"):
        cuda_driver.stream_wait_value32(0, 4096, 1)


def test_importing_loads_nothing() -> None:
    code = ("import sys, cudagym.cuda_driver as d; "
            "print(d._instance is None, 'torch' in sys.modules, 'cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False", "False"]


# --- GPU ---------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@needs_gpu
def test_gpu_write_then_wait_orders_two_streams() -> None:
    words = torch.zeros(2, dtype=torch.int32, device="cuda")
    flag, result = words.data_ptr(), words.data_ptr() + 4
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    cuda_driver.stream_wait_value32(consumer.cuda_stream, flag, 5)  # GEQ: 6 releases it, as 5 would
    cuda_driver.stream_write_value32(consumer.cuda_stream, result, 9)
    time.sleep(0.05)
    assert not consumer.query()  # still waiting for the flag
    with torch.cuda.stream(producer):
        torch.cuda._sleep(1_000_000)
    cuda_driver.stream_write_value32(producer.cuda_stream, flag, 6)
    deadline = time.monotonic() + 10.0
    while not consumer.query():
        if time.monotonic() > deadline:
            cuda_driver.stream_write_value32(torch.cuda.current_stream().cuda_stream, flag, 2**31 - 1)  # release
            consumer.synchronize()
            pytest.fail("the consumer stream did not see the producer's write within 10 s")
        time.sleep(0.001)
    assert words.tolist() == [6, 9]


@pytest.mark.gpu
@needs_gpu
def test_gpu_a_fresh_thread_gets_the_streams_context() -> None:
    word = torch.zeros(1, dtype=torch.int32, device="cuda")
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    errors: list[Exception] = []

    def write() -> None:
        try:
            cuda_driver.stream_write_value32(stream.cuda_stream, word.data_ptr(), 42)
        except Exception as exc:  # handed back to the test thread
            errors.append(exc)

    worker = threading.Thread(target=write)
    worker.start()
    worker.join()
    assert not errors, errors
    stream.synchronize()
    assert word.item() == 42
