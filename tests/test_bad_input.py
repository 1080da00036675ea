"""The first hour with bad input: each mistake a new user makes (a wrong
config, an output location that cannot be written, a stale or foreign
checkpoint, a file that is not UTF-8, a damaged TFRecord, a missing shard)
ends the run with one clear line naming the flag, the file and, where it
matters, the line or byte offset, before any work is done and without a
half-written output under a final name. The scripts' printing is checked
from the shell: --help exits 0, an error is printed once, and a small run's
log has each message once and none of TensorFlow's start-up noise.

Most checks run the scripts' main in this process (fast); exit status,
printing and logging are checked in subprocesses (marked slow).
"""

import errno
import json
import logging
import os
import random
import re
import resource
import signal
import subprocess
import sys

import pytest
import tensorflow.compat.v1 as tf

from scriptkit import checkpoints
import convert_checkpoint
import create_pretraining_data
from scriptkit import file_io
import modeling
from scriptkit import pretraining_records as records
import run_classifier
import test_convert_checkpoint as convert_tests
import test_create_pretraining_data as cpd_tests
import test_extract_features as extract_tests
import test_run_classifier as classifier_tests
import test_run_ner as ner_tests
import test_run_pretraining as pretraining_tests
import test_run_squad as squad_tests
import test_run_swag as swag_tests
import tiny
from scriptkit.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------
# Helpers.

def _snapshot(directory):
    """Every file and directory under `directory`, with file sizes: compared
    before and after a failed run, it shows that nothing was written."""
    entries = []
    for parent, dirs, files in os.walk(str(directory)):
        for name in dirs:
            entries.append((os.path.join(parent, name), None))
        for name in files:
            path = os.path.join(parent, name)
            entries.append((path, os.path.getsize(path)))
    return sorted(entries)


def _files_under(directory):
    """The files under `directory` (none if it does not exist)."""
    return [os.path.join(parent, name) for parent, _, files in os.walk(str(directory))
            for name in files]


def _save_bert_checkpoint(prefix, config_file, global_step=None):
    """Saves a randomly initialised BertModel of `config_file` at `prefix`
    (with a "checkpoint" state file when `global_step` is given); returns
    the checkpoint's path."""
    with tf.Graph().as_default():
        config = modeling.BertConfig.from_json_file(str(config_file))
        modeling.BertModel(config, is_training=False, input_ids=tf.zeros([1, 4], tf.int32))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            return tf.train.Saver().save(sess, str(prefix), global_step=global_step,
                                         write_meta_graph=False)


class _Logs(logging.Handler):
    """Collects the messages of the "tensorflow" logger while in a with block."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        logging.getLogger("tensorflow").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("tensorflow").removeHandler(self)

    @property
    def text(self):
        return "\n".join(self.messages)


def _one_line(error):
    """The message of an InputError, checked to be a single line."""
    message = str(error.value)
    assert "\n" not in message, message
    return message


@pytest.fixture
def classifier_inputs(tmp_path):
    """A tiny MRPC task and model files for run_classifier.main (a dict of
    flag values)."""
    data_dir = str(tmp_path / "data")
    classifier_tests._write_mrpc_task(data_dir, num_train=8, num_dev=4, num_test=2)
    vocab, config = classifier_tests._model_files(tmp_path)
    return dict(task_name="MRPC", data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
                output_dir=str(tmp_path / "output"), do_train=True, do_eval=True,
                do_predict=True)


@pytest.fixture
def pretraining_inputs(tmp_path):
    """A tiny config and TFRecord file for run_pretraining.main (a dict of
    flag values)."""
    directory = tmp_path / "pretraining"
    directory.mkdir()
    setup = {"config": tiny.write_config(str(directory), pretraining_tests.VOCAB_SIZE),
             "data": pretraining_tests.write_records(str(directory / "data.tfrecord"),
                                                     pretraining_tests.make_instances(3))}
    return pretraining_tests.base_flags(setup, str(tmp_path / "output"), do_train=True)


@pytest.fixture
def extract_model(tmp_path):
    """A tiny checkpoint, vocabulary, config and input text for
    extract_features (the dict that test_extract_features.run_extract takes)."""
    directory = tmp_path / "model"
    directory.mkdir()
    vocab_file = tiny.write_vocab(str(directory), extract_tests.VOCAB)
    config_file = tiny.write_config(str(directory), len(tiny.SPECIAL_TOKENS)
                                    + len(extract_tests.VOCAB))
    checkpoint = _save_bert_checkpoint(directory / "bert_model.ckpt", config_file)
    input_file = directory / "input.txt"
    input_file.write_text("The dog is hairy.\nhello world\n", encoding="utf-8")
    return {"dir": directory, "vocab_file": vocab_file, "bert_config_file": config_file,
            "init_checkpoint": checkpoint, "input_file": str(input_file)}


def _squad_values(tmp_path, **overrides):
    values, _ = squad_tests._main_flags(tmp_path, version_2=False, **overrides)
    return values


# ---------------------------------------------------------------------------
# Row 0: missing flags.

_MODEL_FLAGS = "--vocab_file, --bert_config_file, --output_dir"


@pytest.mark.parametrize("script, args, missing", [
    ("run_classifier", [], "--data_dir, --task_name, " + _MODEL_FLAGS),
    ("run_classifier", ["--task_name=generic", "--do_train", "--do_eval"],
     "--data_dir (or --train_file and --dev_file), " + _MODEL_FLAGS),
    ("run_ner", ["--do_train", "--do_eval", "--do_predict"],
     "--data_dir (or --train_file, --dev_file and --test_file), " + _MODEL_FLAGS),
    ("run_swag", ["--do_train"], "--data_dir (or --train_file), " + _MODEL_FLAGS),
    ("run_squad", ["--do_train", "--do_predict"],
     "--train_file, --predict_file, " + _MODEL_FLAGS),
    ("run_pretraining", ["--do_train"], "--input_file, --bert_config_file, --output_dir"),
])
def test_every_missing_required_flag_is_named_in_one_line(script, args, missing):
    """A training script run without its required flags, its data among
    them, names every one of them in its first error line (as the
    original's required flags did), before any other check."""
    from absl import flags
    from absl.testing import flagsaver
    import importlib
    module = importlib.import_module(script)
    with flagsaver.flagsaver():
        flags.FLAGS.unparse_flags()
        flags.FLAGS([script + ".py"] + args)
        with pytest.raises(InputError) as e:
            module.main([])
    assert _one_line(e) == "Missing required flag(s): " + missing


# ---------------------------------------------------------------------------
# Row 1: bert_config.json.

def test_config_missing_required_keys_are_listed(tmp_path):
    """A config without intermediate_size and hidden_act names the file and
    both keys (BertConfig would fill them in with BERT-Base's values)."""
    config = tiny.tiny_config_dict(30)
    del config["intermediate_size"], config["hidden_act"]
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError) as e:
        checkpoints.load_bert_config(str(path))
    message = _one_line(e)
    assert message.startswith("--bert_config_file %s lacks the key(s) " % path)
    assert "intermediate_size, hidden_act" in message


