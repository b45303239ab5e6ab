"""Tests of localcluster.cluster (localcluster/localcluster/cluster/)."""
