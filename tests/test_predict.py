"""predict.py: labelling files and standard input with an export, and its
server, spoken to over real HTTP as a TensorFlow Serving client would."""

import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from unittest import mock

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

from scriptkit import ner_tags
from scriptkit import serving
from scriptkit import errors
from scriptkit import batching
from scriptkit import exported_model
import modeling
import predict
from scriptkit import rest_api
from scriptkit import rest_server
import run_classifier
import run_ner
import run_swag
import test_serving
import tiny

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PAIRS = test_serving.PAIRS


def make_exports(tmp):
    """Exports of random-headed tiny models in the folder `tmp`: a pair
    classifier (MRPC) and a tagger, both with the explain signature, a
    single-text classifier (CoLA) without it, and a multiple-choice model.
    conftest.py's `exports` fixture: made once for the session."""
    files = test_serving.write_model_files(tmp)
    config = modeling.BertConfig.from_json_file(files["config"])
    vocab, length = files["vocab"], test_serving.MAX_SEQ_LENGTH
    labels_path = str(tmp / run_ner.LABELS_FILE)
    run_ner.write_labels(labels_path, "iob2", ["PER", "LOC"])
    return {
        "pair": run_classifier.export_model(
            serving.ExportSource(config, files["classifier"], str(tmp / "pair"), vocab, True,
                                 max_seq_length=length),
            run_classifier.MrpcProcessor(), ["0", "1"]),
        "single": run_classifier.export_model(
            serving.ExportSource(config, files["classifier"], str(tmp / "single"), vocab, True,
                                 max_seq_length=length),
            run_classifier.ColaProcessor(), ["bad", "good"], explain_steps=0),
        "ner": run_ner.export_model(
            serving.ExportSource(config, files["ner"], str(tmp / "ner"), vocab, True,
                                 max_seq_length=16),
            ner_tags.label_list_for(["PER", "LOC"], "iob2"), "iob2", labels_path, doc_stride=4),
        "swag": run_swag.export_model(serving.ExportSource(
            config, files["swag"], str(tmp / "swag"), vocab, True, max_seq_length=length))}


def _direct(export_dir, inputs):
    """The export's text signature on `inputs`, in a TF1 session."""
    return test_serving._run_signature(export_dir, "serving_default", inputs)


# Exports loaded by _predict, by folder: loading one takes seconds.
_LOADED = {}


