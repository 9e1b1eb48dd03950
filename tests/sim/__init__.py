"""Tests of the simulated grid and month."""
