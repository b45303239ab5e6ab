"""Pod volumes: emptyDir, hostPath, configMap, secret, downwardAPI and projected sources
(service account tokens included) under the pod's directory, and the containers' mounts."""
from __future__ import annotations

import base64
import shutil
import time
from pathlib import Path

from localcluster.nodes import podspec
from localcluster.nodes.nodeagent.podstate import PodState
from localcluster.nodes.nodeagent.shared import log

READ_ONLY_VOLUME_KINDS = ("configMap", "secret", "projected", "downwardAPI")


class PodVolumes(PodState):
    """Volume preparation and volume mounts of a pod worker."""

    def _prepare_volumes(self) -> None:
        vroot = self.dir / "volumes"
        for v in self.pod["spec"].get("volumes") or []:
            name = v["name"]
            if name in self.volumes:
                continue
            path = vroot / name
            kind = next((k for k in v if k != "name"), "")
            if kind == "hostPath":
                hp = v["hostPath"]
                p = Path(hp["path"])
                if not p.exists() and hp.get("type") in ("DirectoryOrCreate", "", None):
                    p.mkdir(parents=True, exist_ok=True)
                self.volumes[name] = {"path": str(p), "kind": kind}
                continue
            tmp = vroot / (name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            if kind == "emptyDir":
                pass
            elif kind == "configMap":
                self._project_data(tmp, "configmaps", v["configMap"])
            elif kind == "secret":
                src = dict(v["secret"])
                src["name"] = src.get("secretName")
                self._project_data(tmp, "secrets", src)
            elif kind == "downwardAPI":
                self._project_downward(tmp, v["downwardAPI"])
            elif kind == "projected":
                for s in v["projected"].get("sources") or []:
                    if "serviceAccountToken" in s:
                        self._project_token(tmp, s["serviceAccountToken"])
                    elif "configMap" in s:
                        self._project_data(tmp, "configmaps", s["configMap"])
                    elif "secret" in s:
                        self._project_data(tmp, "secrets", s["secret"])
                    elif "downwardAPI" in s:
                        self._project_downward(tmp, s["downwardAPI"])
                    else:
                        log.info("pod %s/%s volume %s: projected source %s not supported, skipped",
                                 self.ns, self.pod_name, name, list(s))
            else:
                log.info("pod %s/%s volume %s: type %r not supported, mounted as an empty dir",
                         self.ns, self.pod_name, name, kind)
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            self.volumes[name] = {"path": str(path), "kind": kind}

    def _project_data(self, dest: Path, kind: str, src: dict) -> None:
        obj = self._get_object(kind, src["name"])
        if obj is None:
            if src.get("optional"):
                return
            raise LookupError(f"{kind[:-1]} {self.ns}/{src['name']} not found")
        files: dict[str, bytes] = {}
        for k, v in (obj.get("data") or {}).items():
            files[k] = base64.b64decode(v) if kind == "secrets" else v.encode()
        for k, v in (obj.get("binaryData") or {}).items():
            files[k] = base64.b64decode(v)
        items = src.get("items")
        mode = src.get("defaultMode", 0o644)
        if items:
            sel = []
            for it in items:
                if it["key"] not in files:
                    if src.get("optional"):
                        continue
                    raise LookupError(f"{kind[:-1]} {src['name']}: key {it['key']} not found")
                sel.append((it["path"], files[it["key"]], it.get("mode", mode)))
        else:
            sel = [(k, v, mode) for k, v in files.items()]
        for rel, data, m in sel:
            p = dest / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            p.chmod(m & 0o777)

    def _project_downward(self, dest: Path, src: dict) -> None:
        for it in src.get("items") or []:
            if "fieldRef" in it:
                val = podspec.field_ref(self.pod, it["fieldRef"]["fieldPath"], self.agent.internal_ip)
            else:
                cname = it["resourceFieldRef"].get("containerName")
                c = next((x.spec for x in self.mains + self.inits if x.name == cname),
                         self.mains[0].spec if self.mains else {})
                val = podspec.resource_field_ref(c, it["resourceFieldRef"], self.agent.allocatable)
            p = dest / it["path"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(val)

    def _project_token(self, dest: Path, src: dict) -> None:
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [src["audience"]] if src.get("audience") else [],
                         "expirationSeconds": int(src.get("expirationSeconds") or 3607),
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                            "name": self.pod_name, "uid": self.uid}}}
        # The Node authorizer learns that this pod is bound here from its own informers: a
        # request made right after the binding can be refused (403 "no relationship found")
        # for a moment. Retry, as kubelet's token manager does, before giving up.
        deadline = time.monotonic() + 20
        while True:
            try:
                tr = self.agent.client.post(
                    f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token", body)
                (dest / src.get("path", "token")).write_text(tr["status"]["token"])
                return
            except Exception as e:  # best effort after the deadline
                if time.monotonic() < deadline and not self.agent.stop.is_set():
                    time.sleep(0.5)
                    continue
                log.info("pod %s/%s: service account token not issued (%s); skipped",
                         self.ns, self.pod_name, e)
                return

    def _mounts(self, spec: dict) -> list[dict]:
        out = []
        for vm in spec.get("volumeMounts") or []:
            vol = self.volumes.get(vm["name"])
            if vol is None:
                raise LookupError(f"volumeMount {vm['name']!r}: no such volume")
            src = Path(vol["path"])
            if vm.get("subPath"):
                src = src / podspec.expand(vm["subPath"], {})
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            ro = bool(vm.get("readOnly")) or vol["kind"] in READ_ONLY_VOLUME_KINDS
            out.append({"source": str(src), "target": vm["mountPath"], "read_only": ro})
        return out
