"""BERT fine-tuning for named-entity recognition (token classification).

The method of the BERT paper's CoNLL-2003 experiment:

* each word is cut into WordPieces; the first piece of a word is classified
  into the word's tag, the word's other pieces are neither trained nor read;
* documents are read whole, in windows of ``--max_seq_length`` pieces that
  start ``--doc_stride`` pieces apart, and each word takes its prediction
  from the window in which it has the most context on both sides (as
  run_squad.py does for answers);
* one softmax layer over the tags sits on the final hidden states; no CRF.

Data: CoNLL-2003 files (``token POS chunk NER``, blank lines between
sentences, ``-DOCSTART-`` lines between documents) or two-column ``token
tag`` files such as the Chinese NER sets; tags in IOB1 (the original CoNLL
files), IOB2 (BIO) or BIOES. The scheme is detected from the data (or set
with ``--tag_scheme``); IOB1 data are trained as IOB2 and written back in
IOB1.

Outputs in ``--output_dir``: ``eval_results.txt`` (entity precision, recall
and F1 as the ``conlleval`` script counts them, overall and per type, and
token accuracy), ``eval_predictions.txt`` and ``test_predictions.txt``
(``token gold predicted`` per line, readable by conlleval),
``text_predictions.txt`` (``token tag`` for a plain-text file),
``ner_labels.json`` (the tag set) and, with ``--export_dir``, a SavedModel.
See docs/ner.md.
"""

import collections
import dataclasses
import functools
import json
import os
import re
from typing import Optional

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

from scriptkit import attributions
from scriptkit import checkpoints
from scriptkit import file_io
from scriptkit import evaluation
from scriptkit import fine_tuning
from scriptkit import task_model
from scriptkit import run_record
from scriptkit import input_packing
from scriptkit import input_pipeline
from scriptkit import ner_tags
import modeling
from scriptkit import output_lock
from scriptkit import runtime
from scriptkit import script_runner
from scriptkit import serving
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
import tokenization
from scriptkit import training
from scriptkit import training_progress
from scriptkit.errors import InputError

# ---------------------------------------------------------------------------
# Settings and flags.

@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.FineTuning):
    """This script's flags, with its defaults (read in main by
    `settings_lib.from_flags`)."""

    labels: Optional[str] = None
    doc_stride: int = 64
    predict_text_file: Optional[str] = None
    tag_scheme: str = "auto"
    document_context: bool = True
    sentences_per_document: int = 1
    explain_steps: int = attributions.DEFAULT_STEPS


shared_flags.define_settings_flags(Settings, helps={
    "data_dir": "Folder with the data files, found by their usual names (train.txt or "
                "eng.train; valid.txt, dev.txt or eng.testa; test.txt or eng.testb).",
    "labels": "Comma-separated entity types (PER,LOC,ORG,MISC) or tags "
              "(O,B-PER,I-PER,...): the model's label set. Default: the types in the "
              "training data (or the ner_labels.json of an earlier training run in "
              "--output_dir or next to --init_checkpoint).",
    "doc_stride": "Documents are read in windows of max_seq_length - 2 word pieces; "
                  "each window starts this many pieces after the previous one.",
})

flags.DEFINE_string(
    "predict_text_file", None,
    "With --do_predict: a plain-text file to tag, one sentence per line (blank "
    "lines separate documents); written to text_predictions.txt as 'token tag' "
    "lines. Words are split off at spaces and punctuation, and each CJK "
    "character is a word.")

flags.DEFINE_enum(
    "tag_scheme", "auto", ["auto", "iob1", "iob2", "bio", "bioes"],
    "Tagging scheme of the data: iob1 (the original CoNLL-2003 files: B- only "
    "between two adjacent entities of one type), iob2 or bio (every entity "
    "starts with B-), bioes (also E- ends and S- single-word entities). auto: "
    "detected from the data.")

flags.DEFINE_bool(
    "document_context", True,
    "Read whole documents in windows (the paper's 'maximal document context'). "
    "False: each sentence alone.")

flags.DEFINE_integer(
    "sentences_per_document", 1,
    "For files without document markers (-DOCSTART- lines, or blank lines in a "
    "plain-text file): group this many consecutive sentences into one document.")

# ---------------------------------------------------------------------------
# Reading data.

# Usual file names in --data_dir, in order of preference.
TRAIN_NAMES = ("train.txt", "eng.train")
DEV_NAMES = ("valid.txt", "dev.txt", "eng.testa")
TEST_NAMES = ("test.txt", "eng.testb")

DOCSTART = "-DOCSTART-"

# Columns are separated by ASCII spaces or tabs only: other Unicode spaces
# (such as U+3000 in Chinese sets) can be tokens themselves.
_COLUMN_SEPARATOR = re.compile(r"[ \t]+")

# words: list of str; tags: list of str as in the file (None when the file
# has no tags); lines: the line number of each word.
Sentence = collections.namedtuple("Sentence", ["words", "tags", "lines"])

# path; documents: list of lists of Sentence; has_docstart: the file marks
# documents (-DOCSTART- lines); tagged: its lines carry tags.
NerFile = collections.namedtuple("NerFile", ["path", "documents", "has_docstart", "tagged"])


def _group(sentences, size):
    """Consecutive runs of `size` sentences (at least 1)."""
    size = max(1, size)
    return [sentences[i:i + size] for i in range(0, len(sentences), size)]


