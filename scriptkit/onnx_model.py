"""A task model as an ONNX graph, written from its checkpoint, for ONNX
Runtime to serve (`--export_precision=int8`).

The graph is written here op by op from the checkpoint's weights (Google's
variable names, as modeling.py builds them), not converted from the
TensorFlow graph: a converter holds the whole frozen graph in memory twice
(tf2onnx 1.17 ran out of 24 GiB on BERT-Base), and a graph written here has
the plain forms (MatMul, LayerNormalization, Softmax) that ONNX Runtime's
optimizer fuses and its quantizer turns into integer matrix products.

    inputs:  input_ids, input_mask, segment_ids: int32 [batch, length]
    outputs: the task head's predictions (HEADS), as the script's model_fn
             names them in PREDICT mode

`int8_model` quantizes the MatMul weights to int8 with per-tensor scales
and the activations per run (ONNX Runtime's dynamic quantization), and
`session` opens a model for serving. onnx and onnxruntime are optional
(requirements-onnx.txt); without them `require` says what to install.

In: modeling.BertConfig, the checkpoint's path. Out: ONNX model bytes.
"""

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
        self._count += 1
        output = "%s_%d" % (op_type.lower(), self._count)
        self.nodes.append(self._helper.make_node(op_type, list(inputs), [output],
                                                 **attributes))
        return output

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
    """modeling.BertModel in PREDICT mode: (sequence output [batch,
    length, hidden], pooled output [batch, hidden])."""
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
    first = graph.op("Gather", x, i64(0), axis=1)
    pooled = graph.dense(first, "bert/pooler/dense", _ACTIVATIONS["tanh"])
    return x, pooled


def _classifier(graph, sequence, pooled, kind):
    """run_classifier.create_model's head: logits from output_weights
    [labels, hidden] and output_bias; `kind` "softmax", "sigmoid" or
    "regression"."""
    logits = graph.op("Add", graph.op("MatMul", pooled,
                                      graph.weight("output_weights", transpose=True)),
                      graph.weight("output_bias"))
    if kind == "regression":
        return {"scores": graph.op("Squeeze", logits, graph.int64s([-1])), "logits": logits}
    probabilities = (graph.op("Sigmoid", logits) if kind == "sigmoid"
                     else graph.op("Softmax", logits, axis=-1))
    return {"probabilities": probabilities, "logits": logits}


# The task heads: (graph, sequence output, pooled output, argument) ->
# prediction name -> value name.
HEADS = {"classifier": _classifier}


def write_model(config, checkpoint, head, argument=None):
    """The ONNX model (onnx.ModelProto) of BERT and the task head `head`
    (a key of HEADS, given `argument`) with the weights of `checkpoint`.

    Args:
      config: modeling.BertConfig.
      checkpoint: a checkpoint path (Google's variable names).
      head: "classifier".
      argument: the head's kind ("softmax", "sigmoid" or "regression").

    Returns:
      onnx.ModelProto; inputs INPUTS (int32 [batch, length]), outputs the
      head's predictions (float32, batch first).
    """
    require()
    import tensorflow.compat.v1 as tf
    from onnx import TensorProto, helper

    graph = _Graph(tf.train.load_checkpoint(checkpoint))
    sequence, pooled = _encoder(graph, config, *INPUTS)
    outputs = HEADS[head](graph, sequence, pooled, argument)
    # Each output under its prediction's name.
    for name, value in outputs.items():
        graph.nodes.append(helper.make_node("Identity", [value], [name]))
    model = helper.make_model(
        helper.make_graph(
            graph.nodes, "bert_" + head,
            [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", "length"])
             for n in INPUTS],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            graph.initializers),
        opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bert")
    model.ir_version = 8
    return model


def int8_model(model, path):
    """Writes `model` (onnx.ModelProto) to `path` with its MatMul weights
    in int8 (ONNX Runtime's dynamic quantization: per-tensor weight scales,
    activations quantized to uint8 per run)."""
    require()
    import logging
    import os
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "fp32.onnx")
        onnx.save(model, source)
        # (Without its advice to pre-process the model, which is for
        # models whose shapes are unknown: these are known.)
        logging.disable(logging.WARNING)
        try:
            quantize_dynamic(source, path, weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul"])
        finally:
            logging.disable(logging.NOTSET)


def session(path, threads=0):
    """An onnxruntime.InferenceSession of the model file `path` on the CPU,
    with `threads` threads per operation (0: ONNX Runtime's choice)."""
    require()
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def run_rows(session, features):
    """The model's outputs for `features` (INPUTS -> int32 [rows, length]),
    run one row at a time, each cut to its own pieces (input_mask), and
    joined along the rows: name -> float32 [rows, ...]; an output over the
    pieces (its second dimension the row's length) is padded with 0 to
    `length`.

    Why not in batches: int8 activations are scaled per run (dynamic
    quantization), so in a batch a row's answer would depend on the rows
    and the padding beside it. Alone, a text gets one answer. It costs
    little: on a 2-core AMD EPYC (AVX2), one thread, a BERT-Base int8
    classifier ran 32 rows of 128 pieces in 5.0 s one by one against 5.5 s
    as one batch, and of 16 pieces in 0.74 s against 0.61 s.
    """
    rows, length = features[INPUTS[0]].shape
    names = [output.name for output in session.get_outputs()]
    lengths = np.maximum(features["input_mask"].sum(axis=1), 1)
    outputs = [[] for _ in names]
    for row in range(rows):
        cut = int(lengths[row])
        values = session.run(names, {name: np.ascontiguousarray(value[row:row + 1, :cut])
                                     for name, value in features.items()})
        for kept, value in zip(outputs, values):
            if value.ndim >= 2 and value.shape[1] == cut and cut < length:
                value = np.pad(value, [(0, 0), (0, length - cut)] + [(0, 0)] * (value.ndim - 2))
            kept.append(value)
    if not rows:
        # The output dimensions of no rows: those of one row of padding.
        empty = session.run(names, {name: np.zeros((1, max(length, 1)), np.int32)
                                    for name in features})
        return {name: value[:0] for name, value in zip(names, empty)}
    return {name: np.concatenate(kept) for name, kept in zip(names, outputs)}
