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
    run_classifier.export_model(config, run_classifier.ColaProcessor(), ["0", "1"], checkpoint,
                                os.path.join(home, "cola_export"), vocab, True,
                                max_seq_length=128)
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
        config, run_ner.label_list_for(["PER", "LOC"], "iob1"), "iob1", checkpoint,
        os.path.join(home, "ner_export"), labels_path, vocab, True, max_seq_length=128)
    checkpoint = _save_graph(lambda: run_swag.create_model(
        config, False, _ids(1, 4, 8), _ids(1, 4, 8), _ids(1, 4, 8), _ids(1), False),
        os.path.join(home, "swag_checkpoint", "model.ckpt"))
    swag_export = run_swag.export_model(config, checkpoint, os.path.join(home, "swag_export"),
                                        vocab, True, max_seq_length=80)

    # extract_features.py's outputs, written by its own writers.
    for writer in (extract_features.NpzWriter(os.path.join(home, "output.npz"), [-1]),
                   extract_features.TFRecordFeatureWriter(
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
             "/tmp/output.npz": os.path.join(home, "output.npz"),
             "/tmp/output.tfrecord": os.path.join(home, "output.tfrecord"),
             "/path/to/reviews": os.path.join(home, "reviews"),
             "/path/to/bert_model/vocab.txt": vocab}
    return home, paths


@pytest.mark.slow
def test_every_snippet_runs(world):
    home, paths = world
    to_run = []
    for page, index, code in SNIPPETS:
        for documented, actual in paths.items():
            code = code.replace(documented, actual)
        named = re.match(r"#\s*(\w+\.py)\b", code)
        path = os.path.join(home, named.group(1) if named else "snippet_%s_%d.py" % (
            os.path.basename(page).replace(".md", ""), index))
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        if not (named and 'if __name__ == "__main__"' in code):
            to_run.append(((page, index), path))
    assert len(to_run) >= 13, "fewer snippets than the pages hold: %d" % len(to_run)
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2",
               BERT_BASE_DIR=os.path.join(home, "uncased_L-12_H-768_A-12"))
    results = tiny.run_forked([[p] for _, p in to_run], home, env)
    failed = ["%s, Python block %d:\n%s" % (where + (output[-2000:],))
              for (where, _), (status, output) in zip(to_run, results) if status != 0]
    assert not failed, "\n\n".join(failed)
    outputs = {where: output for (where, _), (_, output) in zip(to_run, results)}
    # README's tokenizer example prints the pieces its comment shows.
    assert "['un', '##want', '##ed', ',', 'runn', '##ing']" in outputs[("README.md", 0)]
