"""Create masked-LM / next-sentence TFRecord examples for BERT pre-training.

Input: plain text, one sentence per line, blank lines between documents.
Output: `tf.train.Example`s in TFRecord files with the features that
run_pretraining.py reads (input_ids, input_mask, segment_ids,
masked_lm_positions, masked_lm_ids, masked_lm_weights,
next_sentence_labels), written round-robin across the comma-separated
--output_file list. With --dynamic_masking the records hold the pairs
without masks (input_ids as in the text, input_mask, segment_ids,
next_sentence_labels), written once (--dupe_factor 1 unless given), and
run_pretraining.py draws the masks as it reads them (dynamic_masking.py).

Two modes:

* Default (--num_workers=1, --shard_size_mb=0; "original mode" in the
  code): the whole corpus is read, made into instances with one random
  generator seeded by --random_seed, and the instances are shuffled all
  together. Tokens are kept as integer arrays and instances as serialized
  bytes until that shuffle, but memory still grows with the corpus.
* Sharded (--num_workers=N > 1, or --shard_size_mb > 0): the corpus is cut, at
  document boundaries, into shards of about --shard_size_mb of text; each
  shard is processed on its own (random-next sentences come from the same
  shard, instances are shuffled within it) by a pool of N processes, with a
  random generator seeded from (--random_seed, shard index); the shards'
  instances are then mixed, in shard order, through a seeded shuffle buffer
  of --shuffle_buffer_size instances. Memory is bounded by the shard size,
  the number of workers and the buffer, not the corpus size, and the output
  depends only on the input, the flags and the seed: not on --num_workers.

TensorFlow is not imported for local files (it is only needed for gs:// and
other remote paths): examples are serialized and framed as TFRecords by
pretraining_records.py, which writes the protobuf wire format directly,
byte for byte as tf.train.Example.SerializeToString() does.

As a library, the module offers `create_training_instances`,
`create_instances_from_document`, `create_masked_lm_predictions`,
`truncate_seq_pair`, `write_instance_to_example_files` and
`TrainingInstance`, on token strings.

Differences from the original:

* None in the default mode's output: the same instances from the same
  random draws in the same order, so the files are byte-identical to
  Google's create_pretraining_data.py for the same input, flags and seed.
  (Under protobuf 7, as TensorFlow 2.21 ships it, Google's script orders
  map entries differently in each process, so its bytes cannot be
  reproduced there; ours stay those of TensorFlow 2.15.)
* Less than half the memory per MB of text, and no TensorFlow for local
  files.
* New: the sharded mode (memory bounded, output independent of the number
  of processes, not equal to the default mode's) and --dynamic_masking.
* Output files appear complete or not at all; a line that is not UTF-8
  stops the run with one line naming the file and line; instances whose
  masked-LM predictions were capped at --max_predictions_per_seq are
  counted in a warning instead of silently.
* The library functions keep Google's names, arguments and random draws
  (equal seeds give equal instances); whole-word masking is their
  `do_whole_word_mask` argument instead of the flag.
"""
import array
import dataclasses
import hashlib
import math
import multiprocessing
import os
import pickle
import random
import signal
import sys
import tempfile
import time
from typing import Optional

from absl import flags
from absl import logging

from scriptkit import file_io
from scriptkit import interrupts
from scriptkit import logs
from scriptkit import pretraining_records
from scriptkit import script_runner
from scriptkit import settings as settings_lib
from scriptkit import shared_flags
import tokenization
from scriptkit.errors import InputError


@dataclasses.dataclass(frozen=True)
class Settings(settings_lib.Masking):
    """The corpus and output files, masking's flags, the passes over the
    corpus and how the work is split (read in main by
    `settings_lib.from_flags`)."""

    input_file: Optional[str] = None
    output_file: Optional[str] = None
    dupe_factor: int = 10
    dynamic_masking: bool = False
    short_seq_prob: float = 0.1
    num_workers: int = 1
    shard_size_mb: float = 0.0
    shuffle_buffer_size: int = 100000


shared_flags.define_settings_flags(Settings)

flags.DEFINE_integer(
    "dupe_factor", 10,
    "How many passes to make over the corpus; each pass pairs and masks the "
    "sentences anew. With --dynamic_masking only the pairs vary, and the "
    "default is 1.")

flags.DEFINE_bool(
    "dynamic_masking", False,
    "Write the sentence pairs without masks (no masked_lm_* features): "
    "run_pretraining.py draws fresh masks each time it reads one. "
    "--masked_lm_prob, --do_whole_word_mask and --max_predictions_per_seq "
    "then take effect there rather than here.")

flags.DEFINE_float(
    "short_seq_prob", 0.1,
    "Share of instances that aim at a random length below --max_seq_length, so "
    "that the model also sees short inputs.")

flags.DEFINE_integer(
    "num_workers", 1,
    "Processes to use. 1 (with --shard_size_mb=0): the original's algorithm and "
    "output, byte for byte. More than 1: sharded mode (see --shard_size_mb), "
    "output deterministic for a given seed and independent of this number.")

flags.DEFINE_float(
    "shard_size_mb", 0.0,
    "Sharded mode: MB of input text per shard (cut at the next document "
    "boundary). 0: 0.5 if --num_workers > 1, else no sharding (original mode). "
    "Memory grows with this, not with the corpus.")

