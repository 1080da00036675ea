"""serving.py: the text signatures' packing against the scripts' own, and
exported SavedModels that take text, checked against --do_predict of the
same checkpoint and loaded where nothing of this repository is importable."""

import itertools
import json
import logging
import os
import random
import shutil
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import logging as absl_logging
from tensorflow.python.framework import ops as tf_ops

from scriptkit import ner_tags
from scriptkit import exported_model
from scriptkit import input_packing
import modeling
from scriptkit import rest_api
import run_classifier
import run_ner
import run_swag
from scriptkit import saved_model_writer
import serving_exports
from scriptkit import serving
import test_run_classifier
import test_run_ner
import test_run_swag
import tiny
import tokenization


def _ragged(rows):
    return tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1) if any(rows) else \
        tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), [0] * len(rows))


def test_pair_lengths_are_those_of_truncate_seq_pair():
    cases = list(itertools.product(range(9), range(9), range(7)))
    len_a, len_b, max_tokens = zip(*cases)
    for limit in sorted(set(max_tokens)):
        rows = [(a, b) for a, b, m in cases if m == limit]
        got_a, got_b = serving.pair_lengths(tf.constant([a for a, _ in rows]),
                                            tf.constant([b for _, b in rows]), limit)
        for (a, b), cut_a, cut_b in zip(rows, got_a.numpy(), got_b.numpy()):
            tokens_a, tokens_b = list(range(a)), list(range(b))
            input_packing.truncate_seq_pair(tokens_a, tokens_b, limit)
            assert (cut_a, cut_b) == (len(tokens_a), len(tokens_b)), (a, b, limit)


class _Ids:
    """The stand-in tokenizer `pack_sequence_pair` needs: tokens are ids."""

    @staticmethod
    def convert_tokens_to_ids(tokens):
        return [{"[CLS]": 2, "[SEP]": 3}.get(t, t) for t in tokens]


def test_pack_lays_out_as_pack_sequence_pair_and_pads_to_the_longest():
    rng = random.Random(0)
    max_seq_length = 9
    rows_a = [[rng.randint(10, 99) for _ in range(rng.randint(0, 12))] for _ in range(40)]
    rows_b = [[rng.randint(10, 99) for _ in range(rng.randint(0, 12))] for _ in range(40)]
    rows_b[:5] = [[]] * 5  # An empty second text packs as a single text.
    for with_b in (True, False):
        features = serving.pack(_ragged(rows_a), _ragged(rows_b) if with_b else None,
                                max_seq_length, 2, 3)
        features = {name: t.numpy() for name, t in features.items()}
        expected = [input_packing.pack_sequence_pair(list(a), list(b) if with_b else None,
                                                     max_seq_length, _Ids)[1:]
                    for a, b in zip(rows_a, rows_b)]
        longest = max(sum(mask) for _, mask, _ in expected)
        assert features["input_ids"].shape == (40, longest)
        for name, column in zip(serving.FEATURE_NAMES, range(3)):
            np.testing.assert_array_equal(
                features[name], [row[column][:longest] for row in expected], name)


# ---------------------------------------------------------------------------
# Exports of the three scripts, against their --do_predict on the same
# checkpoint: a tiny model with random task heads (large initial weights, so
# that every token moves the outputs) and texts that test the tokenizer.

WORDS = ["the", "film", "is", "good", "cafe", "creme", "ab", "##ab", "中", "文", "istanbul",
         "σας", "strasse", "straße", "jack", "##son", "went", "to", "kingston", "!", ".",
         "where", "what", "how", "it", "ends", "well", "badly"]

# (text_a, text_b): accents, CJK, zero-width and format characters, an
# ideographic space, a 150-character word (75 pieces: cut to fit), a
# 202-character one ([UNK]), an empty first or second text, a long pair.
PAIRS = [("The film is good.", "Café Crème!"),
         ("中文 film", ""),
         ("go\u200bod\u00adfilm", "the\u3000film"),
         ("ab" * 75, "film"),
         ("ab" * 101 + " good", "ΣΑΣ film"),
         ("", "good"),
         ("İstanbul STRASSE straße", "Jackson went to Kingston!"),
         ("the film " * 20, "good " * 20)]

