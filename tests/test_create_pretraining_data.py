"""Tests for create_pretraining_data.py.

References: Google's original script (bert-tensorflow 1.0.4, run in a
subprocess through tests/reference.py; for --do_whole_word_mask, which 1.0.4
predates, the same module with whole-word masking, written here from its
description, in place of its create_masked_lm_predictions), TensorFlow's own
TFRecord reader and tf.train.Example parser, and properties computed here
from the records (masking counts, 80/10/10, next-sentence labels against the
known sentence order)."""

import os
import random
import re
import subprocess
import sys

import pytest
from absl import flags
from absl.testing import flagsaver

import create_pretraining_data as cpd
from scriptkit import pretraining_records
from scriptkit import settings as settings_lib
import tiny
from scriptkit.errors import InputError

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


@pytest.fixture(autouse=True)
def _parsed_flags():
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    yield


def run_ours(**overrides):
    """Runs our main in-process with every flag it reads set explicitly."""
    values = dict(do_lower_case=True, do_whole_word_mask=False, max_seq_length=64,
                  max_predictions_per_seq=10, random_seed=12345, dupe_factor=2,
                  masked_lm_prob=0.15, short_seq_prob=0.1, num_workers=1,
                  shard_size_mb=0.0, shuffle_buffer_size=100000)
    values.update(overrides)
    with flagsaver.as_parsed(**{k: str(v) for k, v in values.items()}):
        cpd.main([])


