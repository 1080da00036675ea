"""Integrated gradients in an export's graph: how much each word piece, and
each word, of an input moved one of the model's outputs (what the
``explain`` signature of an export returns, `serving.export`).

For one input x (its word embeddings, [length, hidden]) and a baseline x'
(the same input with each text piece's embedding that of [PAD]; [CLS],
[SEP] and the position and segment embeddings are kept), the attribution
of piece j to an output F is

    (x_j - x'_j) . integral over a in [0, 1] of dF/dx_j (x' + a (x - x')),

the integral taken over `steps` points placed where the output changes
(`integrated_gradients`). The
attributions of a row sum to F(x) - F(x') ("completeness"), to within the
rule's error; the signature returns both values, so that a caller can see
how close they are.

The model reads the interpolated embeddings through a custom getter of the
word embedding table (`bert/embeddings/word_embeddings`): every row of the
looked-up "table" is one position of one interpolation point, and the
model is handed the ids 0, 1, 2, ... that pick them in order. So the task
scripts' model functions and modeling.BertModel run unchanged.

In: the model (features -> predictions), the features of a batch. Out: the
attributions per piece, and per word (`word_attributions`). Imports
TensorFlow.
"""

import tensorflow.compat.v1 as tf

from scriptkit import serving

# The points of the integral (--explain_steps).
DEFAULT_STEPS = 32
# The table the interpolated embeddings replace (modeling.BertModel's).
WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"


# The output is first computed at this many evenly spaced points of the
# path per point of the integral (forward only: a third of a point's cost),
# and the integral's points are placed by that: this share by where the
# output changes, the rest evenly (`adapted_points`). Measured on all-
# MiniLM-L6-v2 fine-tuned on demo_data/sentiment, its first 80 dev
# sentences, 32 points, the label's probability: the attributions' sum was
# off output - baseline_output by up to 4.9 with evenly spaced points (the
# midpoint rule), 0.23 with 1 and 0.5 here, 0.052 with 2 and 0.8.
PATH_POINTS_PER_STEP = 2
CHANGE_SHARE = 0.8


def rows_per_text(steps):
    """The rows of the model an explanation runs per explained input, for
    `steps` points: the path's PATH_POINTS_PER_STEP * steps + 1 (forward
    only), then the steps (forward and backward)."""
    return (PATH_POINTS_PER_STEP + 1) * steps + 1


def baseline_ids(input_ids, input_mask, cls_id, sep_id, pad_id=0):
    """The baseline's ids: `input_ids` [n, length] with every piece of the
    texts (not [CLS], [SEP] or padding) replaced by `pad_id`. A text's
    pieces are never [CLS] or [SEP] (the tokenizer splits "[SEP]" into
    three pieces)."""
    special = tf.equal(input_ids, cls_id) | tf.equal(input_ids, sep_id)
    keep = special & tf.equal(input_mask, 1)
    return tf.where(keep, input_ids, tf.fill(tf.shape(input_ids), pad_id))


