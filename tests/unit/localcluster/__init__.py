"""Tests of the proving ground (localcluster/localcluster/), one folder per room."""
