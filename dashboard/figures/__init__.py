"""A node's catalog figures, kept on its row: the one definition, the one block every node writer goes through
(node_writes), the farm and fleet sums, snapshots over time, and the fleet's reads of them."""
