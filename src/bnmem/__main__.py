"""``python -m bnmem``: the same program as ``bnmem``."""

from bnmem.cli import main

if __name__ == "__main__":
    main()
