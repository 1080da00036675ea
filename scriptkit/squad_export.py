"""Question answering as a SavedModel that takes text: what
`run_squad.py --export_dir` writes.

serving_default takes ``question`` and ``context`` (tf.string [batch]) and
does in the graph what run_squad's predict phase does in Python:

* the question's word pieces, cut to max_query_length; the context's word
  pieces, word by word (`graph_tokenization.GraphTokenizer`);
* windows of the context by doc_stride, each "[CLS] question [SEP]
  window [SEP]", as `run_squad.convert_examples_to_features` makes them;
* per window, the n_best_size best start and end positions among its
  tokens; a span is valid where both lie in the window's context, the
  window is the one where the start has the most context, and it holds 1
  to max_answer_length pieces; the spans of all windows ranked by start +
  end logit, those of the same text kept once, the n_best_size best kept;
* SQuAD 2.0: the null answer (the window where [CLS] scores lowest) is
  predicted when its score exceeds the best span's by more than the
  threshold.

It returns ``answer`` (the best span's text as it stands in the context;
"" for no answer), ``answer_start`` and ``answer_end`` (int64 character
offsets into the context, in Unicode code points, end exclusive; -1 for no
answer), ``score`` (the answer's probability among the n-best, as
nbest_predictions.json's), and the n-best: ``answers``, ``answer_scores``,
``answer_starts``, ``answer_ends`` [batch, n] (n = n_best_size, one more
with SQuAD 2.0, which may append the null answer) and ``num_answers``
[batch] (the entries past it are padding: "", 0.0, -1).

Character offsets come from the tokenizer's word offsets: a piece's
characters are its share of its word where the word's pieces, "##"
removed, are as long as the word; else the whole word. The answer is
therefore always a slice of the context; docs/squad.md lists how this
differs from predictions.json.

serving_ids takes the int32 features and returns start_logits and
end_logits [batch, seq_length].
"""

import collections
import os

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

from scriptkit import attributions
from scriptkit import file_io
from scriptkit import task_model
from scriptkit import run_record
from scriptkit import graph_tokenization
from scriptkit import runtime
from scriptkit import serving


# The run record's entry for a threshold tuned by --tune_null_threshold
# (not a flag value: a later --do_predict keeps its own flag's default).
TUNED_THRESHOLD_KEY = "tuned_null_score_diff_threshold"

# The settings of the export, as run_squad's flags name them (stored in
# tokenizer_config.json).
SETTING_NAMES = ("max_seq_length", "doc_stride", "max_query_length", "n_best_size",
                 "max_answer_length", "version_2_with_negative", "null_score_diff_threshold")


# ---------------------------------------------------------------------------
# Windows and the span search, as graph ops.

