"""Every Python snippet of README.md and docs/ runs as the pages say.

The snippets are run in a folder laid out as they expect: tiny models and
files stand under the paths they name (a random-weight BERT in
`uncased_L-12_H-768_A-12/`, SavedModels of a classifier, a tagger and a
multiple-choice model, feature files, SQuAD files), each snippet saved as a
file there and run with the repository on PYTHONPATH, as docs/library.md
tells a reader to. A snippet that starts with `# <name>.py` is a file the
page tells the reader to write: it is written under that name (so later
snippets can import it) and run too, unless it is a script of flags (`if
__name__ == "__main__"`), whose commands tests/test_readme.py checks.
"""

import glob
import json
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import extract_features
import modeling
import run_classifier
import run_ner
import run_swag
import tiny
from scriptkit import ner_tags
from scriptkit import feature_writers
from scriptkit import serving

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", flags=re.S)


def _snippets():
    """(page, index on the page, code) of every Python block."""
    pages = ["README.md"] + sorted(
        os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    snippets = []
    for page in pages:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            blocks = PYTHON_BLOCK.findall(f.read())
        snippets.extend((page, i, code) for i, code in enumerate(blocks))
    return snippets


SNIPPETS = _snippets()


# Checks of a documented output (the comment) against the line the snippet
# printed last; `world` holds the stand-in model's hidden size.

def _shows(comment, line, world):
    """The comment is the printed line."""
    return line == comment


def _shape_with_world_width(comment, line, world):
    """"(1, 128, 768): ..." is the printed shape of BERT-Base's output; the
    stand-in model has the world's hidden size in place of 768."""
    shape = re.match(r"\(([\d, ]+)\)", comment).group(1).split(", ")
    shape[-1] = str(world["hidden_size"]) if shape[-1] == "768" else shape[-1]
    return line.startswith("(%s) " % ", ".join(shape))


# A number as NumPy 1 and 2 print it inside a list or dict (2: np.int64(3)).
_NUMBER = r"(?:np\.\w+\()?([-\d.e]+)\)?"


def _named_values(comment, line, world):
    """"f1 0.5, accuracy 0.75, ..." are entries of the printed dict."""
    pairs = re.findall(r"(\w+) ([-\d.]+)", comment)
    found = {key: float(value) for key, value in re.findall(r"'(\w+)': " + _NUMBER, line)}
    return bool(pairs) and all(found.get(key) == float(value) for key, value in pairs)


def _first_value(comment, line, world):
    """"3 steps of ..." is the first entry of the printed list."""
    match = re.match(r"\[" + _NUMBER + ", ", line)
    return bool(match) and match.group(1) == comment.split()[0]


def _array_shapes(comment, line, world):
    """"[1, 4], [1]" are the shapes of the two arrays printed."""
    arrays = re.fullmatch(r"(\[.*\]) (\[.*\])", line)
    if not arrays:
        return False
    # NumPy prints no commas: "[[0.2 0.8]] [1]".
    shapes = [list(np.array(json.loads(re.sub(r"(?<=[\d.\]])\s+(?=[-\d\[])", ", ",
                                              text))).shape) for text in arrays.groups()]
    return shapes == [[int(n) for n in re.findall(r"\d+", part)]
                      for part in comment.split("], [")]


# The outputs the pages show, as a comment after the line that prints them
# (or after an assignment, whose value the test prints): (page, that line,
# code added at the end of the snippet to print it, how the output is
# compared). Each `print(...)  # <output>` line of the snippets is here.
DOCUMENTED_OUTPUTS = [
    ("README.md", 'print(tokenizer.tokenize("UNwant\\u00E9d,running"))', "", _shows),
    ("docs/library.md", 'tokens = tokenizer.tokenize("UNwant\\u00E9d,running")',
     "print(tokens)", _shows),
    ("docs/library.md", "print(vectors.shape, vectors[0, 0, :4])", "", _shape_with_world_width),
    ("docs/library.md", "print(session.run([tf.train.get_global_step(), weights]))", "",
     _first_value),
    ("docs/ner.md", "print(ner_tags.evaluate_tags(gold, predicted))", "", _named_values),
    ("docs/serving.md", 'print(out["probabilities"].numpy(), out["label_ids"].numpy())', "",
     _array_shapes),
]


def _documented(page, code):
    """[(documented output, code to add, check)] of the snippet `code` of
    `page`."""
    found = []
    for line in code.splitlines():
        statement, _, comment = line.partition("  # ")
        for where, shown, extra, check in DOCUMENTED_OUTPUTS:
            if where == page and statement.strip() == shown:
                found.append((comment.strip(), extra, check))
    return found


def test_every_printed_documented_output_is_compared():
    """A snippet line that prints something and shows it in a comment has
    its entry in DOCUMENTED_OUTPUTS, and every entry matches one line."""
    printed = [(page, line.partition("  # ")[0].strip()) for page, _, code in SNIPPETS
               for line in code.splitlines()
               if line.lstrip().startswith("print(") and "  # " in line]
    listed = [(page, shown) for page, shown, _, _ in DOCUMENTED_OUTPUTS]
    assert not set(printed) - set(listed), set(printed) - set(listed)
    for page, shown, extra, _ in DOCUMENTED_OUTPUTS:
        codes = [code for p, _, code in SNIPPETS
                 if p == page and [line for line in code.splitlines()
                                   if line.partition("  # ")[0].strip() == shown]]
        assert len(codes) == 1, (page, shown)
        # What the test compares is the snippet's last line printed.
        prints = [line.partition("  # ")[0].strip() for line in codes[0].splitlines()
                  if line.lstrip().startswith("print(")]
        assert extra or prints[-1] == shown, (page, shown)
# Words the snippets tokenize, and the pieces of README's example.
WORDS = ["un", "##want", "##ed", ",", "runn", "##ing", "the", "cat", "sat", "on", "mat",
         ".", "a", "woman", "piano", "she", "great", "film", "bad", "plot"]


def _save_graph(build, path):
    """Builds a model with `build()` in a new graph and saves its random
    weights to the checkpoint `path`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.Graph().as_default():
        tf.train.get_or_create_global_step()
        build()
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, path, write_meta_graph=False)
    return path


def _ids(*shape):
    return tf.placeholder(tf.int32, list(shape))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The folder the snippets run in, and the paths they name -> files in it."""
    home = str(tmp_path_factory.mktemp("docs"))
    model_dir = os.path.join(home, "uncased_L-12_H-768_A-12")
    os.makedirs(model_dir)
    vocab = tiny.write_vocab(model_dir, WORDS)
    tiny.write_vocab(home, WORDS)
    # The full vocabulary size: snippets use real BERT ids such as 2023.
    config_file = tiny.write_config(model_dir, 30522, max_position_embeddings=128)
    config = modeling.BertConfig.from_json_file(config_file)
    _save_graph(lambda: modeling.BertModel(config, False, _ids(1, 8)),
                os.path.join(model_dir, "bert_model.ckpt"))

    # A classifier (CoLA-like), its export and its training run's record.
    checkpoint = _save_graph(lambda: run_classifier.create_model(
        config, False, _ids(1, 8), _ids(1, 8), _ids(1, 8), _ids(1), 2, False),
        os.path.join(home, "cola_checkpoint", "model.ckpt"))
    run_classifier.export_model(serving.ExportSource(
        config, checkpoint, os.path.join(home, "cola_export"), vocab, True, max_seq_length=128),
        run_classifier.ColaProcessor(), ["0", "1"])
    os.makedirs(os.path.join(home, "cola_output"))
    with open(os.path.join(home, "cola_output", "run_config.json"), "w") as f:
        json.dump({"script": "run_classifier.py",
                   "problem_type": "single_label_classification", "labels": ["0", "1"],
                   "flags": {"task_name": "cola", "do_lower_case": True,
                             "max_seq_length": 128, "vocab_file": vocab},
                   "bert_config": config.to_dict()}, f)

    # A tagger and a multiple-choice model (at --max_seq_length=80, the
    # length docs/swag.md recommends), exported.
    labels_path = os.path.join(home, "ner_labels.json")
    run_ner.write_labels(labels_path, "iob1", ["PER", "LOC"])
    checkpoint = _save_graph(lambda: run_ner.create_model(
        config, False, _ids(1, 8), _ids(1, 8), _ids(1, 8), 5, False),
        os.path.join(home, "ner_checkpoint", "model.ckpt"))
    ner_export = run_ner.export_model(
        serving.ExportSource(config, checkpoint, os.path.join(home, "ner_export"), vocab, True,
                             max_seq_length=128),
        ner_tags.label_list_for(["PER", "LOC"], "iob1"), "iob1", labels_path)
    checkpoint = _save_graph(lambda: run_swag.create_model(
        config, False, _ids(1, 4, 8), _ids(1, 4, 8), _ids(1, 4, 8), _ids(1), False),
        os.path.join(home, "swag_checkpoint", "model.ckpt"))
    swag_export = run_swag.export_model(serving.ExportSource(
        config, checkpoint, os.path.join(home, "swag_export"), vocab, True, max_seq_length=80))
    # A sentence-embedding export of the pre-trained stand-in.
    embedding_export = extract_features.export_embeddings(serving.ExportSource(
        config, os.path.join(model_dir, "bert_model.ckpt"), os.path.join(home, "minilm_export"),
        vocab, True), normalize=True)

    # extract_features.py's outputs, written by its own writers.
    for writer in (feature_writers.NpzWriter(os.path.join(home, "output.npz"), [-1]),
                   feature_writers.TFRecordFeatureWriter(
                       os.path.join(home, "output.tfrecord"), [-1])):
        for index, tokens in enumerate([["[CLS]", "the", "cat", "[SEP]"], ["[CLS]", "[SEP]"]]):
            writer.write(index, tokens, [np.ones((len(tokens), 32), np.float32)])
        writer.close()

    # A SQuAD 2.0 file and a run's predictions.
    question = {"id": "q1", "question": "who sat?", "is_impossible": False,
                "answers": [{"text": "the cat", "answer_start": 0}]}
    with open(os.path.join(home, "dev-v2.0.json"), "w") as f:
        json.dump({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
            {"context": "the cat sat on the mat.", "qas": [question]}]}]}, f)
    os.makedirs(os.path.join(home, "out"))
    for name, value in (("predictions.json", {"q1": "the cat"}),
                        ("null_odds.json", {"q1": -1.0})):
        with open(os.path.join(home, "out", name), "w") as f:
            json.dump(value, f)

    # docs/own_task.md's review data.
    os.makedirs(os.path.join(home, "reviews"))
    with open(os.path.join(home, "reviews", "train.tsv"), "w") as f:
        f.write("positive\tgreat film\nnegative\tbad plot\n")

    paths = {"/tmp/cola_export": os.path.join(home, "cola_export"),
             "/tmp/cola_output": os.path.join(home, "cola_output"),
             "/tmp/conll_export/1700000000": ner_export,
             "/tmp/swag_export/1700000000": swag_export,
             "/tmp/minilm_export/1700000000": embedding_export,
             "/tmp/output.npz": os.path.join(home, "output.npz"),
             "/tmp/output.tfrecord": os.path.join(home, "output.tfrecord"),
             "/path/to/reviews": os.path.join(home, "reviews"),
             "/path/to/bert_model/vocab.txt": vocab}
    return home, paths


