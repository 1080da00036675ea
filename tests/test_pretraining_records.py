"""Tests of pretraining_records.py: the hand-written tf.train.Example
encoder and TFRecord framing, held against TensorFlow's own parser
(tf.train.Example.FromString, tf.io.parse_single_example) and reader
(tf.data.TFRecordDataset, tf.io.TFRecordWriter)."""

import os
import random
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from google import protobuf

from scriptkit import pretraining_records as records
import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Varint lengths change at each power of 128; int64 ends at 2**63.
EDGE_INTS = [0, 1, 127, 128, 16383, 16384, 30521, 2 ** 31, 2 ** 32, INT64_MAX]
NEGATIVE_INTS = [-1, -128, INT64_MIN]
EDGE_FLOATS = [0.0, 1.0, -0.0, 0.5, -2.5, 1e-30, 3.4028234663852886e38]

# Protobuf 4 (TensorFlow 2.15) serializes the features map in a fixed
# order, the one the encoder writes; protobuf 7 (TensorFlow 2.21) seeds its
# map order per process, so there only parsed values can be compared.
MAP_ORDER_IS_FIXED = int(protobuf.__version__.split(".")[0]) < 5


def float32(values):
    return [float(v) for v in np.asarray(values, np.float32)]


def protobuf_example(values):
    """tf.train.Example built as the original script builds it: features
    added in FEATURE_NAMES order."""
    feature = {}
    for name in records.FEATURE_NAMES:
        if name not in values:
            continue
        if name == "masked_lm_weights":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values[name]))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values[name]))
    return tf.train.Example(features=tf.train.Features(feature=feature))


# ---------------------------------------------------------------------------
# A general encoder (any lengths, any int64 values), slow and plain: the
# reference the module's fast `ExampleEncoder` is held against.

_SPECS = {spec.name: spec for spec in records.FEATURES}


