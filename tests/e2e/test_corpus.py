"""The corpus of real specs (tests/e2e/corpus/, see tests/e2e/corpus_entries.py) on the
local cluster: each entry in a namespace of its own, one after the other, applied as a user
would (``kubectl apply -f``), then checked against its expected end within a bound.

Which entries: $DISTTRAIN_CORPUS: ``all``; a number N (a sample of N drawn with the seed
$DISTTRAIN_CORPUS_SEED, default 12, holding one entry of each expected-end kind); a comma
list of entry names. Default: a sample of 5, so ``make test`` stays short; ``make
test-corpus`` runs them all. The bound per entry: $DISTTRAIN_CORPUS_TIMEOUT seconds
(default 150; ``refused at apply`` is decided by kubectl at once).

``DISTTRAIN_CORPUS=kubeflow-simple,k8s-job-sidecar .venv/bin/python -m pytest -q tests/e2e/test_corpus.py``
"""
from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from tests.e2e import corpus_entries as corpus

pytestmark = pytest.mark.e2e

TIMEOUT = float(os.environ.get("DISTTRAIN_CORPUS_TIMEOUT", "150"))
SELECTED = corpus.select(corpus.all_entries(), os.environ.get("DISTTRAIN_CORPUS"),
                         int(os.environ.get("DISTTRAIN_CORPUS_SEED", str(corpus.DEFAULT_SEED))))


@pytest.fixture
def corpus_ns(cluster, request):
    """A fresh namespace per entry, deleted afterwards and waited for (bounded), so the
    next entry's pods do not share nodes with this one's."""
    stem = request.node.callspec.params["entry"].name[:40].rstrip("-")
    name = f"corpus-{stem}-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=true", "--timeout=90s", check=False, timeout=100)


def _read_job(cluster, ns: str, name: str) -> dict:
    out = cluster.kubectl("get", "dtj", name, "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _explain(cluster, ns: str) -> str:
    """What there is to see when an entry did not end as expected: pods and events."""
    pods = cluster.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
    events = cluster.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False).stdout
    return f"pods:\n{pods}\nevents (last 20):\n" + "\n".join(events.splitlines()[-20:])


@pytest.mark.parametrize("entry", SELECTED, ids=[e.name for e in SELECTED])
def test_corpus_entry_ends_as_expected(cluster, operator, corpus_ns, entry):
    expected = entry.expected
    applied = cluster.kubectl("apply", "-n", corpus_ns, "-f", str(entry.path), check=False)
    if expected.kind == corpus.REFUSED:
        assert applied.returncode != 0, f"{entry.name}: kubectl apply accepted it:\n{applied.stdout}"
        assert corpus.holds(applied.stderr, expected.substring), applied.stderr
        left = cluster.kubectl("get", "dtj", "-n", corpus_ns, "-o", "name", check=False).stdout
        assert not left.strip(), f"refused, yet a job exists: {left}"
        return
    assert applied.returncode == 0, f"{entry.name}: kubectl apply failed:\n{applied.stderr}"
    deadline, job, seen = time.monotonic() + TIMEOUT, {}, None
    while time.monotonic() < deadline:
        job = _read_job(cluster, corpus_ns, entry.job_name)
        seen = corpus.verdict(expected, job)
        if seen is not None:
            break
        time.sleep(1)
    conds = {t: (c.get("status"), c.get("reason"), c.get("message"))
             for t, c in corpus.conditions(job).items()}
    if seen is None:
        pytest.fail(f"{entry.name} (source {entry.source}): not ended as '{expected.kind}' within "
                    f"{TIMEOUT:.0f} s; conditions {conds}\n{_explain(cluster, corpus_ns)}")
    assert seen == "ok", f"{entry.name} (source {entry.source}): {seen}\n{_explain(cluster, corpus_ns)}"
