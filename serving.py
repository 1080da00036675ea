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
  ``input_mask``, ``segment_ids``), as exports did before text came in.

The vocabulary and a ``tokenizer_config.json`` (the casing and the
sequence settings) are assets of the SavedModel. Loading it needs only
TensorFlow and TensorFlow Text (``import tensorflow_text`` before
``tf.saved_model.load``: it registers the WordPiece op).
"""

import json
import os
import tempfile

import tensorflow.compat.v1 as tf

import errors
import file_io
import graph_tokenization
import runtime
import saved_model_writer

TEXT_SIGNATURE = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
IDS_SIGNATURE = "serving_ids"
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")

# Next to the vocabulary in assets/: how the text is tokenized and packed.
CONFIG_ASSET = "tokenizer_config.json"

# The features the text signature computes are named "text_input_ids:0",
# ... in the graph (for tests and debugging).
TEXT_FEATURE_PREFIX = "text_"


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
    """`run_classifier.first_text_windows` for a batch: the windows of each
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


def check_export_flags(vocab_file, export_dir):
    """Checks up front, before a run trains, what its --export_dir will
    need: a folder it can write (`file_io.check_output_dir`: not a file)
    and a vocabulary the graph's tokenizer can read
    (`graph_tokenization.check_vocab`). Raises errors.InputError."""
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


def export(model_fn, export_dir, checkpoint_path, vocab_file, do_lower_case, text_signature,
           id_rank=2, settings=None, assets_extra=()):
    """Writes a SavedModel with a text signature and an id signature over
    one model (see the module docstring).

    Args:
      model_fn: the script's model_fn, built with
        `fine_tuning.export_builder_args`; called once, in PREDICT mode, on
        the id features.
      export_dir: the SavedModel goes into a timestamped directory in it.
      checkpoint_path: the weights.
      vocab_file, do_lower_case: the tokenizer's (stored as assets).
      text_signature: (tokenizer) -> (inputs, features, outputs_fn): the
        string placeholders of serving_default (name -> tensor), the model's
        features computed from them (FEATURE_NAMES -> int32 tensors), and
        outputs_fn(predictions) -> name -> tensor, serving_default's outputs
        from the model_fn's `predictions`.
      id_rank: the rank of the id features ([batch, seq]: 2; SWAG's
        [batch, choices, seq]: 3); serving_ids takes any length.
      settings: more entries of tokenizer_config.json (max_seq_length, ...).
      assets_extra: files copied into the SavedModel's assets.extra/.

    Returns:
      The SavedModel's directory.
    """
    config = dict(settings or {}, do_lower_case=bool(do_lower_case))
    with tempfile.TemporaryDirectory() as tmp:
        config_path = os.path.join(tmp, CONFIG_ASSET)
        with open(config_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")

        def build_signatures():
            tf.add_to_collection(tf.GraphKeys.ASSET_FILEPATHS,
                                 tf.constant(config_path, name="tokenizer_config"))
            id_inputs = {name: tf.placeholder(tf.int32, [None] * id_rank, name=name)
                         for name in FEATURE_NAMES}
            id_spec = model_fn(id_inputs, None, runtime.ModeKeys.PREDICT, {})
            tokenizer = graph_tokenization.GraphTokenizer(vocab_file, do_lower_case)
            text_inputs, features, outputs_fn = text_signature(tokenizer)
            # The same model again, on the features of the text (its own
            # ops, the same variables): each signature's graph holds only
            # what it runs, so either can be compiled or served alone.
            features = {name: tf.identity(tf.cast(features[name], tf.int32),
                                          name=TEXT_FEATURE_PREFIX + name)
                        for name in FEATURE_NAMES}
            with tf.variable_scope(tf.get_variable_scope(), reuse=True):
                text_spec = model_fn(features, None, runtime.ModeKeys.PREDICT, {})
            return {
                TEXT_SIGNATURE: tf.saved_model.predict_signature_def(
                    text_inputs, outputs_fn(text_spec.predictions)),
                IDS_SIGNATURE: tf.saved_model.predict_signature_def(
                    id_inputs, id_spec.export_outputs[TEXT_SIGNATURE].outputs)}

        path = saved_model_writer.write_saved_model(build_signatures, checkpoint_path,
                                                    export_dir, assets_extra=assets_extra)
    file_io.report_output(path, "SavedModel for serving (text in: %s; ids in: %s), with "
                          "the weights of %s" % (TEXT_SIGNATURE, IDS_SIGNATURE,
                                                 checkpoint_path))
    return path
