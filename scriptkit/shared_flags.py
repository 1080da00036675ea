"""The flags that more than one script has, defined once, and the check of
required flags.

Every flag that more than one script has is defined here, once, in
`_SHARED_FLAGS`, so that scripts can be imported side by side (as the tests
do) without absl's duplicate-flag error. A script lists the shared flags it
uses with `define_flags`, with its own default or help text where they
differ (--max_seq_length is 384 for SQuAD, --doc_stride 64 for NER), and
defines the flags only it has with plain ``flags.DEFINE_*``. When several
scripts are imported into one process, the first one to define a shared flag
sets its default and help text; a script run from the shell always gets its
own. Importing this module defines --log_every_seconds, which every script
has.

In: flag names (and a script's own defaults and help texts). Out: the flags
defined on absl's FLAGS (`settings.require` checks the required ones).
Needs no TensorFlow.

Differences from the original:

* The flags that Google's scripts have keep their names, defaults and
  meanings; the help texts are this project's own.
* New flags: the training options (`TRAINING_OPTION_FLAGS`: memory, speed,
  several devices, the input's seed), --max_train_steps, the data files
  (--train_file, ...), the export and input padding. Their defaults train
  as Google's scripts do (--fused_ops=auto changes how GELU, LayerNorm and
  dropout are computed, not what).
"""

import dataclasses
import sys

from absl import flags


FLAGS = flags.FLAGS


