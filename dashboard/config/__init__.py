"""How the process starts: environment parsing, the embedded PostgreSQL, log filters."""
