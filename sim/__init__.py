"""The simulated world: a ZOS grid and chain (`grid/`), a month of marketplace traffic (`month/`),
and the commands that drive them. Production code never imports this package (tests/test_architecture.py):
the grid backend and the policy trial's month are chosen by name in the settings."""
