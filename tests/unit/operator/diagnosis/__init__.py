"""Tests of disttrain.diagnosis (operator/disttrain/diagnosis/)."""
