"""One module per CLI command; each registers itself on ``bnmem.cli.app.app``."""
