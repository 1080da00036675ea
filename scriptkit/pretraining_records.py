"""The pre-training record: its features, and how it is written.

One home for what create_pretraining_data.py writes and run_pretraining.py
reads:

* `FEATURES`: the seven features of a record (name, value kind, length in
  terms of --max_seq_length / --max_predictions_per_seq).
  `UNMASKED_FEATURES`: the four of a record written for dynamic masking
  (create_pretraining_data.py --dynamic_masking): the token ids unmasked
  and no masked_lm_* features, which is how such records are recognised
  (`record_kind`).
* `ExampleEncoder`: tf.train.Example bytes written directly in the
  protobuf wire format, without TensorFlow or protobuf; `decode_example`
  reads them back.
* `frame_records`: TFRecord framing (length, data, masked CRC-32C of both),
  and `check_tfrecord_file`, which walks the framing of a file.
* `VocabTables`: the id tables that masking needs of the vocabulary, for
  the masks written (create_pretraining_data.py) and those drawn as
  records are read (dynamic_masking.py) alike.
* `name_to_features`: the schema as tf.io.parse_single_example wants it.
  This is the only function that imports TensorFlow, so that the writer
  runs without it (~440 MB and seconds of import per process).

The wire-format assumptions are stated where they are used, and
tests/test_pretraining_records.py holds them against TensorFlow's own
parser and TFRecord reader.

Differences from the original (where create_pretraining_data.py and
run_pretraining.py each spell out the features):

* The records are written without TensorFlow or protobuf, and are
  byte-identical to those of Google's script under TensorFlow 2.15
  (`SERIALIZED_ORDER`).
* New: the unmasked records of dynamic masking (`UNMASKED_FEATURES`), and a
  TFRecord file's framing checked before training (`check_tfrecord_file`).
"""

import struct
from typing import NamedTuple, Union

import numpy as np

from scriptkit import errors
from scriptkit import file_io


# ---------------------------------------------------------------------------
# The schema.

class FeatureSpec(NamedTuple):
    """One feature of a pre-training record.

    Attributes:
      name: the feature's key in tf.train.Example's feature map.
      kind: "int64" (an Int64List) or "float" (a FloatList).
      length: number of values: "max_seq_length" or "max_predictions_per_seq"
        (the flag of that name, which both scripts have), or a fixed number.
    """

    name: str
    kind: str
    length: Union[str, int]

    def size(self, max_seq_length, max_predictions_per_seq):
        """Number of values for the given flag values (ints)."""
        if self.length == "max_seq_length":
            return max_seq_length
        if self.length == "max_predictions_per_seq":
            return max_predictions_per_seq
        return self.length


# In the order create_pretraining_data.py builds (and logs) them.
FEATURES = (
    FeatureSpec("input_ids", "int64", "max_seq_length"),
    FeatureSpec("input_mask", "int64", "max_seq_length"),
    FeatureSpec("segment_ids", "int64", "max_seq_length"),
    FeatureSpec("masked_lm_positions", "int64", "max_predictions_per_seq"),
    FeatureSpec("masked_lm_ids", "int64", "max_predictions_per_seq"),
    FeatureSpec("masked_lm_weights", "float", "max_predictions_per_seq"),
    FeatureSpec("next_sentence_labels", "int64", 1),
)

FEATURE_NAMES = tuple(spec.name for spec in FEATURES)

# The records of dynamic masking: the masks are drawn as the records are
# read (dynamic_masking.py), so the ids are the text's and nothing says
# what to predict.
UNMASKED_FEATURES = tuple(spec for spec in FEATURES
                          if not spec.name.startswith("masked_lm_"))

# The two kinds of records (`record_kind`).
MASKED = "masked"
UNMASKED = "unmasked"


def record_kind(feature_names):
    """MASKED (masks written by create_pretraining_data.py) or UNMASKED
    (written with --dynamic_masking) for the feature names of a record."""
    return MASKED if "masked_lm_positions" in feature_names else UNMASKED


def features_of(kind):
    """The `FeatureSpec`s of records of `kind` (MASKED or UNMASKED)."""
    return FEATURES if kind == MASKED else UNMASKED_FEATURES


