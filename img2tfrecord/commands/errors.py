"""Exit codes shared by every command, and the usage error that maps to exit code 2."""

EXIT_OK = 0
EXIT_FAILURE = 1  # the pipeline failed, or a check found problems
EXIT_USAGE = 2  # a bad flag or input, found before any work
EXIT_ERROR_BUDGET = 3  # finished, but more inputs were rejected than --max-error-rate allows
EXIT_CLOSED_PIPE = 141  # stdout's reader left (``| head``): 128 + SIGPIPE, as other Unix tools end


class UsageError(Exception):
    """A problem with what the user asked for; printed as one line, exit code 2."""
