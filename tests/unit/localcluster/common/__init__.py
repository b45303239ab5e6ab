"""Tests of localcluster.common (localcluster/localcluster/common/)."""
