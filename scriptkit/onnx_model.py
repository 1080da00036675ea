"""A task model as an ONNX graph, written from its checkpoint, for ONNX
Runtime to serve (`--export_precision=int8`).

The graph is written here op by op from the checkpoint's weights (Google's
variable names, as modeling.py builds them), not converted from the
TensorFlow graph: a converter holds the whole frozen graph in memory twice
(tf2onnx 1.17 ran out of 24 GiB on BERT-Base), and a graph written here has
the plain forms (MatMul, LayerNormalization, Softmax) that ONNX Runtime's
optimizer fuses and its quantizer turns into integer matrix products.

    inputs:  input_ids, input_mask, segment_ids: int32 [batch, length]
             (a multiple-choice model's [batch, choices, length])
    outputs: the task head's predictions (HEADS), as the script's model_fn
             names them in PREDICT mode

`int8_model` quantizes the MatMul weights to int8 (7 bits used) with a
scale per output channel, and the activations per run (ONNX Runtime's
dynamic quantization); `session` opens a model for serving. onnx and
onnxruntime are optional (requirements-onnx.txt); without them `require`
says what to install.

In: modeling.BertConfig, the checkpoint's path. Out: ONNX model bytes.
"""

import contextlib
import logging
import math

import numpy as np

REQUIREMENTS = "requirements-onnx.txt"
# The ONNX operator set written: LayerNormalization is in the default
# domain from 17.
OPSET = 17
INPUTS = ("input_ids", "input_mask", "segment_ids")


def require():
    """Imports onnx and onnxruntime, or raises ImportError in one line that
    names the requirements file to install."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise ImportError("%s (an int8 export is served by ONNX Runtime: pip install -r %s)"
                          % (e, REQUIREMENTS)) from None


class _Graph:
    """The nodes, weights and value names of a graph being written."""

    def __init__(self, reader):
        from onnx import helper, numpy_helper
        self._helper, self._numpy_helper = helper, numpy_helper
        self._reader = reader
        self.nodes, self.initializers = [], []
        self._count = 0

    def shape(self, name):
        """The shape of the checkpoint variable `name`."""
        return self._reader.get_variable_to_shape_map()[name]

    def weight(self, name, transpose=False):
        """The checkpoint variable `name` as an initializer (float32)."""
        value = np.asarray(self._reader.get_tensor(name), np.float32)
        return self.constant(value.T if transpose else value, name)

    def constant(self, value, name=None):
        self._count += 1
        name = "%s_%d" % (name or "const", self._count)
        self.initializers.append(self._numpy_helper.from_array(np.array(value, order="C"),
                                                               name))
        return name

    def int64s(self, values):
        """An int64 constant (shapes, axes, indices)."""
        return self.constant(np.asarray(values, np.int64))

    def op(self, op_type, *inputs, **attributes):
        """One node of one output; returns the output's name."""
        return self.ops(op_type, 1, *inputs, **attributes)[0]

    def ops(self, op_type, count, *inputs, **attributes):
        """One node of `count` outputs; returns their names."""
        self._count += 1
        outputs = ["%s_%d_%d" % (op_type.lower(), self._count, i) for i in range(count)]
        self.nodes.append(self._helper.make_node(op_type, list(inputs), outputs,
                                                 **attributes))
        return outputs

    def dense(self, x, scope, activation=None):
        """x @ kernel + bias of the dense layer `scope` (kernel [in, out])."""
        y = self.op("Add", self.op("MatMul", x, self.weight(scope + "/kernel")),
                    self.weight(scope + "/bias"))
        return activation(self, y) if activation else y

    def layer_norm(self, x, scope):
        # Epsilon 1e-12, as modeling.layer_norm (Google's checkpoints).
        return self.op("LayerNormalization", x, self.weight(scope + "/gamma"),
                       self.weight(scope + "/beta"), axis=-1, epsilon=1e-12)


