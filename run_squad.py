# coding=utf-8
# Copyright 2018 The Google AI Language Team Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Run BERT on SQuAD 1.1 and SQuAD 2.0.

The same flags, data pipeline, model and output files as Google's original
run_squad.py, plus:

* the official evaluation built in: when --predict_file carries answers,
  eval_results.json holds the official SQuAD 1.1 (exact_match, f1) or 2.0
  (exact, f1, HasAns_*, NoAns_*, best_*) metrics; `--evaluate_only` scores an
  existing predictions.json, and `evaluate()` does it from Python;
* SQuAD 2.0 null-threshold tuning in the same run (--tune_null_threshold):
  predictions_best_threshold.json next to the untuned predictions.json;
* clear errors for files that are not SQuAD JSON (naming the field and the
  question id), a summary of skipped training answers, atomic output files,
  and no crash when every n-best answer of a 2.0 question is the null answer.
"""

import collections
import json
import math
import os
import random
import re
import string

import numpy as np
import tensorflow.compat.v1 as tf
from absl import flags

import modeling
import run_common
import runtime
import tokenization
from run_common import InputError

FLAGS = flags.FLAGS

run_common.define_flags(
    "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
    "max_seq_length", "do_train", "do_predict", "train_batch_size", "predict_batch_size",
    "learning_rate", "num_train_epochs", "warmup_proportion", "save_checkpoints_steps",
    "iterations_per_loop", run_common.TPU_FLAGS, run_common.TRAINING_OPTION_FLAGS,
    max_seq_length=384)

flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json")

flags.DEFINE_string(
    "predict_file", None,
    "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json")

flags.DEFINE_integer(
    "doc_stride", 128,
    "When splitting up a long document into chunks, how much stride to "
    "take between chunks.")

flags.DEFINE_integer(
    "max_query_length", 64,
    "The maximum number of tokens for the question. Questions longer than "
    "this will be truncated to this length.")

flags.DEFINE_integer(
    "n_best_size", 20,
    "The total number of n-best predictions to generate in the "
    "nbest_predictions.json output file.")

flags.DEFINE_integer(
    "max_answer_length", 30,
    "The maximum length of an answer that can be generated. This is needed "
    "because the start and end predictions are not conditioned on one another.")

flags.DEFINE_bool(
    "verbose_logging", False,
    "If true, all of the warnings related to data processing will be printed. "
    "A number of warnings are expected for a normal SQuAD evaluation.")

flags.DEFINE_bool(
    "version_2_with_negative", False,
    "If true, the SQuAD examples contain some that do not have an answer.")

flags.DEFINE_float(
    "null_score_diff_threshold", 0.0,
    "If null_score - best_non_null is greater than the threshold predict null.")

# Beyond the original.
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

# null_odds.json value of a 2.0 question without any valid non-null span: it
# is predicted "" at every threshold (the original crashed there).
NO_ANSWER_NULL_ODDS = 1000000.0


def _flag_value(name, value):
    """`value`, or the flag's current value (its default if unparsed) if None."""
    if value is not None:
        return value
    return FLAGS[name].value


# ---------------------------------------------------------------------------
# Data: SQuAD json -> SquadExample -> InputFeatures -> TFRecord.

class SquadExample(object):
    """A single training/test example for simple sequence classification.

    For examples without an answer, the start and end position are -1.
    """

    def __init__(self,
                 qas_id,
                 question_text,
                 doc_tokens,
                 orig_answer_text=None,
                 start_position=None,
                 end_position=None,
                 is_impossible=False):
        self.qas_id = qas_id
        self.question_text = question_text
        self.doc_tokens = doc_tokens
        self.orig_answer_text = orig_answer_text
        self.start_position = start_position
        self.end_position = end_position
        self.is_impossible = is_impossible

    def __str__(self):
        return self.__repr__()

    def __repr__(self):
        s = ""
        s += "qas_id: %s" % (tokenization.printable_text(self.qas_id))
        s += ", question_text: %s" % (tokenization.printable_text(self.question_text))
        s += ", doc_tokens: [%s]" % (" ".join(self.doc_tokens))
        if self.start_position:
            s += ", start_position: %d" % (self.start_position)
            s += ", end_position: %d" % (self.end_position)
            s += ", is_impossible: %r" % (self.is_impossible)
        return s


class InputFeatures(object):
    """A single set of features of data (one window of one example)."""

    def __init__(self,
                 unique_id,
                 example_index,
                 doc_span_index,
                 tokens,
                 token_to_orig_map,
                 token_is_max_context,
                 input_ids,
                 input_mask,
                 segment_ids,
                 start_position=None,
                 end_position=None,
                 is_impossible=None):
        self.unique_id = unique_id
        self.example_index = example_index
        self.doc_span_index = doc_span_index
        self.tokens = tokens
        self.token_to_orig_map = token_to_orig_map
        self.token_is_max_context = token_is_max_context
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.start_position = start_position
        self.end_position = end_position
        self.is_impossible = is_impossible


# What write_predictions needs of an InputFeatures: prediction keeps only this
# in memory (the ids, mask and segments go to eval.tf_record only).
PredictionFeature = collections.namedtuple(
    "PredictionFeature",
    ["unique_id", "example_index", "doc_span_index", "tokens", "token_to_orig_map",
     "token_is_max_context"])


def _is_whitespace(c):
    return c == " " or c == "\t" or c == "\r" or c == "\n" or ord(c) == 0x202F


def split_paragraph(paragraph_text):
    """Whitespace-splits a context as the original read_squad_examples does.

    Returns:
      (doc_tokens, char_to_word_offset): the words, and for every character
      of `paragraph_text` the index of the word it belongs to (whitespace
      maps to the word before it; leading whitespace to -1).
    """
    doc_tokens = []
    char_to_word_offset = []
    prev_is_whitespace = True
    for c in paragraph_text:
        if _is_whitespace(c):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
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
    run_common.require_file(flag_name, input_file)
    with tf.io.gfile.GFile(input_file, "r") as reader:
        text = reader.read()
    try:
        dataset = json.loads(text)
    except ValueError as e:
        raise InputError("--%s %s is not a JSON file: %s" % (flag_name, input_file, e))
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise InputError(
            "--%s %s is not a SQuAD file: it needs a top-level \"data\" list of "
            "articles" % (flag_name, input_file))
    return dataset


def _field(obj, key, expected_type, where):
    """obj[key], checked to exist and have `expected_type`; else InputError."""
    if not isinstance(obj, dict) or key not in obj:
        raise InputError("%s: missing field \"%s\"" % (where, key))
    value = obj[key]
    if not isinstance(value, expected_type) or isinstance(value, bool) != (
            expected_type is bool):
        raise InputError("%s: field \"%s\" should be %s, not %r" % (
            where, key, getattr(expected_type, "__name__", expected_type), value))
    return value


def iterate_questions(dataset, where):
    """Yields (paragraph, qa, where) for every question, checking the
    structure (data/paragraphs/context/qas/id/question).

    Args:
      dataset: parsed SQuAD json (dict with "data") or its "data" list.
      where: prefix of error messages (e.g. "--predict_file dev.json").
    """
    articles = dataset["data"] if isinstance(dataset, dict) else dataset
    for article_index, article in enumerate(articles):
        article_where = "%s, article %d" % (where, article_index)
        if isinstance(article, dict) and "title" in article:
            article_where += " (%r)" % (article["title"],)
        paragraphs = _field(article, "paragraphs", list, article_where)
        for paragraph_index, paragraph in enumerate(paragraphs):
            paragraph_where = "%s, paragraph %d" % (article_where, paragraph_index)
            _field(paragraph, "context", str, paragraph_where)
            qas = _field(paragraph, "qas", list, paragraph_where)
            for qa_index, qa in enumerate(qas):
                qa_where = "%s, question %d" % (paragraph_where, qa_index)
                qas_id = _field(qa, "id", (str, int), qa_where)
                qa_where = "%s, question id %r" % (where, qas_id)
                _field(qa, "question", str, qa_where)
                yield paragraph, qa, qa_where