def test_max_seq_length_default_is_this_scripts(tmp_path):
    """A process that defined --max_seq_length for another script first
    (run_squad.py: 384) still runs this one with its own default, 128."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nword\n")
    with flagsaver.flagsaver():
        FLAGS.set_default("max_seq_length", 384)
        with flagsaver.as_parsed(input_file=str(tmp_path / "in.txt"),
                                 output_file=str(tmp_path / "out.tfrecord"),
                                 vocab_file=str(vocab)):
            run = cpd.prepare_run(settings_lib.from_flags(cpd.Settings))
            assert run.settings.max_seq_length == 128
        with flagsaver.as_parsed(input_file="in.txt", output_file=str(tmp_path / "out"),
                                 vocab_file=str(vocab), max_seq_length="384"):
            run = cpd.prepare_run(settings_lib.from_flags(cpd.Settings))
            assert run.settings.max_seq_length == 384


def read_records(paths):
    """Raw record bytes of TFRecord files, read (and CRC-checked) by TF."""
    import tensorflow as tf
    records = []
    for path in paths:
        records.extend(r.numpy() for r in tf.data.TFRecordDataset(path))
    return records


def protobuf_map_order_is_fixed():
    """Whether protobuf, in this process, serializes an example built as the
    original builds it (features added in FEATURE_NAMES order) with the map
    order create_pretraining_data writes. True with TensorFlow 2.15's
    protobuf 4; protobuf 7 (TensorFlow 2.21) orders map entries by a hash
    seeded anew in each process, so that there not even the original's
    output is reproducible byte for byte from one run to the next."""
    import tensorflow as tf
    data = pretraining_records.ExampleEncoder(16, 8, 2).encode([2, 5, 3, 6, 3], 1, [1], [5],
                                                                False)
    values = pretraining_records.decode_example(data)
    feature = {}
    for name in pretraining_records.FEATURE_NAMES:
        if name == "masked_lm_weights":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values[name]))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values[name]))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString() == data


def assert_same_tfrecords(ours_path, original_path):
    """The two TFRecord files are equal byte for byte where protobuf's map
    order is fixed; elsewhere they hold equal examples, in the same order."""
    with open(ours_path, "rb") as a, open(original_path, "rb") as b:
        ours, original = a.read(), b.read()
    assert len(original) > 1000
    if protobuf_map_order_is_fixed():
        assert ours == original, "%s differs from the original" % original_path
    else:
        ours, original = read_records([ours_path]), read_records([original_path])
        assert len(ours) == len(original)
        assert ([tiny.example_features(r) for r in ours]
                == [tiny.example_features(r) for r in original]), \
            "%s differs from the original" % original_path


def write_lines(path, lines, encoding="utf-8"):
    with open(path, "wb") as f:
        f.write("".join(line + "\n" for line in lines).encode(encoding))
    return path


# ---------------------------------------------------------------------------
# Corpora.

def tagged_corpus(directory, num_docs=80, seed=0):
    """Documents of 10-token sentences; each sentence starts with a unique tag
    word, so the records reveal which sentences were used. Returns
    (corpus path, vocab path, {tag: (doc, sentence index)}, doc lengths)."""
    rng = random.Random(seed)
    pool = ["w%03d" % i for i in range(300)]
    lines, where, lengths = [], {}, []
    for d in range(num_docs):
        n = rng.randint(2, 25)
        lengths.append(n)
        for s in range(n):
            tag = "t%02d%02d" % (d, s)
            where[tag] = (d, s)
            lines.append(" ".join([tag] + [rng.choice(pool) for _ in range(9)]))
        lines.append("")
    corpus = write_lines(os.path.join(directory, "tagged.txt"), lines)
    vocab = tiny.write_vocab(directory, pool + sorted(where), name="tagged_vocab.txt")
    return corpus, vocab, where, lengths


STEMS = ["abc", "dga", "hik", "jem", "bal", "cim", "gad", "fel", "keb", "mad"]
SUFFIXES = ["nop", "rst", "uvw", "xyz", "qor", "sun", "wox", "tyr"]


def piece_corpus(directory, seed=1):
    """Words of 1-3 WordPieces (stem, ##suffix...), for whole-word masking."""
    rng = random.Random(seed)
    lines = []
    for _ in range(40):
        for _ in range(rng.randint(1, 8)):
            words = []
            for _ in range(rng.randint(3, 14)):
                words.append(rng.choice(STEMS) + "".join(
                    rng.choice(SUFFIXES) for _ in range(rng.choice([0, 1, 1, 2]))))
            lines.append(" ".join(words))
        lines.append("")
    corpus = write_lines(os.path.join(directory, "pieces.txt"), lines)
    vocab = tiny.write_vocab(directory, STEMS + ["##" + s for s in SUFFIXES],
                             name="piece_vocab.txt")
    return corpus, vocab


def mixed_corpus(directory, seed=2):
    """Two files of varied text: unicode, CJK, punctuation, unknown words,
    multi-piece words, one-sentence documents, whitespace-only lines, CRLF,
    and a document that continues from the first file into the second."""
    rng = random.Random(seed)
    words = ("the quick brown fox jumps over lazy dog café naïve Über résumé "
             "tokenization embedding transformer attention pretraining "
             "unbelievable, hello! world? don't 42 3.14 中文 字 日本語 "
             "Ελληνικά кириллица emoji🙂 zzqx").split()
    docs = []
    for d in range(30):
        n = 1 if d % 4 == 0 else rng.randint(2, 12)
        docs.append([" ".join(rng.choice(words) for _ in range(rng.randint(1, 25)))
                     for _ in range(n)])
    text_a, text_b = [], []
    for d, doc in enumerate(docs):
        target = text_a if d < 15 else text_b
        target.extend(doc)
        if d != 14:  # The first file ends mid-document.
            target.append(rng.choice(["", "   ", "\t"]))
    path_a = os.path.join(directory, "mixed_a.txt")
    with open(path_a, "wb") as f:
        f.write("\r\n".join(text_a).encode("utf-8"))  # CRLF, no final newline.
    path_b = write_lines(os.path.join(directory, "mixed_b.txt"), text_b)
    # Vocabulary: long words split into stem + ##rest; "zzqx" left out ([UNK]).
    from tokenization import BasicTokenizer
    basic = BasicTokenizer(do_lower_case=True)
    tokens = set()
    for line in text_a + text_b:
        for token in basic.tokenize(line):
            if token == "zzqx":
                continue
            if len(token) >= 7:
                tokens.update([token[:4], "##" + token[4:]])
            else:
                tokens.add(token)
    vocab = tiny.write_vocab(directory, sorted(tokens), name="mixed_vocab.txt")
    return path_a + "," + path_b, vocab


def original_tokens(features):
    """Unmasked input tokens: input_ids with the labels put back."""
    ids = list(features["input_ids"][1])
    n = sum(features["input_mask"][1])
    weights = features["masked_lm_weights"][1]
    for pos, label, w in zip(features["masked_lm_positions"][1],
                             features["masked_lm_ids"][1], weights):
        if w:
            ids[pos] = label
    return ids[:n]


# ---------------------------------------------------------------------------
# The original, as the reference.

# Whole-word masking, for the reference run: bert-tensorflow 1.0.4 predates
# it, so this function, written here from the feature's description and the
# random-draw order of 1.0.4's per-piece masking, takes the place of the 1.0.4
# module's create_masked_lm_predictions (which its
# create_instances_from_document calls with these arguments). The rules:
# a "##" WordPiece joins the word before it ([CLS]/[SEP] belong to no word
# and do not end one); the words are shuffled (one rng.shuffle); the number
# of predictions is round(len(tokens) * masked_lm_prob), at least 1, at most
# max_predictions_per_seq; words are taken in shuffled order while the count
# is below that number, skipping a word whose pieces would exceed it; each
# piece of a taken word is replaced as in per-piece masking (80% [MASK],
# 10% kept, 10% a random vocabulary word: rng.random(), then rng.random()
# and rng.randint). Returns the masked tokens and the sorted positions with
# their original tokens.
WHOLE_WORD_MASKING = '''
def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                                 vocab_words, rng):
    words = []
    for position, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]"):
            continue
        if words and token.startswith("##"):
            words[-1].append(position)
        else:
            words.append([position])
    rng.shuffle(words)
    budget = min(max_predictions_per_seq,
                 max(1, int(round(masked_lm_prob * len(tokens)))))
    masked = list(tokens)
    chosen = []
    for word in words:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(word) > budget:
            continue
        for position in word:
            if rng.random() < 0.8:
                masked[position] = "[MASK]"
            elif rng.random() >= 0.5:
                masked[position] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            chosen.append(position)
    chosen.sort()
    return masked, chosen, [tokens[position] for position in chosen]
'''

WHOLE_WORD_RUNNER = '''
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, %(tests)r)
from absl import app
from reference import load_original
module = load_original("create_pretraining_data")
module.flags.DEFINE_bool("do_whole_word_mask", False, "Whole-word masking.")
exec(open(%(masking)r).read(), module.__dict__)
app.run(module.main, argv=["create_pretraining_data"] + sys.argv[1:])
'''


def start_original(args, directory, whole_word_mask=False):
    """Starts the original script in a subprocess; returns the Popen."""
    if whole_word_mask:
        masking = os.path.join(directory, "whole_word_masking.py")
        with open(masking, "w") as f:
            f.write(WHOLE_WORD_MASKING)
        runner = os.path.join(directory, "whole_word_runner.py")
        with open(runner, "w") as f:
            f.write(WHOLE_WORD_RUNNER % {"tests": TESTS, "masking": masking})
        cmd = [sys.executable, runner] + args
    else:
        cmd = [sys.executable, os.path.join(TESTS, "reference.py"),
               "create_pretraining_data"] + args
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def flag_args(**values):
    return ["--%s=%s" % (k, v) for k, v in values.items()]


# ---------------------------------------------------------------------------
# Byte identity with the original.

@pytest.mark.slow
def test_byte_identical_to_original(tmp_path):
    inputs, vocab = mixed_corpus(str(tmp_path))
    pieces, piece_vocab = piece_corpus(str(tmp_path))
    common = dict(max_seq_length=64, random_seed=7, dupe_factor=3, masked_lm_prob=0.15,
                  short_seq_prob=0.2, do_lower_case=True)
    cases = {
        # Three output files (round-robin), mixed text.
        "plain": dict(common, input_file=inputs, vocab_file=vocab,
                      max_predictions_per_seq=10,
                      output_file=",".join(str(tmp_path / ("orig_plain_%d.tfrecord" % i))
                                           for i in range(3))),
        # Whole-word masking with the budget below what is wanted (capping,
        # and whole words skipped when they would exceed it).
        "wwm": dict(common, input_file=pieces, vocab_file=piece_vocab,
                    max_predictions_per_seq=5, do_whole_word_mask=True,
                    output_file=str(tmp_path / "orig_wwm.tfrecord")),
    }
    procs = {name: start_original(flag_args(**args), str(tmp_path), name == "wwm")
             for name, args in cases.items()}
    for name, args in cases.items():
        ours = dict(args, output_file=args["output_file"].replace("orig_", "ours_"))
        run_ours(**ours)
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out.decode("utf-8", "replace")[-3000:]
        for orig_path in cases[name]["output_file"].split(","):
            assert_same_tfrecords(orig_path.replace("orig_", "ours_"), orig_path)


# The original module's library functions, run in a subprocess (its flags
# would clash with ours in this process). Arguments come as JSON; results go
# to a TFRecord file and a JSON file.
LIBRARY_RUNNER = '''
import json, os, random, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, %(tests)r)
from reference import load_original
module = load_original("create_pretraining_data")
module.FLAGS(["create_pretraining_data"])  # Its tokenizer reads a flag.
if %(masking)r:
    exec(open(%(masking)r).read(), module.__dict__)
args = json.loads(sys.argv[1])
tokenizer = module.tokenization.FullTokenizer(args["vocab_file"], do_lower_case=True)
instances = module.create_training_instances(
    args["input_files"], tokenizer, args["max_seq_length"], args["dupe_factor"],
    args["short_seq_prob"], args["masked_lm_prob"], args["max_predictions_per_seq"],
    random.Random(args["seed"]))
module.write_instance_to_example_files(instances, tokenizer, args["max_seq_length"],
                                       args["max_predictions_per_seq"], [args["output_file"]])
rng = random.Random(args["seed"])
vocab_words = list(tokenizer.vocab.keys())
masked = [module.create_masked_lm_predictions(tokens, args["masked_lm_prob"],
                                              args["max_predictions_per_seq"], vocab_words, rng)
          for tokens in args["masking_inputs"]]
truncated = []
for tokens_a, tokens_b, max_num_tokens in args["truncation_inputs"]:
    module.truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
    truncated.append([tokens_a, tokens_b])
with open(args["json_file"], "w") as f:
    json.dump({"instances": [[i.tokens, i.segment_ids, i.masked_lm_positions,
                              i.masked_lm_labels, i.is_random_next] for i in instances],
               "masked": masked, "truncated": truncated}, f)
'''


@pytest.mark.slow
@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_library_functions_equal_the_original(tmp_path, whole_word_mask):
    """create_training_instances, write_instance_to_example_files,
    create_masked_lm_predictions and truncate_seq_pair give the original's
    results for the same seed."""
    import json
    import tokenization
    if whole_word_mask:
        inputs, vocab = piece_corpus(str(tmp_path))
        masking = str(tmp_path / "whole_word_masking.py")
        with open(masking, "w") as f:
            f.write(WHOLE_WORD_MASKING)
    else:
        inputs, vocab = mixed_corpus(str(tmp_path))
        masking = ""
    # Token lists with [CLS]/[SEP] inside the text too, and "##" pieces.
    masking_inputs = [["[CLS]", "a", "##b", "[SEP]", "c", "[SEP]", "d", "##e", "##f", "[SEP]"],
                      ["x", "##y"] * 12, ["[SEP]"] * 3 + ["z"] * 20]
    truncation_inputs = [[list("abcdefg"), list("hij"), 6], [list("ab"), list("cdefghi"), 4],
                         [list("abcd"), list("efgh"), 5]]
    args = dict(input_files=inputs.split(","), vocab_file=vocab, max_seq_length=48,
                dupe_factor=3, short_seq_prob=0.3, masked_lm_prob=0.2,
                max_predictions_per_seq=6, seed=5,
                output_file=str(tmp_path / "original.tfrecord"),
                json_file=str(tmp_path / "original.json"),
                masking_inputs=masking_inputs, truncation_inputs=truncation_inputs)
    runner = str(tmp_path / "library_runner.py")
    with open(runner, "w") as f:
        f.write(LIBRARY_RUNNER % {"tests": TESTS, "masking": masking})
    proc = subprocess.run([sys.executable, runner, json.dumps(args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(args["json_file"]) as f:
        original = json.load(f)

    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    instances = cpd.create_training_instances(
        args["input_files"], tokenizer, args["max_seq_length"], args["dupe_factor"],
        args["short_seq_prob"], args["masked_lm_prob"], args["max_predictions_per_seq"],
        random.Random(args["seed"]), do_whole_word_mask=whole_word_mask)
    ours = [[i.tokens, i.segment_ids, i.masked_lm_positions, i.masked_lm_labels,
             i.is_random_next] for i in instances]
    assert len(ours) > 50
    assert ours == original["instances"]
    assert any(i.is_random_next for i in instances) and "[MASK]" in str(instances)
    output = str(tmp_path / "ours.tfrecord")
    cpd.write_instance_to_example_files(instances, tokenizer, args["max_seq_length"],
                                        args["max_predictions_per_seq"], [output])
    assert_same_tfrecords(output, args["output_file"])

    rng = random.Random(args["seed"])
    vocab_words = list(tokenizer.vocab.keys())
    masked = [list(cpd.create_masked_lm_predictions(
        tokens, args["masked_lm_prob"], args["max_predictions_per_seq"], vocab_words, rng,
        do_whole_word_mask=whole_word_mask)) for tokens in masking_inputs]
    assert masked == original["masked"]
    truncated = []
    for tokens_a, tokens_b, max_num_tokens in truncation_inputs:
        cpd.truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        truncated.append([tokens_a, tokens_b])
    assert truncated == original["truncated"]


def test_create_instances_from_document_shapes():
    documents = [[["a", "b", "c"], ["d", "e"], ["f"]], [["g", "h"], ["i", "j", "k"]]]
    vocab_words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijk")
    rng = random.Random(3)
    for index in range(2):
        instances = cpd.create_instances_from_document(
            documents, index, 9, 0.0, 0.15, 3, vocab_words, rng)
        assert instances
        for instance in instances:
            n = len(instance.tokens)
            assert n <= 9 and instance.tokens[0] == "[CLS]" and instance.tokens[-1] == "[SEP]"
            first_sep = instance.tokens.index("[SEP]")
            assert instance.segment_ids == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
            assert 1 <= len(instance.masked_lm_positions) <= 3
            assert instance.masked_lm_positions == sorted(instance.masked_lm_positions)
            assert "is_random_next: " in str(instance)


def test_serialization_equals_protobuf(tmp_path):
    """Our hand-written tf.train.Example bytes equal protobuf's for the same
    features (this fixes the map order the byte identity relies on), where
    protobuf's map order is fixed; they parse to the same features always."""
    import tensorflow as tf
    fixed_order = protobuf_map_order_is_fixed()
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=10)
    out = str(tmp_path / "out.tfrecord")
    run_ours(input_file=corpus, vocab_file=vocab, output_file=out, max_predictions_per_seq=7)
    records = read_records([out])
    assert len(records) > 20
    for record in records:
        features = tiny.example_features(record)
        example = tf.train.Example(features=tf.train.Features(feature={
            name: (tf.train.Feature(float_list=tf.train.FloatList(value=values))
                   if kind == "float_list" else
                   tf.train.Feature(int64_list=tf.train.Int64List(value=values)))
            for name, (kind, values) in features.items()}))
        if fixed_order:
            assert example.SerializeToString() == record
        else:
            assert tiny.example_features(example.SerializeToString()) == features
        assert pretraining_records.decode_example(record) == {
            k: v for k, (_, v) in features.items()}


# ---------------------------------------------------------------------------
# Records: features, masking, next sentence.

def test_features_names_shapes_dtypes(tmp_path):
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=20)
    outputs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    run_ours(input_file=corpus, vocab_file=vocab, output_file=",".join(outputs),
             max_seq_length=48, max_predictions_per_seq=9)
    counts = [len(read_records([p])) for p in outputs]
    assert abs(counts[0] - counts[1]) <= 1 and min(counts) > 10  # round-robin
    int_names = ["input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "next_sentence_labels"]
    lengths = {"input_ids": 48, "input_mask": 48, "segment_ids": 48,
               "masked_lm_positions": 9, "masked_lm_ids": 9, "masked_lm_weights": 9,
               "next_sentence_labels": 1}
    with open(vocab, encoding="utf-8") as f:
        vocab_size = len(f.read().split())
    for record in read_records(outputs):
        f = tiny.example_features(record)
        assert sorted(f) == sorted(lengths)
        for name, length in lengths.items():
            assert len(f[name][1]) == length, name
            assert f[name][0] == ("float_list" if name == "masked_lm_weights"
                                  else "int64_list")
        assert all(f[name][0] == "int64_list" for name in int_names)
        n = sum(f["input_mask"][1])
        assert f["input_mask"][1] == [1] * n + [0] * (48 - n)
        ids = f["input_ids"][1]
        assert ids[0] == 2 and ids[n - 1] == 3 and ids[n:] == [0] * (48 - n)  # [CLS] [SEP]
        assert all(0 <= i < vocab_size for i in ids)
        seg = f["segment_ids"][1]
        first_sep = ids.index(3)
        assert seg == [0] * (first_sep + 1) + [1] * (n - first_sep - 1) + [0] * (48 - n)
        assert f["next_sentence_labels"][1][0] in (0, 1)


def test_masking_rate_and_80_10_10(tmp_path):
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path))
    out = str(tmp_path / "out.tfrecord")
    run_ours(input_file=corpus, vocab_file=vocab, output_file=out, max_seq_length=64,
             max_predictions_per_seq=20, dupe_factor=5, short_seq_prob=0.1)
    mask_id, special = 4, {2, 3}
    replaced = kept = randomized = 0
    records = read_records([out])
    assert len(records) > 1000
    for record in records:
        f = tiny.example_features(record)
        n = sum(f["input_mask"][1])
        weights = f["masked_lm_weights"][1]
        k = int(sum(weights))
        # Exactly round(n * 0.15) (at least 1) predictions, then padding.
        assert k == max(1, int(round(n * 0.15)))
        assert weights == [1.0] * k + [0.0] * (20 - k)
        positions = f["masked_lm_positions"][1][:k]
        assert positions == sorted(set(positions)) and 0 < positions[0]
        assert f["masked_lm_positions"][1][k:] == [0] * (20 - k)
        assert f["masked_lm_ids"][1][k:] == [0] * (20 - k)
        original = original_tokens(f)
        for pos, label in zip(positions, f["masked_lm_ids"][1]):
            assert pos < n and original[pos] not in special  # never [CLS]/[SEP]
            assert label == original[pos]
            token = f["input_ids"][1][pos]
            if token == mask_id:
                replaced += 1
            elif token == label:
                kept += 1
            else:
                randomized += 1
    total = replaced + kept + randomized
    assert total > 10000
    # Binomial standard deviations are below 0.004 here; allow ~4.
    print("80/10/10:", replaced / total, kept / total, randomized / total, total)
    assert abs(replaced / total - 0.8) < 0.015
    assert abs(kept / total - 0.1) < 0.012
    assert abs(randomized / total - 0.1) < 0.012


def test_dynamic_masking_writes_unmasked_pairs_once(tmp_path):
    """--dynamic_masking: records of input_ids (the text's, no [MASK]),
    input_mask, segment_ids and next_sentence_labels only; --dupe_factor 1
    unless given; in the sharded mode too."""
    corpus, vocab, where, _ = tagged_corpus(str(tmp_path), num_docs=30)
    outputs = {}
    for name, extra in [("default", {}), ("once", {"dupe_factor": 1}),
                        ("twice", {"dupe_factor": 2}),
                        ("sharded", {"shard_size_mb": 0.005})]:
        values = dict(do_lower_case=True, do_whole_word_mask=False, max_seq_length=48,
                      max_predictions_per_seq=7, random_seed=3, masked_lm_prob=0.15,
                      short_seq_prob=0.1, num_workers=1, shard_size_mb=0.0,
                      shuffle_buffer_size=1000, dynamic_masking=True, input_file=corpus,
                      vocab_file=vocab, output_file=str(tmp_path / (name + ".tfrecord")))
        values.update(extra)
        with flagsaver.as_parsed(**{k: str(v) for k, v in values.items()}):
            cpd.main([])
        outputs[name] = read_records([values["output_file"]])
    assert outputs["default"] == outputs["once"]
    assert 1.8 < len(outputs["twice"]) / len(outputs["once"]) < 2.2
    with open(vocab, encoding="utf-8") as f:
        tokens = f.read().split()
    for record in outputs["once"] + outputs["sharded"]:
        f = tiny.example_features(record)
        assert sorted(f) == ["input_ids", "input_mask", "next_sentence_labels", "segment_ids"]
        n = sum(f["input_mask"][1])
        ids = f["input_ids"][1]
        assert ids[0] == 2 and ids[n - 1] == 3 and 4 not in ids  # [CLS] [SEP], no [MASK]
        first_sep = ids.index(3)
        assert f["segment_ids"][1] == ([0] * (first_sep + 1) + [1] * (n - first_sep - 1)
                                       + [0] * (48 - n))
        # The text as it is: sentences of a tag and 9 words.
        words = [tokens[i] for i in ids[1:n - 1] if i != 3]
        assert all(w in where or w.startswith("w") for w in words)
    assert 0.8 < len(outputs["sharded"]) / len(outputs["once"]) < 1.2


def test_next_sentence_labels(tmp_path):
    """Label 0: B continues A in its document; label 1: it does not. B is
    random for a coin flip, or always when the chunk has one sentence (A is
    then the last sentence of its document); the coin flip is 50/50."""
    corpus, vocab, where, doc_lengths = tagged_corpus(str(tmp_path))
    with open(vocab, encoding="utf-8") as f:
        inv_vocab = f.read().split("\n")
    out = str(tmp_path / "out.tfrecord")
    # Without short sequences every pair fits exactly (10-token sentences,
    # 60 tokens), so no tag is truncated away.
    run_ours(input_file=corpus, vocab_file=vocab, output_file=out, max_seq_length=63,
             max_predictions_per_seq=20, dupe_factor=10, short_seq_prob=0.0)
    flips = random_flips = forced = 0
    for record in read_records([out]):
        f = tiny.example_features(record)
        tokens = [inv_vocab[i] for i in original_tokens(f)]
        sep = tokens.index("[SEP]")
        a_tags = [where[t] for t in tokens[1:sep] if t in where]
        b_tags = [where[t] for t in tokens[sep + 1:] if t in where]
        assert len(a_tags) == (sep - 1) // 10 and a_tags and b_tags
        last_doc, last_sentence = a_tags[-1]
        continues = b_tags[0] == (last_doc, last_sentence + 1)
        label = f["next_sentence_labels"][1][0]
        assert label == (0 if continues else 1)
        # Sentences within A, and within B, are consecutive.
        for tags in (a_tags, b_tags):
            assert tags == [(tags[0][0], tags[0][1] + j) for j in range(len(tags))]
        if last_sentence == doc_lengths[last_doc] - 1:
            assert label == 1
            forced += 1
        else:
            flips += 1
            random_flips += label
    assert forced > 50 and flips > 2000
    print("random-next share of coin flips:", random_flips / flips, flips)
    assert abs(random_flips / flips - 0.5) < 0.03


def test_whole_word_masking(tmp_path):
    corpus, vocab = piece_corpus(str(tmp_path))
    with open(vocab, encoding="utf-8") as f:
        inv_vocab = f.read().split("\n")

    def words_partially_masked(whole_word_mask):
        out = str(tmp_path / ("wwm_%s.tfrecord" % whole_word_mask))
        run_ours(input_file=corpus, vocab_file=vocab, output_file=out, dupe_factor=3,
                 max_seq_length=64, max_predictions_per_seq=10,
                 do_whole_word_mask=whole_word_mask)
        partial = words = 0
        for record in read_records([out]):
            f = tiny.example_features(record)
            tokens = [inv_vocab[i] for i in original_tokens(f)]
            k = int(sum(f["masked_lm_weights"][1]))
            masked = set(f["masked_lm_positions"][1][:k])
            assert k <= max(1, round(len(tokens) * 0.15))
            # Words: a piece without "##" starts one, "##" pieces continue
            # it. As in the original, [CLS]/[SEP] are skipped, so a "##"
            # piece that starts a front-truncated B continues A's last word.
            groups = []
            for i, token in enumerate(tokens):
                if token in ("[CLS]", "[SEP]"):
                    continue
                if groups and token.startswith("##"):
                    groups[-1].append(i)
                else:
                    groups.append([i])
            for group in groups:
                if len(group) > 1:
                    words += 1
                    hit = [i in masked for i in group]
                    partial += any(hit) and not all(hit)
        assert words > 1000
        return partial

    assert words_partially_masked(True) == 0
    assert words_partially_masked(False) > 50  # The check can fail.


# ---------------------------------------------------------------------------
# Determinism and sharded mode.

def test_deterministic_single_worker(tmp_path):
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=30)
    outputs = []
    for run in range(2):
        out = str(tmp_path / ("run%d.tfrecord" % run))
        run_ours(input_file=corpus, vocab_file=vocab, output_file=out)
        outputs.append(open(out, "rb").read())
    run_ours(input_file=corpus, vocab_file=vocab, output_file=str(tmp_path / "seed.tfrecord"),
             random_seed=1)
    assert outputs[0] == outputs[1]
    assert open(str(tmp_path / "seed.tfrecord"), "rb").read() != outputs[0]


