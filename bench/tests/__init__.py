"""Tests of the bench's own code (`make bench-test`), with the suite's fixtures (tests/conftest.py)."""
