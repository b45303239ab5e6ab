"""Tests of disttrain_probe.progress (probe_image/disttrain_probe/progress/)."""
