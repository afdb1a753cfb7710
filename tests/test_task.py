from __future__ import annotations

import json
import pickle

import pytest

from cudagym.errors import TaskFormatError
from cudagym.task import Task, content_hash, make_task, parse_task_source

RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''


def _task(source: str = RELU) -> Task:
    return make_task(source, id="L1/19_ReLU", suite="kernelbench", level=1, name="19_ReLU", origin="19_ReLU.py")


def test_make_task_reads_fields_and_ops():
    task = _task()
    assert task.id == "L1/19_ReLU"
    assert task.level == 1
    assert task.ops == ("relu",)
    assert task.metadata["origin"] == "19_ReLU.py"
    assert len(task.content_hash) == 64 and task.short_hash == task.content_hash[:12]


def test_hash_ignores_comments_and_whitespace_but_not_code():
    reformatted = RELU.replace("batch_size = 16", "batch_size   =   16  # rows").replace("\n\n\n", "\n\n\n\n# hi\n")
    assert content_hash(reformatted) == content_hash(RELU)
    assert content_hash(RELU.replace("16384", "16385")) != content_hash(RELU)
    assert content_hash(RELU.replace("torch.relu", "torch.sigmoid")) != content_hash(RELU)



@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("", "empty"),
        ("def (:\n", "not valid Python"),
        (RELU.replace("def get_inputs", "def get_inputz"), "missing get_inputs"),
        (RELU.replace("def get_init_inputs", "def nope"), "missing get_init_inputs"),
        (RELU.replace("class Model", "class Mdl"), "missing Model"),
        (RELU.replace("def forward", "def fwd"), "define `forward`"),
        (RELU + "\nModel = 3\n", "`Model` to be a class"),
    ],
)
def test_malformed_sources_name_the_file_and_what_is_missing(source, needle):
    with pytest.raises(TaskFormatError) as info:
        parse_task_source(source, origin="KernelBench/level1/19_ReLU.py")
    assert "KernelBench/level1/19_ReLU.py" in str(info.value)
    assert needle in str(info.value)


def test_task_is_frozen_hashable_picklable_and_json_serialisable():
    task = _task()
    with pytest.raises(AttributeError):
        task.level = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        task.metadata["ops"] = []  # type: ignore[index]
    assert {task: 1}[task] == 1
    assert pickle.loads(pickle.dumps(task)) == task
    data = json.loads(json.dumps(task.to_dict()))
    assert data["content_hash"] == task.content_hash and data["source"] == RELU


def test_parsing_never_executes_the_source(tmp_path):
    marker = tmp_path / "ran"
    evil = RELU + f"\nopen({str(marker)!r}, 'w').write('x')\n"
    _task(evil)
    assert not marker.exists()


def test_hash_is_pinned_so_it_stays_stable_across_python_versions():
    # The baseline cache is keyed by this hash on hosts with other Python versions (3.11 here, 3.12 on the
    # GPU hosts): the canonical serialisation must not drift, so pin a value computed once.
    assert content_hash("x = 1\n") == "c85404064bd37bdd825cc53b7d6d5f06322b8935dc0cbeaa52606e6d4119f1b1"
    assert content_hash(RELU) == _task().content_hash