# name -> (define function, default, help[, enum values]).
_SHARED_FLAGS = {
    "bert_config_file": (
        flags.DEFINE_string, None,
        "bert_config.json of the pre-trained model: the architecture (layers, "
        "hidden size, heads, vocabulary size, ...) the checkpoint was made with."),
    "vocab_file": (
        flags.DEFINE_string, None,
        "WordPiece vocabulary (vocab.txt, one token per line) of the model."),
    "output_dir": (
        flags.DEFINE_string, None,
        "Directory for checkpoints and result files; created if missing."),
    "init_checkpoint": (
        flags.DEFINE_string, None,
        "Checkpoint to start from, usually a pre-trained BERT model (the path "
        "prefix, e.g. .../bert_model.ckpt)."),
    "input_file": (
        flags.DEFINE_string, None,
        "Input file(s): a file, a comma-separated list of files, or globs."),
    "output_file": (flags.DEFINE_string, None, "Output file(s)."),
    "batch_size": (flags.DEFINE_integer, 32, "Inputs per prediction batch."),
    "input_format": (
        flags.DEFINE_enum, "auto", "Format of the input files; auto: told from the file.",
        ["auto", "jsonl", "tsv", "csv", "text", "swag_csv"]),
    "id_column": (
        flags.DEFINE_string, None,
        "A column (JSON field) identifying each row, copied to the outputs."),
    "skip_malformed_rows": (
        flags.DEFINE_bool, False,
        "Skip (with a warning) data rows with the wrong number of columns instead "
        "of stopping with an error."),
    "do_lower_case": (
        flags.DEFINE_bool, True,
        "Lower-case the text and strip accents before WordPiece: True for "
        "uncased models, False for cased ones."),
    "max_seq_length": (
        flags.DEFINE_integer, 128,
        "Length of the model input in WordPiece tokens, [CLS] and [SEP] "
        "included: shorter inputs are zero-padded to it, longer ones truncated "
        "(SQuAD documents: split into overlapping windows)."),
    "max_predictions_per_seq": (
        flags.DEFINE_integer, 20,
        "Most masked-LM predictions per sequence: pre-training must use the "
        "value its data was created with."),
    # Masking (create_pretraining_data.py, and run_pretraining.py for data
    # written with --dynamic_masking).
    "random_seed": (
        flags.DEFINE_integer, 12345,
        "Seed of the random choices (pairs, truncation, masks); in "
        "run_pretraining.py, of the masks drawn for --dynamic_masking data."),
    "masked_lm_prob": (
        flags.DEFINE_float, 0.15,
        "Share of each sequence's tokens to mask for the masked-LM task."),
    "do_whole_word_mask": (
        flags.DEFINE_bool, False,
        "Mask whole words: when one WordPiece of a word is chosen, all of the "
        "word's pieces are masked (default: each WordPiece is chosen on its own)."),
    "do_train": (flags.DEFINE_bool, False, "Train on the training data."),
    "do_eval": (
        flags.DEFINE_bool, False,
        "Evaluate the model: on the dev set, or for pre-training on --input_file."),
    "do_predict": (flags.DEFINE_bool, False, "Write predictions for the test data."),
    "train_batch_size": (
        flags.DEFINE_integer, 32, "Examples per training batch, over all devices."),
    "eval_batch_size": (
        flags.DEFINE_integer, 8, "Examples per evaluation batch, over all devices."),
    "predict_batch_size": (
        flags.DEFINE_integer, 8, "Examples per prediction batch, over all devices."),
    "learning_rate": (
        flags.DEFINE_float, 5e-5,
        "Peak learning rate of the optimizer, reached after the warm-up and "
        "then decayed to 0 (linearly, unless --poly_power says otherwise)."),
    "num_train_epochs": (
        flags.DEFINE_float, 3.0, "Passes over the training data (may be fractional)."),
    "max_train_steps": (
        flags.DEFINE_integer, 0,
        "If positive, train at most this many optimizer steps (the warm-up and "
        "decay fit the shortened run): for a quick try of a command."),
    "warmup_proportion": (
        flags.DEFINE_float, 0.1,
        "Share of the training steps during which the learning rate climbs "
        "linearly from 0 (0.1: the first tenth)."),
    "save_checkpoints_steps": (
        flags.DEFINE_integer, 1000, "Steps between two saved checkpoints."),
    "iterations_per_loop": (
        flags.DEFINE_integer, 1000,
        "TPU: training steps run on the device per round trip from the host."),
    "use_tpu": (
        flags.DEFINE_bool, False,
        "Run on a Cloud TPU; otherwise on the local CPU or GPU(s)."),
    "tpu_name": (
        flags.DEFINE_string, None,
        "With --use_tpu: the Cloud TPU, by the name it was created with or as "
        "a grpc://<address>:8470 URL."),
    "tpu_zone": (
        flags.DEFINE_string, None,
        "[Optional] GCE zone of the Cloud TPU; looked up in the GCE metadata "
        "when unset."),
    "gcp_project": (
        flags.DEFINE_string, None,
        "[Optional] Google Cloud project that owns the Cloud TPU; looked up in "
        "the GCE metadata when unset."),
    "master": (
        flags.DEFINE_string, None,
        "[Optional] Address of the TensorFlow master; derived from --tpu_name "
        "when unset."),
    "num_tpu_cores": (
        flags.DEFINE_integer, 8,
        "With --use_tpu: how many TPU cores to use."),
    "use_one_hot_embeddings": (
        flags.DEFINE_bool, False,
        "Look up word embeddings as a one-hot matrix product instead of a "
        "gather: the faster way on TPUs, the slower one elsewhere."),
    # The training options (memory, speed, several devices); their defaults
    # leave the training as it is without them.
    "input_seed": (
        flags.DEFINE_integer, 0,
        "If not 0: the seed of the training input's order, the same in every "
        "run; a run resumed from a checkpoint goes on with the batch that an "
        "uninterrupted run would read next. 0: an unseeded order (the "
        "original's); a resumed run reads on from the records after those its "
        "checkpoint has trained on."),
    "gradient_accumulation_steps": (
        flags.DEFINE_integer, 1,
        "Sum the gradients of this many micro-batches of --train_batch_size "
        "before one optimizer update (effective batch = N * train_batch_size). "
        "global_step, num_train_steps and warm-up count optimizer updates."),
    "optimizer": (
        flags.DEFINE_enum, "adamw",
        "adamw: Adam with decoupled weight decay, the original's optimizer. "
        "lamb: the same moments and decay, each variable's step scaled to the "
        "size of its weights (per-variable trust ratio) and bias-corrected; "
        "meant for large batches (large --train_batch_size times "
        "--gradient_accumulation_steps, or many devices).",
        ["adamw", "lamb"]),
    "poly_power": (
        flags.DEFINE_float, 1.0,
        "Power of the learning rate's decay after the warm-up: "
        "lr * (1 - step / num_train_steps) ** poly_power (1.0: the original's "
        "linear decay)."),
    "start_warmup_step": (
        flags.DEFINE_integer, 0,
        "Global step at which the linear warm-up begins (the rate is 0 before "
        "it); the decay still counts from step 0. For a run that continues "
        "an earlier one's step count and warms up again."),
    "recompute_grad": (
        flags.DEFINE_bool, False,
        "Recompute each Transformer layer's activations in the backward pass "
        "instead of storing them (gradient checkpointing): much less memory "
        "for about a third more compute."),
    "use_xla": (flags.DEFINE_bool, False, "Compile the model with XLA (CPU/GPU)."),
    "precision": (
        flags.DEFINE_enum, "fp32",
        "Compute precision of the Transformer: fp32 (the original), fp16 "
        "(GPUs; dynamic loss scaling) or bf16 (TPUs, and CPUs with AVX512_BF16). "
        "Variables, optimizer state and checkpoints stay float32.",
        ["fp32", "fp16", "bf16"]),
    "distribution_strategy": (
        flags.DEFINE_enum, "none",
        "Without --use_tpu: train with tf.distribute. 'mirrored' uses every "
        "local GPU (or --num_gpus of them); 'multi_worker_mirrored' spans the "
        "machines named in the TF_CONFIG environment variable.",
        ["none", "mirrored", "multi_worker_mirrored"]),
    "limit_memory_fragmentation": (
        flags.DEFINE_bool, False,
        "CPU training: return large freed tensors to the system at once "
        "(glibc mmap threshold 128 KiB; on oneDNN, TensorFlow's tensors from "
        "malloc instead of its own pool), which lowers the peak resident memory "
        "of a training step; costs speed, since the kernel zeroes fresh pages "
        "for every large tensor (figures in docs/performance.md)."),
    "log_every_seconds": (  # Every script has it (see `define_flags`).
        flags.DEFINE_integer, 30,
        "Seconds of wall time between two progress lines (training: step, loss, "
        "examples/s and ETA; long conversions: count, rate and ETA)."),
    "num_gpus": (
        flags.DEFINE_integer, 0,
        "With --distribution_strategy=mirrored: number of GPUs to use (0: all "
        "visible GPUs, or the CPU if there are none)."),
    "fused_ops": (
        flags.DEFINE_string, "auto",
        "Which of GELU, LayerNorm and dropout run as XLA-compiled loops instead of "
        "chains of separate ops: auto (all three where no GPU is visible, where "
        "they are faster; none on GPUs, and none in a run that does not train "
        "where TensorFlow's oneDNN is on, which runs the separate GELU inside the "
        "matmul before it), all, none, or a comma-separated list of "
        "gelu, layer_norm, dropout. Same values to float rounding (fused dropout "
        "draws 16 random bits per value). Exports and TPU computations always "
        "use the separate ops. Unless none, --optimizer=lamb's update is "
        "compiled too, where no GPU is visible."),
    # Fine-tuning data, prediction and export.
    "data_dir": (
        flags.DEFINE_string, None,
        "Folder with the task's data files, found there by their usual names."),
    "train_file": (
        flags.DEFINE_string, None, "Training data file (instead of the one in --data_dir)."),
    "dev_file": (
        flags.DEFINE_string, None,
        "Dev (evaluation) data file (instead of the one in --data_dir)."),
    "test_file": (
        flags.DEFINE_string, None,
        "Test data file for --do_predict (instead of the one in --data_dir)."),
    "labels": (
        flags.DEFINE_string, None,
        "Comma-separated labels, in the order of the model's outputs. Default: "
        "those of the training data (or of the run record of an earlier "
        "training run)."),
    "doc_stride": (
        flags.DEFINE_integer, 128,
        "A text too long for one input is read in overlapping windows of "
        "--max_seq_length; each window starts this many word pieces after the "
        "previous one."),
    "export_dir": (
        flags.DEFINE_string, None,
        "If set, export a SavedModel for serving under this directory (in a "
        "timestamped subdirectory)."),
    "explain_steps": (
        flags.DEFINE_integer, 32,  # attributions.DEFAULT_STEPS
        "With --export_dir: the points of the integral by which the export's explain "
        "signature attributes its answer to the input's words (integrated gradients; "
        "per text an explanation runs the model forward on twice this many inputs, "
        "and one, then forward and backward on this many). 0: no explain signature. A "
        "classifier that reads windows (--doc_stride) has none."),
    "export_precision": (
        flags.DEFINE_enum, "fp32",  # serving.EXPORT_PRECISIONS
        "With --export_dir: the precision predict.py serves the export in. fp32: the "
        "SavedModel's graph. int8: the export also holds an ONNX model of the task model "
        "with int8 weights (assets.extra/model_int8.onnx), which predict.py runs through "
        "ONNX Runtime (pip install -r requirements-onnx.txt); TF Serving serves the "
        "SavedModel's fp32 graph, and explanations stay fp32.",
        ["fp32", "int8"]),
    "dynamic_padding": (
        flags.DEFINE_bool, False,
        "Pad each batch only to its longest input (rounded up to a length "
        "bucket, see --length_buckets) instead of --max_seq_length; training "
        "batches are formed from inputs of similar length. Same results up to "
        "float rounding; not on TPUs, which need fixed shapes."),
    "length_buckets": (
        flags.DEFINE_list, None,
        "With --dynamic_padding: the lengths a batch may be padded to, "
        "comma-separated and increasing (--max_seq_length is always the last). "
        "Each is one input shape, compiled once with --use_xla. Default: 8 "
        "even steps up to --max_seq_length, in multiples of 8."),
    "tpu_job_name": (
        flags.DEFINE_string, None,
        "With --use_tpu: the TPU worker job's name, when it is not 'tpu_worker'."),
}


