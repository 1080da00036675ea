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

from errors import InputError


def write_saved_model(build_signatures, checkpoint_path, export_dir_base, session_config=None,
                      assets_extra=()):
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
            for path in assets_extra:
                extra = os.path.join(temp_dir, "assets.extra")
                tf.io.gfile.makedirs(extra)
                tf.io.gfile.copy(path, os.path.join(extra, os.path.basename(path)),
                                 overwrite=True)
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
    SignatureDef), through data and control inputs; a variable is read when
    its own op (VariableV2, or a resource variable's handle) is reached.
    """
    pending = [graph.get_tensor_by_name(info.name).op
               for signature in signatures.values() for info in signature.outputs.values()]
    seen = set()
    while pending:
        op = pending.pop()
        if op in seen:
            continue
        seen.add(op)
        pending.extend(tensor.op for tensor in op.inputs)
        pending.extend(op.control_inputs)
    return [v for v in variables if v.op in seen]


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