def test_pretraining_without_init_checkpoint_refuses_incomplete_config(pretraining_inputs,
                                                                       tmp_path):
    """run_pretraining.py without --init_checkpoint stops on a config without
    intermediate_size instead of training a model of BERT-Base's width."""
    config = tiny.tiny_config_dict(pretraining_tests.VOCAB_SIZE)
    del config["intermediate_size"]
    path = tmp_path / "incomplete.json"
    path.write_text(json.dumps(config))
    before = _snapshot(tmp_path)
    with pytest.raises(InputError, match="lacks the key\\(s\\) intermediate_size") as e:
        pretraining_tests.run_main(**dict(pretraining_inputs, bert_config_file=str(path)))
    assert str(path) in _one_line(e)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("key, value, expected", [
    ("hidden_size", "32", '"hidden_size" must be an integer, not the string "32"'),
    ("num_hidden_layers", 2.5, '"num_hidden_layers" must be an integer, not 2.5'),
    ("hidden_act", 1, '"hidden_act" must be a string such as "gelu", not 1'),
    ("hidden_dropout_prob", "0.1", '"hidden_dropout_prob" must be a number, not the string'),
])
def test_config_wrong_type_names_key_and_type(tmp_path, key, value, expected):
    """A value of the wrong JSON type is named with its key and the type
    expected, in one line starting with the flag and file."""
    path = tiny.write_config(str(tmp_path), 30, **{key: value})
    with pytest.raises(InputError) as e:
        checkpoints.load_bert_config(path)
    message = _one_line(e)
    assert message.startswith("--bert_config_file %s: " % path)
    assert expected in message


def test_config_unknown_keys_are_accepted(tmp_path):
    """Keys written by other toolkits (model_type, architectures) do not
    stop a config that has every required key."""
    path = tiny.write_config(str(tmp_path), 30, model_type="bert",
                             architectures=["BertForMaskedLM"])
    config = checkpoints.load_bert_config(path)
    assert (config.vocab_size, config.hidden_size, config.intermediate_size) == (30, 32, 64)


# ---------------------------------------------------------------------------
# Row 2: output locations.

OUTPUT_SCRIPTS = ["run_pretraining", "run_classifier", "run_squad", "extract_features",
                  "convert_checkpoint", "create_pretraining_data"]
# Scripts whose output flag names a file (the others: a directory).
FILE_OUTPUT_SCRIPTS = ("extract_features", "create_pretraining_data")


def _run_with_output(script, tmp_path, output, pretraining_inputs, classifier_inputs,
                     extract_model):
    """Returns (flag, a callable running `script`'s main on good inputs with
    its output flag set to `output`). Inputs are written before it returns."""
    output = str(output)
    if script == "run_pretraining":
        return "output_dir", lambda: pretraining_tests.run_main(
            **dict(pretraining_inputs, output_dir=output))
    if script == "run_classifier":
        return "output_dir", lambda: classifier_tests.run_main(
            **dict(classifier_inputs, output_dir=output))
    if script == "run_squad":
        (tmp_path / "squad_inputs").mkdir()
        values = _squad_values(tmp_path / "squad_inputs", output_dir=output)
        return "output_dir", lambda: squad_tests._run_main(values)
    if script == "extract_features":
        return "output_file", lambda: extract_tests.run_extract(extract_model, output)
    if script == "convert_checkpoint":
        hf_dir = convert_tests.hf_model_dir("pretraining", tmp_path / "hf")
        return "output_dir", lambda: convert_checkpoint.convert(hf_dir, output)
    corpus, vocab, _, _ = cpd_tests.tagged_corpus(str(tmp_path), num_docs=4)
    return "output_file", lambda: cpd_tests.run_ours(input_file=corpus, vocab_file=vocab,
                                                     output_file=output)


@pytest.fixture
def lazy_inputs(request, tmp_path):
    """The fixtures of _run_with_output, made only for the script that
    needs them."""
    def get(script):
        return {name: request.getfixturevalue(name) if needed else None
                for name, needed in (("pretraining_inputs", script == "run_pretraining"),
                                     ("classifier_inputs", script == "run_classifier"),
                                     ("extract_model", script == "extract_features"))}
    return get