def _gelu_tanh(graph, x):
    # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): modeling.gelu, in
    # the form ONNX Runtime's optimizer fuses (FastGelu).
    cube = graph.op("Pow", x, graph.constant(np.float32(3.0)))
    inner = graph.op("Add", x, graph.op("Mul", cube, graph.constant(np.float32(0.044715))))
    inner = graph.op("Mul", inner, graph.constant(np.float32(math.sqrt(2 / math.pi))))
    half = graph.op("Mul", x, graph.constant(np.float32(0.5)))
    return graph.op("Mul", half, graph.op("Add", graph.op("Tanh", inner),
                                          graph.constant(np.float32(1.0))))


def _gelu_exact(graph, x):
    # x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))): modeling.gelu_exact (fused:
    # Gelu).
    erf = graph.op("Erf", graph.op("Div", x, graph.constant(np.float32(math.sqrt(2)))))
    half = graph.op("Mul", x, graph.constant(np.float32(0.5)))
    return graph.op("Mul", half, graph.op("Add", erf, graph.constant(np.float32(1.0))))


_ACTIVATIONS = {
    "gelu": _gelu_tanh, "gelu_new": _gelu_tanh, "gelu_exact": _gelu_exact,
    "relu": lambda graph, x: graph.op("Relu", x),
    "tanh": lambda graph, x: graph.op("Tanh", x),
}


def _encoder(graph, config, ids, mask, segments):
    """modeling.BertModel in PREDICT mode on ids, mask, segments [rows,
    length]: the output of every layer, [rows, length, hidden] each (the
    last is the sequence output)."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    if hidden % heads:
        raise ValueError("hidden_size %d is not a multiple of num_attention_heads %d"
                         % (hidden, heads))
    act = config.hidden_act.lower() if isinstance(config.hidden_act, str) else None
    if act not in _ACTIVATIONS:
        raise ValueError("hidden_act %r has no ONNX form here (known: %s)"
                         % (config.hidden_act, ", ".join(sorted(_ACTIVATIONS))))
    activation = _ACTIVATIONS[act]
    size_per_head = hidden // heads
    i64 = graph.int64s
    length = graph.op("Slice", graph.op("Shape", ids), i64([1]), i64([2]))
    positions = graph.op("Slice", graph.weight("bert/embeddings/position_embeddings"),
                         i64([0]), length, i64([0]))
    x = graph.op("Add", graph.op("Gather", graph.weight("bert/embeddings/word_embeddings"),
                                 ids),
                 graph.op("Gather", graph.weight("bert/embeddings/token_type_embeddings"),
                          segments))
    x = graph.layer_norm(graph.op("Add", x, positions), "bert/embeddings/LayerNorm")
    # -10000 where a position is padding, 0 elsewhere ([batch, 1, 1, length]).
    # This order of ops (and the Div of the scores below) is the one ONNX
    # Runtime's transformer optimizer (onnxruntime.transformers) recognises
    # to fuse each layer's attention into one op; the export does not run
    # it: on an AVX2 CPU the fused int8 model was no faster.
    allowed = graph.op("Unsqueeze", graph.op("Unsqueeze", mask, i64([1])), i64([2]))
    adder = graph.op("Mul", graph.op("Sub", graph.constant(np.float32(1.0)),
                                     graph.op("Cast", allowed, to=1)),
                     graph.constant(np.float32(-10000.0)))
    split_heads = i64([0, 0, heads, size_per_head])
    # Scores divided by sqrt(size), not multiplied by its inverse: that
    # optimizer would take a Mul there for the mask's.
    scale = graph.constant(np.float32(math.sqrt(size_per_head)))
    layers = []
    for layer in range(config.num_hidden_layers):
        scope = "bert/encoder/layer_%d/" % layer

        def head_view(name, perm):
            value = graph.dense(x, scope + "attention/self/" + name)
            return graph.op("Transpose", graph.op("Reshape", value, split_heads), perm=perm)

        query = head_view("query", [0, 2, 1, 3])  # [batch, heads, length, size]
        key = head_view("key", [0, 2, 3, 1])  # [batch, heads, size, length]
        value = head_view("value", [0, 2, 1, 3])
        scores = graph.op("Add", graph.op("Div", graph.op("MatMul", query, key), scale), adder)
        context = graph.op("MatMul", graph.op("Softmax", scores, axis=-1), value)
        context = graph.op("Reshape", graph.op("Transpose", context, perm=[0, 2, 1, 3]),
                           i64([0, 0, hidden]))
        attended = graph.layer_norm(
            graph.op("Add", graph.dense(context, scope + "attention/output/dense"), x),
            scope + "attention/output/LayerNorm")
        inner = graph.dense(attended, scope + "intermediate/dense", activation)
        x = graph.layer_norm(graph.op("Add", graph.dense(inner, scope + "output/dense"),
                                      attended), scope + "output/LayerNorm")
        layers.append(x)
    return layers


def _pooled(graph, sequence):
    """The pooler: dense tanh on the first piece's vector, [rows, hidden]."""
    first = graph.op("Gather", sequence, graph.int64s(0), axis=1)
    return graph.dense(first, "bert/pooler/dense", _ACTIVATIONS["tanh"])


