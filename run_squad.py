"""Fine-tune BERT for extractive question answering on SQuAD 1.1 and 2.0.

A question and a window of its context go in as "[CLS] question [SEP]
context [SEP]"; the model scores every token as the start and as the end of
the answer, and the best valid span is mapped back to the context's text.

Differences from the original:

Its flags, data pipeline (examples, windows, features, and which training
answers are kept), variable names, predictions and output files
(predictions.json, nbest_predictions.json, null_odds.json) stay. Added or
changed:

* the official evaluation is built in (squad_evaluate.py, whose names are
  also run_squad's): when --predict_file carries answers, eval_results.json
  holds the official SQuAD 1.1 (exact_match, f1) or 2.0 (exact, f1,
  HasAns_*, NoAns_*, best_*) metrics; `--evaluate_only` scores an existing
  predictions.json, and `evaluate()` does it from Python;
* SQuAD 2.0 null-threshold tuning in the same run (--tune_null_threshold):
  predictions_best_threshold.json next to the untuned predictions.json;
* clear errors for files that are not SQuAD JSON (naming the field and the
  question id), a summary of skipped training answers, atomic output files,
  and no crash when every n-best answer of a 2.0 question is the null answer
  (that question gets null odds `squad_answers.NO_ANSWER_NULL_ODDS`: "" at
  any threshold);
* a SavedModel that answers questions from text (--export_dir,
  squad_export.py).

The building blocks (read_squad_examples, convert_examples_to_features,
create_model, model_fn_builder, input_fn_builder, write_predictions and the
whole predict phase, predict_and_evaluate) take their settings as arguments,
with the flags' defaults, so they also work from Python with the flags
unparsed; the training options (--precision, --recompute_grad, ...) reach
create_model and the model_fn as one `options` value
(`training.training_options`), None meaning the defaults.
"""

import collections
import dataclasses
import json
import os
import random
from typing import Optional

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import attributions
from scriptkit import checkpoints
from scriptkit import file_io
from scriptkit import fine_tuning
from scriptkit import task_model
from scriptkit import input_packing
from scriptkit import input_pipeline
from scriptkit import logs
import modeling
from scriptkit import output_lock
from scriptkit import run_record
from scriptkit import runtime
from scriptkit import script_runner
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
from scriptkit import squad_answers
from scriptkit import squad_export
import tokenization
from scriptkit import training
from scriptkit import training_progress
from scriptkit.errors import InputError
from squad_evaluate import (
    dataset_has_answers, get_field, iterate_questions, run_evaluation, write_json)

# ---------------------------------------------------------------------------
# Settings and flags.

@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.FineTuningCore):
    """This script's flags, with its defaults (read in main by
    `settings_lib.from_flags`): a fine-tuning script's core, and SQuAD's
    own."""

    max_seq_length: int = 384
    doc_stride: int = 128
    predict_file: Optional[str] = None
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    verbose_logging: bool = False
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0
    evaluate_only: bool = False
    tune_null_threshold: bool = False
    explain_steps: int = attributions.DEFAULT_STEPS


shared_flags.define_settings_flags(Settings, helps={
    "train_file": "SQuAD JSON file to fine-tune on (such as train-v1.1.json).",
    "export_dir": "If set, export a SavedModel for serving under this directory (in a "
                  "timestamped subdirectory): serving_default takes raw question and "
                  "context strings and returns the answer, its character offsets and the "
                  "n-best (docs/squad.md); serving_ids takes int32 input_ids, input_mask, "
                  "segment_ids. Without --do_train, the latest checkpoint in --output_dir "
                  "or a fine-tuned --init_checkpoint is exported."})

flags.DEFINE_string(
    "predict_file", None,
    "SQuAD JSON file whose questions are answered (such as dev-v1.1.json). If its "
    "questions carry answers, the predictions are also scored.")

flags.DEFINE_integer(
    "max_query_length", 64,
    "Questions are cut to this many word pieces.")

flags.DEFINE_integer(
    "n_best_size", 20,
    "Candidate start and end positions considered per window, and answers listed "
    "per question in nbest_predictions.json.")

flags.DEFINE_integer(
    "max_answer_length", 30,
    "Longest answer, in word pieces, that may be predicted (the start and the end "
    "are scored independently, so nothing else bounds their distance).")

flags.DEFINE_bool(
    "verbose_logging", False,
    "Log every training answer that is not found at its answer_start and every "
    "prediction that cannot be aligned with the context's characters (a few are "
    "normal on SQuAD).")

flags.DEFINE_bool(
    "version_2_with_negative", False,
    "SQuAD 2.0: some questions have no answer in their context, and \"no "
    "answer\" may be predicted.")

flags.DEFINE_float(
    "null_score_diff_threshold", 0.0,
    "SQuAD 2.0: a question is predicted unanswerable when the null answer's score "
    "exceeds the best span's score by more than this.")

flags.DEFINE_bool(
    "evaluate_only", False,
    "Do not run the model: score the predictions.json (and, for SQuAD 2.0, "
    "null_odds.json) already in --output_dir against the answers in "
    "--predict_file, and write eval_results.json there.")

flags.DEFINE_bool(
    "tune_null_threshold", False,
    "SQuAD 2.0 with answers in --predict_file: choose the "
    "null_score_diff_threshold that maximises F1 on it (from null_odds.json and "
    "nbest_predictions.json) and write predictions_best_threshold.json and "
    "eval_results_best_threshold.json besides the untuned predictions.json.")

# unique_id of the first window; later windows count up from it.
_FIRST_UNIQUE_ID = 1000000000


