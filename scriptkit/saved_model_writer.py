"""Writes a TF1 SavedModel (tag "serve") from a graph and a checkpoint.

Every export of the project ends here: the session runner's
`export_saved_model` (runtime.py) and the raw-text exports (serving.py).
`write_saved_model` builds the graph, restores its variables from a
checkpoint, writes the SavedModel to a temporary folder with its assets and
fingerprint, and renames it into place, so a failed export leaves no
half-written SavedModel at the final path, and removes its temp-<stamp>
folder.

A checkpoint need not hold the variables that no signature reads: the
global step, which checkpoints converted or pre-trained elsewhere lack, and
(say) a pooler that a sentence-embedding export never runs. Those keep their
initial values. A variable that a signature reads and the checkpoint lacks
is bad input, reported in one line.
"""

import os
import time

import tensorflow.compat.v1 as tf

from scriptkit import warmup
from scriptkit.errors import InputError


def write_saved_model(build_signatures, checkpoint_path, export_dir_base, session_config=None,
                      assets_extra=(), warmup_requests=None):
    """Writes a SavedModel (tag "serve") with the weights of `checkpoint_path`.

    Args:
      build_signatures: () -> {signature name: SignatureDef}, called in a new
        graph (with a global step) to build the model. Files in the graph's
        ASSET_FILEPATHS collection (a lookup table's vocabulary, say) are
        copied into the SavedModel's assets/, and its tables are initialised
        when it loads.
      checkpoint_path: the checkpoint whose variables are saved. Variables
        it lacks that no signature reads (the global step, ...) keep their
        initial values.
      export_dir_base: the SavedModel goes into export_dir_base/<unix time>;
        it is written to a temporary directory (export_dir_base/temp-<unix
        time>) and renamed, so a failure leaves no half-written export; a
        failure (an interruption too) removes the temporary directory.
      session_config: the tf.ConfigProto of the session that restores it.
      assets_extra: files copied into the SavedModel's assets.extra/ (for
        its users; the graph does not read them).
      warmup_requests: (signatures) -> [(signature name, input name ->
        array)]: requests written as TF Serving's warm-up file
        (assets.extra/tf_serving_warmup_requests, `warmup.write`), which
        a server runs before it serves.

    Returns:
      The SavedModel's directory.

    Raises:
      InputError: no checkpoint, or it lacks a variable a signature reads.
    """
    if not checkpoint_path:
        raise InputError("no checkpoint to export (checkpoint_path is empty)")
    graph = tf.Graph()
    with graph.as_default():
        tf.train.get_or_create_global_step()
        signatures = build_signatures()
        absent = _variables_absent(checkpoint_path, tf.global_variables())
        read = _variables_read(graph, signatures, absent)
        if read:
            raise InputError(
                "checkpoint %s lacks %d variable(s) the export reads, e.g. %s"
                % (checkpoint_path, len(read), ", ".join(v.op.name for v in read[:3])))
        # Built before the session runs the graph: tf.group marks the ops it
        # waits for (an attribute), and TensorFlow warns of ops changed
        # after a session ran them.
        main_op = tf.group(tf.local_variables_initializer(), tf.tables_initializer())
        init_absent = tf.variables_initializer(absent)
        saver = tf.train.Saver([v for v in tf.global_variables() if v not in absent],
                               sharded=True)
        tf.io.gfile.makedirs(export_dir_base)
        stamp = int(time.time())
        # Neither folder may exist: another writer's temp-<stamp> is not
        # this call's to remove.
        while any(tf.io.gfile.exists(os.path.join(export_dir_base, name % stamp))
                  for name in ("%d", "temp-%d")):
            stamp += 1
        export_dir = os.path.join(export_dir_base, str(stamp))
        temp_dir = os.path.join(export_dir_base, "temp-%d" % stamp)
        made = False  # whether this call's Builder has made temp_dir
        try:
            with tf.Session(config=session_config) as session:
                saver.restore(session, checkpoint_path)
                session.run(init_absent)
                # The Builder makes temp_dir, and fails if it exists.
                builder = tf.saved_model.Builder(temp_dir)
                made = True
                builder.add_meta_graph_and_variables(
                    session, [tf.saved_model.tag_constants.SERVING],
                    signature_def_map=signatures, strip_default_attrs=True,
                    assets_collection=tf.get_collection(tf.GraphKeys.ASSET_FILEPATHS),
                    main_op=main_op)
                builder.save()
            extra = os.path.join(temp_dir, "assets.extra")
            for path in assets_extra:
                tf.io.gfile.makedirs(extra)
                tf.io.gfile.copy(path, os.path.join(extra, os.path.basename(path)),
                                 overwrite=True)
            if warmup_requests is not None:
                tf.io.gfile.makedirs(extra)
                warmup.write(os.path.join(extra, warmup.FILE_NAME), warmup_requests(signatures))
            _write_fingerprint(temp_dir)
            tf.io.gfile.rename(temp_dir, export_dir)
        except BaseException:
            if made:
                _remove_quietly(temp_dir)
            raise
    return export_dir


