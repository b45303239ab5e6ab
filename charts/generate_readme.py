"""Generate charts/disttrain-operator/README.md from values.yaml's `# --` comments.

helm-docs style: a `# -- text` comment documents the key on the next line; nested keys
are shown with dotted paths. Run ``python charts/generate_readme.py`` (``make chart-readme``);
a unit test fails when the checked-in README is stale.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent / "disttrain-operator"

HEADER = """# disttrain-operator Helm chart

Runs the disttrain operator: multi-node PyTorch training jobs (`DistTrainingJob`, short name
`dtj`) that start only after a preflight probe proves the nodes can train together.

```sh
helm install disttrain charts/disttrain-operator -n disttrain-system --create-namespace
kubectl apply -f examples/ddp-digits.yaml
kubectl wait --for=condition=Validated dtj/ddp-digits
```

## CRDs and upgrades

The CRD lives in the chart's `crds/` folder. Helm installs it on the first `helm install`
and never upgrades or deletes it (Helm's rule for `crds/`). After `helm upgrade` to a chart
with a newer CRD, apply it yourself: `kubectl apply --server-side -f charts/disttrain-operator/crds/`.
`helm uninstall` removes the operator and its RBAC but keeps the CRD and your jobs; delete
the CRD (`kubectl delete crd disttrainingjobs.disttrain.dev`) only when you mean to delete
every job.

## Permissions

The ClusterRole (or, with `watchNamespaces`, one Role per namespace) grants exactly:
jobs get/list/watch/delete, jobs/status get/patch, pods get/list/watch/create/delete,
services get/create (the job's headless Service for DNS hostnames), podgroups and workloads
create (gang scheduling), events create/list, networkpolicies list and namespaces get (while
a job's probes run: the NetworkPolicy that drops its traffic, and the job's namespace labels
a policy's namespaceSelector tests; a Role gets only its own namespace), and in the
ClusterRole nodes list (their allocatable) and for kopf CRD and namespace list/watch. No
wildcards, no secrets.

## Values

| key | type | default | description |
|---|---|---|---|
"""


def documented_keys(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) for every key preceded by a `# --` comment."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    pending: str | None = None
    for line in text.splitlines():
        m = re.match(r"^(\s*)# -- (.*)$", line)
        if m:
            pending = m.group(2).strip()
            continue
        m = re.match(r"^(\s*)([A-Za-z0-9_]+):", line)
        if not m:
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        if pending:
            out.append((".".join(k for _, k in stack), pending))
            pending = None
    return out


def render() -> str:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    rows = []
    for key, desc in documented_keys(text):
        value = values
        for part in key.split("."):
            value = value[part]
        kind = {dict: "object", list: "list", bool: "bool", int: "int", str: "string"}.get(type(value), "string")
        rows.append(f"| `{key}` | {kind} | `{json.dumps(value)}` | {desc} |")
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