# ---------------------------------------------------------------------------
# Data: SQuAD JSON -> SquadExample (one per question) -> InputFeatures (one
# per window of the context) -> TFRecord.

@dataclasses.dataclass(eq=False, repr=False)
class SquadExample:
    """One question with its context.

    Attributes:
      qas_id: the question's "id".
      question_text: the question.
      doc_tokens: the context split at whitespace (see `split_paragraph`).
      orig_answer_text: training only: the answer as annotated ("" for an
        unanswerable question).
      start_position, end_position: training only: indexes in doc_tokens of
        the answer's first and last word (-1 for an unanswerable question).
      is_impossible: a SQuAD 2.0 training question without an answer.
    """

    qas_id: str
    question_text: str
    doc_tokens: list
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False

    def __repr__(self):
        parts = ["qas_id: %s" % tokenization.printable_text(self.qas_id),
                 "question_text: %s" % tokenization.printable_text(self.question_text),
                 "doc_tokens: [%s]" % " ".join(self.doc_tokens)]
        if self.start_position:  # (as the original: not shown when 0)
            parts += ["start_position: %d" % self.start_position,
                      "end_position: %d" % self.end_position,
                      "is_impossible: %r" % self.is_impossible]
        return ", ".join(parts)


@dataclasses.dataclass(eq=False)
class InputFeatures:
    """The model input for one window of one example.

    Attributes:
      unique_id: identifies the window (and its RawResult).
      example_index: index of its SquadExample.
      doc_span_index: index of the window within the example.
      tokens: "[CLS]", question pieces, "[SEP]", the window's context pieces,
        "[SEP]" (unpadded).
      token_to_orig_map: position in `tokens` of each context piece -> index
        of its word in the example's doc_tokens.
      token_is_max_context: the same positions -> whether this window is the
        one where that piece has the most context (`_check_is_max_context`).
      input_ids, input_mask, segment_ids: int lists [max_seq_length], padded
        with 0.
      start_position, end_position: training only: the answer's positions in
        `tokens`, or 0, 0 ([CLS]) if it is not inside this window or the
        question has none.
      is_impossible: the example's is_impossible.
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list
    token_to_orig_map: dict
    token_is_max_context: dict
    input_ids: list
    input_mask: list
    segment_ids: list
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool | None = None


# What write_predictions needs of an InputFeatures: prediction keeps only this
# in memory (the ids, mask and segments go to eval.tf_record only).
PredictionFeature = collections.namedtuple(
    "PredictionFeature",
    ["unique_id", "example_index", "doc_span_index", "tokens", "token_to_orig_map",
     "token_is_max_context"])

# The characters that separate words of a context. U+202F (narrow no-break
# space) is one of them: the words, and with them the answers' positions,
# must be those of Google's preprocessing.
_WORD_SEPARATORS = frozenset(" \t\r\n\u202f")


def split_paragraph(paragraph_text):
    """Splits a context into words at `_WORD_SEPARATORS`.

    Args:
      paragraph_text: the context string.

    Returns:
      (doc_tokens, char_to_word_offset): the words, and for every character
      of `paragraph_text` the index of the word it belongs to (a separator
      belongs to the word before it; leading separators to -1).
    """
    doc_tokens = []
    char_to_word_offset = []
    inside_word = False
    for char in paragraph_text:
        if char in _WORD_SEPARATORS:
            inside_word = False
        elif inside_word:
            doc_tokens[-1] += char
        else:
            doc_tokens.append(char)
            inside_word = True
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def load_squad_json(input_file, flag_name):
    """Reads a SQuAD json file.

    Args:
      input_file: path (gs:// works).
      flag_name: the flag that named the file, for error messages.

    Returns:
      The parsed json (a dict whose "data" is a list of articles).

    Raises:
      InputError: missing file, not JSON, or no top-level "data" list.
    """
    file_io.require_file(flag_name, input_file)
    dataset = file_io.read_json(input_file, flag_name)
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise InputError(
            "--%s %s is not a SQuAD file: it needs a top-level \"data\" list of "
            "articles" % (flag_name, input_file))
    return dataset


def read_squad_examples(input_file, is_training, version_2_with_negative=False):
    """Reads a SQuAD json file into SquadExamples, one per question.

    Training answers whose text is not found at their answer_start are
    skipped and reported in one summary warning.

    Args:
      input_file: SQuAD json path.
      is_training: read the answers (exactly one per answerable question).
      version_2_with_negative: read "is_impossible" (SQuAD 2.0).

    Returns:
      A list of SquadExample, in file order.

    Raises:
      InputError: not a SQuAD file, naming the field and question id.
    """
    examples, _ = read_squad_examples_and_skipped(input_file, is_training,
                                                  version_2_with_negative)
    return examples


def read_squad_examples_and_skipped(input_file, is_training, version_2_with_negative=False,
                                    verbose_logging=False, dataset=None):
    """`read_squad_examples`, also returning the ids of the skipped training
    questions (answer text not found at answer_start).

    Args:
      verbose_logging: warn about every skipped question, not just the
        first five.
      dataset: the file's parsed json where the caller has it already
        (`load_squad_json`), so that it is not read again; input_file then
        only names it in messages.

    Returns:
      (examples, skipped_ids).
    """
    flag_name = "train_file" if is_training else "predict_file"
    if dataset is None:
        dataset = load_squad_json(input_file, flag_name)
    where = "--%s %s" % (flag_name, input_file)

    examples = []
    skipped = []
    paragraph = None
    for qa_paragraph, qa, qa_where in iterate_questions(dataset, where):
        if qa_paragraph is not paragraph:
            # All questions of a paragraph share one list of words.
            paragraph = qa_paragraph
            context = paragraph["context"]
            words, char_to_word = split_paragraph(context)
        example = SquadExample(qas_id=qa["id"], question_text=qa["question"],
                               doc_tokens=words)
        if is_training:
            answers = get_field(qa, "answers", list, qa_where)
            if version_2_with_negative and qa.get("is_impossible", False):
                example.is_impossible = True
                example.orig_answer_text = ""
                example.start_position = example.end_position = -1
            elif len(answers) != 1:
                raise InputError(
                    "%s: for training, each question should have exactly 1 answer, "
                    "not %d" % (qa_where, len(answers)))
            else:
                text = get_field(answers[0], "text", str, qa_where + ", answer")
                start = get_field(answers[0], "answer_start", int, qa_where + ", answer")
                span = _locate_answer(text, start, context, words, char_to_word)
                if span is None:
                    if verbose_logging or len(skipped) < 5:
                        tf.logging.warning(
                            "Could not find answer %r at answer_start %d, which holds %r "
                            "(%s)", text, start, context[start:start + len(text)], qa_where)
                    skipped.append(qa["id"])
                    continue
                example.orig_answer_text = text
                example.start_position, example.end_position = span
        examples.append(example)

    if skipped:
        tf.logging.warning(
            "Could not find answer for %d of %d training questions in %s (their "
            "text is not at answer_start); they were skipped%s.",
            len(skipped), len(skipped) + len(examples), input_file,
            "" if verbose_logging else " (--verbose_logging lists them all)")
    return examples, skipped


def _locate_answer(text, start, context, words, char_to_word):
    """The words that hold a training answer.

    Args:
      text, start: the answer's "text" and "answer_start" (a character
        offset in `context`).
      context: the paragraph text.
      words, char_to_word: `split_paragraph(context)`.

    Returns:
      (first, last) word indexes, or None when the characters from `start`
      on do not fall in words that contain `text` (whitespace collapsed).
      Containing it is enough, so that the same training answers are kept as
      in the original: an answer that is part of a word (e.g. "Japan" in
      "Japanese") is kept, as that word.
    """
    end = start + len(text)  # exclusive
    if not text or start < 0 or end > len(context):
        return None
    first, last = char_to_word[start], char_to_word[end - 1]
    if first < 0:  # The answer starts in the whitespace before the first word.
        return None
    if " ".join(text.split()) not in " ".join(words[first:last + 1]):
        return None
    return first, last


def convert_examples_to_features(examples, tokenizer, max_seq_length,
                                 doc_stride, max_query_length, is_training,
                                 output_fn):
    """Turns examples into model inputs, one InputFeatures per window.

    The context's word pieces are read in windows of at most
    max_seq_length - len(question pieces) - 3 pieces, each starting
    `doc_stride` pieces after the previous one, and every window becomes
    "[CLS] question [SEP] window [SEP]" padded to max_seq_length.

    Args:
      examples: SquadExamples.
      tokenizer: a tokenization.FullTokenizer.
      max_seq_length: length of every input.
      doc_stride: pieces between the starts of consecutive windows.
      max_query_length: questions are cut to this many pieces.
      is_training: set start_position and end_position from the examples'
        answers.
      output_fn: called with each InputFeatures as soon as it is made (so
        they can be streamed to a file instead of kept in memory).

    Returns:
      The number of features made. Their unique_ids count up from
      1000000000 in the order they are made.
    """
    unique_id = _FIRST_UNIQUE_ID
    progress = logs.Progress("Converting examples to features", len(examples))
    for example_index, example in enumerate(examples):
        progress.update(count=example_index)
        query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
        pieces, piece_to_word, word_to_piece = _split_words(example.doc_tokens, tokenizer)
        answer = None
        if is_training and not example.is_impossible:
            answer = _answer_pieces(example, pieces, word_to_piece, tokenizer)

        # Room for the context next to [CLS], the question and two [SEP].
        windows = _doc_windows(len(pieces), max_seq_length - len(query_tokens) - 3,
                               doc_stride)
        for window_index, window in enumerate(windows):
            tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
            doc_offset = len(tokens)
            token_to_orig_map = {}
            token_is_max_context = {}
            for piece in range(window.start, window.start + window.length):
                token_to_orig_map[len(tokens)] = piece_to_word[piece]
                token_is_max_context[len(tokens)] = _check_is_max_context(
                    windows, window_index, piece)
                tokens.append(pieces[piece])
            tokens.append("[SEP]")

            input_ids = tokenizer.convert_tokens_to_ids(tokens)
            padding = [0] * (max_seq_length - len(tokens))
            feature = InputFeatures(
                unique_id=unique_id, example_index=example_index, doc_span_index=window_index,
                tokens=tokens, token_to_orig_map=token_to_orig_map,
                token_is_max_context=token_is_max_context, input_ids=input_ids + padding,
                input_mask=[1] * len(tokens) + padding,
                segment_ids=[0] * doc_offset + [1] * (window.length + 1) + padding,
                is_impossible=example.is_impossible)
            if is_training:
                feature.start_position, feature.end_position = _window_target(
                    answer, window, doc_offset)
            if example_index < 20:
                _log_feature(feature, is_training)
            output_fn(feature)
            unique_id += 1

    num_features = unique_id - _FIRST_UNIQUE_ID
    progress.update(count=len(examples))
    progress.done()
    tf.logging.info("Converted %d examples into %d features", len(examples), num_features)
    return num_features


def _split_words(words, tokenizer):
    """Word pieces of a context's words.

    Returns:
      (pieces, piece_to_word, word_to_piece): all pieces in order; for each
      piece the index of its word; for each word the index of its first
      piece.
    """
    pieces = []
    piece_to_word = []
    word_to_piece = []
    for word_index, word in enumerate(words):
        word_to_piece.append(len(pieces))
        for piece in tokenizer.tokenize(word):
            pieces.append(piece)
            piece_to_word.append(word_index)
    return pieces, piece_to_word, word_to_piece


def _answer_pieces(example, pieces, word_to_piece, tokenizer):
    """(first, last) piece of a training example's answer: the pieces of its
    words, narrowed by `_improve_answer_span`."""
    first = word_to_piece[example.start_position]
    # The answer's last piece is the one before the next word's first piece.
    if example.end_position + 1 < len(example.doc_tokens):
        last = word_to_piece[example.end_position + 1] - 1
    else:
        last = len(pieces) - 1
    return _improve_answer_span(pieces, first, last, tokenizer, example.orig_answer_text)


def _doc_windows(num_pieces, window_size, doc_stride):
    """The windows (start, length) that cover pieces 0..num_pieces-1
    (input_packing.window_spans), or ValueError when the question leaves no
    room."""
    if num_pieces and window_size < 1:
        raise ValueError("No room for the context: max_seq_length must exceed the "
                         "question's length + 3")
    return input_packing.window_spans(num_pieces, window_size, doc_stride)


def _window_target(answer, window, doc_offset):
    """Training target positions in a window's tokens.

    Args:
      answer: (first, last) piece of the answer, or None if there is none.
      window: input_packing.Span (start, length).
      doc_offset: position in the tokens of the window's first piece.

    Returns:
      (start_position, end_position): the answer's token positions if it lies
      wholly in the window; else 0, 0 ([CLS], "no answer here").
    """
    if answer is None:
        return 0, 0
    first, last = answer
    if first < window.start or last >= window.start + window.length:
        return 0, 0
    return first - window.start + doc_offset, last - window.start + doc_offset


def _log_feature(feature, is_training):
    """Logs one feature (done for the windows of the first 20 examples)."""
    tf.logging.info("*** Example ***")
    lines = [
        ("unique_id", feature.unique_id),
        ("example_index", feature.example_index),
        ("doc_span_index", feature.doc_span_index),
        ("tokens", " ".join(tokenization.printable_text(t) for t in feature.tokens)),
        ("token_to_orig_map", " ".join(
            "%d:%d" % item for item in feature.token_to_orig_map.items())),
        ("token_is_max_context", " ".join(
            "%d:%s" % item for item in feature.token_is_max_context.items())),
        ("input_ids", " ".join(map(str, feature.input_ids))),
        ("input_mask", " ".join(map(str, feature.input_mask))),
        ("segment_ids", " ".join(map(str, feature.segment_ids))),
    ]
    if is_training and feature.is_impossible:
        lines.append(("answer", "none (impossible example)"))
    elif is_training:
        answer = feature.tokens[feature.start_position:feature.end_position + 1]
        lines += [("start_position", feature.start_position),
                  ("end_position", feature.end_position),
                  ("answer", tokenization.printable_text(" ".join(answer)))]
    for name, value in lines:
        tf.logging.info("%s: %s", name, value)


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
    """Narrows an answer's piece span to the pieces of the answer itself.

    Answers are annotated in characters, and located first as whole
    whitespace-separated words: for the answer "1895" in "(1895-1943).", the
    word is "(1895-1943).". Its pieces "( 1895 - 1943 ) ." contain the
    answer's own pieces, which make a tighter target. When no sub-span
    matches (an answer that is part of a piece, like "Japan" in "Japanese"),
    the word span stays.

    Args:
      doc_tokens: the context's word pieces.
      input_start, input_end: first and last piece of the answer's words.
      tokenizer: tokenizes `orig_answer_text` into pieces.
      orig_answer_text: the annotated answer.

    Returns:
      (start, end): the sub-span of [input_start, input_end] whose pieces
      are the answer's (the earliest start, then the longest), or
      (input_start, input_end).
    """
    answer = " ".join(tokenizer.tokenize(orig_answer_text))
    for start in range(input_start, input_end + 1):
        for end in range(input_end, start - 1, -1):
            if " ".join(doc_tokens[start:end + 1]) == answer:
                return start, end
    return input_start, input_end


def _check_is_max_context(doc_spans, cur_span_index, position):
    """Whether window `cur_span_index` is where piece `position` has the most
    context.

    Windows overlap, so a piece near the edge of one window may sit in the
    middle of the next. Its context in a window is the smaller of the number
    of pieces before and after it there; ties go to the longer window (+0.01
    per piece), then to the earlier one. Only that window's score for the
    piece is used as an answer start.

    Args:
      doc_spans: the example's windows (input_packing.Span start, length).
      cur_span_index: the window asked about.
      position: index of the piece in the whole context.
    """
    best_index = None
    best_score = None
    for index, span in enumerate(doc_spans):
        last = span.start + span.length - 1
        if not span.start <= position <= last:
            continue
        score = min(position - span.start, last - position) + 0.01 * span.length
        if best_score is None or score > best_score:
            best_index, best_score = index, score
    return best_index == cur_span_index


class FeatureWriter(file_io.AtomicWriter):
    """Writes InputFeatures to a TFRecord file as tf.train.Examples.

    Records go to a temporary file renamed to `filename` by `close()`, so an
    interrupted run never leaves a truncated file under the final name.
    """

    def __init__(self, filename, is_training):
        super().__init__(filename, tf.io.TFRecordWriter)
        self.filename = filename
        self.is_training = is_training
        self.num_features = 0

    def process_feature(self, feature):
        """Appends one InputFeatures: unique_ids, input_ids, input_mask,
        segment_ids and, for training, start_positions, end_positions and
        is_impossible (0/1), all int64."""
        values = [("unique_ids", [feature.unique_id]),
                  ("input_ids", feature.input_ids),
                  ("input_mask", feature.input_mask),
                  ("segment_ids", feature.segment_ids)]
        if self.is_training:
            values += [("start_positions", [feature.start_position]),
                       ("end_positions", [feature.end_position]),
                       ("is_impossible", [int(bool(feature.is_impossible))])]
        record = tf.train.Example(features=tf.train.Features(feature={
            name: input_pipeline.int64_feature(value) for name, value in values}))
        self._writer.write(record.SerializeToString())
        self.num_features += 1


def _write_features(writer, examples, tokenizer, is_training, max_seq_length, doc_stride,
                    max_query_length, keep=None):
    """Converts `examples` (`convert_examples_to_features` with these lengths),
    streaming every feature to `writer` (and passing it to `keep`, if given);
    removes the partial file on failure."""
    def output_fn(feature):
        writer.process_feature(feature)
        if keep is not None:
            keep(feature)

    try:
        convert_examples_to_features(
            examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training,
            output_fn)
    except BaseException:
        writer.abort()
        raise
    writer.close()


# ---------------------------------------------------------------------------
# Model and model_fn.

def head_variable_shapes(bert_config):
    """name -> shape of the span head's variables (see `create_model`)."""
    return {"cls/squad/output_weights": [2, bert_config.hidden_size],
            "cls/squad/output_bias": [2]}


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 use_one_hot_embeddings, options=None):
    """BERT with a span-prediction head: two scores for every token.

    Args:
      bert_config: modeling.BertConfig.
      is_training: enables dropout.
      input_ids, input_mask, segment_ids: int32 [batch_size, seq_length].
      use_one_hot_embeddings: embedding lookup by one-hot matmul (TPUs).
      options: training.TrainingOptions (None: the defaults).

    Returns:
      (start_logits, end_logits): float32 [batch_size, seq_length] each, the
      scores of every token as the answer's start and end. The head's
      variables are `cls/squad/output_weights` [2, hidden_size] and
      `cls/squad/output_bias` [2].
    """
    model = training.bert_model(bert_config, is_training, input_ids, input_mask,
                                segment_ids, use_one_hot_embeddings, options)
    sequence_output = model.get_sequence_output()
    batch_size, seq_length, hidden_size = modeling.get_shape_list(
        sequence_output, expected_rank=3)

    # One dense layer from each token's final hidden state to 2 scores.
    weights = tf.get_variable("cls/squad/output_weights", [2, hidden_size],
                              initializer=tf.truncated_normal_initializer(stddev=0.02))
    bias = tf.get_variable("cls/squad/output_bias", [2], initializer=tf.zeros_initializer())
    token_states = tf.reshape(sequence_output, [batch_size * seq_length, hidden_size])
    logits = tf.nn.bias_add(tf.matmul(token_states, weights, transpose_b=True), bias)
    logits = tf.reshape(logits, [batch_size, seq_length, 2])
    start_logits, end_logits = tf.unstack(logits, axis=2)
    return start_logits, end_logits


