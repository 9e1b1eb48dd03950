"""Reads: what the pages and commands show. Each runs a fixed number of queries."""


def fleet_overview():
    raise NotImplementedError("the catalog issue builds this")
