"""Tests of the token API."""
