"""Exit codes shared by every command; the exceptions they stand for are ``img2tfrecord/errors.py``'s."""

from img2tfrecord.errors import UsageError

EXIT_OK = 0
EXIT_FAILURE = 1  # the pipeline failed (ConversionFailed), or a check found problems
EXIT_USAGE = 2  # a bad flag or input, found before any work (UsageError)
EXIT_ERROR_BUDGET = 3  # finished, but more inputs were rejected than --max-error-rate allows (ErrorBudgetExceeded)
EXIT_CLOSED_PIPE = 141  # stdout's reader left (``| head``): 128 + SIGPIPE, as other Unix tools end

__all__ = ["EXIT_CLOSED_PIPE", "EXIT_ERROR_BUDGET", "EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "UsageError"]
