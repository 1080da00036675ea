"""Tests of the end-to-end demo (demo.py, run_demo.sh, demo_data/)."""

import ast
import filecmp
import json
import os
import re
import subprocess
import sys

import pytest

import demo

REPO = demo.REPO
SCRIPTS = ["create_vocab.py", "create_pretraining_data.py", "run_pretraining.py",
           "run_classifier.py", "run_squad.py", "predict.py", "extract_features.py",
           "run_ner.py", "run_swag.py"]


# ---------------------------------------------------------------------------
# Shipped data.

def test_shipped_data_is_what_the_generator_writes(tmp_path):
    subprocess.run([sys.executable, os.path.join(REPO, "demo_data", "make_demo_data.py"),
                    "--output_dir", str(tmp_path)], check=True)
    generated = sorted(os.path.relpath(os.path.join(d, f), tmp_path)
                       for d, _, files in os.walk(tmp_path) for f in files)
    assert generated == ["corpus.txt", "ner/test.txt", "ner/train.txt", "ner/valid.txt",
                         "sentences.txt", "sentiment/dev.tsv", "sentiment/test.tsv",
                         "sentiment/train.tsv", "squad/dev.json", "squad/train.json",
                         "swag/test.csv", "swag/train.csv", "swag/val.csv"]
    for name in generated:
        assert filecmp.cmp(tmp_path / name, os.path.join(REPO, "demo_data", name),
                           shallow=False), name
    total = sum(os.path.getsize(os.path.join(d, f))
                for d, _, files in os.walk(os.path.join(REPO, "demo_data")) for f in files
                if "__pycache__" not in d)
    assert total < 1024 * 1024


def test_corpus_documents_have_several_sentences():
    with open(os.path.join(REPO, "demo_data", "corpus.txt"), encoding="utf-8") as f:
        documents = f.read().strip().split("\n\n")
    assert len(documents) >= 300
    assert all(len(d.split("\n")) >= 3 for d in documents)
    assert all(line.strip() for d in documents for line in d.split("\n"))


POSITIVE = {"good", "great", "lovely", "pleasant", "excellent", "wonderful", "nice",
            "perfect", "delicious", "charming"}
NEGATIVE = {"bad", "awful", "poor", "terrible", "dull", "horrible", "unpleasant",
            "disappointing", "bland", "dreadful"}


def _rule_label(sentence):
    """The documented rule, written independently of the generator: the
    clause after 'but' decides; its adjective's polarity, flipped by 'not'."""
    clause = sentence.split(" but ")[-1].split()
    adjectives = [w for w in clause if w in POSITIVE or w in NEGATIVE]
    assert len(adjectives) == 1, sentence
    positive = adjectives[0] in POSITIVE
    return "1" if positive != ("not" in clause) else "0"


@pytest.mark.parametrize("name", ["train.tsv", "dev.tsv"])
def test_sentiment_labels_follow_the_rule_and_need_more_than_keywords(name):
    with open(os.path.join(REPO, "demo_data", "sentiment", name), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines[0] == "sentence\tlabel"
    rows = [line.split("\t") for line in lines[1:]]
    assert all(_rule_label(sentence) == label for sentence, label in rows)
    # A bag of adjectives alone (ignoring "not" and "but") is not enough.
    keyword_right = sum(
        ("1" if any(w in POSITIVE for w in s.split()) and not any(
            w in NEGATIVE for w in s.split()) else "0") == label for s, label in rows)
    assert keyword_right / len(rows) < 0.8
    negated = sum(" not " in s for s, _ in rows) / len(rows)
    contrast = sum(" but " in s for s, _ in rows) / len(rows)
    assert negated > 0.15 and contrast > 0.15


@pytest.mark.parametrize("name", ["train.json", "dev.json"])
def test_squad_answers_are_at_their_offsets(name):
    with open(os.path.join(REPO, "demo_data", "squad", name), encoding="utf-8") as f:
        data = json.load(f)
    ids = set()
    questions = 0
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answer = qa["answers"][0]
                start = answer["answer_start"]
                assert paragraph["context"][start:start + len(answer["text"])] == answer["text"]
                ids.add(qa["id"])
                questions += 1
    assert len(ids) == questions > 100


@pytest.mark.parametrize("name", ["train.txt", "valid.txt", "test.txt"])
def test_ner_data_in_conll_layout_where_context_decides(name):
    """CoNLL-2003 layout (4 columns, IOB1, -DOCSTART-), read independently of
    run_ner: town names occur as places, persons' surnames and organisations,
    so the word alone does not give its tag."""
    with open(os.path.join(REPO, "demo_data", "ner", name), encoding="utf-8") as f:
        text = f.read()
    documents = text.count("-DOCSTART- -X- -X- O\n\n")
    assert documents >= 20
    tags_of = {}
    previous = "O"
    for line in text.split("\n"):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            previous = "O"
            continue
        assert len(fields) == 4, line
        tag = fields[3]
        assert tag == "O" or tag[:2] in ("I-", "B-"), line
        # IOB1: B- only right after an entity of the same type.
        if tag.startswith("B-"):
            assert previous[2:] == tag[2:], line
        tags_of.setdefault(fields[0], set()).add(tag[2:] or "O")
        previous = tag
    assert {"PER", "LOC", "ORG"} <= set.union(*tags_of.values())
    ambiguous = [w for w, types in tags_of.items() if {"PER", "LOC", "ORG"} <= types]
    assert len(ambiguous) >= 3


@pytest.mark.parametrize("name", ["train.csv", "val.csv", "test.csv"])
def test_swag_data_in_the_release_layout(name):
    import csv
    with open(os.path.join(REPO, "demo_data", "swag", name), encoding="utf-8",
              newline="") as f:
        rows = list(csv.reader(f))
    header = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
              "ending0", "ending1", "ending2", "ending3"]
    labelled = name != "test.csv"
    assert rows[0] == header + (["label"] if labelled else [])
    assert all(len(row) == len(rows[0]) for row in rows[1:])
    assert len({row[0] for row in rows[1:]}) == len(rows) - 1 >= 40
    for row in rows[1:]:
        assert row[3] == row[4] + " " + row[5]
        assert len(set(row[7:11])) == 4
    if labelled:
        labels = [int(row[11]) for row in rows[1:]]
        # The right ending's place is spread out: the majority baseline is
        # near chance.
        assert max(labels.count(i) for i in range(4)) / len(labels) < 0.32


