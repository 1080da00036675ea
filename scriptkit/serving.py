"""SavedModels that take text: what `--export_dir` of the fine-tuning scripts
and of extract_features.py writes.

Each export holds one model (one set of weights) behind two signatures:

* ``serving_default`` takes strings (per task: `run_classifier.py`'s
  ``text_a`` and ``text_b``, `run_ner.py`'s ``text``, `run_swag.py`'s
  ``context``, ``question`` and ``endings``, `extract_features.py`'s
  ``text`` and perhaps ``text_b``) and returns named outputs (with label
  names; a sentence embedding). The text is tokenized inside the graph
  (`graph_tokenization.GraphTokenizer`, equal to `tokenization.FullTokenizer`)
  and packed as the scripts pack it; each batch is padded to its longest
  input only, so a short text costs a short forward pass.
* ``serving_ids`` takes the scripts' int32 features (``input_ids``,
  ``input_mask``, ``segment_ids``), as exports did before text came in,
  checked in the graph (`check_ids`).

Both run the model in chunks of at most TOKENS_PER_CHUNK pieces
(`run_in_chunks`), so that a request's memory does not grow with its
windows. The vocabulary and a ``tokenizer_config.json`` (the casing and the
sequence settings) are assets of the SavedModel, and TF Serving's warm-up
requests (`warmup.py`) are in its assets.extra/. Loading it needs only
TensorFlow and TensorFlow Text (``import tensorflow_text`` before
``tf.saved_model.load``: it registers the WordPiece op).
"""

import dataclasses
import json
import os
import tempfile

import tensorflow.compat.v1 as tf

from scriptkit import errors
from scriptkit import file_io
from scriptkit import graph_tokenization
from scriptkit import onnx_model
from scriptkit import runtime
from scriptkit import saved_model_writer
from scriptkit import warmup

TEXT_SIGNATURE = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
IDS_SIGNATURE = "serving_ids"
# Which words moved an output (attributions.py), in the exports that have it.
EXPLAIN_SIGNATURE = "explain"
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")

# Next to the vocabulary in assets/: how the text is tokenized and packed.
CONFIG_ASSET = "tokenizer_config.json"

# The features the text signature computes are named "text_input_ids:0",
# ... in the graph (for tests, debugging, and the server's count of the
# windows a request gives: `rest_api`).
TEXT_FEATURE_PREFIX = "text_"
# The same for the explain signature's ("explain_input_ids:0", ...).
EXPLAIN_FEATURE_PREFIX = "explain_"

# The most word pieces (rows x their length) either signature runs through
# the model at once (`run_in_chunks`). At BERT-Base size and
# max_seq_length 384 that is 5 windows, 35 MB per attention tensor [rows,
# heads, length, length]: a question answering request of any length
# raised the server's peak memory by 110 to 170 MiB (docs/serving.md).
TOKENS_PER_CHUNK = 2048

# The precisions an export's model can be served in (--export_precision).
# fp32: the SavedModel's own graph. int8: the same SavedModel (TF Serving
# serves its fp32 graph), and an ONNX model of the task model with int8
# weights in assets.extra/ (`onnx_model`), which `exported_model` runs
# between the graph's tokenization and its output code: those are found
# by the names below, given only in such an export, so that an fp32
# export's graph is what it was.
EXPORT_PRECISIONS = ("fp32", "int8")
ONNX_FILE = "model_int8.onnx"
PREDICTION_PREFIX = "text_predictions_"
CHECKED_IDS_PREFIX = "checked_"