MAX_SEQ_LENGTH = 24


def _random_checkpoint(path, config_file, build):
    """A checkpoint of `build(config)`'s variables and a global step, at
    their initial values."""
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        build(modeling.BertConfig.from_json_file(config_file))
        tf.train.get_or_create_global_step()
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            return tf.train.Saver().save(session, path)


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    return write_model_files(tmp_path_factory.mktemp("serving"))


def write_model_files(tmp):
    """The vocabulary, config and a checkpoint per script's task head, in
    the folder `tmp` (a pathlib.Path)."""
    vocab = tiny.write_vocab(str(tmp), WORDS)
    config = tiny.write_config(str(tmp), vocab_size=len(WORDS) + 5, initializer_range=0.3)

    def ids(*shape):  # input_ids, input_mask, segment_ids
        return [tf.zeros(shape, tf.int32)] * 3

    return dict(vocab=vocab, config=config, classifier=_random_checkpoint(
        str(tmp / "classifier.ckpt"), config, lambda c: run_classifier.create_model(
            c, False, *ids(1, 8), tf.zeros([1], tf.int32), 2, False)),
        ner=_random_checkpoint(str(tmp / "ner.ckpt"), config, lambda c: run_ner.create_model(
            c, False, *ids(1, 8), 5, False)),
        swag=_random_checkpoint(str(tmp / "swag.ckpt"), config, lambda c: run_swag.create_model(
            c, False, *ids(1, 4, 8), tf.zeros([1], tf.int32), False)))


def _export_dir(export_base):
    (name,) = os.listdir(export_base)
    return os.path.join(export_base, name)


def _run_signature(export_dir, signature_name, inputs, fetch_features=False):
    """Runs a signature of a SavedModel in a TF1 session (as TF Serving
    does) on `inputs` (name -> array); with `fetch_features`, also returns
    the id features the text produced (the serving_ids inputs)."""
    with tf.Graph().as_default(), tf.Session() as session:
        meta = tf.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta.signature_def[signature_name]
        assert set(signature.inputs) == set(inputs)
        fetches = {name: info.name for name, info in signature.outputs.items()}
        if fetch_features:
            fetches.update({"feature/" + name: serving.TEXT_FEATURE_PREFIX + name + ":0"
                            for name in serving.FEATURE_NAMES})
        return session.run(fetches, {signature.inputs[name].name: value
                                     for name, value in inputs.items()})


def _assert_features(outputs, expected):
    """The text signature's features are `expected` (features with
    input_ids etc.), cut to the batch's longest input."""
    longest = max(sum(f.input_mask) for f in expected)
    for name in serving.FEATURE_NAMES:
        np.testing.assert_array_equal(outputs["feature/" + name],
                                      [getattr(f, name)[:longest] for f in expected], name)