@pytest.mark.parametrize("script, other", [
    ("run_squad", "run_classifier.py"), ("run_classifier", "run_squad.py"),
    ("run_classifier", "run_pretraining.py"), ("run_pretraining", "run_ner.py")])
@pytest.mark.parametrize("train", [True, False])
def test_another_scripts_output_dir_is_named(script, other, train, tmp_path, lazy_inputs,
                                             monkeypatch):
    """A run whose --output_dir holds the run record of another script
    stops before any work with one line naming that script, whatever the
    run does (before: run_squad.py on a classifier's folder took its
    settings and complained about --max_query_length)."""
    from scriptkit import run_record
    output = tmp_path / "other_run"
    output.mkdir()
    config = modeling.BertConfig.from_dict(tiny.tiny_config_dict(30))
    run_record.write(str(output), other, "question_answering", config,
                                 {"max_seq_length": 64, "do_lower_case": True})
    if not train:  # The same runs without --do_train (evaluations, predictions).
        seeded, pretrain = tiny.run_main_seeded, pretraining_tests.run_main
        monkeypatch.setattr(tiny, "run_main_seeded", lambda main, values: seeded(
            main, dict(values, do_train=False)))
        monkeypatch.setattr(pretraining_tests, "run_main", lambda **values: pretrain(
            **dict(values, do_train=False, do_eval=True)))
    _, run = _run_with_output(script, tmp_path, output, **lazy_inputs(script))
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run()
    assert _one_line(e) == (
        "--output_dir %s holds a run of %s (%s): give %s.py an --output_dir of its own"
        % (output, other, output / "run_config.json", script))
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("script", OUTPUT_SCRIPTS)
def test_output_location_of_the_wrong_kind(script, tmp_path, lazy_inputs, monkeypatch):
    """An --output_dir that is a file, or an --output_file that is a
    directory, stops the run before any output is made (create_pretraining_data
    before it reads the corpus)."""
    if script in FILE_OUTPUT_SCRIPTS:
        output = tmp_path / "taken_dir"
        output.mkdir()
    else:
        output = tmp_path / "taken_file"
        output.write_text("not a directory\n")
    flag, run = _run_with_output(script, tmp_path, output, **lazy_inputs(script))

    def no_output(*args, **kwargs):
        raise AssertionError("output generated before the output location was checked")
    monkeypatch.setattr(create_pretraining_data, "_run_original_mode", no_output)
    monkeypatch.setattr(create_pretraining_data, "_run_sharded_mode", no_output)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run()
    message = _one_line(e)
    kind = "is a directory" if script in FILE_OUTPUT_SCRIPTS else "is a file, not a directory"
    assert message.startswith("--%s %s %s" % (flag, output, kind)), message
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("script", OUTPUT_SCRIPTS)
def test_output_location_not_writable(script, tmp_path, lazy_inputs, monkeypatch):
    """An output location inside a directory the user may not write to
    stops the run before any work, naming the flag and that directory.
    (os.access is patched: these tests may run as root, who may write
    anywhere.)"""
    locked = tmp_path / "locked"
    locked.mkdir()
    name = "out.tfrecord" if script in FILE_OUTPUT_SCRIPTS else "out"
    output = locked / name
    flag, run = _run_with_output(script, tmp_path, output, **lazy_inputs(script))
    real_access = os.access

    def access(path, mode, **kwargs):
        if os.path.abspath(path) == str(locked) and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)
    monkeypatch.setattr(os, "access", access)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run()
    message = _one_line(e)
    assert message.startswith("--%s %s" % (flag, output)), message
    assert "%s is not writable" % locked in message
    assert _snapshot(tmp_path) == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root may write into a directory without write permission, so "
                           "os.access reports it writable (the patched test above covers it)")
def test_output_dir_in_read_only_directory(tmp_path):
    """A real read-only parent (mode 0o500) is found by check_output_dir."""
    parent = tmp_path / "read_only"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        with pytest.raises(InputError, match="cannot be created: %s is not writable"
                           % re.escape(str(parent))):
            file_io.check_output_dir(str(parent / "out"))
    finally:
        parent.chmod(0o700)


def test_output_write_error_message():
    """A write that failed for lack of room becomes one line naming the file
    and the flag of the location it is in; other errors are left alone."""
    file_io.check_output_dir("/tmp/bad_input_out", "output_dir")
    path = "/tmp/bad_input_out/eval_results.txt"
    message = file_io.output_write_error(
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path))
    assert message.startswith("cannot write %s: No space left on device;" % path)
    assert "--output_dir /tmp/bad_input_out" in message
    # TensorFlow's error for a failed save: the reason is on a later line.
    op_error = tf.errors.OutOfRangeError(
        None, None, "Graph execution error:\n\nDetected at node save/SaveV2\n"
        "%s.tempstate123; File too large\n\t [[{{node save/SaveV2}}]]" % path)
    assert file_io.output_write_error(op_error, path).startswith(
        "cannot write %s: File too large; " % path)
    assert file_io.output_write_error(OSError(errno.ENOENT, "No such file", path)) is None
    assert file_io.output_write_error(tf.errors.NotFoundError(None, None, "gone")) is None
    assert file_io.output_write_error(ValueError("No space left on device")) is None


def test_full_disk_leaves_no_file(tmp_path):
    """A write that fails with ENOSPC half-way through removes the partial
    file: neither the final name nor a temporary file is left."""
    path = str(tmp_path / "predictions.json")
    with pytest.raises(InputError) as e:
        with file_io.atomic_output(path) as writer:
            writer.write("{\"partial\": ")
            writer.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    message = _one_line(e)
    assert message.startswith("cannot write %s: No space left on device" % path)
    assert os.listdir(str(tmp_path)) == []


