"""Tests of the lessons room."""
