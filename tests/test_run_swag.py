"""Tests of run_swag.py: the SWAG CSV files as released (header, unnamed id
column, test.csv without labels, quoted commas) and JSON Lines with any
number of choices; the [CLS] context [SEP] question + ending [SEP] packing;
the script end to end on a tiny model (a task at 0.25 by chance), its
outputs and SavedModel; bad input."""

import csv
import functools
import json
import os
import random

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import errors
import run_swag
import tiny
import tokenization

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]


def _write(path, text, mode="w"):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), mode, **({} if "b" in mode else {"encoding": "utf-8",
                                                            "newline": ""})) as f:
        f.write(text)
    return str(path)


def _write_csv(path, rows, header=HEADER):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def _swag_row(index, context, start, endings, label=None):
    row = [str(index), "lsmdc0001_Clip-%d" % index, str(index * 7), context + " " + start,
           context, start, "gold"] + list(endings)
    return row + ([str(label)] if label is not None else [])


# ---------------------------------------------------------------------------
# Readers.

def test_swag_csv_as_released(tmp_path):
    path = _write_csv(tmp_path / "train.csv", [
        _swag_row(5, "Someone opens the door, slowly.", "He",
                  ["walks in.", "sits, \"tired\".", "flies away.", "eats the door."], 1),
        _swag_row(9, "A woman sits at a piano.", "She",
                  ["plays.", "sings.", "leaves.", "sleeps."], 0),
    ])
    examples = run_swag.read_swag_csv(path)
    assert examples == [
        run_swag.MultipleChoiceExample(
            "5", "Someone opens the door, slowly.", "He",
            ["walks in.", "sits, \"tired\".", "flies away.", "eats the door."], 1),
        run_swag.MultipleChoiceExample("9", "A woman sits at a piano.", "She",
                                       ["plays.", "sings.", "leaves.", "sleeps."], 0)]
    # test.csv: no label column.
    path = _write_csv(tmp_path / "test.csv", [
        _swag_row(0, "A man.", "The man", ["a.", "b.", "c.", "d."])], header=HEADER[:-1])
    (example,) = run_swag.read_swag_csv(path)
    assert example.label is None and example.question == "The man"
    assert run_swag.read_examples(path) == [example]


def test_jsonl_any_number_of_choices(tmp_path):
    path = _write(tmp_path / "dev.jsonl", "\n".join([
        json.dumps({"id": "q1", "context": "Sky?", "question": "It is",
                    "endings": ["blue", "green", "red"], "label": 0}),
        "",
        json.dumps({"id": 7, "context": "Grass?", "endings": ["blue", "green", "red"],
                    "label": 1}),
        json.dumps({"context": "Fire?", "endings": ["blue", "green", "red"], "label": "2"}),
    ]) + "\n")
    examples = run_swag.read_examples(path)
    assert examples == [
        run_swag.MultipleChoiceExample("q1", "Sky?", "It is", ["blue", "green", "red"], 0),
        run_swag.MultipleChoiceExample("7", "Grass?", "", ["blue", "green", "red"], 1),
        run_swag.MultipleChoiceExample("4", "Fire?", "", ["blue", "green", "red"], 2)]


