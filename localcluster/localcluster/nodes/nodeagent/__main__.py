"""Entry point: ``python -m localcluster.nodes.nodeagent --node <node> --gpus <n> --state <dir>``."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from localcluster.common.config import node_spec_by_name
from localcluster.nodes.nodeagent.agent import Agent


def main(argv: list[str] | None = None) -> int:
    """Agent entry point: run until SIGTERM/SIGINT; returns the exit code."""
    ap = argparse.ArgumentParser(prog="localcluster.nodes.nodeagent")
    ap.add_argument("--node", required=True)
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--state", required=True)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s",
                        stream=sys.stdout)
    agent = Agent(node_spec_by_name(a.node), a.gpus, Path(a.state).resolve())

    def on_term(*_):
        agent.stop.set()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