@pytest.mark.slow
def test_classifier_text_signature_equals_do_predict(model_files, tmp_path):
    vocab, config, checkpoint = (model_files[k] for k in ("vocab", "config", "classifier"))
    data_dir = tmp_path / "mrpc"
    data_dir.mkdir()
    with open(data_dir / "test.tsv", "w", encoding="utf-8") as f:
        f.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i, (a, b) in enumerate(PAIRS):
            f.write("%d\t%d\t%d\t%s\t%s\n" % (i, i, i, a, b))
    output_dir, export_base = str(tmp_path / "output"), str(tmp_path / "export")
    tiny.run_main_seeded(run_classifier.main, test_run_classifier._flag_values(
        task_name="MRPC", data_dir=str(data_dir), vocab_file=vocab, bert_config_file=config,
        output_dir=output_dir, init_checkpoint=checkpoint, do_predict=True,
        max_seq_length=MAX_SEQ_LENGTH, export_dir=export_base, explain_steps=32))
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        predicted = np.array([[float(x) for x in line.split("\t")] for line in f])
    export_dir = _export_dir(export_base)
    outputs = _run_signature(export_dir, serving.TEXT_SIGNATURE,
                             {"text_a": [a for a, _ in PAIRS], "text_b": [b for _, b in PAIRS]},
                             fetch_features=True)
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    _assert_features(outputs, [run_classifier.convert_single_example(
        i, run_classifier.InputExample("t", a, b, "0"), ["0", "1"], MAX_SEQ_LENGTH, tokenizer)
        for i, (a, b) in enumerate(PAIRS)])
    np.testing.assert_allclose(outputs["probabilities"], predicted, atol=1e-4)
    # The outputs move with the text (a model that ignored it would pass).
    assert np.ptp(predicted[:, 0]) > 0.01
    np.testing.assert_array_equal(outputs["label_ids"], np.argmax(predicted, axis=1))
    assert [x.decode() for x in outputs["labels"]] == [str(i) for i in
                                                       np.argmax(predicted, axis=1)]
    # The id signature takes the features as before, padded to any length.
    tokenizer_config = json.loads((tmp_path / "export").joinpath(
        os.path.basename(export_dir), "assets", serving.CONFIG_ASSET).read_text())
    # MRPC's columns, as the GLUE header names them (predict.py reads such files).
    # The explain signature's points, and its label input that a request may leave out.
    assert tokenizer_config == {"do_lower_case": True, "max_seq_length": MAX_SEQ_LENGTH,
                                "input_fields": {"text_a": "#1 String", "text_b": "#2 String"},
                                "explain_steps": 32, "optional_inputs": ["label"]}
    padded = {name: outputs["feature/" + name] for name in serving.FEATURE_NAMES}
    padded = {name: np.pad(value, [(0, 0), (0, 5)]) for name, value in padded.items()}
    np.testing.assert_allclose(
        _run_signature(export_dir, serving.IDS_SIGNATURE, padded)["probabilities"], predicted,
        atol=1e-4)


NER_LINES = ["Jackson went to Kingston!",
             "The film is good. " * 6,          # More pieces than one window holds.
             "中文 film go\u200bod, Café",
             "İstanbul ΣΑΣ straße",
             "ab" * 101 + " good ab" + "ab" * 74]


@pytest.mark.slow
def test_ner_text_signature_equals_do_predict(model_files, tmp_path):
    vocab, config, checkpoint = (model_files[k] for k in ("vocab", "config", "ner"))
    text_file = tmp_path / "text.txt"
    text_file.write_text("\n".join(NER_LINES) + "\n", encoding="utf-8")
    output_dir, export_base = str(tmp_path / "output"), str(tmp_path / "export")
    tiny.run_main_seeded(run_ner.main, test_run_ner._flag_values(
        vocab_file=vocab, bert_config_file=config, output_dir=output_dir,
        init_checkpoint=checkpoint, do_predict=True, predict_text_file=str(text_file),
        labels="PER,LOC", max_seq_length=16, doc_stride=4, export_dir=export_base))
    predicted, _ = test_run_ner._read_columns(os.path.join(output_dir, "text_predictions.txt"))
    outputs = _run_signature(_export_dir(export_base), serving.TEXT_SIGNATURE,
                             {"text": NER_LINES + ["", " \u200b "]})
    assert list(outputs["num_words"]) == [len(s) for s in predicted] + [0, 0]
    # The outputs move with the text (a model that ignored it would pass).
    assert np.ptp(outputs["probabilities"][:len(predicted), 0, 0]) > 0.01
    for i, sentence in enumerate(predicted):
        n = len(sentence)
        assert [w.decode() for w in outputs["words"][i, :n]] == [w for w, _ in sentence]
        assert [t.decode() for t in outputs["tags"][i, :n]] == [t for _, t in sentence]
        assert set(outputs["tags"][i, n:]) <= {b""}
        # Each word's span in the text holds it (less characters cleaning
        # deletes, such as U+200B).
        for word, start, end in zip(outputs["words"][i, :n], outputs["start_offsets"][i, :n],
                                    outputs["end_offsets"][i, :n]):
            assert NER_LINES[i][start:end].replace("\u200b", "") == word.decode()
        np.testing.assert_allclose(outputs["probabilities"][i, :n].sum(axis=-1), 1.0,
                                   atol=1e-5)
    # Windows: the long line's words come from several windows, each word
    # from the window where the script took it.
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    words = [w for w, _ in predicted[1]]
    windows = run_ner.convert_document(words, None, run_ner.WordPieceCache(tokenizer), 16, 4,
                                       is_training=False)
    assert len(windows) > 3
    served = _run_signature(_export_dir(export_base), serving.IDS_SIGNATURE, {
        name: np.array([getattr(w, name) for w in windows]) for name in serving.FEATURE_NAMES})
    expected = run_ner.word_predictions(windows, served["probabilities"], len(words))
    np.testing.assert_allclose(outputs["probabilities"][1, :len(words)], expected, atol=1e-4)