def integrated_gradients(model, features, kept_ids, targets, output_fn, steps):
    """The attribution of each piece of each input to one output.

    The integral's `steps` points are placed where the output changes: a
    fine-tuned model's output along the path from the baseline can rise
    from one value to the other within a few hundredths of it (a step, not
    a slope), which evenly spaced points straddle. So the output is first
    computed (forward only) at PATH_POINTS_PER_STEP * steps + 1 evenly
    spaced points; each of those intervals then gets points in proportion
    to CHANGE_SHARE of its share of the output's change plus the rest of
    its share of the path, evenly spaced within it (`adapted_points`), each
    weighted by the width of the path it stands for (the midpoint rule on
    those intervals).

    Args:
      model: (features) -> predictions (name -> float32 tensor [rows, ...]),
        the task's model in PREDICT mode, which builds modeling.BertModel
        under the variable scope "bert"; built in loops over chunks of rows
        (`serving.run_in_chunks`), its variables reused.
      features: serving.FEATURE_NAMES -> int32 [n, length].
      kept_ids: (cls_id, sep_id), the ids the baseline keeps (`baseline_ids`).
      targets: int32 [n, ...], which output of a row is explained (a label
        id, positions; any value where `output_fn` needs none).
      output_fn: (predictions, targets int32 [rows, ...]) -> float32
        [rows], the explained output of each row.
      steps: the points of the integral.

    Returns:
      (attributions float32 [n, length], the output at the input float32
      [n], the output at the baseline float32 [n]). Positions of [CLS],
      [SEP] and padding have 0.
    """
    ids = features["input_ids"]
    n, length = tf.shape(ids)[0], tf.shape(ids)[1]
    baseline = baseline_ids(ids, features["input_mask"], *kept_ids)

    def rows_of(count, alphas):
        # Each input `count` times, at its alphas [n, count].
        def repeated(t):
            # (tf.repeat keeps no static dimension: the rows' are set again.)
            rows = tf.repeat(t, count, axis=0)
            rows.set_shape(tf.TensorShape([None]).concatenate(t.shape[1:]))
            return rows
        rows = {name: repeated(features[name]) for name in serving.FEATURE_NAMES}
        rows.update(baseline_ids=repeated(baseline), targets=repeated(targets),
                    alphas=tf.reshape(alphas, [-1]))
        return rows

    path = PATH_POINTS_PER_STEP * steps
    grid = tf.tile(tf.linspace(0.0, 1.0, path + 1)[tf.newaxis, :], [n, 1])
    along = serving.run_in_chunks(lambda chunk: _explained_rows(model, chunk, output_fn,
                                                                gradients=False),
                                  rows_of(path + 1, grid))
    along = tf.reshape(along["outputs"], [n, path + 1])
    points, widths = adapted_points(along, steps)
    out = serving.run_in_chunks(lambda chunk: _explained_rows(model, chunk, output_fn),
                                rows_of(steps, points))
    contributions = tf.reshape(out["contributions"], [n, steps, length])
    return (tf.reduce_sum(contributions * widths[:, :, tf.newaxis], axis=1), along[:, -1],
            along[:, 0])


def adapted_points(along, steps):
    """The integral's points on the path, from the output at evenly spaced
    points of it.

    Args:
      along: float32 [n, m + 1], the output at a = 0, 1/m, ..., 1.
      steps: how many points.

    Returns:
      (points, widths): float32 [n, steps] each: the midpoints of `steps`
      intervals that cover [0, 1] in order, and their widths (summing to
      1). Of the m intervals of `along`, each holds a share of them of
      CHANGE_SHARE of its share of the output's change (where the output
      changes at all) plus the rest of 1 / m, spread evenly within it.
    """
    m = tf.shape(along)[1] - 1
    change = tf.abs(along[:, 1:] - along[:, :-1])  # [n, m]
    total = tf.reduce_sum(change, axis=1, keepdims=True)
    even = tf.ones_like(change) / tf.cast(m, tf.float32)
    share = tf.where(tf.broadcast_to(total > 0, tf.shape(change)),
                     change / tf.where(total > 0, total, tf.ones_like(total)), even)
    mass = CHANGE_SHARE * share + (1 - CHANGE_SHARE) * even
    cumulative = tf.concat([tf.zeros_like(mass[:, :1]), tf.cumsum(mass, axis=1)], axis=1)
    cumulative = cumulative / cumulative[:, -1:]  # [n, m + 1], 0 to 1
    # The intervals' bounds: where the cumulative mass is k / steps (linear
    # within each of the m intervals).
    wanted = tf.tile(tf.linspace(0.0, 1.0, steps + 1)[tf.newaxis, :], [tf.shape(along)[0], 1])
    interval = tf.clip_by_value(tf.searchsorted(cumulative, wanted, side="right") - 1, 0, m - 1)
    low = tf.gather(cumulative, interval, batch_dims=1)
    high = tf.gather(cumulative, interval + 1, batch_dims=1)
    within = tf.clip_by_value((wanted - low) / tf.maximum(high - low, 1e-12), 0.0, 1.0)
    bounds = (tf.cast(interval, tf.float32) + within) / tf.cast(m, tf.float32)
    # The first bound 0 and the last 1 exactly.
    bounds = tf.concat([tf.zeros_like(bounds[:, :1]), bounds[:, 1:-1],
                        tf.ones_like(bounds[:, :1])], axis=1)
    return (bounds[:, 1:] + bounds[:, :-1]) / 2, bounds[:, 1:] - bounds[:, :-1]


