"""Errors a user can cause.

Anything raised as :class:`BnmemError` reaches the command line as one clear
line on stderr and a non-zero exit status, never as a traceback.
"""


class BnmemError(Exception):
    """A problem with the user's input or environment (bad flag, missing data, ...)."""


class DiskFullError(BnmemError):
    """The disk (or the user's quota) filled up while a run was writing a file; rerunning resumes."""