def _position_loss(logits, positions):
    """Mean cross-entropy of the softmax over positions.

    Args:
      logits: float32 [batch_size, seq_length].
      positions: int32 [batch_size], the true positions.

    Returns:
      float32 scalar.
    """
    seq_length = modeling.get_shape_list(logits)[1]
    targets = tf.one_hot(positions, depth=seq_length, dtype=tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    return -tf.reduce_mean(tf.reduce_sum(targets * log_probs, axis=-1))


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, options=None):
    """Makes the model_fn for the runner (TPUEstimator contract), with the
    arguments of run_pretraining.model_fn_builder: the model, the checkpoint
    to start from, the optimizer's schedule (training only), TPU or not,
    the embedding lookup and the training.TrainingOptions.

    Returns:
      model_fn(features, labels, mode, params). TRAIN: the loss is the mean
      of the start and end position losses. PREDICT: predictions
      unique_ids [batch_size], start_logits and end_logits [batch_size,
      seq_length]. Other modes raise ValueError.
    """

    def build_head(features, mode):
        """features: unique_ids, input_ids, input_mask, segment_ids (and
        start_positions, end_positions for TRAIN), int32."""
        is_training = mode == runtime.ModeKeys.TRAIN
        start_logits, end_logits = create_model(
            bert_config=bert_config,
            is_training=is_training,
            input_ids=features["input_ids"],
            input_mask=features["input_mask"],
            segment_ids=features["segment_ids"],
            use_one_hot_embeddings=use_one_hot_embeddings,
            options=options)
        if is_training:
            return task_model.Head(
                loss=(_position_loss(start_logits, features["start_positions"]) +
                      _position_loss(end_logits, features["end_positions"])) / 2.0)
        # No serving signature: squad_export exports with one of its own.
        return task_model.Head(predictions={"unique_ids": features["unique_ids"],
                                             "start_logits": start_logits,
                                             "end_logits": end_logits})

    return task_model.task_model_fn(
        build_head, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps,
        use_tpu, options, modes=(runtime.ModeKeys.TRAIN, runtime.ModeKeys.PREDICT))


