"""Benchmark: run_pretraining.py's training input pipeline alone, reading
records with masks (as create_pretraining_data.py writes them by default)
against records without masks that it masks as it reads them
(--dynamic_masking), with and without whole-word masking.

Writes synthetic records of BERT-Base's shapes (--seq_length 128 tokens, 90%
full length and the rest 16 to 127, --max_predictions 20, a vocabulary of
30,522 entries of which a fifth are "##" pieces), then for each variant
builds run_pretraining.input_fn_builder's training input (seeded, as
--input_seed does) and reads --batches batches of --batch_size, after a
warm-up of 20 batches. The variants are interleaved, --repeats times, in one
process. Printed per run: examples per second of wall time and examples per
CPU-second of the process (all its threads), the figure to set against the
CPU-seconds a training step spends on each example.

Usage:
  .venv/bin/python benchmarks/bench_dynamic_masking.py [--batches=200]
      [--batch_size=32] [--repeats=3] [--records=20000] [--threads=4]
"""

import argparse
import os
import random
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(path, size):
    """A vocabulary of `size` entries: the specials, then words, a fifth of
    them "##" pieces."""
    tokens = SPECIAL + [("##p%d" if i % 5 == 0 else "w%d") % i for i in range(size - 5)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def write_records(directory, num_records, seq, pred, vocab_size, seed=1):
    """(masked file, unmasked file) of the same random sentence pairs."""
    from scriptkit import pretraining_records as records
    rng = random.Random(seed)
    encoder = records.ExampleEncoder(vocab_size, seq, pred)
    masked, unmasked = [], []
    for _ in range(num_records):
        n = seq if rng.random() < 0.9 else rng.randint(16, seq - 1)
        num_a = rng.randint(1, n - 4)
        ids = [rng.randrange(5, vocab_size) for _ in range(n)]
        ids[0], ids[num_a + 1], ids[n - 1] = 2, 3, 3
        positions = sorted(rng.sample([i for i in range(1, n - 1) if i != num_a + 1],
                                      min(pred, max(1, round(n * 0.15)))))
        labels = [ids[p] for p in positions]
        input_ids = list(ids)
        for p in positions:
            input_ids[p] = 4
        random_next = rng.random() < 0.5
        masked.append(encoder.encode(input_ids, num_a, positions, labels, random_next))
        unmasked.append(encoder.encode_unmasked(ids, num_a, random_next))
    paths = []
    for name, data in (("masked", masked), ("unmasked", unmasked)):
        path = os.path.join(directory, name + ".tfrecord")
        with open(path, "wb") as f:
            f.write(b"".join(records.frame_records(data)))
        paths.append(path)
    return paths


def read_rate(input_fn, batch_size, batches, warmup=20):
    """(examples/s of wall time, examples per CPU-second) of reading
    `batches` batches after `warmup`."""
    import tensorflow.compat.v1 as tf
    with tf.Graph().as_default(), tf.Session() as sess:
        batch = tf.data.make_one_shot_iterator(input_fn({"batch_size": batch_size})).get_next()
        # Touch every feature, so nothing is pruned.
        total = tf.add_n([tf.reduce_sum(tf.cast(v, tf.float32)) for v in batch.values()])
        for _ in range(warmup):
            sess.run(total)
        wall, cpu = time.time(), time.process_time()
        for _ in range(batches):
            sess.run(total)
        wall, cpu = time.time() - wall, time.process_time() - cpu
    examples = batches * batch_size
    return examples / wall, examples / cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--max_predictions", type=int, default=20)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--threads", type=int, default=4,
                        help="input_fn_builder's num_cpu_threads (readers, parsers)")
    parser.add_argument("--work_dir", help="where to write (default: a temp dir)")
    args = parser.parse_args()

    from scriptkit import quiet_tf  # noqa: F401
    from scriptkit import dynamic_masking
    import run_pretraining

    work = args.work_dir or tempfile.mkdtemp(prefix="bench_dynmask_")
    vocab_file = write_vocab(os.path.join(work, "vocab.txt"), args.vocab_size)
    masked_file, unmasked_file = write_records(work, args.records, args.seq_length,
                                               args.max_predictions, args.vocab_size)
    vocab = dynamic_masking.MaskingVocab(vocab_file)
    sizes = {name: os.path.getsize(path) for name, path in
             (("masked", masked_file), ("unmasked", unmasked_file))}
    print("CPU: %s, %d CPUs; load average %s" % (
        bench_common.cpu_model(), os.cpu_count(),
        " ".join("%.2f" % x for x in os.getloadavg())))
    print("%d records of %d tokens: %.0f bytes each with masks, %.0f without" % (
        args.records, args.seq_length, sizes["masked"] / args.records,
        sizes["unmasked"] / args.records))

    def builder(files, masking):
        return run_pretraining.input_fn_builder(
            files, args.seq_length, args.max_predictions, is_training=True,
            num_cpu_threads=args.threads, seed=1, masking=masking)

    variants = {
        "static (masks in the records)": builder([masked_file], None),
        "dynamic": builder([unmasked_file], dynamic_masking.Masking(
            vocab, 0.15, args.max_predictions, False, 12345)),
        "dynamic, whole words": builder([unmasked_file], dynamic_masking.Masking(
            vocab, 0.15, args.max_predictions, True, 12345)),
    }
    results = {name: [] for name in variants}
    for repeat in range(args.repeats):
        for name, input_fn in variants.items():
            rate = read_rate(input_fn, args.batch_size, args.batches)
            results[name].append(rate)
            print("repeat %d  %-30s %8.0f examples/s  %8.0f examples per CPU-second"
                  % (repeat + 1, name, rate[0], rate[1]), flush=True)
    print("load average after: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    print("\n| Input | examples/s (wall) | examples per CPU-second |")
    print("|---|---|---|")
    for name, rates in results.items():
        walls = sorted(r[0] for r in rates)
        cpus = sorted(r[1] for r in rates)
        print("| %s | %.0f (%.0f to %.0f) | %.0f (%.0f to %.0f) |" % (
            name, walls[len(walls) // 2], walls[0], walls[-1],
            cpus[len(cpus) // 2], cpus[0], cpus[-1]))


if __name__ == "__main__":
    main()
