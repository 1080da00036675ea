"""How close an export's explanations come to completeness, and what they
cost: the explain signature (scriptkit/attributions.py) of a classifier
export run on the texts of a TSV file, toward the predicted label.

    .venv/bin/python benchmarks/bench_explain.py --model_dir=/tmp/sst_export \
      --input_file=demo_data/sentiment/dev.tsv

For each text the attributions of its words should sum to output -
baseline_output (the label's probability at the text and at the [PAD]
baseline); the gap is the integral's error. Prints the CPU, the texts, the
seconds per text (batches of --batch_size, after one warm-up batch), the
gap's largest and median absolute value, and among the texts whose
difference is over --material (the baseline gives the label a clearly
different probability) how many are off by more than 5% of it.
"""

import csv
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402
from scriptkit import exported_model  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("model_dir", None, "A classifier export (run_classifier.py --export_dir).")
flags.DEFINE_string("input_file", None, "A TSV file with a header naming --text_column.")
flags.DEFINE_string("text_column", "sentence", "The column of the texts.")
flags.DEFINE_integer("max_rows", 400, "Explain at most this many texts (the first ones).")
flags.DEFINE_integer("batch_size", 8, "Texts per request.")
flags.DEFINE_float("material", 0.05, "A difference output - baseline_output over this "
                   "is material: its gap is judged against 5% of it.")
flags.mark_flags_as_required(["model_dir", "input_file"])


def main(_):
    with open(FLAGS.input_file, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    texts = [row[FLAGS.text_column] for row in rows[:FLAGS.max_rows]]
    signature = exported_model.Model(FLAGS.model_dir).signature("explain")

    def explain(batch):
        return signature({"text_a": batch, "label": [""] * len(batch)})

    explain(texts[:FLAGS.batch_size])  # warm-up
    gaps, differences = [], []
    start = time.perf_counter()
    for i in range(0, len(texts), FLAGS.batch_size):
        out = explain(texts[i:i + FLAGS.batch_size])
        difference = out["output"] - out["baseline_output"]
        gaps.extend(np.abs(out["attributions"].sum(axis=1) - difference))
        differences.extend(np.abs(difference))
    seconds = time.perf_counter() - start
    gaps, differences = np.array(gaps), np.array(differences)
    material = differences > FLAGS.material
    off = int((gaps[material] > 0.05 * differences[material]).sum())
    print("CPU: %s" % bench_common.cpu_model())
    print("%d texts, %.3f s per text (batches of %d)" % (len(texts), seconds / len(texts),
                                                        FLAGS.batch_size))
    print("|sum of attributions - (output - baseline_output)|: max %.4f, median %.4f"
          % (gaps.max(), np.median(gaps)))
    print("difference over %g: %d texts; off by more than 5%% of it: %d"
          % (FLAGS.material, int(material.sum()), off))


if __name__ == "__main__":
    app.run(main)