@pytest.mark.slow
def test_every_snippet_runs(world):
    home, paths = world
    to_run = []
    outputs_of = {}  # (page, index) -> _documented
    for page, index, code in SNIPPETS:
        for documented, actual in paths.items():
            code = code.replace(documented, actual)
        named = re.match(r"#\s*(\w+\.py)\b", code)
        path = os.path.join(home, named.group(1) if named else "snippet_%s_%d.py" % (
            os.path.basename(page).replace(".md", ""), index))
        outputs_of[(page, index)] = _documented(page, code)
        with open(path, "w", encoding="utf-8") as f:
            f.write(code + "".join(extra + "\n" for _, extra, _ in outputs_of[(page, index)]
                                   if extra))
        if not (named and 'if __name__ == "__main__"' in code):
            to_run.append(((page, index), path))
    assert len(to_run) >= 13, "fewer snippets than the pages hold: %d" % len(to_run)
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2",
               BERT_BASE_DIR=os.path.join(home, "uncased_L-12_H-768_A-12"))
    results = tiny.run_forked([[p] for _, p in to_run], home, env)
    failed = ["%s, Python block %d:\n%s" % (where + (output[-2000:],))
              for (where, _), (status, output) in zip(to_run, results) if status != 0]
    assert not failed, "\n\n".join(failed)
    # The outputs the pages show, where the snippets print them (the
    # stand-in models' values aside).
    world = {"hidden_size": modeling.BertConfig.from_json_file(os.path.join(
        home, "uncased_L-12_H-768_A-12", "bert_config.json")).hidden_size}
    compared = 0
    for (where, _), (_, output) in zip(to_run, results):
        for comment, _, check in outputs_of[where]:
            # The documented line is the snippet's last print.
            last = output.strip().splitlines()[-1]
            assert check(comment, last, world), "%s, Python block %d shows %r; it printed:\n%s" % (
                where + (comment, output[-2000:]))
            compared += 1
    assert compared == len(DOCUMENTED_OUTPUTS)