def _remove_quietly(path):
    """Removes the folder `path` if it is there. A failure to remove it is
    logged, not raised: the error that called for the removal is the one
    the caller sees."""
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    except tf.errors.OpError as e:
        tf.logging.warning("Could not remove the unfinished export %s: %s",
                           path, str(e).splitlines()[0])


def _variables_absent(checkpoint_path, variables):
    """The `variables` whose names the checkpoint does not hold (a list)."""
    try:
        held = {name for name, _ in tf.train.list_variables(checkpoint_path)}
    except (tf.errors.NotFoundError, tf.errors.DataLossError) as e:
        raise InputError("cannot read checkpoint %s: %s"
                         % (checkpoint_path, str(e).splitlines()[0]))
    return [v for v in variables if v.op.name not in held]


def _variables_read(graph, signatures, variables):
    """The `variables` whose values some signature output depends on.

    Walks the graph back from every output tensor of `signatures` (name ->
    SignatureDef), through data and control inputs (`_inputs_read`); a
    variable is read when its own op (VariableV2, or a resource variable's
    handle) is reached.
    """
    seen = _reached([graph.get_tensor_by_name(info.name).op
                     for signature in signatures.values()
                     for info in signature.outputs.values()])
    return [v for v in variables if v.op in seen]


def _reached(ops):
    """The ops that `ops` depend on, themselves included (a set)."""
    pending, seen = list(ops), set()
    while pending:
        op = pending.pop()
        if op in seen:
            continue
        seen.add(op)
        pending.extend(tensor.op for tensor in _inputs_read(op))
        pending.extend(op.control_inputs)
    return seen


# Ops that call functions, and the attributes naming them; an If's first
# input is its condition, not a function's.
_FUNCTION_ATTRS = {"While": ("cond", "body"), "StatelessWhile": ("cond", "body"),
                   "If": ("then_branch", "else_branch"),
                   "StatelessIf": ("then_branch", "else_branch"),
                   "PartitionedCall": ("f",), "StatefulPartitionedCall": ("f",)}


def _inputs_read(op):
    """The inputs of `op` that its outputs depend on: for an op that calls
    functions (a loop in the graph, say `serving.run_in_chunks`), those
    that the functions' ops read, so that a variable a loop's body only
    passes along (the pooler of a model whose outputs never use it) is not
    read; every input of any other op, or of a function this cannot see."""
    attrs = _FUNCTION_ATTRS.get(op.type)
    if not attrs:
        return list(op.inputs)
    first = 1 if op.type in ("If", "StatelessIf") else 0
    used = set()
    for attr in attrs:
        function = _function_graph(op.graph, op.get_attr(attr).name)
        if function is None:
            return list(op.inputs)
        inputs = {tensor.op: k for k, tensor in enumerate(function.inputs)}
        # A loop passes its captured tensors from each iteration to the
        # next unchanged (the body's output k is its input k): no use.
        outputs = [t for k, t in enumerate(function.outputs)
                   if not (k < len(function.inputs) and t is function.inputs[k])]
        used.update(inputs[reached] for reached in _reached([t.op for t in outputs])
                    if reached in inputs)
    return list(op.inputs[:first]) + [op.inputs[first + k] for k in sorted(used)
                                      if first + k < len(op.inputs)]


def _function_graph(graph, name):
    """The FuncGraph of the function `name` in `graph` or a graph around
    it, or None where TensorFlow keeps it out of reach."""
    while graph is not None:
        function = graph._get_function(name)  # (TensorFlow has no public way)
        if function is not None:
            return getattr(function, "graph", None)
        graph = getattr(graph, "outer_graph", None)
    return None


def _write_fingerprint(saved_model_dir):
    """Writes the SavedModel's fingerprint.pb (hashes of its graph,
    signatures and weights), as tf.saved_model.save does and TensorFlow's
    TF1 SavedModel builder does not: without it, each load logs
    "Fingerprint not found" (and a second line). TensorFlow has no public
    function for it; a TensorFlow without this one writes none."""
    try:
        from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting
        fingerprint = fingerprinting.CreateFingerprintDef(saved_model_dir)
    except (ImportError, AttributeError):
        return
    with tf.io.gfile.GFile(os.path.join(saved_model_dir, "fingerprint.pb"), "wb") as f:
        f.write(fingerprint)
