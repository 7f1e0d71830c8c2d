"""The in-process corpora as contracts files (tests/testing/corpus_files.py, issue 53.5): the committed files are
the generator's output, they load as `kcgate run` loads them, and the shipped bugs' file and their fixed twins'
differ only in the kernels."""

from __future__ import annotations

import re

import pytest

from kcgate.contracts.load import load_project
from tests.testing import corpus_files
from tests.testing.faults.naming_sets_shipped import SHIPPED


@pytest.mark.parametrize("name", sorted(corpus_files.FILES))
def test_the_committed_file_is_the_generators_output(name: str) -> None:
    text = {"shipped": lambda: corpus_files.shipped_text(False),
            "shipped-fixed": lambda: corpus_files.shipped_text(True),
            "false-alarms": corpus_files.false_alarm_text}[name]()  # fmt: skip
    assert corpus_files.FILES[name].read_text() == text, "run `python -m tests.testing.corpus_files`"


def test_every_file_loads_with_its_kernels_located() -> None:
    ids = {}
    for name, path in corpus_files.FILES.items():
        project = load_project(path)
        ids[name] = [c.id for c in project.contracts]
    assert ids["shipped"] == ids["shipped-fixed"] == [s.named.bug.id for s in SHIPPED]
    assert len(ids["false-alarms"]) == len(set(ids["false-alarms"])) >= 40


def test_the_bugs_and_their_twins_differ_only_in_the_kernel_lines() -> None:
    strip = lambda p: [  # noqa: E731
        ln for ln in p.read_text().splitlines() if not ln.startswith(("kernel = ", "name = ", "# The 20"))
    ]
    assert strip(corpus_files.FILES["shipped"]) == strip(corpus_files.FILES["shipped-fixed"])
    kernels = re.findall(r'^kernel = "(.*)"$', corpus_files.FILES["shipped"].read_text(), re.M)
    assert len(kernels) == 20 and not any("shipped_fixed" in k for k in kernels)


def test_a_class_the_loader_refuses_for_the_op_becomes_plain_correctness() -> None:
    by_id = {c.id: c for c in load_project(corpus_files.FILES["shipped"]).contracts}
    assert by_id["hf-rope-table-bf16"].klass == "C-CMP-01"  # C-PRC-01 does not apply to rope
    assert by_id["te-ce-mean-over-all-rows"].klass == "C-PRC-01"
