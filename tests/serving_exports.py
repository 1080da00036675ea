"""Writes a tiny export of every task that has one, and what its
serving_default answers, for tests that load the exports elsewhere.

    python tests/serving_exports.py OUT_DIR

runs in the environment that makes the exports (the newest TensorFlow) and
writes OUT_DIR/<task>/ (a timestamped SavedModel) and OUT_DIR/answers.json:
{"tensorflow": version, "tasks": {task: {"export": folder, "inputs": name ->
list, "outputs": name -> list}}}. tests/test_colab.py loads them with the
TensorFlow of TF Serving's current release and compares.

A new export is one more entry of EXPORTS: a function (folder, model files)
-> (SavedModel folder, serving_default's inputs). Those of EXPLAINED take
`explain_steps` too: 0 (the default here, where the explain signature is
not what a test is about: it triples an export's graph) or the points of
the explain signature's integral; those of PRECISIONS take `precision`
(serving.EXPORT_PRECISIONS).
"""

import json
import os
import pathlib
import sys

import numpy as np


def _classifier(processor_name, labels, checkpoint="classifier", windows=None,
                multi_label=False):
    """A run_classifier.py export of the processor `processor_name`."""
    def export(folder, files, explain_steps=0):
        import modeling
        import run_classifier
        import test_serving
        from scriptkit import long_inputs
        from scriptkit import serving
        processor = getattr(run_classifier, processor_name)()
        processor.is_multi_label = multi_label
        config = modeling.BertConfig.from_json_file(files["config"])
        path = run_classifier.export_model(
            serving.ExportSource(config, files[checkpoint], str(folder), files["vocab"], True,
                                 max_seq_length=test_serving.MAX_SEQ_LENGTH),
            processor, labels, windows=windows and long_inputs.Windows(*windows),
            explain_steps=explain_steps)
        texts = {"text_a": ["The film is good.", "中文 film", "the film " * 20],
                 "text_b": ["Café Crème!", "", "good " * 20]}
        return path, texts if processor.text_pairs else {"text_a": texts["text_a"]}
    return export


def _ner(folder, files, explain_steps=0, precision="fp32"):
    import modeling
    import run_ner
    from scriptkit import ner_tags
    from scriptkit import serving
    config = modeling.BertConfig.from_json_file(files["config"])
    labels_path = str(folder) + "_" + run_ner.LABELS_FILE
    run_ner.write_labels(labels_path, "iob2", ["PER", "LOC"])
    path = run_ner.export_model(
        serving.ExportSource(config, files["ner"], str(folder), files["vocab"], True,
                             max_seq_length=16, precision=precision),
        ner_tags.label_list_for(["PER", "LOC"], "iob2"), "iob2", labels_path, doc_stride=4,
        explain_steps=explain_steps)
    return path, {"text": ["Jack went to Kingston!", "istanbul " * 24]}


def _swag(folder, files, precision="fp32"):
    import modeling
    import run_swag
    import test_serving
    from scriptkit import serving
    config = modeling.BertConfig.from_json_file(files["config"])
    path = run_swag.export_model(serving.ExportSource(
        config, files["swag"], str(folder), files["vocab"], True,
        max_seq_length=test_serving.MAX_SEQ_LENGTH, precision=precision))
    return path, {"context": ["The film", "Jack went"], "question": ["It", "to"],
                  "endings": [["ends well.", "ends badly.", "is good.", "goes on."],
                              ["Kingston.", "the film.", "中文.", "ab"]]}


def _embeddings(folder, files, precision="fp32"):
    import extract_features
    import modeling
    import test_serving
    from scriptkit import serving
    config = modeling.BertConfig.from_json_file(files["config"])
    path = extract_features.export_embeddings(
        serving.ExportSource(config, files["classifier"], str(folder), files["vocab"], True,
                             max_seq_length=test_serving.MAX_SEQ_LENGTH, precision=precision),
        pooling="mean", normalize=True, text_pairs=True)
    return path, {"text": ["The film is good.", "中文 film", "the film " * 20],
                  "text_b": ["Café Crème!", "", "good " * 20]}


def _squad(folder, files, explain_steps=0, precision="fp32"):
    import modeling
    import run_squad
    from scriptkit import serving
    from scriptkit import squad_export
    config = modeling.BertConfig.from_json_file(files["config"])
    export_settings = {"max_seq_length": 24, "doc_stride": 6, "max_query_length": 6,
                       "n_best_size": 3, "max_answer_length": 5,
                       "version_2_with_negative": True, "null_score_diff_threshold": 0.0}
    path = squad_export.export_model(
        run_squad.create_model,
        serving.ExportSource(config, files["squad"], str(folder), files["vocab"], True,
                             max_seq_length=24, precision=precision),
        export_settings, explain_steps=explain_steps)
    return path, {"question": ["Where is the film?", "what"],
                  "context": ["The film went to Kingston! " * 6, "中文 cafe ends well."]}


