"""The one exception type a user sees: a one-line message and a non-zero exit."""


class ToolError(Exception):
    """Bad input or an unusable environment, told to the user in one line.

    The CLIs catch it, print ``error: <message>`` and exit with ``exit_code``;
    anything else that escapes is a bug and keeps its traceback.
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def first_line(exc: BaseException) -> str:
    """What a library's exception says, cut to the one line a ToolError may carry."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
