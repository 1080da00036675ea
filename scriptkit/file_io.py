"""Files: reading the scripts' inputs, checking where they write, writing
outputs that appear complete or not at all, and naming the outputs at the
end of a run.

Every script reads and writes through these functions: local paths with
Python's own file functions, other paths (gs://, TensorFlow's ram:// and any
scheme with "://") through tf.io.gfile, which imports TensorFlow when such a
path is first used. A file that is missing, not UTF-8 or not JSON is an
InputError naming the flag, the file and the line; an output location is
checked before any work (`check_output_dir`, `check_output_file`), and a
write that fails for lack of room becomes one line naming it
(`output_write_error`). Output files are written under a temporary name and
renamed into place when complete (`AtomicFile`, `atomic_output`), and
`report_output` lists them for the run's last lines (`log_outputs`).
"""

import contextlib
import errno
import glob
import json
import os
import sys

from scriptkit import interrupts
from scriptkit import logs
from scriptkit.errors import InputError


# ---------------------------------------------------------------------------
# Files: local paths through Python, the others (a scheme with "://")
# through tf.io.gfile.

def is_remote(path):
    """Whether `path` names a file system of TensorFlow's (gs://, ram://,
    ...) rather than a local path."""
    return "://" in str(path)


def gfile():
    """tf.io.gfile, imported (quietly, see quiet_tf.py) on first use."""
    from scriptkit import quiet_tf  # noqa: F401
    import tensorflow.compat.v1 as tf
    return tf.io.gfile


def exists(path):
    """Whether the file or directory `path` exists."""
    return gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path):
    """Whether `path` is a directory."""
    return gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def file_size(path):
    """The size of the file `path`, in bytes."""
    return gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def open_file(path, mode="r"):
    """Opens `path` for reading or writing ("r", "w", "rb", "wb", ...); text
    modes use UTF-8."""
    if is_remote(path):
        return gfile().GFile(path, mode)
    return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def read_file_bytes(path):
    """The content of the file `path`, as bytes."""
    with open_file(path, "rb") as f:
        return f.read()


def require_file(flag_name, path):
    """Raises InputError if `path` (the value of --flag_name) does not exist."""
    if not path:
        raise InputError("--%s is required" % flag_name)
    if not exists(path):
        raise InputError("--%s: file not found: %s" % (flag_name, path))


def read_text(path, flag_name):
    """The text of the UTF-8 file `path` (named by --flag_name), without a
    leading byte order mark (which is no part of the data).

    Raises:
      InputError: the file is missing, or not UTF-8 (naming the line).
    """
    require_file(flag_name, path)
    try:
        text = read_file_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise non_utf8_error(flag_name, path)
    return text[1:] if text.startswith("\ufeff") else text


def read_json(path, flag_name=None):
    """The parsed content of the JSON file `path`.

    Args:
      path: the file.
      flag_name: the flag that named it, for messages (None: a file found
        by the script).

    Raises:
      InputError: the file is not UTF-8 (naming the line) or not JSON.
    """
    try:
        return json.loads(read_file_bytes(path).decode("utf-8"))
    except UnicodeDecodeError:
        raise non_utf8_error(flag_name, path)
    except ValueError as e:
        where = "--%s %s" % (flag_name, path) if flag_name else path
        raise InputError("%s is not a JSON file: %s" % (where, e))


def read_json_object(path, flag_name=None):
    """`read_json` of a file that must hold one JSON object (a dict)."""
    value = read_json(path, flag_name)
    if not isinstance(value, dict):
        where = "--%s %s" % (flag_name, path) if flag_name else path
        raise InputError("%s must hold a JSON object" % where)
    return value


def json_lines(text, path):
    """(line number, object) for each non-blank line of JSON Lines `text`,
    the content of the file `path`.

    Raises:
      InputError: naming the file and line of a line that is not JSON or
        not one JSON object.
    """
    # Not splitlines(): JSON strings may hold U+2028 and other characters it
    # would split at.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise InputError("%s, line %d: not valid JSON: %s" % (path, number, e))
        if not isinstance(value, dict):
            raise InputError("%s, line %d: expected one JSON object ({...}) per line, found %s"
                             % (path, number, type(value).__name__))
        yield number, value


def expand_file_patterns(flag_name, patterns):
    """Comma-separated files or globs -> the files they name, each glob's
    matches sorted (directories left out).

    Raises:
      InputError: a pattern matches no file (names the flag and the
        pattern), or there is no pattern.
    """
    files = []
    for pattern in patterns.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        if is_remote(pattern):
            matched = [p for p in gfile().glob(pattern) if not gfile().isdir(p)]
        else:
            matched = [p for p in glob.glob(pattern) if os.path.isfile(p)]
        if not matched:
            raise InputError("--%s: no file matches %s" % (flag_name, pattern))
        files.extend(sorted(matched))
    if not files:
        raise InputError("--%s is required" % flag_name)
    return files