@pytest.mark.parametrize("name, text, message", [
    ("train.csv", "", r"train\.csv: empty file"),
    ("train.csv", ",".join(HEADER) + "\n", r"train\.csv: no examples \(only a header\)"),
    ("train.csv", "id,sent1,sent2,ending0,ending1,ending2,ending3,label\n1,a,b,c,d,e,f,0\n",
     r"train\.csv, line 1: not the header of a SWAG CSV file"),
    ("train.csv", ",".join(HEADER) + "\n0,v,1,a b,a,b,gold,c,d,e,f,0\n1,v,1,a,b,c,d,e,f\n",
     r"train\.csv, line 3: expected 12 comma-separated columns, found 9"),
    ("train.csv", ",".join(HEADER) + "\n0,v,1,a b,a,b,gold,c,d,e,f,4\n",
     r"train\.csv, line 2: label '4' is not a choice number from 0 to 3"),
    ("train.csv", ",".join(HEADER) + "\n0,v,1,a b,a,b,gold,c,d,e,f,yes\n",
     r"train\.csv, line 2: label 'yes' is not a choice number"),
    ("dev.jsonl", '{"context": "a", "endings": ["b", "c"], "label": 0}\n{"context": "a",\n',
     r"dev\.jsonl, line 2: not valid JSON"),
    ("dev.jsonl", '{"context": "a", "endings": ["b", "c"], "label": 0}\n'
                  '{"context": "a", "endings": ["b", "c", "d"], "label": 0}\n',
     r"dev\.jsonl, line 2: 3 endings, but line 1 has 2"),
    ("dev.jsonl", '{"context": "a", "endings": ["b"], "label": 0}\n',
     r"dev\.jsonl, line 1: \"endings\" must be a list of at least 2 strings"),
    ("dev.jsonl", '{"context": "a", "endings": ["b", "c"], "label": 0}\n'
                  '{"context": "a", "endings": ["b", "c"]}\n',
     r"dev\.jsonl, line 2: no label, unlike line 1"),
    ("dev.jsonl", '["a", "b"]\n', r"dev\.jsonl, line 1: expected one JSON object"),
    ("dev.jsonl", '{"endings": ["b", "c"]}\n', r"dev\.jsonl, line 1: \"context\" must be"),
    ("dev.jsonl", '{"context": "a", "endings": ["b", "c"], "label": 2}\n',
     r"dev\.jsonl, line 1: label 2 is not a choice number from 0 to 1"),
    ("dev.jsonl", "\n\n", r"dev\.jsonl: no examples"),
])
def test_bad_files_name_file_and_line(tmp_path, name, text, message):
    path = _write(tmp_path / name, text)
    with pytest.raises(errors.InputError, match=message):
        run_swag.read_examples(path)


def test_convert_example_hand_worked(tmp_path):
    vocab = tiny.write_vocab(str(tmp_path), ["a", "man", "sits", ".", "he", "stands", "up",
                                             "eats"])
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    # Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 a=5 man=6 sits=7 .=8 he=9 stands=10
    # up=11 eats=12.
    example = run_swag.MultipleChoiceExample("x", "A man sits.", "He",
                                             ["stands up.", "eats."], 1)
    f = run_swag.convert_example(example, 10, tokenizer)
    # [CLS] a man sits . [SEP] he stands up . [SEP] is 11 > 10 pieces: of
    # two equally long sides, the second loses its last piece.
    assert f.input_ids == [[2, 5, 6, 7, 8, 3, 9, 10, 11, 3],
                           [2, 5, 6, 7, 8, 3, 9, 12, 8, 3]]
    assert f.segment_ids == [[0] * 6 + [1] * 4, [0] * 6 + [1] * 4]
    assert f.input_mask == [[1] * 10, [1] * 10]
    assert f.label_id == 1 and f.is_real_example
    # Without a question, the ending alone is the second segment.
    f = run_swag.convert_example(example._replace(question=""), 12, tokenizer)
    assert f.input_ids[1] == [2, 5, 6, 7, 8, 3, 12, 8, 3, 0, 0, 0]


# ---------------------------------------------------------------------------
# main, end to end on a tiny model.

HOT = ["fire", "sun", "oven", "soup", "summer", "stove"]
COLD = ["ice", "snow", "fridge", "winter", "frost", "hail"]
NOUNS = ["day", "room", "house", "town", "road", "lake"]
FILLER = ["the", "a", "is", "very", "and", "old", "new", "it", "feels", "like", "now",
          "there", "was"]


