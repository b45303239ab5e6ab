"""The line of a failed container's log tail that says why (:mod:`disttrain.diagnosis.logline`),
over real tails: ``logtails/`` beside this file holds what ``python bad.py`` and ``python -m
torch.distributed.run --nnodes=1 --nproc-per-node=1 bad.py`` (torch 2.8) printed for a
script that raised, exited 3 and was killed (SIGKILL), and for two local ranks that both
raised (``--nproc-per-node=2``); paths shortened."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.diagnosis.logline import LINE_LIMIT, meaningful_line, quote

TAILS = Path(__file__).parent / "logtails"
BAD = "ValueError: bad shape: expected (4, 8), got (4, 9)"
MATMUL = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"


def tail(name: str, kubelet: bool = False) -> str:
    """The file's text; ``kubelet``: only its last 2048 bytes, as the kubelet keeps them."""
    text = (TAILS / name).read_text()
    return text.encode()[-2048:].decode(errors="replace") if kubelet else text


@pytest.mark.parametrize("kubelet", [False, True])
@pytest.mark.parametrize("name,want", [
    ("plain_bad.txt", BAD), ("torchrun_bad.txt", BAD),
    ("plain_rt.txt", MATMUL), ("torchrun_rt.txt", MATMUL),
    ("plain_exit3.txt", "training step 1"), ("torchrun_exit3.txt", "training step 1"),
    ("plain_kill.txt", "about to die"),
    ("torchrun_kill.txt", "Signal 9 (SIGKILL) received by PID 7384"),
])
def test_the_trainers_own_line_not_the_launchers_banner(name, want, kubelet):
    assert meaningful_line(tail(name, kubelet)) == want


def test_two_local_ranks_the_last_error_and_the_kubelet_tail_that_lost_it():
    """--nproc-per-node=2, both local ranks raised: the last one's error; the kubelet's
    2048 bytes hold only torchrun's two summary tables (starting mid-line): no line is
    made up from them, and the message says where the error is."""
    assert meaningful_line(tail("torchrun2_bad.txt")) == (
        "RuntimeError: NCCL error on local rank 1: unhandled system error")
    assert meaningful_line(tail("torchrun2_bad.txt", kubelet=True)) is None
    assert quote(tail("torchrun2_bad.txt", kubelet=True), "j-worker-1", "trainer") == (
        "no error line in its log's last 2048 bytes (kubectl logs j-worker-1 -c trainer)")
    assert quote("", "j-worker-1") == "" and quote(tail("torchrun_bad.txt", kubelet=True), "p") == BAD


@pytest.mark.parametrize("text,want", [
    ("step 9\nKilled", "Killed"),
    ("loss 0.1\nSegmentation fault (core dumped)\n", "Segmentation fault (core dumped)"),
    ("x\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nmore text",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("AssertionError\n", "AssertionError"),
    ("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default\nstep 3", "step 3"),
    ("====\n\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n====", None),
    ("", None), (None, None), (42, None),
])
def test_table(text, want):
    assert meaningful_line(text) == want


def test_a_long_line_is_cut_at_a_word_boundary():
    line = meaningful_line("RuntimeError: " + "word " * 100)
    assert line is not None and len(line) <= LINE_LIMIT and line.endswith("word…")


LAUNCHER = [ln for ln in tail("torchrun_exit3.txt").splitlines()[1:]]  # all torchrun's own
LAUNCHER = [ln for ln in tail("torchrun2_bad.txt").splitlines()[:4]] + LAUNCHER  # its OMP banner


@settings(max_examples=300, deadline=None)
@given(user=st.lists(st.text(max_size=80), max_size=5), start=st.integers(0, len(LAUNCHER)))
def test_never_raises_and_never_returns_a_launcher_line(user, start):
    """The user's lines, then torchrun's own output from any line on (a kubelet tail may
    start anywhere in it): never raises, one bounded line, never one of torchrun's own."""
    got = meaningful_line("\n".join(user + LAUNCHER[start:]))
    assert got is None or (got.strip() and len(got) <= LINE_LIMIT and "\n" not in got)
    banner = {" ".join(x.split()) for x in LAUNCHER if x.strip()}
    if got is not None and got in banner:
        assert any(" ".join(u.split()) == got for u in user)  # the user printed it


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000))
def test_any_text_gives_none_or_one_bounded_line(text):
    got = meaningful_line(text)
    assert got is None or (got.strip() == got and got and len(got) <= LINE_LIMIT and "\n" not in got)


RANK_PREFIXED = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/workspace/train.py", line 9, in <module>
[rank1]:     x = a @ b
[rank1]: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 9x4)
[rank1]:[W1205 12:00:00.000000000 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL.
"""


@pytest.mark.parametrize("text,want", [
    # torch prefixes each rank's output with [rankN]: (or [defaultN]:); the exception is the
    # trainer's line, not the warning printed after it
    (RANK_PREFIXED, "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 9x4)"),
    ("[default0]: ValueError: bad shape\n[default0]: shutting down", "ValueError: bad shape"),
    # terminal colours and carriage returns never reach the message, nor hide the exception
    ("\x1b[31mRuntimeError: ошибка\x1b[0m\r\n", "RuntimeError: ошибка"),
    ("x\n\x1b[1;31mValueError: bad shape\x1b[0m\n[rank0]: done", "ValueError: bad shape"),
    ("\x07\x1b]0;title\x07Killed\n", "Killed"),
])
def test_prefixes_and_escape_sequences(text, want):
    assert meaningful_line(text) == want
