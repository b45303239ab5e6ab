"""Every condition message is one line of at most 400 characters, never cut mid-word.

Over every scenario-like report set (:mod:`tests.support.scenario_reports`), through the
probe verdict as the reconcile step writes it (the diagnosis, the spec's advice, the
Step's clip, Failed's "preflight failed (...)" wrapper), with several specs; and over
generated text for the cutting functions themselves."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.diagnosis import messages
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import verdict
from tests.support.builders import given as step_given
from tests.support.scenario_reports import SCENARIOS

SPECS = [{}, {"network": {"hostNetwork": False}}, {"network": {"hostNetwork": True, "portRange": "61000-62000"}},
         {"probe": {"maxLinkImbalance": 1.5}}]


def at_word_boundary(text: str, out: str) -> bool:
    """``out`` is ``text`` whole, or a head of it ending at a word boundary and ``…``."""
    if out == text:
        return True
    head = out[: -len(messages.ELLIPSIS)]
    if not out.endswith(messages.ELLIPSIS) or not text.startswith(head):
        return False
    rest = text[len(head):]
    if not any(c in messages.BOUNDARY for c in text[: len(out)]):
        return True  # one token longer than the room: nowhere else to cut
    return not head or head[-1] in messages.BOUNDARY or rest[:1] in messages.BOUNDARY


@pytest.fixture
def cuts(monkeypatch):
    """Every cut made while the test runs, as (text, limit, result)."""
    seen: list[tuple[str, int, str]] = []
    real = messages.cut

    def recording(text, limit):
        out = real(text, limit)
        seen.append((text.strip(), limit, out))
        return out

    monkeypatch.setattr(messages, "cut", recording)
    return seen


@pytest.mark.parametrize("spec", SPECS, ids=["default", "podnet", "portrange", "imbalance"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_message_is_one_line_bounded_and_cut_at_a_word(name, spec, cuts):
    outs, master = SCENARIOS[name]
    b = step_given().nodes(len(outs)).spec(**spec).with_outcomes(*outs, master=master)
    s = b.build()
    verdict.write(s, list(outs), master)  # the scenarios' reports as given (not this job's: no trust check)
    for c in s.conds:
        m = c["message"]
        assert m.strip() and "\n" not in m and "\r" not in m, (c["type"], m)
        assert len(m) <= cond.MAX_MESSAGE, (c["type"], len(m), m)
        assert m.count(messages.ELLIPSIS) <= 1, (c["type"], m)  # never cut twice
        assert "..." not in m[-4:], (c["type"], m)
    for text, limit, out in cuts:
        assert len(out) <= limit and at_word_boundary(text, out), (text, limit, out)


def test_the_healthy_network_verdict_is_one_sentence():
    outs, master = SCENARIOS["healthy"]
    s = step_given().nodes(len(outs)).with_outcomes(*outs, master=master).build()
    verdict.write(s, list(outs), master)
    m = cond.get(s.conds, "NetworkValidated")["message"]
    assert m.startswith("eth1 (10.101.0.0/24) chosen on every node: ") and "not chosen" not in m
    assert "not preferred" not in m and messages.ELLIPSIS not in m
    assert any("eth0 not preferred" in x for x in s.status["probe"]["interfacesNotChosen"])


WORDS = st.lists(st.sampled_from(["node-a", "10.100.0.1", "eth0", "(DuplicateAddress:", "x" * 30, "ok;",
                                  "a", "bridge,", "https://pytorch.org/docs/stable/elastic/errors.html",
                                  "\n", "Traceback", "ValueError:", "é"]), max_size=200)


@settings(max_examples=300, deadline=None)
@given(words=WORDS, seps=st.sampled_from([" ", "  ", "; ", "\n"]), limit=st.integers(2, 450))
def test_clip_is_one_line_bounded_and_cuts_at_a_word(words, seps, limit):
    text = seps.join(words)
    out = cond.clip(text, limit)
    assert "\n" not in out and len(out) <= limit
    assert at_word_boundary(messages.one_line(text), out), (text, out)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=600), limit=st.integers(1, 450))
def test_cut_never_raises_and_is_bounded(text, limit):
    out = messages.cut(text, limit)
    assert len(out) <= limit
    assert at_word_boundary(text.strip(), out) or len(text.strip()) > limit


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\u2028", "\x85", "\x0b", "\x0c", "\u2029"])
def test_every_line_break_python_knows_is_joined(brk):
    """A kubelet's or apiserver's message may break its lines with any of these; a
    condition message is one line whatever the break (str.splitlines' set)."""
    out = cond.clip(f"Error: a{brk}b  {brk}{brk} c")
    assert out == "Error: a | b | c" and len(out.splitlines()) == 1


@given(st.text(alphabet=st.sampled_from(" \t\n\r\u2028\x85ab"), max_size=300))
@settings(max_examples=200)
def test_one_line_is_one_line_with_no_blank_parts(text):
    out = messages.one_line(text)
    assert len(out.splitlines()) <= 1 and out == out.strip()
    assert all(part.strip() for part in out.split(" | ")) or not out
