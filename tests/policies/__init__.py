"""Tests of the policies room."""
