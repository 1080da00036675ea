"""The official SQuAD evaluation (evaluate-v1.1.py and evaluate-v2.0.py), as a module.

The metrics, names and output keys are the official scripts'; run_squad.py
imports everything here and scores its predictions with it. What goes in and
what comes out:

* a dataset: parsed SQuAD JSON with answers (the dict with "data", or its
  "data" list). A SQuAD 2.0 question without an answer has an empty
  "answers" list;
* predictions: dict qas_id -> answer text ("" is "no answer" in SQuAD 2.0),
  i.e. predictions.json;
* for SQuAD 2.0, optionally null odds: dict qas_id -> float, the official
  --na-prob-file (run_squad.py's null_odds.json); a question counts as
  answered "" where its odds exceed the threshold.

`evaluate_v1` returns {"exact_match", "f1"}; `evaluate_v2` returns exact, f1,
total, the HasAns_* / NoAns_* break-down and, given null odds, best_exact,
best_f1 and their thresholds; scores are on a 0-100 scale, as the official
scripts print them. `tune_null_threshold` turns the best F1 threshold into
predictions, and `run_evaluation` does all of it for a run's output
directory, writing eval_results.json (and the *_best_threshold.json files).

Beyond the official scripts: malformed files raise `errors.InputError`
naming the field and question id, SQuAD 2.0 predictions must cover every
question, and SQuAD 1.1 needs every question to have an answer.

It needs no TensorFlow: files go through file_io's functions, which
import TensorFlow only for a remote (gs://) path, as the scripts do. It also
runs from the shell like the official scripts (SQuAD 1.1 or 2.0 from the
file's "version" and "is_impossible" fields, or --squad-version), printing
the results as JSON:

    .venv/bin/python squad_evaluate.py dev-v2.0.json predictions.json --na-prob-file null_odds.json
"""

import argparse
import collections
import json
import logging
import os
import re
import string
import sys

from scriptkit import file_io
from scriptkit import logs
from scriptkit.errors import InputError


# ---------------------------------------------------------------------------
# The SQuAD JSON structure, shared with run_squad.py's reader.

def get_field(obj, key, expected_type, where):
    """obj[key], checked to be there and of `expected_type` (a bool is not an
    int here); else InputError "<where>: ..."."""
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
        paragraphs = get_field(article, "paragraphs", list, article_where)
        for paragraph_index, paragraph in enumerate(paragraphs):
            paragraph_where = "%s, paragraph %d" % (article_where, paragraph_index)
            get_field(paragraph, "context", str, paragraph_where)
            qas = get_field(paragraph, "qas", list, paragraph_where)
            for qa_index, qa in enumerate(qas):
                qa_where = "%s, question %d" % (paragraph_where, qa_index)
                qas_id = get_field(qa, "id", (str, int), qa_where)
                qa_where = "%s, question id %r" % (where, qas_id)
                get_field(qa, "question", str, qa_where)
                yield paragraph, qa, qa_where


def write_json(path, value):
    """Writes `value` to `path` (gs:// too) as JSON in run_squad's format
    (indent 4, final newline), atomically (see file_io.atomic_output)."""
    with file_io.atomic_output(path) as writer:
        writer.write(json.dumps(value, indent=4) + "\n")
    file_io.report_output(path)


# ---------------------------------------------------------------------------
# SQuAD 1.1 (evaluate-v1.1.py).

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s):
    """An answer as the official scripts compare it: lower case, without
    ASCII punctuation and the articles a/an/the, single spaces."""
    text = "".join(char for char in s.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _overlap_f1(prediction_tokens, gold_tokens):
    """F1 of the tokens two answers share (as bags); 0 if they share none."""
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score_v1(prediction, ground_truth):
    """SQuAD 1.1 token-overlap F1 (0 when nothing overlaps, even both empty)."""
    return _overlap_f1(normalize_answer(prediction).split(),
                       normalize_answer(ground_truth).split())


def exact_match_score_v1(prediction, ground_truth):
    """SQuAD 1.1 exact match (a bool) of the normalised answers."""
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    """The best `metric_fn(prediction, truth)` over the gold answers."""
    return max(metric_fn(prediction, truth) for truth in ground_truths)


def _answer_texts(qa, where):
    """The gold answer texts of question `qa` (a list, maybe empty)."""
    answers = get_field(qa, "answers", list, where)
    return [get_field(a, "text", str, where + ", answer") for a in answers]


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
    exact_match = f1 = 0
    total = 0
    missing = []
    for _, qa, qa_where in iterate_questions(dataset, where):
        total += 1
        gold = _answer_texts(qa, qa_where)
        if not gold:
            raise InputError("%s has no answers: SQuAD 1.1 evaluation needs at least "
                             "one (for SQuAD 2.0 use --version_2_with_negative)" % qa_where)
        if qa["id"] not in predictions:
            missing.append(qa["id"])
            continue
        prediction = predictions[qa["id"]]
        exact_match += metric_max_over_ground_truths(exact_match_score_v1, prediction, gold)
        f1 += metric_max_over_ground_truths(f1_score_v1, prediction, gold)
    if missing:
        logs.log_warning("Unanswered questions will receive score 0: %d (first: %s)",
                           len(missing), missing[0])
    if not total:
        raise InputError("%s has no questions" % where)
    return collections.OrderedDict([("exact_match", 100.0 * exact_match / total),
                                    ("f1", 100.0 * f1 / total)])


# ---------------------------------------------------------------------------
# SQuAD 2.0 (evaluate-v2.0.py).

def compute_exact(a_gold, a_pred):
    """SQuAD 2.0 exact match of one answer: 0 or 1."""
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold, a_pred):
    """SQuAD 2.0 token-overlap F1 of one answer; an empty answer ("no
    answer") scores 1 against an empty one and 0 against any other."""
    gold_tokens = normalize_answer(a_gold).split()
    pred_tokens = normalize_answer(a_pred).split()
    if not gold_tokens or not pred_tokens:
        return int(gold_tokens == pred_tokens)
    return _overlap_f1(pred_tokens, gold_tokens)


