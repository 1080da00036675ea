"""Small shared builders for tests: a tiny vocabulary and BERT config."""

import contextlib
import json
import logging
import os

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(directory, tokens, name="vocab.txt"):
    """Writes SPECIAL_TOKENS + tokens (one per line) and returns the path."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        for token in SPECIAL_TOKENS + [t for t in tokens if t not in SPECIAL_TOKENS]:
            f.write(token + "\n")
    return path


def tiny_config_dict(vocab_size, **overrides):
    """A small, fast BERT config as a dict (2 layers, hidden 32, 4 heads)."""
    config = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
    }
    config.update(overrides)
    return config


def write_config(directory, vocab_size, name="bert_config.json", **overrides):
    """Writes a tiny bert_config.json and returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(tiny_config_dict(vocab_size, **overrides), f, indent=2)
    return path


# A tiny config that learns a test's task from scratch with every graph
# seed: no dropout, and initial weights wider than BERT's 0.02 (with 0.02 a
# tiny model can sit at its first loss for hundreds of steps).
LEARNABLE = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                 initializer_range=0.1)


def write_model_files(directory, words, vocab_size=None, **overrides):
    """Writes a vocabulary of SPECIAL_TOKENS + `words` and a tiny config (of
    `vocab_size` ids, default the vocabulary's size, and `overrides`) to
    `directory`; returns (vocab path, config path)."""
    vocab = write_vocab(str(directory), words)
    if vocab_size is None:
        vocab_size = len(SPECIAL_TOKENS) + len(words)
    return vocab, write_config(str(directory), vocab_size=vocab_size, **overrides)


class LogMessages(logging.Handler):
    """A logging handler that keeps each record's message in `messages`."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    @property
    def text(self):
        return "\n".join(self.messages)

    @classmethod
    @contextlib.contextmanager
    def collecting(cls):
        """A LogMessages on TensorFlow's logger, at INFO level, while in a
        with block."""
        import tensorflow.compat.v1 as tf
        collector = cls()
        logger = logging.getLogger("tensorflow")
        verbosity = tf.logging.get_verbosity()
        tf.logging.set_verbosity(tf.logging.INFO)
        logger.addHandler(collector)
        try:
            yield collector
        finally:
            logger.removeHandler(collector)
            tf.logging.set_verbosity(verbosity)


def example_features(record):
    """A serialized tf.train.Example -> {feature name: (kind, list of
    values)}, read by protobuf alone."""
    import tensorflow as tf
    example = tf.train.Example.FromString(record)
    out = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = (kind, list(getattr(feature, kind).value))
    return out


def serving_ids_probabilities(export_dir, features, first_choices=None):
    """Runs the serving_ids signature of the one SavedModel in `export_dir`
    (after checking its inputs and outputs) on the features' input_ids,
    input_mask and segment_ids (each [len(features), ...] int32; with
    `first_choices`, a multiple-choice model's, only that many first
    entries of axis 1). Returns (its "probabilities", the SavedModel's
    path)."""
    import numpy as np
    import tensorflow.compat.v1 as tf
    (path,) = [os.path.join(export_dir, d) for d in os.listdir(export_dir)]
    with tf.Graph().as_default(), tf.Session() as sess:
        meta = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING], path)
        signature = meta.signature_def["serving_ids"]
        assert set(signature.inputs) == {"input_ids", "input_mask", "segment_ids"}
        assert set(signature.outputs) == {"probabilities"}
        feed = {signature.inputs[name].name: np.array([getattr(f, name) for f in features],
                                                      dtype=np.int32)
                for name in ("input_ids", "input_mask", "segment_ids")}
        if first_choices:
            feed = {k: v[:, :first_choices] for k, v in feed.items()}
        return sess.run(signature.outputs["probabilities"].name, feed), path


# Runs with `python -I` (argv[1]: JSON [module, SavedModel folder, texts]):
# fails if `module` of this repository is importable, else prints
# "RESULTS" + JSON {output name: values as lists, strings decoded}.
_BARE_LOADER = r"""
import importlib, json, sys
module, path, texts = json.loads(sys.argv[1])
try:
    importlib.import_module(module)
    sys.exit("this repository is importable")