def pair_lengths(len_a, len_b, max_tokens):
    """The lengths `input_packing.truncate_seq_pair` cuts a pair down to, for
    whole batches: while the pair is longer than `max_tokens`, the longer
    side (the second one on a tie) loses its last token. In closed form: the
    longer side is cut first, down to the other's length, then both in turn,
    which leaves the first side the larger half.

    Args:
      len_a, len_b: int32 [n], the sides' lengths.
      max_tokens: int, what the pair may hold.

    Returns:
      (new len_a, new len_b), int32 [n].
    """
    over = len_a + len_b > max_tokens
    half_up, half_down = (max_tokens + 1) // 2, max_tokens // 2
    a_cut = tf.where(len_a >= len_b, tf.maximum(max_tokens - len_b, half_up),
                     max_tokens - tf.maximum(max_tokens - len_a, half_down))
    a_cut = tf.where(over, a_cut, len_a)
    b_cut = tf.where(over, max_tokens - a_cut, len_b)
    return a_cut, b_cut


def pack(pieces_a, pieces_b, max_seq_length, cls_id, sep_id):
    """BERT's input for a batch of texts or text pairs, as
    `input_packing.pack_sequence_pair` lays out one: ``[CLS] a [SEP]`` where b
    is empty (or None), else ``[CLS] a [SEP] b [SEP]``, the pair cut by
    `pair_lengths` and a single text at its end to fit `max_seq_length`.

    Args:
      pieces_a: RaggedTensor int32 [n, (pieces)], WordPiece ids.
      pieces_b: the same for the second texts, a list of such (their rows
        joined: SWAG's question and ending), or None.
      max_seq_length: the longest input the model takes.
      cls_id, sep_id: the ids of [CLS] and [SEP].

    Returns:
      dict of FEATURE_NAMES -> int32 [n, longest], zero-padded to the
      batch's longest input (not to max_seq_length).
    """
    # Built by gathers from one flat vector (ragged concatenation would do,
    # but logs a oneDNN error line about int64 on every run).
    parts_b = [] if pieces_b is None else (
        list(pieces_b) if isinstance(pieces_b, (list, tuple)) else [pieces_b])

    def lengths(pieces):
        return tf.cast(pieces.row_lengths(), tf.int32)

    len_a = lengths(pieces_a)
    part_lengths = [lengths(part) for part in parts_b]
    len_b = tf.add_n(part_lengths) if parts_b else tf.zeros_like(len_a)
    is_pair = len_b > 0
    # A pair keeps 3 places for [CLS] and two [SEP]s; a single text 2.
    paired_a, paired_b = pair_lengths(len_a, len_b, max_seq_length - 3)
    keep_a = tf.where(is_pair, paired_a, tf.minimum(len_a, max_seq_length - 2))
    keep_b = tf.where(is_pair, paired_b, len_b)
    total = 2 + keep_a + keep_b + tf.cast(is_pair, tf.int32)

    # values: [CLS], [SEP], 0 (padding), then the pieces of a and of each
    # part of b; each row's pieces start at its base there.
    parts = [pieces_a] + parts_b
    values = tf.concat([tf.constant([cls_id, sep_id, 0], tf.int32)]
                       + [tf.cast(part.values, tf.int32) for part in parts], axis=0)
    bases, offset = [], 3
    for part in parts:
        bases.append(offset + tf.cast(part.row_starts(), tf.int32)[:, tf.newaxis])
        offset += tf.size(part.values, out_type=tf.int32)

    j = tf.range(tf.reduce_max(total))[tf.newaxis, :]  # [1, longest]
    k = j - keep_a[:, tf.newaxis] - 2  # the position in b
    index = tf.fill(tf.shape(j + k), 2)  # padding
    index = tf.where_v2(tf.equal(j, 0), tf.zeros_like(index), index)
    index = tf.where_v2((j >= 1) & (j <= keep_a[:, tf.newaxis]), bases[0] + j - 1, index)
    index = tf.where_v2(tf.equal(k, -1), tf.ones_like(index), index)  # [SEP] after a
    start = tf.zeros_like(len_a)[:, tf.newaxis]
    for base, part_length in zip(bases[1:], part_lengths):
        end = start + part_length[:, tf.newaxis]
        index = tf.where_v2((k >= start) & (k < end) & (k < keep_b[:, tf.newaxis]),
                         base + k - start, index)
        start = end
    in_b = is_pair[:, tf.newaxis] & (k >= 0) & (k <= keep_b[:, tf.newaxis])
    index = tf.where_v2(in_b & tf.equal(k, keep_b[:, tf.newaxis]), tf.ones_like(index), index)
    return {"input_ids": tf.gather(values, index),
            "input_mask": tf.cast(j < total[:, tf.newaxis], tf.int32),
            "segment_ids": tf.cast(in_b, tf.int32)}