def read_squad_examples(input_file, is_training, version_2_with_negative=None):
    """Read a SQuAD json file into a list of SquadExample.

    Training answers whose text is not found at their answer_start are
    skipped (as in the original) and reported in one summary warning.

    Args:
      input_file: SQuAD json path.
      is_training: read answers (exactly one per answerable question).
      version_2_with_negative: read "is_impossible" (default: the flag).

    Raises:
      InputError: not a SQuAD file, naming the field and question id.
    """
    examples, _ = read_squad_examples_and_skipped(input_file, is_training,
                                                  version_2_with_negative)
    return examples


def read_squad_examples_and_skipped(input_file, is_training, version_2_with_negative=None):
    """`read_squad_examples`, also returning the ids of the skipped training
    questions (answer text not found at answer_start)."""
    version_2_with_negative = _flag_value("version_2_with_negative",
                                          version_2_with_negative)
    verbose_logging = FLAGS["verbose_logging"].value
    flag_name = "train_file" if is_training else "predict_file"
    dataset = load_squad_json(input_file, flag_name)
    where = "--%s %s" % (flag_name, input_file)

    examples = []
    skipped = []
    last_paragraph = None
    for paragraph, qa, qa_where in iterate_questions(dataset, where):
        if paragraph is not last_paragraph:
            last_paragraph = paragraph
            paragraph_text = paragraph["context"]
            doc_tokens, char_to_word_offset = split_paragraph(paragraph_text)

        qas_id = qa["id"]
        question_text = qa["question"]
        start_position = None
        end_position = None
        orig_answer_text = None
        is_impossible = False
        if is_training:
            if version_2_with_negative:
                is_impossible = bool(qa.get("is_impossible", False))
            answers = _field(qa, "answers", list, qa_where)
            if (len(answers) != 1) and (not is_impossible):
                raise InputError(
                    "%s: for training, each question should have exactly 1 answer, "
                    "not %d" % (qa_where, len(answers)))
            if not is_impossible:
                answer = answers[0]
                orig_answer_text = _field(answer, "text", str, qa_where + ", answer")
                answer_offset = _field(answer, "answer_start", int, qa_where + ", answer")
                answer_length = len(orig_answer_text)
                actual_text = None
                if (answer_length > 0 and 0 <= answer_offset
                        and answer_offset + answer_length <= len(paragraph_text)):
                    start_position = char_to_word_offset[answer_offset]
                    end_position = char_to_word_offset[answer_offset + answer_length - 1]
                    actual_text = " ".join(doc_tokens[start_position:(end_position + 1)])
                # Only add answers where the text can be exactly recovered from
                # the document. If this CAN'T happen it's likely due to weird
                # Unicode stuff (or a wrong answer_start) so we just skip the
                # example: for training, not every example is kept.
                cleaned_answer_text = " ".join(
                    tokenization.whitespace_tokenize(orig_answer_text))
                if (actual_text is None or start_position < 0
                        or actual_text.find(cleaned_answer_text) == -1):
                    if verbose_logging or len(skipped) < 5:
                        tf.logging.warning("Could not find answer: '%s' vs. '%s' (%s)",
                                           actual_text, cleaned_answer_text, qa_where)
                    skipped.append(qas_id)
                    continue
            else:
                start_position = -1
                end_position = -1
                orig_answer_text = ""

        examples.append(SquadExample(
            qas_id=qas_id,
            question_text=question_text,
            doc_tokens=doc_tokens,
            orig_answer_text=orig_answer_text,
            start_position=start_position,
            end_position=end_position,
            is_impossible=is_impossible))

    if skipped:
        tf.logging.warning(
            "Could not find answer for %d of %d training questions in %s (their "
            "text is not at answer_start); they were skipped%s.",
            len(skipped), len(skipped) + len(examples), input_file,
            "" if verbose_logging else " (--verbose_logging lists them all)")
    return examples, skipped


_DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def convert_examples_to_features(examples, tokenizer, max_seq_length,
                                 doc_stride, max_query_length, is_training,
                                 output_fn):
    """Converts examples to InputFeatures, one per document window, passing
    each to `output_fn` as soon as it is made (so they can be streamed to a
    file instead of kept in memory).

    Windows: the document's word pieces are cut into spans of at most
    max_seq_length - len(query) - 3 tokens, each starting `doc_stride` tokens
    after the previous one. Input layout: [CLS] query [SEP] span [SEP].

    Returns:
      The number of features made.
    """
    unique_id = 1000000000
    num_features = 0

    for (example_index, example) in enumerate(examples):
        if example_index % 5000 == 0 and example_index:
            tf.logging.info("Converted %d of %d examples (%d features)",
                            example_index, len(examples), num_features)
        query_tokens = tokenizer.tokenize(example.question_text)

        if len(query_tokens) > max_query_length:
            query_tokens = query_tokens[0:max_query_length]

        tok_to_orig_index = []
        orig_to_tok_index = []
        all_doc_tokens = []
        for (i, token) in enumerate(example.doc_tokens):
            orig_to_tok_index.append(len(all_doc_tokens))
            sub_tokens = tokenizer.tokenize(token)
            for sub_token in sub_tokens:
                tok_to_orig_index.append(i)
                all_doc_tokens.append(sub_token)

        tok_start_position = None
        tok_end_position = None
        if is_training and example.is_impossible:
            tok_start_position = -1
            tok_end_position = -1
        if is_training and not example.is_impossible:
            tok_start_position = orig_to_tok_index[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
            else:
                tok_end_position = len(all_doc_tokens) - 1
            (tok_start_position, tok_end_position) = _improve_answer_span(
                all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
                example.orig_answer_text)

        # The -3 accounts for [CLS], [SEP] and [SEP]
        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3

        # We can have documents that are longer than the maximum sequence
        # length. To deal with this we do a sliding window approach, where we
        # take chunks of the up to our max length with a stride of
        # `doc_stride`.
        doc_spans = []
        start_offset = 0
        while start_offset < len(all_doc_tokens):
            length = len(all_doc_tokens) - start_offset
            if length > max_tokens_for_doc:
                length = max_tokens_for_doc
            doc_spans.append(_DocSpan(start=start_offset, length=length))
            if start_offset + length == len(all_doc_tokens):
                break
            start_offset += min(length, doc_stride)

        for (doc_span_index, doc_span) in enumerate(doc_spans):
            tokens = []
            token_to_orig_map = {}
            token_is_max_context = {}
            segment_ids = []
            tokens.append("[CLS]")
            segment_ids.append(0)
            for token in query_tokens:
                tokens.append(token)
                segment_ids.append(0)
            tokens.append("[SEP]")
            segment_ids.append(0)

            for i in range(doc_span.length):
                split_token_index = doc_span.start + i
                token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]

                is_max_context = _check_is_max_context(doc_spans, doc_span_index,
                                                       split_token_index)
                token_is_max_context[len(tokens)] = is_max_context
                tokens.append(all_doc_tokens[split_token_index])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)

            input_ids = tokenizer.convert_tokens_to_ids(tokens)

            # The mask has 1 for real tokens and 0 for padding tokens. Only
            # real tokens are attended to.
            input_mask = [1] * len(input_ids)

            # Zero-pad up to the sequence length.
            while len(input_ids) < max_seq_length:
                input_ids.append(0)
                input_mask.append(0)
                segment_ids.append(0)

            assert len(input_ids) == max_seq_length
            assert len(input_mask) == max_seq_length
            assert len(segment_ids) == max_seq_length

            start_position = None
            end_position = None
            if is_training and not example.is_impossible:
                # For training, if our document chunk does not contain an
                # annotation, the target is [CLS] (position 0).
                doc_start = doc_span.start
                doc_end = doc_span.start + doc_span.length - 1
                out_of_span = False
                if not (tok_start_position >= doc_start and tok_end_position <= doc_end):
                    out_of_span = True
                if out_of_span:
                    start_position = 0
                    end_position = 0
                else:
                    doc_offset = len(query_tokens) + 2
                    start_position = tok_start_position - doc_start + doc_offset
                    end_position = tok_end_position - doc_start + doc_offset

            if is_training and example.is_impossible:
                start_position = 0
                end_position = 0

            if example_index < 20:
                _log_feature(unique_id, example_index, doc_span_index, tokens,
                             token_to_orig_map, token_is_max_context, input_ids,
                             input_mask, segment_ids, is_training, example,
                             start_position, end_position)

            feature = InputFeatures(
                unique_id=unique_id,
                example_index=example_index,
                doc_span_index=doc_span_index,
                tokens=tokens,
                token_to_orig_map=token_to_orig_map,
                token_is_max_context=token_is_max_context,
                input_ids=input_ids,
                input_mask=input_mask,
                segment_ids=segment_ids,
                start_position=start_position,
                end_position=end_position,
                is_impossible=example.is_impossible)

            # Run callback
            output_fn(feature)
            num_features += 1

            unique_id += 1

    tf.logging.info("Converted %d examples into %d features", len(examples), num_features)
    return num_features


