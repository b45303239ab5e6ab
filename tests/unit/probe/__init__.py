"""Tests of the probe (probe_image/disttrain_probe/), one folder per subpackage; the probe's tests that run it are in tests/probe."""
