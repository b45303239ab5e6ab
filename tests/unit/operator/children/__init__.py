"""Tests of disttrain.children (operator/disttrain/children/)."""
