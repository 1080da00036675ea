"""--export_precision=int8: the task model written as ONNX from its
checkpoint (onnx_model.py), checked against the TensorFlow model, and an
int8 export served by predict.py through ONNX Runtime (exported_model.py),
checked against the export's own ONNX model and its fp32 graph.

Needs requirements-onnx.txt; skipped without it, unless BERT_ONNX_TESTS=
required (.ci/run's latest leg, which installs it)."""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import modeling
import extract_features
import run_classifier
import run_ner
import run_pretraining
import run_squad
import run_swag
import serving_exports
import test_predict
import test_run_classifier
import test_serving
import tiny
import tokenization
from scriptkit import errors
from scriptkit import exported_model
from scriptkit import fill_mask_export
from scriptkit import onnx_model
from scriptkit import runtime
from scriptkit import serving

TEXTS = {"text_a": [a for a, _ in test_serving.PAIRS], "text_b": [b for _, b in test_serving.PAIRS]}


def _require_onnx():
    try:
        onnx_model.require()
    except ImportError as e:
        if os.environ.get("BERT_ONNX_TESTS") == "required":
            pytest.fail("%s (BERT_ONNX_TESTS=required)" % e)
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    _require_onnx()
    return test_serving.write_model_files(tmp_path_factory.mktemp("onnx"))


def _features(rows=3, length=9, seed=0):
    """Id features with padding and two segments, as the scripts pack them."""
    rng = np.random.RandomState(seed)
    lengths = [length] + list(rng.randint(3, length, rows - 1))
    mask = np.array([[1] * n + [0] * (length - n) for n in lengths], np.int32)
    segments = np.array([[0] * (n // 2) + [1] * (n - n // 2) + [0] * (length - n)
                         for n in lengths], np.int32)
    ids = rng.randint(4, len(test_serving.WORDS), (rows, length)).astype(np.int32) * mask
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def _tf_classifier(config, checkpoint, features, kind):
    """run_classifier.create_model's outputs (PREDICT) on `features`."""
    regression = kind == "regression"
    with tf.Graph().as_default():
        inputs = [tf.constant(features[name]) for name in serving.FEATURE_NAMES]
        rows = len(features["input_ids"])
        labels = (tf.zeros([rows]) if regression else tf.zeros([rows, 2], tf.int32)
                  if kind == "sigmoid" else tf.zeros([rows], tf.int32))
        _, _, logits, outputs = run_classifier.create_model(
            config, False, *inputs, labels, 1 if regression else 2, False,
            is_regression=regression,
            multi_label=kind == "sigmoid")
        with tf.Session() as session:
            tf.train.Saver().restore(session, checkpoint)
            return session.run({"scores" if regression else "probabilities": outputs,
                                "logits": logits})


def _written(tmp_path, config, checkpoint, head, argument=None, rank=2):
    """(session, outputs on `features` as one batch) of the fp32 ONNX model
    `onnx_model.write_model` writes; call the second with the features."""
    path = str(tmp_path / "model.onnx")
    import onnx
    onnx.save(onnx_model.write_model(config, checkpoint, head, argument, rank=rank), path)
    session = onnx_model.session(path)
    return session, lambda features: _outputs(session, features)


def _outputs(session, features):
    """name -> value of every output of `session` on `features`."""
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, features)))


@pytest.mark.parametrize("kind,act", [("softmax", "gelu"), ("sigmoid", "gelu_exact"),
                                      ("regression", "relu")])
def test_onnx_model_computes_what_the_tensorflow_model_does(files, tmp_path, kind, act):
    """fp32 ONNX, in ONNX Runtime, equals the TensorFlow model to float
    rounding: each head, each activation, padded rows and two segments."""
    config = modeling.BertConfig.from_json_file(files["config"])
    config.hidden_act = act
    checkpoint = files["classifier"]
    if kind == "regression":
        checkpoint = test_serving._random_checkpoint(
            str(tmp_path / "regression.ckpt"), files["config"],
            lambda c: run_classifier.create_model(c, False, *[tf.zeros([1, 8], tf.int32)] * 3,
                                                  tf.zeros([1]), 1, False, is_regression=True))
    features = _features()
    expected = _tf_classifier(config, checkpoint, features, kind)
    session, run = _written(tmp_path, config, checkpoint, "classifier", kind)
    got = run(features)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=2e-5, err_msg=name)
    # Row by row, each cut to its pieces: the same outputs.
    rows = onnx_model.run_rows(session, features)
    for name, value in expected.items():
        np.testing.assert_allclose(rows[name], value, atol=2e-5, err_msg=name)
    assert {k: v.shape for k, v in onnx_model.run_rows(session, {
        k: v[:0] for k, v in features.items()}).items()} == {
            k: (0,) + v.shape[1:] for k, v in expected.items()}