def _example(rng, index):
    """The context says hot or cold; the right ending names something of that
    kind (fire, snow), the three others something of the other kind. The
    right ending's place is random, so the majority baseline is 0.25, and
    the ending alone does not tell: only with the context."""
    hot = rng.random() < 0.5
    label = rng.randrange(4)
    context = "the %s is %s %s ." % (rng.choice(NOUNS), rng.choice(["very", "now", "a"]),
                                     "hot" if hot else "cold")
    right, wrong = (HOT, COLD) if hot else (COLD, HOT)
    endings = []
    for i in range(4):
        endings.append("%s %s ." % (rng.choice(["a", "the", "new", "old"]),
                                    rng.choice(right if i == label else wrong)))
    return _swag_row(index, context, "it feels like", endings, label)


def _write_task(data_dir, seed=0, num_train=640, num_dev=64, num_test=12):
    rng = random.Random(seed)
    rows = {}
    for name, n in (("train.csv", num_train), ("val.csv", num_dev), ("test.csv", num_test)):
        rows[name] = [_example(rng, 1000 * len(rows) + i) for i in range(n)]
        if name == "test.csv":
            _write_csv(os.path.join(data_dir, name), [r[:-1] for r in rows[name]],
                       header=HEADER[:-1])
        else:
            _write_csv(os.path.join(data_dir, name), rows[name])
    return rows


def _model_files(tmp_path):
    words = HOT + COLD + NOUNS + FILLER + ["hot", "cold", "."]
    vocab = tiny.write_vocab(str(tmp_path), words)
    # Larger initial weights than BERT's 0.02: the choices' pooled outputs
    # then differ enough from the start for the shared scorer to learn (with
    # 0.02 a tiny model from scratch can sit at loss ln 4 for hundreds of
    # steps). Layers of 64 rather than 32: at 32, some graph seeds reached
    # only 0.906, and one of those, given 12 epochs, stayed at ln 4.
    config = tiny.write_config(str(tmp_path), vocab_size=len(words) + 5,
                               num_attention_heads=2, hidden_size=64, intermediate_size=128,
                               **tiny.LEARNABLE)
    return vocab, config


# Every flag main reads, set explicitly (shared flags' defaults depend on
# which script was imported first); keywords override.
_flag_values = functools.partial(tiny.fine_tuning_flags, input_format="auto",
                                 max_seq_length=16, learning_rate=1e-3)


def run_main(**overrides):
    """run_swag.main with these flags (the rest at the tests' values), seeded
    (see tiny.run_main_seeded)."""
    tiny.run_main_seeded(run_swag.main, _flag_values(**overrides))


@pytest.fixture(scope="module")
def swag_run(tmp_path_factory):
    """Fine-tunes the tiny model on the colour task in SWAG's CSV layout,
    then evaluates, predicts and exports."""
    tmp = tmp_path_factory.mktemp("swag")
    data_dir = str(tmp / "data")
    rows = _write_task(data_dir)
    vocab, config = _model_files(tmp)
    output_dir = str(tmp / "output")
    export_dir = str(tmp / "export")
    # Stopped by a SIGTERM at step 100 and resumed (training.ResumableTrainer).
    stopped = tiny.run_main_interrupted(run_swag.main, _flag_values(
        data_dir=data_dir, vocab_file=vocab, bert_config_file=config, output_dir=output_dir,
        do_train=True, do_eval=True, do_predict=True, export_dir=export_dir), at=100)
    assert stopped.endswith("model.ckpt-100")
    return dict(data_dir=data_dir, vocab=vocab, config=config, output_dir=output_dir,
                export_dir=export_dir, rows=rows)


@pytest.mark.slow
def test_learns_the_task(swag_run):
    result = tiny.read_eval_results(os.path.join(swag_run["output_dir"], "eval_results.txt"))
    assert set(result) == {"eval_accuracy", "eval_loss", "global_step", "loss"}
    # 640 examples / batch 16 * 8 epochs.
    assert result["global_step"] == 320
    labels = [int(r[-1]) for r in swag_run["rows"]["val.csv"]]
    majority = max(labels.count(i) for i in range(4)) / len(labels)
    assert majority < 0.4
    assert result["eval_accuracy"] >= 0.9
    assert result["eval_loss"] < 0.5


