"""docs/conditions.md names every reason of the vocabulary (disttrain_probe.vocabulary), in
the row of the condition it belongs to, so a user who sees one in `kubectl describe dtj`
finds what it means; the operator's constants and the probe's reasons are that vocabulary."""
import re
from pathlib import Path

import pytest

from disttrain.api import constants
from disttrain_probe import reasons as R
from disttrain_probe import vocabulary as V

DOC = (Path(__file__).resolve().parents[2] / "docs" / "conditions.md").read_text()


def _row(first_cell: str) -> str:
    m = re.search(rf"^\| `{re.escape(first_cell)}`[^|]*\|.*$", DOC, re.M)
    return m.group(0) if m else ""


@pytest.mark.parametrize("ctype", V.ALL_CONDITIONS + V.OPTIONAL_CONDITIONS)
def test_every_condition_has_a_row(ctype):
    assert _row(ctype), f"docs/conditions.md: no row for condition {ctype}"


@pytest.mark.parametrize("name", sorted(V.REASONS))
def test_every_reason_is_documented_where_it_belongs(name):
    r = V.REASONS[name]
    if V.WARNING in r.kinds:
        assert f"| `{name}` | {r.condition} |" in DOC, f"docs/conditions.md: warning {name} on {r.condition}"
    if r.kind == V.REJECTION:
        section = DOC.partition("## Why an interface was not chosen")[2]
        assert f"| `{name}` |" in section, f"docs/conditions.md: rejection {name}"
    elif r.kind == V.EVENT:
        assert f"| `{name}` | Event only |" in DOC, f"docs/conditions.md: event {name}"
    elif r.kind in (V.FAILURE, V.PASS, V.PROGRESS) or V.FAILURE in r.kinds:
        assert f"`{name}`" in _row(r.condition), f"docs/conditions.md: {name} in the {r.condition} row"


def test_operator_constants_and_probe_reasons_are_the_vocabulary():
    consts = {v for k, v in vars(constants).items() if k.startswith("REASON_") and isinstance(v, str)}
    assert consts <= set(V.REASONS), consts - set(V.REASONS)
    probe = {v for k, v in vars(R).items() if k.isupper() and isinstance(v, str)}
    assert probe <= set(V.REASONS), probe - set(V.REASONS)
    # the generic reasons, where probe and operator once disagreed (ProbeInternalError)
    assert constants.GENERIC_REASONS == {V.RENDEZVOUS_TIMEOUT, V.PROBE_INTERNAL_ERROR,
                                 V.PROCESS_GROUP_INIT_FAILED}
    assert R.CONDITION_OF[V.PROBE_INTERNAL_ERROR] == constants.VALIDATED
    assert V.PROBE_INTERNAL_ERROR not in constants.REASON_CONDITION  # summary-only: checks stay Unknown
    for name, ctype in constants.REASON_CONDITION.items():
        assert V.REASONS[name].condition == ctype and ctype in constants.CHECK_CONDITIONS