except ImportError:
    pass
import tensorflow as tf
import tensorflow_text  # noqa: F401
outputs = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))
outputs = {k: v.numpy().astype(str) if v.dtype == tf.string else v.numpy()
           for k, v in outputs.items()}
print("RESULTS" + json.dumps({k: v.tolist() for k, v in outputs.items()}))
"""


def serve_text_elsewhere(export_dir, texts, tmp_path, module):
    """Copies the text export `export_dir` to tmp_path/elsewhere/1 and calls
    its serving_default on `texts` with `python -I` from tmp_path/workdir,
    with only PATH and TF_CPP_MIN_LOG_LEVEL in the environment (so that
    nothing of this repository, such as `module`, is importable). Returns
    {output name: nested lists; strings as str}."""
    import shutil
    import subprocess
    import sys
    moved = shutil.copytree(export_dir, str(tmp_path / "elsewhere" / "1"))
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _BARE_LOADER, json.dumps([module, moved, texts])],
        cwd=str(workdir), capture_output=True, text=True, timeout=600,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0 and "RESULTS" in proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULTS", 1)[1])


def run_main_seeded(main, flag_values, seed=1234):
    """Runs a script's `main([])` in this process with exactly `flag_values`
    (a dict of every flag it reads), and the runner's graph-level random
    seed fixed (see `seeded_runs`)."""
    from absl import flags
    from absl.testing import flagsaver

    from scriptkit import file_io
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(**flag_values):
        with seeded_runs(seed):
            file_io.forget_outputs()
            main([])
            file_io.log_outputs()


@contextlib.contextmanager
def seeded_runs(seed=1234):
    """Within the block, every run configuration the scripts make carries
    the graph-level random seed `seed` (initialisation, dropout, shuffling):
    the tiny models sometimes sit on their initial loss plateau for longer
    than the tests' short runs, so unseeded runs would be flaky."""
    import pytest

    from scriptkit import training
    make_run_config = training.make_run_config

    def seeded_run_config(*args, **kwargs):
        return make_run_config(*args, **kwargs).replace(tf_random_seed=seed)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "make_run_config", seeded_run_config)
        yield


def signal_during_run(at, signum):
    """A SessionRunHook that sends `signum` to this process as the `at`-th
    session run starts, as a scheduler or Ctrl-C would during a step."""
    import tensorflow.compat.v1 as tf

    class SignalAt(tf.train.SessionRunHook):
        def __init__(self):
            self.runs = 0

        def before_run(self, run_context):
            self.runs += 1
            if self.runs == at:
                os.kill(os.getpid(), signum)

    return SignalAt()


def run_main_interrupted(main, flag_values, at, seed=1234):
    """`run_main_seeded`, with a SIGTERM during the `at`-th training session
    run: expects the run to stop with training.TrainingInterrupted (exit
    status 128 + 15) after saving a checkpoint, then runs the same again,
    which resumes from it. Returns the interrupted run's checkpoint."""
    import signal

    import pytest
    import tensorflow.compat.v1 as tf

    from scriptkit import training
    from scriptkit import training_progress
    hooks = training_progress.training_hooks
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training_progress, "training_hooks", lambda *args, **kwargs: (
            hooks(*args, **kwargs) + [signal_during_run(at, signal.SIGTERM)]))
        with pytest.raises(training.TrainingInterrupted) as stopped:
            run_main_seeded(main, flag_values, seed=seed)
    assert stopped.value.code == 128 + signal.SIGTERM
    checkpoint = tf.train.latest_checkpoint(flag_values["output_dir"])
    assert checkpoint
    run_main_seeded(main, flag_values, seed=seed)
    return checkpoint


