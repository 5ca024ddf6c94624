"""The `s3` command line and the assembled configuration (top of the import layers)."""
