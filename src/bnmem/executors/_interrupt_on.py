"""Imported last by the workers' fork server: Python's Ctrl-C handler again (see :mod:`._interrupt_off`)."""

import signal

signal.signal(signal.SIGINT, signal.default_int_handler)
