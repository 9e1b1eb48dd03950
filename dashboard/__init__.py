"""The slice catalog dashboard: the Django app (models, rooms, doors). Start-up lives in config/."""