# ---------------------------------------------------------------------------
# The commands.

def _script_flag_names(script):
    """Flags a script defines, read from its source: its flags.DEFINE_* calls
    and the shared flags it requests with shared_flags.define_flags (or, with
    shared_flags.define_settings_flags, the fields of its settings)."""
    from scriptkit import settings as settings_lib
    from scriptkit import shared_flags
    with open(os.path.join(REPO, script), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr.startswith("DEFINE_") and isinstance(node.args[0], ast.Constant):
            names.add(node.args[0].value)
        elif node.func.attr == "define_flags":
            for arg in node.args:
                if isinstance(arg, ast.Constant):
                    names.add(arg.value)
                else:
                    names.update(getattr(shared_flags, arg.attr))
            names.update(k.arg for k in node.keywords)
        elif node.func.attr == "define_settings_flags":
            names.update(settings_lib.field_names(
                getattr(__import__(script[:-3]), node.args[0].id)))
    return names


@pytest.mark.parametrize("quick", [False, True])
def test_commands_use_only_flags_their_scripts_define(quick):
    from absl import flags
    from absl.testing import flagsaver
    steps = demo.build_steps("demo_output", quick=quick)
    assert [s.script for s in steps] == SCRIPTS
    for step in steps:
        defined = _script_flag_names(step.script)
        assert len(defined) > 3, step.script
        used = {name for name, _ in step.flags}
        assert used <= defined, (step.script, used - defined)
        __import__(step.script[:-3])
    # absl parses every command (values of the right type, no unknown flag).
    for step in steps:
        with flagsaver.flagsaver():
            flags.FLAGS(step.argv())
            for name, value in step.flags:
                parsed = getattr(flags.FLAGS, name)
                if isinstance(parsed, float):
                    assert parsed == float(value), (step.script, name)
                else:
                    assert str(parsed) == str(value), (step.script, name)


def test_later_steps_read_what_earlier_steps_write():
    steps = {s.name: dict(s.flags) for s in demo.build_steps("out")}
    assert steps["pretraining_data"]["vocab_file"] == steps["vocab"]["output_file"]
    assert steps["pretraining"]["input_file"] == steps["pretraining_data"]["output_file"]
    for key in ("max_seq_length", "max_predictions_per_seq"):
        assert steps["pretraining"][key] == steps["pretraining_data"][key]
    checkpoint = os.path.join(steps["pretraining"]["output_dir"],
                              "model.ckpt-%d" % steps["pretraining"]["num_train_steps"])
    for name in ("classifier", "squad", "features", "ner", "swag"):
        assert steps[name]["init_checkpoint"] == checkpoint
        assert steps[name]["vocab_file"] == "out/vocab.txt"
    assert steps["qa_export"]["model_dir"] == steps["squad"]["export_dir"]


def test_format_command_is_one_flag_per_line():
    text = demo.format_command("python", ["x.py", "--a=1", "--b=two words"])
    assert text == ("  $ python x.py \\\n      --a=1 \\\n      '--b=two words'")


# ---------------------------------------------------------------------------
# Result helpers.

def test_majority_baseline(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t1\nb\t0\nc\t1\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\na\t0\nb\t0\nc\t1\nd\t0\n")
    assert demo.majority_baseline(tmp_path / "train.tsv", tmp_path / "dev.tsv") == ("1", 0.25)


def test_count_tfrecords(tmp_path):
    import tensorflow as tf
    path = str(tmp_path / "x.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for payload in (b"", b"abc", b"x" * 1000):
            writer.write(payload)
    assert demo.count_tfrecords(path) == 3


def test_output_dir_of_someone_else_is_left_alone(tmp_path, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    assert demo.main(["--output_dir", str(tmp_path)]) == 1
    assert "not empty and was not made by the demo" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["precious.txt"]


def test_output_dir_of_an_earlier_demo_is_cleared(tmp_path):
    out = tmp_path / "out"
    assert demo.prepare_output_dir(str(out)) is None
    (out / "pretraining").mkdir()
    (out / "pretraining" / "checkpoint").write_text("old")
    assert demo.prepare_output_dir(str(out)) is None
    assert sorted(os.listdir(out)) == [demo.MARKER, "logs"]


def test_a_failing_step_shows_the_end_of_its_log(tmp_path, capsys):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('step 9: loss = 1.0')\nprint('noise')\n"
                      "sys.stderr.write('ERROR: --a: bad value 1\\n')\nsys.exit(3)\n")
    (tmp_path / "logs").mkdir()
    step = demo.Step("fails", "Failing", str(script), [("a", 1)], "About.")
    assert demo.run_step(step, 1, 1, str(tmp_path), "python") == 3
    printed = capsys.readouterr().out
    assert "  $ python %s \\\n      --a=1" % script in printed
    assert "      | step 9: loss = 1.0\n" in printed  # streamed: an interesting line
    assert "| noise" not in printed
    assert "failed (exit status 3)" in printed
    assert printed.rstrip().endswith("ERROR: --a: bad value 1")
    with open(tmp_path / "logs" / "fails.log") as f:
        assert f.read() == "step 9: loss = 1.0\nnoise\nERROR: --a: bad value 1\n"


@pytest.mark.parametrize("raw, shown", [
    # absl's C++-style prefix and tf.logging's, as the scripts' logs hold them.
    ("I1204 13:47:16.343602 140022938340224 training_progress.py:211] step 1 of 20: loss = 6.7146, "
     "29.12 examples/s, 932 tokens/s\n", True),
    ("INFO:tensorflow:step 57 of 400: loss = 4.1022, 301.20 examples/s, 9638 tokens/s, "
     "ETA 1 min 05 s\n", True),
    ("I1204 13:48:35.979725 140289261882240 fine_tuning.py:287] ***** Test results *****\n",
     True),
    ("I1204 13:49:00.981814 140572780645248 training_progress.py:28] ***** Running prediction "
     "*****\n", True),
    ("I1204 13:49:00.975898 140572780645248 fine_tuning.py:290]   eval_accuracy = 0.35833332\n",
     True),
    ("I1204 13:49:00.977731 140572780645248 input_pipeline.py:242] *** Example ***\n", False),
    ("I1204 13:48:49.076300 140572780645248 monitored_session.py:240] Graph was finalized.\n",
     False),
])
def test_console_shows_every_progress_line_and_section_header(raw, shown):
    """The scripts log training progress about every --log_every_seconds
    (whatever the step); each such line, and each section's header before
    its "key = value" lines, reaches the console, the rest only the log."""
    message = demo._console_line(raw)
    assert message == (raw.split("] ", 1)[-1].split(":tensorflow:")[-1].rstrip("\n")
                       if shown else None)


def test_run_demo_sh_sets_up_then_runs_demo():
    with open(os.path.join(REPO, "run_demo.sh")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert "./scripts/setup_env.sh run" in lines
    assert lines[-1] == 'exec .venv/bin/python demo.py "$@"'
    assert os.access(os.path.join(REPO, "run_demo.sh"), os.X_OK)


# ---------------------------------------------------------------------------
# End to end.

@pytest.mark.slow
def test_quick_demo_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    result = subprocess.run([sys.executable, "demo.py", "--quick", "--output_dir", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    stdout = result.stdout
    for path in ["vocab.txt", "bert_config.json", "pretraining_data.tfrecord",
                 "pretraining/eval_results_at_start.txt", "pretraining/eval_results.txt",
                 "classifier/eval_results.txt", "squad/predictions.json",
                 "squad/eval_results.json", "features.jsonl", "ner/eval_results.txt",
                 "ner/eval_predictions.txt", "ner/test_predictions.txt",
                 "swag/eval_results.txt", "swag/test_results.tsv", "summary.txt"]:
        assert (out / path).is_file(), path
    assert sorted(os.listdir(out / "logs")) == sorted(
        s.name + ".log" for s in demo.build_steps("x"))
    # Each step's log ends by naming every file it wrote for the user, once
    # (eval results with their headline metric), and holds no false warning.
    named = {}
    for log_name in os.listdir(out / "logs"):
        with open(out / "logs" / log_name, encoding="utf-8") as f:
            text = f.read()
        assert "freshly initialised" not in text, log_name
        wrote = re.findall(r"\] Wrote (\S+?)(?:: (.*))?$", text, flags=re.M)
        assert len(wrote) == len({path for path, _ in wrote}), (log_name, wrote)
        named.update(wrote)
    for path in ["vocab.txt", "pretraining_data.tfrecord", "pretraining/eval_results.txt",
                 "classifier/eval_results.txt", "classifier/run_config.json",
                 "squad/predictions.json", "squad/eval_results.json", "features.jsonl",
                 "ner/eval_results.txt", "ner/eval_predictions.txt", "ner/test_predictions.txt",
                 "ner/ner_labels.json", "swag/eval_results.txt", "swag/test_results.tsv"]:
        assert str(out / path) in named, (path, sorted(named))
    assert named[str(out / "classifier/eval_results.txt")].startswith("eval_accuracy = ")
    assert named[str(out / "ner/eval_results.txt")].startswith("eval_f1 = ")
    assert named[str(out / "pretraining/eval_results.txt")].startswith("masked_lm_accuracy = ")
    # Each training step shows its progress lines (the first step's at
    # least), and results come under their headers.
    assert len(re.findall(r"\n      \| step 1 of \d+: loss = ", stdout)) == 5
    ner = stdout[stdout.index("(run_ner.py)"):stdout.index("(run_swag.py)")]
    for header in ("Eval results", "Test results"):
        assert re.search(r"\| \*{5} %s \*{5}\n      \|   eval_accuracy = " % header, ner)
    swag = stdout[stdout.index("(run_swag.py)"):]
    assert "| ***** Running prediction *****\n      |   Num examples = 40" in swag
    # Every command is printed before it runs.
    for script in SCRIPTS:
        assert re.search(r"\$ \S*python\S* %s \\\n      --" % re.escape(script), stdout), script
    # The summary, printed and saved.
    with open(out / "summary.txt", encoding="utf-8") as f:
        summary = f.read()
    assert summary.strip() in stdout
    assert "masked-LM accuracy" in summary and "majority-class baseline" in summary
    assert "exact match" in summary
    # The exported SQuAD model answered the dev questions from raw text.
    with open(out / demo.ANSWERS_FILE, encoding="utf-8") as f:
        answers = [json.loads(line) for line in f]
    assert len(answers) == demo.NUM_QUESTIONS
    for answer, (question, context, _) in zip(answers, demo.dev_questions()):
        assert answer["answer"] in context, (question, answer)
        if answer["answer"]:
            assert context[answer["answer_start"]:answer["answer_end"]] == answer["answer"]
    assert "dev questions answered as the gold answer by the export" in summary
    assert "dev entity F1" in summary and "chance 0.250" in summary
    with open(out / "bert_config.json") as f:
        vocab_size = json.load(f)["vocab_size"]
    with open(out / "vocab.txt", encoding="utf-8") as f:
        assert vocab_size == len(f.read().splitlines())
    with open(out / "features.jsonl", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 4


@pytest.mark.parametrize("quick, check_passes, status", [
    (False, True, 0), (False, False, 1), (True, False, 0)])
def test_exit_status_follows_the_checks(tmp_path, monkeypatch, capsys, quick, check_passes,
                                        status):
    """A full demo whose own check fails ("[no]") exits with status 1 and
    says which; --quick trains too little for the checks to count."""
    monkeypatch.setattr(demo, "run_step", lambda *args: 0)
    monkeypatch.setattr(demo, "write_bert_config", lambda *args: dict(
        vocab_size=10, num_hidden_layers=1, hidden_size=8, num_attention_heads=1))
    monkeypatch.setattr(demo, "summarize", lambda steps, out_abs, quick: (
        ["summary"], {"classifier beat the majority-class baseline": check_passes}))
    argv = ["--output_dir", str(tmp_path / "out")] + (["--quick"] if quick else [])
    assert demo.main(argv) == status
    err = capsys.readouterr().err
    assert ("ERROR: the demo's check(s) failed: classifier beat the majority-class "
            "baseline" in err) == (status == 1)