def _int64_varint(value):
    """Varint of an int64 value: a negative one as its 64-bit two's
    complement (10 bytes), as protobuf writes int64 (not sint64)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("%d does not fit an int64" % value)
    return records._varint(value % (1 << 64))


def _packed(kind, values):
    """The packed payload of a list of `kind` values: 4-byte little-endian
    floats (rounded to float32, as FloatList stores them) or varints."""
    if kind == "float":
        return struct.pack("<%df" % len(values), *values)
    return b"".join([_int64_varint(v) for v in values])


def encode_example(values):
    """dict name -> list of values (names of FEATURE_NAMES; others raise
    ValueError) -> tf.train.Example bytes, the features in SERIALIZED_ORDER
    as protobuf 4 writes them; features left out are not written."""
    unknown = sorted(set(values) - set(records.FEATURE_NAMES))
    if unknown:
        raise ValueError("Not pre-training features: %s" % ", ".join(unknown))
    features = b"".join([
        records._feature_entry(name, _packed(_SPECS[name].kind, values[name]))
        for name in records.SERIALIZED_ORDER if name in values])
    return records._TAG_FEATURES + records._length_varint(len(features)) + features


def random_features(rng, allow_negative=False):
    """Features of random lengths (empty lists included) and values."""
    values = {}
    for spec in records.FEATURES:
        n = rng.choice([0, 1, 2, rng.randint(0, 200)])
        if spec.kind == "float":
            values[spec.name] = float32([rng.choice(EDGE_FLOATS + [rng.uniform(-1e6, 1e6)])
                                         for _ in range(n)])
        else:
            pool = EDGE_INTS + (NEGATIVE_INTS if allow_negative else [])
            values[spec.name] = [rng.choice(pool + [rng.randint(0, 1 << rng.randint(1, 62))])
                                 for _ in range(n)]
    return values


def padded_features(input_ids, num_a, positions, ids, is_random_next, seq, pred):
    """What ExampleEncoder.encode should write, as value lists."""
    n, k = len(input_ids), len(positions)
    return {
        "input_ids": input_ids + [0] * (seq - n),
        "input_mask": [1] * n + [0] * (seq - n),
        "segment_ids": [0] * (num_a + 2) + [1] * (n - num_a - 2) + [0] * (seq - n),
        "masked_lm_positions": positions + [0] * (pred - k),
        "masked_lm_ids": ids + [0] * (pred - k),
        "masked_lm_weights": [1.0] * k + [0.0] * (pred - k),
        "next_sentence_labels": [1 if is_random_next else 0],
    }


def random_instance(rng, vocab_size, seq, pred):
    n = rng.randint(5, seq)
    num_a = rng.randint(1, n - 4)
    input_ids = [rng.choice([0, 1, 127, 128, vocab_size - 1, rng.randrange(vocab_size)])
                 for _ in range(n)]
    positions = sorted(rng.sample(range(1, n - 1), rng.randint(0, min(pred, n - 2))))
    ids = [rng.randrange(vocab_size) for _ in positions]
    return input_ids, num_a, positions, ids, rng.random() < 0.5


# ---------------------------------------------------------------------------
# The schema.

def test_schema():
    assert records.FEATURE_NAMES == (
        "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
        "masked_lm_weights", "next_sentence_labels")
    assert [s.kind for s in records.FEATURES] == ["int64"] * 5 + ["float", "int64"]
    assert {s.name: s.size(128, 20) for s in records.FEATURES} == {
        "input_ids": 128, "input_mask": 128, "segment_ids": 128,
        "masked_lm_positions": 20, "masked_lm_ids": 20, "masked_lm_weights": 20,
        "next_sentence_labels": 1}
    schema = records.name_to_features(128, 20)
    assert list(schema) == list(records.FEATURE_NAMES)
    assert schema["input_ids"] == tf.io.FixedLenFeature([128], tf.int64)
    assert schema["masked_lm_weights"] == tf.io.FixedLenFeature([20], tf.float32)
    assert schema["next_sentence_labels"] == tf.io.FixedLenFeature([1], tf.int64)


def test_module_does_not_import_tensorflow():
    code = ("import sys\nfrom scriptkit import pretraining_records as r\n"
            "e = r.ExampleEncoder(10, 8, 2).encode([2, 5, 3, 6, 3], 1, [1], [5], 0)\n"
            "r.frame_records([e]), r.decode_example(e)\n"
            "print('TF_LOADED', 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert "TF_LOADED False" in out.stdout, out.stderr[-2000:]


# ---------------------------------------------------------------------------
# The encoder, against protobuf and TensorFlow's parser.

@pytest.mark.parametrize("allow_negative", [False, True])
def test_encode_example_parses_to_the_same_values(allow_negative):
    rng = random.Random(1 + allow_negative)
    for _ in range(300):
        values = random_features(rng, allow_negative)
        data = encode_example(values)
        kinds = {s.name: s.kind + "_list" for s in records.FEATURES}
        assert tiny.example_features(data) == {name: (kinds[name], v) for name, v in values.items()}
        assert records.decode_example(data) == values
        # TensorFlow's own op, too (variable lengths: VarLenFeature).
        schema = {s.name: tf.io.VarLenFeature(tf.float32 if s.kind == "float" else tf.int64)
                  for s in records.FEATURES}
        tensors = tf.io.parse_single_example(data, schema)
        for name, v in values.items():
            assert tensors[name].values.numpy().tolist() == v, name
        expected = protobuf_example(values).SerializeToString()
        if MAP_ORDER_IS_FIXED:
            assert data == expected
        else:
            assert tiny.example_features(expected) == tiny.example_features(data)


def test_edge_values():
    values = {"input_ids": EDGE_INTS + NEGATIVE_INTS, "input_mask": [],
              "masked_lm_weights": EDGE_FLOATS, "next_sentence_labels": [1]}
    data = encode_example(values)
    example = tf.train.Example.FromString(data)
    feature = example.features.feature
    assert list(feature["input_ids"].int64_list.value) == EDGE_INTS + NEGATIVE_INTS
    assert feature["input_mask"].WhichOneof("kind") == "int64_list"
    assert list(feature["input_mask"].int64_list.value) == []
    assert list(feature["masked_lm_weights"].float_list.value) == float32(EDGE_FLOATS)
    assert sorted(feature) == sorted(values)
    # A negative int64 takes 10 bytes (64-bit two's complement), as in protobuf.
    assert len(encode_example({"input_ids": [-1]})) == len(
        encode_example({"input_ids": [1]})) + 9
    with pytest.raises(ValueError, match="does not fit an int64"):
        encode_example({"input_ids": [INT64_MAX + 1]})
    with pytest.raises(ValueError, match="Not pre-training features: label"):
        encode_example({"label": [1]})


def test_example_encoder_equals_encode_example_and_parses():
    """The fast encoder writes `encode_example` of the padded features; they
    parse with run_pretraining's schema (name_to_features) to those values."""
    rng = random.Random(3)
    for vocab_size, seq, pred in [(30522, 128, 20), (100, 8, 3), (200, 300, 45)]:
        encoder = records.ExampleEncoder(vocab_size, seq, pred)
        schema = records.name_to_features(seq, pred)
        for _ in range(200):
            instance = random_instance(rng, vocab_size, seq, pred)
            data = encoder.encode(*instance)
            values = padded_features(*instance, seq, pred)
            assert data == encode_example(values)
            assert records.decode_example(data) == values
            tensors = tf.io.parse_single_example(data, schema)
            assert {name: t.numpy().tolist() for name, t in tensors.items()} == values


