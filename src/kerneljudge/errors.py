"""The judge's own exception types.

Each carries a user-facing message that says what went wrong and what to do. They are raised at the
boundary (loading a problem, parsing options) and turned into an "error" result or a CLI exit code 2;
problems inside a candidate are never exceptions of the judge: they become findings on the result.
"""


class KernelJudgeError(Exception):
    """Base class: `str(error)` is the message shown to the user."""


class UsageError(KernelJudgeError):
    """The user asked for something that cannot be done (unknown option value, unknown constant)."""


class ProblemError(KernelJudgeError):
    """The problem file is missing or malformed, so nothing can be judged against it."""


class CandidateError(KernelJudgeError):
    """The candidate file cannot be read or parsed (judge side: no candidate code has run)."""


class StoreError(KernelJudgeError):
    """The results store cannot be opened or does not hold what was asked for."""
