"""The Helm chart, rendered by the real helm: lint, schema, docs, RBAC, secure defaults."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "disttrain-operator"
sys.path.insert(0, str(ROOT / "charts"))
import generate_readme  # noqa: E402


def helm_bin() -> str:
    from localcluster.common.config import cache_dir, versions

    path = cache_dir() / f"helm-{versions()['HELM_VERSION']}" / "bin" / "helm"
    if not path.exists():
        if os.environ.get("DISTTRAIN_REQUIRE_E2E") == "1":
            pytest.fail("helm not built (make build-cluster)")
        pytest.skip("helm not built (make build-cluster)")
    return str(path)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([helm_bin(), *args], capture_output=True, text=True, check=check)


def render(*sets: str) -> list[dict]:
    args = ["template", "dt", str(CHART), "-n", "disttrain-system", "--kube-version", "v1.37.2"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def test_helm_lint_strict():
    out = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("bad,path", [("metrics.port=abc", "/metrics/port"),
                                      ("logFormat=xml", "/logFormat"),
                                      ("verbose=maybe", "/verbose"),
                                      ("kueue.admissionCheck.enabled=maybe", "/kueue/admissionCheck/enabled"),
                                      ("kueue.admissionCheck.name=Bad_Name", "/kueue/admissionCheck/name"),
                                      ("nosuchkey=1", "nosuchkey")])
def test_values_schema_rejects_wrong_types(bad, path):
    p = helm("template", "dt", str(CHART), "--kube-version", "v1.37.2", "--set", bad, check=False)
    assert p.returncode != 0 and path in p.stderr, p.stderr


def test_rbac_least_privilege():
    docs = render()
    rules = [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
    flat = [(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]]
    assert not any("*" in x for t in flat for x in t), "no wildcards"
    assert not any(res in ("secrets", "configmaps") for _, res, _ in flat)
    assert ("disttrain.dev", "disttrainingjobs/status", "patch") in flat
    assert ("", "pods", "create") in flat and ("", "pods", "delete") in flat
    assert not any(res == "pods" and v in ("update", "patch") for _, res, v in flat)
    assert [v for _, res, v in flat if res == "services"] == ["get", "create"]
    # the job itself: deleted only by ttlSecondsAfterFinished; never patched or updated
    assert [v for _, res, v in flat if res == "disttrainingjobs"] == ["get", "list", "watch", "delete"]
    # NetworkPolicies: read only, to name one that drops a job's traffic
    assert [(g, v) for g, res, v in flat if res == "networkpolicies"] == [("networking.k8s.io", "list")]
    # namespaces: kopf lists and watches them; the job's own is read (get) for a policy's
    # namespaceSelector on its labels; never changed
    assert sorted(v for g, res, v in flat if res == "namespaces") == ["get", "list", "watch"]
    # nodes: listed only (their allocatable: a resource no node offers), events: posted and listed
    assert [(g, v) for g, res, v in flat if res == "nodes"] == [("", "list")]
    assert sorted(v for _, res, v in flat if res == "events") == ["create", "list"]


@pytest.mark.parametrize("sets", [(), ("watchNamespaces={team-a,team-b}",)])
def test_nodes_are_listed_cluster_wide_in_every_mode(sets):
    """Nodes are cluster-scoped: a Role cannot grant them, so the ClusterRole lists them
    whether the operator watches all namespaces or some; nothing more on nodes."""
    docs = render(*sets)
    cluster = next(d for d in docs if d["kind"] == "ClusterRole")["rules"]
    assert [r["verbs"] for r in cluster if "nodes" in r["resources"]] == [["list"]]
    roles = [r for d in docs if d["kind"] == "Role" for r in d["rules"]]
    assert not any("nodes" in r["resources"] for r in roles)
    events = [r["verbs"] for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]
              if "events" in r["resources"]]
    assert events and all(v == ["create", "list"] for v in events)


def test_namespaced_mode_uses_roles():
    docs = render("watchNamespaces={team-a,team-b}")
    roles = [d for d in docs if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    # each Role may get its own namespace (its labels, for NetworkPolicies), nothing more
    assert all([r["verbs"] for r in d["rules"] if "namespaces" in r["resources"]] == [["get"]] for d in roles)
    cluster_rules = next(d for d in docs if d["kind"] == "ClusterRole")["rules"]
    assert all(r["resources"] != ["pods"] for r in cluster_rules)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args


def test_secure_defaults():
    dep = next(d for d in render() if d["kind"] == "Deployment")
    spec = dep["spec"]["template"]["spec"]
    ctr = spec["containers"][0]
    assert dep["spec"]["strategy"]["type"] == "Recreate" and dep["spec"]["replicas"] == 1
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = ctr["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert ctr["resources"]["requests"] and ctr["resources"]["limits"]
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_every_value_documented_and_readme_current():
    text = (CHART / "values.yaml").read_text()
    documented = {k for k, _ in generate_readme.documented_keys(text)}

    def leaves(d, prefix=""):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v and key not in documented:
                yield from leaves(v, key + ".")
            else:
                yield key

    missing = [k for k in leaves(yaml.safe_load(text)) if k not in documented]
    assert not missing, f"values without a `# --` comment: {missing}"
    assert (CHART / "README.md").read_text() == generate_readme.render(), "run make chart-readme"


def test_operator_image_requirements_match_pyproject():
    pins = dict(re.findall(r'"([a-z0-9-]+)==([^"]+)"', (ROOT / "pyproject.toml").read_text()))
    for line in (ROOT / "operator" / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            assert pins.get(name) == version, f"{name}: requirements.txt {version} != pyproject {pins.get(name)}"


@pytest.mark.parametrize("dockerfile", ["operator/Dockerfile", "probe_image/Dockerfile", "examples/Dockerfile"])
def test_dockerfiles_clean_under_hadolint(dockerfile):
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    p = subprocess.run([hadolint, str(ROOT / dockerfile)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_kueue_rbac_only_when_enabled():
    def kueue_rules(docs):
        rules = [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
        return sorted((res, v) for r in rules if "kueue.x-k8s.io" in r["apiGroups"]
                      for res in r["resources"] for v in r["verbs"])

    assert kueue_rules(render()) == []
    assert kueue_rules(render("kueue.enabled=true")) == [
        ("resourceflavors", "get"), ("workloads", "create"), ("workloads", "get"), ("workloads/status", "patch")]


def test_admission_check_off_by_default_and_wired_when_enabled():
    def env(docs):
        dep = next(d for d in docs if d["kind"] == "Deployment")
        return {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}

    def rules(docs):
        return sorted({(g, res, v) for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]
                       for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]})

    off = render()
    assert "DISTTRAIN_ADMISSION_CHECK" not in env(off)
    assert not any(d["kind"] == "AdmissionCheck" for d in off)
    on = render("kueue.admissionCheck.enabled=true")
    assert env(on)["DISTTRAIN_ADMISSION_CHECK"] == "1"
    added = set(rules(on)) - set(rules(off))
    assert added == {("kueue.x-k8s.io", "workloads", "get"), ("kueue.x-k8s.io", "workloads", "list"),
                     ("kueue.x-k8s.io", "workloads", "watch"), ("kueue.x-k8s.io", "workloads", "patch"),
                     ("kueue.x-k8s.io", "workloads/status", "patch"),
                     ("kueue.x-k8s.io", "admissionchecks", "list"), ("kueue.x-k8s.io", "admissionchecks", "watch"),
                     ("kueue.x-k8s.io", "admissionchecks/status", "patch"),
                     ("kueue.x-k8s.io", "resourceflavors", "get"), ("disttrain.dev", "disttrainingjobs", "create"),
                     ("", "nodes", "patch")}
    assert not any(d["kind"] == "AdmissionCheck" for d in on)
    made = render("kueue.admissionCheck.enabled=true", "kueue.admissionCheck.create=true")
    (ac,) = [d for d in made if d["kind"] == "AdmissionCheck"]
    assert ac["spec"] == {"controllerName": "disttrain.dev/preflight"}
    assert ac["metadata"]["name"] == "disttrain-preflight"
    # watching some namespaces: the Workloads in each Role, the cluster-scoped rest in the ClusterRole
    some = render("kueue.admissionCheck.enabled=true", "watchNamespaces={team-a}")
    role = next(d for d in some if d["kind"] == "Role")
    assert any("workloads" in r["resources"] and "watch" in r["verbs"] for r in role["rules"])
    cluster = next(d for d in some if d["kind"] == "ClusterRole")
    assert any(r["resources"] == ["nodes"] and r["verbs"] == ["patch"] for r in cluster["rules"])