def test_an_activation_without_an_onnx_form_is_named(files):
    config = modeling.BertConfig.from_json_file(files["config"])
    config.hidden_act = "swish"
    with pytest.raises(ValueError, match="hidden_act 'swish' has no ONNX form"):
        onnx_model.write_model(config, files["classifier"], "classifier", "softmax")


@pytest.fixture(scope="module")
def exports(files, tmp_path_factory):
    """{precision: SavedModel folder} of the tiny pair classifier (no
    explain signature)."""
    tmp = tmp_path_factory.mktemp("onnx_exports")
    config = modeling.BertConfig.from_json_file(files["config"])
    return {precision: run_classifier.export_model(
        serving.ExportSource(config, files["classifier"], str(tmp / precision),
                             files["vocab"], True, max_seq_length=test_serving.MAX_SEQ_LENGTH,
                             precision=precision),
        run_classifier.MrpcProcessor(), ["0", "1"], explain_steps=0)
        for precision in serving.EXPORT_PRECISIONS}


def _config(export_dir):
    with open(os.path.join(export_dir, "assets", serving.CONFIG_ASSET)) as f:
        return json.load(f)


def test_int8_export_records_its_model_and_fp32_is_unchanged(exports):
    assert _config(exports["int8"]) == dict(_config(exports["fp32"]), precision="int8",
                                            onnx_model=serving.ONNX_FILE)
    assert "precision" not in _config(exports["fp32"])
    assert os.listdir(os.path.join(exports["fp32"], "assets.extra")) == [
        "tf_serving_warmup_requests"]
    _assert_int8_per_channel(_int8_file(exports["int8"]))
    # Only the int8 graph names its predictions and checked ids.
    for precision, count in (("fp32", 0), ("int8", 5)):
        with tf.Graph().as_default(), tf.Session() as session:
            graph = tf.saved_model.loader.load(session, ["serve"], exports[precision]).graph_def
        named = [n.name for n in graph.node if n.name.startswith(
            (serving.PREDICTION_PREFIX, serving.CHECKED_IDS_PREFIX))]
        assert len(named) == count, (precision, named)


def _assert_int8_per_channel(path):
    """The model file at `path` multiplies by int8 weights (MatMulInteger)
    in every MatMul of a weight, each with a zero point per output column."""
    import onnx
    model = onnx.load(path)
    weights = {w.name: w for w in model.graph.initializer}
    products = [n for n in model.graph.node if n.op_type == "MatMulInteger"]
    assert products and not [n for n in model.graph.node if n.op_type == "MatMul"
                             and n.input[1] in weights]
    for node in products:
        weight, zero_point = weights[node.input[1]], weights[node.input[3]]
        assert weight.data_type == onnx.TensorProto.INT8
        assert np.abs(onnx.numpy_helper.to_array(weight)).max() <= 64  # 7 bits
        assert list(zero_point.dims) == [weight.dims[1]], node.input


def _int8_file(export_dir):
    """The ONNX model file of the int8 export in `export_dir`."""
    return os.path.join(export_dir, "assets.extra", serving.ONNX_FILE)


def _onnx_outputs(export_dir, features):
    return _outputs(onnx_model.session(_int8_file(export_dir)), features)