class _Encoded:
    """The encoder's outputs, for a task head.

    Attributes:
      layers: every layer's output, [rows, length, hidden] each.
      mask: the input_mask of the rows, int32 [rows, length].
      ids: the model's input_ids as given ([batch, length], or [batch,
        choices, length] for a multiple-choice model, whose rows are its
        choices).
      activation: the config's hidden_act, a key of _ACTIVATIONS.
    """

    def __init__(self, layers, mask, ids, activation):
        self.layers, self.mask, self.ids = layers, mask, ids
        self.activation = activation


# A prediction's dimensions as the model declares them: ROWS, the pieces
# (LENGTH: `run_rows` pads these back to the batch's length), or sizes the
# model fixes (None).
ROWS, LENGTH = "batch", "length"


def _classifier(graph, encoded, kind):
    """run_classifier.create_model's head: logits from output_weights
    [labels, hidden] and output_bias; `kind` "softmax", "sigmoid" or
    "regression"."""
    logits = graph.op("Add", graph.op("MatMul", _pooled(graph, encoded.layers[-1]),
                                      graph.weight("output_weights", transpose=True)),
                      graph.weight("output_bias"))
    if kind == "regression":
        return {"scores": (graph.op("Squeeze", logits, graph.int64s([-1])), [ROWS]),
                "logits": (logits, [ROWS, None])}
    probabilities = (graph.op("Sigmoid", logits) if kind == "sigmoid"
                     else graph.op("Softmax", logits, axis=-1))
    return {"probabilities": (probabilities, [ROWS, None]), "logits": (logits, [ROWS, None])}


def _tagger(graph, encoded, _):
    """run_ner.create_model's head: per piece, the softmax of its logits
    from ner/output_weights [labels, hidden] and ner/output_bias."""
    logits = graph.op("Add", graph.op("MatMul", encoded.layers[-1],
                                      graph.weight("ner/output_weights", transpose=True)),
                      graph.weight("ner/output_bias"))
    return {"probabilities": (graph.op("Softmax", logits, axis=-1), [ROWS, LENGTH, None])}


def _choice(graph, encoded, _):
    """run_swag.create_model's head: a score per choice from the pooled
    output (swag/output_weights [1, hidden], swag/output_bias), the
    softmax over each instance's choices: probabilities [batch, choices]."""
    scores = graph.op("Add", graph.op("MatMul", _pooled(graph, encoded.layers[-1]),
                                      graph.weight("swag/output_weights", transpose=True)),
                      graph.weight("swag/output_bias"))
    instances = graph.op("Slice", graph.op("Shape", encoded.ids), graph.int64s([0]),
                         graph.int64s([2]))
    logits = graph.op("Reshape", scores, instances)
    return {"probabilities": (graph.op("Softmax", logits, axis=-1), [ROWS, None])}


def _span(graph, encoded, _):
    """run_squad.create_model's head: start_logits and end_logits [rows,
    length] from cls/squad/output_weights [2, hidden] and
    cls/squad/output_bias."""
    logits = graph.op("Add", graph.op("MatMul", encoded.layers[-1],
                                      graph.weight("cls/squad/output_weights",
                                                   transpose=True)),
                      graph.weight("cls/squad/output_bias"))  # [rows, length, 2]
    return {name: (graph.op("Gather", logits, graph.int64s(index), axis=2), [ROWS, LENGTH])
            for index, name in enumerate(["start_logits", "end_logits"])}


