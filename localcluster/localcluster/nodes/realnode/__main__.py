"""Entry point: ``python -m localcluster.nodes.realnode run|inner --node <node> --state <dir>``
(started by `up`; see the package's docstring)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Optional

from localcluster.common.config import (
    node_spec_by_name,
    pod_cidr,
)
from localcluster.network.topology import NodeTopology
from localcluster.nodes.realnode.supervisor import inner, run


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="localcluster.nodes.realnode")
    ap.add_argument("mode", choices=["run", "inner"])
    ap.add_argument("--node", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--internal-ip")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s %(levelname)s {a.mode} %(message)s")
    state = Path(a.state).resolve()
    spec = node_spec_by_name(a.node)
    if a.mode == "inner":
        return inner(state, spec, a.internal_ip)
    doc = json.loads((state / "nodes" / f"{spec.name}.topology.json").read_text())
    topo = NodeTopology.from_json(doc["topology"])
    hosts = ["127.0.0.1 localhost", *topo.hosts, *(doc.get("peerHosts") or [])]
    routes = []
    for f in sorted((state / "nodes").glob("*.topology.json")):
        try:
            t = json.loads(f.read_text())["topology"]
            routes.append((pod_cidr(int(t["index"])), t["internal_ip"]))
        except (OSError, ValueError, KeyError):
            continue
    return run(state, spec, topo.internal_ip, hosts, routes, topo)


if __name__ == "__main__":
    sys.exit(main())