def _limit_file_size():
    """preexec_fn: files may grow to 16 KiB; a bigger write fails with EFBIG
    (SIGXFSZ, which would kill the process, is ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))


def _script_env():
    """The environment of a script run from the shell: TensorFlow's own log
    level unset (conftest sets one for this process), no bytecode writes."""
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env.pop("BERT_TF_IMPORT_LOG", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_script(args, preexec_fn=None, timeout=300):
    return subprocess.run([sys.executable] + [str(a) for a in args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=_script_env(),
                          preexec_fn=preexec_fn)


def _assert_one_error_line(proc, fragment):
    """Exit status 1 and exactly one output line holding `fragment`, the
    "ERROR: ..." line; returns it."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    lines = [line for line in output.splitlines() if fragment in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR: "), lines[0]
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.slow
def test_file_size_limit_while_converting(tmp_path):
    """convert_checkpoint.py under a 16 KiB file size limit (the checkpoint
    is bigger): one ERROR line naming the file and --output_dir, exit status
    1, and no checkpoint file left in --output_dir."""
    hf_dir = convert_tests.hf_model_dir("pretraining", tmp_path / "hf")
    output_dir = tmp_path / "converted"
    proc = _run_script(["convert_checkpoint.py", "--hf_model_dir=%s" % hf_dir,
                        "--output_dir=%s" % output_dir], preexec_fn=_limit_file_size)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    # (TensorFlow's C++ side also logs the failed save op as a warning.)
    errors = [line for line in output.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, errors
    assert errors[0].startswith("ERROR: cannot write %s" % output_dir), errors[0]
    assert "File too large" in errors[0] and "--output_dir %s" % output_dir in errors[0]
    assert "Traceback" not in output
    assert not output_dir.exists() or os.listdir(str(output_dir)) == []


# ---------------------------------------------------------------------------
# Rows 3 and 4: checkpoints of another model, in --output_dir or as
# --init_checkpoint.

@pytest.fixture
def wider_checkpoint(tmp_path):
    """A checkpoint (model.ckpt-5, with a "checkpoint" state file) of a model
    with hidden_size 48 instead of the tiny configs' 32."""
    directory = tmp_path / "wider"
    directory.mkdir()
    config = tiny.write_config(str(directory), len(classifier_tests.WORDS) + 6,
                               hidden_size=48)
    return _save_bert_checkpoint(directory / "model.ckpt", config, global_step=5)


@pytest.mark.parametrize("script", ["run_classifier", "run_pretraining"])
def test_stale_output_dir_of_another_model(script, tmp_path, wider_checkpoint, request):
    """An --output_dir holding a checkpoint of another shape is reported
    with the variable, both shapes and what to do, before anything is
    written there."""
    output_dir = os.path.dirname(wider_checkpoint)
    if script == "run_classifier":
        inputs = request.getfixturevalue("classifier_inputs")
        run = classifier_tests.run_main
    else:
        inputs = request.getfixturevalue("pretraining_inputs")
        run = pretraining_tests.run_main
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run(**dict(inputs, output_dir=output_dir))
    message = _one_line(e)
    assert message.startswith("--output_dir %s holds a checkpoint of another model "
                              "(model.ckpt-5): " % output_dir), message
    assert re.search(r"bert/embeddings/word_embeddings has shape \[\d+, 48\] there but "
                     r"\[\d+, 32\] in this run's model", message), message
    assert message.endswith("use a new --output_dir, or delete %s to start over" % output_dir)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("script", ["run_classifier", "run_squad"])
def test_init_checkpoint_of_another_shape(script, tmp_path, wider_checkpoint, request):
    """--init_checkpoint of a wider model: one line naming the checkpoint,
    the variable and both shapes, before train.tf_record is written."""
    if script == "run_classifier":
        inputs = request.getfixturevalue("classifier_inputs")

        def run():
            classifier_tests.run_main(**dict(inputs, init_checkpoint=wider_checkpoint))
    else:
        (tmp_path / "squad").mkdir()
        values = _squad_values(tmp_path / "squad", init_checkpoint=wider_checkpoint)

        def run():
            squad_tests._run_main(values)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run()
    message = _one_line(e)
    assert message.startswith("--init_checkpoint %s does not fit --bert_config_file "
                              % wider_checkpoint), message
    assert re.search(r"bert/embeddings/\w+ has shape \[\d+, 48\] in the checkpoint but "
                     r"\[\d+, 32\] by the config", message), message
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("script", ["run_classifier", "run_squad"])
def test_init_checkpoint_directory_without_checkpoint(script, tmp_path, request):
    """--init_checkpoint naming a directory that holds no checkpoint: one
    line, before anything is written."""
    empty = tmp_path / "empty_model_dir"
    empty.mkdir()
    if script == "run_classifier":
        inputs = request.getfixturevalue("classifier_inputs")

        def run():
            classifier_tests.run_main(**dict(inputs, init_checkpoint=str(empty)))
    else:
        (tmp_path / "squad").mkdir()
        values = _squad_values(tmp_path / "squad", init_checkpoint=str(empty))

        def run():
            squad_tests._run_main(values)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run()
    assert _one_line(e).startswith("--init_checkpoint: no checkpoint at %s" % empty)
    assert _snapshot(tmp_path) == before


class _Stop(Exception):
    pass


def test_init_checkpoint_directory_uses_its_latest(classifier_inputs, tmp_path, monkeypatch):
    """A directory of checkpoints without a "checkpoint" state file is
    accepted as --init_checkpoint: the one with the highest step is used,
    and the choice is logged."""
    directory = tmp_path / "fine_tuned"
    directory.mkdir()
    for step in (3, 12):
        latest = _save_bert_checkpoint(directory / "model.ckpt",
                                       classifier_inputs["bert_config_file"], global_step=step)
    os.remove(str(directory / "checkpoint"))
    used = []

    def model_fn_builder(bert_config, num_labels, init_checkpoint, **kwargs):
        used.append(init_checkpoint)
        raise _Stop()
    monkeypatch.setattr(run_classifier, "model_fn_builder", model_fn_builder)
    with _Logs() as logs, pytest.raises(_Stop):
        classifier_tests.run_main(**dict(classifier_inputs, init_checkpoint=str(directory)))
    assert used == [latest] and latest.endswith("model.ckpt-12")
    assert ("--init_checkpoint %s is a directory: using its checkpoint %s"
            % (directory, latest)) in logs.messages


# ---------------------------------------------------------------------------
# Row 5: files that are not UTF-8.

def test_non_utf8_classifier_tsv_mrpc(classifier_inputs):
    """A byte that is not UTF-8 on line 3 of MRPC's train.tsv: the file,
    the line and the byte offset are named, and nothing is written."""
    path = os.path.join(classifier_inputs["data_dir"], "train.tsv")
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines[2] = lines[2].replace(b"\t", b"\t\xe9", 1)
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))
    offset = len(lines[0]) + len(lines[1]) + 2 + lines[2].index(b"\xe9")
    with pytest.raises(InputError) as e:
        classifier_tests.run_main(**classifier_inputs)
    message = _one_line(e)
    assert message.startswith("--data_dir %s, line 3: not valid UTF-8 (byte offset %d of "
                              "the file" % (path, offset)), message
    assert not os.path.exists(classifier_inputs["output_dir"])