def name_to_features(max_seq_length, max_predictions_per_seq, kind=MASKED):
    """The schema for tf.io.parse_single_example of records of `kind`.

    Returns:
      dict name -> tf.io.FixedLenFeature([length]) of dtype tf.int64, or
      tf.float32 for "float" features; parsing a record gives tensors of
      shape [length].
    """
    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow without its start-up noise)
    import tensorflow as tf
    dtypes = {"int64": tf.int64, "float": tf.float32}
    return {spec.name: tf.io.FixedLenFeature(
        [spec.size(max_seq_length, max_predictions_per_seq)], dtypes[spec.kind])
        for spec in features_of(kind)}


# ---------------------------------------------------------------------------
# The vocabulary, as masking sees it.

class VocabTables:
    """The id tables of a vocabulary that masking needs, one definition for
    create_pretraining_data.py's masks and dynamic_masking.py's.

    Args:
      vocab: dict token -> id, in the vocabulary file's order
        (tokenization.load_vocab).
      vocab_file: its path, and `flag_name` the flag that named it, for
        the error.
      specials: the special tokens it must hold, in the order the error
        lists the missing ones.

    Attributes:
      cls_id, sep_id, mask_id: ids of [CLS], [SEP], [MASK].
      word_ids: the ids random replacements are drawn from, one per entry
        of the vocabulary in its order (so that a random index picks the
        word that Google's script picks from list(vocab.keys())).
      is_continuation: list of bools by id: whether the token is a "##"
        piece (continues the word before it).
      size: largest id + 1.

    Raises:
      errors.InputError: a special token is missing.
    """

    def __init__(self, vocab, vocab_file, specials=("[CLS]", "[SEP]", "[MASK]"),
                 flag_name="vocab_file"):
        missing = [t for t in specials if t not in vocab]
        if missing:
            raise errors.InputError("--%s %s lacks the special token(s) %s"
                                    % (flag_name, vocab_file, " ".join(missing)))
        self.cls_id, self.sep_id, self.mask_id = (vocab["[CLS]"], vocab["[SEP]"],
                                                  vocab["[MASK]"])
        self.word_ids = [vocab[w] for w in vocab.keys()]
        self.size = max(vocab.values()) + 1
        self.is_continuation = [False] * self.size
        for token, index in vocab.items():
            if token.startswith("##"):
                self.is_continuation[index] = True


# ---------------------------------------------------------------------------
# tf.train.Example in the protobuf wire format.
#
# The messages (tensorflow/core/example/{example,feature}.proto, proto3):
#
#   Example   { Features features = 1; }
#   Features  { map<string, Feature> feature = 1; }
#   Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
#                            Int64List int64_list = 3; } }
#   FloatList { repeated float value = 1 [packed = true]; }
#   Int64List { repeated int64 value = 1 [packed = true]; }
#
# A field is written as a tag, varint(field number << 3 | wire type), then
# its value; every message field here has wire type 2 (length-delimited:
# varint length, then the bytes), so its tag is the byte
# field_number * 8 + 2. A map is a repeated message field whose entries are
# messages {key = 1, value = 2}. Protobuf writes a message's fields in field
# number order (so an entry's key before its value) and the wire format
# does not depend on the byte order of the machine; parsers accept fields in
# any order, so only byte identity with protobuf's output depends on it.

_TAG_FEATURES = b"\x0a"      # Example.features, and Features.feature (entries)
_TAG_ENTRY_KEY = b"\x0a"     # map entry: key (a string)
_TAG_ENTRY_VALUE = b"\x12"   # map entry: value (a Feature)
_TAG_PACKED_VALUES = b"\x0a"  # FloatList.value / Int64List.value, packed
# Feature's oneof: the field, and so the tag, says which list it holds.
_KIND_TAG = {"float": b"\x12", "int64": b"\x1a"}
_KIND_OF_FIELD = {2: "float", 3: "int64"}

# The order in which the entries of the features map are written. Any
# order parses to the same example (a map has none), but Google's script's
# bytes have this one: protobuf 4 (upb, with TensorFlow 2.15) serializes its
# seven-entry map in this order, the order of its hash table, so writing it
# makes the files byte-identical. (Protobuf 7, with TensorFlow 2.21, seeds
# its map order per process: there no fixed order reproduces that script's
# bytes, and this one is as good as any.)
SERIALIZED_ORDER = ("masked_lm_ids", "input_ids", "masked_lm_positions",
                    "next_sentence_labels", "input_mask", "masked_lm_weights",
                    "segment_ids")
assert sorted(SERIALIZED_ORDER) == sorted(FEATURE_NAMES)

_UINT64 = 1 << 64


