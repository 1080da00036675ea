"""Tokenizer throughput: our FullTokenizer vs Google's original and the Rust
`tokenizers` BertWordPieceTokenizer, on a large text file, one line at a time.

    python benchmarks/bench_tokenization.py --input_file=corpus.txt \\
        --vocab_file=vocab.txt --do_lower_case --runs=5

Prints lines/s and wordpieces/s (median of --runs runs; each run builds a
fresh tokenizer, so caches start cold) and whether each tokenizer's output is
identical to ours. Run it on an otherwise idle machine: the timings are wall
clock (CPU time is printed too). Google's original is imported from the
`bert-tensorflow` package through tests/reference.py, when installed.
"""

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread for the Rust tokenizer, as for the Python ones.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from absl import app, flags  # noqa: E402

import tokenization  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Text file, one input per line (UTF-8).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary file.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents.")
flags.DEFINE_integer("max_lines", 0, "Use only the first N lines (0: all).")
flags.DEFINE_integer("runs", 5, "Timed runs per tokenizer (median reported).")
flags.DEFINE_bool("original", True, "Also time Google's original tokenizer.")
flags.DEFINE_bool("rust", True, "Also time the Rust `tokenizers` library, if importable.")


def _time_runs(make_tokenize, lines, runs):
    """Times `runs` passes over `lines`, each with a fresh tokenizer.

    Returns:
      (median wall seconds, median CPU seconds, number of word pieces).
    """
    walls, cpus = [], []
    pieces = 0
    for _ in range(runs):
        tokenize = make_tokenize()
        count = 0
        wall, cpu = time.perf_counter(), time.process_time()
        for line in lines:
            count += len(tokenize(line))
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        pieces = count
    return statistics.median(walls), statistics.median(cpus), pieces


def _original_tokenizer_factory(vocab_file, do_lower_case):
    try:
        from reference import load_original
        original = load_original("tokenization")
    except ImportError as e:
        print("Google's original not available: %s" % e)
        return None
    # Its `--preserve_unused_tokens` flag, at its default (False), without
    # parsing absl flags again.
    original.preserve_token = lambda token, vocab: False
    return lambda: original.FullTokenizer(vocab_file, do_lower_case=do_lower_case).tokenize


def _rust_tokenizer_factory(vocab_file, do_lower_case):
    try:
        from tokenizers import BertWordPieceTokenizer
    except ImportError:
        print("Rust `tokenizers` not importable: skipped.")
        return None

    def make():
        tokenizer = BertWordPieceTokenizer(
            vocab_file, lowercase=do_lower_case, strip_accents=do_lower_case,
            clean_text=True, handle_chinese_chars=True)
        return lambda line: tokenizer.encode(line, add_special_tokens=False).tokens
    return make


def main(_):
    if not FLAGS.input_file or not FLAGS.vocab_file:
        raise app.UsageError("--input_file and --vocab_file are required")
    with open(FLAGS.input_file, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    if FLAGS.max_lines:
        lines = lines[:FLAGS.max_lines]
    chars = sum(len(line) for line in lines)
    print("%d lines, %d characters (%.1f per line), do_lower_case=%s, %d runs each" %
          (len(lines), chars, chars / max(1, len(lines)), FLAGS.do_lower_case, FLAGS.runs))

    candidates = [("this repo (tokenization.py)", lambda: tokenization.FullTokenizer(
        FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case).tokenize)]
    if FLAGS.original:
        factory = _original_tokenizer_factory(FLAGS.vocab_file, FLAGS.do_lower_case)
        if factory:
            candidates.append(("Google original (bert-tensorflow)", factory))
    if FLAGS.rust:
        factory = _rust_tokenizer_factory(FLAGS.vocab_file, FLAGS.do_lower_case)
        if factory:
            candidates.append(("Rust tokenizers (BertWordPiece)", factory))

    timings = []
    for name, factory in candidates:
        timings.append(_time_runs(factory, lines, FLAGS.runs))

    # Identity check, untimed (and after the timings, so that no stored
    # outputs slow the garbage collector during them): line by line.
    ours = candidates[0][1]()
    others = [factory() for _, factory in candidates[1:]]
    mismatches = [0] * len(others)
    for line in lines:
        expected = ours(line)
        for k, tokenize in enumerate(others):
            if tokenize(line) != expected:
                mismatches[k] += 1
    verdicts = ["(reference)"] + ["yes" if m == 0 else "NO: %d lines differ" % m
                                  for m in mismatches]

    rows = []
    for (name, _), (wall, cpu, pieces), same in zip(candidates, timings, verdicts):
        rows.append((name, len(lines) / wall, pieces / wall, len(lines) / cpu, same))

    print()
    print("%-36s %12s %14s %14s  %s" % ("tokenizer", "lines/s", "wordpieces/s",
                                         "lines/CPU-s", "identical to ours"))
    for name, lps, wps, lpcpu, same in rows:
        print("%-36s %12.0f %14.0f %14.0f  %s" % (name, lps, wps, lpcpu, same))


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "vocab_file"])
    app.run(main)