def test_int8_export_is_served_through_its_onnx_model(exports):
    """Each signature's outputs: those of the export's ONNX model on the
    graph's own features, row by row, with the graph's output code;
    close to the fp32 graph's; the same names, types and shapes; the id
    checks of the graph (its messages) before the model runs."""
    fp32 = test_serving._run_signature(exports["fp32"], serving.TEXT_SIGNATURE, TEXTS,
                                       fetch_features=True)
    features = {name: fp32.pop("feature/" + name) for name in serving.FEATURE_NAMES}
    # Each row alone, cut to its pieces (`onnx_model.run_rows`).
    lengths = features["input_mask"].sum(axis=1)
    expected = np.concatenate([_onnx_outputs(exports["int8"], {
        k: v[row:row + 1, :n] for k, v in features.items()})["probabilities"]
        for row, n in enumerate(lengths)])
    model = exported_model.Model(exports["int8"])
    assert model.warm_up()[0] == 2
    served = model.signature(serving.TEXT_SIGNATURE)(TEXTS)
    assert {k: (v.dtype, v.shape) for k, v in served.items()} == {
        k: (v.dtype, v.shape) for k, v in fp32.items()}
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-6)
    np.testing.assert_array_equal(served["label_ids"], np.argmax(expected, axis=1))
    assert [x.decode() for x in served["labels"]] == [str(i) for i in np.argmax(expected, 1)]
    # int8 weights: near fp32's, not equal (a tiny model of large random weights).
    np.testing.assert_allclose(served["probabilities"], fp32["probabilities"], atol=0.05)
    assert np.abs(served["probabilities"] - fp32["probabilities"]).max() > 1e-6
    # A text's answer does not depend on the texts beside it.
    alone = model.signature(serving.TEXT_SIGNATURE)({k: v[1:2] for k, v in TEXTS.items()})
    np.testing.assert_array_equal(alone["probabilities"], served["probabilities"][1:2])
    # The ids signature: padding past a row does not change it either.
    padded = {name: np.pad(value, [(0, 0), (0, 5)]) for name, value in features.items()}
    ids = model.signature(serving.IDS_SIGNATURE)(padded)
    assert sorted(ids) == ["probabilities"]
    np.testing.assert_allclose(ids["probabilities"], expected, atol=1e-6)
    bad = dict(features, input_mask=features["input_mask"] * 2)
    messages = []
    for precision in serving.EXPORT_PRECISIONS:
        with pytest.raises(tf.errors.InvalidArgumentError) as e:
            exported_model.Model(exports[precision]).signature(serving.IDS_SIGNATURE)(bad)
        messages.append(exported_model.op_error_message(e.value))
    assert messages[0] == messages[1] and "input input_mask: 2" in messages[0]


def test_a_session_runs_on_the_cpus_this_process_may_use(exports, monkeypatch):
    """Threads left to choose (0): one per CPU of the process's affinity
    (ONNX Runtime's own choice pins a thread to every core)."""
    path = _int8_file(exports["int8"])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert onnx_model.session(path).get_session_options().intra_op_num_threads == 1
    assert onnx_model.session(path, 3).get_session_options().intra_op_num_threads == 3


def test_predict_labels_a_file_with_the_int8_export(exports, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"text_a": a, "text_b": b}) + "\n"
                            for a, b in test_serving.PAIRS), encoding="utf-8")
    out = test_predict._predict(exports["int8"], cached=False, input_file=str(path),
                                output_file=str(tmp_path / "out.jsonl"))
    served = exported_model.Model(exports["int8"]).signature(serving.TEXT_SIGNATURE)(TEXTS)
    np.testing.assert_allclose([line["probabilities"] for line in out],
                               served["probabilities"], atol=1e-6)


def test_a_missing_runtime_is_one_line_naming_the_file(exports, files, monkeypatch, tmp_path):
    def missing():
        raise ImportError("No module named 'onnxruntime' (an int8 export is served by ONNX "
                          "Runtime: pip install -r %s)" % onnx_model.REQUIREMENTS)

    monkeypatch.setattr(onnx_model, "require", missing)
    with pytest.raises(errors.InputError, match=r"^--model_dir: .* is a int8 export: No module "
                                                r"named 'onnxruntime' .*requirements-onnx\.txt"):
        exported_model.Model(exports["int8"])
    values = test_run_classifier._flag_values(
        vocab_file=files["vocab"], bert_config_file=files["config"],
        output_dir=str(tmp_path / "out"), init_checkpoint=files["classifier"],
        export_dir=str(tmp_path / "export"), export_precision="int8")
    with pytest.raises(errors.InputError, match=r"^--export_precision=int8: .*requirements-onnx"):
        tiny.run_main_seeded(run_classifier.main, values)
    assert not os.path.exists(tmp_path / "export")