def utf8_lines(lines, flag_name, path):
    """Passes on the lines of a file opened as UTF-8 text, turning a
    UnicodeDecodeError into `non_utf8_error` (naming the line).

    Args:
      lines: an iterable of str, e.g. a tf.io.gfile.GFile opened with "r".
      flag_name, path: the flag and the file, for the message.
    """
    try:
        yield from lines
    except UnicodeDecodeError:
        raise non_utf8_error(flag_name, path)


def non_utf8_error(flag_name, path):
    """The InputError for a file that is not UTF-8, naming its first bad line.

    Called after a UnicodeDecodeError, whose position is relative to
    whatever chunk was being decoded: the file is read again, line by line,
    to find the line, the byte offset and the reason.

    Args:
      flag_name: the flag that named the file (or its directory), or None.
      path: the file.

    Returns:
      InputError("--<flag> <path>, line N: not valid UTF-8 (byte offset O of
      the file: <reason>); convert the file to UTF-8").
    """
    where = "--%s %s" % (flag_name, path) if flag_name else path
    offset = 0
    with open_file(path, "rb") as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return InputError(
                    "%s, line %d: not valid UTF-8 (byte offset %d of the file: %s); convert "
                    "the file to UTF-8" % (where, number, offset + e.start, e.reason))
            offset += len(line)
    return InputError("%s is not valid UTF-8 (a character is cut off at the end); convert "
                      "the file to UTF-8" % where)


# ---------------------------------------------------------------------------
# Output locations: checked before any work, and failed writes in one line.

# errno values, and the texts of TensorFlow's errors, of a write that failed
# for lack of room: a full disk, a full quota, a file size limit.
_NO_ROOM_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_NO_ROOM_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large")


# flag name -> path, for each output location checked by this run.
_OUTPUT_LOCATIONS = {}


def check_output_dir(path, flag_name="output_dir"):
    """Checks that a run can write into the directory `path`, creating
    nothing: it must be a directory or not exist yet, and the directory it
    is in (or would be created in) must be writable.

    Remote paths (gs://...) are not checked (a write is the only test).

    Args:
      path: the directory.
      flag_name: the flag that named it, for the message.

    Raises:
      InputError: naming the flag, the path and what to do.
    """
    if not path:
        raise InputError("--%s is required" % flag_name)
    _OUTPUT_LOCATIONS[flag_name] = path
    if is_remote(path):
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError("--%s %s is a file, not a directory: name a directory (it is "
                         "created if missing) or move the file away" % (flag_name, path))
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InputError("--%s %s cannot be created: %s is a file, not a directory"
                         % (flag_name, path, existing))
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == os.path.abspath(path):
            detail = "is not writable"
        else:
            detail = "cannot be created: %s is not writable" % existing
        raise InputError("--%s %s %s: choose another directory or change its permissions"
                         % (flag_name, path, detail))


def check_output_file(path, flag_name="output_file", create_dir=True):
    """Checks that a run can write the file `path` (see check_output_dir).

    Args:
      path: the file.
      flag_name: the flag that named it, for the message.
      create_dir: whether the run creates a missing parent directory; if
        not, the directory must exist.

    Raises:
      InputError: `path` is a directory, or its directory is missing (with
        create_dir False), a file or not writable.
    """
    if not path:
        raise InputError("--%s is required" % flag_name)
    if isdir(path):
        raise InputError("--%s %s is a directory: give the path of a file to write"
                         % (flag_name, path))
    directory = os.path.dirname(path) or "."
    if not create_dir and not is_remote(path) and not os.path.isdir(directory):
        raise InputError("--%s %s: directory %s does not exist" % (flag_name, path, directory))
    try:
        check_output_dir(directory, flag_name)
    except InputError as e:
        raise InputError(str(e).replace("--%s %s" % (flag_name, directory),
                                        "--%s %s: its directory %s" % (flag_name, path, directory),
                                        1))
    _OUTPUT_LOCATIONS[flag_name] = path


def _is_tensorflow_error(error):
    """Whether `error` is a TensorFlow OpError (only possible once
    TensorFlow is loaded)."""
    if "tensorflow" not in sys.modules:
        return False
    import tensorflow.compat.v1 as tf
    return isinstance(error, tf.errors.OpError)