def test_unmasked_records_equal_encode_example_and_parse():
    """`encode_unmasked` (dynamic masking) writes `encode_example` of the
    four unmasked features, which parse with the UNMASKED schema, protobuf
    reads back, and `record_kind` tells from the masked records."""
    rng = random.Random(4)
    encoder = records.ExampleEncoder(1000, 40, 6)
    schema = records.name_to_features(40, 6, records.UNMASKED)
    assert sorted(schema) == ["input_ids", "input_mask", "next_sentence_labels",
                              "segment_ids"]
    for _ in range(100):
        input_ids, num_a, _, _, is_random_next = random_instance(rng, 1000, 40, 6)
        data = encoder.encode_unmasked(input_ids, num_a, is_random_next)
        values = {name: v for name, v in padded_features(
            input_ids, num_a, [], [], is_random_next, 40, 6).items() if name in schema}
        assert data == encode_example(values)
        assert {name: v[1] for name, v in tiny.example_features(data).items()} == values
        tensors = tf.io.parse_single_example(data, schema)
        assert {name: t.numpy().tolist() for name, t in tensors.items()} == values
        assert records.record_kind(tiny.example_features(data)) == records.UNMASKED
    masked = encoder.encode(*random_instance(rng, 1000, 40, 6))
    assert records.record_kind(tiny.example_features(masked)) == records.MASKED


def test_protobuf_writes_the_encoders_map_order():
    """Where protobuf's map order is fixed (protobuf 4), an example built as
    the original builds it serializes to exactly the encoder's bytes: the
    byte identity with the original's files rests on this."""
    if not MAP_ORDER_IS_FIXED:
        pytest.skip("protobuf %s orders map entries per process" % protobuf.__version__)
    rng = random.Random(4)
    encoder = records.ExampleEncoder(30522, 128, 20)
    for _ in range(100):
        instance = random_instance(rng, 30522, 128, 20)
        values = padded_features(*instance, 128, 20)
        assert protobuf_example(values).SerializeToString() == encoder.encode(*instance)


def test_any_entry_order_parses_the_same():
    """A map has no order: entries written in any order parse alike (only
    byte identity depends on SERIALIZED_ORDER)."""
    rng = random.Random(5)
    values = random_features(rng)
    reference = tiny.example_features(encode_example(values))
    for _ in range(5):
        names = list(values)
        rng.shuffle(names)
        entries = b"".join(records._feature_entry(
            name, _packed(_SPECS[name].kind, values[name])) for name in names)
        data = b"\x0a" + records._varint(len(entries)) + entries
        assert tiny.example_features(data) == reference