def _varint(value):
    """Protobuf base-128 varint (little-endian groups of 7 bits, the high bit
    set on all but the last byte) of an int in [0, 2**64)."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Varints of the lengths that occur (looked up: the writer's hot path).
_LENGTH_VARINTS = [_varint(n) for n in range(1 << 14)]


def _length_varint(n):
    return _LENGTH_VARINTS[n] if n < len(_LENGTH_VARINTS) else _varint(n)


def _entry_prefix(spec):
    """(bytes of a map entry up to its value's length: key tag, key length,
    key, value tag; the Feature field of the spec's kind)."""
    key = spec.name.encode("utf-8")
    return (_TAG_ENTRY_KEY + _varint(len(key)) + key + _TAG_ENTRY_VALUE,
            _KIND_TAG[spec.kind])


_ENTRY_PREFIX = {spec.name: _entry_prefix(spec) for spec in FEATURES}


def _feature_entry(name, payload):
    """One entry of the features map, given its packed values.

    Args:
      name: a name of `FEATURE_NAMES`.
      payload: the packed values (varints, or 4-byte floats; little-endian).

    Returns:
      bytes: the entry as a Features.feature field, tag and length included.
    """
    key_prefix, tag = _ENTRY_PREFIX[name]
    length = _length_varint
    # Protobuf writes no packed field for an empty list (proto3 leaves out
    # empty repeated fields), but the list message itself is written, empty,
    # since the oneof is set: b"\x1a\x00" for an empty Int64List.
    values = _TAG_PACKED_VALUES + length(len(payload)) + payload if payload else b""
    feature = tag + length(len(values)) + values
    entry = key_prefix + length(len(feature)) + feature
    return _TAG_FEATURES + length(len(entry)) + entry


_FLOAT_ONE = struct.pack("<f", 1.0)
_FLOAT_ZERO = struct.pack("<f", 0.0)


class ExampleEncoder:
    """Serializes pre-training instances as tf.train.Example bytes, those
    of the padded features in `SERIALIZED_ORDER` (fast: varints are looked
    up, features that depend only on lengths are made once; the tests hold
    it against a general encoder and protobuf).

    Args:
      vocab_size: token ids are in [0, vocab_size).
      max_seq_length, max_predictions_per_seq: the padded feature lengths.
    """

    def __init__(self, vocab_size, max_seq_length, max_predictions_per_seq):
        # The varint of every id and position: they are non-negative (so
        # their int64 encoding is the plain varint) and below this.
        self._varints = [_varint(i) for i in range(max(vocab_size, max_seq_length, 1 << 14))]
        self._max_seq_length = max_seq_length
        self._max_predictions = max_predictions_per_seq
        # Entries that depend only on lengths (or a label), made once each.
        self._labels = [_feature_entry("next_sentence_labels", bytes([v])) for v in (0, 1)]
        self._masks = {}
        self._segments = {}
        self._weights = {}

    def _common_entries(self, input_ids, num_a):
        """(input_ids entry, input_mask entry, segment_ids entry) of an
        unpadded [CLS] A [SEP] B [SEP] with `num_a` tokens in A."""
        varints = self._varints
        n = len(input_ids)
        pad = self._max_seq_length - n
        entry = _feature_entry
        # Small values (0, 1, padding zeros) are one-byte varints.
        mask = self._masks.get(n)
        if mask is None:
            mask = self._masks[n] = entry("input_mask", b"\x01" * n + b"\x00" * pad)
        segments = self._segments.get((num_a, n))
        if segments is None:
            segments = self._segments[(num_a, n)] = entry(
                "segment_ids",
                b"\x00" * (num_a + 2) + b"\x01" * (n - num_a - 2) + b"\x00" * pad)
        ids = entry("input_ids", b"".join([varints[i] for i in input_ids]) + b"\x00" * pad)
        return ids, mask, segments

    def encode_unmasked(self, input_ids, num_a, is_random_next):
        """One instance without masks (dynamic masking) -> serialized
        tf.train.Example of the `UNMASKED_FEATURES`.

        Args:
          input_ids: list of ids, [CLS] A [SEP] B [SEP] as in the text
            (unpadded, at most max_seq_length).
          num_a: number of tokens in A.
          is_random_next: whether B is a random other sentence (label 1).

        Returns:
          bytes: input_ids, input_mask, segment_ids [max_seq_length] padded
          with zeros, next_sentence_labels [1]; in `SERIALIZED_ORDER`.
        """
        ids, mask, segments = self._common_entries(input_ids, num_a)
        features = b"".join([ids, self._labels[1 if is_random_next else 0], mask, segments])
        return _TAG_FEATURES + _length_varint(len(features)) + features

    def encode(self, input_ids, num_a, masked_positions, masked_ids, is_random_next):
        """One instance -> serialized tf.train.Example.

        Args:
          input_ids: list of ids, [CLS] A [SEP] B [SEP] after masking
            (unpadded, at most max_seq_length).
          num_a: number of tokens in A (segment 0 is [CLS] A [SEP]).
          masked_positions, masked_ids: the masked-LM targets (at most
            max_predictions_per_seq), sorted by position.
          is_random_next: whether B is a random other sentence (label 1).

        Returns:
          bytes, with every feature of `FEATURES` padded with zeros to its
          length: input_ids, input_mask, segment_ids [max_seq_length];
          masked_lm_positions, masked_lm_ids, masked_lm_weights (1.0 per
          target, then 0.0) [max_predictions_per_seq]; next_sentence_labels [1].
        """
        varints = self._varints
        k = len(masked_positions)
        pad_k = self._max_predictions - k
        entry = _feature_entry
        ids, mask, segments = self._common_entries(input_ids, num_a)
        weights = self._weights.get(k)
        if weights is None:
            weights = self._weights[k] = entry(
                "masked_lm_weights", _FLOAT_ONE * k + _FLOAT_ZERO * pad_k)
        # In SERIALIZED_ORDER (tests/test_pretraining_records.py checks it).
        features = b"".join([
            entry("masked_lm_ids",
                  b"".join([varints[i] for i in masked_ids]) + b"\x00" * pad_k),
            ids,
            entry("masked_lm_positions",
                  b"".join([varints[i] for i in masked_positions]) + b"\x00" * pad_k),
            self._labels[1 if is_random_next else 0],
            mask,
            weights,
            segments,
        ])
        return _TAG_FEATURES + _length_varint(len(features)) + features


def _read_varint(data, pos):
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data):
    """Yields (field number, wire type, value) of a message's fields: an int
    for varints (type 0), bytes for the others (1: 8 bytes, 2: length-
    delimited, 5: 4 bytes)."""
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        wire_type = tag & 7
        if wire_type == 0:
            value, pos = _read_varint(data, pos)
        else:
            if wire_type == 2:
                size, pos = _read_varint(data, pos)
            elif wire_type in (1, 5):
                size = 8 if wire_type == 1 else 4
            else:
                raise ValueError("Unsupported protobuf wire type %d" % wire_type)
            value = data[pos:pos + size]
            pos += size
        yield tag >> 3, wire_type, value