def read_conll_file(path, sentences_per_document=1, flag_name="data_dir"):
    """Reads a CoNLL-style file: one word per line with its columns.

    Every line has the same number of columns (separated by spaces or tabs):
    the word first and, with two or more columns, the tag last (CoNLL-2003:
    ``token POS chunk NER``; Chinese sets: ``character tag``). A one-column
    file is untagged. Blank lines end sentences; ``-DOCSTART-`` lines start
    documents. Without them, documents are runs of `sentences_per_document`
    sentences.

    Args:
      path: the file.
      sentences_per_document: grouping for files without -DOCSTART- lines.
      flag_name: the flag that named the file (for a missing file's error).

    Returns:
      NerFile.

    Raises:
      InputError: missing or empty file, or a line with the wrong number of
        columns (naming the file and line).
    """
    text = file_io.read_text(path, flag_name)
    documents = []  # Lists of sentences.
    current_document = []
    words, tags, lines = [], [], []
    num_columns = None
    first_line = None
    has_docstart = False

    def end_sentence():
        if words:
            current_document.append(Sentence(list(words), list(tags) if tags else None,
                                              list(lines)))
            del words[:], tags[:], lines[:]

    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip(" \t\r")
        if not stripped:
            end_sentence()
            continue
        fields = _COLUMN_SEPARATOR.split(stripped)
        if fields[0] == DOCSTART:
            end_sentence()
            if current_document:
                documents.append(current_document)
            current_document = []
            has_docstart = True
            continue
        if num_columns is None:
            num_columns, first_line = len(fields), number
        elif len(fields) != num_columns:
            raise InputError(
                "%s, line %d: expected %d columns (as on line %d), found %d: %r"
                % (path, number, num_columns, first_line, len(fields), stripped))
        words.append(fields[0])
        if num_columns > 1:
            tags.append(fields[-1])
        lines.append(number)
    end_sentence()
    if current_document:
        documents.append(current_document)
    if not documents:
        raise InputError("%s: no sentences (an empty file?)" % path)
    if not has_docstart:
        documents = _group([s for d in documents for s in d], sentences_per_document)
    return NerFile(path, documents, has_docstart, num_columns > 1)


def read_text_file(path, basic_tokenizer, sentences_per_document=1):
    """Reads plain text to tag: one sentence per line, blank lines between
    documents (without blank lines, runs of `sentences_per_document` lines
    are documents).

    Words are what `basic_tokenizer` (a BasicTokenizer without lower-casing)
    splits a line into: whitespace and punctuation separate words, and each
    CJK character is a word. A line that yields no word is skipped.

    Returns:
      NerFile (untagged).
    """
    text = file_io.read_text(path, "predict_text_file")
    blocks = [[]]
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            if blocks[-1]:
                blocks.append([])
            continue
        words = basic_tokenizer.tokenize(line)
        if words:
            blocks[-1].append(Sentence(words, None, [number] * len(words)))
    blocks = [b for b in blocks if b]
    if not blocks:
        raise InputError("%s: no text to tag (an empty file?)" % path)
    if len(blocks) == 1:
        blocks = _group(blocks[0], sentences_per_document)
    return NerFile(path, blocks, False, False)


def iter_sentences(ner_file):
    """The file's sentences in order."""
    for document in ner_file.documents:
        for sentence in document:
            yield sentence


# ---------------------------------------------------------------------------
# Checks of the data's tags.

def check_well_formed(ner_file):
    """Raises InputError naming the file and line of the first tag that is not
    O or B-, I-, E-, S- and a type."""
    if not ner_file.tagged:
        return
    for sentence in iter_sentences(ner_file):
        for tag, line in zip(sentence.tags, sentence.lines):
            if not ner_tags.is_valid_tag(tag):
                raise InputError("%s, line %d: malformed tag %r (expected O or B-, I-, E-, "
                                 "S- and a type, such as B-PER)" % (ner_file.path, line, tag))


def check_tags(ner_file, entity_types, scheme):
    """Checks every tag of a tagged file against the model's labels.

    Raises:
      InputError: naming the file and line of the first tag that is malformed,
        of an unknown type, or with a prefix the scheme does not have.
    """
    if not ner_file.tagged:
        return
    check_well_formed(ner_file)
    known = set(entity_types)
    prefixes = ner_tags.PREFIXES[scheme]
    for sentence in iter_sentences(ner_file):
        for tag, line in zip(sentence.tags, sentence.lines):
            if tag == "O":
                continue
            prefix, entity_type = ner_tags.split_tag(tag)
            if entity_type not in known or prefix not in prefixes:
                raise InputError(
                    "%s, line %d: label %r is not one of the model's labels (%s tags of "
                    "the types %s)" % (ner_file.path, line, tag, scheme.upper(),
                                       ", ".join(entity_types)))


# ---------------------------------------------------------------------------
# Entity-level evaluation, as the conlleval script counts.


# ---------------------------------------------------------------------------
# Features: documents in windows of word pieces.

# One model input. input_ids, input_mask, segment_ids, label_ids, label_mask:
# lists of max_seq_length ints (label_mask 1 where label_ids is trained or
# scored); word_positions: (position in the window, word index) for each word
# whose prediction comes from this window.
Window = collections.namedtuple(
    "Window", ["input_ids", "input_mask", "segment_ids", "label_ids", "label_mask",
               "word_positions"])


