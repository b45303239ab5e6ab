"""Tests of localcluster.nodes (localcluster/localcluster/nodes/)."""
