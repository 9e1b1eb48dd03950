"""Tests of the access room."""
