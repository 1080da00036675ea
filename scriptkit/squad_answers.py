"""SQuAD's answers from the model's scores: for each question, the best
spans over all its windows (each start where its window has the most
context), their text in the original context (`get_final_text`), the
n-best list with probabilities, and SQuAD 2.0's null odds.

In: SquadExamples and their window features (run_squad.py), and the
start/end logits of every window. Out: dicts keyed by question id, as
SQuAD's evaluation reads them (predictions, n-best, null odds). Needs
TensorFlow only for its log.
"""

import collections
import math

import numpy as np
from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

import tokenization

# null_odds.json value of a 2.0 question without any valid non-null span: it
# is predicted "" at every threshold.
NO_ANSWER_NULL_ODDS = 1000000.0

# A scored span of one window: feature_index is the window's index among its
# example's features; start_index and end_index are positions in its tokens.
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
                        max_answer_length, do_lower_case, version_2_with_negative=False,
                        null_score_diff_threshold=0.0, verbose_logging=False):
    """The answers of write_predictions, without writing files.

    For each example, every window proposes the spans between its
    `n_best_size` best start and `n_best_size` best end positions (ranked
    over the whole window, padding included, as the original ranks them),
    where both lie in its context (starting where it has max context, at
    most `max_answer_length` pieces);
    with SQuAD 2.0 the null answer ([CLS] to [CLS], from the window where it
    scores lowest) competes too. Spans are ranked by start + end logit and the
    `n_best_size` best distinct texts are kept.

    Args:
      all_examples: SquadExamples, in the order their features were made.
      all_features: InputFeatures (or PredictionFeatures) of all examples.
      all_results: RawResults (logits lists or numpy arrays [seq_length]).
      n_best_size, max_answer_length, do_lower_case: as the flags.
      version_2_with_negative: SQuAD 2.0 (null answers, null odds).
      null_score_diff_threshold: SQuAD 2.0: predict "" when the null odds
        exceed it.
      verbose_logging: log answers that cannot be aligned with the context.

    Returns:
      (all_predictions, all_nbest_json, scores_diff_json): OrderedDicts qas_id
      -> answer text; -> list of n-best dicts (text, probability, start_logit,
      end_logit); -> null odds (score_null - best non-null score; SQuAD 2.0
      only, empty otherwise).
    """
    features_by_example = collections.defaultdict(list)
    for feature in all_features:
        features_by_example[feature.example_index].append(feature)
    result_by_id = {result.unique_id: result for result in all_results}

    all_predictions = collections.OrderedDict()
    all_nbest_json = collections.OrderedDict()
    scores_diff_json = collections.OrderedDict()
    for example_index, example in enumerate(all_examples):
        features = features_by_example[example_index]
        spans, null_score, null = _score_spans(features, result_by_id, n_best_size,
                                               max_answer_length)
        if version_2_with_negative:
            spans.append(null)
        # Stable: equal scores keep the order the spans were proposed in.
        spans.sort(key=lambda span: span.start_logit + span.end_logit, reverse=True)

        nbest = []
        texts = set()
        for span in spans:
            if len(nbest) >= n_best_size:
                break
            if span.start_index == 0:  # The null answer.
                text = ""
            else:
                text = _span_text(example, features[span.feature_index], span,
                                  do_lower_case, verbose_logging)
                if text in texts:
                    continue
            texts.add(text)
            nbest.append(_NbestPrediction(text, span.start_logit, span.end_logit))
        if version_2_with_negative and "" not in texts:
            nbest.append(_NbestPrediction("", null.start_logit, null.end_logit))
        if not nbest:
            # No valid span at all: a placeholder, so that every question
            # has an n-best list.
            nbest.append(_NbestPrediction("empty", 0.0, 0.0))

        probabilities = _compute_softmax([e.start_logit + e.end_logit for e in nbest])
        all_nbest_json[example.qas_id] = [
            collections.OrderedDict([("text", entry.text), ("probability", probability),
                                     ("start_logit", entry.start_logit),
                                     ("end_logit", entry.end_logit)])
            for entry, probability in zip(nbest, probabilities)]

        best_non_null = next((entry for entry in nbest if entry.text), None)
        if not version_2_with_negative:
            all_predictions[example.qas_id] = nbest[0].text
        elif best_non_null is None:
            # Every n-best entry is the null answer (no valid span at all):
            # null at any threshold.
            scores_diff_json[example.qas_id] = NO_ANSWER_NULL_ODDS
            all_predictions[example.qas_id] = ""
        else:
            score_diff = null_score - best_non_null.start_logit - best_non_null.end_logit
            scores_diff_json[example.qas_id] = score_diff
            all_predictions[example.qas_id] = (
                "" if score_diff > null_score_diff_threshold else best_non_null.text)
    return all_predictions, all_nbest_json, scores_diff_json


