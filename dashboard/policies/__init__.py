"""Capacity policies: their writes and versions, a policy edit's figures, the policy trial, calibration against what
nodes really use, and which policy carves each node."""
