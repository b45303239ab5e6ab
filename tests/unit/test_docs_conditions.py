"""docs/conditions.md names every reason the operator and the probe can write, so a user
who sees one in `kubectl describe dtj` finds what it means."""
from pathlib import Path

from disttrain import constants as c
from disttrain.diagnosis import WARNING_CONDITION
from disttrain_probe import reasons as R

DOC = (Path(__file__).resolve().parents[2] / "docs" / "conditions.md").read_text()


def _values(module, prefix=""):
    return {v for k, v in vars(module).items()
            if k.isupper() and k.startswith(prefix) and isinstance(v, str) and v[:1].isupper()}


def test_every_operator_reason_and_condition_is_documented():
    missing = sorted(r for r in _values(c, "REASON_") | set(c.ALL_CONDITIONS + c.OPTIONAL_CONDITIONS) if f"`{r}`" not in DOC)
    assert not missing, f"add to docs/conditions.md: {missing}"


def test_every_probe_reason_is_documented_with_its_condition():
    missing = sorted(r for r in set(R.FAILURES) | _values(R) - {"CONDITION_OF"} if f"`{r}`" not in DOC)
    assert not missing, f"add to docs/conditions.md: {missing}"
    for reason, ctype in WARNING_CONDITION.items():
        assert f"| `{reason}` | {ctype} |" in DOC, f"docs/conditions.md: {reason} is shown on {ctype}"
