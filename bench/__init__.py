"""make bench: figures at fleet scale (see bench/run.py and BENCHMARKS.md)."""
