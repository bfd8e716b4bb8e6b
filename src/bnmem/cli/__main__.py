"""``python -m bnmem.cli``: the same program as ``bnmem``."""

from bnmem.cli import main

main()
