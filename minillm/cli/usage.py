"""The one error type of the command line's own making."""


class UsageError(Exception):
    """A problem with the user's input, reported as one line and exit code 2."""