@pytest.mark.slow
def test_run_record(swag_run):
    with open(os.path.join(swag_run["output_dir"], "run_config.json")) as f:
        record = json.load(f)
    assert (record["problem_type"], record["labels"]) == ("multiple_choice", None)
    assert record["flags"] == {"do_lower_case": True, "max_seq_length": 16,
                               "vocab_file": os.path.abspath(swag_run["vocab"])}


def _read_test_results(output_dir):
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
        lines = [line.rstrip("\n").split("\t") for line in f]
    return lines[0], lines[1:]


@pytest.mark.slow
def test_test_results_file(swag_run):
    header, rows = _read_test_results(swag_run["output_dir"])
    assert header == ["id", "prediction", "probability_0", "probability_1", "probability_2",
                      "probability_3"]
    test = swag_run["rows"]["test.csv"]
    assert [r[0] for r in rows] == [t[0] for t in test]          # ids, in input order
    probabilities = np.array([[float(x) for x in r[2:]] for r in rows])
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)
    assert [int(r[1]) for r in rows] == list(np.argmax(probabilities, axis=1))
    right = sum(int(r[1]) == int(t[-1]) for r, t in zip(rows, test))
    assert right >= 10       # of 12


@pytest.mark.slow
def test_dynamic_padding_predicts_the_same(swag_run, tmp_path):
    output_dir = str(tmp_path / "dynamic")
    run_main(data_dir=swag_run["data_dir"], vocab_file=swag_run["vocab"],
             bert_config_file=swag_run["config"], output_dir=output_dir, do_eval=True,
             do_predict=True, dynamic_padding=True, length_buckets=["8"],
             init_checkpoint=tf.train.latest_checkpoint(swag_run["output_dir"]))
    padded = tiny.read_eval_results(os.path.join(swag_run["output_dir"], "eval_results.txt"))
    dynamic = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    for key in ("eval_accuracy", "eval_loss"):
        assert dynamic[key] == pytest.approx(padded[key], abs=1e-5), key
    (_, rows), (_, padded_rows) = (_read_test_results(output_dir),
                                   _read_test_results(swag_run["output_dir"]))
    assert [r[:2] for r in rows] == [r[:2] for r in padded_rows]
    np.testing.assert_allclose(np.array([r[2:] for r in rows], dtype=float),
                               np.array([r[2:] for r in padded_rows], dtype=float), atol=1e-5)


@pytest.mark.slow
def test_saved_model_reproduces_the_predictions(swag_run):
    tokenizer = tokenization.FullTokenizer(swag_run["vocab"], do_lower_case=True)
    test = run_swag.read_swag_csv(os.path.join(swag_run["data_dir"], "test.csv"))
    features = [run_swag.convert_example(e, 16, tokenizer) for e in test]
    served, path = tiny.serving_ids_probabilities(swag_run["export_dir"], features)
    # Any number of choices: the first two endings only.
    two, _ = tiny.serving_ids_probabilities(swag_run["export_dir"], features, first_choices=2)
    _, rows = _read_test_results(swag_run["output_dir"])
    np.testing.assert_allclose(served, [[float(x) for x in r[2:]] for r in rows], atol=1e-5)
    # The shared scorer: two choices get the softmax of the same two scores.
    ratio = served[:, 0] / served[:, 1]
    np.testing.assert_allclose(two[:, 0] / two[:, 1], ratio, rtol=1e-4)
    # The text signature, from the same texts.
    import test_serving
    text = test_serving._run_signature(path, "serving_default", {
        "context": [e.context for e in test], "question": [e.question for e in test],
        "endings": [e.endings for e in test]})
    np.testing.assert_allclose(text["probabilities"], served, atol=1e-4)
    assert list(text["label_ids"]) == [int(r[1]) for r in rows]