def _embedding(graph, encoded, argument):
    """extract_features.sentence_vectors as the embedding export uses it:
    `argument` (layer_index, pooling "cls", "mean" or "pooler",
    normalize) -> {"embedding": [rows, hidden]}."""
    layer_index, pooling, normalize = argument
    if pooling == "pooler":
        vectors = _pooled(graph, encoded.layers[-1])
    else:
        layer = encoded.layers[layer_index]
        if pooling == "cls":
            vectors = graph.op("Gather", layer, graph.int64s(0), axis=1)
        elif pooling == "mean":
            real = graph.op("Unsqueeze", graph.op("Cast", encoded.mask, to=1),
                            graph.int64s([2]))  # [rows, length, 1]
            vectors = graph.op("Div", graph.op("ReduceSum", graph.op("Mul", layer, real),
                                               graph.int64s([1]), keepdims=0),
                               graph.op("ReduceSum", real, graph.int64s([1]), keepdims=0))
        else:
            raise ValueError("pooling %r has no ONNX form here" % pooling)
    if normalize:
        # x / max(|x|, 1e-12), as the TensorFlow export divides.
        # (ReduceL2 takes its axes as an attribute until opset 18.)
        norm = graph.op("ReduceL2", vectors, axes=[-1], keepdims=1)
        vectors = graph.op("Div", vectors, graph.op("Max", norm,
                                                    graph.constant(np.float32(1e-12))))
    return {"embedding": (vectors, [ROWS, None])}


def _fill_mask(graph, encoded, argument):
    """fill_mask_export's model: per [MASK] piece (in order), the masked-LM
    head's `top_k` most probable pieces. `argument`: (mask_id, top_k,
    pieces: the vocabulary's lines). Predictions (fill_mask_export's
    names), zero-padded to the most masks of a row: tokens (strings) and
    token_ids (int32: "" and -1 past a row's masks) and scores [rows,
    masks, top_k], and num_masks (int32 [rows])."""
    from onnx import TensorProto
    mask_id, top_k, pieces = argument
    i64 = graph.int64s
    is_mask = graph.op("Equal", encoded.ids, graph.constant(np.int32(mask_id)))
    counts = graph.op("ReduceSum", graph.op("Cast", is_mask, to=TensorProto.INT64), i64([1]),
                      keepdims=0)  # [rows]
    most = graph.op("ReduceMax", counts, keepdims=1)  # [1]
    # The masks' positions in order: the top `most` of (length - position)
    # at the masks, 0 elsewhere.
    length = graph.op("Squeeze", graph.op("Slice", graph.op("Shape", encoded.ids), i64([1]),
                                          i64([2])), i64([0]))
    before_end = graph.op("Sub", length, graph.op("Range", i64(0), length, i64(1)))
    key = graph.op("Cast", graph.op("Mul", graph.op("Cast", is_mask, to=TensorProto.INT64),
                                    before_end), to=TensorProto.FLOAT)
    _, positions = graph.ops("TopK", 2, key, most, axis=1)  # [rows, masks]
    vectors = graph.op("GatherND", encoded.layers[-1],
                       graph.op("Unsqueeze", positions, i64([2])), batch_dims=1)
    # run_pretraining.get_masked_lm_output: a dense layer and LayerNorm,
    # then scores against the word embeddings (tied) and a bias.
    hidden = graph.layer_norm(graph.dense(vectors, "cls/predictions/transform/dense",
                                          _ACTIVATIONS[encoded.activation]),
                              "cls/predictions/transform/LayerNorm")
    logits = graph.op("Add", graph.op("MatMul", hidden, graph.weight(
        "bert/embeddings/word_embeddings", transpose=True)),
        graph.weight("cls/predictions/output_bias"))
    scores, ids = graph.ops("TopK", 2, graph.op("Softmax", logits, axis=-1), i64([top_k]),
                            axis=-1)
    real = graph.op("Less", graph.op("Unsqueeze", graph.op(
        "Range", i64(0), graph.op("Squeeze", most, i64([0])), i64(1)), i64([0])),
        graph.op("Unsqueeze", counts, i64([1])))
    real = graph.op("Unsqueeze", real, i64([2]))  # [rows, masks, 1]
    vocab_size = int(graph.shape("bert/embeddings/word_embeddings")[0])
    # Ids past the vocabulary file's lines are "", as the export's table.
    lines = np.array((list(pieces) + [""] * vocab_size)[:vocab_size], dtype=object)
    tokens = graph.op("Gather", graph.constant(lines, "pieces"), ids)
    dims = [ROWS, None, None]
    return {"tokens": (graph.op("Where", real, tokens, graph.constant(
                np.array("", dtype=object))), dims, TensorProto.STRING),
            "token_ids": (graph.op("Where", real, graph.op("Cast", ids, to=TensorProto.INT32),
                                   graph.constant(np.int32(-1))), dims, TensorProto.INT32),
            "scores": (graph.op("Where", real, scores, graph.constant(np.float32(0))), dims),
            "num_masks": (graph.op("Cast", counts, to=TensorProto.INT32), [ROWS],
                          TensorProto.INT32)}


