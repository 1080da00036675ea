"""The scripts' log lines: INFO and WARNING messages (through tf.logging
once TensorFlow is loaded, else absl's logging), durations in words, and
the progress lines of long loops every --log_every_seconds (`Progress`),
and `once`, which drops a line that TensorFlow itself repeats.

In: messages and counts. Out: log lines. Needs no TensorFlow.
"""

import contextlib
import logging
import sys
import time

from absl import logging as absl_logging


def format_duration(seconds):
    """"42 s", "3 min 05 s", "2 h 07 min"."""
    seconds = int(round(max(0.0, seconds)))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %02d s" % divmod(seconds, 60)
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


def _logger():
    """Where this module's messages go: tf.logging once TensorFlow is loaded
    (with the scripts' other messages), else absl's logging (scripts that
    never load TensorFlow set its verbosity)."""
    if "tensorflow" in sys.modules:
        import tensorflow.compat.v1 as tf
        return tf.logging
    return absl_logging


def log_info(message, *args):
    """Logs at INFO level (see `_logger`)."""
    _logger().info(message, *args)


def log_warning(message, *args):
    """Logs at WARNING level (see `_logger`)."""
    _logger().warning(message, *args)


@contextlib.contextmanager
def once(message):
    """Within the block, TensorFlow's logger lets the first record of
    `message` (the formatted text) through and drops its repeats: for a
    line that TensorFlow itself logs twice in a row."""

    class _FirstOnly(logging.Filter):
        seen = False

        def filter(self, record):
            if record.getMessage() != message:
                return True
            first, self.seen = not self.seen, True
            return first

    with tensorflow_log_filter(_FirstOnly()):
        yield


@contextlib.contextmanager
def tensorflow_log_filter(log_filter):
    """Within the block, `log_filter` (a logging.Filter, which may drop or
    reword a record) sees every record of TensorFlow's logger."""
    logger = logging.getLogger("tensorflow")
    logger.addFilter(log_filter)
    try:
        yield
    finally:
        logger.removeFilter(log_filter)


# The seconds between two progress lines: --log_every_seconds of the script
# running (`script_runner.run_script` sets it), else its default.
_RHYTHM = {"seconds": 30}


def set_log_every_seconds(seconds):
    """Sets the seconds between two progress lines of this process."""
    _RHYTHM["seconds"] = seconds


def log_every_seconds():
    """The seconds between two progress lines: the script's
    --log_every_seconds (30 in a library call, where no script runs)."""
    return _RHYTHM["seconds"]


class Progress:
    """Logs the progress of a long loop about every --log_every_seconds:
    "<what>: <count> of <total> <unit> (<rate> <unit>/s, ETA <time>)".

        progress = Progress("Converting examples", len(examples))
        for example in examples:
            ...
            progress.update()
        progress.done()

    Args:
      what: what the loop does.
      total: how many items it will do, or None (no ETA then).
      unit: what it counts.
      every_seconds: the interval (default: `log_every_seconds()`).
    """

    def __init__(self, what, total=None, unit="examples", every_seconds=None):
        self.what = what
        self.total = total
        self.unit = unit
        self.count = 0
        self._every = log_every_seconds() if every_seconds is None else every_seconds
        self._start = time.time()
        self._last_log = self._start

    def update(self, increment=1, count=None):
        """Counts `increment` more items (or sets the count), logging if the
        interval has passed."""
        self.count = self.count + increment if count is None else count
        now = time.time()
        if now - self._last_log >= self._every:
            self._last_log = now
            log_info("%s", self._message(now))

    def _message(self, now, final=False):
        elapsed = max(now - self._start, 1e-9)
        rate = self.count / elapsed
        if self.total is not None and not final:
            message = "%s: %d of %d %s" % (self.what, self.count, self.total, self.unit)
        else:
            message = "%s: %d %s" % (self.what, self.count, self.unit)
        message += " (%.1f %s/s" % (rate, self.unit)
        if final:
            message += ", %s in all)" % format_duration(elapsed)
        elif self.total is not None and rate > 0:
            message += ", ETA %s)" % format_duration((self.total - self.count) / rate)
        else:
            message += ")"
        return message

    def done(self):
        """Logs the final count, rate and time."""
        log_info("%s", self._message(time.time(), final=True))
