"""The judge's own exception types.

Each carries a user-facing message that says what went wrong and what to do. They are raised at the
boundary (loading a problem, parsing options) and turned into an "error" result or a CLI exit code 2;
problems inside a candidate are never exceptions of the judge: they become findings on the result.
"""


class KernelJudgeError(Exception):
    """Base class: `str(error)` is the message shown to the user."""


class UsageError(KernelJudgeError):
    """The user asked for something that cannot be done (an option out of range, an unknown constant).

    `argument` is the Options field at fault ("timing.budget_ms"), when there is one; the message then
    holds "{argument}" where the argument's name goes, and each interface says the name its own way
    (`options.spoken`): `--budget-ms` on the command line, `budget_ms` in Python and over MCP. `str()`
    gives the Python API's words (the field's own name)."""

    def __init__(self, message: str, argument: str | None = None):
        super().__init__(message)
        self.argument = argument

    def __str__(self) -> str:
        return self.naming(self.argument.rsplit(".", 1)[-1]) if self.argument else self.args[0]

    def naming(self, name: str) -> str:
        """The message with the argument called `name`."""
        return self.args[0].replace("{argument}", name)


class ProblemError(KernelJudgeError):
    """The problem file is missing or malformed, so nothing can be judged against it."""


class CandidateError(KernelJudgeError):
    """The candidate file cannot be read or parsed (judge side: no candidate code has run)."""


class StoreError(KernelJudgeError):
    """The results store cannot be opened or does not hold what was asked for."""


class SetupError(KernelJudgeError):
    """This machine is not as the judge needs it (a folder it makes is someone else's): nothing can be judged
    until the user fixes it."""
