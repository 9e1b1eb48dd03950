"""Tests of the deployments room."""