def _log_feature(unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                 token_is_max_context, input_ids, input_mask, segment_ids, is_training,
                 example, start_position, end_position):
    """Logs one feature as the original does for the first 20 examples."""
    tf.logging.info("*** Example ***")
    tf.logging.info("unique_id: %s" % (unique_id))
    tf.logging.info("example_index: %s" % (example_index))
    tf.logging.info("doc_span_index: %s" % (doc_span_index))
    tf.logging.info("tokens: %s" % " ".join([tokenization.printable_text(x) for x in tokens]))
    tf.logging.info("token_to_orig_map: %s" % " ".join(
        ["%d:%d" % (x, y) for (x, y) in token_to_orig_map.items()]))
    tf.logging.info("token_is_max_context: %s" % " ".join(
        ["%d:%s" % (x, y) for (x, y) in token_is_max_context.items()]))
    tf.logging.info("input_ids: %s" % " ".join([str(x) for x in input_ids]))
    tf.logging.info("input_mask: %s" % " ".join([str(x) for x in input_mask]))
    tf.logging.info("segment_ids: %s" % " ".join([str(x) for x in segment_ids]))
    if is_training and example.is_impossible:
        tf.logging.info("impossible example")
    if is_training and not example.is_impossible:
        answer_text = " ".join(tokens[start_position:(end_position + 1)])
        tf.logging.info("start_position: %d" % (start_position))
        tf.logging.info("end_position: %d" % (end_position))
        tf.logging.info("answer: %s" % (tokenization.printable_text(answer_text)))


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
    """Returns tokenized answer spans that better match the annotated answer.

    The SQuAD annotations are character based. We first project them to
    whitespace-tokenized words. But then after WordPiece tokenization, we can
    often find a "better match". For example:

      Question: What year was John Smith born?
      Context: The leader was John Smith (1895-1943).
      Answer: 1895

    The original whitespace-tokenized answer will be "(1895-1943).". However
    after tokenization, our tokens will be "( 1895 - 1943 ) .". So we can match
    the exact answer, 1895.

    However, this is not always possible: if the annotator chose "Japan" as a
    character sub-span of the word "Japanese", WordPiece does not split
    "Japanese", so we just use "Japanese" as the annotation.

    Args:
      doc_tokens: the document's word pieces.
      input_start, input_end: word-piece span of the whole answer words.
      tokenizer: a FullTokenizer.
      orig_answer_text: the annotated answer text.

    Returns:
      (start, end): the smallest sub-span whose word pieces equal the
      answer's, or (input_start, input_end) if there is none.
    """
    tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))

    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            text_span = " ".join(doc_tokens[new_start:(new_end + 1)])
            if text_span == tok_answer_text:
                return (new_start, new_end)

    return (input_start, input_end)


def _check_is_max_context(doc_spans, cur_span_index, position):
    """Check if this is the 'max context' doc span for the token.

    Because of the sliding window approach taken to scoring documents, a
    single token can appear in multiple documents. E.g.
      Doc: the man went to the store and bought a gallon of milk
      Span A: the man went to the
      Span B: to the store and bought
      Span C: and bought a gallon of
      ...

    Now the word 'bought' will have two scores from spans B and C. We only
    want to consider the score with "maximum context", which we define as the
    *minimum* of its left and right context (the *sum* of left and right
    context will always be the same, of course), plus 0.01 * span length to
    break ties in favour of longer spans, then of the first span.

    In the example the maximum context for 'bought' would be span C since it
    has 1 left context and 3 right context, while span B has 4 left context
    and 0 right context.
    """
    best_score = None
    best_span_index = None
    for (span_index, doc_span) in enumerate(doc_spans):
        end = doc_span.start + doc_span.length - 1
        if position < doc_span.start:
            continue
        if position > end:
            continue
        num_left_context = position - doc_span.start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index

    return cur_span_index == best_span_index


class FeatureWriter(object):
    """Writes InputFeatures to a TFRecord file as tf.train.Examples.

    Records go to a temporary file renamed to `filename` by `close()`, so an
    interrupted run never leaves a truncated file under the final name.
    """

    def __init__(self, filename, is_training):
        self.filename = filename
        self.is_training = is_training
        self.num_features = 0
        self._tmp_filename = "%s.tmp-%d" % (filename, os.getpid())
        self._writer = tf.io.TFRecordWriter(self._tmp_filename)

    def process_feature(self, feature):
        """Write a InputFeature to the TFRecordWriter as a tf.train.Example."""
        self.num_features += 1

        def create_int_feature(values):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

        features = collections.OrderedDict()
        features["unique_ids"] = create_int_feature([feature.unique_id])
        features["input_ids"] = create_int_feature(feature.input_ids)
        features["input_mask"] = create_int_feature(feature.input_mask)
        features["segment_ids"] = create_int_feature(feature.segment_ids)

        if self.is_training:
            features["start_positions"] = create_int_feature([feature.start_position])
            features["end_positions"] = create_int_feature([feature.end_position])
            impossible = 0
            if feature.is_impossible:
                impossible = 1
            features["is_impossible"] = create_int_feature([impossible])

        tf_example = tf.train.Example(features=tf.train.Features(feature=features))
        self._writer.write(tf_example.SerializeToString())

    def close(self):
        """Finishes the file and moves it to `filename`."""
        self._writer.close()
        tf.io.gfile.rename(self._tmp_filename, self.filename, overwrite=True)

    def abort(self):
        """Closes and deletes the unfinished file."""
        self._writer.close()
        if tf.io.gfile.exists(self._tmp_filename):
            tf.io.gfile.remove(self._tmp_filename)


def _write_features(writer, examples, tokenizer, is_training, keep=None):
    """Converts `examples` with the flags' lengths, streaming every feature to
    `writer` (and passing it to `keep`, if given); removes the partial file on
    failure."""
    def output_fn(feature):
        writer.process_feature(feature)
        if keep is not None:
            keep(feature)

    try:
        convert_examples_to_features(
            examples=examples,
            tokenizer=tokenizer,
            max_seq_length=FLAGS.max_seq_length,
            doc_stride=FLAGS.doc_stride,
            max_query_length=FLAGS.max_query_length,
            is_training=is_training,
            output_fn=output_fn)
    except BaseException:
        writer.abort()
        raise
    writer.close()


# ---------------------------------------------------------------------------
# Model.