@pytest.mark.slow
def test_jsonl_with_three_choices_end_to_end(tmp_path):
    """JSON Lines, three choices, no question: a short run trains, evaluates
    and predicts."""
    rng = random.Random(7)
    data_dir = tmp_path / "data"
    for name, n in (("train.jsonl", 32), ("dev.jsonl", 8), ("test.jsonl", 5)):
        lines = []
        for i in range(n):
            obj = {"id": "%s-%d" % (name[:-6], i), "context": "the day is hot .",
                   "endings": ["a %s ." % w for w in rng.sample(HOT + COLD, 3)]}
            if name != "test.jsonl":
                obj["label"] = rng.randrange(3)
            lines.append(json.dumps(obj))
        _write(data_dir / name, "\n".join(lines) + "\n")
    vocab, config = _model_files(tmp_path)
    output_dir = str(tmp_path / "out")
    run_main(data_dir=str(data_dir), vocab_file=vocab, bert_config_file=config,
             output_dir=output_dir, do_train=True, do_eval=True, do_predict=True,
             num_train_epochs=1.0)
    result = tiny.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert result["global_step"] == 2
    header, rows = _read_test_results(output_dir)
    assert header == ["id", "prediction", "probability_0", "probability_1", "probability_2"]
    assert [r[0] for r in rows] == ["test-%d" % i for i in range(5)]


# ---------------------------------------------------------------------------
# Bad input: one clear error before anything is trained or written.

@pytest.fixture
def good_inputs(tmp_path):
    data_dir = str(tmp_path / "data")
    _write_task(data_dir, num_train=4, num_dev=2, num_test=2)
    vocab, config = _model_files(tmp_path)
    return dict(data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
                output_dir=str(tmp_path / "output"), do_train=True, do_eval=True,
                do_predict=True)


@pytest.mark.parametrize("file_name, text, message", [
    ("val.csv", None, r"--do_eval needs --dev_file or a data file in --data_dir=.*"
                      r"\(val\.csv, dev\.csv, dev\.jsonl, val\.jsonl\)"),
    ("train.csv", "", r"train\.csv: empty file"),
    ("val.csv", "video-id,sent1\n", r"val\.csv, line 1: not the header of a SWAG CSV file"),
    ("test.csv", ",".join(HEADER[:-1]) + "\n0,v,1,a b,a,b,gold,c,d,e\n",
     r"test\.csv, line 2: expected 11 comma-separated columns, found 10"),
    ("val.csv", ",".join(HEADER) + "\n0,v,1,a b,a,b,gold,c,d,e,f,9\n",
     r"val\.csv, line 2: label '9' is not a choice number from 0 to 3"),
    ("val.csv", ",".join(HEADER[:-1]) + "\n0,v,1,a b,a,b,gold,c,d,e,f\n",
     r"The dev data need labels"),
    ("train.csv", b"\xff\xfe", r"train\.csv, line 1: not valid UTF-8"),
])
def test_bad_data_stops_before_anything_is_written(good_inputs, file_name, text, message):
    path = os.path.join(good_inputs["data_dir"], file_name)
    if text is None:
        os.remove(path)
    elif isinstance(text, bytes):
        _write(path, text, "wb")
    else:
        _write(path, text)
    tiny.assert_input_error(run_main, good_inputs, message)


@pytest.mark.parametrize("change, message", tiny.shared_flag_errors("/nonexistent/swag") + [
    (dict(do_train=False, do_eval=False, do_predict=False, export_dir="/tmp/x"),
     r"--export_dir: no fine-tuned checkpoint"),
    (dict(input_format="jsonl"), r"train\.csv, line 1: not valid JSON"),
    (dict(num_train_epochs=1.0, train_batch_size=64), r"make 0 training steps"),
    (dict(export_dir=__file__), r"--export_dir .*test_run_swag\.py is a file, not a "
                                r"directory"),
])
def test_bad_flags(good_inputs, change, message):
    good_inputs.update(change)
    tiny.assert_input_error(run_main, good_inputs, message)


