"""Imported first by the workers' fork server: Ctrl-C does not interrupt its preloading.

The fork server shares the terminal's process group, so a Ctrl-C in the first seconds of
``bnmem run`` would otherwise print a KeyboardInterrupt traceback from the middle of its imports;
the ``bnmem`` process itself says how to resume and stops the server. :mod:`._interrupt_on`,
imported last, restores Python's handler, which the workers forked from the server then have.
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