def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 use_one_hot_embeddings):
    """Creates the span-prediction model.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch_size, seq_length].

    Returns:
      (start_logits, end_logits): float32 [batch_size, seq_length] each, from
      `cls/squad/output_weights` [2, hidden] and `cls/squad/output_bias` [2].
    """
    model = modeling.BertModel(
        config=bert_config,
        is_training=is_training,
        input_ids=input_ids,
        input_mask=input_mask,
        token_type_ids=segment_ids,
        use_one_hot_embeddings=use_one_hot_embeddings,
        **run_common.model_options())

    final_hidden = model.get_sequence_output()

    final_hidden_shape = modeling.get_shape_list(final_hidden, expected_rank=3)
    batch_size = final_hidden_shape[0]
    seq_length = final_hidden_shape[1]
    hidden_size = final_hidden_shape[2]

    output_weights = tf.get_variable(
        "cls/squad/output_weights", [2, hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))

    output_bias = tf.get_variable(
        "cls/squad/output_bias", [2], initializer=tf.zeros_initializer())

    final_hidden_matrix = tf.reshape(final_hidden, [batch_size * seq_length, hidden_size])
    logits = tf.matmul(final_hidden_matrix, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)

    logits = tf.reshape(logits, [batch_size, seq_length, 2])
    logits = tf.transpose(logits, [2, 0, 1])

    unstacked_logits = tf.unstack(logits, axis=0)

    (start_logits, end_logits) = (unstacked_logits[0], unstacked_logits[1])

    return (start_logits, end_logits)


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings):
    """Returns `model_fn` closure for TPUEstimator."""

    def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
        """The `model_fn` for TPUEstimator."""

        run_common.log_features(features)

        unique_ids = features["unique_ids"]
        input_ids = features["input_ids"]
        input_mask = features["input_mask"]
        segment_ids = features["segment_ids"]

        is_training = (mode == runtime.ModeKeys.TRAIN)

        (start_logits, end_logits) = create_model(
            bert_config=bert_config,
            is_training=is_training,
            input_ids=input_ids,
            input_mask=input_mask,
            segment_ids=segment_ids,
            use_one_hot_embeddings=use_one_hot_embeddings)

        scaffold_fn = run_common.init_from_checkpoint(init_checkpoint, use_tpu)

        output_spec = None
        if mode == runtime.ModeKeys.TRAIN:
            seq_length = modeling.get_shape_list(input_ids)[1]

            def compute_loss(logits, positions):
                one_hot_positions = tf.one_hot(positions, depth=seq_length, dtype=tf.float32)
                log_probs = tf.nn.log_softmax(logits, axis=-1)
                loss = -tf.reduce_mean(tf.reduce_sum(one_hot_positions * log_probs, axis=-1))
                return loss

            start_positions = features["start_positions"]
            end_positions = features["end_positions"]

            start_loss = compute_loss(start_logits, start_positions)
            end_loss = compute_loss(end_logits, end_positions)

            total_loss = (start_loss + end_loss) / 2.0

            train_op = run_common.create_train_op(
                total_loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu)

            output_spec = runtime.TPUEstimatorSpec(
                mode=mode,
                loss=total_loss,
                train_op=train_op,
                scaffold_fn=scaffold_fn,
                training_hooks=run_common.training_hooks(
                    total_loss, examples_per_step=params["batch_size"],
                    tokens_per_step=params["batch_size"] * seq_length, use_tpu=use_tpu))
        elif mode == runtime.ModeKeys.PREDICT:
            predictions = {
                "unique_ids": unique_ids,
                "start_logits": start_logits,
                "end_logits": end_logits,
            }
            output_spec = runtime.TPUEstimatorSpec(
                mode=mode, predictions=predictions, scaffold_fn=scaffold_fn)
        else:
            raise ValueError("Only TRAIN and PREDICT modes are supported: %s" % (mode))

        return output_spec

    return model_fn


def input_fn_builder(input_file, seq_length, is_training, drop_remainder):
    """Creates an `input_fn` closure to be passed to TPUEstimator."""

    name_to_features = {
        "unique_ids": tf.FixedLenFeature([], tf.int64),
        "input_ids": tf.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.FixedLenFeature([seq_length], tf.int64),
    }

    if is_training:
        name_to_features["start_positions"] = tf.FixedLenFeature([], tf.int64)
        name_to_features["end_positions"] = tf.FixedLenFeature([], tf.int64)

    def input_fn(params):
        """The actual input function."""
        batch_size = params["batch_size"]

        # For training, we want a lot of parallel reading and shuffling.
        # For eval, we want no shuffling and parallel reading doesn't matter.
        d = tf.data.TFRecordDataset(input_file)
        if is_training:
            d = d.repeat()
            d = d.shuffle(buffer_size=100)

        d = d.map(lambda record: run_common.decode_record(record, name_to_features))
        d = d.batch(batch_size, drop_remainder=drop_remainder)
        return d

    return input_fn


# ---------------------------------------------------------------------------
# Predictions: logits -> answer texts.

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

_PrelimPrediction = collections.namedtuple(
    "PrelimPrediction",
    ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])

_NbestPrediction = collections.namedtuple(
    "NbestPrediction", ["text", "start_logit", "end_logit"])


def _as_float_list(logits):
    """Logits (list or numpy array) as a list of Python floats."""
    if isinstance(logits, np.ndarray):
        return logits.tolist()
    return [float(x) for x in logits]


def compute_predictions(all_examples, all_features, all_results, n_best_size,
                        max_answer_length, do_lower_case, version_2_with_negative=None,
                        null_score_diff_threshold=None, verbose_logging=None):
    """The original write_predictions' computation, without the files.

    Args:
      all_examples: SquadExamples, in the order their features were made.
      all_features: InputFeatures (or PredictionFeatures) of all examples.
      all_results: RawResults (logits lists or numpy arrays [seq_length]).
      n_best_size, max_answer_length, do_lower_case: as the flags.
      version_2_with_negative, null_score_diff_threshold, verbose_logging:
        default to the flags.

    Returns:
      (all_predictions, all_nbest_json, scores_diff_json): OrderedDicts qas_id
      -> answer text; -> list of n-best dicts (text, probability, start_logit,
      end_logit); -> null odds (score_null - best non-null score; SQuAD 2.0
      only, empty otherwise).
    """
    version_2_with_negative = _flag_value("version_2_with_negative", version_2_with_negative)
    null_score_diff_threshold = _flag_value("null_score_diff_threshold",
                                            null_score_diff_threshold)
    verbose_logging = _flag_value("verbose_logging", verbose_logging)

    example_index_to_features = collections.defaultdict(list)
    for feature in all_features:
        example_index_to_features[feature.example_index].append(feature)

    unique_id_to_result = {}
    for result in all_results:
        unique_id_to_result[result.unique_id] = result

    all_predictions = collections.OrderedDict()
    all_nbest_json = collections.OrderedDict()
    scores_diff_json = collections.OrderedDict()

    for (example_index, example) in enumerate(all_examples):
        features = example_index_to_features[example_index]

        prelim_predictions = []
        # keep track of the minimum score of null start+end of position 0
        score_null = 1000000  # large and positive
        min_null_feature_index = 0  # the paragraph slice with min null score
        null_start_logit = 0  # the start logit at the slice with min null score
        null_end_logit = 0  # the end logit at the slice with min null score
        for (feature_index, feature) in enumerate(features):
            result = unique_id_to_result[feature.unique_id]
            start_logits = _as_float_list(result.start_logits)
            end_logits = _as_float_list(result.end_logits)
            start_indexes = _get_best_indexes(start_logits, n_best_size)
            end_indexes = _get_best_indexes(end_logits, n_best_size)
            # if we could have irrelevant answers, get the min score of irrelevant
            if version_2_with_negative:
                feature_null_score = start_logits[0] + end_logits[0]
                if feature_null_score < score_null:
                    score_null = feature_null_score
                    min_null_feature_index = feature_index
                    null_start_logit = start_logits[0]
                    null_end_logit = end_logits[0]
            for start_index in start_indexes:
                for end_index in end_indexes:
                    # We could hypothetically create invalid predictions, e.g.,
                    # predict that the start of the span is in the question. We
                    # throw out all invalid predictions.
                    if start_index >= len(feature.tokens):
                        continue
                    if end_index >= len(feature.tokens):
                        continue
                    if start_index not in feature.token_to_orig_map:
                        continue
                    if end_index not in feature.token_to_orig_map:
                        continue
                    if not feature.token_is_max_context.get(start_index, False):
                        continue
                    if end_index < start_index:
                        continue
                    length = end_index - start_index + 1
                    if length > max_answer_length:
                        continue
                    prelim_predictions.append(
                        _PrelimPrediction(
                            feature_index=feature_index,
                            start_index=start_index,
                            end_index=end_index,
                            start_logit=start_logits[start_index],
                            end_logit=end_logits[end_index]))

        if version_2_with_negative:
            prelim_predictions.append(
                _PrelimPrediction(
                    feature_index=min_null_feature_index,
                    start_index=0,
                    end_index=0,
                    start_logit=null_start_logit,
                    end_logit=null_end_logit))
        prelim_predictions = sorted(
            prelim_predictions,
            key=lambda x: (x.start_logit + x.end_logit),
            reverse=True)

        seen_predictions = {}
        nbest = []
        for pred in prelim_predictions:
            if len(nbest) >= n_best_size:
                break
            if pred.start_index > 0:  # this is a non-null prediction
                feature = features[pred.feature_index]
                tok_tokens = feature.tokens[pred.start_index:(pred.end_index + 1)]
                orig_doc_start = feature.token_to_orig_map[pred.start_index]
                orig_doc_end = feature.token_to_orig_map[pred.end_index]
                orig_tokens = example.doc_tokens[orig_doc_start:(orig_doc_end + 1)]
                tok_text = " ".join(tok_tokens)

                # De-tokenize WordPieces that have been split off.
                tok_text = tok_text.replace(" ##", "")
                tok_text = tok_text.replace("##", "")

                # Clean whitespace
                tok_text = tok_text.strip()
                tok_text = " ".join(tok_text.split())
                orig_text = " ".join(orig_tokens)

                final_text = get_final_text(tok_text, orig_text, do_lower_case,
                                            verbose_logging=verbose_logging)
                if final_text in seen_predictions:
                    continue

                seen_predictions[final_text] = True
            else:
                final_text = ""
                seen_predictions[final_text] = True

            nbest.append(
                _NbestPrediction(
                    text=final_text,
                    start_logit=pred.start_logit,
                    end_logit=pred.end_logit))

        # if we didn't include the empty option in the n-best, include it
        if version_2_with_negative:
            if "" not in seen_predictions:
                nbest.append(
                    _NbestPrediction(
                        text="", start_logit=null_start_logit, end_logit=null_end_logit))
        # In very rare edge cases we could have no valid predictions. So we
        # just create a nonce prediction in this case to avoid failure.
        if not nbest:
            nbest.append(_NbestPrediction(text="empty", start_logit=0.0, end_logit=0.0))

        assert len(nbest) >= 1

        total_scores = []
        best_non_null_entry = None
        for entry in nbest:
            total_scores.append(entry.start_logit + entry.end_logit)
            if not best_non_null_entry:
                if entry.text:
                    best_non_null_entry = entry

        probs = _compute_softmax(total_scores)

        nbest_json = []
        for (i, entry) in enumerate(nbest):
            output = collections.OrderedDict()
            output["text"] = entry.text
            output["probability"] = probs[i]
            output["start_logit"] = entry.start_logit
            output["end_logit"] = entry.end_logit
            nbest_json.append(output)

        assert len(nbest_json) >= 1

        if not version_2_with_negative:
            all_predictions[example.qas_id] = nbest_json[0]["text"]
        elif best_non_null_entry is None:
            # Every n-best entry is the null answer (no valid span at all): the
            # original crashed here. Predict null at any threshold.
            scores_diff_json[example.qas_id] = NO_ANSWER_NULL_ODDS
            all_predictions[example.qas_id] = ""
        else:
            # predict "" iff the null score - the score of best non-null > threshold
            score_diff = score_null - best_non_null_entry.start_logit - (
                best_non_null_entry.end_logit)
            scores_diff_json[example.qas_id] = score_diff
            if score_diff > null_score_diff_threshold:
                all_predictions[example.qas_id] = ""
            else:
                all_predictions[example.qas_id] = best_non_null_entry.text

        all_nbest_json[example.qas_id] = nbest_json

    return all_predictions, all_nbest_json, scores_diff_json


