"""Dynamic batching (scriptkit/batching.py): concurrent runs merged, each
request given its own rows, what cannot merge run alone, an error kept to
its own request; and the server merging concurrent requests of a real
export."""

import threading
import time

import numpy as np
import tensorflow as tf

from scriptkit import batching


class FakeSignature:
    """A signature whose model doubles x row by row (`fixed`: outputs of a
    fixed shape past the batch; else padded to the batch's longest row),
    slowly enough for others to queue, and fails on a row holding -1."""

    def __init__(self, name="serving_default", fixed=True, seconds=0.05):
        self.name = name
        inner = [3] if fixed else [None]
        self.output_specs = {"double": tf.TensorSpec([None] + inner, tf.float32),
                             "row_sum": tf.TensorSpec([None], tf.float32)}
        self.seconds = seconds
        self.calls = []
        self.lock = threading.Lock()

    def run(self, arrays):
        x = arrays["x"]
        with self.lock:
            self.calls.append(len(x))
        time.sleep(self.seconds)
        if (x == -1).any():
            raise ValueError("row %d holds -1" % int(np.argmax((x == -1).any(axis=1))))
        return {"double": 2 * x, "row_sum": x.sum(axis=1)}


def _concurrently(batcher, signature, requests, windows=None):
    """Each request (an array [rows, 3]) run from its own thread, all
    released at once; returns each one's outputs or the error it raised."""
    results = [None] * len(requests)
    start = threading.Barrier(len(requests))

    def client(i):
        start.wait()
        try:
            results[i] = batcher.run(signature, {"x": requests[i]},
                                     windows[i] if windows else None)
        except Exception as e:  # noqa: BLE001
            results[i] = e

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def _requests(rows):
    rng = np.random.RandomState(len(rows))
    return [rng.uniform(size=(n, 3)).astype(np.float32) for n in rows]


def test_concurrent_runs_are_merged_and_each_gets_its_rows():
    signature = FakeSignature()
    # A 1 s window to join: all eight, released together, make one batch.
    batcher = batching.Batcher(max_batch_size=32, batch_timeout_micros=10 ** 6)
    requests = _requests([1, 2, 3, 1, 4, 1, 2, 2])
    results = _concurrently(batcher, signature, requests)
    for request, result in zip(requests, results):
        np.testing.assert_array_equal(result["double"], 2 * request)
        np.testing.assert_array_equal(result["row_sum"], request.sum(axis=1))
    assert signature.calls == [16]
    assert batcher.batches == {16: 1}


def test_batches_hold_at_most_max_batch_size_rows_and_max_windows():
    signature = FakeSignature()
    batcher = batching.Batcher(max_batch_size=4, batch_timeout_micros=10 ** 6)
    requests = _requests([2, 2, 3, 1, 1])
    results = _concurrently(batcher, signature, requests)
    assert all(isinstance(r, dict) for r in results)
    assert max(signature.calls) <= 4 and sum(signature.calls) == 9
    # Windows: each request here counts 5 a row, and a batch holds at most 10.
    signature = FakeSignature()
    batcher = batching.Batcher(max_batch_size=32, batch_timeout_micros=10 ** 6, max_windows=10)
    requests = _requests([1, 1, 1, 1])
    results = _concurrently(batcher, signature, requests, windows=[5, 5, 5, 5])
    assert all(isinstance(r, dict) for r in results)
    assert signature.calls == [2, 2]


def test_a_request_of_max_batch_size_rows_or_outputs_of_no_fixed_shape_run_alone():
    signature = FakeSignature()
    batcher = batching.Batcher(max_batch_size=4, batch_timeout_micros=10 ** 6)
    results = _concurrently(batcher, signature, _requests([4, 5]))
    assert sorted(signature.calls) == [4, 5] and not batcher.batches
    assert all(isinstance(r, dict) for r in results)
    padded = FakeSignature(fixed=False)
    assert not batching.mergeable(padded) and batching.mergeable(FakeSignature())
    results = _concurrently(batcher, padded, _requests([1, 1, 1]))
    assert padded.calls == [1, 1, 1] and not batcher.batches


def test_runs_merge_only_with_runs_of_the_same_signature_and_shape():
    batcher = batching.Batcher(max_batch_size=32, batch_timeout_micros=10 ** 6)
    first, other = FakeSignature(), FakeSignature(name="other")
    requests = _requests([1, 1, 1, 1])
    results = [None] * 4
    start = threading.Barrier(4)

    def client(i):
        start.wait()
        signature = first if i % 2 else other
        x = requests[i] if i < 3 else np.ones((1, 2), np.float32)  # another width
        results[i] = batcher.run(signature, {"x": x})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(first.calls) == [1, 1] and other.calls == [2]
    np.testing.assert_array_equal(results[3]["double"], np.full((1, 2), 2.0))


def test_a_failed_merged_run_gives_the_error_to_its_own_request_only():
    signature = FakeSignature()
    batcher = batching.Batcher(max_batch_size=32, batch_timeout_micros=10 ** 6)
    requests = _requests([2, 1, 3])
    requests[1][0, 1] = -1
    results = _concurrently(batcher, signature, requests)
    assert isinstance(results[1], ValueError) and str(results[1]) == "row 0 holds -1"
    for i in (0, 2):
        np.testing.assert_array_equal(results[i]["double"], 2 * requests[i])
    # The merged run failed, then each ran alone.
    assert signature.calls[0] == 6 and sorted(signature.calls[1:]) == [1, 2, 3]


def test_a_lone_run_does_not_wait_for_the_timeout_when_it_is_zero():
    # The batcher's clock never moves: a run that waited for its timeout
    # to pass would never end; with a timeout of 0 it goes at once.
    signature = FakeSignature(seconds=0)
    batcher = batching.Batcher(max_batch_size=32, batch_timeout_micros=0, clock=lambda: 0.0)
    result = _concurrently(batcher, signature, [np.ones((1, 3), np.float32)])[0]
    np.testing.assert_array_equal(result["double"], np.full((1, 3), 2.0))
    assert signature.calls == [1]


def test_a_run_without_a_batch_dimension_goes_alone_in_its_own_thread():
    class Scalar(FakeSignature):
        def run(self, arrays):
            self.calls.append((np.ndim(arrays["x"]), threading.current_thread()))
            return {"double": np.asarray([2 * arrays["x"]])}

    signature = Scalar()
    batcher = batching.Batcher(max_batch_size=32, batch_timeout_micros=10 ** 6)
    result = batcher.run(signature, {"x": np.float32(3)})
    assert signature.calls == [(0, threading.current_thread())]
    assert result["double"].tolist() == [6.0]
