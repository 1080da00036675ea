"""tf.distribute through training.make_estimator: MirroredStrategy over two
logical CPU devices in one process (both runtimes), and, with the Estimator,
MultiWorkerMirroredStrategy with two worker processes on localhost; each must
end with the same variables as one process training on the combined batch,
with either optimizer (AdamW and LAMB).

Every run is a subprocess of tests/distributed_driver.py (logical devices and
TF_CONFIG must be set before TensorFlow starts); all use loopback ports only
and a bounded timeout.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from scriptkit import runners

from scriptkit import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "tests", "distributed_driver.py")
TIMEOUT_S = 300

pytestmark = pytest.mark.slow


def _start(*args, output=subprocess.PIPE):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return subprocess.Popen([sys.executable, DRIVER] + [str(a) for a in args], cwd=ROOT,
                            env=env, stdout=output, stderr=subprocess.STDOUT, text=True)


def _finish(process):
    """Waits for a driver or worker process; fails the test on a timeout or a
    non-zero exit. Returns what it printed."""
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail("driver timed out:\n" + output[-3000:])
    assert process.returncode == 0, output[-3000:]
    return output


def _free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _run_worker_pair(start, log_dir, output_dir):
    """Runs two workers on two free loopback ports: `start(index, ports,
    log)` starts worker `index` (0 or 1) of `ports` (two ints), its output
    going to the open file `log` (made in `log_dir`); `output_dir`, where
    they write, is removed before each try. Fails the test as `_finish`
    does; returns the two outputs.

    The ports are free when picked but not held until the workers bind them,
    seconds later: should another process take one meanwhile, its worker
    stops at once ("Address already in use"; its partner would wait for it
    until the timeout), and the pair runs once more on two other ports."""
    for attempt in (1, 2):
        shutil.rmtree(output_dir, ignore_errors=True)
        ports = _free_ports(2)
        logs = [open(os.path.join(log_dir, "worker%d-try%d.log" % (index, attempt)), "w+")
                for index in range(2)]
        workers = [start(index, ports, log) for index, log in enumerate(logs)]
        deadline = time.monotonic() + TIMEOUT_S
        # Until both end, one fails, or the time is up.
        while (any(w.poll() is None for w in workers) and not any(w.poll() for w in workers)
               and time.monotonic() < deadline):
            time.sleep(0.5)
        timed_out = time.monotonic() >= deadline
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
            log.close()
        if attempt == 1 and any(w.returncode and "Address already in use" in output
                                for w, output in zip(workers, outputs)):
            continue
        if timed_out:
            pytest.fail("workers timed out:\n" + "\n".join(o[-3000:] for o in outputs))
        codes = [w.returncode for w in workers]
        for code, output in zip(codes, outputs):  # One that failed on its own first,
            assert code <= 0, output[-3000:]
        for code, output in zip(codes, outputs):  # then one stopped here as it did.
            assert code == 0, output[-3000:]
        return outputs


@pytest.fixture(scope="module")
def initial(tmp_path_factory):
    """The initial checkpoint every run starts from."""
    root = tmp_path_factory.mktemp("distributed")
    _finish(_start(root / "unused", root, "init"))
    return root, root / "init.ckpt"


@pytest.fixture(scope="module", params=["adamw", "lamb"])
def reference(request, initial):
    """(folder, initial checkpoint, the single-process result with global
    batch 8, optimizer)."""
    root, init_checkpoint = initial
    root = root / request.param
    root.mkdir(exist_ok=True)
    out = root / "single.npz"
    _finish(_start(out, root / "single", "single", init_checkpoint, request.param))
    # The --optimizer reached the graph the run saved.
    graph = (root / "single" / "graph.pbtxt").read_text()
    assert ("LambOptimizer" in graph) == (request.param == "lamb")
    return root, init_checkpoint, dict(np.load(out)), request.param


def _assert_same_variables(result, expected):
    assert int(result["global_step"]) == int(expected["global_step"]) == 3
    assert set(result) == set(expected)
    for name in expected:
        np.testing.assert_allclose(result[name], expected[name], atol=1e-4, rtol=1e-4,
                                   err_msg=name)


def test_mirrored_strategy_two_logical_cpus(reference):
    root, init_checkpoint, expected, optimizer = reference
    _finish(_start(root / "mirrored.npz", root / "mirrored", "mirrored", init_checkpoint,
                   optimizer))
    _assert_same_variables(dict(np.load(root / "mirrored.npz")), expected)


def test_mirrored_strategy_with_dynamic_padding(reference):
    """Batches cut to their longest input, split over two replicas: the
    variables of padded batches on one device."""
    root, init_checkpoint, expected, optimizer = reference
    if optimizer != "adamw":
        pytest.skip("checked once, with the default optimizer")
    _finish(_start(root / "dynamic.npz", root / "dynamic", "mirrored_dynamic",
                   init_checkpoint))
    _assert_same_variables(dict(np.load(root / "dynamic.npz")), expected)


@pytest.mark.skipif(not runtime.USE_ESTIMATOR, reason="multi-worker training needs the "
                    "Estimator (TensorFlow 2.15); the session runner refuses it")
def test_multi_worker_two_processes_on_localhost(reference):
    root, init_checkpoint, expected, optimizer = reference
    model_dir = root / "multi_worker"

    def start(index, ports, log):
        return _start(root / ("worker%d.npz" % index), model_dir, "worker", index,
                      ",".join(str(p) for p in ports), init_checkpoint, optimizer, output=log)

    _run_worker_pair(start, root, model_dir)
    # The chief (worker 0) writes the checkpoint and the variables.
    _assert_same_variables(dict(np.load(root / "worker0.npz")), expected)


@pytest.mark.skipif(runtime.USE_ESTIMATOR, reason="the Estimator trains several workers")
def test_multi_worker_refused_by_the_session_runner():
    with pytest.raises(runtime.ConfigError, match="multi_worker_mirrored needs the Estimator"):
        runners.make_distribution_strategy("multi_worker_mirrored")


@pytest.mark.skipif(not runtime.USE_ESTIMATOR, reason="multi-worker training needs the "
                    "Estimator (TensorFlow 2.15)")
def test_pretraining_workers_read_distinct_files(tmp_path):
    """run_pretraining.py with two localhost workers and four input files:
    each worker reads its own two (files 0, 2 and 1, 3), both train with
    LAMB, and the chief writes the checkpoint."""
    import test_run_pretraining as pre
    import tiny

    tiny.write_vocab(str(tmp_path), ["w%d" % i for i in range(pre.NUM_WORDS)])
    config = tiny.write_config(str(tmp_path), pre.VOCAB_SIZE)
    for i in range(4):
        pre.write_records(str(tmp_path / ("part-%02d.tfrecord" % i)),
                          pre.make_instances(16, seed=i))
    output_dir = tmp_path / "out"

    def start(index, ports, log):
        env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=json.dumps({
            "cluster": {"worker": ["localhost:%d" % p for p in ports]},
            "task": {"type": "worker", "index": index}}))
        return subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "run_pretraining.py"),
             "--bert_config_file=%s" % config,
             "--input_file=%s" % (tmp_path / "part-*.tfrecord"),
             "--output_dir=%s" % output_dir, "--do_train", "--max_seq_length=%d" % pre.SEQ,
             "--max_predictions_per_seq=%d" % pre.PRED, "--train_batch_size=8",
             "--num_train_steps=2", "--num_warmup_steps=0", "--optimizer=lamb",
             "--input_seed=3", "--distribution_strategy=multi_worker_mirrored"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)

    outputs = _run_worker_pair(start, tmp_path, output_dir)
    for index, output in enumerate(outputs):
        assert ("Input pipeline %d of 2 reads 2 of the 4 input files, from part-%02d.tfrecord"
                % (index, index)) in output, output[-3000:]
    assert (output_dir / "model.ckpt-2.index").exists()