def make_qid_to_has_ans(dataset, where="dataset"):
    """qas_id -> whether the question has a (non-empty) answers list."""
    qid_to_has_ans = collections.OrderedDict()
    for _, qa, qa_where in iterate_questions(dataset, where):
        qid_to_has_ans[qa["id"]] = bool(_answer_texts(qa, qa_where))
    return qid_to_has_ans


def get_raw_scores(dataset, preds, where="dataset"):
    """Per-question exact and F1 of `preds`, the best over the gold answers
    (the only gold answer of an unanswerable question is "").

    Returns:
      (exact_scores, f1_scores): dicts qas_id -> score in [0, 1], for the
      questions that have a prediction.
    """
    exact_scores = {}
    f1_scores = {}
    for _, qa, qa_where in iterate_questions(dataset, where):
        qid = qa["id"]
        # Gold answers that normalise to nothing count as "no answer".
        gold = [a for a in _answer_texts(qa, qa_where) if normalize_answer(a)] or [""]
        if qid not in preds:
            continue
        exact_scores[qid] = max(compute_exact(a, preds[qid]) for a in gold)
        f1_scores[qid] = max(compute_f1(a, preds[qid]) for a in gold)
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    """`scores` with every question whose na_prob > na_prob_thresh answered
    "" (1.0 if it has no answer, else 0.0)."""
    return {qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else score
            for qid, score in scores.items()}


def make_eval_dict(exact_scores, f1_scores, qid_list=None):
    """exact, f1 (0-100) and total over the questions of `qid_list` (all of
    `exact_scores` if None or empty)."""
    if not qid_list:
        qid_list = list(exact_scores)
    total = len(qid_list)
    return collections.OrderedDict([
        ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
        ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
        ("total", total),
    ])


def merge_eval(main_eval, new_eval, prefix):
    """Adds `new_eval`'s entries to `main_eval` as prefix_key."""
    for key, value in new_eval.items():
        main_eval["%s_%s" % (prefix, key)] = value


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
    # All null: every unanswerable question is right.
    score = sum(1 for has_ans in qid_to_has_ans.values() if not has_ans)
    best_score = score
    best_thresh = None
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            score += scores[qid]
        elif preds[qid]:
            score -= 1  # An unanswerable question loses its (right) null.
        if score > best_score:
            best_score = score
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
    if na_probs is not None:
        _check_covers(na_probs, qid_to_has_ans, "null odds")
    exact_raw, f1_raw = get_raw_scores(dataset, predictions, where)
    # Without null odds, na_prob_thresh nulls nothing.
    odds = na_probs if na_probs is not None else {k: 0.0 for k in predictions}
    exact = apply_no_ans_threshold(exact_raw, odds, qid_to_has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, odds, qid_to_has_ans, na_prob_thresh)

    result = make_eval_dict(exact, f1)
    has_ans = [k for k, v in qid_to_has_ans.items() if v]
    no_ans = [k for k, v in qid_to_has_ans.items() if not v]
    if has_ans:
        merge_eval(result, make_eval_dict(exact, f1, qid_list=has_ans), "HasAns")
    if no_ans:
        merge_eval(result, make_eval_dict(exact, f1, qid_list=no_ans), "NoAns")
    if na_probs is not None:
        # Only the dataset's questions take part (the official script's
        # na_probs come from the same run, so they are the same set).
        na_probs = {k: na_probs[k] for k in qid_to_has_ans}
        result["best_exact"], result["best_exact_thresh"] = find_best_thresh(
            predictions, exact_raw, na_probs, qid_to_has_ans)
        result["best_f1"], result["best_f1_thresh"] = find_best_thresh(
            predictions, f1_raw, na_probs, qid_to_has_ans)
    return result


