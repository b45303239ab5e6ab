"""Tests of the repository around the three packages: docs, tools, the Helm chart, the CRD, the import contracts, benchmarks, the e2e corpus and harness, the build scripts."""