# ---------------------------------------------------------------------------
# input_fn.

def input_fn_builder(input_file, seq_length, is_training, drop_remainder,
                     length_buckets=None):
    """Makes the input_fn that reads a FeatureWriter file.

    Args:
      input_file: TFRecord file of FeatureWriter.
      seq_length: max_seq_length the file was written with.
      is_training: also read start_positions and end_positions; repeat the
        file forever and shuffle it (buffer of 100 records).
      drop_remainder: drop a last, smaller batch.
      length_buckets: dynamic padding (input_pipeline.tfrecord_input_fn).

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of int32 tensors
      (unique_ids [batch_size], input_ids, input_mask, segment_ids
      [batch_size, seq_length or a bucket's length], ...), batch_size from
      params.
    """
    name_to_features = {
        "unique_ids": tf.io.FixedLenFeature([], tf.int64),
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
    }
    if is_training:
        for name in ("start_positions", "end_positions"):
            name_to_features[name] = tf.io.FixedLenFeature([], tf.int64)

    # The examples were shuffled before writing; the shuffle buffer only
    # mixes neighbours between epochs.
    return input_pipeline.tfrecord_input_fn(input_file, name_to_features, is_training,
                                            drop_remainder, length_buckets=length_buckets)


# ---------------------------------------------------------------------------
# Predictions: logits -> answer texts.

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

