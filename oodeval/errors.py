"""The one exception type oodeval raises for bad input.

Every message is a single line that names the problem and how to fix it; the CLI prints it on
stderr and exits with status 2, without a traceback.
"""


class OodevalError(ValueError):
    """Bad input or configuration: the message says what was wrong and what to do instead."""
