"""Dynamic batching for the REST server: the model runs of concurrent
requests merged into one, as TensorFlow Serving's batching does
(--max_batch_size, --batch_timeout_micros).

A request's checked inputs (`rest_api._checked_inputs`) go to `Batcher.run`
from the server thread that handles it. One batching thread takes the
oldest waiting run, waits up to the timeout for more of the same kind (same
signature, same dtypes and same dimensions past the batch), and runs them as
one batch of at most max_batch_size rows and max_windows windows; each
request gets its own rows of the outputs. Runs of other kinds wait for the
next batch, in their order of arrival.

Only what merging cannot change is merged: signatures whose every output
has fixed dimensions past the batch (a classifier's probabilities, an
embedding, a multiple-choice score), so a request's answer has the same
shape alone or in a batch (its numbers may differ in the last bits, as the
matmuls' blocking does with the batch). Others (a tagger's per-word outputs,
padded to the longest text of the batch) run alone, in their request's
thread, as do requests of max_batch_size rows or more: a long one never
holds the others back. Where a merged run fails (an op error of one
request's ids), each of its requests runs again alone, and only the one at
fault gets the error.

In: `exported_model.Signature` and NumPy arrays. Out: name -> NumPy array.
"""

import collections
import threading
import time

import numpy as np

# TensorFlow Serving's defaults are off; these merge what arrives while a
# batch runs, without holding a lone request back.
DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_BATCH_TIMEOUT_MICROS = 0


def mergeable(signature):
    """Whether the runs of `signature` can be merged: every output has
    fixed dimensions past the first (the batch)."""
    return all(spec.shape.rank is not None and spec.shape.rank >= 1
               and None not in spec.shape.as_list()[1:]
               for spec in signature.output_specs.values())


class _Run:
    """One request's model run, waiting in the queue."""

    def __init__(self, signature, arrays, windows):
        self.signature = signature
        self.arrays = arrays
        # Rows: the inputs' one first dimension (0 where there is none to
        # stack on: such a run goes alone).
        firsts = {np.shape(array)[0] if np.ndim(array) else None for array in arrays.values()}
        self.rows = firsts.pop() if len(firsts) == 1 and None not in firsts else 0
        self.windows = windows if windows is not None else self.rows
        # Runs of one key can be stacked along the batch.
        self.key = (signature.name, tuple((name, np.asarray(array).dtype.str, np.shape(array)[1:])
                                          for name, array in sorted(arrays.items())))
        if not self.rows or not mergeable(signature):
            self.key = None
        self.outputs = None
        self.error = None
        self.done = threading.Event()


class Batcher:
    """Merges the model runs of concurrent requests (see the module
    docstring). `run` is called from many threads; one thread of its own
    runs the merged batches.

    Args:
      max_batch_size: the most rows (instances) a merged run holds; a
        request with more runs alone.
      batch_timeout_micros: how long the oldest waiting run waits for
        others to join it, in microseconds (0: it takes those waiting and
        goes).
      max_windows: the most windows (`exported_model.Signature.windows`) a
        merged run holds, or None.
    """

    def __init__(self, max_batch_size=DEFAULT_MAX_BATCH_SIZE,
                 batch_timeout_micros=DEFAULT_BATCH_TIMEOUT_MICROS, max_windows=None,
                 clock=time.monotonic):
        self.max_batch_size = max_batch_size
        self.timeout = batch_timeout_micros / 1e6
        self.max_windows = max_windows
        self._clock = clock
        self._queue = collections.deque()
        self._condition = threading.Condition()
        self.batches = collections.Counter()  # rows -> how many merged runs held as many
        threading.Thread(target=self._serve, name="batching", daemon=True).start()

    def run(self, signature, arrays, windows=None):
        """The outputs (name -> NumPy array [rows, ...]) of `signature` on
        the checked `arrays` (input name -> array [rows, ...]), run with
        whatever concurrent runs it merges with; `windows`: how many windows
        the run holds (None: one a row). Raises what running it alone
        raises."""
        job = _Run(signature, arrays, windows)
        if job.key is None or job.rows >= self.max_batch_size:
            return signature.run(arrays)
        with self._condition:
            self._queue.append(job)
            self._condition.notify_all()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.outputs

    def _serve(self):
        while True:
            self._run_batch(self._next_batch())

    def _next_batch(self):
        """The oldest waiting run and those that join it (see `_fits`)."""
        with self._condition:
            while not self._queue:
                self._condition.wait()
            first = self._queue.popleft()
            batch = [first]
            deadline = self._clock() + self.timeout
            while True:
                for job in list(self._queue):
                    if job.key == first.key and self._fits(batch, job):
                        self._queue.remove(job)
                        batch.append(job)
                left = deadline - self._clock()
                if left <= 0 or sum(job.rows for job in batch) >= self.max_batch_size:
                    return batch
                self._condition.wait(left)

    def _fits(self, batch, job):
        rows = sum(j.rows for j in batch) + job.rows
        windows = sum(j.windows for j in batch) + job.windows
        return rows <= self.max_batch_size and (self.max_windows is None
                                                or windows <= self.max_windows)

    def _run_batch(self, batch):
        if len(batch) > 1:
            try:
                merged = {name: np.concatenate([job.arrays[name] for job in batch])
                          for name in batch[0].arrays}
                outputs = batch[0].signature.run(merged)
                total = sum(job.rows for job in batch)
                if all(np.shape(value)[:1] == (total,) for value in outputs.values()):
                    self.batches[total] += 1
                    start = 0
                    for job in batch:
                        job.outputs = {name: value[start:start + job.rows]
                                       for name, value in outputs.items()}
                        start += job.rows
                        job.done.set()
                    return
            except Exception:  # noqa: BLE001  (each runs alone: the error finds its own)
                pass
        for job in batch:
            try:
                job.outputs = job.signature.run(job.arrays)
            except Exception as e:  # noqa: BLE001  (raised in the request's thread)
                job.error = e
            job.done.set()
