"""Scripts the Makefile runs (`make run`: scripts/run.py); a package so the tests can import them."""