def _score_spans(features, result_by_id, n_best_size, max_answer_length):
    """The candidate spans of one example's windows.

    Returns:
      (spans, null_score, null): the valid spans (_PrelimPrediction), window
      by window, best starts first, then best ends; the lowest null score
      (start + end logit at [CLS]) over the windows (1000000 without
      windows); and the null answer of that window (the first if tied).
    """
    spans = []
    null_score = 1000000
    null = _PrelimPrediction(0, 0, 0, 0, 0)
    for feature_index, feature in enumerate(features):
        result = result_by_id[feature.unique_id]
        start_logits = _as_float_list(result.start_logits)
        end_logits = _as_float_list(result.end_logits)
        if start_logits[0] + end_logits[0] < null_score:
            null_score = start_logits[0] + end_logits[0]
            null = _PrelimPrediction(feature_index, 0, 0, start_logits[0], end_logits[0])
        best_ends = _get_best_indexes(end_logits, n_best_size)
        for start in _get_best_indexes(start_logits, n_best_size):
            for end in best_ends:
                if _is_valid_span(feature, start, end, max_answer_length):
                    spans.append(_PrelimPrediction(feature_index, start, end,
                                                   start_logits[start], end_logits[end]))
    return spans, null_score, null


def _is_valid_span(feature, start, end, max_answer_length):
    """Whether positions start..end of a window can be an answer: both in its
    context (not [CLS], the question, [SEP] or padding), the window the one
    with max context for the start, and 1 to max_answer_length pieces."""
    if start not in feature.token_to_orig_map or end not in feature.token_to_orig_map:
        return False
    if not feature.token_is_max_context.get(start, False):
        return False
    return start <= end < start + max_answer_length


def _span_text(example, feature, span, do_lower_case, verbose_logging):
    """The text of the context that a span of a window's tokens covers."""
    pieces = feature.tokens[span.start_index:span.end_index + 1]
    first_word = feature.token_to_orig_map[span.start_index]
    last_word = feature.token_to_orig_map[span.end_index]
    words = example.doc_tokens[first_word:last_word + 1]
    # Join the pieces back into words ("john ##son" -> "johnson").
    pred_text = " ".join(pieces).replace(" ##", "").replace("##", "")
    pred_text = " ".join(pred_text.split())
    return get_final_text(pred_text, " ".join(words), do_lower_case,
                          verbose_logging=verbose_logging)


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
    """Finds the characters of `orig_text` that the prediction covers.

    `orig_text` is the whole words that the predicted pieces fall in (e.g.
    "Smith's"), and `pred_text` the pieces joined (e.g. "smith"), normalised
    by the tokenizer (lower case, no accents, punctuation split off). The
    answer should be the original characters of just the prediction
    ("Smith").

    `orig_text` is tokenized again by the BasicTokenizer and the prediction
    found in that text. Without spaces, the tokenized text and `orig_text`
    usually have the same length, and then their characters correspond one
    to one: the prediction's first and last character give the answer's
    bounds in `orig_text`. When not (the prediction is not found, the lengths
    differ, or an end falls on a space), `orig_text` is returned whole.

    Args:
      pred_text: the predicted pieces, "##" joined, single spaces.
      orig_text: the words of the context they belong to, single spaces.
      do_lower_case: as the tokenizer that made the pieces.
      verbose_logging: log why the alignment failed.

    Returns:
      A substring of `orig_text` (or all of it).
    """
    tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    tok_text = " ".join(tokenizer.tokenize(orig_text))

    def fail(message, *args):
        if verbose_logging:
            tf.logging.info(message, *args)
        return orig_text

    tok_start = tok_text.find(pred_text)
    if tok_start == -1:
        return fail("Unable to find text: '%s' in '%s'", pred_text, orig_text)
    tok_end = tok_start + len(pred_text) - 1

    # The positions of the characters that are not spaces; the n-th of
    # tok_text corresponds to the n-th of orig_text.
    orig_chars = [i for i, char in enumerate(orig_text) if char != " "]
    tok_chars = [i for i, char in enumerate(tok_text) if char != " "]
    if len(orig_chars) != len(tok_chars):
        return fail("Length not equal after stripping spaces: '%s' vs '%s'",
                    orig_text.replace(" ", ""), tok_text.replace(" ", ""))
    rank = {position: n for n, position in enumerate(tok_chars)}
    if tok_start not in rank:
        return fail("Couldn't map start position")
    if tok_end not in rank:
        return fail("Couldn't map end position")
    return orig_text[orig_chars[rank[tok_start]]:orig_chars[rank[tok_end]] + 1]


def _get_best_indexes(logits, n_best_size):
    """Indexes of the `n_best_size` largest logits, largest first (equal
    logits: lower index first)."""
    by_score = sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)
    return by_score[:n_best_size]


def _compute_softmax(scores):
    """Softmax of a list of floats, as a list ([] for [])."""
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    # Summed left to right, not with sum(): Python >= 3.12 sums floats with
    # compensation, which would change the probabilities' last digits.
    total = 0.0
    for value in exps:
        total += value
    return [value / total for value in exps]
