"""Pure domain rules outside the capacity arithmetic: outcomes, the catalog and its audit, closures, node events, reading age."""