def _explained_rows(model, chunk, output_fn, gradients=True):
    """One chunk of `integrated_gradients`' rows: the model run on the
    rows' interpolated embeddings, and per row its output and (with
    `gradients`) the gradient's product with x - x' at each position.

    Returns:
      {"outputs": float32 [rows]}, and "contributions": float32 [rows,
      length].
    """
    ids, base, alphas = chunk["input_ids"], chunk["baseline_ids"], chunk["alphas"]
    shape = tf.shape(ids)
    found = {}

    def interpolated_table(getter, name, *args, **kwargs):
        variable = getter(name, *args, **kwargs)
        if name != WORD_EMBEDDINGS:
            return variable
        table = tf.convert_to_tensor(variable)
        inputs, baselines = tf.gather(table, ids), tf.gather(table, base)
        found["difference"] = inputs - baselines
        # One "table" row per position of each row, in order.
        found["points"] = tf.reshape(
            baselines + alphas[:, tf.newaxis, tf.newaxis] * found["difference"],
            [-1, variable.shape[-1]])
        return found["points"]

    positions = tf.reshape(tf.range(shape[0] * shape[1]), shape)
    # AUTO_REUSE: the export's variables exist, but not those of the graph
    # in which `serving.trace_model` builds the model alone.
    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE,
                           custom_getter=interpolated_table):
        predictions = model({"input_ids": positions, "input_mask": chunk["input_mask"],
                             "segment_ids": chunk["segment_ids"]})
    if "points" not in found:
        raise ValueError("the model reads no %s table" % WORD_EMBEDDINGS)
    outputs = output_fn(predictions, chunk["targets"])
    if not gradients:
        return {"outputs": outputs}
    gradient = tf.convert_to_tensor(tf.gradients(tf.reduce_sum(outputs), found["points"])[0])
    gradient = tf.reshape(gradient, tf.shape(found["difference"]))
    return {"contributions": tf.reduce_sum(gradient * found["difference"], axis=-1),
            "outputs": outputs}


def _text_positions(pieces, first_position, kept, skipped=None):
    """Where the pieces of one text of each input sit in the packed input.

    Args:
      pieces: RaggedTensor int32 [n, (words), (pieces)], each word's pieces.
      first_position: int32 [n], the position of the first piece the input
        holds (1 for the first text, after [CLS]).
      kept: int32 [n], how many of the text's pieces the input holds.
      skipped: int32 [n], how many of the text's pieces come before those
        (a window's start in its context); default none.

    Returns:
      (positions, is_kept): int32 and bool [number of pieces], for each
      piece of `pieces.flat_values` its position (0 where not held).
    """
    flat = pieces.merge_dims(1, 2)
    rows = flat.value_rowids()
    within = (tf.range(tf.size(flat.values, out_type=tf.int64))
              - tf.gather(flat.row_starts(), rows))
    within = tf.cast(within, tf.int32)
    if skipped is not None:
        within -= tf.gather(skipped, rows)
    is_kept = (within >= 0) & (within < tf.gather(kept, rows))
    positions = tf.where(is_kept, tf.gather(first_position, rows) + within,
                         tf.zeros_like(within))
    return positions, is_kept


def word_attributions(piece_attributions, pieces, first_position, kept, skipped=None):
    """The attributions of one text's words: the sum of their pieces'.

    Args:
      piece_attributions: float32 [n, length] (`integrated_gradients`).
      pieces: RaggedTensor [n, (words), (pieces)] of one text.
      first_position, kept, skipped: where the input holds the text's pieces
        (`_text_positions`).

    Returns:
      RaggedTensor float32 [n, (words)]; a word the input does not hold has 0.
    """
    positions, is_kept = _text_positions(pieces, first_position, kept, skipped)
    rows = tf.cast(pieces.merge_dims(1, 2).value_rowids(), tf.int32)
    values = tf.gather_nd(piece_attributions, tf.stack([rows, positions], axis=1))
    values = tf.where(is_kept, values, tf.zeros_like(values))
    return tf.reduce_sum(pieces.with_flat_values(values), axis=-1)


def joined_words(parts):
    """Ragged [n, (words)] tensors of several texts joined per row (the
    first text's words, then the second's), without a ragged concat (which
    logs a oneDNN error line about int64 on every run).

    Args:
      parts: a list of lists of RaggedTensors [n, (words)]: for each text,
        its words' values (words, offsets, attributions ...), in the same
        order for every text.

    Returns:
      A list of RaggedTensors [n, (words)], one per value, and the text
      each word is from (int32, 0 for the first).
    """
    rowids = tf.concat([part[0].value_rowids() for part in parts], 0)
    order = tf.argsort(rowids, stable=True)
    nrows = parts[0][0].nrows()

    def joined(values):
        return tf.RaggedTensor.from_value_rowids(
            tf.gather(tf.concat(values, 0), order), tf.gather(rowids, order), nrows=nrows,
            validate=False)

    texts = [tf.fill(tf.shape(part[0].flat_values), index) for index, part in enumerate(parts)]
    return ([joined([part[k].flat_values for part in parts]) for k in range(len(parts[0]))],
            joined(texts))