TPU_FLAGS = ("use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores",
             "tpu_job_name")


# The memory, speed and device options of the training scripts
# (training.TrainingOptions).
TRAINING_OPTION_FLAGS = ("gradient_accumulation_steps", "recompute_grad", "use_xla",
                         "precision", "distribution_strategy", "num_gpus",
                         "limit_memory_fragmentation", "fused_ops",
                         "optimizer", "poly_power", "start_warmup_step", "input_seed")

# What the fine-tuning scripts that train, evaluate and predict have in common
# (run_classifier.py, run_ner.py, run_swag.py): the model, the actions, batch
# sizes and schedule, the TPU, the training options, the data files and the
# export.
FINE_TUNING_FLAGS = ("bert_config_file", "vocab_file", "output_dir", "init_checkpoint",
                     "do_lower_case", "max_seq_length", "do_train", "do_eval", "do_predict",
                     "train_batch_size", "eval_batch_size", "predict_batch_size",
                     "learning_rate", "num_train_epochs", "max_train_steps", "warmup_proportion",
                     "save_checkpoints_steps", "iterations_per_loop") + TPU_FLAGS + \
    TRAINING_OPTION_FLAGS + ("data_dir", "train_file", "dev_file", "test_file", "export_dir",
                             "dynamic_padding", "length_buckets")