def write_predictions(all_examples, all_features, all_results, n_best_size,
                      max_answer_length, do_lower_case, output_prediction_file,
                      output_nbest_file, output_null_log_odds_file,
                      version_2_with_negative=False, null_score_diff_threshold=0.0,
                      verbose_logging=False):
    """Computes the answers (`squad_answers.compute_predictions`) and writes
    them.

    Writes predictions.json (qas_id -> text), nbest_predictions.json (qas_id
    -> n-best list) and, for SQuAD 2.0, null_odds.json (qas_id -> null odds)
    to the given paths, in the format SQuAD's evaluation scripts read.

    Returns:
      (all_predictions, all_nbest_json, scores_diff_json), as
      `squad_answers.compute_predictions`.
    """
    tf.logging.info("Writing predictions to: %s", output_prediction_file)
    tf.logging.info("Writing nbest to: %s", output_nbest_file)
    all_predictions, all_nbest_json, scores_diff_json = squad_answers.compute_predictions(
        all_examples, all_features, all_results, n_best_size, max_answer_length,
        do_lower_case, version_2_with_negative=version_2_with_negative,
        null_score_diff_threshold=null_score_diff_threshold,
        verbose_logging=verbose_logging)
    write_json(output_prediction_file, all_predictions)
    write_json(output_nbest_file, all_nbest_json)
    if version_2_with_negative:
        write_json(output_null_log_odds_file, scores_diff_json)
    return all_predictions, all_nbest_json, scores_diff_json