def _predict(export_dir, cached=True, **flag_values):
    """Runs predict.main with these flags (the rest at their defaults) and
    returns the JSON objects it wrote to --output_file. With `cached`, an
    export loaded by an earlier call is used again."""
    values = dict(model_dir=export_dir, input_file=None, output_file=None, batch_size=32,
                  skip_malformed_rows=False, input_format="auto", input_columns=None,
                  id_column=None, signature_name="serving_default", port=None)
    values.update(flag_values)
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    load = exported_model.Model

    def loaded(model_dir):
        if model_dir not in _LOADED:
            _LOADED[model_dir] = load(model_dir)
        return _LOADED[model_dir]

    with flagsaver.flagsaver(**values), mock.patch.object(exported_model, "Model",
                                                          loaded if cached else load):
        predict.main([])
    with open(values["output_file"], encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_find_saved_model(exports, tmp_path):
    base = os.path.dirname(exports["pair"])
    assert exported_model.find_saved_model(base) == (exports["pair"],
                                              os.path.basename(exports["pair"]))
    assert exported_model.find_saved_model(exports["pair"])[0] == exports["pair"]
    newer = os.path.join(base, str(int(os.path.basename(exports["pair"])) + 10))
    os.makedirs(newer)
    try:
        assert exported_model.find_saved_model(base)[0] == exports["pair"]  # No saved_model.pb.
    finally:
        os.rmdir(newer)
    with pytest.raises(errors.InputError, match="--model_dir: no SavedModel in"):
        exported_model.find_saved_model(str(tmp_path))


@pytest.mark.slow
def test_labels_json_lines_tsv_and_csv_as_the_signature_does(exports, tmp_path):
    base = os.path.dirname(exports["pair"])
    expected = _direct(exports["pair"], {"text_a": [a for a, _ in PAIRS],
                                         "text_b": [b for _, b in PAIRS]})
    # Blank lines (first, after the header) are skipped in every format.
    files = {
        "in.jsonl": "\n" + "".join(json.dumps({"id": i, "text_a": a, "text_b": b}) + "\n"
                                   for i, (a, b) in enumerate(PAIRS)),
        # Tabs and commas inside the texts are not in these.
        "in.tsv": "label\ttext_a\ttext_b\n\n" + "".join("x\t%s\t%s\n" % p for p in PAIRS),
        "in.csv": "text_b,text_a\n \n" + "".join('"%s","%s"\n' % (b, a) for a, b in PAIRS)}
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
        out = _predict(base, input_file=str(tmp_path / name),
                       output_file=str(tmp_path / (name + ".out")), batch_size=3)
        assert len(out) == len(PAIRS), name
        np.testing.assert_allclose([o["probabilities"] for o in out],
                                   expected["probabilities"], atol=1e-5, err_msg=name)
        assert [o["labels"] for o in out] == [x.decode() for x in expected["labels"]]
        assert [o["label_ids"] for o in out] == list(expected["label_ids"])
        # The id field goes through as it is; other fields do not.
        assert [o.get("id") for o in out] == (list(range(len(PAIRS))) if name == "in.jsonl"
                                              else [None] * len(PAIRS)), name
        assert "label" not in out[0]


def _predict_stdin(export_dir, text, capsys, monkeypatch, **flag_values):
    """Runs predict.main on standard input `text` (a str); returns the JSON
    objects it wrote to standard output and the log's messages."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    values = dict(model_dir=export_dir, input_file=None, output_file=None, batch_size=2,
                  skip_malformed_rows=False, input_format="auto", input_columns=None,
                  id_column=None, signature_name="serving_default", port=None)
    values.update(flag_values)
    with flagsaver.flagsaver(**values), tiny.LogMessages.collecting() as log:
        predict.main([])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()], log.text


@pytest.mark.slow
def test_labels_standard_input_one_text_per_line(exports, monkeypatch, capsys):
    """Standard input is one text per line, whatever its first line holds:
    a line "text" or a JSON object is a text too (with a hint for the
    latter), blank lines are empty texts, and lines out equal lines in."""
    texts = ["text", "The film is good.", "", "中文 film", "go\u200bod",
             "Ask me anything, text"]
    out, log = _predict_stdin(exports["single"], "\n".join(texts) + "\n", capsys,
                              monkeypatch)
    expected = _direct(exports["single"], {"text_a": texts})
    np.testing.assert_allclose([o["probabilities"] for o in out], expected["probabilities"],
                               atol=1e-5)
    assert {o["labels"] for o in out} <= {"bad", "good"}
    assert "<stdin>: 6 inputs (one text per line)" in log
    assert "Standard output: 6 lines, one per input: 6 labelled" in log
    assert "JSON Lines" not in log
    out, log = _predict_stdin(exports["single"], '{"text_a": "good"}\nfilm\n', capsys,
                              monkeypatch)
    np.testing.assert_allclose(
        [o["probabilities"] for o in out],
        _direct(exports["single"], {"text_a": ['{"text_a": "good"}', "film"]})[
            "probabilities"], atol=1e-5)
    assert "Standard input is read as one text per line; --input_format=jsonl reads it as " \
        "JSON Lines" in log
    out, _ = _predict_stdin(exports["single"], '{"text_a": "good", "id": "a"}\n', capsys,
                            monkeypatch, input_format="jsonl")
    assert out[0]["id"] == "a" and out[0]["labels"] in ("bad", "good")


@pytest.mark.slow
def test_tagger_words_are_cut_to_each_text_and_batches_do_not_matter(exports, tmp_path):
    texts = test_serving.NER_LINES + ["", "Jackson"]
    path = tmp_path / "text.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    outputs = [_predict(exports["ner"], input_file=str(path),
                        output_file=str(tmp_path / ("out%d" % size)), batch_size=size)
               for size in (1, 3)]
    assert [len(out) for out in outputs] == [len(texts)] * 2
    # Padding to other lengths moves the probabilities by float rounding only.
    for one, other in zip(*outputs):
        np.testing.assert_allclose(other.pop("probabilities"), one.pop("probabilities"),
                                   atol=1e-5)
        assert one == other
    expected = _direct(exports["ner"], {"text": texts})
    for i, out in enumerate(outputs[1]):
        n = expected["num_words"][i]
        assert out["num_words"] == n and len(out["tags"]) == n and len(out["words"]) == n
        assert out["tags"] == [t.decode() for t in expected["tags"][i, :n]]
        assert out["start_offsets"] == list(expected["start_offsets"][i, :n])


@pytest.mark.slow
def test_multiple_choice_batches_hold_one_number_of_choices(exports, tmp_path):
    rows = [{"context": c, "question": q, "endings": e}
            for c, q, e in test_serving.SWAG_ROWS]
    rows.append({"context": "The film", "question": "It", "endings": ["ends.", "goes on."]})
    path = tmp_path / "swag.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = _predict(exports["swag"], input_file=str(path), output_file=str(tmp_path / "out"))
    assert [len(o["probabilities"]) for o in out] == [4, 4, 4, 2]
    expected = _direct(exports["swag"], {k: [r[k] for r in rows[:3]]
                                         for k in ("context", "question", "endings")})
    np.testing.assert_allclose([o["probabilities"] for o in out[:3]],
                               expected["probabilities"], atol=1e-5)


@pytest.mark.slow
def test_swag_release_csv_needs_no_flag(exports, tmp_path):
    """SWAG's own CSV (sent1, sent2, ending0..ending3) is read as it is, its
    endings the model's list of choices."""
    header = ",".join(run_swag.SWAG_COLUMNS)
    rows = [row for row in test_serving.SWAG_ROWS if len(row[2]) == 4]
    lines = [header] + [",".join(["%d" % i, "v", "f", "s", '"%s"' % c, '"%s"' % q]
                                 + ["g"] + ['"%s"' % e for e in endings])
                        for i, (c, q, endings) in enumerate(rows)]
    (tmp_path / "val.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = _predict(exports["swag"], input_file=str(tmp_path / "val.csv"),
                   output_file=str(tmp_path / "out.jsonl"))
    expected = _direct(exports["swag"], {"context": [r[0] for r in rows],
                                         "question": [r[1] for r in rows],
                                         "endings": [r[2] for r in rows]})
    np.testing.assert_allclose([o["probabilities"] for o in out], expected["probabilities"],
                               atol=1e-5)


def test_bad_rows_name_file_and_line_and_stop_or_are_skipped(exports, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"text_a": "good", "text_b": "film"}\n'
                     b'{"text_a": 5, "text_b": "film"}\n'
                     b'{"text_a": "good"}\n'
                     b'not json\n'
                     b'{"text_a": "caf\xe9", "text_b": ""}\n'
                     b'{"text_a": "the film", "text_b": "is good"}\n')
    output = str(tmp_path / "out.jsonl")
    with pytest.raises(errors.InputError,
                       match=r"in\.jsonl, line 2: input text_a: expected text, got 5"):
        _predict(exports["pair"], input_file=str(path), output_file=output)
    assert not os.path.exists(output)  # Nothing written half.
    out = _predict(exports["pair"], input_file=str(path), output_file=output,
                   skip_malformed_rows=True)
    # Every input has its line, in order: the refused ones say why.
    assert [o.get("error") for o in out] == [
        None, "%s, line 2: input text_a: expected text, got 5" % path,
        "%s, line 3: no text_b (nor #2 String)" % path,
        "%s, line 4: not valid JSON (Expecting value: line 1 column 1 (char 0))" % path,
        "%s, line 5: not valid UTF-8 (invalid continuation byte)" % path, None]
    assert "probabilities" in out[0] and "probabilities" in out[5]
    assert "probabilities" not in out[1]
    # A first line that is not UTF-8: named, then an error line.
    first_bad = tmp_path / "first_bad.jsonl"
    first_bad.write_bytes(b'\xff{"text_a": "x"}\n{"text_a": "good", "text_b": "film"}\n')
    with pytest.raises(errors.InputError, match=r"first_bad\.jsonl, line 1: not valid UTF-8"):
        _predict(exports["pair"], input_file=str(first_bad), output_file=output)
    out = _predict(exports["pair"], input_file=str(first_bad), output_file=output,
                   skip_malformed_rows=True)
    assert len(out) == 2 and "error" in out[0] and "error" not in out[1]
    with pytest.raises(errors.InputError, match=r"one text per line fits a model with one "
                                                  r"text input; signature serving_default "
                                                  r"takes text_a, text_b"):
        (tmp_path / "plain.txt").write_text("just a line\n")
        _predict(exports["pair"], input_file=str(tmp_path / "plain.txt"), output_file=output)
    with pytest.raises(errors.InputError, match=r"--signature_name: no signature 'nope'"):
        _predict(exports["pair"], input_file=str(path), output_file=output,
                 signature_name="nope")


