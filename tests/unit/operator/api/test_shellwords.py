"""The words a command hands torchrun (disttrain.api.shellwords): tables, and generated
scripts checked against bash itself (the options the checker sees are those bash passes)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.api import torchrun
from disttrain.api.shellwords import argv_words, kubelet_expand, split_script, unknown

ENV = {"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500", "PET_NNODES": "2", "PET_NODE_RANK": "1",
       "EMPTY": ""}


def values(script, env=ENV):
    commands = split_script(script, env)
    return None if commands is None else [[w.value for w in cmd] for cmd in commands]


@pytest.mark.parametrize("script,commands", [
    ("torchrun --a \\\n  --b \\\n  t.py", [["torchrun", "--a", "--b", "t.py"]]),  # continuations
    ("torchrun --nn\\\nodes=2 t.py", [["torchrun", "--nnodes=2", "t.py"]]),  # inside a word
    ("a; b && c || d | e & f\ng", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]]),
    ("x --m=$MASTER_ADDR --p=${MASTER_PORT} --r=$RANK", [["x", "--m=10.0.0.7", "--p=29500", f"--r={unknown('RANK')}"]]),
    ("x '$MASTER_ADDR' \"$MASTER_ADDR\" \\$MASTER_ADDR", [["x", "$MASTER_ADDR", "10.0.0.7", "$MASTER_ADDR"]]),
    ("x $(MASTER_ADDR) $$(MASTER_ADDR)", [["x", "10.0.0.7", unknown("$(MASTER_ADDR)")]]),  # the kubelet's first
    ("x $(hostname) `id` $1", [["x", unknown("$(hostname)"), unknown("`id`"), unknown("$1")]]),
    ("x ${RANK:-0} ${PET_NODE_RANK:-0} ${EMPTY:-3} \"${EMPTY-3}\" ${EMPTY:-$x}",
     [["x", unknown("${RANK:-0}"), "1", "3", "", unknown("${EMPTY:-$x}")]]),
    ("x $EMPTY \"$EMPTY\" '' a$EMPTY", [["x", "", "", "a"]]),  # an unquoted empty expansion is no word
    ("# torchrun --nnodes=9\nx a#b # c", [["x", "a#b"]]),
    ("x 2>&1 >/dev/null a <in b &>log c", [["x", "a", "b", "c"]]),
    ("x \"a \\\" \\$ \\n\" $'q\\'r'", [["x", 'a " $ \\n', "q'r"]]),
    ("x 'unclosed", None),
    ("x \"unclosed", None),
    ("x ${unclosed", None),
    ("x $(unclosed", None),
    ("", []),
    ("x \\", [["x", "\\"]]),
])
def test_split_script(script, commands):
    assert values(script) == commands


def test_a_word_is_shown_as_written():
    (cmd,) = split_script("torchrun --node_rank=${RANK} \\\n --x=\"$(MASTER_ADDR)\"", ENV)
    assert [w.shown for w in cmd] == ["torchrun", "--node_rank=${RANK}", '--x="$(MASTER_ADDR)"']
    assert [w.value for w in cmd][2] == "--x=10.0.0.7"


@pytest.mark.parametrize("text,out", [
    ("$(MASTER_ADDR):$(MASTER_PORT)", "10.0.0.7:29500"),
    ("$(NOPE) $$(MASTER_ADDR) $$ $ $(", "$(NOPE) $(MASTER_ADDR) $ $ $("),
])
def test_kubelet_expand(text, out):
    assert kubelet_expand(text, ENV)[0] == out
    assert [w.value for w in argv_words([text], ENV)] == [out]


@given(st.lists(st.sampled_from(list("ab $\\'\"`{}()#;&|<>\n=-:_09\x00") + ["$(", "${", "\\\n", "$(EMPTY)"]),
               max_size=60).map("".join))
def test_split_script_never_raises(script):
    commands = split_script(script, ENV)
    assert commands is None or all(isinstance(w.value, str) and w.shown for cmd in commands for w in cmd)
    torchrun.launches(["bash", "-c", script], ENV)


# ---- generated scripts, checked against bash ----------------------------------------------
BASH = shutil.which("bash")
# one write per run (programs in a pipeline run at once): its arguments, each ended by \036, then \035
_FAKE = '#!/bin/sh\nr=$(printf "%s\\036" "$@"; printf "\\035")\nprintf "%s" "$r" >> "$OUT"\n'
_VALUES = ["2", "$PET_NNODES", "${PET_NNODES}", '"$PET_NNODES"', "'$PET_NNODES'", "$MASTER_ADDR",
           "${MASTER_ADDR}:${MASTER_PORT}", "$(MASTER_ADDR)", '"${MASTER_ADDR}"', "x\\ y", "a'b c'd",
           "\\$MASTER_PORT", "$RANK", "${RANK}x", "$EMPTY", '"$EMPTY"', '"a\\"b"', '"x\\\ny"', "'x\\\ny'",
           "${EMPTY:-3}", "a#b"]
_OPTIONS = ["--nnodes", "--node_rank", "--master-addr", "--rdzv_endpoint", "--max_restarts", "-t"]
_PREFIXES = ["torchrun", "./torchrun", "A=1 torchrun", "env B=2 torchrun", "python -m torch.distributed.run",
             "python3 -u -m torch.distributed.run", "exec torchrun"]
_GAPS = [" ", "  ", "\t", " \\\n    ", "\\\n"]
_SEPARATORS = ["; ", "\n", " && ", "\n# torchrun --nnodes=9 \\\n", " 2>&1\n", "\n\n", " | ", " >/dev/null;"]


@st.composite
def _option(draw):
    name, value = draw(st.sampled_from(_OPTIONS)), draw(st.sampled_from(_VALUES))
    if value == "$RANK":  # unset in bash, no word at all; to the checker a value it cannot know
        return f"{name}={value}"
    return draw(st.sampled_from([f"{name}={value}", f"{name} {value}", f'"{name}="{value}']))


@st.composite
def _command(draw, last):
    prefix = draw(st.sampled_from(_PREFIXES if last else _PREFIXES[:-1]))
    words = [prefix] + draw(st.lists(_option(), max_size=4)) + ["t.py"] + draw(st.lists(_option(), max_size=2))
    gaps = [" "] + [draw(st.sampled_from(_GAPS)) for _ in words[2:]]
    return words[0] + "".join(g + w for g, w in zip(gaps, words[1:]))


@st.composite
def _script(draw):
    n = draw(st.integers(1, 3))
    commands = [draw(_command(i == n - 1)) for i in range(n)]
    seps = [draw(st.sampled_from(_SEPARATORS)) for _ in commands[1:]]
    return commands[0] + "".join(s + c for s, c in zip(seps, commands[1:]))


def _bash_argvs(script: str, tmp: Path) -> list[list[str]]:
    """What bash hands each torchrun/python the script runs (after the kubelet's $(...))."""
    out = tmp / "out"
    out.write_bytes(b"")
    env = {**ENV, "PATH": f"{tmp}:/usr/bin:/bin", "OUT": str(out)}
    subprocess.run([BASH, "-c", kubelet_expand(script, ENV)[0]], env=env, check=True, timeout=10, cwd=tmp)
    return [a.split("\x1e")[:-1] for a in out.read_bytes().decode().split("\x1d")[:-1]]


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bin")
    for prog in ("torchrun", "python", "python3"):
        (tmp / prog).write_text(_FAKE)
        os.chmod(tmp / prog, 0o755)
    return tmp


@pytest.mark.skipif(BASH is None, reason="needs bash")
@given(script=_script())
def test_the_options_seen_are_those_bash_passes(fake_bin, script):
    ours = []
    for cmd in split_script(script, ENV) or []:
        start = torchrun.torchrun_args([w.value for w in cmd])
        assert start is not None, cmd
        ours.append([re.sub("\x00[^\x00]*\x00", "", w.value) for w in cmd[start:]])  # unset in bash
    theirs = [a[a.index("torch.distributed.run") + 1:] if "torch.distributed.run" in a else a
              for a in _bash_argvs(script, fake_bin)]
    assert sorted(ours) == sorted(theirs), script
    launched = torchrun.launches(["bash", "-c", script], ENV)
    assert [[o.text for o in opts] for opts in launched]  # every launch read, none hidden
    assert len(launched) == len(theirs)