def write_json(path, value):
    """Writes `value` as the original does (indent 4, final newline),
    atomically."""
    with run_common.atomic_output(path) as writer:
        writer.write(json.dumps(value, indent=4) + "\n")


def write_predictions(all_examples, all_features, all_results, n_best_size,
                      max_answer_length, do_lower_case, output_prediction_file,
                      output_nbest_file, output_null_log_odds_file,
                      version_2_with_negative=None, null_score_diff_threshold=None,
                      verbose_logging=None):
    """Write final predictions to the json file and log-odds of null if needed.

    Computes as `compute_predictions` and writes predictions.json,
    nbest_predictions.json and (SQuAD 2.0) null_odds.json in the original's
    format.

    Returns:
      (all_predictions, all_nbest_json, scores_diff_json), as
      `compute_predictions`.
    """
    version_2_with_negative = _flag_value("version_2_with_negative", version_2_with_negative)
    tf.logging.info("Writing predictions to: %s" % (output_prediction_file))
    tf.logging.info("Writing nbest to: %s" % (output_nbest_file))

    all_predictions, all_nbest_json, scores_diff_json = compute_predictions(
        all_examples, all_features, all_results, n_best_size, max_answer_length,
        do_lower_case, version_2_with_negative=version_2_with_negative,
        null_score_diff_threshold=null_score_diff_threshold,
        verbose_logging=verbose_logging)

    write_json(output_prediction_file, all_predictions)
    write_json(output_nbest_file, all_nbest_json)
    if version_2_with_negative:
        write_json(output_null_log_odds_file, scores_diff_json)
    return all_predictions, all_nbest_json, scores_diff_json


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
    """Project the tokenized prediction back to the original text.

    When we created the data, we kept track of the alignment between original
    (whitespace tokenized) tokens and our WordPiece tokenized tokens. So now
    `orig_text` contains the span of our original text corresponding to the
    span that we predicted.

    However, `orig_text` may contain extra characters that we don't want in our
    prediction. For example, let's say:
      pred_text = steve smith
      orig_text = Steve Smith's

    We don't want to return `orig_text` because it contains the extra "'s".

    We don't want to return `pred_text` because it's already been normalized
    (the SQuAD eval script also does punctuation stripping/lower casing but our
    tokenizer does additional normalization like stripping accent characters).

    What we really want to return is "Steve Smith".

    Therefore, we have to apply a semi-complicated alignment heuristic between
    `pred_text` and `orig_text` to get a character-to-character alignment. This
    can fail in certain cases in which case we just return `orig_text`.
    """

    def _strip_spaces(text):
        ns_chars = []
        ns_to_s_map = collections.OrderedDict()
        for (i, c) in enumerate(text):
            if c == " ":
                continue
            ns_to_s_map[len(ns_chars)] = i
            ns_chars.append(c)
        ns_text = "".join(ns_chars)
        return (ns_text, ns_to_s_map)

    # We first tokenize `orig_text`, strip whitespace from the result and
    # `pred_text`, and check if they are the same length. If they are NOT the
    # same length, the heuristic has failed. If they are the same length, we
    # assume the characters are one-to-one aligned.
    tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)

    tok_text = " ".join(tokenizer.tokenize(orig_text))

    start_position = tok_text.find(pred_text)
    if start_position == -1:
        if verbose_logging:
            tf.logging.info("Unable to find text: '%s' in '%s'" % (pred_text, orig_text))
        return orig_text
    end_position = start_position + len(pred_text) - 1

    (orig_ns_text, orig_ns_to_s_map) = _strip_spaces(orig_text)
    (tok_ns_text, tok_ns_to_s_map) = _strip_spaces(tok_text)

    if len(orig_ns_text) != len(tok_ns_text):
        if verbose_logging:
            tf.logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                            orig_ns_text, tok_ns_text)
        return orig_text

    # We then project the characters in `pred_text` back to `orig_text` using
    # the character-to-character alignment.
    tok_s_to_ns_map = {}
    for (i, tok_index) in tok_ns_to_s_map.items():
        tok_s_to_ns_map[tok_index] = i

    orig_start_position = None
    if start_position in tok_s_to_ns_map:
        ns_start_position = tok_s_to_ns_map[start_position]
        if ns_start_position in orig_ns_to_s_map:
            orig_start_position = orig_ns_to_s_map[ns_start_position]

    if orig_start_position is None:
        if verbose_logging:
            tf.logging.info("Couldn't map start position")
        return orig_text

    orig_end_position = None
    if end_position in tok_s_to_ns_map:
        ns_end_position = tok_s_to_ns_map[end_position]
        if ns_end_position in orig_ns_to_s_map:
            orig_end_position = orig_ns_to_s_map[ns_end_position]

    if orig_end_position is None:
        if verbose_logging:
            tf.logging.info("Couldn't map end position")
        return orig_text

    output_text = orig_text[orig_start_position:(orig_end_position + 1)]
    return output_text