class WordPieceCache(dict):
    """word -> tuple of WordPiece ids, remembered (words repeat a lot).

    A word that yields no piece at all (only control or format characters,
    say) gets [UNK], so that every word has a first piece to classify.
    """

    def __init__(self, tokenizer):
        super().__init__()
        self._tokenizer = tokenizer
        self._unk = tokenizer.convert_tokens_to_ids(["[UNK]"])
        # The ids that frame every window.
        self.special_ids = tuple(tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"]))

    def __missing__(self, word):
        ids = tuple(self._tokenizer.convert_tokens_to_ids(self._tokenizer.tokenize(word))
                    or self._unk)
        if len(self) < 500000:  # Bounded memory on huge vocabularies of words.
            self[word] = ids
        return ids


# The windows over a document's pieces: (start, length) each.
window_spans = input_packing.window_spans


def max_context_spans(spans, positions):
    """For each piece position, the index of the span where it has the most
    context: the largest min(pieces to its left, pieces to its right), plus
    0.01 per piece of span length to prefer longer spans, then the first.

    Args:
      spans: from `window_spans`.
      positions: sorted piece positions to place.

    Returns:
      list of span indices, aligned with `positions`.
    """
    best = [-1] * len(positions)
    best_score = [-1.0] * len(positions)
    first = 0
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        while first < len(positions) and positions[first] < start:
            first += 1
        i = first
        while i < len(positions) and positions[i] <= end:
            p = positions[i]
            score = min(p - start, end - p) + 0.01 * length
            if score > best_score[i]:
                best_score[i], best[i] = score, index
            i += 1
    return best


def convert_document(words, label_ids, pieces, max_seq_length, doc_stride,
                     is_training):
    """One document's words -> its windows.

    Args:
      words: the document's words (all its sentences, in order).
      label_ids: one label id per word, or None (nothing to score).
      pieces: WordPieceCache (word -> piece ids) built on the tokenizer.
      max_seq_length: length of each window, [CLS] and [SEP] included.
      doc_stride: pieces between the starts of consecutive windows.
      is_training: label every word's first piece in every window (training
        sees each word in each of its contexts); otherwise only where the
        word has its most context, so each word is scored once.

    Returns:
      list of Window; every word appears in exactly one window's
      word_positions.
    """
    cls_id, sep_id = pieces.special_ids
    ids = []
    starts = []  # Position of each word's first piece.
    for word in words:
        starts.append(len(ids))
        ids.extend(pieces[word])
    spans = window_spans(len(ids), max_seq_length - 2, doc_stride)
    best = max_context_spans(spans, starts)
    windows = []
    word = 0
    for index, (start, length) in enumerate(spans):
        while word < len(starts) and starts[word] < start:
            word += 1
        input_ids = [cls_id] + ids[start:start + length] + [sep_id]
        padding = max_seq_length - len(input_ids)
        labels = [0] * max_seq_length
        mask = [0] * max_seq_length
        positions = []
        w = word
        while w < len(starts) and starts[w] < start + length:
            position = starts[w] - start + 1
            if best[w] == index:
                positions.append((position, w))
            if label_ids is not None and (is_training or best[w] == index):
                labels[position] = label_ids[w]
                mask[position] = 1
            w += 1
        windows.append(Window(input_ids + [0] * padding,
                              [1] * len(input_ids) + [0] * padding,
                              [0] * max_seq_length, labels, mask, positions))
    return windows


def document_inputs(ner_file, document_context, label_map=None, scheme="iob2"):
    """A file's documents as (words, label ids or None) pairs.

    Args:
      ner_file: NerFile.
      document_context: False: each sentence is a document of its own.
      label_map: model tag -> id; None (or an untagged file): no labels.
      scheme: the data's scheme (tags are converted to the model's).

    Returns:
      list of (words, label_ids); words in file order, so that the word
      indices of all documents, concatenated, follow the file's words.
    """
    units = ner_file.documents if document_context else [
        [s] for s in iter_sentences(ner_file)]
    out = []
    for sentences in units:
        words = [w for s in sentences for w in s.words]
        labels = None
        if label_map is not None and ner_file.tagged:
            labels = [label_map[t] for s in sentences
                      for t in ner_tags.to_model_tags(s.tags, scheme)]
        out.append((words, labels))
    return out


def convert_file(ner_file, pieces, max_seq_length, doc_stride, is_training,
                 document_context=True, label_map=None, scheme="iob2"):
    """All windows of a file; word indices count the file's words in order.

    Returns:
      (list of Window, number of words).
    """
    windows = []
    offset = 0
    for words, labels in document_inputs(ner_file, document_context, label_map, scheme):
        for window in convert_document(words, labels, pieces, max_seq_length, doc_stride,
                                       is_training):
            windows.append(window._replace(
                word_positions=[(p, offset + w) for p, w in window.word_positions]))
        offset += len(words)
    return windows, offset


def padding_window(max_seq_length):
    """An all-zero window (fills the last batch on TPU; scores nothing)."""
    zeros = [0] * max_seq_length
    return Window(zeros, zeros, zeros, zeros, zeros, [])


FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "label_ids", "label_mask")


def write_windows(windows, output_file):
    """Writes windows as tf.train.Examples (the FEATURE_NAMES, int64
    [max_seq_length] each) to a TFRecord file, atomically."""
    with file_io.atomic_path(output_file) as tmp_file:
        with tf.io.TFRecordWriter(tmp_file) as writer:
            for window in windows:
                feature = {name: input_pipeline.int64_feature(getattr(window, name))
                           for name in FEATURE_NAMES}
                writer.write(tf.train.Example(
                    features=tf.train.Features(feature=feature)).SerializeToString())


def file_based_input_fn_builder(input_file, seq_length, is_training, drop_remainder,
                                length_buckets=None):
    """An input_fn over a TFRecord file of windows (`length_buckets`: dynamic
    padding, input_pipeline.tfrecord_input_fn).

    Returns:
      input_fn(params) -> tf.data.Dataset of dicts of int32 [batch,
      seq_length] tensors (FEATURE_NAMES); training repeats and shuffles.
    """
    name_to_features = {name: tf.io.FixedLenFeature([seq_length], tf.int64)
                        for name in FEATURE_NAMES}

    # Windows of a document are adjacent in the file: a larger buffer mixes
    # them.
    return input_pipeline.tfrecord_input_fn(input_file, name_to_features, is_training,
                                            drop_remainder, shuffle_buffer=1000,
                                            length_buckets=length_buckets,
                                            sequence_features=FEATURE_NAMES)


def word_predictions(windows, probabilities, num_words):
    """Each word's label probabilities, from the window where it has the most
    context.

    Args:
      windows: list of Window (as from `convert_file` / `convert_document`).
      probabilities: per window, [max_seq_length, num_labels] (the model's
        output for that window), aligned with `windows`.
      num_words: number of words the windows cover.

    Returns:
      float array [num_words, num_labels].
    """
    out = None
    seen = np.zeros(num_words, dtype=bool)
    for window, probs in zip(windows, probabilities):
        probs = np.asarray(probs)
        if out is None:
            out = np.zeros((num_words, probs.shape[-1]), dtype=np.float32)
        for position, word in window.word_positions:
            out[word] = probs[position]
            seen[word] = True
    if not seen.all():
        raise RuntimeError("%d of %d words got no prediction"
                           % (num_words - int(seen.sum()), num_words))
    return out


# ---------------------------------------------------------------------------
# Model.

