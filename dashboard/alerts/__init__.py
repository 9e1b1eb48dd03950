"""Alerts the product sends itself.

rules.py is pure (plain rows in, conditions out, no Django); alerts.selectors.alerts reads the stored
figures into those rows; alerts.services.alerts records firing/resolved and hands transitions to
deliver.py, the apprise edge with a wall-clock deadline.
"""
