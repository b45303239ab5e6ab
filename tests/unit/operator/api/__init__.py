"""Tests of disttrain.api (operator/disttrain/api/)."""
