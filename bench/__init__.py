"""Benchmarks: `make bench` runs every bench_*.py module's main() in one process, in order."""