def shared_flag_errors(data_dir):
    """(flag changes, error pattern) of the checks every fine-tuning script
    (run_classifier, run_ner, run_swag) makes of its shared flags, with
    `data_dir` a folder that does not exist."""
    return [
        (dict(max_seq_length=65), r"Cannot use sequence length 65 .* max_position_embeddings"),
        (dict(init_checkpoint="/models/cased_L-12_H-768_A-12/bert_model.ckpt",
              do_lower_case=True), r"--do_lower_case=True.*cased model"),
        (dict(data_dir=data_dir), r"--data_dir: directory not found"),
        (dict(vocab_file=None), r"Missing required flag\(s\): --vocab_file"),
        (dict(do_train=False, do_eval=False, do_predict=False), r"At least one of"),
    ]


def fine_tuning_flags(**values):
    """The flags the fine-tuning scripts (run_classifier, run_ner, run_swag)
    share, at the tests' values, updated with `values`. Tests give every
    flag a script reads explicitly: a shared flag's default depends on which
    script a process imported first."""
    shared = dict(
        data_dir=None, train_file=None, dev_file=None, test_file=None, vocab_file=None,
        bert_config_file=None, output_dir=None, init_checkpoint=None, do_lower_case=True,
        do_train=False, do_eval=False, do_predict=False, train_batch_size=16,
        eval_batch_size=8, predict_batch_size=8, learning_rate=2e-3, num_train_epochs=8.0,
        max_train_steps=0, warmup_proportion=0.1, save_checkpoints_steps=1000,
        iterations_per_loop=1000,
        use_tpu=False, tpu_name=None, tpu_job_name=None, num_tpu_cores=8, export_dir=None,
        gradient_accumulation_steps=1, recompute_grad=False, use_xla=False, precision="fp32",
        distribution_strategy="none", dynamic_padding=False, length_buckets=None, input_seed=0)
    shared.update(values)
    return shared


def shell_error(main, argv, flag_values, monkeypatch, capsys):
    """Runs a script's main as the shell does (`script_runner.run_script`),
    with sys.argv `argv` followed by `flag_values` as --name=value; expects
    exit status 1, no traceback and no --output_dir written, and returns
    what it printed to standard error."""
    import pytest
    from absl.testing import flagsaver

    from scriptkit import script_runner
    monkeypatch.setattr("sys.argv", argv + ["--%s=%s" % item for item in flag_values.items()])
    with flagsaver.flagsaver():
        with pytest.raises(SystemExit) as e:
            script_runner.run_script(main)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert not os.path.exists(flag_values["output_dir"])
    return err


def assert_input_error(run_main, flag_values, message):
    """run_main(**flag_values) stops with an InputError that matches
    `message`, before it writes anything (no --output_dir)."""
    import pytest

    from scriptkit import errors
    with pytest.raises(errors.InputError, match=message):
        run_main(**flag_values)
    assert not os.path.exists(flag_values["output_dir"])


# The start of the scripts that tests run in a fresh Python, to use a script
# as a library with its flags never parsed.
LIBRARY_PRELUDE = """
import json, sys
sys.path.insert(0, "tests")
import numpy as np
import tensorflow.compat.v1 as tf
from absl import flags
import modeling, tiny, tokenization
from scriptkit import runtime
assert not flags.FLAGS.is_parsed()
"""


