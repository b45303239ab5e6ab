"""The operator's command line (python -m disttrain) against what a kubelet injects."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_a_service_link_in_the_metrics_variable_is_named_not_a_traceback():
    """Found on real nodes: the chart's <release>-metrics Service makes the kubelet inject
    DISTTRAIN_METRICS_PORT=tcp://10.96.23.47:9090, and the operator died in argparse's
    default with a ValueError traceback before parsing --metrics-port."""
    env = {**os.environ, "DISTTRAIN_METRICS_PORT": "tcp://10.96.23.47:9090",
           "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("operator", "probe_image"))}
    r = subprocess.run([sys.executable, "-m", "disttrain", "--namespace", "x"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "DISTTRAIN_METRICS_PORT='tcp://10.96.23.47:9090' is not a port number" in r.stderr
    assert "Traceback" not in r.stderr
