"""An exported SavedModel loaded for labelling and serving (predict.py):
finding the newest version in an export folder, calling a signature with
Python values, and its outputs as JSON, as TensorFlow Serving writes them;
an op's error (a failed check of the inputs) as one message.

Loading registers TensorFlow Text's ops (the exports tokenize in the graph).
"""

import base64
import json
import os
import re

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the WordPiece op of the exports)
from tensorflow.core.protobuf import saved_model_pb2

from scriptkit import attributions
from scriptkit import file_io
from scriptkit import onnx_model
from scriptkit import serving
from scriptkit import warmup
from scriptkit.errors import InputError

# Signature inputs and outputs, as TensorFlow Serving names the string kind.
BINARY_SUFFIX = "_bytes"


def find_saved_model(model_dir):
    """(SavedModel folder, version): `model_dir` itself if it holds a
    saved_model.pb, else its numbered subfolder with the highest number
    (an export's timestamps, TensorFlow Serving's versions). A SavedModel
    folder whose name is no number has version "1".

    Raises:
      InputError: no SavedModel there.
    """
    if file_io.exists(os.path.join(model_dir, "saved_model.pb")):
        name = os.path.basename(os.path.normpath(model_dir))
        return model_dir, name if name.isdigit() else "1"
    versions = []
    if file_io.isdir(model_dir):
        versions = [name.rstrip("/") for name in file_io.gfile().listdir(model_dir)
                    if name.rstrip("/").isdigit()
                    and file_io.exists(os.path.join(model_dir, name, "saved_model.pb"))]
    if not versions:
        raise InputError("--model_dir: no SavedModel in %s (a folder with saved_model.pb, or "
                         "an export folder holding timestamped ones)" % model_dir)
    version = max(versions, key=int)
    return os.path.join(model_dir, version), version


class RequestError(ValueError):
    """A request (or an input row) the model cannot take; the message says
    why."""


class Signature:
    """One signature of a loaded SavedModel, called with Python values.

    Attributes:
      name: the signature's name.
      inputs: name -> tf.TensorSpec (the batch is the first dimension).
      output_names: sorted.
      output_specs: name -> its tensor (shape and dtype; the batch is the
        first dimension).
    """

    def __init__(self, name, function, features=None, explained_rows=0):
        self.name = name
        # The rows an explanation runs per text, besides its windows.
        self._explained_rows = explained_rows
        self._function = function
        self.inputs = dict(function.structured_input_signature[1])
        self.output_specs = dict(function.structured_outputs)
        self.output_names = sorted(self.output_specs)
        # The part of a text signature that tokenizes and packs (a pruned
        # function of its text inputs in name order -> its input_ids), or
        # None.
        self._features = features
        self._features_inputs = sorted(name for name, spec in self.inputs.items()
                                       if spec.dtype == tf.string)

    def __call__(self, columns):
        """The outputs (name -> NumPy array) for `columns`: input name ->
        its value for the whole batch (nested lists; strings as str, or
        {"b64": ...} for bytes). Raises RequestError for a missing or
        unknown input, or a value of the wrong type or shape."""
        unknown = sorted(set(columns) - set(self.inputs))
        missing = sorted(set(self.inputs) - set(columns))
        if unknown or missing:
            raise RequestError("the signature %s takes %s; %s" % (
                self.name, ", ".join(sorted(self.inputs)),
                "; ".join(filter(None, ["missing: " + ", ".join(missing) if missing else "",
                                        "unknown: " + ", ".join(unknown) if unknown else ""]))))
        tensors = {name: _tensor(name, columns[name], spec)
                   for name, spec in self.inputs.items()}
        return {name: value.numpy() for name, value in self._function(**tensors).items()}

    def run(self, arrays):
        """The outputs (name -> NumPy array) for `arrays`: input name -> a
        NumPy array of the input's dtype and rank (text as UTF-8 bytes),
        checked beforehand (the server's `rest_api._checked_inputs`)."""
        tensors = {name: tf.constant(arrays[name], dtype=spec.dtype)
                   for name, spec in self.inputs.items()}
        return {name: value.numpy() for name, value in self._function(**tensors).items()}


    def windows(self, arrays):
        """How many rows the model runs for `arrays` (as `run` takes them):
        windows of max_seq_length pieces (a question answering context, a
        tagger's document and a windowed classifier text each give one per
        window, an instance without windows one, a multiple-choice instance
        one per ending; an explanation its windows, and per text the rows
        of its integral: `attributions.rows_per_text`),
        counted by the signature's own tokenizer and windows without running
        the model; None for a signature that is neither a text signature of
        serving.py's exports nor an id signature."""
        if self._features is not None:
            names = self._features_inputs
            ids = self._features(*[tf.constant(arrays[name], tf.string) for name in names])
            return (int(np.prod(ids.shape[:-1]))
                    + self._explained_rows * len(arrays[names[0]]))
        ids = arrays.get("input_ids")
        if ids is None or np.ndim(ids) < 2 or set(self.inputs) != set(serving.FEATURE_NAMES):
            return None
        return int(np.prod(np.shape(ids)[:-1]))


