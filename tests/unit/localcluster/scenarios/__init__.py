"""Tests of localcluster.scenarios (localcluster/localcluster/scenarios/)."""