# The task's own files: GLUE SST-2's layout (demo_data/sentiment).
SST2_ROWS = [("the film is good", "1"), ("中文 film\u3000is bad", "0"), ("go\u200bod", "1")]


def test_the_training_files_columns_need_no_flag(exports, tmp_path):
    """A file laid out as the task's data files (GLUE CoLA/SST-2's
    "sentence" column, MRPC's "#1 String" and "#2 String") is read as it
    is, its first row the header; the signature's own names are read too."""
    sentences = [s for s, _ in SST2_ROWS]
    expected = _direct(exports["single"], {"text_a": sentences})["probabilities"]
    files = {"dev.tsv": "sentence\tlabel\n" + "".join("%s\t%s\n" % row for row in SST2_ROWS),
             "dev.csv": "label,sentence\n" + "".join('%s,"%s"\n' % (label, text)
                                                     for text, label in SST2_ROWS),
             "dev.jsonl": "".join(json.dumps({"sentence": t}) + "\n" for t, _ in SST2_ROWS),
             "own.jsonl": "".join(json.dumps({"text_a": t}) + "\n" for t, _ in SST2_ROWS)}
    output = str(tmp_path / "out.jsonl")
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
        out = _predict(exports["single"], input_file=str(tmp_path / name), output_file=output)
        np.testing.assert_allclose([o["probabilities"] for o in out], expected, atol=1e-5,
                                   err_msg=name)
    (tmp_path / "mrpc.tsv").write_text(
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        + "".join("1\t%d\t%d\t%s\t%s\n" % (i, i, a, b) for i, (a, b) in enumerate(PAIRS)),
        encoding="utf-8")
    out = _predict(exports["pair"], input_file=str(tmp_path / "mrpc.tsv"), output_file=output)
    np.testing.assert_allclose(
        [o["probabilities"] for o in out],
        _direct(exports["pair"], {"text_a": [a for a, _ in PAIRS],
                                  "text_b": [b for _, b in PAIRS]})["probabilities"], atol=1e-5)


