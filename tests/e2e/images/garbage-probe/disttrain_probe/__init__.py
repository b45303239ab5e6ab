"""A broken probe image for tests: shadows the real disttrain_probe and reports garbage."""