def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 num_labels, use_one_hot_embeddings, options=None):
    """A softmax over the labels on each position's final hidden state.

    Args:
      input_ids, input_mask, segment_ids: int32 [batch, seq_length].
      num_labels: size of the label set.
      options: training.TrainingOptions (None: the defaults).

    Returns:
      (logits, probabilities): float32 [batch, seq_length, num_labels], from
      `ner/output_weights` [num_labels, hidden] and `ner/output_bias`.
    """
    model = training.bert_model(bert_config, is_training, input_ids, input_mask,
                                segment_ids, use_one_hot_embeddings, options)
    sequence = model.get_sequence_output()
    batch_size, seq_length, hidden_size = modeling.get_shape_list(sequence, expected_rank=3)

    output_weights = tf.get_variable(
        "ner/output_weights", [num_labels, hidden_size],
        initializer=tf.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.get_variable("ner/output_bias", [num_labels],
                                  initializer=tf.zeros_initializer())
    if is_training and bert_config.hidden_dropout_prob > 0:
        # The model's own dropout rate (0.1 in Google's models).
        sequence = tf.nn.dropout(sequence, rate=bert_config.hidden_dropout_prob)
    logits = tf.matmul(tf.reshape(sequence, [-1, hidden_size]), output_weights,
                       transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    logits = tf.reshape(logits, [batch_size, seq_length, num_labels])
    return logits, tf.nn.softmax(logits, axis=-1)


def masked_loss(logits, label_ids, label_mask):
    """Mean cross-entropy over the positions where label_mask is 1.

    Args:
      logits: float32 [batch, seq_length, num_labels].
      label_ids, label_mask: int32 [batch, seq_length].

    Returns:
      float32 scalar (0 if the mask is empty).
    """
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(label_ids, depth=modeling.get_shape_list(logits)[-1],
                         dtype=tf.float32)
    per_position = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    mask = tf.cast(label_mask, tf.float32)
    return tf.reduce_sum(per_position * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu, use_one_hot_embeddings,
                     options=None):
    """Returns the `model_fn` for the runner (`options`: as for
    `create_model`).

    TRAIN reads input_ids, input_mask, segment_ids, label_ids and label_mask;
    PREDICT reads the first three and returns {"probabilities": [batch,
    seq_length, num_labels]}, which is also the serving signature.
    """

    def build_head(features, mode):
        is_training = mode == runtime.ModeKeys.TRAIN
        logits, probabilities = create_model(
            bert_config, is_training, features["input_ids"], features["input_mask"],
            features["segment_ids"], num_labels, use_one_hot_embeddings, options)
        if is_training:
            return task_model.Head(
                loss=masked_loss(logits, features["label_ids"], features["label_mask"]))
        # No EVAL: the tags are scored by the words they mark (`score_file`).
        return task_model.Head(predictions={"probabilities": probabilities},
                                export_outputs={"probabilities": probabilities})

    return task_model.task_model_fn(
        build_head, init_checkpoint, learning_rate, num_train_steps, num_warmup_steps,
        use_tpu, options, modes=(runtime.ModeKeys.TRAIN, runtime.ModeKeys.PREDICT))


# ---------------------------------------------------------------------------
# Steps of main.

LABELS_FILE = "ner_labels.json"


def write_labels(path, scheme, entity_types):
    """Saves the label set (and the data's scheme) as JSON."""
    with file_io.atomic_output(path) as writer:
        writer.write(json.dumps({"scheme": scheme, "entity_types": list(entity_types),
                                 "labels": ner_tags.label_list_for(entity_types, scheme)},
                                indent=2) + "\n")
    file_io.report_output(path, "the label set, in the model's output order")


def read_labels(path):
    """(scheme, entity_types) from a file of `write_labels`, or None if absent."""
    if not path or not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            saved = json.load(f)
            scheme, types = saved["scheme"], list(saved["entity_types"])
        except (ValueError, KeyError, TypeError):
            raise InputError("%s: not a label file of run_ner.py" % path)
    if scheme not in ner_tags.SCHEMES:
        raise InputError("%s: unknown scheme %r" % (path, scheme))
    return scheme, types


def predict_windows(estimator, windows, record_file, max_seq_length, batch_size, fixed,
                    phase="Predicting", init_checkpoint=None, length_buckets=None):
    """Runs the model on windows, through the TFRecord file `record_file`,
    with the latest checkpoint in the runner's model directory (else the
    model_fn's `init_checkpoint`).

    Args:
      estimator: the runner (training.make_estimator).
      windows: list of Window of `max_seq_length`.
      batch_size: the runner's predict batch size.
      fixed: every batch must be full (TPU): padding windows are added, and
        their outputs dropped.
      phase: "Evaluating" or "Predicting", for the log.
      length_buckets: dynamic padding (input_pipeline.tfrecord_input_fn).

    Returns:
      list of [max_seq_length, num_labels] arrays (with length_buckets, as
      long as the window's batch), aligned with `windows`.
    """
    num_actual = len(windows)
    if fixed:
        windows = windows + [padding_window(max_seq_length)] * input_pipeline.padding_count(
            num_actual, batch_size)
    write_windows(windows, record_file)
    title = "Running evaluation" if phase == "Evaluating" else "Running prediction"
    training_progress.log_phase(title, [
        ("Num windows", "%d (%d actual)" % (len(windows), num_actual)),
        ("Batch size", batch_size)])
    input_fn = file_based_input_fn_builder(record_file, max_seq_length, is_training=False,
                                           drop_remainder=fixed,
                                           length_buckets=length_buckets)
    predictions = fine_tuning.predict(estimator, input_fn, len(windows), batch_size,
                                      num_actual, init_checkpoint=init_checkpoint,
                                      phase=phase, what="windows")
    return [prediction["probabilities"] for prediction in predictions]


def tag_file(estimator, ner_file, pieces, label_list, scheme, max_seq_length, doc_stride,
             document_context, batch_size, record_file, fixed=False, phase="Predicting",
             init_checkpoint=None, length_buckets=None):
    """Predicts a file's tags (see `convert_file` and `predict_windows` for
    the arguments).

    Returns:
      (probabilities [num_words, num_labels] in the file's word order,
      predicted tags per sentence in the data's scheme).
    """
    windows, num_words = convert_file(ner_file, pieces, max_seq_length, doc_stride,
                                      is_training=False, document_context=document_context)
    outputs = predict_windows(estimator, windows, record_file, max_seq_length, batch_size,
                              fixed, phase, init_checkpoint, length_buckets)
    probabilities = word_predictions(windows, outputs, num_words)
    predicted_ids = np.argmax(probabilities, axis=-1)
    sentences = []
    offset = 0
    for sentence in iter_sentences(ner_file):
        tags = [label_list[i] for i in predicted_ids[offset:offset + len(sentence.words)]]
        sentences.append(ner_tags.from_model_tags(tags, scheme))
        offset += len(sentence.words)
    return probabilities, sentences


def write_conll_predictions(path, ner_file, predicted, with_gold=True):
    """Writes 'token gold predicted' lines (or 'token predicted' without gold;
    gold 'O' for an untagged file), a blank line after each sentence and
    '-DOCSTART-' lines between documents when the input had them."""
    with file_io.atomic_output(path) as writer:
        index = 0
        for document in ner_file.documents:
            if ner_file.has_docstart:
                writer.write(DOCSTART + (" O O\n\n" if with_gold else " O\n\n"))
            for sentence in document:
                gold = sentence.tags or ["O"] * len(sentence.words)
                for word, gold_tag, tag in zip(sentence.words, gold, predicted[index]):
                    if with_gold:
                        writer.write("%s %s %s\n" % (word, gold_tag, tag))
                    else:
                        writer.write("%s %s\n" % (word, tag))
                writer.write("\n")
                index += 1
    file_io.report_output(path, "%d sentences, %s tags" % (
        index, "gold and predicted" if with_gold else "predicted"))


def score_file(ner_file, probabilities, predicted, label_map, scheme):
    """Metrics of a tagged file's predictions, named as in eval_results.txt:
    eval_precision, eval_recall, eval_f1, eval_accuracy (per word),
    eval_loss (mean cross-entropy per word) and the per-type scores."""
    gold = [s.tags for s in iter_sentences(ner_file)]
    result = {"eval_" + k: v for k, v in ner_tags.evaluate_tags(gold, predicted).items()}
    gold_ids = [label_map[t] for tags in gold for t in ner_tags.to_model_tags(tags, scheme)]
    gold_probabilities = probabilities[np.arange(len(gold_ids)), gold_ids]
    result["eval_loss"] = float(-np.mean(np.log(np.maximum(gold_probabilities, 1e-12))))
    return result


def export_model(source, label_list, scheme, labels_path, doc_stride=64,
                 explain_steps=attributions.DEFAULT_STEPS):
    """Exports a SavedModel for serving of the `serving.ExportSource`
    `source` (see serving.py) and returns its directory (timestamped, in
    its export_dir). `label_list`: the model's tags; `scheme`: the data's.

    serving_default takes tf.string text [batch], one document each: split
    into words as --predict_text_file's lines are, cut into windows as
    documents are (the source's max_seq_length, doc_stride), each word tagged from the
    window where it has the most context. It returns, per text, padded to
    the batch's most words: words [batch, words] and tags (in the data's
    scheme; "" past a text's words), start_offsets and end_offsets (int32:
    text[start:end] in Unicode characters spans the word; -1 past the
    words), probabilities [batch, words, num_labels] (the model's labels)
    and num_words [batch].

    serving_ids takes int32 input_ids, input_mask and segment_ids [batch,
    seq_length] and returns probabilities [batch, seq_length, num_labels],
    as exports did before. `labels_path` (ner_labels.json, the label
    names) is copied to assets.extra/. With `explain_steps` (0: none), an
    explain signature says which words made the tags of an entity
    (`_explain_signature`).
    """
    model_fn = model_fn_builder(bert_config=source.bert_config, num_labels=len(label_list),
                                **task_model.export_builder_args(source.options))
    max_seq_length = source.max_seq_length

    def text_signature(tokenizer):
        text = serving.string_input("text")
        words, starts, ends = tokenizer.split_words(text)
        windows = text_windows(tokenizer.word_pieces(words), max_seq_length, doc_stride)
        features = serving.pack(windows.pieces, None, max_seq_length, tokenizer.cls_id,
                                tokenizer.sep_id)

        def outputs(predictions):
            probabilities = tf.gather_nd(predictions["probabilities"], windows.word_positions)
            tag_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
            tag_ids = _data_scheme_ids(words.with_flat_values(tag_ids), label_list, scheme)
            tags = tf.gather(tf.constant(label_list), tag_ids)
            return {"words": words.to_tensor(""), "tags": tags.to_tensor(""),
                    "start_offsets": starts.to_tensor(-1), "end_offsets": ends.to_tensor(-1),
                    "probabilities": words.with_flat_values(probabilities).to_tensor(0.0),
                    "num_words": tf.cast(words.row_lengths(), tf.int32)}

        return {"text": text}, features, outputs

    settings = {"max_seq_length": max_seq_length, "doc_stride": doc_stride}
    explain = None
    if explain_steps:
        settings["explain_steps"] = explain_steps
        explain = functools.partial(_explain_signature, max_seq_length=max_seq_length,
                                    doc_stride=doc_stride, label_list=label_list,
                                    steps=explain_steps)
    return serving.export(model_fn, source, text_signature, settings=settings,
                          assets_extra=[labels_path], explain_signature=explain,
                          onnx_head=("tagger", None))


def _explain_signature(tokenizer, max_seq_length, doc_stride, label_list, steps):
    """The export's explain signature (`serving.export`'s explain_signature):
    text, and first_word and last_word (int32 [batch]: the entity's words,
    as indices into serving_default's words) in; per text, its words with
    their attributions (attributions.py, integrated gradients over `steps`
    points) to the entity's probability: the mean, over the entity's
    words, of the probability of the tag the model gives each, in the
    window where its first word has the most context (a word of the
    entity in another window is left out; words outside the window have 0).
    Also the first word's tag (of the model's labels), and the output at
    the input and at the baseline ("output", "baseline_output")."""
    text = serving.string_input("text")
    first_word = tf.placeholder(tf.int32, [None], name="first_word")
    last_word = tf.placeholder(tf.int32, [None], name="last_word")
    words, starts, ends = tokenizer.split_words(text)
    pieces = tokenizer.word_pieces(words)
    windows = text_windows(pieces, max_seq_length, doc_stride)
    features = serving.pack(windows.pieces, None, max_seq_length, tokenizer.cls_id,
                            tokenizer.sep_id)

    def outputs_fn(features, model):
        num_words = tf.cast(words.row_lengths(), tf.int32)
        check = tf.debugging.Assert(
            tf.reduce_all((first_word >= 0) & (first_word <= last_word)
                          & (last_word < num_words)),
            ["inputs first_word ", first_word, " and last_word ", last_word,
             ": the first and last word of an entity, 0 <= first_word <= last_word < the "
             "number of words of the text, ", num_words], name="check_entity_words")
        with tf.control_dependencies([check]):
            offset = tf.cast(words.row_starts(), tf.int32)
        probabilities = serving.run_in_chunks(model, features)["probabilities"]
        tag_ids = tf.argmax(tf.gather_nd(probabilities, windows.word_positions), axis=-1,
                            output_type=tf.int32)
        # The entity's words [batch, longest entity], their places, tags
        # and whether they are in the first word's window.
        count = last_word - first_word + 1
        index = tf.minimum(first_word[:, tf.newaxis] + tf.range(tf.reduce_max(count)),
                           last_word[:, tf.newaxis]) + offset[:, tf.newaxis]
        places = tf.gather(windows.word_positions, index)  # [batch, entity, 2]
        row = places[:, 0, 0]
        used = (tf.range(tf.shape(index)[1])[tf.newaxis, :] < count[:, tf.newaxis]) & tf.equal(
            places[:, :, 0], row[:, tf.newaxis])
        targets = tf.stack([tf.where(used, places[:, :, 1], -tf.ones_like(index)),
                            tf.gather(tag_ids, index)], axis=-1)
        chosen = {name: tf.gather(t, row) for name, t in features.items()}

        def explained_output(predictions, targets):
            used = targets[:, :, 0] >= 0
            # (Stacked again: the chunks' slices keep no static dimension.)
            picked = tf.gather_nd(predictions["probabilities"], tf.stack(
                [tf.maximum(targets[:, :, 0], 0), targets[:, :, 1]], axis=-1), batch_dims=1)
            return (tf.reduce_sum(tf.where(used, picked, tf.zeros_like(picked)), axis=1)
                    / tf.reduce_sum(tf.cast(used, tf.float32), axis=1))

        piece_attributions, output, baseline_output = attributions.integrated_gradients(
            model, chosen, (tokenizer.cls_id, tokenizer.sep_id), targets, explained_output,
            steps)
        outputs = attributions.padded_words([words, starts, ends, attributions.word_attributions(
            piece_attributions, pieces, tf.ones_like(row),
            tf.reduce_sum(chosen["input_mask"], axis=1) - 2, tf.gather(windows.starts, row))])
        outputs.update(tag=tf.gather(tf.constant(label_list), targets[:, 0, 1]), output=output,
                       baseline_output=baseline_output)
        return outputs

    return ({"text": text, "first_word": first_word, "last_word": last_word}, features,
            outputs_fn)


def _data_scheme_ids(tag_ids, label_list, scheme):
    """`ner_tags.from_model_tags` in the graph: the model's tag ids
    (RaggedTensor int32 [batch, (words)], one text a sentence) as ids of the
    data's scheme's tags (IOB1: B- only right after an entity of the same type)."""
    if scheme != "iob1":
        return tag_ids
    # converted[previous][current], where previous == len(label_list) is
    # the start of the text.
    converted = [[label_list.index(
        ner_tags.iob2_to_iob1(([previous] if previous else []) + [tag])[-1])
        for tag in label_list] for previous in label_list + [None]]
    flat = tag_ids.flat_values
    position = tf.range(tf.size(flat, out_type=tf.int64))
    previous = tf.where(tf.equal(position, tf.gather(tag_ids.row_starts(),
                                                      tag_ids.value_rowids())),
                        tf.fill(tf.shape(flat), len(label_list)),
                        tf.concat([tf.fill([1], len(label_list)), flat[:-1]], axis=0))
    return tag_ids.with_flat_values(tf.gather_nd(
        tf.constant(converted, tf.int32), tf.stack([previous, flat], axis=1)))


TextWindows = collections.namedtuple("TextWindows", ["pieces", "word_positions", "starts"])


def text_windows(pieces, max_seq_length, doc_stride):
    """The windows of a batch of documents, in the graph, as
    `convert_document` makes them (`window_spans`, `max_context_spans`).

    Args:
      pieces: RaggedTensor int32 [batch, (words), (pieces)]: each word's
        WordPiece ids (at least one per word).
      max_seq_length, doc_stride: as for `convert_document`.

    Returns:
      TextWindows: pieces, RaggedTensor int32 [windows, (pieces)], the
      windows of all documents in order (one empty window if there is no
      window at all, for the model to have a batch); word_positions, int32
      [total words, 2]: for each word of the batch (in order), the window
      and position ([CLS] = 0) where its first piece has the most context;
      starts, int32 [windows], each window's first piece in its document.
    """
    max_pieces = max_seq_length - 2
    step = min(max_pieces, doc_stride)
    document = pieces.merge_dims(1, 2)  # [batch, (pieces)]
    num_pieces = tf.cast(document.row_lengths(), tf.int32)
    document_start = tf.cast(document.row_starts(), tf.int32)
    # Each word's first piece: its position in the batch's pieces, then in
    # its document.
    word_lengths = tf.cast(pieces.values.row_lengths(), tf.int32)
    word_row = tf.cast(pieces.value_rowids(), tf.int32)
    word_start = tf.cumsum(word_lengths, exclusive=True) - tf.gather(document_start, word_row)

    num_windows = 1 + tf.maximum(0, -(-(num_pieces - max_pieces) // step))
    num_windows = tf.where(num_pieces > 0, num_windows, tf.zeros_like(num_windows))
    window_index = tf.ragged.range(num_windows)  # [batch, (windows)]
    window_row = tf.cast(window_index.value_rowids(), tf.int32)
    window_start = window_index.values * step
    window_length = tf.minimum(max_pieces, tf.gather(num_pieces, window_row) - window_start)
    first = tf.gather(document_start, window_row) + window_start
    # No window at all (only empty texts): one empty one.
    no_window = tf.cast(tf.equal(tf.size(window_start), 0), tf.int32)
    window_pieces = tf.RaggedTensor.from_row_lengths(
        tf.gather(document.values, tf.ragged.range(first, first + window_length).values),
        tf.concat([window_length, tf.zeros([no_window], tf.int32)], axis=0))

    # Each word's window, by arithmetic on its first piece's position p
    # (memory linear in the text, where comparing every word with every
    # window took words x windows). Every window but a document's last is
    # full (max_pieces long), and over the full windows that hold p, the
    # context min(p - start, end - p) rises, then falls with the window's
    # index: its first maximum is at c0 = floor((2p - max_pieces + 1) /
    # (2 step)), the window centred nearest p, or at c0 + 1 (c0 + 1 always
    # holds p if a full window does). Those two, kept to the full windows
    # that start at or before p, and the last window (which may be shorter)
    # are scored as `max_context_spans` scores them (in float64, as Python
    # computes it), and the first with the best score wins.
    num_windows_of_word = tf.gather(num_windows, word_row)
    last = num_windows_of_word - 1
    last_full = tf.maximum(0, tf.minimum(word_start // step, last - 1))
    centre = (2 * word_start - max_pieces + 1) // (2 * step)
    candidates = tf.stack([tf.clip_by_value(centre, 0, last_full),
                           tf.clip_by_value(centre + 1, 0, last_full), last], axis=1)
    start = candidates * step  # [words, 3]
    length = tf.minimum(max_pieces, tf.gather(num_pieces, word_row)[:, tf.newaxis] - start)
    position = word_start[:, tf.newaxis]
    end = start + length - 1
    covers = (start <= position) & (position <= end)
    score = (tf.cast(tf.minimum(position - start, end - position), tf.float64)
             + 0.01 * tf.cast(length, tf.float64))
    score = tf.where(covers, score, tf.fill(tf.shape(score), tf.constant(-1.0, tf.float64)))
    best_score = tf.reduce_max(score, axis=1, keepdims=True)
    best = tf.reduce_min(tf.where(covers & tf.equal(score, best_score), candidates,
                                  tf.fill(tf.shape(candidates), tf.int32.max)), axis=1)
    window = tf.gather(tf.cast(window_index.row_starts(), tf.int32), word_row) + best
    word_positions = tf.stack([window, word_start - best * step + 1], axis=1)
    starts = tf.concat([window_start, tf.zeros([no_window], tf.int32)], axis=0)
    return TextWindows(window_pieces, word_positions, starts)


def _choose_labels(train, others, labels_path_for_reading, tag_scheme, labels):
    """(scheme of the data, entity types) from --tag_scheme and --labels
    (`tag_scheme`, `labels`), the training data or a saved label file."""
    flag_scheme = {"auto": None, "bio": "iob2"}.get(tag_scheme, tag_scheme)
    saved = None if train else read_labels(labels_path_for_reading)
    tagged = [f for f in ([train] if train else []) + others if f is not None and f.tagged]
    if flag_scheme:
        scheme = flag_scheme
    elif saved:
        scheme = saved[0]
    elif tagged:
        scheme = ner_tags.detect_scheme(s.tags for s in iter_sentences(tagged[0]))
    else:
        scheme = "iob2"
    if labels:
        types = ner_tags.parse_labels_flag(labels)
    elif train is not None:
        types = ner_tags.entity_types_of(t for s in iter_sentences(train) for t in s.tags)
    elif saved:
        types = saved[1]
        if ner_tags.model_scheme(saved[0]) != ner_tags.model_scheme(scheme):
            raise InputError("--tag_scheme=%s, but the model was trained on %s tags (%s)"
                             % (tag_scheme, saved[0], labels_path_for_reading))
    else:
        raise InputError(
            "No label set: give --labels, or train first (--do_train writes %s to "
            "--output_dir)" % LABELS_FILE)
    if not types:
        raise InputError("%s: no entity tags at all (only O)" % train.path)
    return scheme, types


def _needs(settings):
    """The data file flags a run reads (`fine_tuning.prepare_run`):
    --predict_text_file stands for the test file."""
    data_files = [("do_train", "train_file"), ("do_eval", "dev_file")] + (
        [] if settings.predict_text_file else [("do_predict", "test_file")])
    return (), fine_tuning.data_file_flags(settings, *data_files)


def _check_flags(settings):
    """Raises InputError for --doc_stride below 1, or --predict_text_file
    without --do_predict."""
    if settings.doc_stride is None or settings.doc_stride < 1:
        raise InputError("--doc_stride must be at least 1, got %s" % settings.doc_stride)
    if settings.explain_steps < 0:
        raise InputError("--explain_steps must be >= 0, not %d" % settings.explain_steps)
    if settings.predict_text_file and not settings.do_predict:
        raise InputError("--predict_text_file needs --do_predict")


def _read_data(run):
    """Reads and checks every data file of the run, before any work.

    Returns:
      (train, dev, test, text): NerFiles, or None where not read.
    """
    settings = run.settings
    group = settings.sentences_per_document
    train = dev = test = text = None
    if settings.do_train:
        train = read_conll_file(run.data_file("train_file", TRAIN_NAMES, "--do_train"),
                                group, "train_file")
    if settings.do_eval:
        dev = read_conll_file(run.data_file("dev_file", DEV_NAMES, "--do_eval"), group,
                              "dev_file")
        if not dev.tagged:
            raise InputError("%s: --do_eval needs tags (a second column at least)" % dev.path)
    if settings.do_predict:
        test_path = run.data_file("test_file", TEST_NAMES,
                                  None if settings.predict_text_file else "--do_predict")
        if test_path:
            test = read_conll_file(test_path, group, "test_file")
        if settings.predict_text_file:
            text = read_text_file(settings.predict_text_file,
                                  tokenization.BasicTokenizer(do_lower_case=False), group)
    if train is not None and not train.tagged:
        raise InputError("%s: training data need tags (a second column at least)"
                         % train.path)
    for ner_file in (train, dev, test):
        if ner_file is not None:
            check_well_formed(ner_file)
    return train, dev, test, text


def _labels(run, train, dev, test):
    """(scheme, entity types) of the run (see `_choose_labels`), checked
    against the tags of each file, and logged."""
    settings = run.settings
    saved_path = run_record.find_file(LABELS_FILE, run.output_dir, run.init_checkpoint)
    choose = functools.partial(_choose_labels, tag_scheme=settings.tag_scheme,
                               labels=settings.labels)
    if train is None and not settings.labels and saved_path is None:
        # A later run on a trained model: its training data give the labels.
        train_path = run.data_file("train_file", TRAIN_NAMES, None)
        label_source = (read_conll_file(train_path, settings.sentences_per_document,
                                        "train_file") if train_path else None)
        scheme, entity_types = choose(label_source, [dev, test], None)
    else:
        scheme, entity_types = choose(train, [dev, test], saved_path)
    for ner_file in (train, dev, test):
        if ner_file is not None:
            check_tags(ner_file, entity_types, scheme)
    label_list = ner_tags.label_list_for(entity_types, scheme)
    tf.logging.info("Tag scheme %s (trained as %s); %d labels: %s", scheme,
                    ner_tags.model_scheme(scheme), len(label_list), " ".join(label_list))
    return scheme, entity_types


def _train(run, trainer, train, train_windows, label_list, num_train_steps):
    """Writes the training windows (logging the first ones) and trains."""
    train_file = os.path.join(run.output_dir, "train.tf_record")
    write_windows(train_windows, train_file)
    for i, window in enumerate(train_windows[:3]):
        length = sum(window.input_mask)
        pieces_tokens = run.tokenizer.convert_ids_to_tokens(window.input_ids[:length])
        input_pipeline.log_example(
            [("tokens", pieces_tokens), ("length", length),
             # The tag of each word's first piece, the only ones trained.
             ("tags", ["%s/%s" % (token, label_list[label])
                       for token, label, mask in zip(pieces_tokens, window.label_ids,
                                                     window.label_mask) if mask])],
            debug=i > 0,
            ids=[("input_ids", window.input_ids), ("label_ids", window.label_ids),
                 ("label_mask", window.label_mask)])
    training_progress.log_training(run.options, [
        ("Num sentences", sum(1 for _ in iter_sentences(train))),
        ("Num examples", "%d windows" % len(train_windows))], num_train_steps,
        run.settings.train_batch_size)
    trainer.train(input_fn=file_based_input_fn_builder(
        train_file, run.settings.max_seq_length, is_training=True, drop_remainder=True,
        length_buckets=run.options.length_buckets), max_steps=num_train_steps)
    checkpoints.report_trained_checkpoint(run.output_dir)


def _start_output(run, scheme, entity_types, label_list):
    """Takes --output_dir (`fine_tuning.Run.start_output`) and writes the
    label file (a training run, or where there is none) and, in a training
    run, the run record.

    Returns:
      The label file's path.
    """
    run.start_output()
    labels_path = os.path.join(run.output_dir, LABELS_FILE)
    if run.settings.do_train or not tf.io.gfile.exists(labels_path):
        write_labels(labels_path, scheme, entity_types)
    if run.settings.do_train:
        run.write_record("token_classification", ["do_lower_case", "max_seq_length",
                                                  "doc_stride", "document_context",
                                                  "vocab_file"], labels=label_list)
    return labels_path


def _evaluate_and_predict(run, trainer, pieces, label_list, label_map, scheme, checkpoint,
                          dev, test, text):
    """--do_eval on `dev` (eval_results.txt, eval_predictions.txt), --do_predict on
    `test` (test_predictions.txt; test_results.txt where it is tagged) and on
    `text`, --predict_text_file's NerFile (text_predictions.txt); None: not
    asked for."""
    settings = run.settings

    def tag(ner_file, batch_size, record_name, phase="Predicting"):
        """`tag_file` of `ner_file` through `record_name` in --output_dir."""
        return tag_file(trainer, ner_file, pieces, label_list, scheme,
                        settings.max_seq_length, settings.doc_stride,
                        settings.document_context, batch_size,
                        os.path.join(run.output_dir, record_name), run.fixed_batches, phase,
                        run.init_checkpoint, run.options.length_buckets)

    if settings.do_eval:
        probabilities, predicted = tag(dev, settings.eval_batch_size, "eval.tf_record",
                                       "Evaluating")
        result = score_file(dev, probabilities, predicted, label_map, scheme)
        if checkpoint:
            result["global_step"] = checkpoints.checkpoint_step(checkpoint)
        write_conll_predictions(os.path.join(run.output_dir, "eval_predictions.txt"), dev,
                                predicted)
        evaluation.write_eval_results(result, run.output_dir, headline="eval_f1")
    if test is not None:
        probabilities, predicted = tag(test, settings.predict_batch_size, "predict.tf_record")
        write_conll_predictions(os.path.join(run.output_dir, "test_predictions.txt"), test,
                                predicted)
        if test.tagged:
            evaluation.write_eval_results(
                score_file(test, probabilities, predicted, label_map, scheme),
                run.output_dir, file_name="test_results.txt",
                header="***** Test results *****", headline="eval_f1")
    if text is not None:
        _, predicted = tag(text, settings.predict_batch_size, "predict_text.tf_record")
        write_conll_predictions(os.path.join(run.output_dir, "text_predictions.txt"), text,
                                predicted, with_gold=False)


@output_lock.releases_output_lock
def main(_):
    # Every input is checked before anything is trained or written.
    run = fine_tuning.prepare_run(settings_lib.from_flags(Settings), "run_ner.py",
                                  min_seq_length=3,
                                  needs=_needs, check_flags=_check_flags,
                                  head_variable="ner/output_weights")
    settings, bert_config = run.settings, run.bert_config
    train, dev, test, text = _read_data(run)
    scheme, entity_types = _labels(run, train, dev, test)
    label_list = ner_tags.label_list_for(entity_types, scheme)
    label_map = {label: i for i, label in enumerate(label_list)}
    # A checkpoint of another model in --output_dir would be restored and fail.
    checkpoints.check_output_dir_checkpoint(
        run.output_dir, bert_config,
        {"ner/output_weights": [len(label_list), bert_config.hidden_size],
         "ner/output_bias": [len(label_list)]})

    pieces = WordPieceCache(run.tokenizer)
    train_windows = num_train_steps = num_warmup_steps = None
    if settings.do_train:
        train_windows, _ = convert_file(train, pieces, settings.max_seq_length,
                                        settings.doc_stride, is_training=True,
                                        document_context=settings.document_context,
                                        label_map=label_map, scheme=scheme)
        num_train_steps, num_warmup_steps = run.train_schedule(
            len(train_windows), what="training windows")
    run.check_export_checkpoint()

    labels_path = _start_output(run, scheme, entity_types, label_list)
    trainer = run.trainer(model_fn_builder(
        bert_config=bert_config, num_labels=len(label_list),
        init_checkpoint=run.init_checkpoint, learning_rate=settings.learning_rate,
        num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
        use_tpu=settings.use_tpu, use_one_hot_embeddings=settings.use_tpu,
        options=run.options))
    if settings.do_train:
        _train(run, trainer, train, train_windows, label_list, num_train_steps)

    checkpoint = run.checkpoint()
    if (settings.do_eval or settings.do_predict) and checkpoint is None:
        tf.logging.warning("No fine-tuned checkpoint in --output_dir: predicting with an "
                           "untrained output layer")

    _evaluate_and_predict(run, trainer, pieces, label_list, label_map, scheme, checkpoint,
                          dev, test, text)
    if settings.export_dir:
        export_model(run.export_source(checkpoint), label_list, scheme, labels_path,
                     doc_stride=settings.doc_stride, explain_steps=settings.explain_steps)


if __name__ == "__main__":
    script_runner.run_script(main)