def _get_best_indexes(logits, n_best_size):
    """Get the n-best logits from a list: indexes of the `n_best_size` largest,
    largest first (ties: lower index first)."""
    index_and_score = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)

    best_indexes = []
    for i in range(len(index_and_score)):
        if i >= n_best_size:
            break
        best_indexes.append(index_and_score[i][0])
    return best_indexes


def _compute_softmax(scores):
    """Compute softmax probability over raw logits (a list of floats)."""
    if not scores:
        return []

    max_score = None
    for score in scores:
        if max_score is None or score > max_score:
            max_score = score

    exp_scores = []
    total_sum = 0.0
    for score in scores:
        x = math.exp(score - max_score)
        exp_scores.append(x)
        total_sum += x

    probs = []
    for score in exp_scores:
        probs.append(score / total_sum)
    return probs


# ---------------------------------------------------------------------------
# Official evaluation (evaluate-v1.1.py and evaluate-v2.0.py), built in.

def normalize_answer(s):
    """Lower text and remove punctuation, articles and extra whitespace."""

    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def f1_score_v1(prediction, ground_truth):
    """SQuAD 1.1 token-overlap F1 (0 when nothing overlaps, even both empty)."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def exact_match_score_v1(prediction, ground_truth):
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


def _answer_texts(qa, where):
    answers = _field(qa, "answers", list, where)
    return [_field(a, "text", str, where + ", answer") for a in answers]


def evaluate_v1(dataset, predictions, where="dataset"):
    """The official SQuAD 1.1 evaluation (evaluate-v1.1.py).

    Args:
      dataset: parsed SQuAD json (or its "data" list) with answers.
      predictions: dict qas_id -> answer text. A question without a
        prediction scores 0 (with a warning), as in the official script.
      where: names the dataset in error messages.

    Returns:
      {"exact_match": float, "f1": float}, on a 0-100 scale.

    Raises:
      InputError: a question without answers (a SQuAD 2.0 file?).
    """
    f1 = exact_match = total = 0
    missing = []
    for _, qa, qa_where in iterate_questions(dataset, where):
        total += 1
        ground_truths = _answer_texts(qa, qa_where)
        if not ground_truths:
            raise InputError("%s has no answers: SQuAD 1.1 evaluation needs at least "
                             "one (for SQuAD 2.0 use --version_2_with_negative)" % qa_where)
        if qa["id"] not in predictions:
            missing.append(qa["id"])
            continue
        prediction = predictions[qa["id"]]
        exact_match += metric_max_over_ground_truths(
            exact_match_score_v1, prediction, ground_truths)
        f1 += metric_max_over_ground_truths(f1_score_v1, prediction, ground_truths)
    if missing:
        tf.logging.warning("Unanswered questions will receive score 0: %d (first: %s)",
                           len(missing), missing[0])
    if not total:
        raise InputError("%s has no questions" % where)
    exact_match = 100.0 * exact_match / total
    f1 = 100.0 * f1 / total
    return collections.OrderedDict([("exact_match", exact_match), ("f1", f1)])


def _get_tokens(s):
    if not s:
        return []
    return normalize_answer(s).split()


def compute_exact(a_gold, a_pred):
    """SQuAD 2.0 exact match of one answer: 0 or 1."""
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold, a_pred):
    """SQuAD 2.0 token-overlap F1 of one answer (1 if both are empty)."""
    gold_toks = _get_tokens(a_gold)
    pred_toks = _get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def make_qid_to_has_ans(dataset, where="dataset"):
    """qas_id -> whether the question has a (non-empty) answers list."""
    qid_to_has_ans = collections.OrderedDict()
    for _, qa, qa_where in iterate_questions(dataset, where):
        qid_to_has_ans[qa["id"]] = bool(_answer_texts(qa, qa_where))
    return qid_to_has_ans


def get_raw_scores(dataset, preds, where="dataset"):
    """Per-question exact and F1 of `preds` (max over gold answers; the only
    gold answer of an unanswerable question is "").

    Returns:
      (exact_scores, f1_scores): dicts qas_id -> score in [0, 1], for the
      questions that have a prediction.
    """
    exact_scores = {}
    f1_scores = {}
    for _, qa, qa_where in iterate_questions(dataset, where):
        qid = qa["id"]
        gold_answers = [a for a in _answer_texts(qa, qa_where) if normalize_answer(a)]
        if not gold_answers:
            # For unanswerable questions, only correct answer is empty string
            gold_answers = [""]
        if qid not in preds:
            continue
        a_pred = preds[qid]
        # Take max over all gold answers
        exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
        f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    """Scores with every question whose na_prob > na_prob_thresh answered ""."""
    new_scores = {}
    for qid, s in scores.items():
        pred_na = na_probs[qid] > na_prob_thresh
        if pred_na:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = s
    return new_scores


def make_eval_dict(exact_scores, f1_scores, qid_list=None):
    if not qid_list:
        total = len(exact_scores)
        return collections.OrderedDict([
            ("exact", 100.0 * sum(exact_scores.values()) / total),
            ("f1", 100.0 * sum(f1_scores.values()) / total),
            ("total", total),
        ])
    total = len(qid_list)
    return collections.OrderedDict([
        ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
        ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
        ("total", total),
    ])


def merge_eval(main_eval, new_eval, prefix):
    for k in new_eval:
        main_eval["%s_%s" % (prefix, k)] = new_eval[k]


def search_null_threshold(preds, scores, na_probs, qid_to_has_ans):
    """The official find_best_thresh search.

    Starting from "every question answered null", questions are switched to
    their prediction in increasing na_prob order; the best total is kept.

    Args:
      preds: qas_id -> predicted text (should be the best non-null answer).
      scores: qas_id -> exact or F1 of that prediction.
      na_probs: qas_id -> null odds; null is predicted where na_prob > thresh.
      qid_to_has_ans: qas_id -> bool.

    Returns:
      (best_score, best_thresh): best_score on a 0-100 scale; best_thresh is
      None if answering every question null is best.
    """
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = None
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            if preds[qid]:
                diff = -1
            else:
                diff = 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """The official find_best_thresh: (best score, its threshold, 0.0 if
    all-null is best)."""
    best_score, best_thresh = search_null_threshold(preds, scores, na_probs, qid_to_has_ans)
    return best_score, (0.0 if best_thresh is None else best_thresh)


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0, where="dataset"):
    """The official SQuAD 2.0 evaluation (evaluate-v2.0.py).

    Args:
      dataset: parsed SQuAD 2.0 json (or its "data" list) with answers.
      predictions: dict qas_id -> answer text ("" for no answer); must cover
        every question.
      na_probs: optional dict qas_id -> null odds (null_odds.json, the
        official --na-prob-file). When given, a question whose na_prob >
        na_prob_thresh counts as answered "" (the official default 1.0: no
        effect on predictions made with --null_score_diff_threshold <= 1),
        and the best thresholds are searched.
      na_prob_thresh: the official --na-prob-thresh.
      where: names the dataset in error messages.

    Returns:
      OrderedDict: exact, f1, total, HasAns_exact, HasAns_f1, HasAns_total,
      NoAns_exact, NoAns_f1, NoAns_total (those present), and with na_probs
      best_exact, best_exact_thresh, best_f1, best_f1_thresh; scores 0-100.

    Raises:
      InputError: predictions or na_probs miss questions.
    """
    qid_to_has_ans = make_qid_to_has_ans(dataset, where)
    if not qid_to_has_ans:
        raise InputError("%s has no questions" % where)
    _check_covers(predictions, qid_to_has_ans, "predictions")
    if na_probs is None:
        na_probs = {k: 0.0 for k in predictions}
        has_na_probs = False
    else:
        _check_covers(na_probs, qid_to_has_ans, "null odds")
        has_na_probs = True
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    exact_raw, f1_raw = get_raw_scores(dataset, predictions, where)
    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out_eval = make_eval_dict(exact_thresh, f1_thresh)
    if has_ans_qids:
        merge_eval(out_eval, make_eval_dict(exact_thresh, f1_thresh, qid_list=has_ans_qids),
                   "HasAns")
    if no_ans_qids:
        merge_eval(out_eval, make_eval_dict(exact_thresh, f1_thresh, qid_list=no_ans_qids),
                   "NoAns")
    if has_na_probs:
        # Only the dataset's questions take part (the official script's
        # na_probs come from the same run, so they are the same set).
        na_probs = {k: na_probs[k] for k in qid_to_has_ans}
        best_exact, exact_thresh_value = find_best_thresh(
            predictions, exact_raw, na_probs, qid_to_has_ans)
        best_f1, f1_thresh_value = find_best_thresh(
            predictions, f1_raw, na_probs, qid_to_has_ans)
        out_eval["best_exact"] = best_exact
        out_eval["best_exact_thresh"] = exact_thresh_value
        out_eval["best_f1"] = best_f1
        out_eval["best_f1_thresh"] = f1_thresh_value
    return out_eval


def _check_covers(values, qid_to_has_ans, what):
    missing = [k for k in qid_to_has_ans if k not in values]
    if missing:
        raise InputError("The %s miss %d of the %d questions (first: %r)"
                         % (what, len(missing), len(qid_to_has_ans), missing[0]))


def evaluate(dataset, predictions, na_probs=None, version_2_with_negative=False):
    """Official SQuAD evaluation of `predictions` (qas_id -> text) against
    `dataset` (parsed SQuAD json or its "data" list): `evaluate_v1`, or with
    version_2_with_negative `evaluate_v2` (`na_probs`: null_odds.json's dict).
    """
    if version_2_with_negative:
        return evaluate_v2(dataset, predictions, na_probs=na_probs)
    return evaluate_v1(dataset, predictions)


def dataset_has_answers(dataset, version_2_with_negative):
    """Whether `dataset` can be evaluated: every question has an "answers"
    list and (SQuAD 1.1) a non-empty one, or (2.0) at least one question has
    an answer or is marked impossible."""
    articles = dataset["data"] if isinstance(dataset, dict) else dataset
    any_answer = False
    for article in articles:
        for paragraph in article.get("paragraphs", []):
            for qa in paragraph.get("qas", []):
                answers = qa.get("answers") if isinstance(qa, dict) else None
                if not isinstance(answers, list):
                    return False
                if not answers and not version_2_with_negative:
                    return False
                any_answer = any_answer or bool(answers) or bool(qa.get("is_impossible"))
    return any_answer


def best_non_null_predictions(all_nbest_json):
    """qas_id -> the highest-scoring non-empty n-best text ("" if none)."""
    best = collections.OrderedDict()
    for qid, nbest in all_nbest_json.items():
        best[qid] = next((entry["text"] for entry in nbest if entry["text"]), "")
    return best


def apply_null_threshold(non_null_predictions, null_odds, threshold):
    """Predictions at `threshold`: "" where null_odds > threshold (the
    original's rule for --null_score_diff_threshold), else the best non-null
    answer."""
    return collections.OrderedDict(
        (qid, "" if null_odds[qid] > threshold else text)
        for qid, text in non_null_predictions.items())


def tune_null_threshold(dataset, all_nbest_json, null_odds, where="dataset"):
    """Chooses the null_score_diff_threshold with the best F1 on `dataset`.

    The official best_f1_thresh is a threshold on na_prob (null predicted
    where na_prob > thresh), the same rule and quantity as the original's
    `null_odds > null_score_diff_threshold`, so it is used as such. The
    search scores every question's best non-null n-best answer (not
    predictions.json, whose nulls at the run's threshold would hide the
    answers that a higher threshold brings back).

    Returns:
      (threshold, predictions, eval_dict): the threshold; predictions
      (qas_id -> text) at that threshold; their `evaluate_v2` results plus
      "null_score_diff_threshold".
    """
    qid_to_has_ans = make_qid_to_has_ans(dataset, where)
    _check_covers(all_nbest_json, qid_to_has_ans, "n-best predictions")
    _check_covers(null_odds, qid_to_has_ans, "null odds")
    non_null = best_non_null_predictions(
        collections.OrderedDict((k, all_nbest_json[k]) for k in qid_to_has_ans))
    na_probs = {k: null_odds[k] for k in qid_to_has_ans}
    _, f1_raw = get_raw_scores(dataset, non_null, where)
    _, threshold = search_null_threshold(non_null, f1_raw, na_probs, qid_to_has_ans)
    if threshold is None:
        # Answering every question null is best: any threshold below all
        # null odds does that.
        threshold = min(na_probs.values()) - 1.0
    predictions = apply_null_threshold(non_null, na_probs, threshold)
    # Scored as written (the nulls are already applied).
    result = evaluate_v2(dataset, predictions, where=where)
    result["null_score_diff_threshold"] = threshold
    return threshold, predictions, result


def _read_json(path, what):
    run_common.require_file(what, path)
    with tf.io.gfile.GFile(path, "r") as reader:
        try:
            return json.load(reader)
        except ValueError as e:
            raise InputError("%s is not a JSON file: %s" % (path, e))


def _log_results(header, result):
    tf.logging.info(header)
    for key, value in result.items():
        tf.logging.info("  %s = %s", key, value)


def run_evaluation(dataset, output_dir, where, all_predictions=None, all_nbest_json=None,
                   null_odds=None):
    """Evaluates the predictions in `output_dir` (or those given) and writes
    eval_results.json, and with --tune_null_threshold the tuned files.

    Returns:
      The eval dict of predictions.json.
    """
    version_2 = FLAGS.version_2_with_negative
    if all_predictions is None:
        all_predictions = _read_json(os.path.join(output_dir, "predictions.json"),
                                     "predictions.json in --output_dir")
    null_odds_file = os.path.join(output_dir, "null_odds.json")
    if version_2 and null_odds is None and tf.io.gfile.exists(null_odds_file):
        null_odds = _read_json(null_odds_file, "null_odds.json in --output_dir")

    if version_2:
        result = evaluate_v2(dataset, all_predictions, na_probs=null_odds, where=where)
    else:
        result = evaluate_v1(dataset, all_predictions, where=where)
    _log_results("***** Eval results (predictions.json, null_score_diff_threshold=%s) *****"
                 % FLAGS.null_score_diff_threshold if version_2
                 else "***** Eval results (predictions.json) *****", result)
    write_json(os.path.join(output_dir, "eval_results.json"), result)

    if FLAGS.tune_null_threshold:
        if null_odds is None:
            raise InputError("--tune_null_threshold needs null_odds.json in %s" % output_dir)
        if all_nbest_json is None:
            all_nbest_json = _read_json(os.path.join(output_dir, "nbest_predictions.json"),
                                        "nbest_predictions.json in --output_dir")
        threshold, tuned, tuned_result = tune_null_threshold(dataset, all_nbest_json,
                                                             null_odds, where)
        write_json(os.path.join(output_dir, "predictions_best_threshold.json"), tuned)
        write_json(os.path.join(output_dir, "eval_results_best_threshold.json"), tuned_result)
        _log_results("***** Eval results (predictions_best_threshold.json) *****",
                     tuned_result)
        tf.logging.info(
            "Best --null_score_diff_threshold on %s: %r (F1 %.2f, exact %.2f). "
            "predictions_best_threshold.json uses it; predictions.json is untuned "
            "(--null_score_diff_threshold=%r: F1 %.2f, exact %.2f). The threshold was "
            "chosen on the same questions it is scored on.",
            where, threshold, tuned_result["f1"], tuned_result["exact"],
            FLAGS.null_score_diff_threshold, result["f1"], result["exact"])
    return result


# ---------------------------------------------------------------------------
# Main.

def validate_flags_or_throw(bert_config):
    """Validate the input FLAGS or throw an InputError."""
    tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)

    if not FLAGS.do_train and not FLAGS.do_predict:
        raise InputError("At least one of `do_train` or `do_predict` must be True.")

    if FLAGS.do_train:
        if not FLAGS.train_file:
            raise InputError("If `do_train` is True, then `train_file` must be specified.")
        run_common.require_file("train_file", FLAGS.train_file)
    if FLAGS.do_predict:
        if not FLAGS.predict_file:
            raise InputError("If `do_predict` is True, then `predict_file` must be specified.")
        run_common.require_file("predict_file", FLAGS.predict_file)

    if FLAGS.max_seq_length > bert_config.max_position_embeddings:
        raise InputError(
            "Cannot use sequence length %d because the BERT model "
            "was only trained up to sequence length %d" %
            (FLAGS.max_seq_length, bert_config.max_position_embeddings))

    if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
        raise InputError(
            "The max_seq_length (%d) must be greater than max_query_length "
            "(%d) + 3" % (FLAGS.max_seq_length, FLAGS.max_query_length))

    for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
        if getattr(FLAGS, name) < 1:
            raise InputError("--%s must be at least 1, not %d" % (name, getattr(FLAGS, name)))

    if FLAGS.tune_null_threshold and not FLAGS.version_2_with_negative:
        raise InputError("--tune_null_threshold needs --version_2_with_negative")


def evaluate_only():
    """--evaluate_only: scores the files in --output_dir against --predict_file."""
    run_common.require_flags("predict_file", "output_dir")
    if FLAGS.tune_null_threshold and not FLAGS.version_2_with_negative:
        raise InputError("--tune_null_threshold needs --version_2_with_negative")
    dataset = load_squad_json(FLAGS.predict_file, "predict_file")
    where = "--predict_file %s" % FLAGS.predict_file
    if not dataset_has_answers(dataset, FLAGS.version_2_with_negative):
        raise InputError("%s has no answers to evaluate against" % where)
    return run_evaluation(dataset, FLAGS.output_dir, where)


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)

    if FLAGS.evaluate_only:
        evaluate_only()
        return

    run_common.require_flags("vocab_file", "bert_config_file", "output_dir")
    tokenizer = run_common.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case,
                                          FLAGS.init_checkpoint)
    run_common.require_checkpoint("init_checkpoint", FLAGS.init_checkpoint)
    bert_config = run_common.load_bert_config(
        FLAGS.bert_config_file, vocab=tokenizer.vocab, vocab_file=FLAGS.vocab_file)

    validate_flags_or_throw(bert_config)

    tf.io.gfile.makedirs(FLAGS.output_dir)

    run_config = run_common.make_run_config(
        FLAGS.output_dir, FLAGS.save_checkpoints_steps, FLAGS.iterations_per_loop,
        FLAGS.use_tpu, FLAGS.tpu_name, FLAGS.tpu_zone, FLAGS.gcp_project, FLAGS.master,
        FLAGS.num_tpu_cores)

    train_examples = None
    num_train_steps = None
    num_warmup_steps = None
    if FLAGS.do_train:
        train_examples = read_squad_examples(input_file=FLAGS.train_file, is_training=True)
        if not train_examples:
            raise InputError("--train_file %s has no usable training questions"
                             % FLAGS.train_file)
        num_train_steps = run_common.num_train_steps(
            len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs)
        num_warmup_steps = int(num_train_steps * FLAGS.warmup_proportion)

        # Pre-shuffle the input to avoid having to make a very large shuffle
        # buffer in in the `input_fn`.
        rng = random.Random(12345)
        rng.shuffle(train_examples)

    model_fn = model_fn_builder(
        bert_config=bert_config,
        init_checkpoint=FLAGS.init_checkpoint,
        learning_rate=FLAGS.learning_rate,
        num_train_steps=num_train_steps,
        num_warmup_steps=num_warmup_steps,
        use_tpu=FLAGS.use_tpu,
        use_one_hot_embeddings=FLAGS.use_tpu)

    # If TPU is not available, this will fall back to normal Estimator on CPU
    # or GPU.
    estimator = run_common.make_estimator(
        model_fn, run_config, FLAGS.use_tpu,
        train_batch_size=FLAGS.train_batch_size,
        predict_batch_size=FLAGS.predict_batch_size)

    if FLAGS.do_train:
        # We write to a temporary file to avoid storing very large constant
        # tensors in memory.
        train_writer = FeatureWriter(
            filename=os.path.join(FLAGS.output_dir, "train.tf_record"), is_training=True)
        _write_features(train_writer, train_examples, tokenizer, is_training=True)

        tf.logging.info("***** Running training *****")
        tf.logging.info("  Num orig examples = %d", len(train_examples))
        tf.logging.info("  Num split examples = %d", train_writer.num_features)
        tf.logging.info("  Batch size = %d", FLAGS.train_batch_size)
        tf.logging.info("  Num steps = %d", num_train_steps)
        del train_examples

        train_input_fn = input_fn_builder(
            input_file=train_writer.filename,
            seq_length=FLAGS.max_seq_length,
            is_training=True,
            drop_remainder=True)
        estimator.train(input_fn=train_input_fn, max_steps=num_train_steps)

    if FLAGS.do_predict:
        eval_examples = read_squad_examples(input_file=FLAGS.predict_file, is_training=False)

        eval_writer = FeatureWriter(
            filename=os.path.join(FLAGS.output_dir, "eval.tf_record"), is_training=False)
        # Only what write_predictions needs stays in memory; the model inputs
        # are streamed to eval.tf_record.
        eval_features = []

        def keep_feature(feature):
            eval_features.append(PredictionFeature(
                feature.unique_id, feature.example_index, feature.doc_span_index,
                feature.tokens, feature.token_to_orig_map, feature.token_is_max_context))

        _write_features(eval_writer, eval_examples, tokenizer, is_training=False,
                        keep=keep_feature)

        tf.logging.info("***** Running predictions *****")
        tf.logging.info("  Num orig examples = %d", len(eval_examples))
        tf.logging.info("  Num split examples = %d", len(eval_features))
        tf.logging.info("  Batch size = %d", FLAGS.predict_batch_size)

        predict_input_fn = input_fn_builder(
            input_file=eval_writer.filename,
            seq_length=FLAGS.max_seq_length,
            is_training=False,
            drop_remainder=False)

        # If running eval on the TPU, you will need to specify the number of
        # steps.
        all_results = []
        for result in estimator.predict(predict_input_fn, yield_single_examples=True):
            if len(all_results) % 1000 == 0:
                tf.logging.info("Processing example: %d of %d" % (
                    len(all_results), len(eval_features)))
            # float32 arrays: a quarter of the memory of lists of floats, the
            # same values once converted.
            all_results.append(
                RawResult(
                    unique_id=int(result["unique_ids"]),
                    start_logits=np.array(result["start_logits"], dtype=np.float32).ravel(),
                    end_logits=np.array(result["end_logits"], dtype=np.float32).ravel()))

        output_prediction_file = os.path.join(FLAGS.output_dir, "predictions.json")
        output_nbest_file = os.path.join(FLAGS.output_dir, "nbest_predictions.json")
        output_null_log_odds_file = os.path.join(FLAGS.output_dir, "null_odds.json")

        all_predictions, all_nbest_json, null_odds = write_predictions(
            eval_examples, eval_features, all_results,
            FLAGS.n_best_size, FLAGS.max_answer_length,
            FLAGS.do_lower_case, output_prediction_file,
            output_nbest_file, output_null_log_odds_file)

        dataset = load_squad_json(FLAGS.predict_file, "predict_file")
        if dataset_has_answers(dataset, FLAGS.version_2_with_negative):
            run_evaluation(dataset, FLAGS.output_dir, "--predict_file %s" % FLAGS.predict_file,
                           all_predictions, all_nbest_json,
                           null_odds if FLAGS.version_2_with_negative else None)
        else:
            tf.logging.info("--predict_file has no answers: not evaluating.")
            if FLAGS.tune_null_threshold:
                tf.logging.warning("--tune_null_threshold needs answers in --predict_file: "
                                   "no threshold tuned.")


if __name__ == "__main__":
    run_common.run_script(main)
