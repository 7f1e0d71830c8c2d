"""One module per CLI command. Each exposes ``register(app)``, which ``kcgate.cli`` calls for every module
here not starting with "_", and registers its command functions in one way: ``app.command(name)(function)``
(a command group: a ``typer.Typer`` of such commands, added with ``app.add_typer``). Commands raise
``kcgate.errors`` failures and never catch them for the exit code: ``kcgate.cli`` maps every failure
around dispatch. Heavy imports go inside the command body.
"""