@pytest.mark.slow
def test_sharded_mode_deterministic_and_independent_of_workers(tmp_path):
    corpus, vocab, where, _ = tagged_corpus(str(tmp_path), num_docs=120)
    size_mb = os.path.getsize(corpus) / 1e6
    results = {}
    for name, workers in [("w2a", 2), ("w2b", 2), ("w1", 1)]:
        outs = [str(tmp_path / ("%s_%d.tfrecord" % (name, i))) for i in range(2)]
        run_ours(input_file=corpus, vocab_file=vocab, output_file=",".join(outs),
                 num_workers=workers, shard_size_mb=size_mb / 5, shuffle_buffer_size=500,
                 dupe_factor=2)
        results[name] = [open(p, "rb").read() for p in outs]
        assert not [p for p in os.listdir(str(tmp_path)) if ".tmp-" in p]
    assert results["w2a"] == results["w2b"] == results["w1"]
    records = read_records([str(tmp_path / "w2a_0.tfrecord"), str(tmp_path / "w2a_1.tfrecord")])
    # Every sentence is used, and records are well-formed examples.
    with open(vocab, encoding="utf-8") as f:
        inv_vocab = f.read().split("\n")
    seen = set()
    for record in records:
        tokens = original_tokens(tiny.example_features(record))
        seen.update(t for t in (inv_vocab[i] for i in tokens) if t in where)
    assert len(seen) > 0.95 * len(where)
    # A different algorithm from the default (original-identical) mode's,
    # giving about as many instances.
    run_ours(input_file=corpus, vocab_file=vocab, output_file=str(tmp_path / "orig.tfrecord"),
             dupe_factor=2)
    original = read_records([str(tmp_path / "orig.tfrecord")])
    assert sorted(original) != sorted(records)
    assert abs(len(original) - len(records)) < 0.1 * len(records)


