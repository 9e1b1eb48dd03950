"""Who may do what, and the trail of who did: API tokens, the roles and their permissions, the audit trail's one
writer."""
