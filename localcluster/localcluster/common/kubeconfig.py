"""Kubeconfig files for the local cluster's users (admin, controllers, nodes)."""
from __future__ import annotations

from pathlib import Path

import yaml

from localcluster.common.config import APISERVER_PORT
from localcluster.common.kubeapi import KubeClient

SERVER = f"https://127.0.0.1:{APISERVER_PORT}"


def write_kubeconfig(path: Path, user: str, ca: Path, cert: Path, key: Path,
                     server: str = SERVER) -> Path:
    """Write a kubeconfig with one cluster/user/context ("localcluster") using cert files.

    Paths are written absolute. Returns ``path``. Raises OSError if it cannot be written.
    """
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "localcluster", "cluster": {
            "server": server, "certificate-authority": str(Path(ca).resolve())}}],
        "users": [{"name": user, "user": {
            "client-certificate": str(Path(cert).resolve()),
            "client-key": str(Path(key).resolve())}}],
        "contexts": [{"name": "localcluster", "context": {"cluster": "localcluster", "user": user}}],
        "current-context": "localcluster",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def admin_client(state: Path) -> KubeClient:
    """A KubeClient authenticated as admin (system:masters)."""
    p = state / "pki"
    return KubeClient(SERVER, str(p / "ca.crt"), str(p / "admin.crt"), str(p / "admin.key"))
