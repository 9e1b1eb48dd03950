"""Tests of the jobs room."""
