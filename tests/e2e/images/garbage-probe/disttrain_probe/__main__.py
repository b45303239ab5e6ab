"""Write a report that is not JSON and fail, as a broken probe image would."""
import os
import sys

path = os.environ.get("DISTTRAIN_PROBE_REPORT_PATH") or "/dev/termination-log"
with open(path, "w") as f:
    f.write("{not json at all")
print("garbage-probe: wrote a broken report to", path, flush=True)
sys.exit(1)