class _OnnxFunction:
    """A signature's function whose task model runs in ONNX Runtime: the
    signature's graph up to the model's features (tokenization and packing,
    or the id checks), then the ONNX model on them row by row
    (`onnx_model.run_rows`), then the graph from the model's
    predictions to the signature's outputs (or, for the id signature, the
    predictions of those names). Called as the loaded function is."""

    def __init__(self, function, inputs, before, session, predicted, after=None):
        self.structured_input_signature = function.structured_input_signature
        self.structured_outputs = function.structured_outputs
        self._inputs, self._before, self._after = inputs, before, after
        self._session, self._predicted = session, predicted

    def __call__(self, **tensors):
        inputs = [tensors[name] for name in self._inputs]
        features = [t.numpy() for t in self._before(*inputs)]
        predictions = onnx_model.run_rows(self._session,
                                          dict(zip(serving.FEATURE_NAMES, features)))
        if self._after is None:
            return {name: tf.constant(predictions[name]) for name in self.structured_outputs}
        return self._after(*inputs, *[tf.constant(predictions[name])
                                      for name in self._predicted])


def _features_function(loaded, graph_def, name, signature_def):
    """The function that computes the text features of the signature `name`
    (`signature_def`) from its string inputs (in name order), pruned from
    the loaded SavedModel: for a signature of string inputs (the explain
    signature's: and perhaps others, a tagger's word indices) in a graph
    that holds serving.py's text_input_ids (explain_input_ids); else
    None."""
    explain = name == serving.EXPLAIN_SIGNATURE
    prefix = serving.EXPLAIN_FEATURE_PREFIX if explain else serving.TEXT_FEATURE_PREFIX
    feature = prefix + serving.FEATURE_NAMES[0]
    texts = sorted(input_name for input_name, info in signature_def.inputs.items()
                   if info.dtype == tf.string.as_datatype_enum)
    if (not texts or (len(texts) < len(signature_def.inputs) and not explain)
            or not any(node.name == feature for node in graph_def.node)):
        return None
    return loaded.prune([signature_def.inputs[n].name for n in texts], feature + ":0")


def _tensor(name, value, spec):
    """`value` (nested lists) as a tensor of `spec`'s type and rank."""
    if spec.dtype == tf.string:
        value = encode_strings(name, value)
    try:
        tensor = tf.constant(value, dtype=spec.dtype)
    except (TypeError, ValueError) as e:
        raise RequestError("input %s: expected %s of %s values (%s)"
                           % (name, _shape_words(spec), spec.dtype.name, e))
    if not spec.shape.is_compatible_with(tensor.shape):
        raise RequestError("input %s: expected %s, got shape %s"
                           % (name, _shape_words(spec), tensor.shape.as_list()))
    return tensor


def _shape_words(spec):
    return "a list" if spec.shape.rank == 1 else "lists nested %d deep" % spec.shape.rank


def encode_strings(name, value):
    """Nested lists of str / {"b64": ...} -> the same of bytes."""
    if isinstance(value, list):
        return [encode_strings(name, item) for item in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError as e:
            raise RequestError("input %s: bad base64 (%s)" % (name, e))
    raise RequestError("input %s: expected text, got %s" % (name, json.dumps(value)[:80]))


def json_value(name, array):
    """A NumPy output as JSON: bytes as text (UTF-8), or {"b64": ...} for
    outputs named *_bytes and bytes that are not UTF-8, as TensorFlow
    Serving writes them."""
    if isinstance(array, bytes):
        array = np.array(array, dtype=object)
    if array.dtype != object:
        return array.tolist()
    if array.ndim:
        return [json_value(name, item) for item in array]
    if not name.endswith(BINARY_SUFFIX):
        try:
            return array.item().decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(array.item()).decode("ascii")}