def test_worker_count_is_capped_by_shards_and_cpus(monkeypatch):
    monkeypatch.setattr(cpd, "_cpu_count", lambda: 4)
    # (requested, MB of text, MB per shard) -> workers started.
    assert cpd._worker_count(8, 0.3, 0.5) == 1     # one shard: no pool at all
    assert cpd._worker_count(8, 1.2, 0.5) == 3     # three shards
    assert cpd._worker_count(8, 100.0, 0.5) == 4   # as many as CPUs
    assert cpd._worker_count(2, 100.0, 0.5) == 2   # never more than asked
    assert cpd._worker_count(1, 100.0, 0.5) == 1
    assert cpd._worker_count(3, 0.0, 0.5) == 1     # empty input: one shard at most


def test_does_not_import_tensorflow(tmp_path):
    """Local files need no TensorFlow (its import alone is ~440 MB). Without
    it loaded, workers are forked; here (TensorFlow loaded) they are spawned:
    the output is the same."""
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=30)
    shard_mb = os.path.getsize(corpus) / 4e6
    code = ("import sys; sys.argv = ['x', '--input_file=%s', '--vocab_file=%s', "
            "'--output_file=%s', '--num_workers=2', '--shard_size_mb=%r', "
            "'--max_seq_length=64', '--max_predictions_per_seq=10', '--dupe_factor=2']\n"
            "import create_pretraining_data as c\n"
            "from absl import app\n"
            "try:\n    app.run(c.main)\nexcept SystemExit:\n    pass\n"
            "print('TF_LOADED', 'tensorflow' in sys.modules)"
            % (corpus, vocab, tmp_path / "forked.tfrecord", shard_mb))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert "TF_LOADED False" in out.stdout, out.stderr[-2000:]
    import tensorflow  # noqa: F401  (so that workers are spawned below)
    run_ours(input_file=corpus, vocab_file=vocab, output_file=str(tmp_path / "spawned.tfrecord"),
             num_workers=2, shard_size_mb=shard_mb, dupe_factor=2)
    forked = open(str(tmp_path / "forked.tfrecord"), "rb").read()
    assert len(forked) > 10000
    assert forked == open(str(tmp_path / "spawned.tfrecord"), "rb").read()