def max_context_window(position, num_pieces, room, step, count):
    """For each context piece `position`, the window in which it has the
    most context, as `run_squad._check_is_max_context` chooses it, by
    arithmetic rather than by scoring every window.

    Windows k = 0 .. count - 1 start at k * step; all but the last hold
    `room` pieces. Over the full windows that hold p, the context min(p -
    start, end - p) rises, then falls with k; its first maximum is at c0 =
    floor((2p - room + 1) / (2 step)) or c0 + 1 (kept to the full windows
    starting at or before p). Those two and the last window are scored as
    run_squad scores them (float64), and the first best wins.

    Args:
      position, num_pieces, room, step, count: int32 tensors of one shape:
        the piece, and its context's number of pieces, window length, step
        between windows and number of windows.

    Returns:
      int32, the shape of `position`: the window's index.
    """
    last = count - 1
    last_full = tf.maximum(0, tf.minimum(position // step, last - 1))
    centre = (2 * position - room + 1) // (2 * step)
    candidates = tf.stack([tf.clip_by_value(centre, 0, last_full),
                           tf.clip_by_value(centre + 1, 0, last_full), last], axis=-1)
    start = candidates * step[..., tf.newaxis]
    length = tf.minimum(room[..., tf.newaxis], num_pieces[..., tf.newaxis] - start)
    end = start + length - 1
    p = position[..., tf.newaxis]
    covers = (start <= p) & (p <= end)
    score = (tf.cast(tf.minimum(p - start, end - p), tf.float64)
             + 0.01 * tf.cast(length, tf.float64))
    score = tf.where(covers, score, tf.fill(tf.shape(score), tf.constant(-1.0, tf.float64)))
    best = covers & tf.equal(score, tf.reduce_max(score, axis=-1, keepdims=True))
    return tf.reduce_min(tf.where(best, candidates, tf.fill(tf.shape(candidates),
                                                            tf.int32.max)), axis=-1)


def piece_offsets(word_pieces, word_starts, word_ends, piece_lengths):
    """Character offsets of the context's pieces.

    Args:
      word_pieces: RaggedTensor int32 [batch, (words), (pieces)].
      word_starts, word_ends: int32 [total words], the words' offsets.
      piece_lengths: int32 [vocab size], each piece's characters ("##"
        not counted; [UNK] a negative number, which never fits).

    Returns:
      (starts, ends): int32 [total pieces]: a piece's share of its word
      where the lengths of the word's pieces add up to the word's length,
      else the whole word.
    """
    ids = word_pieces.flat_values
    word = word_pieces.values.value_rowids()
    length = tf.gather(piece_lengths, ids)
    num_words = tf.size(word_starts, out_type=tf.int64)
    fits = tf.equal(tf.math.unsorted_segment_sum(length, word, num_words),
                    word_ends - word_starts)
    before = tf.cumsum(length, exclusive=True)
    within = before - tf.gather(tf.gather(before, word_pieces.values.row_starts()), word)
    fits, first, last = (tf.gather(t, word) for t in (fits, word_starts, word_ends))
    start = tf.where(fits, first + within, first)
    return start, tf.where(fits, start + length, last)


def _segment_first(condition, segments, num_segments):
    """The index of the first element of each segment where `condition`
    holds (int32 [num_segments]), int32.max where it holds nowhere."""
    index = tf.range(tf.size(condition))
    return tf.math.unsorted_segment_min(
        tf.where(condition, index, tf.fill(tf.shape(index), tf.int32.max)), segments,
        num_segments)


def _row_softmax(scores, rows, num_rows):
    """Softmax of float64 `scores` [n] within each row (`rows` int32 [n])."""
    top = tf.gather(tf.math.unsorted_segment_max(scores, rows, num_rows), rows)
    exps = tf.exp(scores - top)
    return exps / tf.gather(tf.math.unsorted_segment_sum(exps, rows, num_rows), rows)


# The windows of a batch of contexts, as the answers need them (int32
# tensors): batch, the number of questions; per question [batch]:
# num_pieces, room (pieces a window holds), step, count (its windows); per
# window [windows]: example (its question), index (its rank there), start
# and length (its pieces in the context's), first (its first piece among
# all the batch's), doc_offset (the position of its first piece); per
# piece: piece_start and piece_end (its characters in its context).
class _Windows(collections.namedtuple("_Windows", [
        "context", "batch", "num_pieces", "room", "step", "count", "example", "index",
        "start", "length", "first", "doc_offset", "piece_start", "piece_end"])):

    def per_window(self, values):
        """values [batch] -> [windows]: each window its question's."""
        return tf.gather(values, self.example)


def text_signature(tokenizer, piece_lengths, export_settings):
    """serving_default of the export (see the module docstring), for
    `serving.export`.

    Args:
      tokenizer: the graph_tokenization.GraphTokenizer.
      piece_lengths: list of ints, each vocabulary entry's characters.
      export_settings: dict of SETTING_NAMES.

    Returns:
      (inputs, features, outputs_fn), as `serving.export` wants them.
    """
    s = export_settings
    question = serving.string_input("question")
    context = serving.string_input("context")
    query = tokenizer.tokenize(question)[:, :s["max_query_length"]]
    features, windows_of_batch, _ = _windows(tokenizer, query, context, piece_lengths, s)

    def outputs(predictions):
        return _ranked_answers(_candidate_spans(predictions, windows_of_batch, s),
                               windows_of_batch, s)

    return {"question": question, "context": context}, features, outputs


def _windows(tokenizer, query, context, piece_lengths, s):
    """The windows of the contexts and their features.

    Args:
      tokenizer: the graph_tokenization.GraphTokenizer.
      query: RaggedTensor int32 [batch, (pieces)], each question's pieces
        (cut to max_query_length).
      context: tf.string [batch].
      piece_lengths: list of ints, each vocabulary entry's characters.
      s: the export's settings (SETTING_NAMES).

    Returns:
      (features, windows, context_words): the FEATURE_NAMES of the windows
      [windows, longest], their `_Windows`, and (word pieces, words, word
      starts, word ends) of the contexts: RaggedTensors [batch, (words),
      (pieces)] and [batch, (words)] (`GraphTokenizer.split_words`,
      `word_pieces`).
    """
    batch = tf.size(context)
    words, word_starts, word_ends = tokenizer.split_words(context)
    word_pieces = tokenizer.word_pieces(words)
    pieces = word_pieces.merge_dims(1, 2)  # [batch, (pieces)]
    piece_start, piece_end = piece_offsets(word_pieces, word_starts.flat_values,
                                           word_ends.flat_values,
                                           tf.constant(piece_lengths, tf.int32))

    # Windows: "[CLS] question [SEP]" leaves `room` pieces; one window at
    # least (an empty one for an empty context).
    num_pieces = tf.cast(pieces.row_lengths(), tf.int32)
    query_length = tf.cast(query.row_lengths(), tf.int32)
    room = s["max_seq_length"] - 3 - query_length
    step = tf.minimum(room, s["doc_stride"])
    count = 1 + tf.maximum(0, -((room - num_pieces) // step))
    example = tf.repeat(tf.range(batch), count)  # [windows], ascending
    index = tf.cast(tf.ragged.range(count).values, tf.int32)  # within its example

    def per_window(values):
        return tf.gather(values, example)

    window_start = index * per_window(step)
    window_length = tf.minimum(per_window(room), per_window(num_pieces) - window_start)
    first = per_window(tf.cast(pieces.row_starts(), tf.int32)) + window_start
    windows = tf.RaggedTensor.from_row_lengths(
        tf.gather(pieces.values, tf.ragged.range(first, first + window_length).values),
        tf.cast(window_length, tf.int64))
    features = serving.pack(tf.gather(query, example), windows, s["max_seq_length"],
                            tokenizer.cls_id, tokenizer.sep_id)
    doc_offset = per_window(query_length) + 2  # the window's first piece

    windows_of_batch = _Windows(context, batch, num_pieces, room, step, count, example, index,
                                window_start, window_length, first, doc_offset,
                                piece_start, piece_end)
    return features, windows_of_batch, (word_pieces, words, word_starts, word_ends)


def explain_signature(tokenizer, piece_lengths, export_settings, steps):
    """The export's explain signature (`serving.export`'s
    explain_signature): question and context in; per instance the words of
    the question and of the context with their attributions to the answer
    (the answer's start logit plus its end logit in the window it comes
    from; [CLS]'s two for SQuAD 2.0's null answer) by integrated gradients
    over `steps` points (attributions.py). Words outside that window have
    0. Also the answer, answer_start and answer_end (as serving_default's,
    the question read word by word: the same pieces but in rare cases
    `GraphTokenizer.word_pieces` describes), and the output at the input
    and at the baseline ("output", "baseline_output")."""
    s = export_settings
    question = serving.string_input("question")
    context = serving.string_input("context")
    q_words, q_starts, q_ends = tokenizer.split_words(question)
    q_pieces = tokenizer.word_pieces(q_words)
    query = q_pieces.merge_dims(1, 2)[:, :s["max_query_length"]]
    window_features, w, (c_pieces, c_words, c_starts, c_ends) = _windows(
        tokenizer, query, context, piece_lengths, s)

    def outputs_fn(features, model):
        predictions = serving.run_in_chunks(model, features)
        answers = _ranked_answers(_candidate_spans(predictions, w, s), w, s, positions=True)
        row = answers.pop("window")  # [batch]: the answer's window
        targets = tf.stack([answers.pop("start_position"), answers.pop("end_position")], 1)
        chosen = {name: tf.gather(t, row) for name, t in features.items()}

        def explained_output(predictions, targets):
            return (tf.gather(predictions["start_logits"], targets[:, 0], batch_dims=1)
                    + tf.gather(predictions["end_logits"], targets[:, 1], batch_dims=1))

        pieces, output, baseline_output = attributions.integrated_gradients(
            model, chosen, (tokenizer.cls_id, tokenizer.sep_id), targets, explained_output,
            steps)
        query_length = tf.cast(query.row_lengths(), tf.int32)
        parts = []
        for (words, begin, end, text_pieces), first, kept, skip in (
                ((q_words, q_starts, q_ends, q_pieces), tf.ones_like(query_length),
                 query_length, tf.zeros_like(query_length)),
                ((c_words, c_starts, c_ends, c_pieces), tf.gather(w.doc_offset, row),
                 tf.gather(w.length, row), tf.gather(w.start, row))):
            parts.append([words, begin, end, attributions.word_attributions(
                pieces, text_pieces, first, kept, skip)])
        outputs = attributions.padded_words(*attributions.joined_words(parts))
        outputs.update(answer=answers["answer"], answer_start=answers["answer_start"],
                       answer_end=answers["answer_end"], output=output,
                       baseline_output=baseline_output)
        return outputs

    return {"question": question, "context": context}, window_features, outputs_fn


def _candidate_spans(predictions, w, s):
    """The answers that the model's scores allow, in run_squad's order: for
    each window, the spans between its n_best_size best starts and ends
    that lie in its context (the start where the window has the most
    context, at most max_answer_length pieces); with SQuAD 2.0 then each
    question's null answer.

    Args:
      predictions: the model's start_logits and end_logits [windows, seq].
      w: the batch's `_Windows`.
      s: the export's settings (SETTING_NAMES).

    Returns:
      (span_example, char_start, char_end, is_null, logits, null_score,
      places): per span its question, its characters in the context (-1
      for the null answer), whether it is the null answer, [start, end]
      logits; null_score [batch] (None without SQuAD 2.0); [window, start,
      end] per span: its window and positions there (the null answer's:
      [CLS], 0).
    """
    start_logits = tf.cast(predictions["start_logits"], tf.float64)
    end_logits = tf.cast(predictions["end_logits"], tf.float64)
    positions = tf.range(tf.shape(start_logits)[1])[tf.newaxis, :]
    real = positions < (w.doc_offset + w.length + tf.sign(w.length))[:, tf.newaxis]
    k = tf.minimum(s["n_best_size"], tf.shape(start_logits)[1])

    def best(logits):
        masked = tf.where(real, logits, tf.fill(tf.shape(logits),
                                                tf.constant(-np.inf, tf.float64)))
        return tf.math.top_k(masked, k).indices  # [windows, k], ties: lower first

    starts, ends = best(start_logits), best(end_logits)

    def in_context(position):
        return ((position >= w.doc_offset[:, tf.newaxis])
                & (position < (w.doc_offset + w.length)[:, tf.newaxis]))

    start_piece = w.start[:, tf.newaxis] + starts - w.doc_offset[:, tf.newaxis]
    home = max_context_window(
        start_piece, *(tf.tile(w.per_window(t)[:, tf.newaxis], [1, k])
                       for t in (w.num_pieces, w.room, w.step, w.count)))
    valid_start = in_context(starts) & tf.equal(home, w.index[:, tf.newaxis])
    s3, e3 = starts[:, :, tf.newaxis], ends[:, tf.newaxis, :]
    valid = (valid_start[:, :, tf.newaxis] & in_context(ends)[:, tf.newaxis, :]
             & (s3 <= e3) & (e3 < s3 + s["max_answer_length"]))
    # The valid spans in run_squad's order (window, start rank, end
    # rank), on which its ties are broken.
    found = tf.cast(tf.where(valid), tf.int32)
    window = found[:, 0]
    start = tf.gather_nd(starts, found[:, :2])
    end = tf.gather_nd(ends, tf.stack([window, found[:, 2]], axis=1))
    logits = [tf.gather_nd(start_logits, tf.stack([window, start], axis=1)),
              tf.gather_nd(end_logits, tf.stack([window, end], axis=1))]
    base = tf.gather(w.first - w.doc_offset, window)
    char_start = tf.gather(w.piece_start, base + start)
    char_end = tf.gather(w.piece_end, base + end)
    is_null = tf.zeros_like(window, tf.bool)
    span_example = tf.gather(w.example, window)
    places = [window, start, end]
    null_score = None
    if s["version_2_with_negative"]:
        # The null answer of each example: [CLS] of the window where it
        # scores lowest (the first of equals), after the spans.
        window_null = start_logits[:, 0] + end_logits[:, 0]
        null_score = tf.math.segment_min(window_null, w.example)
        null_window = _segment_first(tf.equal(window_null, w.per_window(null_score)),
                                     w.example, w.batch)
        span_example = tf.concat([span_example, tf.range(w.batch)], 0)
        logits = [tf.concat([logits[0], tf.gather(start_logits[:, 0], null_window)], 0),
                  tf.concat([logits[1], tf.gather(end_logits[:, 0], null_window)], 0)]
        char_start = tf.concat([char_start, -tf.ones([w.batch], tf.int32)], 0)
        char_end = tf.concat([char_end, -tf.ones([w.batch], tf.int32)], 0)
        is_null = tf.concat([is_null, tf.ones([w.batch], tf.bool)], 0)
        no_position = tf.zeros([w.batch], tf.int32)
        places = [tf.concat([places[0], null_window], 0),
                  tf.concat([places[1], no_position], 0), tf.concat([places[2], no_position], 0)]
    return span_example, char_start, char_end, is_null, logits, null_score, places


def _ranked_answers(spans, w, s, positions=False):
    """serving_default's outputs from the `_candidate_spans` `spans` of the
    `_Windows` `w`: each question's distinct texts ranked by score, the
    n_best_size best with their probabilities and character offsets, and the
    answer (SQuAD 2.0: the null answer where it wins by more than the
    threshold). `s`: the export's settings. With `positions`, also the
    answer's window, start_position and end_position (int32 [batch]; an
    empty context's: 0, 0, 0)."""
    span_example, char_start, char_end, is_null, logits, null_score, places = spans
    # Ranked by score within each example (stable, as Python's sort).
    order = tf.argsort(logits[0] + logits[1], direction="DESCENDING", stable=True)
    order = tf.gather(order, tf.argsort(tf.gather(span_example, order), stable=True))
    span_example, char_start, char_end, is_null, start_logit, end_logit = (
        tf.gather(t, order) for t in (span_example, char_start, char_end, is_null,
                                      logits[0], logits[1]))
    places = [tf.gather(t, order) for t in places]
    code_points = tf.strings.unicode_decode(w.context, "UTF-8", errors="ignore")
    at = tf.gather(tf.cast(code_points.row_starts(), tf.int32), span_example)
    length = tf.maximum(char_end - char_start, 0)  # 0 for the null answer
    text = tf.strings.unicode_encode(
        tf.RaggedTensor.from_row_lengths(
            tf.gather(code_points.values,
                      tf.ragged.range(at + char_start, at + char_start + length).values),
            tf.cast(length, tf.int64)),
        "UTF-8", errors="ignore")
    # Each text once per example (its best span), then the n_best_size
    # best; SQuAD 2.0's null answer stays wherever it ranks.
    keys = tf.strings.join([tf.strings.as_string(span_example), text], separator="\x01")
    _, group = tf.unique(keys, out_idx=tf.int32)
    entry = tf.range(tf.size(keys))
    keep = tf.equal(tf.gather(tf.math.unsorted_segment_min(entry, group, tf.size(keys)),
                              group), entry)
    rank = tf.cumsum(tf.cast(keep, tf.int32), exclusive=True)
    example_first = _segment_first(tf.ones_like(keep), span_example, w.batch)
    rank -= tf.gather(tf.gather(tf.concat([rank, [0]], 0),
                                tf.minimum(example_first, tf.size(rank))), span_example)
    keep &= (rank < s["n_best_size"]) | is_null
    span_example, char_start, char_end, is_null, start_logit, end_logit, text = (
        tf.boolean_mask(t, keep) for t in (span_example, char_start, char_end, is_null,
                                           start_logit, end_logit, text))
    places = [tf.boolean_mask(t, keep) for t in places]
    probability = _row_softmax(start_logit + end_logit, span_example, w.batch)

    # The answer: the first entry, or with SQuAD 2.0 the best non-null
    # one unless the null answer beats it by more than the threshold
    # (computed as run_squad's compute_predictions computes it).
    chosen = _segment_first(tf.logical_not(is_null), span_example, w.batch)
    if null_score is not None:
        null_entry = _segment_first(is_null, span_example, w.batch)
        best = tf.where(chosen < tf.int32.max, chosen, null_entry)
        diff = (null_score - tf.gather(start_logit, best)) - tf.gather(end_logit, best)
        chosen = tf.where((chosen == tf.int32.max)
                          | (diff > s["null_score_diff_threshold"]), null_entry, chosen)

    def pick(values, default):  # int32.max: no entry at all
        return tf.gather(tf.concat([values, [default]], 0),
                         tf.minimum(chosen, tf.size(values)))

    n = s["n_best_size"] + int(bool(s["version_2_with_negative"]))

    def listed(values, default):
        return tf.RaggedTensor.from_value_rowids(
            values, tf.cast(span_example, tf.int64),
            nrows=tf.cast(w.batch, tf.int64)).to_tensor(default, shape=[None, n])

    starts64, ends64 = tf.cast(char_start, tf.int64), tf.cast(char_end, tf.int64)
    no_offset = tf.constant(-1, tf.int64)
    answers = {
        "answer": pick(text, ""),
        "answer_start": pick(starts64, no_offset),
        "answer_end": pick(ends64, no_offset),
        "score": tf.cast(pick(probability, tf.constant(0.0, tf.float64)), tf.float32),
        "answers": listed(text, ""),
        "answer_scores": listed(tf.cast(probability, tf.float32), 0.0),
        "answer_starts": listed(starts64, no_offset),
        "answer_ends": listed(ends64, no_offset),
        "num_answers": tf.math.bincount(span_example, minlength=w.batch, maxlength=w.batch),
    }
    if positions:
        # No entry at all (SQuAD 1.1, no valid span): the question's first
        # window, at [CLS].
        first_window = _segment_first(tf.ones_like(w.example, tf.bool), w.example, w.batch)
        answers.update(window=tf.where(chosen < tf.int32.max, pick(places[0], 0), first_window),
                       start_position=pick(places[1], 0), end_position=pick(places[2], 0))
    return answers


# ---------------------------------------------------------------------------
# The export and what run_squad.py's main calls.

def vocab_piece_lengths(vocab_file):
    """Each vocabulary entry's length in characters as a piece of a word:
    "##" not counted, [UNK] (which stands for a whole word) -1000000."""
    vocab = graph_tokenization.check_vocab(vocab_file)
    lengths = [0] * len(vocab)
    for token, index in vocab.items():
        if token == "[UNK]":
            lengths[index] = -1000000
        else:
            lengths[index] = len(token) - 2 if token.startswith("##") and len(token) > 2 \
                else len(token)
    return lengths


def export_model(create_model, source, export_settings,
                 explain_steps=attributions.DEFAULT_STEPS):
    """Exports a SavedModel for serving of the `serving.ExportSource`
    `source` (see the module docstring) and returns its directory
    (timestamped, in its export_dir).

    Args:
      create_model: `run_squad.create_model` (passed in: run_squad.py runs
        as __main__, so importing it here would define its flags twice).
      source: the model, its fine-tuned weights and tokenizer (its options
        made fit for serving).
      export_settings: dict of SETTING_NAMES (stored in tokenizer_config.json).
      explain_steps: the points of the explain signature's integral
        (`explain_signature`); 0: no explain signature.
    """
    builder = task_model.export_builder_args(source.options)

    def model_fn(features, labels, mode, params):
        del labels, params
        start_logits, end_logits = create_model(
            source.bert_config, False, features["input_ids"], features["input_mask"],
            features["segment_ids"], use_one_hot_embeddings=False, options=builder["options"])
        logits = {"start_logits": start_logits, "end_logits": end_logits}
        return runtime.TPUEstimatorSpec(
            mode=mode, predictions=logits,
            export_outputs={serving.TEXT_SIGNATURE: runtime.PredictOutput(logits)})

    lengths = vocab_piece_lengths(source.vocab_file)
    explain = None
    if explain_steps:
        export_settings = dict(export_settings, explain_steps=explain_steps)
        explain = lambda tokenizer: explain_signature(  # noqa: E731
            tokenizer, lengths, export_settings, explain_steps)
    return serving.export(
        model_fn, source, lambda tokenizer: text_signature(tokenizer, lengths, export_settings),
        settings=export_settings, explain_signature=explain, onnx_head=("span", None))


def _same_path(recorded, path):
    """Whether two names of a checkpoint are the same file: local paths are
    compared made absolute (one run may name --output_dir relatively),
    others (gs://...) as written."""
    if not recorded or not path:
        return False
    if "://" in recorded or "://" in path:
        return recorded == path
    return os.path.abspath(recorded) == os.path.abspath(path)


def null_threshold(checkpoint, settings, threshold_given, tuned=None):
    """SQuAD 2.0's threshold for the export, and where it comes from:
    --null_score_diff_threshold given on the command line (`threshold_given`);
    else `tuned` (this run's --tune_null_threshold); else the one the run
    record holds for `checkpoint`; else the flag's default. `settings`: the
    run's settings (null_score_diff_threshold, predict_file, output_dir,
    init_checkpoint)."""
    if threshold_given:
        return settings.null_score_diff_threshold, "--null_score_diff_threshold"
    if tuned is not None:
        return tuned, "tuned by --tune_null_threshold on --predict_file %s" % (
            settings.predict_file)
    path = run_record.find_file(run_record.FILE, settings.output_dir,
                                     settings.init_checkpoint)
    entry = path and file_io.read_json_object(path, None).get(TUNED_THRESHOLD_KEY)
    if entry:
        if _same_path(entry.get("checkpoint"), checkpoint):
            return entry["value"], "tuned by --tune_null_threshold on %s (%s)" % (
                entry.get("predict_file"), path)
        tf.logging.warning("%s holds a null_score_diff_threshold tuned for %s, not for %s: "
                           "not using it", path, entry.get("checkpoint"), checkpoint)
    return settings.null_score_diff_threshold, "--null_score_diff_threshold's default"


def export_run(create_model, source, settings, threshold_given, tuned=None):
    """--export_dir: exports the fine-tuned checkpoint with the run's
    settings (after training and prediction). Returns the SavedModel's
    directory.

    Args:
      create_model: as `export_model`.
      source: the `serving.ExportSource` of the run's fine-tuned checkpoint
        (`fine_tuning.Run.export_source`).
      settings: the run's settings (fine_tuning.Run.settings: the flags with
        the run record applied).
      threshold_given, tuned: as `null_threshold`.
    """
    export_settings = {name: getattr(settings, name) for name in SETTING_NAMES}
    if settings.version_2_with_negative:
        export_settings["null_score_diff_threshold"], where = null_threshold(
            source.checkpoint, settings, threshold_given, tuned)
        tf.logging.info("Exporting question answering (SQuAD 2.0): no answer where the null "
                        "score exceeds the best span's by more than %r (%s)",
                        export_settings["null_score_diff_threshold"], where)
    else:
        del export_settings["null_score_diff_threshold"]
        tf.logging.info("Exporting question answering (SQuAD 1.1: every question has an "
                        "answer)")
    return export_model(create_model, source, export_settings, settings.explain_steps)
