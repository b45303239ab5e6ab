"""Tests of disttrain_probe.contract (probe_image/disttrain_probe/contract/)."""
