"""Tests of the nodes room."""