def _int64(value):
    return value - _UINT64 if value >= 1 << 63 else value


def _list_values(kind, list_message):
    """Values of a FloatList / Int64List message, packed or not."""
    values = []
    for number, wire_type, value in _fields(list_message):
        if number != 1:
            continue
        if kind == "float":
            values.extend(struct.unpack("<%df" % (len(value) // 4), value))
        elif wire_type == 0:
            values.append(_int64(value))
        else:
            pos = 0
            while pos < len(value):
                item, pos = _read_varint(value, pos)
                values.append(_int64(item))
    return values


def decode_example(data):
    """Serialized tf.train.Example -> {name: list of values} of the
    `FEATURE_NAMES` (in that order; [] for a missing feature). Floats come
    back as Python floats of their float32 values.

    Raises:
      ValueError: a feature holds a BytesList, or the bytes are not a
        protobuf message.
    """
    features = {}
    for number, _, features_message in _fields(data):
        if number != 1:
            continue
        for _, _, entry in _fields(features_message):
            fields = {n: v for n, _, v in _fields(entry)}
            name = fields.get(1, b"").decode("utf-8")
            values = []
            for kind_field, _, list_message in _fields(fields.get(2, b"")):
                if kind_field not in _KIND_OF_FIELD:
                    raise ValueError("Feature %r is not an int64 or float list" % name)
                values = _list_values(_KIND_OF_FIELD[kind_field], list_message)
            features[name] = values
    return {name: features.get(name, []) for name in FEATURE_NAMES}


# ---------------------------------------------------------------------------
# TFRecord framing.
#
# A TFRecord file is a sequence of records, each
#   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
# with the integers little-endian, the length's CRC taken over its 8 bytes.
# CRC-32C is the Castagnoli CRC (reflected polynomial 0x82F63B78, initial
# value and final XOR 0xFFFFFFFF); "masked" rotates it right by 15 bits and
# adds 0xA282EAD8 (mod 2**32), as TensorFlow's crc32c::Mask does.

def _crc32c_table():
    table = np.zeros(256, np.uint32)
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table[i] = crc
    return table


_CRC_TABLE = _crc32c_table()
_CRC_TABLE_LIST = [int(x) for x in _CRC_TABLE]


def crc32c(data):
    """CRC-32C of `data` (bytes), an int (pure Python: for short data)."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE_LIST
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c_batch(chunks):
    """CRC-32C of each bytes object in `chunks` (a sequence).

    Vectorized across the chunks: one NumPy table step per byte position
    (the chunks sorted by length, so each step covers those still going).

    Returns:
      uint32 array [len(chunks)].
    """
    n = len(chunks)
    if n == 0:
        return np.zeros(0, np.uint32)
    lengths = np.fromiter(map(len, chunks), np.int64, n)
    order = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[order]
    max_len = int(sorted_lengths[0])
    rows = np.zeros((n, max_len), np.uint8)
    rows[np.arange(max_len) < sorted_lengths[:, None]] = np.frombuffer(
        b"".join([chunks[i] for i in order]), np.uint8)
    columns = np.ascontiguousarray(rows.T)
    del rows
    # Rows still active at each byte position (lengths are sorted descending).
    active = n - np.searchsorted(sorted_lengths[::-1], np.arange(max_len), side="right")
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    table = _CRC_TABLE
    for pos in range(max_len):
        k = active[pos]
        c = crc[:k]
        c[:] = table[(c ^ columns[pos, :k]) & 0xFF] ^ (c >> 8)
    result = np.empty(n, np.uint32)
    result[order] = crc ^ np.uint32(0xFFFFFFFF)
    return result


def mask_crc(crc):
    """TFRecord's masking of a CRC-32C value (int -> int)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data):
    """The checksum TFRecord stores for `data` (bytes): masked CRC-32C."""
    return mask_crc(crc32c(data))


_HEADER_CACHE = {}


def frame_records(examples):
    """Frames serialized examples as TFRecord records.

    Args:
      examples: sequence of bytes.

    Returns:
      list of bytes, one per example: length, its checksum, the example,
      its checksum. Their concatenation is a TFRecord file.
    """
    crcs = crc32c_batch(examples)
    framed = []
    for data, crc in zip(examples, crcs.tolist()):
        header = _HEADER_CACHE.get(len(data))
        if header is None:
            length = struct.pack("<Q", len(data))
            header = _HEADER_CACHE[len(data)] = length + struct.pack(
                "<I", masked_crc32c(length))
        framed.append(header + data + struct.pack("<I", mask_crc(crc)))
    return framed


def check_tfrecord_file(flag_name, path):
    """Walks the framing of a TFRecord file without reading its records.

    The length checksums are verified and the file must end exactly after
    its last record, so a truncated or overwritten file is found here rather
    than by a DataLossError in the middle of training. (The data checksums
    are left to the reader: checking them means reading everything.)

    Args:
      flag_name: the flag that named the file.
      path: the file (local or remote, see file_io's functions).

    Returns:
      The number of records.

    Raises:
      errors.InputError: naming the file, the byte offset and what is
        wrong there.
    """
    size = file_io.file_size(path)
    where = "--%s %s" % (flag_name, path)
    count = 0
    offset = 0
    with file_io.open_file(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            header = f.read(12)
            if len(header) < 12:
                raise errors.InputError(
                    "%s is truncated: it ends inside the header of record %d at byte offset "
                    "%d (file size %d); write the file again" % (where, count + 1, offset, size))
            (length,) = struct.unpack("<Q", header[:8])
            (stored_crc,) = struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != stored_crc:
                raise errors.InputError(
                    "%s cannot be read as TFRecord: the header of record %d at byte offset "
                    "%d fails its checksum (not a TFRecord file, or damaged there); write "
                    "the file again" % (where, count + 1, offset))
            end = offset + 12 + length + 4
            if end > size:
                raise errors.InputError(
                    "%s is truncated: record %d at byte offset %d needs %d bytes but the "
                    "file ends after %d; write the file again"
                    % (where, count + 1, offset, end - offset, size - offset))
            offset = end
            count += 1
    return count