def test_a_header_naming_no_input_is_refused_or_mapped(exports, tmp_path):
    """A TSV or CSV file whose header names none of the model's inputs is
    refused in one line naming the inputs and the columns, with the flag
    that maps one (--input_columns), or read with its columns mapped; a
    .txt file is one text per line, its first line too, tabs and all."""
    sentences = [s for s, _ in SST2_ROWS]
    expected = _direct(exports["single"], {"text_a": sentences})["probabilities"]
    files = {"dev.tsv": "review\tlabel\n" + "".join("%s\t%s\n" % row for row in SST2_ROWS),
             "dev.csv": "review,label\n" + "".join('"%s",%s\n' % row for row in SST2_ROWS)}
    output = str(tmp_path / "out.jsonl")
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
        with pytest.raises(errors.InputError, match="^" + re.escape(
                "%s, line 1: the header names no column for the model's input text_a (it "
                "takes text_a; looked for text_a or sentence; columns found: 'review', "
                "'label'): map one with --input_columns=COLUMN:text_a" % (tmp_path / name))
                + "$"):
            _predict(exports["single"], input_file=str(tmp_path / name), output_file=output)
        out = _predict(exports["single"], input_file=str(tmp_path / name), output_file=output,
                       input_columns="review:text_a")
        assert len(out) == len(SST2_ROWS), name
        np.testing.assert_allclose([o["probabilities"] for o in out], expected, atol=1e-5,
                                   err_msg=name)
    # JSON Lines fields too; an input the model lacks is named.
    (tmp_path / "dev.jsonl").write_text("".join(json.dumps({"review": s}) + "\n"
                                                for s in sentences), encoding="utf-8")
    out = _predict(exports["single"], input_file=str(tmp_path / "dev.jsonl"),
                   output_file=output, input_columns=" review : text_a ")
    np.testing.assert_allclose([o["probabilities"] for o in out], expected, atol=1e-5)
    with pytest.raises(errors.InputError, match=r"--input_columns: the signature "
                                                  r"serving_default has no input text_b "
                                                  r"\(it takes text_a\)"):
        _predict(exports["single"], input_file=str(tmp_path / "dev.jsonl"),
                 output_file=output, input_columns="review:text_b")
    with pytest.raises(errors.InputError, match=r"header has no column review "
                                                  r"\(--input_columns\); columns found: "
                                                  r"'text', 'label'"):
        (tmp_path / "other.tsv").write_text("text\tlabel\na\t1\n")
        _predict(exports["single"], input_file=str(tmp_path / "other.tsv"),
                 output_file=output, input_columns="review:text_a")
    # One text per line, tabs kept in the texts: the first line is no header.
    lines = ["text", "a\tgood film", "bad\tfilm\t!"]
    for name, flag in (("lines.txt", "auto"), ("lines.data", "text")):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        out = _predict(exports["single"], input_file=str(tmp_path / name),
                       output_file=output, input_format=flag)
        np.testing.assert_allclose(
            [o["probabilities"] for o in out],
            _direct(exports["single"], {"text_a": lines})["probabilities"], atol=1e-5)
    # Other extensions are not guessed at: the flag says.
    with pytest.raises(errors.InputError, match="^" + re.escape(
            "--input_file %s: its extension tells no format (.jsonl, .ndjson, .json, .tsv, "
            ".csv or .txt): give --input_format=jsonl, tsv, csv or text"
            % (tmp_path / "lines.data")) + "$"):
        _predict(exports["single"], input_file=str(tmp_path / "lines.data"),
                 output_file=output)