def _mrpc_test_file(data_dir):
    data_dir.mkdir()
    with open(data_dir / "test.tsv", "w", encoding="utf-8") as f:
        f.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i, (a, b) in enumerate(test_serving.PAIRS):
            f.write("%d\t%d\t%d\t%s\t%s\n" % (i, i, i, a, b))
    return str(data_dir)


def test_int8_without_an_export_is_refused(files, tmp_path):
    values = test_run_classifier._flag_values(
        task_name="MRPC", data_dir=_mrpc_test_file(tmp_path / "mrpc"),
        vocab_file=files["vocab"], bert_config_file=files["config"],
        output_dir=str(tmp_path / "out"), init_checkpoint=files["classifier"],
        do_predict=True, export_precision="int8")
    with pytest.raises(errors.InputError,
                       match="--export_precision=int8 shapes the export: give --export_dir"):
        tiny.run_main_seeded(run_classifier.main, values)


def test_run_classifier_exports_int8_that_answers_as_do_predict(files, tmp_path):
    """run_classifier.py --do_predict --export_dir --export_precision=int8:
    the served export's probabilities are --do_predict's (fp32) within the
    int8 rounding of the tiny model."""
    tiny.run_main_seeded(run_classifier.main, test_run_classifier._flag_values(
        task_name="MRPC", data_dir=_mrpc_test_file(tmp_path / "mrpc"), vocab_file=files["vocab"],
        bert_config_file=files["config"], output_dir=str(tmp_path / "output"),
        init_checkpoint=files["classifier"], do_predict=True,
        max_seq_length=test_serving.MAX_SEQ_LENGTH, export_dir=str(tmp_path / "export"),
        export_precision="int8", explain_steps=0))
    with open(tmp_path / "output" / "test_results.tsv") as f:
        predicted = np.array([[float(x) for x in line.split("\t")] for line in f])
    model = exported_model.Model(str(tmp_path / "export"))
    assert model.tokenizer_config["precision"] == "int8"
    served = model.signature(serving.TEXT_SIGNATURE)(TEXTS)["probabilities"]
    np.testing.assert_allclose(served, predicted, atol=0.05)
    assert np.ptp(served[:, 0]) > 0.01  # The outputs move with the text.


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    """serving_exports' model files: a checkpoint of each task's head."""
    _require_onnx()
    return serving_exports.write_files(tmp_path_factory.mktemp("onnx_tasks"))


def _tf_outputs(config, checkpoint, features, build):
    """`build(config, features)` (name -> tensor) run on the weights of
    `checkpoint`."""
    with tf.Graph().as_default():
        outputs = build(config, {name: tf.constant(value) for name, value in features.items()})
        with tf.Session() as session:
            tf.train.Saver().restore(session, checkpoint)
            return session.run(outputs)


def _tagger(config, f):
    _, probabilities = run_ner.create_model(config, False, *_ids(f), 5, False)
    return {"probabilities": probabilities}


def _choice(config, f):
    _, _, _, probabilities = run_swag.create_model(config, False, *_ids(f),
                                                   tf.zeros([tf.shape(f["input_ids"])[0]],
                                                            tf.int32), False)
    return {"probabilities": probabilities}


def _span(config, f):
    start, end = run_squad.create_model(config, False, *_ids(f), False)
    return {"start_logits": start, "end_logits": end}


def _embedding(layer_index, pooling, normalize):
    def build(config, f):
        model = modeling.BertModel(config, False, *_ids(f))
        return {"embedding": extract_features.sentence_vectors(
            model, layer_index, f["input_mask"], pooling, normalize)}
    return build


def _ids(features):
    return [features[name] for name in serving.FEATURE_NAMES]


