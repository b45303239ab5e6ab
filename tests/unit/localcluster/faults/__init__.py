"""Tests of localcluster.faults (localcluster/localcluster/faults/)."""