# ---------------------------------------------------------------------------
# Bad input.

def assert_no_output(directory, name="out.tfrecord"):
    leftovers = [p for p in os.listdir(directory) if p.startswith(name)]
    assert leftovers == []


def test_missing_input_file(tmp_path):
    _, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=2)
    with pytest.raises(InputError, match="--input_file: no file matches .*nope"):
        run_ours(input_file=str(tmp_path / "nope*.txt"), vocab_file=vocab,
                 output_file=str(tmp_path / "out.tfrecord"))
    assert_no_output(str(tmp_path))


def test_missing_or_incomplete_vocab(tmp_path):
    corpus, _, _, _ = tagged_corpus(str(tmp_path), num_docs=2)
    with pytest.raises(InputError, match="--vocab_file.*not found"):
        run_ours(input_file=corpus, vocab_file=str(tmp_path / "missing_vocab.txt"),
                 output_file=str(tmp_path / "out.tfrecord"))
    no_mask = write_lines(str(tmp_path / "v.txt"), ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"])
    with pytest.raises(InputError, match=r"lacks the special token\(s\) \[MASK\]"):
        run_ours(input_file=corpus, vocab_file=no_mask, output_file=str(tmp_path / "out.tfrecord"))
    assert_no_output(str(tmp_path))


@pytest.mark.parametrize("workers", [1, 2])
def test_empty_corpus(tmp_path, workers):
    _, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=2)
    empty = write_lines(str(tmp_path / "empty.txt"), ["", "   ", "\x01", ""])
    with pytest.raises(InputError, match="no text found in .*empty.txt"):
        run_ours(input_file=empty, vocab_file=vocab, output_file=str(tmp_path / "out.tfrecord"),
                 num_workers=workers, shard_size_mb=0.001 if workers > 1 else 0.0)
    assert_no_output(str(tmp_path))