@pytest.mark.parametrize("checkpoint,head,argument,build", [
    ("ner", "tagger", None, _tagger),
    ("swag", "choice", None, _choice),
    ("squad", "span", None, _span),
    ("classifier", "embedding", (-1, "mean", True), _embedding(-1, "mean", True)),
    ("classifier", "embedding", (-2, "cls", False), _embedding(-2, "cls", False)),
    ("classifier", "embedding", (-1, "pooler", True), _embedding(-1, "pooler", True)),
])
def test_each_head_computes_what_the_tensorflow_model_does(task_files, tmp_path, checkpoint,
                                                           head, argument, build):
    """Each script's head in fp32 ONNX equals its TensorFlow model on padded
    rows, as one batch and row by row (`run_rows`: outputs over the pieces
    padded back with 0); a multiple-choice model's rows are its choices."""
    config = modeling.BertConfig.from_json_file(task_files["config"])
    features = _features(rows=6)
    rank = 3 if head == "choice" else 2
    if rank == 3:  # 2 instances of 3 choices
        features = {name: value.reshape(2, 3, -1) for name, value in features.items()}
    expected = _tf_outputs(config, task_files[checkpoint], features, build)
    session, run = _written(tmp_path, config, task_files[checkpoint], head, argument, rank)
    got = run(features)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=2e-5, err_msg=name)
    rows = onnx_model.run_rows(session, features)
    mask = features["input_mask"]
    for name, value in expected.items():
        if value.shape[1:2] == mask.shape[1:2] and rank == 2 and value.ndim >= 2:
            # Over the pieces: the real pieces' values, 0 past them.
            where = mask.astype(bool).reshape(mask.shape + (1,) * (value.ndim - 2))
            value = np.where(where, value, 0)
        np.testing.assert_allclose(rows[name], value, atol=2e-5, err_msg=name)
    empty = onnx_model.run_rows(session, {k: v[:0] for k, v in features.items()})
    assert {k: v.shape[0] for k, v in empty.items()} == {k: 0 for k in expected}


@pytest.fixture(scope="module")
def task_exports(task_files, tmp_path_factory):
    """{task: {precision: (SavedModel folder, serving_default's inputs)}}
    of serving_exports' tasks that take a precision."""
    tmp = tmp_path_factory.mktemp("onnx_task_exports")
    made = {}
    for task in serving_exports.PRECISIONS:
        made[task] = {}
        for precision in serving.EXPORT_PRECISIONS:
            with tf.Graph().as_default():
                made[task][precision] = serving_exports.EXPORTS[task](
                    tmp / ("%s_%s" % (task, precision)), task_files, precision=precision)
    return made


# Outputs that follow the model's most likely answers, which int8 rounding
# may reorder on a tiny model of random weights.
_ARGMAX_OUTPUTS = ("label_ids", "tags", "tokens", "token_ids", "filled")


def _assert_near(got, expected, mask=None):
    """Outputs (name -> array) of int8 near those of fp32: the same shapes,
    numbers within the int8 rounding of the tiny model (but not equal),
    the rest equal where it is not an argmax; with `mask`, outputs over
    the pieces only at the real ones."""
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        value, served = np.asarray(value), got[name]
        assert served.shape == value.shape, name
        if mask is not None:
            served, value = served[mask == 1], value[mask == 1]
        if value.dtype.kind == "f":
            np.testing.assert_allclose(served, value, atol=0.1, err_msg=name)
        elif name not in _ARGMAX_OUTPUTS:
            np.testing.assert_array_equal(served, value, err_msg=name)
    assert max(np.abs(got[n] - v).max() for n, v in expected.items()
               if np.asarray(v).dtype.kind == "f" and np.size(v)) > 1e-7  # int8, not fp32