def pack_texts(tokenizer, texts, max_seq_length):
    """The explain signature's input of one or two texts per instance,
    packed as `serving.pack` packs the text signature's, word by word (each
    piece knows its word: `GraphTokenizer.split_words`, `word_pieces`).

    Args:
      tokenizer: the export's `graph_tokenization.GraphTokenizer`.
      texts: [text_a] or [text_a, text_b], tf.string [n] each (an empty
        text_b: the first text alone).
      max_seq_length: the longest input the model reads.

    Returns:
      (features, words_fn): FEATURE_NAMES -> int32 [n, longest], and
      words_fn(piece_attributions float32 [n, longest]) -> the outputs per
      word, padded to the batch's most words: words (tf.string, ""
      past them), start_offsets and end_offsets (int32, text[start:end] in
      Unicode characters; -1 past them), attributions (float32, 0 past
      them), num_words [n], and for two texts segments (int32: 0 for a
      word of text_a, 1 of text_b, -1 past them).
    """
    split = [tokenizer.split_words(text) for text in texts]
    pieces = [tokenizer.word_pieces(words) for words, _, _ in split]
    features = serving.pack(pieces[0].merge_dims(1, 2),
                            pieces[1].merge_dims(1, 2) if len(texts) > 1 else None,
                            max_seq_length, tokenizer.cls_id, tokenizer.sep_id)

    def words_fn(piece_attributions):
        mask, segments = features["input_mask"], features["segment_ids"]
        # [CLS] a [SEP] (b [SEP]): what the packing kept of each text.
        in_first = tf.reduce_sum(mask * tf.cast(tf.equal(segments, 0), tf.int32), axis=1)
        in_second = tf.reduce_sum(mask * segments, axis=1)
        starts = [tf.ones_like(in_first), in_first]
        kept = [in_first - 2, tf.maximum(in_second - 1, 0)]
        parts = []
        for (words, begin, end), text_pieces, start, count in zip(split, pieces, starts, kept):
            parts.append([words, begin, end, word_attributions(
                piece_attributions, text_pieces, start, count)])
        if len(texts) > 1:
            return padded_words(*joined_words(parts))
        return padded_words(parts[0])

    return features, words_fn


def chosen_labels(labels, predicted, label_list):
    """The label each instance's explanation is for: the one named in
    `labels` (tf.string [n]), or where that is "" the predicted one.

    Args:
      labels: tf.string [n], label names or "".
      predicted: int32 [n], the label ids the model predicts.
      label_list: the label names, in the order of the model's outputs.

    Returns:
      int32 [n], label ids; an unknown name fails the run with an
      InvalidArgumentError naming it (a 400 from the server).
    """
    names = tf.constant(label_list)
    matches = tf.equal(labels[:, tf.newaxis], names[tf.newaxis, :])
    found = tf.reduce_any(matches, axis=1)
    empty = tf.equal(labels, "")
    unknown = tf.logical_not(found | empty)
    # (With one more, known, entry: an empty batch has an argmax too.)
    first = tf.argmax(tf.cast(tf.concat([unknown, [False]], 0), tf.int32),
                      output_type=tf.int32)
    check = tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(unknown)),
        ["input label: ", tf.gather(tf.concat([labels, [""]], 0), first),
         " is not a label of the model (%s; empty: the predicted label)"
         % ", ".join(label_list)], name="check_label")
    with tf.control_dependencies([check]):
        return tf.where(empty, predicted, tf.argmax(tf.cast(matches, tf.int32), axis=1,
                                                    output_type=tf.int32))


def padded_words(values, segments=None):
    """The explain signature's outputs per word, padded to the batch's
    most words, from RaggedTensors [n, (words)]: `values` the words,
    their start and end offsets and their attributions (as
    `joined_words` gives them), `segments` the text of each word (or
    None: one text).

    Returns:
      words (tf.string, "" past them), start_offsets and end_offsets
      (int32, -1 past them), attributions (float32, 0 past them),
      num_words [n], and segments (int32, -1 past them) where given.
    """
    words, begin, end, attributions_ = values
    outputs = {"words": words.to_tensor(""), "start_offsets": begin.to_tensor(-1),
               "end_offsets": end.to_tensor(-1), "attributions": attributions_.to_tensor(0.0),
               "num_words": tf.cast(words.row_lengths(), tf.int32)}
    if segments is not None:
        outputs["segments"] = segments.to_tensor(-1)
    return outputs