def output_write_error(error, path=None):
    """The one-line message for `error` if it is a write that failed for lack
    of room (full disk, quota, file size limit), else None.

    Args:
      error: an exception: an OSError, or a TensorFlow error (whose text
        usually names the file).
      path: the file being written, if the caller knows it.

    Returns:
      "cannot write <path>: <reason>; free some space ... or choose another
      --<flag>", or None.
    """
    if isinstance(error, OSError) and error.errno in _NO_ROOM_ERRNOS:
        reason = error.strerror or str(error)
        path = path or error.filename
    elif _is_tensorflow_error(error):
        text = error.message or str(error)
        # The text's first line may say nothing ("Graph execution error:"),
        # and the line with the reason names a temporary file: the reason alone.
        reason = next((t for t in _NO_ROOM_TEXTS if t in text), None)
        if reason is None:
            return None
    else:
        return None
    flag = None
    for name, location in _OUTPUT_LOCATIONS.items():
        if path is None or os.path.abspath(str(path)).startswith(os.path.abspath(location)):
            flag = name
    where = "--%s %s" % (flag, _OUTPUT_LOCATIONS[flag]) if flag else "the output"
    if path:
        return ("cannot write %s: %s; free some disk space (or raise the file size "
                "limit) or choose another location for %s" % (path, reason, where))
    return ("writing %s failed: %s; free some disk space (or raise the file size limit) "
            "or choose another location" % (where, reason))


# ---------------------------------------------------------------------------
# Output files that appear complete or not at all.

class AtomicFile:
    """An output file written under a temporary name next to its final one
    and renamed into place when complete, so that a half-written file never
    looks complete (the one mechanism behind every output file of the
    scripts; local and gs:// paths).

        target = AtomicFile(path)
        writer = open(target.tmp_path, "wb")   # or any writer of a path
        ...                                    # on failure: target.abort()
        writer.close()
        target.commit()

    Args:
      path: the final path.
    """

    def __init__(self, path):
        self.path = path
        self.tmp_path = "%s.tmp-%d" % (path, os.getpid())

    def commit(self):
        """Renames the temporary file to `path` (replacing any file there);
        raises KeyboardInterrupt instead if the run was interrupted."""
        interrupts.raise_if_interrupted()
        if is_remote(self.path):
            gfile().rename(self.tmp_path, self.path, overwrite=True)
        else:
            os.replace(self.tmp_path, self.path)

    def abort(self):
        """Removes the temporary file, if there is one."""
        if exists(self.tmp_path):
            if is_remote(self.tmp_path):
                gfile().remove(self.tmp_path)
            else:
                os.remove(self.tmp_path)


class AtomicWriter:
    """Base of the scripts' record and feature writers: `self._writer`
    (anything with write and close) writes the temporary file of an
    `AtomicFile`; `close` puts the complete file in place, `abort` removes
    the unfinished one.

    Args:
      path: the final path.
      open_writer: function (temporary path) -> the writer.
    """

    def __init__(self, path, open_writer):
        self._target = AtomicFile(path)
        self._writer = open_writer(self._target.tmp_path)

    def close(self):
        """Finishes the file and renames it to its final path."""
        self._writer.close()
        self._target.commit()

    def abort(self):
        """Closes and removes the unfinished file."""
        self._writer.close()
        self._target.abort()


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path` for the caller to write; on
    success it is renamed to `path`, on failure removed (see `AtomicFile`).
    A write that fails for lack of room becomes an InputError naming `path`
    (see `output_write_error`)."""
    target = AtomicFile(path)
    try:
        yield target.tmp_path
        target.commit()
    except BaseException as e:
        target.abort()
        message = output_write_error(e, path) if isinstance(e, Exception) else None
        if message:
            raise InputError(message) from e
        raise


@contextlib.contextmanager
def atomic_output(path, mode="w"):
    """Opens `path` for writing through `atomic_path`.

    Yields:
      A writable file object (a tf.io.gfile.GFile for remote paths).
    """
    with atomic_path(path) as tmp_path:
        with open_file(tmp_path, mode) as writer:
            yield writer


# ---------------------------------------------------------------------------
# The files a run wrote for its user, named once at its end.

_OUTPUTS = []  # (path, what), in the order written.


def report_output(path, what=""):
    """Adds `path` to the files this run wrote for the user, with `what`
    (its headline: "eval_accuracy = 0.87", "408 predictions", ...);
    `log_outputs` names them. Writing the same path again replaces the
    entry."""
    _OUTPUTS[:] = [entry for entry in _OUTPUTS if entry[0] != path]
    _OUTPUTS.append((path, what))


def forget_outputs():
    """Empties the list of `report_output`: a run starts with none (a
    process may run several, as the tests do)."""
    del _OUTPUTS[:]


def reported_outputs():
    """The (path, what) of every `report_output` of this run, in order."""
    return list(_OUTPUTS)


def log_outputs():
    """Logs "Wrote <path>: <what>" for each file of `report_output` (the
    scripts' last lines, see `script_runner.run_script`)."""
    for path, what in _OUTPUTS:
        logs.log_info("Wrote %s%s", path, ": " + what if what else "")