class Model:
    """An exported SavedModel, loaded once (see `find_saved_model`).

    Attributes:
      path, version: the SavedModel folder and its version.
      signature_defs: name -> SignatureDef (the protos, for metadata).
      tokenizer_config: the export's settings (assets/tokenizer_config.json:
        max_seq_length, ...; {} where there is none).
      max_positions: the longest id sequence the model takes (its
        max_position_embeddings), or None where unknown.
    """

    def __init__(self, model_dir):
        self.path, self.version = find_saved_model(model_dir)
        saved_model = saved_model_pb2.SavedModel()
        saved_model.ParseFromString(file_io.read_file_bytes(
            os.path.join(self.path, "saved_model.pb")))
        meta_graph = saved_model.meta_graphs[0]
        self.signature_defs = dict(meta_graph.signature_def)
        loaded = tf.saved_model.load(self.path)
        config = os.path.join(self.path, "assets", serving.CONFIG_ASSET)
        self.tokenizer_config = (json.loads(file_io.read_file_bytes(config))
                                 if file_io.exists(config) else {})
        # An explanation runs the model on more rows per text.
        explained_rows = attributions.rows_per_text(
            int(self.tokenizer_config.get("explain_steps", 0)))
        functions = dict(loaded.signatures)
        if self.tokenizer_config.get("precision", "fp32") != "fp32":
            functions.update(self._onnx_functions(loaded, meta_graph.graph_def, functions))
        self._signatures = {
            name: Signature(name, function, _features_function(
                loaded, meta_graph.graph_def, name, self.signature_defs[name]),
                explained_rows=explained_rows if name == serving.EXPLAIN_SIGNATURE else 0)
            for name, function in functions.items()}
        self._loaded = loaded  # Keeps the functions' variables alive.
        self.max_positions = next((int(v.shape[0]) for v in getattr(loaded, "variables", ())
                                   if v.name.endswith("position_embeddings:0")), None)

    def _onnx_functions(self, loaded, graph_def, functions):
        """The text and id signatures' functions (name -> `_OnnxFunction`)
        with their task model run by ONNX Runtime, from the export's ONNX
        model (an --export_precision other than fp32: `serving.ONNX_FILE`),
        in place of the loaded `functions`; the explain signature stays the
        graph's."""
        try:
            onnx_model.require()
        except ImportError as e:
            raise InputError("--model_dir: %s is a %s export: %s" % (
                self.path, self.tokenizer_config["precision"], e))
        # As many threads per operation as TensorFlow's (0: each runtime's
        # own choice), so that one setting governs both.
        session = onnx_model.session(
            os.path.join(self.path, "assets.extra", self.tokenizer_config["onnx_model"]),
            tf.config.threading.get_intra_op_parallelism_threads())
        nodes = {node.name for node in graph_def.node}
        predicted = sorted(node[len(serving.PREDICTION_PREFIX):] for node in nodes
                           if node.startswith(serving.PREDICTION_PREFIX))
        replaced = {}
        for name, prefix in ((serving.TEXT_SIGNATURE, serving.TEXT_FEATURE_PREFIX),
                             (serving.IDS_SIGNATURE, serving.CHECKED_IDS_PREFIX)):
            signature_def = self.signature_defs[name]
            inputs = sorted(signature_def.inputs)
            feeds = [signature_def.inputs[n].name for n in inputs]
            before = loaded.prune(feeds, [prefix + n + ":0" for n in serving.FEATURE_NAMES])
            after = None
            if name == serving.TEXT_SIGNATURE:
                after = loaded.prune(
                    feeds + [serving.PREDICTION_PREFIX + n + ":0" for n in predicted],
                    {n: info.name for n, info in signature_def.outputs.items()})
            replaced[name] = _OnnxFunction(functions[name], inputs, before, session, predicted,
                                           after)
        return replaced

    def warm_up(self):
        """Runs the export's warm-up requests (assets.extra/
        tf_serving_warmup_requests, as TF Serving does), or where it has
        none one request per signature (`warmup.example_requests`), as a
        server runs a request (the count of its windows, then the
        signature), so that TensorFlow optimises each function now rather
        than on the first request.

        Returns:
          (requests run, the file they came from or None).

        Raises:
          InputError: the file is unreadable, or a request fails (naming
            the file and the record), as TF Serving then fails to load.
        """
        path = os.path.join(self.path, "assets.extra", warmup.FILE_NAME)
        source = path if file_io.exists(path) else None
        try:
            requests = (warmup.read(path) if source else warmup.example_requests(
                self.signature_defs, empty=self.tokenizer_config.get("optional_inputs", ())))
        except (ValueError, tf.errors.OpError) as e:
            raise InputError("--model_dir: the warm-up file %s cannot be read: %s"
                             % (path, str(e).splitlines()[0]))
        for index, (name, arrays) in enumerate(requests):
            try:
                signature = self.signature(name)
                signature.windows(arrays)
                signature.run(arrays)
            except (RequestError, tf.errors.OpError, KeyError, ValueError) as e:
                text = (op_error_message(e) if isinstance(e, tf.errors.OpError)
                        else str(e) or type(e).__name__)
                raise InputError("--model_dir: warm-up request %d%s (signature %s) failed: %s"
                                 % (index + 1, " of %s" % path if source else "", name, text))
        return len(requests), source

    def signature(self, name):
        """The `Signature` `name`; RequestError if the model has none."""
        if name not in self._signatures:
            raise RequestError("no signature %r; the model has %s"
                               % (name, ", ".join(sorted(self._signatures))))
        return self._signatures[name]