def define_flags(*names, helps=None, **defaults):
    """Defines the named shared flags, and --log_every_seconds, unless this
    process has them already, and makes them key flags of the calling
    script, which its --help lists.

    Args:
      *names: flag names from `_SHARED_FLAGS` (or tuples of them, such as
        `TPU_FLAGS`).
      helps: optional dict name -> help text, for flags whose meaning this
        script states more precisely (which files --data_dir holds, say).
      **defaults: name=default for flags whose default differs in this
        script (max_seq_length=384 for SQuAD).

    Returns:
      dict name -> this script's default of each flag named: a flag is
      defined once per process, by the first script imported, so where
      several scripts share a process, its registered default may be
      another script's (a script's settings dataclass holds its own).
    """
    return _define(_calling_module(), names, helps, defaults)


def define_settings_flags(settings_class, helps=None):
    """`define_flags` of the shared flags among the fields of a script's
    settings (a `scriptkit.settings` dataclass), each with the field's
    default: a script states its flags and their defaults once, in its
    settings. (The flags only it has, it defines itself.)"""
    fields = [f for f in dataclasses.fields(settings_class) if f.name in _SHARED_FLAGS]
    return _define(_calling_module(), [f.name for f in fields], helps,
                   {f.name: f.default for f in fields})


def _calling_module():
    """The module of the script calling `define_flags`: --help lists its key
    flags. (absl names the module run as a program by its path.)"""
    module = sys._getframe(2).f_globals.get("__name__")  # pylint: disable=protected-access
    return sys.argv[0] if module == "__main__" else module


def _define(module, names, helps, defaults):
    expanded = list(_ALWAYS_DEFINED)
    for name in names:
        expanded.extend(name if isinstance(name, (tuple, list)) else [name])
    script_defaults = {}
    for name in dict.fromkeys(expanded + list(defaults)):
        script_defaults[name] = defaults.get(name, _SHARED_FLAGS[name][1])
        if name not in FLAGS:
            define_fn, default, help_text = _SHARED_FLAGS[name][:3]
            default = defaults.get(name, default)
            help_text = (helps or {}).get(name, help_text)
            if define_fn is flags.DEFINE_enum:
                define_fn(name, default, _SHARED_FLAGS[name][3], help_text)
            else:
                define_fn(name, default, help_text)
        FLAGS.register_key_flag_for_module(module, FLAGS[name])
    return script_defaults


# Every script logs progress: every call of `define_flags` adds this flag,
# and it is defined here for the scripts that define no shared flag.
_ALWAYS_DEFINED = ("log_every_seconds",)
define_flags()
