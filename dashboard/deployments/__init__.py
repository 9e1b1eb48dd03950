"""Deployments: the dashboard's own deploy, holds, the outcomes the marketplace reports, and placement (where a
slice can go)."""
