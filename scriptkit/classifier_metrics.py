"""The classifier's task metrics, computed in NumPy over the real (not
padding) examples of an evaluation: accuracy, F1 of the positive class,
Matthews correlation (CoLA), Pearson and Spearman correlation (STS-B,
regression) and, for multi-label tasks, micro and macro F1
(`METRIC_FUNCTIONS`, by the names a processor's `metric_names` lists);
`compute_metrics` turns a predict pass's outputs into the "eval_<name>"
entries of eval_results.txt.

In: labels and model outputs as arrays. Out: floats. Needs NumPy only.
"""

import numpy as np


def accuracy(labels, predictions):
    """Fraction of equal entries of two 1-D arrays."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions)) if labels.size else 0.0


def f1_score(labels, predictions, positive=1):
    """F1 of the positive class: 2TP / (2TP + FP + FN); 0 when undefined."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = np.sum((predictions == positive) & (labels == positive))
    fp = np.sum((predictions == positive) & (labels != positive))
    fn = np.sum((predictions != positive) & (labels == positive))
    denominator = 2 * tp + fp + fn
    return float(2 * tp / denominator) if denominator else 0.0


def matthews_corrcoef(labels, predictions):
    """Matthews correlation coefficient of binary labels (0/1):
    (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); 0 when undefined."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions != 1) & (labels != 1)))
    fp = float(np.sum((predictions == 1) & (labels != 1)))
    fn = float(np.sum((predictions != 1) & (labels == 1)))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson_corr(x, y):
    """Pearson correlation of two 1-D arrays; 0 when either is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    return float(np.sum(dx * dy) / denominator) if denominator else 0.0


def average_ranks(x):
    """1-based ranks of a 1-D array; tied values get the mean of their ranks."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    start = 0
    while start < len(x):
        end = start
        while end + 1 < len(x) and sorted_x[end + 1] == sorted_x[start]:
            end += 1
        # Positions start..end (0-based) share ranks start+1..end+1.
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman_corr(x, y):
    """Spearman rank correlation: Pearson correlation of average ranks."""
    return pearson_corr(average_ranks(x), average_ranks(y))


# ---------------------------------------------------------------------------
# Multi-label metrics, over 0/1 arrays [num_examples, num_labels].

def _counts(labels, predictions):
    labels = np.asarray(labels).astype(bool)
    predictions = np.asarray(predictions).astype(bool)
    tp = np.sum(labels & predictions, axis=0)
    fp = np.sum(~labels & predictions, axis=0)
    fn = np.sum(labels & ~predictions, axis=0)
    return tp, fp, fn


def micro_f1(labels, predictions):
    """F1 over all (example, label) decisions pooled: 2TP / (2TP + FP + FN);
    0 when there are no positives at all."""
    tp, fp, fn = (float(np.sum(c)) for c in _counts(labels, predictions))
    denominator = 2 * tp + fp + fn
    return 2 * tp / denominator if denominator else 0.0


def macro_f1(labels, predictions):
    """Mean over labels of each label's F1; a label that is neither in the
    gold labels nor predicted scores 0 (as scikit-learn's default does)."""
    tp, fp, fn = _counts(labels, predictions)
    if tp.size == 0:
        return 0.0
    denominator = 2 * tp + fp + fn
    per_label = np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)
    return float(np.mean(per_label))


METRIC_FUNCTIONS = {
    "accuracy": accuracy,
    "f1": f1_score,
    "matthews_corr": matthews_corrcoef,
    "pearson": pearson_corr,
    "spearman": spearman_corr,
    # Multi-label: over [n, num_labels] 0/1 arrays.
    "micro_f1": micro_f1,
    "macro_f1": macro_f1,
}


def compute_metrics(metric_names, label_ids, outputs, is_real_example, is_regression,
                    threshold=None):
    """Task metrics over the real examples.

    Args:
      metric_names: names in METRIC_FUNCTIONS.
      label_ids: [n] label ids (scores for regression; [n, num_labels] 0/1
        for multi-label).
      outputs: [n, num_labels] probabilities, or [n] scores for regression.
      is_real_example: [n], 0 for padding examples (excluded).
      threshold: multi-label tasks: a label is predicted where its
        probability is >= threshold. None: single-label (argmax).

    Returns:
      dict "eval_<name>" -> float.
    """
    real = np.asarray(is_real_example).astype(bool)
    labels = np.asarray(label_ids)[real]
    outputs = np.asarray(outputs)[real]
    if is_regression:
        predictions = outputs
    elif threshold is not None:
        predictions = (outputs >= threshold).astype(np.int64)
    else:
        predictions = np.argmax(outputs, axis=-1)
    return {"eval_" + name: METRIC_FUNCTIONS[name](labels, predictions)
            for name in metric_names}
