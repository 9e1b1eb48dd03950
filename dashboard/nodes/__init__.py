"""A node from the grid to its row: registration and onboarding, readings, pools, the fleet watch, withholds, farms'
public IPv4s, zos-cache, and the node page's reads."""