def first_text_windows(pieces_a, pieces_b, max_seq_length, doc_stride, max_windows=0):
    """`long_inputs.first_text_windows` for a batch: the windows of each
    first text that fit next to its whole second text, ready for `pack`.

    An input whose second text leaves no room gets one window holding all
    of it, which `pack` then cuts as without windows.

    Args:
      pieces_a, pieces_b: RaggedTensor int [n, (pieces)] (pieces_b None for
        single texts).
      max_seq_length, doc_stride, max_windows: as for the script.

    Returns:
      (windows_a, windows_b, example_of_window): RaggedTensors [w, (pieces)]
      (windows_b None without pieces_b), and int32 [w], the input of each
      window (ascending: an input's windows are consecutive).
    """
    len_a = tf.cast(pieces_a.row_lengths(), tf.int32)
    len_b = (tf.zeros_like(len_a) if pieces_b is None
             else tf.cast(pieces_b.row_lengths(), tf.int32))
    room = max_seq_length - tf.where(len_b > 0, 3 + len_b, 2 + tf.zeros_like(len_b))
    fits = room >= 1
    room = tf.maximum(room, 1)
    step = tf.minimum(room, doc_stride)
    # The first window, then one per step until a window reaches the end.
    count = 1 + tf.maximum(0, (len_a - room + step - 1) // step)
    count = tf.where(fits, count, tf.ones_like(count))
    if max_windows:
        count = tf.minimum(count, max_windows)
    example_of_window = tf.repeat(tf.range(tf.size(len_a)), count)

    def per_window(values):
        return tf.gather(values, example_of_window)

    start = per_window(step) * tf.cast(tf.ragged.range(count).values, tf.int32)
    length = tf.where(per_window(fits),
                      tf.minimum(per_window(room), per_window(len_a) - start),
                      per_window(len_a))
    first = per_window(tf.cast(pieces_a.row_starts(), tf.int32)) + start
    index = tf.ragged.range(first, first + length).values
    windows_a = tf.RaggedTensor.from_row_lengths(tf.gather(pieces_a.values, index),
                                                 tf.cast(length, tf.int64))
    windows_b = None if pieces_b is None else tf.gather(pieces_b, example_of_window)
    return windows_a, windows_b, example_of_window


def trace_model(model, features):
    """What `model(features)` makes, found by building it once in a graph
    of its own (then dropped), on placeholders of the features' types and
    shapes: (name -> (dtype, static shape) of its outputs, variable name ->
    its shape as a list). Its log lines (the features' shapes) are
    silenced: the model built for the export logs them."""
    verbosity = tf.logging.get_verbosity()
    tf.logging.set_verbosity(tf.logging.WARN)
    try:
        with tf.Graph().as_default():
            tf.train.get_or_create_global_step()
            outputs = model({name: tf.placeholder(t.dtype, t.shape)
                             for name, t in features.items()})
            return ({name: (t.dtype, t.shape) for name, t in outputs.items()},
                    {v.op.name: v.shape.as_list() for v in tf.global_variables()})
    finally:
        tf.logging.set_verbosity(verbosity)


def check_ids(features, type_vocab_size):
    """The id signature's features, read by the model only once checked in
    the graph (TensorFlow Serving serving the export checks them too): the
    three of the same dimensions, input_mask 0 or 1, segment_ids 0 to
    type_vocab_size - 1. A failed check is an InvalidArgumentError naming
    the input, its value and where it is (as an id outside the vocabulary
    fails the embedding's gather), which the server answers 400.

    Args:
      features: FEATURE_NAMES -> int32 tensors of one rank.
      type_vocab_size: the model's segment types, or None (not checked).

    Returns:
      The features, the same values, after the checks.
    """
    ids, mask, segments = (features[name] for name in FEATURE_NAMES)
    shapes = [tf.shape(t) for t in (ids, mask, segments)]
    same = tf.reduce_all(tf.equal(shapes[0], shapes[1])) & tf.reduce_all(
        tf.equal(shapes[0], shapes[2]))
    # The messages are the checks' data, pieces of text between the values,
    # not one formatted string: XLA compiles no string op, and a caller may
    # compile the signature (XLA then leaves the checks out). As TensorFlow
    # prints them, in brackets: `exported_model.op_error_message` joins them.
    checks = [tf.debugging.Assert(same, [
        "the inputs input_ids ", shapes[0], ", input_mask ", shapes[1], " and segment_ids ",
        shapes[2], " differ in their dimensions; each needs one value per piece"],
        name="check_id_dimensions")]

    def first_bad(name, values, bad, allowed):
        flat = tf.reshape(bad, [-1])
        at = tf.argmax(tf.cast(flat, tf.int32), output_type=tf.int32)
        # Its place: the position in each dimension (unravel_index, which XLA has not).
        shape = tf.shape(values)
        where = at // tf.math.cumprod(shape, exclusive=True, reverse=True) % shape
        with tf.control_dependencies(checks[:1]):  # The dimensions first.
            return tf.debugging.Assert(
                tf.logical_not(tf.reduce_any(flat)),
                ["input %s: " % name, tf.reshape(values, [-1])[at], " at ", where,
                 "; " + allowed], name="check_" + name)

    checks.append(first_bad("input_mask", mask, (mask < 0) | (mask > 1),
                            "a mask is 0 (padding) or 1 (a piece)"))
    if type_vocab_size:
        checks.append(first_bad(
            "segment_ids", segments, (segments < 0) | (segments >= type_vocab_size),
            "the model has %d segment types (0 to %d, its type_vocab_size)"
            % (type_vocab_size, type_vocab_size - 1)))
    with tf.control_dependencies(checks):
        return {name: tf.identity(t) for name, t in features.items()}


def run_in_chunks(model, features, structure=None, tokens_per_chunk=None, padding=None):
    """`model(features)` run on a bounded number of rows at a time: a loop
    in the graph (one chunk after the other: parallel_iterations=1) over
    chunks of at most `tokens_per_chunk` word pieces each (rows x the
    pieces of a row; one row at least), all of one size (the rows shared
    out evenly, the last chunk filled up with rows of id 0, whose outputs
    are dropped), the outputs of the chunks joined along the rows. A batch
    of one chunk's rows runs as it is, in one chunk. The memory of the
    model's activations is that of one chunk, however many windows a
    request gives; a TensorFlow Serving that serves the export is bounded
    the same way. Rows do not interact in the model, so the outputs are
    those of one batch, to float rounding.

    Args:
      model: (features) -> name -> tensor [rows, ...]; built once, in the
        loop's body (its variables are created there, or reused where the
        variable scope reuses).
      features: FEATURE_NAMES -> int32 [rows, ...] (input_ids decides
        the tokens per row: the product of its dimensions after the first).
      structure: the outputs' types and shapes, as `trace_model` finds
        them (default: traced here).
      tokens_per_chunk: the most pieces the model runs at once (default
        TOKENS_PER_CHUNK).
      padding: output name -> the value its rows are padded with where
        chunks give an output of different dimensions after the first
        (fill-mask's masks per row, say); default 0, "" or False.

    Returns:
      name -> tensor [rows, ...]: each output, its dimensions after the
      first the largest of any chunk.
    """
    structure = structure or trace_model(model, features)[0]
    padding = padding or {}
    shape = tf.shape(features["input_ids"])
    rows = shape[0]
    row_tokens = tf.maximum(tf.reduce_prod(shape[1:]), 1)
    most_rows = tf.maximum(1, (tokens_per_chunk or TOKENS_PER_CHUNK) // row_tokens)
    # One chunk at least, so that an empty batch gives empty outputs; the
    # rows shared out evenly, the last chunk filled up with padding rows
    # (all ids 0), which are cut off the outputs. Every chunk has the same
    # size, so that XLA, which slices only by sizes it knows, compiles it.
    num_chunks = tf.maximum(1, (rows + most_rows - 1) // most_rows)
    chunk = tf.maximum(1, (rows + num_chunks - 1) // num_chunks)
    filled = {name: tf.pad(t, [[0, num_chunks * chunk - rows]] + [[0, 0]] * (t.shape.rank - 1))
              for name, t in features.items()}
    names = sorted(structure)

    def new_array(dtype):
        # Of a size known before the loop: XLA has no growing arrays.
        return tf.TensorArray(dtype, size=num_chunks, infer_shape=False,
                              element_shape=tf.TensorShape(None))

    def body(index, arrays, largest):
        outputs = model({name: tf.slice(t, [index * chunk] + [0] * (t.shape.rank - 1),
                                        [chunk] + [-1] * (t.shape.rank - 1))
                         for name, t in filled.items()})
        # The gradients bert_ops attaches for training (gradient_override_map)
        # are not saved with a SavedModel; in a loop's function they would
        # make every load warn that a gradient may fail. Serving takes none.
        for op in tf.get_default_graph().get_operations():
            if "_gradient_op_type" in op.node_def.attr:
                op._clear_attr("_gradient_op_type")  # (TensorFlow has no public way)
        return (index + 1,
                [arrays[k].write(index, outputs[n]) for k, n in enumerate(names)],
                # (* 1: TensorFlow's type inference takes a shape for no int32.)
                [tf.maximum(largest[k], tf.shape(outputs[n]) * 1)
                 for k, n in enumerate(names)])

    _, arrays, largest = tf.while_loop(
        lambda index, *_: index < num_chunks, body,
        [tf.constant(0), [new_array(structure[n][0]) for n in names],
         [tf.zeros([structure[n][1].rank], tf.int32) for n in names]],
        parallel_iterations=1)
    joined = {}
    for name, array, most in zip(names, arrays, largest):
        dtype, static = structure[name]
        if static[1:].is_fully_defined():
            joined[name] = array.concat()[:rows]
        else:
            joined[name] = _pad_and_concat(array, num_chunks, most[1:], padding.get(
                name, "" if dtype == tf.string else False if dtype == tf.bool else 0))[:rows]
        joined[name].set_shape(tf.TensorShape([None]).concatenate(static[1:]))
    return joined


def _pad_and_concat(array, count, dims, value):
    """The `count` tensors of the TensorArray `array` [rows_i, ...], each
    padded with `value` to the dimensions `dims` (int32 [rank - 1]) after
    its first, joined along the first."""
    padded = tf.TensorArray(array.dtype, size=count, infer_shape=False,
                            element_shape=tf.TensorShape(None))

    def body(index, padded):
        part = array.read(index)
        extra = dims - tf.shape(part)[1:]
        widths = tf.concat([[[0, 0]], tf.stack([tf.zeros_like(extra), extra], axis=1)], 0)
        return index + 1, padded.write(index, tf.pad(part, widths, constant_values=value))

    _, padded = tf.while_loop(lambda index, _: index < count, body, [tf.constant(0), padded],
                              parallel_iterations=1)
    return padded.concat()


def check_export_flags(vocab_file, export_dir, precision="fp32"):
    """Checks up front, before a run trains, what its --export_dir will
    need: a folder it can write (`file_io.check_output_dir`: not a file),
    a vocabulary the graph's tokenizer can read
    (`graph_tokenization.check_vocab`) and, for an --export_precision
    other than fp32, ONNX Runtime (`onnx_model.require`). Without
    --export_dir, only that no such precision is given. Raises
    errors.InputError."""
    if precision != "fp32":
        if not export_dir:
            raise errors.InputError("--export_precision=%s shapes the export: give --export_dir"
                                    % precision)
        try:
            onnx_model.require()
        except ImportError as e:
            raise errors.InputError("--export_precision=%s: %s" % (precision, e))
    if not export_dir:
        return
    file_io.check_output_dir(export_dir, "export_dir")
    try:
        graph_tokenization.check_vocab(vocab_file)
    except ValueError as e:
        raise errors.InputError("--export_dir needs a --vocab_file it can build into the "
                                "SavedModel: %s" % e)


def string_input(name, rank=1):
    """A tf.string placeholder [batch] (rank 2: [batch, None]) for a text
    signature."""
    return tf.placeholder(tf.string, [None] * rank, name=name)


@dataclasses.dataclass(frozen=True)
class ExportSource:
    """What every export takes, whatever its task: the model and its
    weights, where the SavedModel goes, its tokenizer's files and input
    length (`fine_tuning.Run.export_source` makes one of a run).

    Attributes:
      bert_config: the modeling.BertConfig.
      checkpoint: the weights (a checkpoint prefix).
      export_dir: the SavedModel goes into a timestamped directory in it.
      vocab_file, do_lower_case: the tokenizer (stored as assets).
      max_seq_length: the longest input the model reads at once.
      options: the run's `training.TrainingOptions` (its precision is kept),
        or None.
      precision: the precision the export is served in (EXPORT_PRECISIONS,
        --export_precision).
    """

    bert_config: object
    checkpoint: str
    export_dir: str
    vocab_file: str
    do_lower_case: bool = True
    max_seq_length: int = 128
    options: object = None
    precision: str = "fp32"


def export(model_fn, source, text_signature, id_rank=2, settings=None, assets_extra=(),
           padding=None, warmup_text=warmup.TEXT, explain_signature=None, onnx_head=None):
    """Writes a SavedModel with a text signature and an id signature over
    one model (see the module docstring).

    Args:
      model_fn: the script's model_fn, built with
        `task_model.export_builder_args`; called once, in PREDICT mode, on
        the id features.
      source: the `ExportSource` (weights, folder, tokenizer).
      text_signature: (tokenizer) -> (inputs, features, outputs_fn): the
        string placeholders of serving_default (name -> tensor), the model's
        features computed from them (FEATURE_NAMES -> int32 tensors), and
        outputs_fn(predictions) -> name -> tensor, serving_default's outputs
        from the model_fn's `predictions`.
      id_rank: the rank of the id features ([batch, seq]: 2; SWAG's
        [batch, choices, seq]: 3); serving_ids takes any length.
      settings: more entries of tokenizer_config.json (max_seq_length, ...).
      assets_extra: files copied into the SavedModel's assets.extra/.
      padding: output name -> its padding value where the model's chunks
        give it different dimensions (`run_in_chunks`).
      warmup_text: the text of each text input in the export's warm-up
        requests (`warmup.example_requests`: one per signature; an input
        of settings["optional_inputs"] is left empty).
      explain_signature: None, or (tokenizer) -> (inputs, features,
        outputs_fn) of an EXPLAIN_SIGNATURE, as `text_signature`'s, but
        outputs_fn(features, model) -> name -> tensor, where `model` is
        (features) -> the model_fn's predictions (to run in chunks:
        `run_in_chunks`, `attributions.integrated_gradients`).
      onnx_head: (head, argument) of `onnx_model.write_model` (its rank
        id_rank): the task model as ONNX, for a source.precision other
        than fp32. Its outputs are the model_fn's predictions; the id
        signature's outputs are among them.

    Returns:
      The SavedModel's directory.
    """
    config = dict(settings or {}, do_lower_case=bool(source.do_lower_case))
    onnx = source.precision != "fp32"
    if onnx and not onnx_head:
        raise ValueError("this export has no ONNX form of its model: export it in fp32")
    if onnx:
        config.update(precision=source.precision, onnx_model=ONNX_FILE)
    with tempfile.TemporaryDirectory() as tmp:
        if onnx:
            onnx_path = os.path.join(tmp, ONNX_FILE)
            onnx_model.int8_model(onnx_model.write_model(source.bert_config, source.checkpoint,
                                                         *onnx_head, rank=id_rank), onnx_path)
            assets_extra = tuple(assets_extra) + (onnx_path,)
        config_path = os.path.join(tmp, CONFIG_ASSET)
        with open(config_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")

        def build_signatures():
            tf.add_to_collection(tf.GraphKeys.ASSET_FILEPATHS,
                                 tf.constant(config_path, name="tokenizer_config"))
            id_inputs = {name: tf.placeholder(tf.int32, [None] * id_rank, name=name)
                         for name in FEATURE_NAMES}

            def id_model(features):
                return model_fn(features, None, runtime.ModeKeys.PREDICT,
                                {}).export_outputs[TEXT_SIGNATURE].outputs

            structure, variables = trace_model(id_model, id_inputs)
            type_vocab_size = next((shape[0] for name, shape in variables.items()
                                    if name.endswith("token_type_embeddings")), None)
            checked = check_ids(id_inputs, type_vocab_size)
            if onnx:
                checked = {name: tf.identity(t, name=CHECKED_IDS_PREFIX + name)
                           for name, t in checked.items()}
            id_outputs = run_in_chunks(id_model, checked, structure, padding=padding)
            tokenizer = graph_tokenization.GraphTokenizer(source.vocab_file,
                                                      source.do_lower_case)
            text_inputs, features, outputs_fn = text_signature(tokenizer)
            # The same model again, on the features of the text (its own
            # ops, the same variables): each signature's graph holds only
            # what it runs, so either can be compiled or served alone.
            features = {name: tf.identity(tf.cast(features[name], tf.int32),
                                          name=TEXT_FEATURE_PREFIX + name)
                        for name in FEATURE_NAMES}
            with tf.variable_scope(tf.get_variable_scope(), reuse=True):
                predictions = run_in_chunks(lambda f: model_fn(
                    f, None, runtime.ModeKeys.PREDICT, {}).predictions, features,
                    padding=padding)
            if onnx:
                predictions = {name: tf.identity(t, name=PREDICTION_PREFIX + name)
                               for name, t in predictions.items()}
            signatures = {
                TEXT_SIGNATURE: tf.saved_model.predict_signature_def(
                    text_inputs, outputs_fn(predictions)),
                IDS_SIGNATURE: tf.saved_model.predict_signature_def(id_inputs, id_outputs)}
            if explain_signature:
                inputs, features, outputs_fn = explain_signature(tokenizer)
                features = {name: tf.identity(tf.cast(features[name], tf.int32),
                                              name=EXPLAIN_FEATURE_PREFIX + name)
                            for name in FEATURE_NAMES}
                with tf.variable_scope(tf.get_variable_scope(), reuse=True):
                    outputs = outputs_fn(features, lambda f: model_fn(
                        f, None, runtime.ModeKeys.PREDICT, {}).predictions)
                signatures[EXPLAIN_SIGNATURE] = tf.saved_model.predict_signature_def(
                    inputs, outputs)
            return signatures

        path = saved_model_writer.write_saved_model(
            build_signatures, source.checkpoint, source.export_dir, assets_extra=assets_extra,
            warmup_requests=lambda signatures: warmup.example_requests(
                signatures, warmup_text, empty=config.get("optional_inputs", ())))
    file_io.report_output(path, "SavedModel for serving (text in: %s%s; ids in: %s), with "
                          "the weights of %s%s" % (
                              TEXT_SIGNATURE, " and %s" % EXPLAIN_SIGNATURE
                              if explain_signature else "", IDS_SIGNATURE, source.checkpoint,
                              "; served by predict.py in %s through ONNX Runtime (assets.extra/"
                              "%s), by TF Serving in fp32" % (source.precision, ONNX_FILE)
                              if onnx else ""))
    return path