def _refused_before_loading(exports, monkeypatch, message, **flag_values):
    """_predict stops with an InputError matching `message` before the model
    loads."""
    def no_loading(*args):
        raise AssertionError("the model was loaded")

    with monkeypatch.context() as patch:
        patch.setattr(exported_model, "Model", no_loading)
        with pytest.raises(errors.InputError, match=message):
            _predict(exports["single"], cached=False, **flag_values)


def test_output_file_checks_and_its_folder(exports, tmp_path, monkeypatch):
    """--output_file may not be an input, a symbolic link, a named pipe or a
    device (refused before the model loads, each left as it was); a missing
    folder is created."""
    texts = tmp_path / "texts.txt"
    texts.write_text("good film\nbad film\n", encoding="utf-8")
    _refused_before_loading(exports, monkeypatch, r"--output_file .*texts\.txt is the input "
                            r"file .*texts\.txt: writing the labels would replace it",
                            input_file=str(tmp_path / "*.txt"), output_file=str(texts))
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "target.jsonl")
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    for path, what in ((link, "a symbolic link"), (fifo, "a named pipe"),
                       ("/dev/null", "a device")):
        _refused_before_loading(exports, monkeypatch, "--output_file %s is %s, not a regular "
                                "file" % (path, what), input_file=str(texts),
                                output_file=str(path))
    assert texts.read_text() == "good film\nbad film\n"
    assert link.is_symlink() and not os.path.exists(str(link))
    assert stat.S_ISFIFO(os.lstat(str(fifo)).st_mode)
    # Standard input and output, closed.
    monkeypatch.setattr("sys.stdin", None)
    _refused_before_loading(exports, monkeypatch, r"standard input is closed: give the text "
                            r"to label with --input_file", output_file=str(tmp_path / "o"))
    monkeypatch.setattr("sys.stdout", None)
    _refused_before_loading(exports, monkeypatch, r"standard output is closed: name a file "
                            r"with --output_file", input_file=str(texts))
    out = _predict(exports["single"], input_file=str(texts),
                   output_file=str(tmp_path / "new" / "folder" / "labels.jsonl"))
    assert len(out) == 2