# ---------------------------------------------------------------------------
# The predict phase.

def predict_and_evaluate(estimator, tokenizer, examples, dataset, output_dir, predict_file,
                         max_seq_length=384, doc_stride=128, max_query_length=64,
                         predict_batch_size=8, n_best_size=20, max_answer_length=30,
                         do_lower_case=True, version_2_with_negative=False,
                         null_score_diff_threshold=0.0, tune_threshold=False,
                         verbose_logging=False, init_checkpoint=None, length_buckets=None):
    """Answers the questions of a predict file with the model, writes the
    predictions and, if the file has answers, scores them.

    Writes to `output_dir`: eval.tf_record (the model inputs), predictions.json,
    nbest_predictions.json, null_odds.json (SQuAD 2.0) and, with answers,
    eval_results.json (plus, with tune_threshold, the *_best_threshold.json
    files; see `squad_evaluate.run_evaluation`).

    Args:
      estimator: the runner of this script's model_fn (`fine_tuning.Run.trainer`;
        its predict_batch_size is `predict_batch_size`).
      tokenizer: the FullTokenizer of the model's vocabulary.
      examples, dataset: the predict file read by `read_squad_examples` and
        `load_squad_json` (`_read_predict_file` does both).
      output_dir: where the files go (it must exist).
      predict_file: the file's path, for messages.
      max_seq_length, doc_stride, max_query_length: the windows
        (`convert_examples_to_features`).
      predict_batch_size: for the log only.
      n_best_size, max_answer_length, do_lower_case, version_2_with_negative,
        null_score_diff_threshold, verbose_logging: as `write_predictions`.
      init_checkpoint: the model_fn's checkpoint to start from, whose
        weights it predicts with when output_dir has no checkpoint (for the
        log).
      tune_threshold: also choose the best SQuAD 2.0 null threshold on the
        file (--tune_null_threshold).
      length_buckets: dynamic padding (input_pipeline.tfrecord_input_fn).

    Returns:
      The eval dict of predictions.json, or None when the file has no answers.
    """
    writer = FeatureWriter(os.path.join(output_dir, "eval.tf_record"), is_training=False)
    # Only what write_predictions needs stays in memory; the model inputs are
    # streamed to eval.tf_record.
    features = []
    _write_features(writer, examples, tokenizer, False, max_seq_length, doc_stride,
                    max_query_length,
                    keep=lambda f: features.append(PredictionFeature(
                        f.unique_id, f.example_index, f.doc_span_index, f.tokens,
                        f.token_to_orig_map, f.token_is_max_context)))
    training_progress.log_phase("Running prediction", [
        ("Num orig examples", len(examples)), ("Num split examples", len(features)),
        ("Batch size", predict_batch_size)])

    input_fn = input_fn_builder(writer.filename, max_seq_length, is_training=False,
                                drop_remainder=False, length_buckets=length_buckets)
    results = []
    for prediction in fine_tuning.iter_predictions(
            estimator, input_fn, len(features), predict_batch_size, len(features),
            init_checkpoint=init_checkpoint, what="features", unit="features"):
        # float32 arrays: a quarter of the memory of lists of Python floats,
        # and the same values once converted.
        results.append(RawResult(
            unique_id=int(prediction["unique_ids"]),
            start_logits=np.array(prediction["start_logits"], dtype=np.float32).ravel(),
            end_logits=np.array(prediction["end_logits"], dtype=np.float32).ravel()))

    all_predictions, all_nbest_json, null_odds = write_predictions(
        examples, features, results, n_best_size, max_answer_length, do_lower_case,
        os.path.join(output_dir, "predictions.json"),
        os.path.join(output_dir, "nbest_predictions.json"),
        os.path.join(output_dir, "null_odds.json"),
        version_2_with_negative=version_2_with_negative,
        null_score_diff_threshold=null_score_diff_threshold,
        verbose_logging=verbose_logging)

    if not dataset_has_answers(dataset, version_2_with_negative):
        tf.logging.info("--predict_file has no answers: not evaluating.")
        if tune_threshold:
            tf.logging.warning("--tune_null_threshold needs answers in --predict_file: "
                               "no threshold tuned.")
        return None
    return run_evaluation(
        dataset, output_dir, "--predict_file %s" % predict_file, all_predictions,
        all_nbest_json, null_odds if version_2_with_negative else None,
        version_2_with_negative=version_2_with_negative, tune_threshold=tune_threshold,
        null_score_diff_threshold=null_score_diff_threshold)