# The task heads: (graph, _Encoded, argument) -> prediction name ->
# (value name, its dimensions: ROWS, LENGTH or None[, its ONNX type where
# not float32]), the predictions of the script's model_fn in PREDICT mode.
HEADS = {"classifier": _classifier, "tagger": _tagger, "choice": _choice, "span": _span,
         "embedding": _embedding, "fill_mask": _fill_mask}
# Where rows give an output of different dimensions (fill-mask's masks),
# the value they are padded with, as the export's graph pads them; else
# 0 or "".
PADDING = {"token_ids": -1}


def write_model(config, checkpoint, head, argument=None, rank=2):
    """The ONNX model (onnx.ModelProto) of BERT and the task head `head`
    (a key of HEADS, given `argument`) with the weights of `checkpoint`.

    Args:
      config: modeling.BertConfig.
      checkpoint: a checkpoint path (Google's variable names).
      head: a key of HEADS.
      argument: what the head takes: the classifier its kind ("softmax",
        "sigmoid" or "regression"), the embedding (layer_index, pooling,
        normalize), fill-mask (mask_id, top_k, the vocabulary's lines);
        the others nothing.
      rank: of the inputs: 2 ([batch, length]), 3 ([batch, choices,
        length]: the choice head's).

    Returns:
      onnx.ModelProto; inputs INPUTS (int32 [batch, ..., length]), outputs
      the head's predictions (batch first).
    """
    require()
    import tensorflow.compat.v1 as tf
    from onnx import TensorProto, helper

    graph = _Graph(tf.train.load_checkpoint(checkpoint))
    flat = list(INPUTS)
    if rank == 3:
        # The choices as rows of their own: [batch * choices, length].
        rows = graph.op("Concat", graph.int64s([-1]), graph.op(
            "Slice", graph.op("Shape", INPUTS[0]), graph.int64s([2]), graph.int64s([3])),
            axis=0)
        flat = [graph.op("Reshape", name, rows) for name in INPUTS]
    encoded = _Encoded(_encoder(graph, config, *flat), flat[1], INPUTS[0],
                       config.hidden_act.lower())
    outputs = {name: (list(output) + [TensorProto.FLOAT])[:3]
               for name, output in HEADS[head](graph, encoded, argument).items()}
    # Each output under its prediction's name.
    for name, (value, _, _) in outputs.items():
        graph.nodes.append(helper.make_node("Identity", [value], [name]))
    input_dims = [ROWS] + ["choices"] * (rank - 2) + [LENGTH]
    model = helper.make_model(
        helper.make_graph(
            graph.nodes, "bert_" + head,
            [helper.make_tensor_value_info(n, TensorProto.INT32, input_dims) for n in INPUTS],
            [helper.make_tensor_value_info(n, kind, dims)
             for n, (_, dims, kind) in outputs.items()],
            graph.initializers),
        opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bert")
    model.ir_version = 8
    return model


def int8_model(model, path):
    """Writes `model` (onnx.ModelProto) to `path` with its MatMul weights
    in int8 (ONNX Runtime's dynamic quantization: a weight scale per output
    channel, activations quantized to uint8 per run).

    A scale per channel rather than per matrix: on all-MiniLM-L6-v2 it
    brings mean-pooled embeddings from cosine 0.94 to 0.99 of fp32's, at
    the same speed (docs/serving.md). The weights keep 7 bits of their 8
    (reduce_range): a CPU without VNNI (AVX2) multiplies uint8 by int8 in
    pairs summed into int16, which 8-bit weights can overflow. On an AVX2
    CPU, a tiny random model's embeddings came to cosine 0.83 of fp32's at
    the least with 8 bits, 0.999 with 7.
    Static quantization, calibrated on rows, was no faster on the CPU
    measured, and needs data."""
    require()
    import os
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "fp32.onnx")
        onnx.save(model, source)
        with quiet_quantizer():
            quantize_dynamic(source, path, weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul"], per_channel=True,
                             reduce_range=True)