def test_id_column_is_checked_before_the_model_runs(exports, tmp_path, monkeypatch):
    """--id_column names a field: refused for one text per line before the
    model loads, and where it names an input or output of the model."""
    texts = tmp_path / "texts.txt"
    texts.write_text("good film\n", encoding="utf-8")
    _refused_before_loading(exports, monkeypatch, r"^--id_column names a field or column; "
                            r".*texts\.txt is one text per line$", input_file=str(texts),
                            output_file=str(tmp_path / "out"), id_column="key")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"text_a": "good", "labels": "x"}) + "\n")
    for field, kind in (("labels", "output"), ("text_a", "input")):
        with pytest.raises(errors.InputError, match=r"^--id_column=%s: the signature "
                                                      r"serving_default has an %s of that "
                                                      r"name$" % (field, kind)):
            _predict(exports["single"], input_file=str(rows),
                     output_file=str(tmp_path / "out"), id_column=field)


def test_every_malformed_line_is_named_and_skipped(exports, tmp_path):
    """Lines ending in a lone carriage return are lines; a JSON line nested
    100,000 deep, a lone surrogate, a list for a text and ids the model
    refuses are each named by file and line, and skipped with
    --skip_malformed_rows."""
    good = b'{"text_a": "good", "text_b": "film"}'
    bad = [(b'{"text_a": ' + b"[" * 100000 + b"]" * 100000 + b', "text_b": ""}',
            "not valid JSON here (nested too deep)"),
           (b'{"text_a": "\\ud800", "text_b": ""}', "text_a: text holding a lone surrogate"),
           (b'{"text_a": ["a"], "text_b": ""}', "text_a: expected one value, found a list")]
    path = tmp_path / "in.jsonl"
    output = str(tmp_path / "out.jsonl")
    for number, (line, message) in enumerate(bad, 2):
        path.write_bytes(b"\r".join([good] * (number - 1) + [line, good]))
        with pytest.raises(errors.InputError, match=re.escape("in.jsonl, line %d: %s"
                                                              % (number, message))):
            _predict(exports["pair"], input_file=str(path), output_file=output)
    path.write_bytes(b"\r".join([good] + [line for line, _ in bad] + [good]))
    out = _predict(exports["pair"], input_file=str(path), output_file=output,
                   skip_malformed_rows=True)
    errors_written = [o.get("error") for o in out]
    assert errors_written[0] is None and errors_written[-1] is None
    for number, (_, message) in enumerate(bad, 2):
        assert errors_written[number - 1].startswith("%s, line %d: %s" % (path, number, message))
    expected = _direct(exports["pair"], {"text_a": ["good"] * 2, "text_b": ["film"] * 2})
    np.testing.assert_allclose([o["probabilities"] for o in (out[0], out[-1])],
                               expected["probabilities"], atol=1e-5)
    # A TSV file with old Mac line endings.
    (tmp_path / "mac.tsv").write_bytes(b"text_a\ttext_b\rgood\tfilm\r\rgood\tfilm\r")
    out = _predict(exports["pair"], input_file=str(tmp_path / "mac.tsv"), output_file=output)
    np.testing.assert_allclose([o["probabilities"] for o in out], expected["probabilities"],
                               atol=1e-5)
    # Ids out of the vocabulary fail in the model: found in their batch.
    ids = tmp_path / "ids.jsonl"
    ids.write_text("".join(json.dumps({"input_ids": [2, i, 3], "input_mask": [1, 1, 1],
                                       "segment_ids": [0, 0, 0]}) + "\n"
                           for i in (5, 10 ** 6, 6)))
    with pytest.raises(errors.InputError, match=r"ids\.jsonl, line 2: .*1000000"):
        _predict(exports["pair"], input_file=str(ids), output_file=output,
                 signature_name="serving_ids")
    out = _predict(exports["pair"], input_file=str(ids), output_file=output,
                   signature_name="serving_ids", skip_malformed_rows=True)
    assert len(out) == 3 and re.match(r".*ids\.jsonl, line 2: .*1000000", out[1]["error"])
    assert "error" not in out[0] and "error" not in out[2]


