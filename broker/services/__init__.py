"""Every write the broker makes. Each service owns its database transaction."""