def test_command_line_error_is_one_line(good_inputs, monkeypatch, capsys):
    os.remove(os.path.join(good_inputs["data_dir"], "test.csv"))
    err = tiny.shell_error(run_swag.main, ["run_swag.py", "--max_seq_length=16"], good_inputs,
                           monkeypatch, capsys)
    assert "ERROR: --do_predict needs --test_file or a data file in --data_dir=" in err


# ---------------------------------------------------------------------------
# As a library, with the flags never parsed.

_LIBRARY_SCRIPT = tiny.LIBRARY_PRELUDE + r"""
import run_swag

vocab_file, config_file, data_file, record_file, checkpoint = sys.argv[1:6]
examples = run_swag.read_examples(data_file)
tokenizer = tokenization.FullTokenizer(vocab_file)
run_swag.write_features(examples, 10, tokenizer, record_file)
config = modeling.BertConfig.from_json_file(config_file)
out = {}


def batch():
    input_fn = run_swag.file_based_input_fn_builder(record_file, 3, 10, is_training=False,
                                                    drop_remainder=False)
    return tf.data.make_one_shot_iterator(input_fn({"batch_size": 2})).get_next()


for name, mode in (("predict", runtime.ModeKeys.PREDICT), ("eval", runtime.ModeKeys.EVAL),
                   ("train", runtime.ModeKeys.TRAIN)):
    init = None if mode == runtime.ModeKeys.PREDICT else checkpoint
    out[name] = tiny.run_spec(
        run_swag.model_fn_builder(config, init, 1e-3, 10, 1, False, False), batch, mode,
        {"batch_size": 2}, save_to=checkpoint if mode == runtime.ModeKeys.PREDICT else None)
out["parsed"] = flags.FLAGS.is_parsed()
print("JSON" + json.dumps(out))
"""


def test_building_blocks_work_as_a_library_with_flags_unparsed(tmp_path):
    """In a fresh process that never parses flags: read JSON Lines, write
    features, and run the model_fn's PREDICT, EVAL and TRAIN specs; the loss
    and accuracy agree with the predicted probabilities."""
    data = _write(tmp_path / "dev.jsonl", "\n".join(json.dumps(o) for o in [
        {"id": "a", "context": "the sun is hot .", "endings": ["fire", "ice", "snow"],
         "label": 0},
        {"id": "b", "context": "the lake is cold .", "question": "it feels",
         "endings": ["oven", "soup", "frost"], "label": 2}]) + "\n")
    # Every word is in the vocabulary, so the three endings differ and their
    # scores are not exact ties (an argmax over ties may go either way).
    vocab, config = _model_files(tmp_path)
    out = tiny.run_library_script(_LIBRARY_SCRIPT, vocab, config, data,
                                  tmp_path / "dev.tf_record", tmp_path / "model.ckpt")
    assert not out["parsed"]
    probabilities = np.array(out["predict"]["probabilities"])
    assert probabilities.shape == (2, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    assert out["predict"]["label_ids"] == [0, 2]
    assert out["predict"]["is_real_example"] == [1, 1]
    labels = np.array([0, 2])
    expected_loss = -np.mean(np.log(probabilities[[0, 1], labels]))
    assert out["eval"]["eval_loss"] == pytest.approx(expected_loss, rel=1e-5)
    # The untrained scores are close: where the top two are within float32
    # noise of each other, the EVAL run's argmax may pick either.
    top_two = np.sort(probabilities, axis=1)[:, -2:]
    decisive = top_two[:, 1] - top_two[:, 0] > 1e-6
    correct = np.argmax(probabilities, axis=1) == labels
    assert (np.mean(correct & decisive) - 1e-6 <= out["eval"]["eval_accuracy"]
            <= np.mean(correct | ~decisive) + 1e-6)
    assert out["train"] == {"losses": [pytest.approx(expected_loss, rel=1e-5)], "step": 1}
