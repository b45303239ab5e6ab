"""Tests of disttrain.diagnosis.attribution (operator/disttrain/diagnosis/attribution/)."""