# ---------------------------------------------------------------------------
# Main.

def validate_flags_or_throw(settings):
    """Checks a run's flag `settings` (`fine_tuning.Run.settings`) against
    each other, and that the data files of the actions asked for exist
    (`fine_tuning.prepare_run` has already required those flags, and checks
    --max_seq_length against the model's max_position_embeddings when it
    loads the config).

    Raises:
      InputError: naming the flags at fault (also missing data files).
    """
    if not settings.do_train and not settings.do_predict and not settings.export_dir:
        raise InputError("Nothing to do: set --do_train, --do_predict or --export_dir.")
    for action, file_flag in (("do_train", "train_file"), ("do_predict", "predict_file")):
        if getattr(settings, action):
            file_io.require_file(file_flag, getattr(settings, file_flag))

    # [CLS] question [SEP] context [SEP]: at least one context piece.
    if settings.max_seq_length <= settings.max_query_length + 3:
        raise InputError(
            "--max_seq_length (%d) leaves no room for the context: it must exceed "
            "--max_query_length (%d) + 3" % (settings.max_seq_length,
                                             settings.max_query_length))
    for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
        if getattr(settings, name) < 1:
            raise InputError("--%s must be at least 1, not %d" % (name, getattr(settings, name)))
    if settings.tune_null_threshold and not settings.version_2_with_negative:
        raise InputError("--tune_null_threshold needs --version_2_with_negative")
    if settings.explain_steps < 0:
        raise InputError("--explain_steps must be >= 0, not %d" % settings.explain_steps)


def _evaluation_settings(settings):
    """run_evaluation's keyword arguments from a run's flag `settings`."""
    return dict(version_2_with_negative=settings.version_2_with_negative,
                tune_threshold=settings.tune_null_threshold,
                null_score_diff_threshold=settings.null_score_diff_threshold)


def evaluate_only(settings):
    """--evaluate_only: scores the files in --output_dir against
    --predict_file, as the flag `settings` (the parsed flags) say."""
    settings_lib.require(settings, "predict_file", "output_dir")
    if settings.tune_null_threshold and not settings.version_2_with_negative:
        raise InputError("--tune_null_threshold needs --version_2_with_negative")
    dataset = load_squad_json(settings.predict_file, "predict_file")
    where = "--predict_file %s" % settings.predict_file
    if not dataset_has_answers(dataset, settings.version_2_with_negative):
        raise InputError("%s has no answers to evaluate against" % where)
    return run_evaluation(dataset, settings.output_dir, where,
                          **_evaluation_settings(settings))


def record_tuned_threshold(output_dir, dataset, checkpoint, predict_file):
    """After --do_predict with --tune_null_threshold: the threshold this run
    chose (eval_results_best_threshold.json), written to the run record in
    `output_dir` (if it has one) with the checkpoint it was tuned for.

    Args:
      dataset: the parsed --predict_file (nothing was tuned without answers).
      checkpoint: the fine-tuned checkpoint the threshold was tuned with.
      predict_file: its path, for the record.

    Returns:
      The threshold, or None where none was tuned.
    """
    if not dataset_has_answers(dataset, True):
        return None
    tuned = file_io.read_json_object(
        os.path.join(output_dir, "eval_results_best_threshold.json"), None)
    threshold = tuned["null_score_diff_threshold"]
    path = os.path.join(output_dir, run_record.FILE)
    if file_io.exists(path):
        record = file_io.read_json_object(path, None)
        record[squad_export.TUNED_THRESHOLD_KEY] = {
            "value": threshold, "checkpoint": checkpoint,
            "predict_file": predict_file}
        with file_io.atomic_output(path) as writer:
            writer.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        file_io.report_output(path, "the run record, with the tuned "
                                    "null_score_diff_threshold %r" % threshold)
    return threshold


