"""The shared conftest: its gpu skip hook and its fixture data builders."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import KERNELBENCH_COUNTS, OPS6K_ROWS, cuda_available

from cudagym.task import parse_task_source

GPU_TESTS = '''
import pytest

@pytest.mark.gpu
def test_needs_gpu():
    import torch
    assert torch.cuda.is_available()

def test_plain():
    assert True
'''


def test_gpu_marked_tests_skip_without_cuda_and_run_with_it(pytester):
    # import torch before the inner run: pytester drops modules first imported inside it, and torch
    # cannot be imported twice in one process
    has_cuda = cuda_available()
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text())
    pytester.makeini("[pytest]\naddopts = -ra --strict-markers\nmarkers =\n    gpu: needs CUDA\n")
    pytester.makepyfile(test_gpu_marker=GPU_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    if has_cuda:
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["*needs a CUDA GPU*"])


def test_kernelbench_tree_fixture_has_the_real_layout(kernelbench_tree):
    for level, count in KERNELBENCH_COUNTS.items():
        files = sorted((kernelbench_tree / "KernelBench" / f"level{level}").glob("*.py"))
        assert len(files) == count
        for path in files[:5]:
            parse_task_source(path.read_text(), origin=str(path))


def test_kernelbench_parquet_fixture_has_the_hub_schema(kernelbench_parquet):
    names = sorted(p.relative_to(kernelbench_parquet).as_posix() for p in kernelbench_parquet.rglob("*.parquet"))
    assert names == [f"data/level_{n}-00000-of-00001.parquet" for n in (1, 2, 3, 4)]
    schema = pq.read_schema(kernelbench_parquet / names[0])
    assert [(f.name, str(f.type)) for f in schema] == [
        ("code", "string"), ("level", "int64"), ("name", "string"), ("problem_id", "int64")]


def test_ops6k_fixture_has_the_data_set_schema(ops6k_parquet):
    assert ops6k_parquet.name == "data.parquet"
    table = pq.read_table(ops6k_parquet)
    assert table.schema.names == ["ops", "data_source", "code"]
    ops_type = table.schema.field("ops").type
    assert pa.types.is_list(ops_type) and ops_type.value_type == pa.string()
    assert table.schema.field("code").type == pa.string()
    assert table.num_rows == len(OPS6K_ROWS)