@pytest.mark.parametrize("workers", [1, 2])
def test_non_utf8_input_names_file_and_line(tmp_path, workers):
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=4)
    with open(corpus, "ab") as f:
        f.write(b"fine line\nbad \xff\xfe line\n")
    with open(corpus, "rb") as f:
        bad_line = f.read().split(b"\n").index(b"bad \xff\xfe line") + 1
    out = str(tmp_path / "out.tfrecord")
    with open(out, "wb") as f:
        f.write(b"previous contents")
    with pytest.raises(InputError, match=re.escape("%s, line %d: not valid UTF-8"
                                                  % (corpus, bad_line))):
        run_ours(input_file=corpus, vocab_file=vocab, output_file=out + "," + out + "2",
                 num_workers=workers, shard_size_mb=0.001 if workers > 1 else 0.0)
    # Nothing half-written: the old file is untouched, no other file appears.
    assert open(out, "rb").read() == b"previous contents"
    assert sorted(p for p in os.listdir(str(tmp_path)) if p.startswith("out")) == [
        "out.tfrecord"]


def test_one_sentence_documents(tmp_path):
    """Each one-sentence document gives instances whose B is random (label 1);
    a corpus that is a single one-sentence document pairs it with itself."""
    vocab = tiny.write_vocab(str(tmp_path), ["alpha", "beta", "gamma", "delta"])
    corpus = write_lines(str(tmp_path / "one.txt"),
                         ["alpha beta", "", "gamma delta gamma", "", "beta"])
    out = str(tmp_path / "out.tfrecord")
    run_ours(input_file=corpus, vocab_file=vocab, output_file=out, dupe_factor=4)
    records = read_records([out])
    assert len(records) == 12
    assert all(tiny.example_features(r)["next_sentence_labels"][1] == [1] for r in records)

    single = write_lines(str(tmp_path / "single.txt"), ["alpha beta gamma"])
    run_ours(input_file=single, vocab_file=vocab, output_file=out, dupe_factor=3)
    records = read_records([out])
    assert len(records) == 3
    for record in records:
        assert original_tokens(tiny.example_features(record)) == [2, 5, 6, 7, 3, 5, 6, 7, 3]


