"""InputError, the error for bad user input: a flag, a file or a line of
it that the run cannot use. `script_runner.run_script` ends a run that
raises it with the one line of its message, without a traceback.

Needs no TensorFlow, and nothing else of this project.
"""


class InputError(ValueError):
    """Bad user input (a flag, a file, a line): reported without a traceback."""
