"""docs/conditions.md names every reason of the vocabulary (disttrain_probe.contract.vocabulary),
in the row of the condition it belongs to, so a user who sees one in `kubectl describe dtj`
finds what it means; operator and probe use the vocabulary's names and spell no reason."""
import ast
import re
from pathlib import Path

import pytest

from disttrain.api import constants
from disttrain_probe.contract import vocabulary as V

REPO = Path(__file__).resolve().parents[3]
DOC = (REPO / "docs" / "conditions.md").read_text()


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


def test_every_reason_is_named_once_in_the_vocabulary_and_nowhere_else():
    """No module of the operator or the probe spells a reason as a string or aliases it
    (``REASON_X = ...``): each is used by its one name in the vocabulary, so a renamed
    reason cannot leave a stale copy behind (there were three names per reason once)."""
    assert not [k for k in vars(constants) if k.startswith("REASON_") and k != "REASON_CONDITION"]
    names = set(V.REASONS) - set(V.ALL_CONDITIONS) - {constants.PHASE_PROBING}  # a phase's name too
    spelled = []
    for root in (REPO / "operator" / "disttrain", REPO / "probe_image" / "disttrain_probe"):
        for f in sorted(root.rglob("*.py")):
            if f.name == "vocabulary.py":
                continue
            tree = ast.parse(f.read_text())
            exported = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assign)
                        and any(getattr(t, "id", "") == "__all__" for t in a.targets)
                        for n in ast.walk(a.value)}  # a class's name (SlowLink) is not a reason
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value in names and id(node) not in exported:
                    spelled.append(f"{f.relative_to(REPO)}:{node.lineno}: {node.value}")
    assert not spelled, spelled
    # the generic reasons, where probe and operator once disagreed (ProbeInternalError)
    assert constants.GENERIC_REASONS == {V.RENDEZVOUS_TIMEOUT, V.PROBE_INTERNAL_ERROR,
                                 V.PROCESS_GROUP_INIT_FAILED}
    assert V.PROBE_CONDITION_OF[V.PROBE_INTERNAL_ERROR] == constants.VALIDATED
    assert V.PROBE_INTERNAL_ERROR not in constants.REASON_CONDITION  # summary-only: checks stay Unknown
    for name, ctype in constants.REASON_CONDITION.items():
        assert V.REASONS[name].condition == ctype and ctype in constants.CHECK_CONDITIONS
