"""Run the operator: ``python -m disttrain [--namespace NS ...]``; or show the evidence
behind a job's conditions: ``python -m disttrain explain <job> [-n NS]`` (see explain.py).

Uses the in-cluster service account when it runs in a pod, else the current kubeconfig
(``KUBECONFIG``). Liveness is served by kopf at ``--liveness`` (default
http://0.0.0.0:8080/healthz).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import kopf

from disttrain_probe.contract import probe_env


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "explain":
        from disttrain.shell.explain import main as explain_main  # the CLI alone: no handlers registered
        sys.exit(explain_main(argv[1:]))
    parser = argparse.ArgumentParser(prog="python -m disttrain", description=__doc__)
    parser.add_argument("--namespace", "-n", action="append", default=[],
                        help="watch only this namespace (repeatable); default: all namespaces")
    parser.add_argument("--liveness", default=os.environ.get("DISTTRAIN_LIVENESS", "http://0.0.0.0:8080/healthz"),
                        help="kopf liveness endpoint URL ('' to disable)")
    parser.add_argument("--probe-image", default=os.environ.get(probe_env.IMAGE),
                        help="default probe image (spec.probe.image overrides it)")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve Prometheus /metrics on this port (0 disables; default "
                             "$DISTTRAIN_METRICS_PORT or 9090)")
    parser.add_argument("--log-format", choices=["plain", "full", "json"],
                        default=os.environ.get("DISTTRAIN_LOG_FORMAT", "plain"),
                        help="json gives structured logs for log pipelines")
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    if args.metrics_port is None:
        # Read only when no flag is given: a Service named <x>-metrics in the operator's
        # namespace makes the kubelet inject DISTTRAIN_METRICS_PORT=tcp://<ip>:<port>
        # (service links), which crashed the operator on real nodes.
        raw = os.environ.get("DISTTRAIN_METRICS_PORT", "9090")
        if not raw.isdigit():
            parser.error(f"DISTTRAIN_METRICS_PORT={raw!r} is not a port number (a service "
                         "link? pass --metrics-port or set enableServiceLinks: false)")
        args.metrics_port = int(raw)
    if args.probe_image:
        os.environ[probe_env.IMAGE] = args.probe_image
    from disttrain.shell import (  # after the environment is set: importing handlers registers them
        handlers,  # noqa: F401  (registers the handlers)
        metrics,  # with the handlers, once the environment above is set
    )

    if args.metrics_port:
        metrics.serve(args.metrics_port)

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            standalone=True,  # one replica (Deployment strategy Recreate), no peering
            namespaces=args.namespace,
            liveness_endpoint=args.liveness or None,
        )
    )


if __name__ == "__main__":
    main()