def split_outputs(outputs):
    """Batch outputs (name -> array [batch, ...]) -> one dict per example.
    A tagger's per-word outputs (beside its num_words) are cut to each
    text's words, fill-mask's per-mask outputs to its num_masks."""
    count_name = "num_masks" if "num_masks" in outputs else "num_words"
    counts = outputs.get(count_name)
    examples = []
    for i in range(len(next(iter(outputs.values())))):
        example = {}
        for name, array in outputs.items():
            value = array[i]
            if counts is not None and name != count_name and np.ndim(value) >= 1:
                value = value[:counts[i]]
            example[name] = json_value(name, value)
        examples.append(example)
    return examples


# ---------------------------------------------------------------------------
# Op errors as messages.

def op_error_message(error):
    """The message of a TensorFlow op error without what TensorFlow adds
    around it when a function runs: "Graph execution error:", the Python
    frames that defined the op (they would show the server's paths), the
    node and the function's name, and the stack trace a TF1 session
    appends ("Original stack trace for ...")."""
    text = re.split(r"\n\s*Original stack trace for ", error.message)[0]
    frames = re.search(r"Detected at node .*? \(most recent call last\):\n", text)
    if frames:
        text = text[frames.end():]
        # The frames are indented lines (and blank ones) up to the message.
        text = re.sub(r"\A(?:[ \t].*\n|\n)*", "", text)
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith(("[[", "Node: "))
             and line.strip() != "Graph execution error:"]
    text = re.sub(r"\s*\[Op:[^\]]*\]$", "", " ".join(lines))
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    return _joined_assert_data(text) or type(error).__name__


# What an Assert op prints of its data: "assertion failed: [a] [b] ...",
# each piece in brackets (a vector of numbers in its own).
_ASSERT = re.compile(r"assertion failed: ((?:\[[^\[\]]*\] ?)+)$")


def _joined_assert_data(text):
    """`text` with an Assert's data pieces joined as one message: a text
    or a single number without its brackets, a vector of several numbers
    with them (serving.check_ids' messages: "input input_mask: 5 at [0 2];
    ...")."""
    match = _ASSERT.search(text)
    if not match:
        return text
    pieces = re.findall(r"\[([^\[\]]*)\]", match.group(1))
    joined = "".join("[%s]" % p if re.fullmatch(r"-?\d+(?: -?\d+)+", p) else p
                     for p in pieces)
    return text[:match.start()] + "assertion failed: " + joined