SWAG_ROWS = [("The film is good", "It ends", ["well.", "badly!", "", "中文 film"]),
             ("Café crème", "", ["go\u200bod", "ab" * 75, "the film", "ΣΑΣ"]),
             ("", "What", ["is it?", "how", "İstanbul", "straße " * 15])]


@pytest.mark.slow
def test_swag_text_signature_equals_do_predict(model_files, tmp_path):
    vocab, config, checkpoint = (model_files[k] for k in ("vocab", "config", "swag"))
    test_file = test_run_swag._write_csv(
        tmp_path / "test.csv", [test_run_swag._swag_row(i, context, start, endings)
                                for i, (context, start, endings) in enumerate(SWAG_ROWS)],
        header=test_run_swag.HEADER[:-1])
    output_dir, export_base = str(tmp_path / "output"), str(tmp_path / "export")
    tiny.run_main_seeded(run_swag.main, test_run_swag._flag_values(
        vocab_file=vocab, bert_config_file=config, output_dir=output_dir,
        init_checkpoint=checkpoint, do_predict=True, test_file=test_file,
        max_seq_length=MAX_SEQ_LENGTH, export_dir=export_base))
    _, rows = test_run_swag._read_test_results(output_dir)
    predicted = np.array([[float(x) for x in row[2:]] for row in rows])
    outputs = _run_signature(_export_dir(export_base), serving.TEXT_SIGNATURE, {
        "context": [c for c, _, _ in SWAG_ROWS], "question": [q for _, q, _ in SWAG_ROWS],
        "endings": [e for _, _, e in SWAG_ROWS]}, fetch_features=True)
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    examples = run_swag.read_swag_csv(test_file)
    features = [run_swag.convert_example(e, MAX_SEQ_LENGTH, tokenizer) for e in examples]
    longest = max(sum(mask) for f in features for mask in f.input_mask)
    for name in serving.FEATURE_NAMES:
        np.testing.assert_array_equal(
            outputs["feature/" + name],
            [[choice[:longest] for choice in getattr(f, name)] for f in features], name)
    np.testing.assert_allclose(outputs["probabilities"], predicted, atol=1e-4)
    assert np.ptp(predicted) > 0.01
    np.testing.assert_array_equal(outputs["label_ids"], [int(row[1]) for row in rows])


