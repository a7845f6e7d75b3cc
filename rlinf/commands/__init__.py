"""Subcommands of the ``rlinf`` CLI; each module has ``add_arguments(parser)`` and ``run(args) -> int``."""