def test_non_utf8_classifier_tsv_cola(tmp_path):
    """The same in CoLA's layout (no header), read by its processor."""
    classifier_tests._write_glue(str(tmp_path), "CoLA")
    path = tmp_path / "dev.tsv"
    path.write_bytes(path.read_bytes() + b"clc95\t0\t*\tLatin-1 caf\xe9.\n")
    with pytest.raises(InputError) as e:
        run_classifier.get_processor("CoLA").get_dev_examples(str(tmp_path))
    assert _one_line(e).startswith("--data_dir %s, line 2: not valid UTF-8" % path)


def test_non_utf8_squad_json(tmp_path):
    """A SQuAD training file with a Latin-1 byte on its second line names
    the flag, the file and the line; nothing is written."""
    values = _squad_values(tmp_path)
    with open(values["train_file"], encoding="utf-8") as f:
        text = json.dumps(json.load(f), indent=1)
    data = text.encode("utf-8").replace(b'"data"', b'"d\xe4ta"', 1)
    line = data[:data.index(b"\xe4")].count(b"\n") + 1
    with open(values["train_file"], "wb") as f:
        f.write(data)
    with pytest.raises(InputError) as e:
        squad_tests._run_main(values)
    assert _one_line(e).startswith("--train_file %s, line %d: not valid UTF-8"
                                   % (values["train_file"], line))
    assert line == 2
    # --train_file is read once --output_dir is made: it may exist, empty.
    assert _files_under(values["output_dir"]) == []


def test_non_utf8_hugging_face_vocab(tmp_path):
    """A vocab.txt of a Hugging Face model with a bad byte on line 7:
    convert_checkpoint names the file and the line and writes nothing."""
    hf_dir = convert_tests.hf_model_dir("pretraining", tmp_path / "hf")
    vocab = os.path.join(hf_dir, "vocab.txt")
    with open(vocab, "rb") as f:
        lines = f.read().split(b"\n")
    lines[6] = b"caf\xe9"
    with open(vocab, "wb") as f:
        f.write(b"\n".join(lines))
    with pytest.raises(InputError) as e:
        convert_checkpoint.convert(hf_dir, str(tmp_path / "out"))
    assert _one_line(e).startswith("%s, line 7: not valid UTF-8 (byte offset %d"
                                   % (vocab, sum(len(x) + 1 for x in lines[:6]) + 3))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------
# Row 6: damaged TFRecord input of run_pretraining.

def _record_offsets(path):
    """Byte offsets at which the records of a TFRecord file start."""
    offsets = [0]
    for record in tf.io.tf_record_iterator(path):
        offsets.append(offsets[-1] + 12 + len(record) + 4)
    return offsets


def test_tfrecord_check_counts_an_intact_file(pretraining_inputs):
    """An intact file passes, with its number of records."""
    assert records.check_tfrecord_file("input_file", pretraining_inputs["input_file"]) == 3


@pytest.mark.parametrize("damage", ["truncated", "flipped_byte"])
def test_damaged_tfrecord_stops_before_training(damage, pretraining_inputs, tmp_path):
    """A TFRecord cut off inside its second record, or with a flipped byte
    in the second record's length: one line naming the file, the record and
    its byte offset, before --output_dir is made."""
    path = pretraining_inputs["input_file"]
    offsets = _record_offsets(path)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if damage == "truncated":
        data = data[:offsets[1] + 40]
        expected = "is truncated: record 2 at byte offset %d needs %d bytes but the file " \
                   "ends after 40" % (offsets[1], offsets[2] - offsets[1])
    else:
        data[offsets[1] + 1] ^= 0x01
        expected = "the header of record 2 at byte offset %d fails its checksum" % offsets[1]
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(InputError) as e:
        pretraining_tests.run_main(**pretraining_inputs)
    message = _one_line(e)
    assert message.startswith("--input_file %s " % path)
    assert expected in message
    assert not os.path.exists(pretraining_inputs["output_dir"])


# ---------------------------------------------------------------------------
# Row 7: run_squad.py reads --predict_file before training.

