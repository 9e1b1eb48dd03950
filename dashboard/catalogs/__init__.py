"""A node's slice catalog: the re-register (one node, bulk, waves, rollback), the precheck, the slice audit, and
hand edits of slices."""