flags.DEFINE_integer(
    "shuffle_buffer_size", 100000,
    "Sharded mode: instances from consecutive shards are mixed through a "
    "shuffle buffer of this many instances (about 0.8 KB each at "
    "max_seq_length=128).")

_LOG_EXAMPLES = 20


class _AtomicRecordFiles:
    """TFRecord files written under temporary names, renamed into place only
    when all are complete (`commit`); `abort` removes them. Records go
    round-robin across the files (record i to file i mod the number of
    files)."""

    def __init__(self, paths):
        self._paths = list(paths)
        self._targets = [file_io.AtomicFile(p) for p in self._paths]
        self._files = []
        try:
            for target in self._targets:
                tmp = target.tmp_path
                self._files.append(file_io.open_file(tmp, "wb"))
        except (OSError, IOError) as e:
            self.abort()
            raise InputError("--output_file: cannot write %s: %s" % (tmp, e))
        self._next = 0
        self.count = 0

    def _write_error(self, error, index):
        """InputError naming output file `index`, for a write that failed for
        lack of room; None for other errors."""
        message = file_io.output_write_error(error, self._paths[index])
        return InputError(message) if message else None

    def write(self, framed_records):
        files, n = self._files, len(self._files)
        for record in framed_records:
            try:
                files[self._next].write(record)
            except OSError as e:
                raise self._write_error(e, self._next) or e
            self._next = (self._next + 1) % n
            self.count += 1

    def commit(self):
        # A signal before this point leaves every earlier file in place; one
        # that comes while the files are renamed acts once all of them are,
        # so the outputs are never a mix of new and earlier files.
        interrupts.raise_if_interrupted()
        for index, f in enumerate(self._files):
            try:
                f.close()
            except OSError as e:
                raise self._write_error(e, index) or e
        interrupts.raise_if_interrupted()
        with interrupts.interrupts_held():
            for target in self._targets:
                target.commit()
        for path in self._paths:
            file_io.report_output(path, "%d instances%s" % (
                self.count, " in the %d files" % len(self._paths) if len(self._paths) > 1
                else ""))

    def abort(self):
        for f in self._files:
            try:
                f.close()
            except (OSError, IOError):
                pass
        for target in self._targets:
            try:
                target.abort()
            except (OSError, IOError):
                pass


# ---------------------------------------------------------------------------
# Reading and tokenizing documents.

class _Vocab(pretraining_records.VocabTables):
    """The tokenizer plus the id tables instance creation needs
    (`pretraining_records.VocabTables`)."""

    def __init__(self, vocab_file, do_lower_case):
        try:
            self.tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file,
                                                        do_lower_case=do_lower_case)
        except UnicodeDecodeError:
            raise file_io.non_utf8_error("vocab_file", vocab_file)
        except ValueError as e:
            raise InputError("--vocab_file: %s" % e)
        vocab = self.tokenizer.vocab
        super().__init__(vocab, vocab_file, specials=("[UNK]", "[CLS]", "[SEP]", "[MASK]"))
        self.vocab = vocab
        self.inv_vocab = self.tokenizer.inv_vocab
        # Tokenized text has no [CLS]/[SEP] (brackets are punctuation).
        self.specials_only_in_frame = True

    def ids(self, line):
        vocab = self.vocab
        return [vocab[t] for t in self.tokenizer.tokenize(line)]


def _decode_line(raw, path, line_number):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError("--input_file %s, line %d: not valid UTF-8 (byte %d of the line: "
                         "%s); convert the file to UTF-8" % (path, line_number, e.start,
                                                             e.reason))


def _documents_from_lines(numbered_lines, vocab, documents=None):
    """Tokenizes lines into documents: a blank line ends a document.

    Args:
      numbered_lines: iterable of (path, line number, raw bytes of a line).
      vocab: _Vocab.
      documents: list to extend (its last document continues), or None.

    Returns:
      List of documents; a document is a list of sentences, each an
      array('i') of token ids. Lines without tokens are dropped; blank lines
      start a new document; empty documents are kept (removed by callers).
    """
    if documents is None:
        documents = [[]]
    for path, line_number, raw in numbered_lines:
        line = _decode_line(raw, path, line_number).strip()
        if not line:
            documents.append([])
            continue
        ids = vocab.ids(line)
        if ids:
            documents[-1].append(array.array("i", ids))
    return documents


def _numbered_lines(input_files):
    """(path, line number, raw line bytes) of every line of the files.

    Lines end at b"\\n" only, as tf.gfile's readline does, which Google's
    script reads with.
    """
    for path in input_files:
        try:
            with file_io.open_file(path, "rb") as f:
                for number, raw in enumerate(f, 1):
                    yield path, number, raw
        except (OSError, IOError) as e:
            raise InputError("--input_file: cannot read %s: %s" % (path, e))


# ---------------------------------------------------------------------------
# Instances: the algorithm and its random draws, on token ids.