def _fill_mask(folder, files, precision="fp32"):
    from scriptkit import fill_mask_export
    import modeling
    import run_pretraining
    from scriptkit import serving
    config = modeling.BertConfig.from_json_file(files["config"])
    path = fill_mask_export.export_fill_mask(
        serving.ExportSource(config, files["fill_mask"], str(folder), files["vocab"], True,
                             max_seq_length=16, precision=precision),
        run_pretraining.get_masked_lm_output, top_k=3)
    return path, {"text": ["The film is [MASK].", "[MASK] went to [MASK]!", "no mask"]}


# task -> export function. Each runs in a graph of its own; the modules of
# the project are imported there, so that this list is read without
# TensorFlow.
EXPORTS = {
    "classifier": _classifier("MrpcProcessor", ["0", "1"]),
    "classifier_windows": _classifier("MrpcProcessor", ["0", "1"], windows=(8, 3, "max")),
    "multi_label": _classifier("ColaProcessor", ["sport", "news"], multi_label=True),
    "regression": _classifier("StsbProcessor", None, checkpoint="regression"),
    "ner": _ner,
    "swag": _swag,
    "sentence_embeddings": _embeddings,
    "question_answering": _squad,
    "fill_mask": _fill_mask,
}
# The tasks whose exports can explain their answers (explain_steps).
EXPLAINED = ("classifier", "multi_label", "regression", "ner", "question_answering")
# Those whose export functions take `precision` too (--export_precision).
PRECISIONS = ("ner", "swag", "sentence_embeddings", "question_answering", "fill_mask")


def as_json(array):
    """A signature's output (NumPy) as JSON: text decoded."""
    if array.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array).tolist()
    return array.tolist()


def write_files(folder):
    """The vocabulary, config and every task's checkpoint (random weights),
    in `folder` (a pathlib.Path): the `files` of the export functions."""
    import tensorflow.compat.v1 as tf

    import modeling
    import run_classifier
    import run_pretraining
    import run_squad
    import test_serving
    folder.mkdir(parents=True, exist_ok=True)
    files = test_serving.write_model_files(folder)
    files["regression"] = test_serving._random_checkpoint(
        str(folder / "regression.ckpt"), files["config"],
        lambda c: run_classifier.create_model(
            c, False, *[tf.zeros([1, 8], tf.int32)] * 3, tf.zeros([1], tf.float32), 1, False,
            is_regression=True))
    files["squad"] = test_serving._random_checkpoint(
        str(folder / "squad.ckpt"), files["config"],
        lambda c: run_squad.create_model(c, False, *[tf.zeros([1, 8], tf.int32)] * 3, False))

    def masked_lm(c):
        model = modeling.BertModel(c, False, *[tf.zeros([1, 8], tf.int32)] * 3)
        ids = tf.zeros([1, 2], tf.int32)
        run_pretraining.get_masked_lm_output(c, model.get_sequence_output(),
                                             model.get_embedding_table(), ids, ids,
                                             tf.zeros([1, 2]))

    files["fill_mask"] = test_serving._random_checkpoint(
        str(folder / "fill_mask.ckpt"), files["config"], masked_lm)
    return files


def main(out_dir):
    import tensorflow.compat.v1 as tf

    import test_serving
    from scriptkit import attributions
    out = pathlib.Path(out_dir)
    files = write_files(out / "model")
    tasks = {}
    for task, export in EXPORTS.items():
        # With the explain signature, as the scripts export by default: the
        # other TensorFlow loads its graph too.
        explain = {"explain_steps": attributions.DEFAULT_STEPS} if task in EXPLAINED else {}
        with tf.Graph().as_default():
            path, inputs = export(out / task, files, **explain)
        outputs = test_serving._run_signature(path, "serving_default", inputs)
        tasks[task] = {"export": path, "inputs": inputs,
                       "outputs": {name: as_json(np.asarray(value))
                                   for name, value in outputs.items()}}
    with open(out / "answers.json", "w", encoding="utf-8") as f:
        json.dump({"tensorflow": tf.__version__, "tasks": tasks}, f, ensure_ascii=False)


if __name__ == "__main__":
    ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
    from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
    main(sys.argv[1])
