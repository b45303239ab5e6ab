"""Tests of the operator (operator/disttrain/), one folder per subpackage."""
