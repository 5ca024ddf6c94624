"""Subcommands of `s3`: one module per area, each with `register(subparsers, common)`."""
