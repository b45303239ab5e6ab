"""Tests of localcluster.network (localcluster/localcluster/network/)."""
