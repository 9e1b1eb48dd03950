"""Long operations a worker runs: each kind declared once (kinds/), its typed result (results.py), the life cycle
from the request to its result or its reaping."""
