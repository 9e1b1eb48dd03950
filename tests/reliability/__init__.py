"""Tests of faults, races, fuzzing and security across the rooms."""