def run_library_script(script, *args):
    """Runs the Python program `script` (say, LIBRARY_PRELUDE + a test's
    lines) with `args` in a fresh interpreter from the repository root,
    checks that it succeeded and returns the JSON it printed after "JSON"."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", script] + [str(a) for a in args],
                          capture_output=True, text=True, cwd=root, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("JSON", 1)[1])


# Runs several Python programs at the cost of one TensorFlow import (about
# 10 s each on a busy 2-core machine): after `imports`, each command line
# [program, args...] runs as __main__ in a forked child whose stdout and
# stderr go to a file and whose exit status is the program's (99: an
# uncaught exception). Prints "RESULTS" and JSON [[exit status, output], ...].
_FORK_RUNNER = r"""
import json, os, runpy, sys, tempfile, traceback
%s
results = []
for argv in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as output:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.dup2(output.fileno(), 1)
            os.dup2(output.fileno(), 2)
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            code = 0
            try:
                runpy.run_path(argv[0], run_name="__main__")
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (e.code is not None)
            except BaseException:
                traceback.print_exc()
                code = 99
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        output.seek(0)
        results.append([os.waitstatus_to_exitcode(status),
                        output.read().decode("utf-8", "replace")])
print("RESULTS" + json.dumps(results))
"""


def run_forked(command_lines, cwd, env, imports="import tensorflow", timeout=900):
    """[(exit status, stdout and stderr), ...] of the command lines (each
    [program, args...]) run in `cwd` with `env`, as from the shell but
    sharing one import of TensorFlow (see _FORK_RUNNER)."""
    import subprocess
    import sys
    proc = subprocess.run(
        [sys.executable, "-c", _FORK_RUNNER % imports,
         json.dumps([[str(a) for a in argv] for argv in command_lines])],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0 and "RESULTS" in proc.stdout, proc.stderr[-3000:]
    return [tuple(r) for r in json.loads(proc.stdout.split("RESULTS", 1)[1])]


def read_eval_results(path):
    """An eval_results.txt ("key = value" lines) as a dict of floats."""
    result = {}
    with open(path) as f:
        for line in f:
            key, value = line.strip().split(" = ")
            result[key] = float(value)
    return result


def run_spec(model_fn, make_features, mode, params, train_steps=1, save_to=None):
    """Runs a script's model_fn as the runner would, for the tests that use
    the scripts as libraries: builds the spec for `mode` in a new graph, on
    the tensors `make_features()` builds there, and runs it in a session.

    Returns:
      PREDICT: the predictions, as lists; EVAL: each metric's value; TRAIN:
      {"losses": the loss of each of `train_steps` steps, before its update,
      "step": the global step after them}.

    save_to: a checkpoint path to save the variables to, after the run.
    """
    import tensorflow.compat.v1 as tf

    from scriptkit import runtime
    with tf.Graph().as_default():
        global_step = tf.train.get_or_create_global_step()
        spec = model_fn(make_features(), None, mode, params)
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            if mode == runtime.ModeKeys.PREDICT:
                result = {k: v.tolist() for k, v in sess.run(spec.predictions).items()}
            elif mode == runtime.ModeKeys.EVAL:
                metric_fn, tensors = spec.eval_metrics
                metrics = metric_fn(*tensors)
                sess.run(tf.local_variables_initializer())
                sess.run({k: update for k, (_, update) in metrics.items()})
                result = {k: float(v) for k, v in
                          sess.run({k: value for k, (value, _) in metrics.items()}).items()}
            else:
                losses = [float(sess.run([spec.loss, spec.train_op])[0])
                          for _ in range(train_steps)]
                result = {"losses": losses, "step": int(sess.run(global_step))}
            if save_to:
                tf.train.Saver().save(sess, save_to, write_meta_graph=False)
    return result


def race_to_create(barrier, paths, index, results):
    """A process of the output-lock race (test_nonlocal_paths): for each of
    `paths` in turn, waits at `barrier` until every racing process is there,
    then tries output_lock._create_exclusively(path, b"<index>") and puts
    (round, index, created) on the queue `results`. Imports no TensorFlow, so
    that a spawned process starts in a fraction of a second."""
    from scriptkit import output_lock
    for round_index, path in enumerate(paths):
        barrier.wait(timeout=120)
        created = output_lock._create_exclusively(path, b"%d" % index)
        results.put((round_index, index, created))