@pytest.mark.slow
def test_a_closed_pipe_ends_the_script_as_other_unix_tools(exports, tmp_path):
    """`predict.py ... | head -1`: the reader closes the pipe after one
    line, and the script ends by SIGPIPE with no message (a shell shows
    status 141), nor TensorFlow's "Fingerprint not found" at the start."""
    texts = tmp_path / "texts.txt"
    texts.write_text("good film\n" * 2000, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "predict.py"), "--model_dir=" + exports["single"],
         "--input_file=" + str(texts), "--batch_size=500"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path))
    first = proc.stdout.readline()
    proc.stdout.close()  # More than a pipe's buffer is still to come.
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == -signal.SIGPIPE, err[-3000:]
    assert json.loads(first)["labels"] in ("bad", "good")
    assert "Traceback" not in err and "Error" not in err and "ERROR" not in err, err[-3000:]
    assert "Fingerprint not found" not in err and "Model %s" % exports["single"] in err


# ---------------------------------------------------------------------------
# The server.

@pytest.fixture(scope="module")
def server(exports):
    model = exported_model.Model(os.path.dirname(exports["pair"]))
    http = rest_server.make_server(model, "127.0.0.1", 0, "mrpc", max_request_bytes=20000)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % http.server_address[1], model
    http.shutdown()
    http.server_close()


