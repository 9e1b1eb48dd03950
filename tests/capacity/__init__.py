"""Tests of the pure rules."""
