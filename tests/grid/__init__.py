"""Tests of the grid client, its parsers and contracts."""