def test_export_changes_no_op_a_session_ran_and_writes_a_fingerprint(tmp_path, monkeypatch):
    """saved_model_writer.write_saved_model (under serving.export) builds everything
    before its session runs the graph: TensorFlow warns of an op changed
    after a session ran it ("... will trigger an error in the future"), as
    the tables' initialiser was when the main op was built after the
    restore. It writes fingerprint.pb, without which each load logs
    "Fingerprint not found". A vocabulary table and one variable stand for
    a model."""
    vocab = tiny.write_vocab(str(tmp_path), ["good", "film"])
    with tf.Graph().as_default(), tf.Session() as session:
        tf.get_variable("w", [2], initializer=tf.ones_initializer())
        tf.train.get_or_create_global_step()
        session.run(tf.global_variables_initializer())
        checkpoint = tf.train.Saver().save(session, str(tmp_path / "model.ckpt"))

    def build_signatures():
        table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            vocab, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
            tf.lookup.TextFileIndex.LINE_NUMBER), -1)
        text = tf.placeholder(tf.string, [None], name="text")
        ids = table.lookup(text)
        weight = tf.gather(tf.get_variable("w", [2]), tf.clip_by_value(ids, 0, 1))
        return {"serving_default": tf.saved_model.predict_signature_def(
            {"text": text}, {"ids": ids, "weight": weight})}

    changed_after_a_run = []
    ran = set()  # The ops in the graph when a session ran it.
    set_attr, run = tf_ops.Operation._set_attr, tf.Session.run

    def spy_set_attr(op, name, value):
        if op.name in ran:
            changed_after_a_run.append((op.name, name))
        return set_attr(op, name, value)

    def spy_run(session, *args, **kwargs):
        ran.update(op.name for op in session.graph.get_operations())
        return run(session, *args, **kwargs)

    monkeypatch.setattr(tf_ops.Operation, "_set_attr", spy_set_attr)
    monkeypatch.setattr(tf.Session, "run", spy_run)
    path = saved_model_writer.write_saved_model(build_signatures, checkpoint,
                                                str(tmp_path / "export"))
    monkeypatch.undo()
    assert ran and changed_after_a_run == []
    assert os.path.getsize(os.path.join(path, "fingerprint.pb")) > 0
    messages = []

    class Collector(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    collector = Collector(logging.INFO)
    logger = logging.getLogger("absl")  # TensorFlow's loader logs through absl.
    verbosity = absl_logging.get_verbosity()
    logger.addHandler(collector)
    absl_logging.set_verbosity(absl_logging.INFO)
    try:
        loaded = tf.saved_model.load_v2(path)
        assert not [m for m in messages if "ingerprint" in m], messages
        # (Without the file, the message is there: the collector hears it.)
        os.remove(os.path.join(path, "fingerprint.pb"))
        tf.saved_model.load_v2(path)
        assert "Fingerprint not found. Saved model loading will continue." in messages
    finally:
        absl_logging.set_verbosity(verbosity)
        logger.removeHandler(collector)
    outputs = loaded.signatures["serving_default"](text=tf.constant(["film", "bad"]))
    assert outputs["ids"].numpy().tolist() == [6, -1]


# Loads each export and calls its text signature, in a Python that has
# TensorFlow and TensorFlow Text but nothing of this repository; prints JSON.
_LOADER = r"""
import json, sys
try:
    from scriptkit import serving  # noqa: F401
    sys.exit("this repository is importable")
except ImportError:
    pass
import tensorflow as tf
import tensorflow_text  # noqa: F401
results = {}
for name, (path, inputs) in json.loads(sys.argv[1]).items():
    signature = tf.saved_model.load(path).signatures["serving_default"]
    outputs = signature(**{key: tf.constant(value) for key, value in inputs.items()})
    results[name] = {key: value.numpy().tolist() for key, value in outputs.items()}
print("RESULTS" + json.dumps(results, default=bytes.decode))
"""


@pytest.mark.slow
def test_exports_load_without_this_repository(model_files, tmp_path):
    """Exported, then moved (their vocabulary deleted), the three exports
    load with `python -I` from another folder and a bare environment, and
    answer as in this process."""
    vocab = str(tmp_path / "vocab.txt")
    shutil.copy(model_files["vocab"], vocab)
    labels_path = str(tmp_path / run_ner.LABELS_FILE)
    run_ner.write_labels(labels_path, "iob2", ["PER", "LOC"])
    config = modeling.BertConfig.from_json_file(model_files["config"])
    exports = {
        "classifier": (run_classifier.export_model(
            serving.ExportSource(config, model_files["classifier"], str(tmp_path / "classifier"),
                                 vocab, True, max_seq_length=MAX_SEQ_LENGTH),
            run_classifier.MrpcProcessor(), ["0", "1"]),
            {"text_a": [a for a, _ in PAIRS], "text_b": [b for _, b in PAIRS]}),
        "ner": (run_ner.export_model(
            serving.ExportSource(config, model_files["ner"], str(tmp_path / "ner"), vocab,
                                 True, max_seq_length=16),
            ner_tags.label_list_for(["PER", "LOC"], "iob2"), "iob2", labels_path,
            doc_stride=4), {"text": NER_LINES}),
        "swag": (run_swag.export_model(serving.ExportSource(
            config, model_files["swag"], str(tmp_path / "swag"), vocab, True,
            max_seq_length=MAX_SEQ_LENGTH)),
            {"context": [c for c, _, _ in SWAG_ROWS], "question": [q for _, q, _ in SWAG_ROWS],
             "endings": [e for _, _, e in SWAG_ROWS]})}
    os.remove(vocab)
    elsewhere = tmp_path / "elsewhere"
    moved = {}
    for name, (path, inputs) in exports.items():
        moved[name] = (shutil.move(path, str(elsewhere / name)), inputs)
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    proc = subprocess.run([sys.executable, "-I", "-c", _LOADER, json.dumps(moved)],
                          cwd=str(workdir), capture_output=True, text=True, timeout=600,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                               "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0 and "RESULTS" in proc.stdout, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.split("RESULTS", 1)[1])
    for name, (path, inputs) in moved.items():
        here = _run_signature(path, serving.TEXT_SIGNATURE, inputs)
        for key, value in here.items():
            if value.dtype == object:
                assert [[x.decode() for x in row] if value.ndim > 1 else row.decode()
                        for row in value] == loaded[name][key], (name, key)
            else:
                np.testing.assert_allclose(loaded[name][key], value, atol=1e-5,
                                           err_msg="%s %s" % (name, key))


# ---------------------------------------------------------------------------
# The model run in chunks of rows (serving.run_in_chunks).

@pytest.fixture(scope="module")
def every_task_files(tmp_path_factory):
    return serving_exports.write_files(tmp_path_factory.mktemp("every_task") / "model")


@pytest.mark.parametrize("task", sorted(serving_exports.EXPORTS))
def test_chunks_of_rows_answer_as_one_batch(every_task_files, tmp_path, monkeypatch, task):
    """Each task's export run with one chunk for the whole batch (the model
    called once on every row, as before chunks) and with chunks of two rows
    (of one where there are only two; the last chunk shorter where the
    rows are odd): both signatures give the same outputs (floats to 1e-6;
    measured: at most 1.5e-7 apart), over inputs of several rows (windows,
    endings)."""
    export = serving_exports.EXPORTS[task]
    answers = []

    def run(tokens):
        monkeypatch.setattr(serving, "TOKENS_PER_CHUNK", tokens)
        with tf.Graph().as_default():
            path, inputs = export(tmp_path / str(tokens), every_task_files)
        outputs = _run_signature(path, serving.TEXT_SIGNATURE, inputs, fetch_features=True)
        features = {name: outputs.pop("feature/" + name) for name in serving.FEATURE_NAMES}
        answers.append((tokens, outputs, _run_signature(path, serving.IDS_SIGNATURE, features)))
        return features["input_ids"].shape

    shape = run(1 << 30)
    assert shape[0] >= 2, shape
    run(int(np.prod(shape[1:])) * (2 if shape[0] > 2 else 1))
    (_, whole, whole_ids), *chunked = answers
    for tokens, outputs, ids in chunked:
        for expected, got in ((whole, outputs), (whole_ids, ids)):
            assert sorted(got) == sorted(expected)
            for name, value in got.items():
                assert value.shape == expected[name].shape, (tokens, name)
                if value.dtype.kind == "f":
                    np.testing.assert_allclose(value, expected[name], rtol=0, atol=1e-6,
                                               err_msg="%d %s" % (tokens, name))
                else:
                    np.testing.assert_array_equal(value, expected[name],
                                                  err_msg="%d %s" % (tokens, name))


@pytest.mark.parametrize("task", ["classifier", "classifier_windows", "ner", "swag",
                                  "question_answering"])
def test_windows_are_counted_before_the_model_runs(every_task_files, tmp_path, task):
    """exported_model.Signature.windows: the rows the model runs for a
    request (windows; an instance without windows; each ending), as many
    as the text signature's features have, counted by the export's own
    tokenizer without the model (which a broken model function would not
    stop)."""
    with tf.Graph().as_default():
        path, inputs = serving_exports.EXPORTS[task](tmp_path, every_task_files)
    features = _run_signature(path, serving.TEXT_SIGNATURE, inputs,
                              fetch_features=True)["feature/input_ids"]
    model = exported_model.Model(path)
    arrays = {name: np.array([v.encode("utf-8") if isinstance(v, str) else
                              [x.encode("utf-8") for x in v] for v in values], dtype=object)
              for name, values in inputs.items()}
    with mock.patch.object(exported_model.Signature, "run", side_effect=AssertionError):
        windows = model.signature(serving.TEXT_SIGNATURE).windows(arrays)
    assert windows == int(np.prod(features.shape[:-1])) >= len(next(iter(inputs.values())))
    ids = {name: np.zeros([3, 2, 5] if task == "swag" else [3, 5], np.int32)
           for name in serving.FEATURE_NAMES}
    assert model.signature(serving.IDS_SIGNATURE).windows(ids) == (6 if task == "swag" else 3)


def _id_request(ids, mask, segments):
    return {"signature_name": serving.IDS_SIGNATURE,
            "inputs": {"input_ids": ids, "input_mask": mask, "segment_ids": segments}}


@pytest.mark.parametrize("task", ["classifier", "swag"])
def test_id_signature_refuses_ids_the_model_cannot_mean(every_task_files, tmp_path, task):
    """serving_ids checks, in the graph before the model reads them, that
    the segment ids are the model's (type_vocab_size 2), the mask 0 or 1
    and the three inputs of one shape: a failed check names the input and
    where, both in a TF1 session (TF Serving) and in predict.py's server
    (an op error: 400 with that message)."""
    with tf.Graph().as_default():
        path, _ = serving_exports.EXPORTS[task](tmp_path, every_task_files)
    model = exported_model.Model(path)

    def shaped(rows):  # SWAG's ids have a choices axis: 2 choices alike.
        return [[row, row] for row in rows] if task == "swag" else rows

    good = ([[2, 5, 3], [2, 6, 3]], [[1, 1, 1], [1, 1, 0]], [[0, 0, 1], [0, 1, 0]])
    at = "[1 0 2]" if task == "swag" else "[1 2]"  # The first of them.
    cases = [
        ((good[0], good[1], [[0, 0, 1], [0, 1, 2]]),
         "input segment_ids: 2 at %s; the model has 2 segment types (0 to 1, its "
         "type_vocab_size)" % at),
        ((good[0], good[1], [[0, 0, 1], [0, 1, -1]]), "input segment_ids: -1 at %s" % at),
        ((good[0], [[1, 1, 1], [1, 1, 5]], good[2]),
         "input input_mask: 5 at %s; a mask is 0 (padding) or 1 (a piece)" % at),
        ((good[0], [[1, 1, 1, 1], [1, 1, 1, 1]], good[2]),
         "the inputs input_ids [2 3], input_mask [2 4] and segment_ids [2 3] differ"
         if task != "swag" else "the inputs input_ids [2 2 3], input_mask [2 2 4] and "
                                "segment_ids [2 2 3] differ")]
    answer = rest_api.predict_response(model, _id_request(*map(shaped, good)))[0]
    assert np.shape(answer["outputs"]) == (2, 2)  # Two instances, two labels or choices.
    for values, message in cases:
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            rest_api.predict_response(model, _id_request(*map(shaped, values)))
        assert message in exported_model.op_error_message(raised.value)
        # TF Serving's answer holds the check's data pieces, in brackets.
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            _run_signature(path, serving.IDS_SIGNATURE, dict(zip(
                serving.FEATURE_NAMES, (np.array(shaped(v), np.int32) for v in values))))
        assert message in exported_model.op_error_message(raised.value)
