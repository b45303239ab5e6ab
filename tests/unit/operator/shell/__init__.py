"""Tests of disttrain.shell (operator/disttrain/shell/)."""