def _read_predict_file(settings):
    """(examples, parsed json) of --predict_file, read and parsed once:
    before any training, so that a bad file stops the run at once."""
    dataset = load_squad_json(settings.predict_file, "predict_file")
    examples, _ = read_squad_examples_and_skipped(
        settings.predict_file, is_training=False,
        version_2_with_negative=settings.version_2_with_negative, dataset=dataset)
    return examples, dataset


def _read_train_file(settings):
    """The usable training questions of --train_file, shuffled with a fixed
    seed (so that input_fn's small shuffle buffer is enough).

    Raises:
      InputError: the file has none.
    """
    train_examples, _ = read_squad_examples_and_skipped(
        settings.train_file, is_training=True,
        version_2_with_negative=settings.version_2_with_negative,
        verbose_logging=settings.verbose_logging)
    if not train_examples:
        raise InputError("--train_file %s has no usable training questions"
                         % settings.train_file)
    return train_examples


def _train(run, trainer, train_examples, num_train_steps):
    """Writes the training features to train.tf_record and trains."""
    settings = run.settings
    # The features go through a file rather than memory: SQuAD's are large.
    writer = FeatureWriter(os.path.join(run.output_dir, "train.tf_record"), is_training=True)
    _write_features(writer, train_examples, run.tokenizer, True, settings.max_seq_length,
                    settings.doc_stride, settings.max_query_length)
    training_progress.log_training(run.options, [
        ("Num orig examples", len(train_examples)),
        ("Num split examples", writer.num_features)], num_train_steps,
        settings.train_batch_size)
    trainer.train(
        input_fn=input_fn_builder(writer.filename, settings.max_seq_length,
                                  is_training=True, drop_remainder=True,
                                  length_buckets=run.options.length_buckets),
        max_steps=num_train_steps)
    checkpoints.report_trained_checkpoint(run.output_dir)


def _predict(run, trainer, predict_input):
    """--do_predict on `predict_input` (`_read_predict_file`): the answers,
    and their scores where the file has answers (`predict_and_evaluate`).
    Returns the threshold tuned by --tune_null_threshold (written to the run
    record), or None."""
    settings = run.settings
    examples, dataset = predict_input
    predict_and_evaluate(
        trainer, run.tokenizer, examples, dataset, run.output_dir, settings.predict_file,
        max_seq_length=settings.max_seq_length, doc_stride=settings.doc_stride,
        max_query_length=settings.max_query_length,
        predict_batch_size=settings.predict_batch_size, n_best_size=settings.n_best_size,
        max_answer_length=settings.max_answer_length,
        do_lower_case=settings.do_lower_case, verbose_logging=settings.verbose_logging,
        init_checkpoint=run.init_checkpoint, length_buckets=run.options.length_buckets,
        **_evaluation_settings(settings))
    if not settings.tune_null_threshold:
        return None
    return record_tuned_threshold(run.output_dir, dataset, run.checkpoint(),
                                  settings.predict_file)


@output_lock.releases_output_lock
def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    settings = settings_lib.from_flags(Settings)
    if settings.evaluate_only:
        evaluate_only(settings)
        return

    # Every input is checked before anything is trained or written.
    run = fine_tuning.prepare_run(
        settings, "run_squad.py",
        # The data files of the actions asked for, named with the model's flags.
        needs=lambda settings: (fine_tuning.data_file_flags(
            settings, ("do_train", "train_file"), ("do_predict", "predict_file")), ()),
        check_flags=validate_flags_or_throw,
        head_variable="cls/squad/output_weights")
    settings, bert_config = run.settings, run.bert_config
    checkpoints.check_output_dir_checkpoint(run.output_dir, bert_config,
                                            head_variable_shapes(bert_config))
    # Every input file is read before training: a broken --predict_file
    # stops the run now, not after hours of training.
    predict_input = _read_predict_file(settings) if settings.do_predict else (None, None)
    run.check_export_checkpoint()
    train_examples = num_train_steps = num_warmup_steps = None
    if settings.do_train:
        train_examples = _read_train_file(settings)
        num_train_steps, num_warmup_steps = run.train_schedule(
            len(train_examples), what="training questions")
    run.start_output()

    if settings.do_train:
        run.write_record("question_answering", [
            "do_lower_case", "max_seq_length", "doc_stride", "max_query_length",
            "version_2_with_negative", "vocab_file"])
        random.Random(12345).shuffle(train_examples)

    # One-hot embedding lookups are faster on TPUs, gathers elsewhere.
    trainer = run.trainer(model_fn_builder(
        bert_config, run.init_checkpoint, settings.learning_rate, num_train_steps,
        num_warmup_steps, use_tpu=settings.use_tpu, use_one_hot_embeddings=settings.use_tpu,
        options=run.options), eval_batch_size=False)
    if settings.do_train:
        _train(run, trainer, train_examples, num_train_steps)
        del train_examples  # Only the file is read from here on.

    tuned = _predict(run, trainer, predict_input) if settings.do_predict else None
    # The export (squad_export.py), with the threshold this run tuned.
    if settings.export_dir:
        squad_export.export_run(
            create_model, run.export_source(run.checkpoint()), settings,
            threshold_given="null_score_diff_threshold" in settings.given, tuned=tuned)


if __name__ == "__main__":
    script_runner.run_script(main)