@pytest.mark.parametrize("task", serving_exports.PRECISIONS)
def test_each_task_serves_its_int8_export_as_its_fp32_one(task_exports, task):
    """The int8 export of each task, served by predict.py's model: the fp32
    export's outputs (`_assert_near`), and in the id signature, on the
    fp32 graph's own features, its outputs (over the pieces: at the real
    ones). Question answering's answers are picked from its logits, which
    int8 may reorder: there only the id signature's logits are compared,
    and the text signature's names and types; fill-mask is compared with
    its ONNX model."""
    (fp32_dir, inputs), (int8_dir, _) = (task_exports[task][p] for p in ("fp32", "int8"))
    assert _config(int8_dir)["precision"] == "int8"
    model = exported_model.Model(int8_dir)
    model.warm_up()
    expected = test_serving._run_signature(fp32_dir, serving.TEXT_SIGNATURE, inputs,
                                           fetch_features=True)
    features = {name: expected.pop("feature/" + name) for name in serving.FEATURE_NAMES}
    served = model.signature(serving.TEXT_SIGNATURE)(inputs)
    assert {k: v.dtype for k, v in served.items()} == {k: v.dtype for k, v in expected.items()}
    ids = model.signature(serving.IDS_SIGNATURE)(features)
    if task == "fill_mask":
        # The masked-LM head's vocabulary-wide product in int8 moves the
        # tiny model's scores by up to 0.13: here the served outputs are
        # checked to be the export's ONNX model's, row by row.
        assert {k: v.shape for k, v in served.items()} == {
            k: v.shape for k, v in expected.items()}
        np.testing.assert_array_equal(served["num_masks"], expected["num_masks"])
        session = onnx_model.session(_int8_file(int8_dir))
        rows = onnx_model.run_rows(session, features)
        for name, value in rows.items():
            np.testing.assert_array_equal(ids[name], value, err_msg=name)
            np.testing.assert_array_equal(served[name], value, err_msg=name)
        return
    if task != "question_answering":
        _assert_near(served, expected)
    over_pieces = task in ("ner", "question_answering")
    _assert_near(ids, test_serving._run_signature(fp32_dir, serving.IDS_SIGNATURE, features),
                 features["input_mask"] if over_pieces else None)


def test_fill_mask_head_computes_what_the_export_model_does(task_files, tmp_path):
    """fill-mask in fp32 ONNX: the export's model_fn's predictions (each
    [MASK]'s top pieces, their ids and scores, padded past a row's masks
    with "", -1 and 0), as one batch and row by row, a row without masks
    included."""
    config = modeling.BertConfig.from_json_file(task_files["config"])
    vocab = tokenization.load_vocab(task_files["vocab"])
    mask_id = vocab[fill_mask_export.MASK_TOKEN]
    features = _features(rows=4)
    ids = features["input_ids"]
    ids[0, [2, 5]] = mask_id
    ids[2, 1] = mask_id
    ids[3, :] = np.where(ids[3] == mask_id, 5, ids[3])
    model_fn = fill_mask_export.fill_mask_model_fn_builder(
        config, run_pretraining.get_masked_lm_output, task_files["vocab"], mask_id, 3)

    def build(config, f):
        predictions = model_fn(f, None, runtime.ModeKeys.PREDICT, {}).predictions
        tf.add_to_collection(tf.GraphKeys.TABLE_INITIALIZERS, tf.tables_initializer())
        return predictions

    with tf.Graph().as_default():
        predictions = build(config, {k: tf.constant(v) for k, v in features.items()})
        with tf.Session() as session:
            tf.train.Saver().restore(session, task_files["fill_mask"])
            session.run(tf.tables_initializer())
            expected = session.run(predictions)
    with open(task_files["vocab"], encoding="utf-8") as f:
        pieces = f.read().split("\n")
    session, run = _written(tmp_path, config, task_files["fill_mask"], "fill_mask",
                            (mask_id, 3, pieces))
    got = run(features)
    got["tokens"] = np.vectorize(str.encode, otypes=[object])(got["tokens"])  # (str there)
    assert expected["num_masks"].tolist() == [2, 0, 1, 0]
    for outputs in (got, onnx_model.run_rows(session, features)):
        assert sorted(outputs) == sorted(expected)
        for name, value in expected.items():
            if value.dtype.kind == "f":
                np.testing.assert_allclose(outputs[name], value, atol=2e-5, err_msg=name)
            else:
                np.testing.assert_array_equal(outputs[name], value, err_msg=name)


def test_every_script_checks_its_export_precision_up_front(files, monkeypatch):
    """serving.check_export_flags, which every exporting script runs before
    any work: int8 needs --export_dir and ONNX Runtime; fp32 neither."""
    serving.check_export_flags(files["vocab"], None, "fp32")
    with pytest.raises(errors.InputError, match="^--export_precision=int8 shapes the export"):
        serving.check_export_flags(files["vocab"], None, "int8")

    def missing():
        raise ImportError("No module named 'onnx'")

    monkeypatch.setattr(onnx_model, "require", missing)
    with pytest.raises(errors.InputError, match="^--export_precision=int8: No module named"):
        serving.check_export_flags(files["vocab"], "/tmp/x", "int8")
