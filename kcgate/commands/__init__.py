"""One module per CLI command; each exposes ``register(app)``. Heavy imports go inside the command body."""