@pytest.mark.parametrize("content, expected", [
    ('{"data": [{"paragraphs": [', "is not a JSON file: Expecting value: line 1 column 27"),
    ('{"version": "1.1"}', "data"),
])
def test_squad_broken_predict_file_stops_before_training(content, expected, tmp_path):
    """--do_train --do_predict with a broken --predict_file: the error comes
    before training, so no checkpoint (nor train.tf_record) is written."""
    values = _squad_values(tmp_path)
    with open(values["predict_file"], "w") as f:
        f.write(content)
    with pytest.raises(InputError) as e:
        squad_tests._run_main(values)
    message = _one_line(e)
    assert "--predict_file" in message and values["predict_file"] in message
    assert expected in message
    assert not os.path.exists(values["output_dir"])


# ---------------------------------------------------------------------------
# Row 8: a vocabulary of another size than the model's.

def test_extract_features_smaller_vocab_warns_and_runs(extract_model, tmp_path):
    """A vocab.txt with fewer tokens than vocab_size (a padded embedding
    table) is logged as a warning, and the features are written."""
    small = tiny.write_vocab(str(tmp_path), extract_tests.VOCAB[:-1], name="small_vocab.txt")
    output = tmp_path / "features.jsonl"
    with _Logs() as logs:
        extract_tests.run_extract(extract_model, output, vocab_file=small, layers="-1")
    size = len(tiny.SPECIAL_TOKENS) + len(extract_tests.VOCAB)
    warnings = [m for m in logs.messages if "fewer than vocab_size" in m]
    assert warnings == ["--vocab_file %s has %d tokens, fewer than vocab_size %d in "
                        "--bert_config_file %s: embedding rows %d..%d are never used. Fine "
                        "for a padded table; otherwise check that the vocabulary belongs to "
                        "this model." % (small, size - 1, size,
                                         extract_model["bert_config_file"], size - 1,
                                         size - 1)]
    with open(str(output)) as f:
        assert len(f.read().splitlines()) == 2


def test_extract_features_larger_vocab_is_an_error(extract_model, tmp_path):
    """A vocab.txt with more tokens than vocab_size does not belong to the
    model: one line naming both files, and no output."""
    large = tiny.write_vocab(str(tmp_path), extract_tests.VOCAB + ["extra1", "extra2"],
                             name="large_vocab.txt")
    output = tmp_path / "features.jsonl"
    with pytest.raises(InputError) as e:
        extract_tests.run_extract(extract_model, output, vocab_file=large)
    size = len(tiny.SPECIAL_TOKENS) + len(extract_tests.VOCAB)
    assert _one_line(e) == (
        "--vocab_file %s has %d tokens but vocab_size in --bert_config_file %s is %d: the "
        "vocabulary does not belong to this model"
        % (large, size + 2, extract_model["bert_config_file"], size))
    assert not output.exists()
    assert not [n for n in os.listdir(str(tmp_path)) if ".tmp" in n]


# ---------------------------------------------------------------------------
# Row 9: a sharded Hugging Face model with a shard missing.