@contextlib.contextmanager
def quiet_quantizer():
    """Hides ONNX Runtime's quantizer logs while it runs: a line per tensor
    it leaves in float, and advice to pre-process the model, which is for
    models whose shapes are unknown (these are known)."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def session(path, threads=0):
    """An onnxruntime.InferenceSession of the model file `path` on the CPU,
    with `threads` threads per operation (0: one per CPU this process may
    run on, as TensorFlow counts them)."""
    require()
    import os

    import onnxruntime as ort
    options = ort.SessionOptions()
    # Left to choose (0), ONNX Runtime starts a thread per physical core and
    # pins each to its core, outside a taskset or a container's CPU set:
    # under `taskset -c 0` on 2 cores it ran on both.
    if not threads and hasattr(os, "sched_getaffinity"):
        threads = len(os.sched_getaffinity(0))
    options.intra_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def run_rows(session, features):
    """The model's outputs for `features` (INPUTS -> int32 [rows, ...,
    length]), run one row at a time (a multiple-choice instance with its
    choices), each cut to its own pieces (its longest input_mask), and
    joined along the rows: name -> [rows, ...]; an output over the pieces
    (declared LENGTH) is padded with 0 to `length`, one whose dimensions
    differ between rows to their largest (`_join`).

    Why not in batches: int8 activations are scaled per run (dynamic
    quantization), so in a batch a row's answer would depend on the rows
    and the padding beside it. Alone, a text gets one answer. It costs
    little: on a 2-core AMD EPYC (AVX2), one thread, a BERT-Base int8
    classifier ran 32 rows of 128 pieces in 5.0 s one by one against 5.5 s
    as one batch, and of 16 pieces in 0.74 s against 0.61 s.
    """
    shape = features[INPUTS[0]].shape
    rows, length = shape[0], shape[-1]
    names = [output.name for output in session.get_outputs()]
    over_pieces = [len(output.shape) > 1 and output.shape[1] == LENGTH
                   for output in session.get_outputs()]
    if not rows:
        # The output dimensions of no rows: those of one row of padding.
        empty = session.run(names, {name: np.zeros([1] + [max(d, 1) for d in shape[1:]],
                                                   np.int32) for name in features})
        return {name: value[:0] for name, value in zip(names, empty)}
    mask = features["input_mask"].reshape(rows, -1, length)
    lengths = np.maximum(mask.sum(axis=-1).max(axis=-1), 1)
    outputs = [[] for _ in names]
    for row in range(rows):
        cut = int(lengths[row])
        values = session.run(names, {
            name: np.ascontiguousarray(value[row:row + 1, ..., :cut])
            for name, value in features.items()})
        for kept, value, padded in zip(outputs, values, over_pieces):
            if padded and cut < length:
                value = np.pad(value, [(0, 0), (0, length - cut)] + [(0, 0)] * (value.ndim - 2))
            kept.append(value)
    return {name: _join(name, kept) for name, kept in zip(names, outputs)}


def _join(name, values):
    """The rows' values of the output `name` joined along the first
    dimension, each padded (PADDING) to the largest dimensions after it;
    text (ONNX Runtime's str) as UTF-8 bytes, as TensorFlow gives it."""
    largest = np.max([value.shape for value in values], axis=0)
    if values[0].dtype == object:
        values = [np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(value)
                  if value.size else value for value in values]
    pad = PADDING.get(name, b"" if values[0].dtype == object else 0)
    return np.concatenate([
        np.pad(value, [(0, 0)] + [(0, int(n - d)) for n, d in zip(largest[1:], value.shape[1:])],
               constant_values=pad) for value in values])