def _check_covers(values, qid_to_has_ans, what):
    """InputError unless the dict `values` has every question of
    `qid_to_has_ans` (`what` names `values`)."""
    missing = [k for k in qid_to_has_ans if k not in values]
    if missing:
        raise InputError("The %s miss %d of the %d questions (first: %r)"
                         % (what, len(missing), len(qid_to_has_ans), missing[0]))


# ---------------------------------------------------------------------------
# Either version, and the null threshold.

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
    """Predictions at `threshold`: "" where null_odds > threshold
    (run_squad's rule for --null_score_diff_threshold), else the best
    non-null answer."""
    return collections.OrderedDict(
        (qid, "" if null_odds[qid] > threshold else text)
        for qid, text in non_null_predictions.items())


def tune_null_threshold(dataset, all_nbest_json, null_odds, where="dataset"):
    """Chooses the null_score_diff_threshold with the best F1 on `dataset`.

    The official best_f1_thresh is a threshold on na_prob (null predicted
    where na_prob > thresh), the same rule and quantity as run_squad's
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


# ---------------------------------------------------------------------------
# A run's output directory.

def _read_json(path, what):
    """The parsed JSON file `path`; InputError if it is missing (`what` names
    it) or not JSON."""
    file_io.require_file(what, path)
    return file_io.read_json(path)


def _log_results(header, result):
    """Logs `header`, then one "  key = value" line per entry of `result`."""
    logs.log_info(header)
    for key, value in result.items():
        logs.log_info("  %s = %s", key, value)


def run_evaluation(dataset, output_dir, where, all_predictions=None, all_nbest_json=None,
                   null_odds=None, version_2_with_negative=False, tune_threshold=False,
                   null_score_diff_threshold=0.0):
    """Scores predictions against `dataset` and writes eval_results.json (and,
    with tune_threshold, predictions_best_threshold.json and
    eval_results_best_threshold.json) to `output_dir`.

    Args:
      dataset: parsed SQuAD json with answers.
      output_dir: where the results go, and where predictions.json,
        nbest_predictions.json and null_odds.json are read from when they
        are not given.
      where: names the dataset in messages.
      all_predictions, all_nbest_json, null_odds: write_predictions' results,
        or None to read them from `output_dir` (null_odds.json is optional).
      version_2_with_negative: SQuAD 2.0 metrics.
      tune_threshold: also choose the best null threshold (2.0 only;
        `tune_null_threshold`).
      null_score_diff_threshold: the threshold the predictions were made
        with (for the log).

    Returns:
      The eval dict of predictions.json.
    """
    if all_predictions is None:
        all_predictions = _read_json(os.path.join(output_dir, "predictions.json"),
                                     "predictions.json in --output_dir")
    null_odds_file = os.path.join(output_dir, "null_odds.json")
    if version_2_with_negative and null_odds is None and file_io.exists(null_odds_file):
        null_odds = _read_json(null_odds_file, "null_odds.json in --output_dir")

    if version_2_with_negative:
        result = evaluate_v2(dataset, all_predictions, na_probs=null_odds, where=where)
        header = ("***** Eval results (predictions.json, null_score_diff_threshold=%s) *****"
                  % null_score_diff_threshold)
    else:
        result = evaluate_v1(dataset, all_predictions, where=where)
        header = "***** Eval results (predictions.json) *****"
    _log_results(header, result)
    path = os.path.join(output_dir, "eval_results.json")
    write_json(path, result)
    # Named as in the log and the file: SQuAD 1.1's script calls it
    # exact_match, 2.0's exact.
    exact = "exact" if version_2_with_negative else "exact_match"
    file_io.report_output(path, "%s = %s, f1 = %s" % (exact, result[exact], result["f1"]))
    if not tune_threshold:
        return result

    if null_odds is None:
        raise InputError("--tune_null_threshold needs null_odds.json in %s" % output_dir)
    if all_nbest_json is None:
        all_nbest_json = _read_json(os.path.join(output_dir, "nbest_predictions.json"),
                                    "nbest_predictions.json in --output_dir")
    threshold, tuned, tuned_result = tune_null_threshold(dataset, all_nbest_json,
                                                         null_odds, where)
    write_json(os.path.join(output_dir, "predictions_best_threshold.json"), tuned)
    write_json(os.path.join(output_dir, "eval_results_best_threshold.json"), tuned_result)
    _log_results("***** Eval results (predictions_best_threshold.json) *****", tuned_result)
    logs.log_info(
        "Best --null_score_diff_threshold on %s: %r (F1 %.2f, exact %.2f). "
        "predictions_best_threshold.json uses it; predictions.json is untuned "
        "(--null_score_diff_threshold=%r: F1 %.2f, exact %.2f). The threshold was "
        "chosen on the same questions it is scored on.",
        where, threshold, tuned_result["f1"], tuned_result["exact"],
        null_score_diff_threshold, result["f1"], result["exact"])
    return result


# ---------------------------------------------------------------------------
# From the shell, as the official scripts.

def _load_local_json(path, what):
    """The parsed JSON file `path` (local, as the official scripts read it)."""
    try:
        with open(path, encoding="utf-8") as reader:
            return json.load(reader)
    except OSError as e:
        raise InputError("%s %s cannot be read: %s" % (what, path, e.strerror or e))
    except ValueError as e:
        raise InputError("%s %s is not a JSON file: %s" % (what, path, e))


def _looks_like_v2(dataset):
    """Whether a dataset is SQuAD 2.0: its "version" says so ("v2.0"; "1.1"
    says not), or, without a version, one of its questions has an
    "is_impossible" field."""
    version = str(dataset.get("version", "")).lstrip("v")
    if version[:1] in ("1", "2"):
        return version.startswith("2")
    try:
        return any("is_impossible" in qa for _, qa, _ in iterate_questions(dataset, "data"))
    except InputError:
        return False  # The evaluation reports what is wrong.


def _arguments(argv):
    """The command line of the official scripts, parsed."""
    parser = argparse.ArgumentParser(
        description="The official SQuAD 1.1 / 2.0 evaluation of a predictions.json.")
    parser.add_argument("data_file", help="SQuAD JSON with answers (e.g. dev-v2.0.json)")
    parser.add_argument("pred_file", help="JSON dict: question id -> predicted answer text")
    parser.add_argument("--na-prob-file", "-n", default=None,
                        help="SQuAD 2.0: JSON dict question id -> null odds "
                             "(run_squad.py's null_odds.json)")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                        help="SQuAD 2.0: count as \"no answer\" where the null odds exceed "
                             "this (default 1.0, as the official script)")
    parser.add_argument("--out-file", "-o", default=None,
                        help="also write the results to this JSON file")
    parser.add_argument("--squad-version", choices=("auto", "1.1", "2.0"), default="auto",
                        help="which official script to follow (auto: 2.0 if --na-prob-file "
                             "is given or the data file looks like SQuAD 2.0)")
    return parser.parse_args(argv)


def _evaluate_files(args):
    """The results of the files the command line `args` name, as JSON text
    (written to --out-file too where given). Raises InputError."""
    dataset = _load_local_json(args.data_file, "data file")
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise InputError("data file %s is not a SQuAD file: it needs a top-level \"data\" "
                         "list of articles" % args.data_file)
    predictions = _load_local_json(args.pred_file, "predictions file")
    if not isinstance(predictions, dict):
        raise InputError("predictions file %s should hold a JSON object (question id -> "
                         "answer text)" % args.pred_file)
    version_2 = (args.squad_version == "2.0" or args.squad_version == "auto" and (
        args.na_prob_file is not None or _looks_like_v2(dataset)))
    where = "data file %s" % args.data_file
    if version_2:
        na_probs = None
        if args.na_prob_file is not None:
            na_probs = _load_local_json(args.na_prob_file, "null odds file")
        result = evaluate_v2(dataset, predictions, na_probs=na_probs,
                             na_prob_thresh=args.na_prob_thresh, where=where)
    else:
        result = evaluate_v1(dataset, predictions, where=where)
    text = json.dumps(result, indent=2)
    if args.out_file:
        try:
            with open(args.out_file, "w", encoding="utf-8") as writer:
                writer.write(text + "\n")
        except OSError as e:
            raise InputError("--out-file %s cannot be written: %s"
                             % (args.out_file, e.strerror or e))
    return text


def main(argv=None):
    """`python squad_evaluate.py data.json predictions.json [options]`.

    Args:
      argv: the arguments after the program name (None: sys.argv[1:]).

    Returns:
      The exit status: 0, or 1 after "ERROR: <message>" on stderr for bad
      input. The results are printed to stdout as JSON (and written to
      --out-file if given).
    """
    args = _arguments(argv)
    logging.basicConfig(format="%(levelname)s: %(message)s")
    try:
        text = _evaluate_files(args)
    except InputError as e:
        sys.stdout.flush()
        sys.stderr.write("ERROR: %s\n" % e)
        return 1
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