def _sharded_model_without_second_shard(tmp_path):
    """A Hugging Face model directory whose model.safetensors.index.json names
    two shards, of which only the first is there."""
    hf_dir = convert_tests.hf_model_dir("pretraining", tmp_path / "hf")
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    tensors = convert_tests.safetensors_numpy.load_file(os.path.join(hf_dir,
                                                                     "model.safetensors"))
    names = sorted(tensors)
    weight_map = {name: first if i % 2 == 0 else second for i, name in enumerate(names)}
    convert_tests.safetensors_numpy.save_file(
        {n: tensors[n] for n in names if weight_map[n] == first}, os.path.join(hf_dir, first))
    os.remove(os.path.join(hf_dir, "model.safetensors"))
    with open(os.path.join(hf_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return hf_dir, second


def test_convert_missing_shard(tmp_path):
    """The missing shard is named in one line, and nothing is written."""
    hf_dir, missing = _sharded_model_without_second_shard(tmp_path)
    with pytest.raises(InputError) as e:
        convert_checkpoint.convert(hf_dir, str(tmp_path / "out"))
    assert _one_line(e) == (
        "--hf_model_dir %s: %s names 1 shard(s) that are not there: %s; download the "
        "missing file(s) into the directory"
        % (hf_dir, "model.safetensors.index.json", missing))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------
# Row 10: --help and error printing, from the shell.

SCRIPTS = ["run_pretraining.py", "run_classifier.py", "run_squad.py", "extract_features.py",
           "create_pretraining_data.py", "convert_checkpoint.py", "run_ner.py", "run_swag.py",
           "predict.py"]

def _run_scripts(command_lines):
    """[(exit status, stdout and stderr), ...] of the command lines (each
    [script, args...]), run as from the shell (see `tiny.run_forked`)."""
    return tiny.run_forked(command_lines, ROOT, _script_env(), timeout=300,
                           imports="from scriptkit import quiet_tf; import tensorflow")


# Flags each script's --help must list: its own and the shared ones it uses.
_FINE_TUNING_HELP = ("data_dir", "train_file", "dev_file", "test_file", "export_dir",
                     "bert_config_file", "vocab_file", "init_checkpoint", "do_lower_case",
                     "max_seq_length", "train_batch_size", "learning_rate", "use_tpu",
                     "tpu_job_name", "gradient_accumulation_steps", "precision", "fused_ops",
                     "optimizer", "poly_power", "start_warmup_step", "log_every_seconds")
_HELP_FLAGS = {
    "run_pretraining.py": ("input_file", "output_dir", "num_train_steps", "fused_ops",
                           "max_predictions_per_seq", "optimizer", "poly_power",
                           "start_warmup_step", "eval_file", "samples_between_eval",
                           "samples_start_eval", "stop_threshold", "input_seed",
                           "log_every_seconds"),
    "run_classifier.py": _FINE_TUNING_HELP + ("task_name", "labels", "text_column"),
    "run_squad.py": ("train_file", "predict_file", "doc_stride", "output_dir", "fused_ops",
                     "version_2_with_negative", "optimizer", "log_every_seconds"),
    "extract_features.py": ("input_file", "output_file", "layers", "fused_ops", "precision"),
    "create_pretraining_data.py": ("input_file", "output_file", "vocab_file", "dupe_factor",
                                   "log_every_seconds"),
    "convert_checkpoint.py": ("hf_model_dir", "output_dir", "log_every_seconds"),
    "run_ner.py": _FINE_TUNING_HELP + ("predict_text_file", "tag_scheme", "labels",
                                       "doc_stride", "document_context",
                                       "sentences_per_document"),
    "run_swag.py": _FINE_TUNING_HELP + ("input_format",),
    "predict.py": ("model_dir", "input_file", "output_file", "input_format", "batch_size",
                   "skip_malformed_rows", "port", "model_name", "log_every_seconds",
                   "max_request_bytes", "max_instances", "max_text_chars",
                   "max_requests_in_flight", "max_connections", "max_buffered_bytes",
                   "client_timeout_seconds"),
}


@pytest.mark.slow
def test_help_lists_every_flag_and_exits_zero():
    """`<script> --help` lists the script's flags, the shared ones included,
    and exits with status 0 (absl's own status for --help is 1); --helpfull
    leaves out absl's test flags."""
    results = _run_scripts([[script, "--help"] for script in SCRIPTS]
                           + [["run_classifier.py", "--helpfull"]])
    for script, (status, output) in zip(SCRIPTS, results):
        assert status == 0, (script, output[-2000:])
        assert "Traceback" not in output, (script, output[-2000:])
        for name in _HELP_FLAGS[script]:
            assert re.search(r"--(\[no\])?%s:" % name, output), (script, name)
    # --helpfull lists every module's flags, but not absl's test flags.
    status, output = results[-1]
    assert status == 0 and "--task_name:" in output and "--fused_ops:" in output, output[-2000:]
    assert "test_random_seed" not in output and "test_tmpdir" not in output


@pytest.mark.slow
def test_error_is_printed_once(classifier_inputs, tmp_path):
    """A bad input from the shell gives exit status 1 and its message in
    exactly one line of stdout and stderr together, the "ERROR: " line:
    no "ERROR:tensorflow:" copy and no absl "E1201 ..." copy. run_pretraining.py
    without flags names all its missing required flags."""
    hf_dir, missing = _sharded_model_without_second_shard(tmp_path)
    config = tiny.tiny_config_dict(len(classifier_tests.WORDS) + 6)
    del config["intermediate_size"]
    bad_config = tmp_path / "bad_config.json"
    bad_config.write_text(json.dumps(config))
    classifier_args = ["--%s=%s" % (k, v) for k, v in classifier_inputs.items()
                       if k != "bert_config_file"] + ["--bert_config_file=%s" % bad_config]
    cases = [
        ("lacks the key(s) intermediate_size", ["run_classifier.py"] + classifier_args),
        ("names 1 shard(s) that are not there: %s" % missing,
         ["convert_checkpoint.py", "--hf_model_dir=%s" % hf_dir,
          "--output_dir=%s" % (tmp_path / "converted")]),
        ("Missing required flag(s): --input_file, --bert_config_file, --output_dir",
         ["run_pretraining.py"]),
        ("Missing required flag(s): --model_dir", ["predict.py"]),
    ]
    results = _run_scripts([args for _, args in cases])
    for (fragment, args), (status, output) in zip(cases, results):
        _assert_one_error_line(subprocess.CompletedProcess(args, status, output, ""),
                               fragment)
    assert not os.path.exists(classifier_inputs["output_dir"])
    assert not (tmp_path / "converted").exists()


# ---------------------------------------------------------------------------
# Row 11: the log of a small run.

_ABSL_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]+\] (.*)$")
_TF_PREFIXED = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):tensorflow:")
_STARTUP_NOISE = ("Unable to register cuDNN", "Unable to register cuFFT",
                  "Unable to register cuBLAS", "Could not find TensorRT",
                  "failed call to cuInit")


def _check_log(output):
    """No message printed both in absl's form and in Python logging's
    "INFO:tensorflow:..." form, no absl message twice in a row, and none of
    TensorFlow's start-up noise (this machine has no GPU)."""
    lines = output.splitlines()
    absl_messages = [m.group(1) for m in map(_ABSL_LINE.match, lines) if m]
    assert len(absl_messages) > 10  # the log is there
    tf_messages = [_TF_PREFIXED.sub("", line) for line in lines if _TF_PREFIXED.match(line)]
    assert set(tf_messages) & set(absl_messages) == set()
    # (TensorFlow's own form is left only for the few lines of its import.)
    assert len(tf_messages) <= 1, tf_messages
    assert [a for a, b in zip(absl_messages, absl_messages[1:]) if a == b] == []
    assert [line for line in lines if any(n in line for n in _STARTUP_NOISE)] == []
    return lines


@pytest.mark.slow
@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia"),
                    reason="checks the logs of a machine without a GPU")