class InstanceMaker:
    """Creates training instances from documents, drawing random numbers in
    a fixed order: the draws decide the output, which the module docstring
    promises byte for byte.

    Args:
      vocab: a `_Vocab` (tokens are ids) or `_TokenStrings` (tokens are
        strings).
      max_seq_length, short_seq_prob, masked_lm_prob, max_predictions_per_seq,
      do_whole_word_mask, dynamic_masking: as the flags of the same names;
        with dynamic_masking, `from_document` writes the pairs unmasked and
        draws no random numbers for masks.
    """

    def __init__(self, vocab, max_seq_length, short_seq_prob, masked_lm_prob,
                 max_predictions_per_seq, do_whole_word_mask, dynamic_masking=False):
        self.vocab = vocab
        self.dynamic_masking = dynamic_masking
        self.max_seq_length = max_seq_length
        self.short_seq_prob = short_seq_prob
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions_per_seq = max_predictions_per_seq
        self.do_whole_word_mask = do_whole_word_mask
        self._encoder = None
        # Instances whose masked-LM predictions were capped at
        # max_predictions_per_seq, for the warning at the end.
        self.num_capped = 0

    def from_document(self, all_documents, document_index, rng, output):
        """Appends the serialized instances of one document to `output`.

        Args:
          all_documents: list of documents, each a non-empty list of
            sentences, each a non-empty sequence of token ids.
          document_index: which document to make instances from.
          rng: `random.Random`; drawn from in a fixed order (see `instances`).
          output: list to append tf.train.Example bytes to.
        """
        if self._encoder is None:
            self._encoder = pretraining_records.ExampleEncoder(
                self.vocab.size, self.max_seq_length, self.max_predictions_per_seq)
        if self.dynamic_masking:
            encode_unmasked = self._encoder.encode_unmasked
            vocab = self.vocab
            for tokens_a, tokens_b, is_random_next in self._sentence_pairs(
                    all_documents, document_index, rng):
                tokens = [vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b + [vocab.sep_id]
                output.append(encode_unmasked(tokens, len(tokens_a), is_random_next))
            return
        encode = self._encoder.encode
        for instance in self.instances(all_documents, document_index, rng):
            output.append(encode(*instance))

    def instances(self, all_documents, document_index, rng):
        """Yields the instances of one document, as tuples (masked tokens of
        [CLS] A [SEP] B [SEP], number of tokens in A, masked positions, their
        tokens before masking, is_random_next); arguments as for
        `from_document`.

        Each instance draws from `rng` as it is made: consume them in order
        and before drawing from `rng` elsewhere.
        """
        vocab = self.vocab
        for tokens_a, tokens_b, is_random_next in self._sentence_pairs(
                all_documents, document_index, rng):
            # Masking draws from `rng` before the next pair is made (the
            # generator resumes only after this): the order of the draws
            # decides the output.
            tokens = [vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b + [vocab.sep_id]
            masked, positions, labels = self._mask(tokens, rng)
            yield masked, len(tokens_a), positions, labels, is_random_next

    def _sentence_pairs(self, all_documents, document_index, rng):
        """Yields the (tokens A, tokens B, is_random_next) pairs of one document.

        Consecutive sentences are gathered until they reach the target
        length (or the document ends); a random number of them, at least
        one, form A. B is either the rest of the gathered sentences, or (on
        a coin flip, and always when only one sentence was gathered) text
        from a random other document; the sentences left unused then start
        the next group. Each pair is truncated to fit max_seq_length with
        its [CLS] and two [SEP].
        """
        document = all_documents[document_index]
        max_num_tokens = self.max_seq_length - 3
        # Usually fill the whole sequence; sometimes aim shorter, so that
        # the model does not only see full-length inputs.
        target_length = max_num_tokens
        if rng.random() < self.short_seq_prob:
            target_length = rng.randint(2, max_num_tokens)

        group = []
        group_length = 0
        i = 0
        while i < len(document):
            group.append(document[i])
            group_length += len(document[i])
            if group_length < target_length and i < len(document) - 1:
                i += 1
                continue
            num_a = rng.randint(1, len(group) - 1) if len(group) > 1 else 1
            tokens_a = _concatenated(group[:num_a])
            if len(group) == 1 or rng.random() < 0.5:
                is_random_next = True
                tokens_b = _random_text(all_documents, document_index,
                                        target_length - len(tokens_a), rng)
                i -= len(group) - num_a  # Unused sentences go back.
            else:
                is_random_next = False
                tokens_b = _concatenated(group[num_a:])
            _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            yield tokens_a, tokens_b, is_random_next
            group = []
            group_length = 0
            i += 1

    def _mask(self, tokens, rng):
        """`create_masked_lm_predictions` on the vocabulary's token type (ids
        or strings).

        Returns:
          (output tokens, masked positions ascending, the tokens that stood
          at those positions).
        """
        vocab = self.vocab
        cls_id, sep_id = vocab.cls_id, vocab.sep_id
        if self.do_whole_word_mask:
            is_continuation = vocab.is_continuation
            cand_indexes = []
            for i, token in enumerate(tokens):
                if token == cls_id or token == sep_id:
                    continue
                # A "##" piece joins the previous candidate, even across
                # [SEP] when B starts with a truncated word: the candidates,
                # and so the draws, must not change.
                if cand_indexes and is_continuation[token]:
                    cand_indexes[-1].append(i)
                else:
                    cand_indexes.append([i])
        elif vocab.specials_only_in_frame:
            # Every position but [CLS], the middle [SEP] and the last [SEP]
            # (text never tokenizes to "[CLS]" or "[SEP]": the brackets are
            # split off as punctuation).
            middle = tokens.index(sep_id)
            cand_indexes = list(range(1, middle))
            cand_indexes.extend(range(middle + 1, len(tokens) - 1))
        else:
            cand_indexes = [i for i, token in enumerate(tokens)
                            if token != cls_id and token != sep_id]
        _shuffle(cand_indexes, rng)

        output = list(tokens)
        wanted = max(1, int(round(len(tokens) * self.masked_lm_prob)))
        num_to_predict = min(self.max_predictions_per_seq, wanted)
        if wanted > self.max_predictions_per_seq:
            self.num_capped += 1

        random_value = rng.random
        masked = []
        if self.do_whole_word_mask:
            # (The words are disjoint, so none can have been masked before.)
            for word in cand_indexes:
                if len(masked) >= num_to_predict:
                    break
                # A whole word that would exceed the budget is skipped.
                if len(masked) + len(word) > num_to_predict:
                    continue
                for index in word:
                    output[index] = self._masked_token(tokens[index], random_value, rng)
                    masked.append(index)
        else:
            for index in cand_indexes[:num_to_predict]:
                output[index] = self._masked_token(tokens[index], random_value, rng)
                masked.append(index)
        masked.sort()
        return output, masked, [tokens[i] for i in masked]

    def _masked_token(self, token, random_value, rng):
        # 80% [MASK], 10% the token itself, 10% a random vocabulary word.
        if random_value() < 0.8:
            return self.vocab.mask_id
        if random_value() < 0.5:
            return token
        words = self.vocab.word_ids
        return words[rng.randint(0, len(words) - 1)]


def _inline_shuffle(x, rng):
    """Same permutation and generator state as `rng.shuffle(x)` (CPython's
    algorithm with `_randbelow` inlined: one Python call less per element;
    the masking's shuffles are most of the run time)."""
    getrandbits = rng.getrandbits
    bits = _BIT_LENGTHS if len(x) < len(_BIT_LENGTHS) else [
        n.bit_length() for n in range(len(x) + 1)]
    for i in range(len(x) - 1, 0, -1):
        n = i + 1
        k = bits[n]
        j = getrandbits(k)
        while j >= n:
            j = getrandbits(k)
        x[i], x[j] = x[j], x[i]


_BIT_LENGTHS = [n.bit_length() for n in range(4097)]


def _inline_shuffle_matches():
    """Whether `_inline_shuffle` reproduces this Python's random.shuffle."""
    for size in (0, 1, 2, 3, 17, 128, 1000):
        a, b = random.Random(size), random.Random(size)
        x, y = list(range(size)), list(range(size))
        a.shuffle(x)
        _inline_shuffle(y, b)
        if x != y or a.random() != b.random():
            return False
    return True


# Falls back to rng.shuffle on a Python whose shuffle differs.
_shuffle = _inline_shuffle if _inline_shuffle_matches() else (lambda x, rng: rng.shuffle(x))


def _concatenated(sentences):
    """The tokens of `sentences` (sequences of ids) as one list."""
    tokens = []
    for sentence in sentences:
        tokens.extend(sentence)
    return tokens


def _random_text(all_documents, document_index, min_length, rng):
    """Consecutive sentences, from a random start in a random document other
    than `document_index`, until they reach `min_length` tokens (at least
    one sentence) or the document ends. Returns their tokens as one list.

    Up to ten documents are drawn to find one that differs (with a single
    document, its own text is used).
    """
    for _ in range(10):
        other = rng.randint(0, len(all_documents) - 1)
        if other != document_index:
            break
    document = all_documents[other]
    tokens = []
    for sentence in document[rng.randint(0, len(document) - 1):]:
        tokens.extend(sentence)
        if len(tokens) >= min_length:
            break
    return tokens


def _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Shortens the lists `tokens_a`, `tokens_b` in place until together they
    have at most `max_num_tokens` tokens (which must be at least 2).

    One token at a time is removed from the longer list (B on a tie), from
    its front or its back on a coin flip, so that cut-off text is seen at
    both ends.
    """
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _make_instances(documents, from_document, dupe_factor, rng, progress=None):
    """What `create_training_instances` does after reading: shuffles the
    documents, makes `dupe_factor` passes, shuffles the instances.

    Args:
      documents: list of non-empty documents (shuffled in place).
      from_document: function (documents, index, rng, output list) that
        appends the instances of one document, e.g. `InstanceMaker.from_document`.
      dupe_factor: number of passes.
      rng: `random.Random`.
      progress: optional function (pass index, number of instances so far).

    Returns:
      The list of instances, shuffled.
    """
    rng.shuffle(documents)
    instances = []
    for dupe in range(dupe_factor):
        for document_index in range(len(documents)):
            from_document(documents, document_index, rng, instances)
        if progress:
            progress(dupe, len(instances))
    rng.shuffle(instances)
    return instances


# ---------------------------------------------------------------------------
# Library API: the module's functions on token strings. They run the same
# code as the script (on strings instead of ids), so their draws from `rng`
# are the script's and equal seeds give equal instances.

class _TokenStrings:
    """What `InstanceMaker` needs to work on token strings: the special
    tokens, the list random replacement words are drawn from, and which
    tokens continue a word."""

    def __init__(self, vocab_words):
        self.cls_id, self.sep_id, self.mask_id = "[CLS]", "[SEP]", "[MASK]"
        self.word_ids = vocab_words
        self.is_continuation = _StartsWithHashes()
        # Documents given to the library functions may hold "[CLS]"/"[SEP]".
        self.specials_only_in_frame = False


class _StartsWithHashes:
    """`is_continuation` for strings: ``obj[token]`` is whether `token` is a
    "##" WordPiece."""

    def __getitem__(self, token):
        return token.startswith("##")


@dataclasses.dataclass
class TrainingInstance:
    """One pre-training example, as token strings.

    Attributes:
      tokens: [CLS] A [SEP] B [SEP], with the masked-LM replacements made.
      segment_ids: 0 for [CLS] A [SEP], 1 for B [SEP].
      masked_lm_positions: the masked positions, ascending.
      masked_lm_labels: the tokens that stood at those positions.
      is_random_next: whether B is random text rather than A's continuation.
    """

    tokens: list
    segment_ids: list
    masked_lm_positions: list
    masked_lm_labels: list
    is_random_next: bool

    def __str__(self):
        fields = [
            ("tokens", " ".join(tokenization.printable_text(t) for t in self.tokens)),
            ("segment_ids", " ".join(str(x) for x in self.segment_ids)),
            ("is_random_next", self.is_random_next),
            ("masked_lm_positions", " ".join(str(x) for x in self.masked_lm_positions)),
            ("masked_lm_labels", " ".join(tokenization.printable_text(t)
                                          for t in self.masked_lm_labels)),
        ]
        return "".join("%s: %s\n" % field for field in fields) + "\n"


def _training_instance(tokens, num_a, positions, labels, is_random_next):
    """`InstanceMaker.instances` tuple -> TrainingInstance."""
    segment_ids = [0] * (num_a + 2) + [1] * (len(tokens) - num_a - 2)
    return TrainingInstance(tokens, segment_ids, positions, labels, is_random_next)


def create_training_instances(input_files, tokenizer, max_seq_length, dupe_factor,
                              short_seq_prob, masked_lm_prob, max_predictions_per_seq, rng,
                              do_whole_word_mask=False):
    """Reads and tokenizes text files and makes training instances from them.

    Args:
      input_files: list of paths (local, or anything tf.io.gfile opens). Text
        is one sentence per line, with blank lines between documents.
      tokenizer: `tokenization.FullTokenizer`.
      max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob,
      max_predictions_per_seq, do_whole_word_mask: as the script's flags.
      rng: `random.Random`, drawn from as the script draws.

    Returns:
      List of `TrainingInstance`, shuffled.

    Raises:
      InputError: a file is unreadable or not UTF-8.
    """
    documents = [[]]
    for path, line_number, raw in _numbered_lines(input_files):
        line = _decode_line(raw, path, line_number).strip()
        if not line:
            documents.append([])
            continue
        tokens = tokenizer.tokenize(line)
        if tokens:
            documents[-1].append(tokens)
    documents = [document for document in documents if document]
    maker = InstanceMaker(_TokenStrings(list(tokenizer.vocab.keys())), max_seq_length,
                          short_seq_prob, masked_lm_prob, max_predictions_per_seq,
                          do_whole_word_mask)

    def from_document(all_documents, document_index, rng, output):
        output.extend(_training_instance(*instance) for instance in
                      maker.instances(all_documents, document_index, rng))

    return _make_instances(documents, from_document, dupe_factor, rng)


def create_instances_from_document(all_documents, document_index, max_seq_length,
                                   short_seq_prob, masked_lm_prob, max_predictions_per_seq,
                                   vocab_words, rng, do_whole_word_mask=False):
    """Makes the training instances of one document.

    Args:
      all_documents: list of documents; a document is a list of sentences,
        a sentence a non-empty list of WordPiece tokens. Random next
        sentences are taken from the other documents.
      document_index: which document to use.
      vocab_words: list of the vocabulary's tokens (random replacements).
      rng: `random.Random`, drawn from as the script draws.
      (The rest: as the script's flags.)

    Returns:
      List of `TrainingInstance`.
    """
    maker = InstanceMaker(_TokenStrings(vocab_words), max_seq_length, short_seq_prob,
                          masked_lm_prob, max_predictions_per_seq, do_whole_word_mask)
    return [_training_instance(*instance)
            for instance in maker.instances(all_documents, document_index, rng)]


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                                 vocab_words, rng, do_whole_word_mask=False):
    """Chooses and replaces the masked-LM targets of one sequence.

    round(len(tokens) * masked_lm_prob) positions (at least 1, at most
    `max_predictions_per_seq`), never [CLS] or [SEP], are chosen at random
    (whole words together with `do_whole_word_mask`); each becomes [MASK]
    with probability 0.8, stays as it is with 0.1, or becomes a random word
    of `vocab_words` with 0.1.

    Returns:
      (tokens after replacement, chosen positions ascending, the tokens
      that stood at those positions).
    """
    maker = InstanceMaker(_TokenStrings(vocab_words), None, None, masked_lm_prob,
                          max_predictions_per_seq, do_whole_word_mask)
    return maker._mask(list(tokens), rng)


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Shortens the lists `tokens_a`, `tokens_b` in place to at most
    `max_num_tokens` tokens together (see `_truncate_seq_pair`)."""
    _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)


def write_instance_to_example_files(instances, tokenizer, max_seq_length,
                                    max_predictions_per_seq, output_files):
    """Writes `TrainingInstance`s as tf.train.Example TFRecords, round-robin
    across `output_files`, with the script's features and padding; logs the
    first 20 as the script does.

    Raises:
      ValueError: an instance is longer than `max_seq_length` or has more
        than `max_predictions_per_seq` masked positions.
      KeyError: a token is not in the tokenizer's vocabulary.
    """
    vocab_size = max(tokenizer.vocab.values()) + 1
    encoder = pretraining_records.ExampleEncoder(vocab_size, max_seq_length,
                                                 max_predictions_per_seq)
    examples = []
    for instance in instances:
        if len(instance.tokens) > max_seq_length:
            raise ValueError("Instance of %d tokens does not fit max_seq_length=%d"
                             % (len(instance.tokens), max_seq_length))
        if len(instance.masked_lm_positions) > max_predictions_per_seq:
            raise ValueError("Instance with %d masked positions exceeds "
                             "max_predictions_per_seq=%d"
                             % (len(instance.masked_lm_positions), max_predictions_per_seq))
        examples.append(encoder.encode(
            tokenizer.convert_tokens_to_ids(instance.tokens),
            list(instance.segment_ids).count(0) - 2, list(instance.masked_lm_positions),
            tokenizer.convert_tokens_to_ids(instance.masked_lm_labels),
            instance.is_random_next))
    writer = _AtomicRecordFiles(output_files)
    try:
        for begin in range(0, len(examples), 4096):
            writer.write(pretraining_records.frame_records(examples[begin:begin + 4096]))
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    for data in examples[:_LOG_EXAMPLES]:
        _log_example(tokenizer, pretraining_records.decode_example(data))
    logging.info("Wrote %d total instances", writer.count)


# ---------------------------------------------------------------------------
# Logging.

def _log_example(vocab, features):
    """Logs one instance as an "*** Example ***" block: the tokens, then
    each feature's values."""
    length = sum(features["input_mask"])
    logging.info("*** Example ***")
    logging.info("tokens: %s", " ".join(
        tokenization.printable_text(vocab.inv_vocab[i])
        for i in features["input_ids"][:length]))
    for name in pretraining_records.FEATURE_NAMES:
        if features[name]:  # (Unmasked records have no masked_lm_* features.)
            logging.info("%s: %s", name, " ".join(str(x) for x in features[name]))


def _log_capped(num_capped, total, max_predictions_per_seq):
    if num_capped:
        logging.warning(
            "%d of %d instances wanted more masked-LM predictions than "
            "--max_predictions_per_seq=%d (about max_seq_length * masked_lm_prob is "
            "needed) and were capped at it, as in the original.",
            num_capped, total, max_predictions_per_seq)


# ---------------------------------------------------------------------------
# Default mode: all instances in memory, one generator, one global shuffle.

def _total_megabytes(input_files):
    """Size of the input files in MB (for the progress lines' ETA)."""
    return sum(file_io.file_size(path) for path in input_files) / 1e6


def _run_original_mode(input_files, vocab, writer, settings):
    """Makes the instances of `input_files` (the corpus in memory, one
    generator, one global shuffle) and writes them to `writer`;
    `settings`: the run's `Settings` (`Run.settings`)."""
    start = time.time()
    documents = [[]]
    bytes_read = [0]
    lines = _numbered_lines(input_files)
    reading = logs.Progress("Reading the input", _total_megabytes(input_files), "MB")

    def counted(lines):
        for item in lines:
            bytes_read[0] += len(item[2])
            reading.update(count=bytes_read[0] / 1e6)
            yield item

    _documents_from_lines(counted(lines), vocab, documents)
    documents = [d for d in documents if d]
    if not documents:
        raise InputError("--input_file: no text found in %s" % ", ".join(input_files))
    logging.info("Read %d documents, %.1f MB, in %.1f s", len(documents),
                 bytes_read[0] / 1e6, time.time() - start)

    rng = random.Random(settings.random_seed)
    maker = InstanceMaker(vocab, settings.max_seq_length, settings.short_seq_prob,
                          settings.masked_lm_prob, settings.max_predictions_per_seq,
                          settings.do_whole_word_mask, settings.dynamic_masking)

    making = logs.Progress("Making instances", len(documents) * settings.dupe_factor,
                           "documents")

    def from_document(documents, index, rng, output):
        maker.from_document(documents, index, rng, output)
        making.update()

    instances = _make_instances(documents, from_document, settings.dupe_factor, rng)
    making.done()
    del documents
    for data in instances[:_LOG_EXAMPLES]:
        _log_example(vocab, pretraining_records.decode_example(data))
    batch = 4096
    for begin in range(0, len(instances), batch):
        writer.write(pretraining_records.frame_records(instances[begin:begin + batch]))
        # Free what is written as we go.
        instances[begin:begin + batch] = [b""] * len(instances[begin:begin + batch])
    _log_capped(maker.num_capped, writer.count, settings.max_predictions_per_seq)


# ---------------------------------------------------------------------------
# Sharded mode: bounded memory, several processes.

def _shard_seed(random_seed, shard_index):
    digest = hashlib.sha256(("%d/%d" % (random_seed, shard_index)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _shards(input_files, shard_bytes):
    """Cuts the input lines into shards of about shard_bytes, at blank lines.

    Yields:
      Lists of (path, line number, raw line bytes).
    """
    shard, size = [], 0
    for item in _numbered_lines(input_files):
        shard.append(item)
        size += len(item[2])
        if size >= shard_bytes and not item[2].strip():
            yield shard
            shard, size = [], 0
    if shard:
        yield shard


_WORKER = {}


def _init_worker(config, vocab=None):
    """Pool initializer: the vocabulary and settings, once per process (a
    forked worker inherits them from the parent)."""
    if _WORKER.get("config") == config and _WORKER.get("vocab") is not None:
        return
    _WORKER.clear()
    _WORKER.update(config)
    _WORKER["config"] = dict(config)
    _WORKER["vocab"] = vocab or _Vocab(config["vocab_file"], config["do_lower_case"])


def _start_worker(config):
    """Pool initializer of a worker process: the default SIGTERM (with
    which the pool ends its workers) and SIGINT ignored (a Ctrl-C reaches
    the whole process group; the main process handles it and ends the
    pool), instead of the handlers inherited from the main process; then
    `_init_worker`."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _init_worker(config)


def _process_shard_file(shard_index, path):
    """`_process_shard` of the lines pickled in `path` (in a worker), which
    it removes. The pool's tasks carry a path, not the lines: a task bigger
    than the pipe to the workers leaves the pool's task thread blocked in
    the middle of sending it, and ending the pool after a Ctrl-C then
    waits for that thread for ever."""
    with open(path, "rb") as f:
        lines = pickle.load(f)
    os.remove(path)
    return _process_shard(shard_index, lines)


def _process_shard(shard_index, lines):
    """Tokenizes one shard and makes its instances (in a worker).

    Returns:
      (shard index, framed records joined, array of record lengths, bytes of
      text, number of capped instances, serialized examples to log).
    """
    config = _WORKER
    vocab = config["vocab"]
    documents = [d for d in _documents_from_lines(lines, vocab) if d]
    text_bytes = sum(len(raw) for _, _, raw in lines)
    del lines
    if not documents:
        return shard_index, b"", array.array("q"), text_bytes, 0, []
    rng = random.Random(_shard_seed(config["random_seed"], shard_index))
    maker = InstanceMaker(vocab, config["max_seq_length"], config["short_seq_prob"],
                          config["masked_lm_prob"], config["max_predictions_per_seq"],
                          config["do_whole_word_mask"], config["dynamic_masking"])
    instances = _make_instances(documents, maker.from_document, config["dupe_factor"], rng)
    to_log = instances[:_LOG_EXAMPLES] if shard_index == 0 else []
    framed = pretraining_records.frame_records(instances)
    del instances
    lengths = array.array("q", map(len, framed))
    return shard_index, b"".join(framed), lengths, text_bytes, maker.num_capped, to_log


class _ShuffleBuffer:
    """Mixes a stream of records through a buffer of `size`, with its own
    seeded generator: the output order depends only on the stream and seed."""

    def __init__(self, size, seed, sink):
        self._size = max(1, size)
        self._rng = random.Random(seed)
        self._buffer = []
        self._sink = sink

    def add(self, records):
        out = []
        buffer, size, randbelow = self._buffer, self._size, self._rng.randrange
        for record in records:
            if len(buffer) < size:
                buffer.append(record)
            else:
                j = randbelow(size)
                out.append(buffer[j])
                buffer[j] = record
        self._sink(out)

    def flush(self):
        self._rng.shuffle(self._buffer)
        self._sink(self._buffer)
        self._buffer = []


def _result(async_result):
    """The result of a pool task; KeyboardInterrupt as soon as the run got
    a SIGINT or SIGTERM (see `_run_sharded_mode`)."""
    while not async_result.ready():
        if interrupts.interrupted():
            raise KeyboardInterrupt
        async_result.wait(0.1)
    return async_result.get()


def _cpu_count():
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _shard_estimate(total_mb, shard_mb):
    """About how many shards `total_mb` of text makes (at least 1)."""
    return max(1, int(math.ceil(total_mb / shard_mb)))


def _worker_count(requested, total_mb, shard_mb):
    """Worker processes worth starting: no more than there are shards to
    process or CPUs to run them; 1 means in this process, with no pool.

    The sharded output does not depend on the number of workers, so this
    only saves the cost of processes that would have nothing to do (or
    would share a CPU): on a 0.3 MB input a pool of 4 costs 4 process starts
    for one shard.
    """
    return max(1, min(requested, _shard_estimate(total_mb, shard_mb), _cpu_count()))


def _run_sharded_mode(input_files, vocab, writer, settings, shard_mb):
    """Makes the instances of `input_files` shard by shard (of about
    `shard_mb` MB of text), in a pool of workers (see the module's
    docstring), and writes them to `writer`; `settings`: the run's
    `Settings` (`Run.settings`)."""
    # What a worker needs (`_init_worker`).
    config = {name: getattr(settings, name) for name in (
        "vocab_file", "do_lower_case", "random_seed", "max_seq_length", "short_seq_prob",
        "masked_lm_prob", "max_predictions_per_seq", "do_whole_word_mask", "dupe_factor",
        "dynamic_masking")}
    buffer = _ShuffleBuffer(settings.shuffle_buffer_size,
                            _shard_seed(settings.random_seed, -1), writer.write)
    shards = _shards(input_files, int(shard_mb * 1e6))
    progress = logs.Progress("Processing the input", _total_megabytes(input_files), "MB")
    totals = {"text": 0, "capped": 0, "shards": 0}

    def consume(result):
        index, blob, lengths, text_bytes, capped, to_log = result
        for data in to_log:
            _log_example(vocab, pretraining_records.decode_example(data))
        records, pos = [], 0
        for length in lengths:
            records.append(blob[pos:pos + length])
            pos += length
        del blob
        buffer.add(records)
        totals["text"] += text_bytes
        totals["capped"] += capped
        totals["shards"] += 1
        progress.update(count=totals["text"] / 1e6)

    num_workers = _worker_count(settings.num_workers, progress.total, shard_mb)
    if num_workers != settings.num_workers:
        logging.info("Using %d worker process(es) instead of --num_workers=%d: about %d "
                     "shard(s) of %g MB on %d CPU(s); the output is the same",
                     num_workers, settings.num_workers,
                     _shard_estimate(progress.total, shard_mb),
                     shard_mb, _cpu_count())
    _init_worker(config, vocab)
    if num_workers <= 1:
        for index, lines in enumerate(shards):
            consume(_process_shard(index, lines))
    else:
        # Forked workers start at once with the vocabulary loaded. Forking a
        # process that has loaded TensorFlow (its threads) is unsafe: then
        # (e.g. in a test process) workers are spawned, which costs an
        # import and a vocabulary load each.
        method = "fork" if "tensorflow" not in sys.modules and hasattr(os, "fork") else "spawn"
        context = multiprocessing.get_context(method)
        # A KeyboardInterrupt raised inside the pool's own waiting can
        # leave its locks taken, and ending the pool then hangs: a signal is
        # only recorded here, and the waits below stop at it.
        with tempfile.TemporaryDirectory(prefix="create_pretraining_data_") as shard_dir, \
                interrupts.interrupts_held(), context.Pool(
                    num_workers, initializer=_start_worker, initargs=(config,)) as pool:
            pending = []
            for index, lines in enumerate(shards):
                path = os.path.join(shard_dir, "%d.pickle" % index)
                with open(path, "wb") as f:
                    pickle.dump(lines, f, protocol=pickle.HIGHEST_PROTOCOL)
                del lines
                pending.append(pool.apply_async(_process_shard_file, (index, path)))
                # At most one queued shard per worker beyond the running
                # ones, so memory does not grow with the corpus.
                while len(pending) > 2 * num_workers:
                    consume(_result(pending.pop(0)))
            while pending:
                consume(_result(pending.pop(0)))
    buffer.flush()
    progress.done()
    if totals["text"] == 0 or writer.count == 0:
        raise InputError("--input_file: no text found in %s" % ", ".join(input_files))
    _log_capped(totals["capped"], writer.count, settings.max_predictions_per_seq)


# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Run:
    """A run's checked settings, from `prepare_run`.

    Attributes:
      settings: the `Settings`, --dupe_factor's there 1 with
        --dynamic_masking unless given (the masks vary as the data is read,
        so a copy per pass would only vary the pairs).
      output_files: the paths of --output_file.
      shard_mb: MB of text per shard; 0: the default mode (--shard_size_mb,
        or 0.5 when it is 0 and --num_workers is more than 1).
    """

    settings: Settings
    output_files: list
    shard_mb: float


def prepare_run(settings):
    """Checks `settings` (the script's `Settings`), and that each output
    file can be written, before the corpus is read.

    Returns:
      The `Run`.

    Raises:
      InputError: one line naming the flag at fault.
    """
    s = settings
    settings_lib.require(s, "input_file", "output_file", "vocab_file")
    if s.max_seq_length < 5:
        raise InputError("--max_seq_length=%d is too small: [CLS] A [SEP] B [SEP] needs "
                         "at least 5" % s.max_seq_length)
    if s.max_predictions_per_seq < 1:
        raise InputError("--max_predictions_per_seq must be at least 1")
    if not 0.0 <= s.masked_lm_prob <= 1.0:
        raise InputError("--masked_lm_prob must be in [0, 1]")
    if not 0.0 <= s.short_seq_prob <= 1.0:
        raise InputError("--short_seq_prob must be in [0, 1]")
    if s.dupe_factor < 1:
        raise InputError("--dupe_factor must be at least 1")
    if s.num_workers < 1:
        raise InputError("--num_workers must be at least 1")
    if s.shard_size_mb < 0:
        raise InputError("--shard_size_mb must not be negative")
    output_files = [p.strip() for p in s.output_file.split(",") if p.strip()]
    if not output_files:
        raise InputError("--output_file is required")
    for path in output_files:
        # A directory, a missing or unwritable directory: found now rather
        # than after all the output was made.
        file_io.check_output_file(path, "output_file", create_dir=False)
    if s.dynamic_masking and "dupe_factor" not in s.given:
        s = dataclasses.replace(s, dupe_factor=1)
    return Run(s, output_files, s.shard_size_mb or (0.5 if s.num_workers > 1 else 0.0))


def main(_):
    logging.set_verbosity(logging.INFO)
    run = prepare_run(settings_lib.from_flags(Settings))
    settings = run.settings
    vocab = _Vocab(settings.vocab_file, settings.do_lower_case)
    input_files = file_io.expand_file_patterns("input_file", settings.input_file)

    logging.info("*** Reading from input files ***")
    for input_file in input_files:
        logging.info("  %s", input_file)
    logging.info("*** Writing to output files ***")
    for output_file in run.output_files:
        logging.info("  %s", output_file)

    start = time.time()
    writer = _AtomicRecordFiles(run.output_files)
    try:
        if run.shard_mb:
            _run_sharded_mode(input_files, vocab, writer, settings, run.shard_mb)
        else:
            _run_original_mode(input_files, vocab, writer, settings)
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    logging.info("Wrote %d total instances", writer.count)
    logging.info("Done in %.1f s", time.time() - start)


if __name__ == "__main__":
    script_runner.run_script(main)
