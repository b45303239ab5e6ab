"""Pure helpers that turn a pod spec into what the node agent runs: environment
variables (with $(VAR) expansion as kubelet does), quantities, image map lookups."""
from __future__ import annotations

import base64
import fnmatch
import math
import os
from decimal import Decimal
from pathlib import Path
from typing import Callable

import yaml

from localcluster.common.config import IMAGES_FILE, KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT, REPO_ROOT

_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}


def parse_quantity(q: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity ("500m", "16Gi", "2", "1e3") into a Decimal.

    Raises ValueError for a malformed quantity.
    """
    s = str(q).strip()
    for suf in sorted(_SUFFIX, key=len, reverse=True):
        if suf and s.endswith(suf):
            return Decimal(s[: -len(suf)]) * Decimal(_SUFFIX[suf])
    try:
        return Decimal(s)
    except Exception as e:  # decimal.InvalidOperation
        raise ValueError(f"bad quantity {q!r}") from e


def expand(s: str, lookup: dict[str, str]) -> str:
    """Kubelet's $(VAR) expansion: $(NAME) -> value if NAME is defined (else left as is),
    $$ -> $."""
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "$" and i + 1 < n:
            nxt = s[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                j = s.find(")", i + 2)
                if j == -1:
                    out.append(s[i:])
                    break
                name = s[i + 2 : j]
                out.append(lookup[name] if name in lookup else s[i : j + 1])
                i = j + 1
                continue
        out.append(c)
        i += 1
    return "".join(out)


def field_ref(pod: dict, path: str, node_ip: str, pod_ip: str | None = None) -> str:
    """Value of a downward-API fieldRef ``path`` for ``pod`` (hostIP = ``node_ip``; podIP =
    ``pod_ip``, or ``node_ip`` with hostNetwork / when not given).

    Raises KeyError for an unsupported path.
    """
    md = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip or node_ip,
        "status.hostIP": node_ip,
        "status.podIPs": pod_ip or node_ip,
        "status.hostIPs": node_ip,
    }
    if path in simple:
        return simple[path]
    for prefix, key in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted((md.get(key) or {}).items()))
        if path.startswith(prefix + "['") and path.endswith("']"):
            return (md.get(key) or {}).get(path[len(prefix) + 2 : -2], "")
    raise KeyError(f"unsupported fieldRef {path}")


def resource_field_ref(container: dict, ref: dict, node_allocatable: dict) -> str:
    """Value of a resourceFieldRef (limits.cpu, requests.memory, ... with divisor), rounded
    up as kubelet does; an unset limit falls back to the node's allocatable.

    Raises KeyError for an unknown resource.
    """
    res = ref["resource"]
    kind, _, name = res.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise KeyError(f"unsupported resourceFieldRef {res}")
    value = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if value is None:
        value = node_allocatable.get(name, "0") if kind == "limits" else "0"
    divisor = parse_quantity(ref.get("divisor") or "1")
    if divisor == 0:
        divisor = Decimal(1)
    return str(int(math.ceil(parse_quantity(value) / divisor)))


def build_env(pod: dict, container: dict, node_ip: str, node_allocatable: dict,
              get_object: Callable[[str, str], dict | None],
              pod_ip: str | None = None) -> dict[str, str]:
    """The container's environment as kubelet computes it: envFrom first, then env in
    order, each value $(VAR)-expanded against what came before. ``pod_ip``: the pod
    network address (None: hostNetwork, the node's).

    ``get_object(kind, name)`` returns the ConfigMap/Secret dict (kind "configmaps" or
    "secrets") in the pod's namespace or None if absent. Raises LookupError naming a
    missing non-optional reference.
    """
    env: dict[str, str] = {}

    def data_of(kind: str, name: str) -> dict | None:
        obj = get_object(kind, name)
        if obj is None:
            return None
        data = dict(obj.get("data") or {})
        if kind == "secrets":
            data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        return data

    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for kind, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = src.get(key)
            if not ref:
                continue
            data = data_of(kind, ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise LookupError(f"{kind[:-1]} {ref['name']!r} not found")
            for k, v in data.items():
                env[prefix + k] = v
    for e in container.get("env") or []:
        name = e["name"]
        if "value" in e or "valueFrom" not in e:
            env[name] = expand(e.get("value", ""), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_ref(pod, vf["fieldRef"]["fieldPath"], node_ip, pod_ip)
        elif "resourceFieldRef" in vf:
            target = container
            cname = vf["resourceFieldRef"].get("containerName")
            if cname:
                for c in (pod["spec"].get("containers") or []) + (pod["spec"].get("initContainers") or []):
                    if c["name"] == cname:
                        target = c
            env[name] = resource_field_ref(target, vf["resourceFieldRef"], node_allocatable)
        else:
            for kind, key in (("configmaps", "configMapKeyRef"), ("secrets", "secretKeyRef")):
                ref = vf.get(key)
                if not ref:
                    continue
                data = data_of(kind, ref["name"])
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        break
                    raise LookupError(f"{kind[:-1]} {ref['name']!r} key {ref['key']!r} not found")
                env[name] = data[ref["key"]]
    return env


def load_image_map(path: Path = IMAGES_FILE) -> list[dict]:
    """Entries of ``images.yaml`` (pattern, pythonpath, path, env, command); [] if absent."""
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        return []
    return list(doc.get("images") or [])


def image_entry(image: str, entries: list[dict]) -> dict:
    """The first entry whose fnmatch ``pattern`` matches ``image`` ({} if none), with
    ``pythonpath`` and ``path`` made absolute against the repo root."""
    for ent in entries:
        if fnmatch.fnmatchcase(image or "", ent.get("pattern", "")):
            out = dict(ent)
            for key in ("pythonpath", "path"):
                out[key] = [str((REPO_ROOT / p).resolve()) for p in ent.get(key) or []]
            return out
    return {}


def container_process_env(container_env: dict[str, str], image: dict, venv_bin: str,
                          hostname: str) -> dict[str, str]:
    """Final exec environment: image defaults (PATH with the image's ``path`` entries,
    then the venv, first; the image map's env), overridden by the container's env; the
    image's PYTHONPATH entries are appended to any PYTHONPATH the container sets;
    HOSTNAME is ``hostname`` (the pod's, see nodeagent.sandbox.PodSandbox._hostname)."""
    path = [*(image.get("path") or []), venv_bin, "/usr/local/bin", "/usr/bin", "/bin"]
    env = {"PATH": os.pathsep.join(path), "HOSTNAME": hostname}
    # As kubelet does for every container: where the `kubernetes` Service is.
    env.update({
        "KUBERNETES_SERVICE_HOST": KUBERNETES_SERVICE_IP,
        "KUBERNETES_SERVICE_PORT": str(KUBERNETES_SERVICE_PORT),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(KUBERNETES_SERVICE_PORT),
        "KUBERNETES_PORT": f"tcp://{KUBERNETES_SERVICE_IP}:{KUBERNETES_SERVICE_PORT}",
    })
    env.update({k: str(v) for k, v in (image.get("env") or {}).items()})
    env.update(container_env)
    pp = image.get("pythonpath") or []
    if pp:
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] + pp
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env
