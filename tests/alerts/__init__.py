"""Tests of the alerts room."""