def test_max_predictions_smaller_than_needed_caps_with_warning(tmp_path, caplog):
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=10)
    out = str(tmp_path / "out.tfrecord")
    with caplog.at_level("WARNING"):
        run_ours(input_file=corpus, vocab_file=vocab, output_file=out, max_seq_length=64,
                 max_predictions_per_seq=2, short_seq_prob=0.0)
    records = read_records([out])
    for record in records:
        f = tiny.example_features(record)
        # Every instance has n >= 23 tokens (two 10-token sentences) and
        # wants round(n * 0.15) >= 3 predictions: capped at 2, as the original.
        assert sum(f["input_mask"][1]) >= 23
        assert f["masked_lm_weights"][1] == [1.0, 1.0]
    assert "%d of %d instances wanted more masked-LM predictions" % (
        len(records), len(records)) in caplog.text


@pytest.mark.parametrize("flag,value,message", [
    ("max_seq_length", 4, "--max_seq_length=4 is too small"),
    ("max_predictions_per_seq", 0, "--max_predictions_per_seq must be at least 1"),
    ("masked_lm_prob", 1.5, "--masked_lm_prob must be in"),
    ("dupe_factor", 0, "--dupe_factor must be at least 1"),
    ("num_workers", 0, "--num_workers must be at least 1"),
])
def test_bad_flag_values(tmp_path, flag, value, message):
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=2)
    with pytest.raises(InputError, match=message):
        run_ours(input_file=corpus, vocab_file=vocab,
                 output_file=str(tmp_path / "out.tfrecord"), **{flag: value})