def _call(url, body=None, raw=None):
    """(status, decoded JSON answer) of a GET (no body) or POST."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.slow
def test_server_answers_as_tensorflow_serving(server):
    url, model = server
    version = model.version
    expected = _direct(model.path, {"text_a": [a for a, _ in PAIRS],
                                    "text_b": [b for _, b in PAIRS]})
    instances = [{"text_a": a, "text_b": b} for a, b in PAIRS]
    for path in ("/v1/models/mrpc:predict", "/v1/models/mrpc/versions/%s:predict" % version):
        status, answer = _call(url + path, {"instances": instances})
        assert status == 200, answer
        np.testing.assert_allclose([p["probabilities"] for p in answer["predictions"]],
                                   expected["probabilities"], atol=1e-5)
        assert [p["labels"] for p in answer["predictions"]] == [
            x.decode() for x in expected["labels"]]
    status, answer = _call(url + "/v1/models/mrpc:predict", {
        "signature_name": "serving_default",
        "inputs": {"text_a": [a for a, _ in PAIRS], "text_b": [b for _, b in PAIRS]}})
    assert status == 200
    np.testing.assert_allclose(answer["outputs"]["probabilities"], expected["probabilities"],
                               atol=1e-5)
    # The id signature, columnar, with one output: its value directly.
    ids = [[2, 5, 6, 3]]
    status, answer = _call(url + "/v1/models/mrpc:predict", {
        "signature_name": "serving_ids",
        "inputs": {"input_ids": ids, "input_mask": [[1] * 4], "segment_ids": [[0] * 4]}})
    assert status == 200 and np.array(answer["outputs"]).shape == (1, 2), answer
    # An instance's id comes back in its prediction, as it was sent.
    status, answer = _call(url + "/v1/models/mrpc:predict", {"instances": [
        dict(instances[0], id="row-1"), instances[1], dict(instances[2], id={"n": [3]})]})
    assert status == 200, answer
    assert [p.get("id") for p in answer["predictions"]] == ["row-1", None, {"n": [3]}]
    np.testing.assert_allclose([p["probabilities"] for p in answer["predictions"]],
                               expected["probabilities"][:3], atol=1e-5)
    status, answer = _call(url + "/v1/models/mrpc")
    assert (status, answer) == (200, {"model_version_status": [{
        "version": version, "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""}}]})
    status, answer = _call(url + "/v1/models/mrpc/metadata")
    assert status == 200 and answer["model_spec"]["version"] == version
    signatures = answer["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "serving_ids", "explain"}
    assert signatures["serving_default"]["inputs"]["text_a"]["dtype"] == "DT_STRING"
    assert set(signatures["explain"]["inputs"]) == {"text_a", "text_b", "label"}
    assert set(signatures["serving_default"]["outputs"]) == {"probabilities", "label_ids",
                                                            "labels"}
    assert _call(url + "/v1/models/other:predict", {"instances": instances})[0] == 404
    assert _call(url + "/v1/models/mrpc/versions/1:predict", {"instances": instances})[0] == 404


@pytest.mark.slow
@pytest.mark.parametrize("body, raw, status, message", [
    (None, b"{not json", 400, "JSON Parse error"),
    ({"instances": [{"text": "good"}]}, None, 400, "missing: text_a, text_b; unknown: text"),
    ({"instances": [{"text_a": 1, "text_b": "x"}]}, None, 400, "input text_a: expected text"),
    (None, b'{"instances": [{"text_a": "caf\xe9", "text_b": ""}]}', 400, "not UTF-8"),
    ({"instances": []}, None, 400, "non-empty list"),
    ({"instances": [{"text_a": "a" * 30000, "text_b": ""}]}, None, 413, "exceeds the limit"),
    ({"instances": [{"text_a": "a", "text_b": ""}], "inputs": {}}, None, 400, "not both"),
    ({"signature_name": "nope", "instances": [{"text_a": "a"}]}, None, 400,
     "no signature 'nope'"),
])
def test_server_refuses_bad_requests_and_keeps_serving(server, body, raw, status, message):
    url, _ = server
    got, answer = _call(url + "/v1/models/mrpc:predict", body, raw)
    assert got == status and message in answer["error"], answer
    status, answer = _call(url + "/v1/models/mrpc:predict",
                           {"instances": [{"text_a": "good", "text_b": "film"}]})
    assert status == 200 and len(answer["predictions"]) == 1


@pytest.mark.slow
def test_concurrent_clients_get_their_own_answers(server, monkeypatch):
    url, _ = server
    requests = [{"instances": [{"text_a": a, "text_b": b}]} for a, b in PAIRS]
    alone = [_call(url + "/v1/models/mrpc:predict", r)[1] for r in requests]
    together = [None] * len(requests)
    # Requests run in groups that must be in flight together to go on (as
    # many as the server runs at once): a server that answered one request
    # at a time would never pass the barrier.
    barrier = threading.Barrier(rest_api.DEFAULT_LIMITS.max_requests_in_flight, timeout=60)
    original = rest_api.predict_response
    # Each group's runs wait up to 2 s to be merged: they are, into one batch.
    batcher = batching.Batcher(batch_timeout_micros=2 * 10 ** 6)

    def together_with_others(model, body, limits, server_batcher):
        assert server_batcher is not None  # The server merges runs by default.
        barrier.wait()
        return original(model, body, limits, batcher)

    monkeypatch.setattr(rest_api, "predict_response", together_with_others)

    def client(i):
        together[i] = _call(url + "/v1/models/mrpc:predict", requests[i])[1]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(requests) == 8
    assert sum(batcher.batches.values()) >= 1, batcher.batches
    for one, other in zip(alone, together):
        np.testing.assert_allclose(other["predictions"][0]["probabilities"],
                                   one["predictions"][0]["probabilities"], atol=1e-6)
        assert other["predictions"][0]["labels"] == one["predictions"][0]["labels"]

