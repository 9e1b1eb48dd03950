"""Tests of the catalogs room."""