def test_decode_example_reads_unpacked_lists():
    """Protobuf parsers accept repeated scalars packed or not; so does
    decode_example (TensorFlow writes them packed)."""
    int_list = b"".join(b"\x08" + records._varint(v % (1 << 64)) for v in [5, 300, -2])
    float_list = b"".join(b"\x0d" + struct.pack("<f", v) for v in [1.0, 0.25])

    def entry(name, tag, value_list):
        key = name.encode()
        feature = tag + records._varint(len(value_list)) + value_list
        body = (b"\x0a" + bytes([len(key)]) + key + b"\x12"
                + records._varint(len(feature)) + feature)
        return b"\x0a" + records._varint(len(body)) + body

    features = entry("input_ids", b"\x1a", int_list) + entry("masked_lm_weights", b"\x12",
                                                             float_list)
    data = b"\x0a" + records._varint(len(features)) + features
    assert tiny.example_features(data) == {"input_ids": ("int64_list", [5, 300, -2]),
                            "masked_lm_weights": ("float_list", [1.0, 0.25])}
    decoded = records.decode_example(data)
    assert decoded["input_ids"] == [5, 300, -2]
    assert decoded["masked_lm_weights"] == [1.0, 0.25]
    assert decoded["segment_ids"] == []


# ---------------------------------------------------------------------------
# TFRecord framing, against TensorFlow's reader and writer.

def test_crc32c_known_values():
    # RFC 3720 test vectors and the classic "123456789" check value.
    chunks = [b"123456789", b"\x00" * 32, b"\xff" * 32, bytes(range(32)), b""]
    expected = [0xE3069283, 0x8A9136AA, 0x62A8AB43, 0x46DD794E, 0]
    assert records.crc32c_batch(chunks).tolist() == expected
    assert [records.crc32c(c) for c in chunks] == expected
    rng = random.Random(6)
    chunks = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
              for _ in range(200)]
    assert records.crc32c_batch(chunks).tolist() == [records.crc32c(c) for c in chunks]


def write_framed(path, examples):
    with open(path, "wb") as f:
        f.write(b"".join(records.frame_records(examples)))
    return path


def read_with_tensorflow(path):
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def test_framing_is_tensorflows(tmp_path):
    rng = random.Random(7)
    # Empty, short and long records (lengths across varint and byte limits).
    examples = [b"", b"x"] + [bytes(rng.randrange(256) for _ in range(n))
                              for n in [127, 128, 255, 256, 16384, 70000]]
    encoder = records.ExampleEncoder(1000, 64, 8)
    examples += [encoder.encode(*random_instance(rng, 1000, 64, 8)) for _ in range(50)]
    ours = write_framed(str(tmp_path / "ours.tfrecord"), examples)
    assert read_with_tensorflow(ours) == examples
    theirs = str(tmp_path / "theirs.tfrecord")
    with tf.io.TFRecordWriter(theirs) as writer:
        for example in examples:
            writer.write(example)
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        assert a.read() == b.read()


def damaged_file(path, damage):
    """A file of three records, damaged in its second record (or cut off).
    Returns (path, the records)."""
    examples = [encode_example({"input_ids": [i, i + 1], "next_sentence_labels": [0]})
                for i in range(3)]
    write_framed(path, examples)
    assert read_with_tensorflow(path) == examples
    data = bytearray(open(path, "rb").read())
    second = len(records.frame_records(examples[:1])[0])  # Where record 2 starts.
    flipped = {"length": 0, "length_crc": 8, "data": 12, "data_crc": 12 + len(examples[1])}
    if damage in flipped:
        data[second + flipped[damage]] ^= 0x01
    elif damage == "truncated_data":
        data = data[:-5]
    else:  # Cut inside the second record's header.
        data = data[:second + 6]
    with open(path, "wb") as f:
        f.write(bytes(data))
    return path, examples


@pytest.mark.parametrize("damage", ["length", "length_crc", "data", "data_crc",
                                    "truncated_data"])
def test_damaged_records_are_detected_by_tensorflow(tmp_path, damage):
    path, _ = damaged_file(str(tmp_path / "records.tfrecord"), damage)
    with pytest.raises(tf.errors.DataLossError):
        read_with_tensorflow(path)


def test_file_cut_inside_a_header(tmp_path):
    """TensorFlow's reader takes a file that ends inside a record header as
    ending before that record, without an error; the check of the input
    files catches it."""
    from scriptkit import errors
    path, examples = damaged_file(str(tmp_path / "records.tfrecord"), "truncated_header")
    assert read_with_tensorflow(path) == examples[:1]
    with pytest.raises(errors.InputError, match="truncated"):
        records.check_tfrecord_file("input_file", path)