def test_small_classifier_run_logs(classifier_inputs):
    """A tiny fine-tuning, then a prediction from its output directory:
    each log message once, no start-up noise, the prediction names the
    checkpoint it restores, and the prediction run prints under 60 lines
    (TensorFlow's deprecation warnings, 3 lines each, are off)."""
    common = ["--%s=%s" % (k, classifier_inputs[k])
              for k in ("task_name", "data_dir", "vocab_file", "bert_config_file",
                        "output_dir")] + ["--max_seq_length=24", "--predict_batch_size=8"]
    train = _run_script(["run_classifier.py", "--do_train", "--train_batch_size=4",
                         "--num_train_epochs=1"] + common)
    assert train.returncode == 0, train.stderr[-3000:]
    train_lines = _check_log(train.stdout + train.stderr)
    # The last line of training says what its number is, in either runner.
    last_loss = [line for line in train_lines if "loss was" in line]
    assert len(last_loss) == 1 and re.search(
        r"Training done: the last batch's loss was \d+\.\d+", last_loss[0]), last_loss
    assert not [line for line in train_lines if "Loss for final step" in line]
    output_dir = classifier_inputs["output_dir"]
    checkpoint = tf.train.latest_checkpoint(output_dir)
    assert checkpoint.endswith("model.ckpt-2")  # 8 examples / 4

    predict = _run_script(["run_classifier.py", "--do_predict"] + common)
    assert predict.returncode == 0, predict.stderr[-3000:]
    lines = _check_log(predict.stdout + predict.stderr)
    restored = [line for line in lines if "Predicting with the weights of" in line]
    assert len(restored) == 1 and restored[0].endswith(
        "Predicting with the weights of %s" % checkpoint), restored
    messages = [m.group(1) for m in map(_ABSL_LINE.match, lines) if m]
    assert len(messages) == len(set(messages)), [m for m in messages
                                                 if messages.count(m) > 1]
    assert len(lines) < 60, "\n".join(lines)
    assert os.path.exists(os.path.join(output_dir, "test_results.tsv"))


# ---------------------------------------------------------------------------
# The same checks in run_ner.py and run_swag.py.

def _task_inputs(script, tmp_path):
    """(flag values for a small good run, run_main) of run_ner or run_swag."""
    data_dir = tmp_path / "data"
    if script == "run_ner":
        rng = random.Random(3)
        for name, n in (("train.txt", 4), ("valid.txt", 2), ("test.txt", 2)):
            ner_tests._write_conll(data_dir / name, rng, n)
        vocab, config = ner_tests._model_files(tmp_path)
        run = ner_tests.run_main
    else:
        swag_tests._write_task(str(data_dir), num_train=4, num_dev=2, num_test=2)
        vocab, config = swag_tests._model_files(tmp_path)
        run = swag_tests.run_main
    return dict(data_dir=str(data_dir), vocab_file=vocab, bert_config_file=config,
                output_dir=str(tmp_path / "output"), do_train=True, do_eval=True,
                do_predict=True), run


@pytest.mark.parametrize("script", ["run_ner", "run_swag"])
def test_ner_and_swag_check_output_dir_and_checkpoints(script, tmp_path):
    """run_ner and run_swag stop before any work, in one line, on an
    --output_dir that is a file, an --init_checkpoint of a wider model, and an
    --output_dir holding a checkpoint of that wider model."""
    inputs, run = _task_inputs(script, tmp_path)
    taken = tmp_path / "taken_file"
    taken.write_text("not a directory\n")
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run(**dict(inputs, output_dir=str(taken)))
    assert _one_line(e).startswith("--output_dir %s is a file, not a directory" % taken)
    assert _snapshot(tmp_path) == before

    wider_dir = tmp_path / "wider"
    wider_dir.mkdir()
    with open(inputs["bert_config_file"]) as f:
        config = json.load(f)
    vocab_size, width = config["vocab_size"], config["hidden_size"]
    wider = _save_bert_checkpoint(
        wider_dir / "model.ckpt",
        tiny.write_config(str(wider_dir), vocab_size, hidden_size=width + 16), global_step=5)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as e:
        run(**dict(inputs, init_checkpoint=wider))
    message = _one_line(e)
    assert message.startswith("--init_checkpoint %s does not fit --bert_config_file" % wider)
    assert "has shape [%d, %d] in the checkpoint but [%d, %d]" % (
        vocab_size, width + 16, vocab_size, width) in message, message
    with pytest.raises(InputError) as e:
        run(**dict(inputs, output_dir=str(wider_dir)))
    assert _one_line(e).startswith("--output_dir %s holds a checkpoint of another model "
                                   "(model.ckpt-5)" % wider_dir)
    assert _snapshot(tmp_path) == before


def test_casing_that_contradicts_the_vocabulary_is_named(tmp_path, caplog):
    """--do_lower_case=False on an uncased vocabulary (every capitalised
    word would become [UNK]), or True on a cased one, gets one warning line
    naming the flag; a matching casing, or a vocabulary too small to tell,
    none."""
    words = ["word%d" % i for i in range(120)]
    uncased = tiny.write_vocab(str(tmp_path), words, name="uncased.txt")
    cased = tiny.write_vocab(str(tmp_path), words + ["Word%d" % i for i in range(60)],
                             name="cased.txt")
    small = tiny.write_vocab(str(tmp_path), ["a", "b"], name="small.txt")

    def warnings(vocab, do_lower_case):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tensorflow"):
            checkpoints.load_tokenizer(vocab, do_lower_case)
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    assert warnings(uncased, False) == [
        "--do_lower_case=False, but --vocab_file %s is uncased (no token has a capital "
        "letter): every word with one becomes [UNK]; pass --do_lower_case=True" % uncased]
    assert warnings(cased, True) == [
        "--do_lower_case=True, but --vocab_file %s is cased: the text loses its capitals, "
        "which the model was trained with; pass --do_lower_case=False" % cased]
    assert warnings(uncased, True) == warnings(cased, False) == []
    assert warnings(small, False) == warnings(small, True) == []
