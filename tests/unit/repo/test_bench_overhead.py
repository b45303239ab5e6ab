"""The pod-start benchmark's pure parts (benchmarks/bench_overhead.py): the kubelet's log
timestamps, the first training line, and the rows with each placement's overhead against
no probe. No cluster, no timing."""
from __future__ import annotations

import pytest

from tests.support.fixtures import load_benchmark

bo = load_benchmark("bench_overhead")


def test_log_time_keeps_the_nanoseconds_the_kubelet_writes():
    assert bo.log_time("2026-12-06T22:50:01.250000000Z") - bo.log_time("2026-12-06T22:50:01Z") == pytest.approx(0.25)


def test_the_first_training_line_is_the_examples_rank_line_only():
    assert bo.FIRST_LINE.match("2026-12-06T22:50:01.1Z rank 1/2 on node-b: 674 training samples, gloo")
    assert not bo.FIRST_LINE.match("2026-12-06T22:50:01.1Z epoch 10/40 loss 0.1")
    assert not bo.FIRST_LINE.match("2026-12-06T22:50:01.1Z rank 0: test accuracy 0.97")


def run(setting, first, runtime="containerd", started=1.0):
    return dict(runtime=runtime, nodes=2, setting=setting, started_s=started, first_line_s=first)


def test_rows_give_each_placement_its_overhead_over_no_probe_from_medians():
    results = [run("off", 3.0), run("off", 3.2), run("off", 9.0), run("inplace", 3.9), run("inplace", 4.0),
               run("inplace", 4.1), run("pods", 8.0), run("pods", None)]
    rows = {r[2]: r for r in bo._rows(results, [2], ["containerd"], ["off", "pods", "inplace"])}
    assert rows["in place"][4:7] == ["4.00", "+0.8 s", "1.25x"]
    assert rows["probe pods"][4:6] == ["8.00", "+4.8 s"]  # a run without its line is left out
    assert rows["no probe"][5] == "-"


def test_rows_without_a_baseline_say_so():
    rows = bo._rows([run("inplace", 4.0)], [2], ["containerd"], ["inplace"])
    assert rows[0][5:7] == ["-", "-"]