def test_missing_output_directory(tmp_path):
    corpus, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=2)
    with pytest.raises(InputError, match="directory .*no_such_dir does not exist"):
        run_ours(input_file=corpus, vocab_file=vocab,
                 output_file=str(tmp_path / "no_such_dir" / "out.tfrecord"))


@pytest.mark.slow
def test_command_line_error_is_one_line(tmp_path):
    _, vocab, _, _ = tagged_corpus(str(tmp_path), num_docs=2)
    proc = subprocess.run(
        [sys.executable, "create_pretraining_data.py", "--input_file=%s/none.txt" % tmp_path,
         "--output_file=%s/out.tfrecord" % tmp_path, "--vocab_file=" + vocab],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "ERROR: --input_file: no file matches %s/none.txt" % tmp_path in proc.stderr
    assert "Traceback" not in proc.stderr


def test_statistics_helper_is_not_vacuous():
    # original_tokens really restores masked labels.
    f = {"input_ids": ("int64_list", [2, 4, 9, 3, 4, 3, 0]),
         "input_mask": ("int64_list", [1] * 6 + [0]),
         "masked_lm_positions": ("int64_list", [1, 4, 0]),
         "masked_lm_ids": ("int64_list", [7, 8, 0]),
         "masked_lm_weights": ("float_list", [1.0, 1.0, 0.0])}
    assert original_tokens(f) == [2, 7, 9, 3, 8, 3]
