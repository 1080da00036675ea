"""What every BERT script repeats: shared flags, run configuration, estimator
construction, checkpoint initialisation, training options, logging and file
output.

Flags shared by several scripts are defined here, once, so that scripts can
be imported side by side (as the tests do) without absl's duplicate-flag
error. A script lists the shared flags it uses with `define_flags`, and
defines its own flags with plain ``flags.DEFINE_*``.

When several scripts are imported into one process, the first one to define a
shared flag sets its default (only ``max_seq_length`` differs: 384 for SQuAD,
128 elsewhere); a script run from the shell always gets its own default.
"""

import contextlib
import importlib
import os
import sys
import time

from absl import app, flags


class _LazyModule:
    """A module imported on first attribute access.

    TensorFlow (and modeling/optimization, which import it) are loaded only
    when a function here needs them, so a script using just the flags and
    input checks (create_pretraining_data.py) runs without TensorFlow's
    ~440 MB and ~3 s import.
    """

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


tf = _LazyModule("tensorflow.compat.v1")
modeling = _LazyModule("modeling")
optimization = _LazyModule("optimization")

FLAGS = flags.FLAGS


class InputError(ValueError):
    """Bad user input (a flag, a file, a line): reported without a traceback."""


# name -> (define function, default, help[, enum values]). Names, defaults and
# meanings are the original scripts'; the help texts are this project's.
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
        "Peak learning rate of Adam, reached after the warm-up and then "
        "decayed linearly to 0."),
    "num_train_epochs": (
        flags.DEFINE_float, 3.0, "Passes over the training data (may be fractional)."),
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
    # Options beyond the original (memory, speed, several devices); all off
    # by default, so default behaviour stays the original's.
    "gradient_accumulation_steps": (
        flags.DEFINE_integer, 1,
        "Sum the gradients of this many micro-batches of --train_batch_size "
        "before one optimizer update (effective batch = N * train_batch_size). "
        "global_step, num_train_steps and warm-up count optimizer updates."),
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
        "CPU training: make glibc's malloc return large freed blocks to the "
        "system at once (mmap threshold 128 KiB), which lowers peak resident "
        "memory of a BERT-Base training step by about 1 GiB; may cost some "
        "speed (more page faults)."),
    "num_gpus": (
        flags.DEFINE_integer, 0,
        "With --distribution_strategy=mirrored: number of GPUs to use (0: all "
        "visible GPUs, or the CPU if there are none)."),
}

TPU_FLAGS = ("use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores")
TRAINING_OPTION_FLAGS = ("gradient_accumulation_steps", "recompute_grad", "use_xla",
                         "precision", "distribution_strategy", "num_gpus",
                         "limit_memory_fragmentation")


def define_flags(*names, **default_overrides):
    """Defines the named shared flags unless already defined in this process.

    Args:
      *names: flag names from `_SHARED_FLAGS` (or tuples of them, such as
        `TPU_FLAGS`).
      **default_overrides: name=default for flags whose default differs in
        this script (e.g. max_seq_length=384 for SQuAD).
    """
    expanded = []
    for name in names:
        expanded.extend(name if isinstance(name, (tuple, list)) else [name])
    for name in list(expanded) + [n for n in default_overrides if n not in expanded]:
        if name in FLAGS:
            continue
        define_fn, default, help_text = _SHARED_FLAGS[name][:3]
        default = default_overrides.get(name, default)
        if define_fn is flags.DEFINE_enum:
            define_fn(name, default, _SHARED_FLAGS[name][3], help_text)
        else:
            define_fn(name, default, help_text)


def run_script(main):
    """`absl.app.run(main)`, turning `InputError` into a one-line error and
    exit status 1 instead of a traceback."""
    def wrapped(argv):
        if _flag("limit_memory_fragmentation", False):
            import recompute
            recompute.limit_memory_fragmentation()
        try:
            return main(argv)
        except InputError as e:
            if "tensorflow" in sys.modules:
                tf.logging.error("%s", e)
            else:  # Not worth importing TensorFlow (seconds) to log it.
                from absl import logging as absl_logging
                absl_logging.error("%s", e)
            sys.stderr.write("ERROR: %s\n" % e)
            sys.exit(1)
    app.run(wrapped)


# ---------------------------------------------------------------------------
# Input validation.

def require_flags(*names):
    """Raises InputError naming every listed flag that is unset."""
    missing = [n for n in names if getattr(FLAGS, n) in (None, "")]
    if missing:
        raise InputError("Missing required flag(s): %s" % ", ".join("--" + n for n in missing))


def require_file(flag_name, path):
    """Raises InputError if `path` (the value of --flag_name) does not exist."""
    if not path:
        raise InputError("--%s is required" % flag_name)
    if not tf.io.gfile.exists(path):
        raise InputError("--%s: file not found: %s" % (flag_name, path))


def require_checkpoint(flag_name, path):
    """Raises InputError if `path` (the value of --flag_name) is set but no
    checkpoint exists there (an unset flag is fine: random initialisation)."""
    if path and not tf.train.checkpoint_exists(path):
        raise InputError("--%s: no checkpoint at %s" % (flag_name, path))


def expand_file_patterns(flag_name, patterns):
    """Comma-separated files or globs -> sorted list of existing files.

    Raises:
      InputError: a pattern matches nothing (names the flag and the pattern).
    """
    files = []
    for pattern in patterns.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        matched = tf.io.gfile.glob(pattern)
        if not matched:
            raise InputError("--%s: no file matches %s" % (flag_name, pattern))
        files.extend(sorted(matched))
    if not files:
        raise InputError("--%s is required" % flag_name)
    return files


def load_bert_config(bert_config_file, max_seq_length=None, vocab=None,
                     vocab_file=None):
    """Reads and checks a BERT config against the other inputs.

    Args:
      bert_config_file: path of bert_config.json.
      max_seq_length: if given, must not exceed max_position_embeddings.
      vocab: if given (token -> id), its size must not exceed vocab_size.
      vocab_file: its path, for the message.

    Returns:
      modeling.BertConfig.

    Raises:
      InputError: naming the flag at fault.
    """
    require_file("bert_config_file", bert_config_file)
    try:
        config = modeling.BertConfig.from_json_file(bert_config_file)
        modeling._validate_config(config)
    except ValueError as e:
        raise InputError("--bert_config_file: %s" % e)
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise InputError(
            "Cannot use sequence length %d because the BERT model was only trained "
            "up to sequence length %d (--max_seq_length vs max_position_embeddings "
            "in %s)" % (max_seq_length, config.max_position_embeddings, bert_config_file))
    if vocab is not None and len(vocab) > config.vocab_size:
        raise InputError(
            "--vocab_file %s has %d tokens but vocab_size in --bert_config_file %s is "
            "%d: the vocabulary does not belong to this model"
            % (vocab_file, len(vocab), bert_config_file, config.vocab_size))
    return config


def load_tokenizer(vocab_file, do_lower_case, init_checkpoint=None):
    """A FullTokenizer, after checking the casing against a Google checkpoint
    name. Raises InputError for a missing vocabulary or a casing mismatch."""
    import tokenization
    require_file("vocab_file", vocab_file)
    try:
        tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
        return tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    except ValueError as e:
        raise InputError(str(e))


# ---------------------------------------------------------------------------
# Model building blocks shared by the model_fns.

def model_options():
    """Keyword arguments for `modeling.BertModel` from the option flags
    (compute_type from --precision, recompute_grad)."""
    compute_type = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}[
        _flag("precision", "fp32")]
    return {"compute_type": compute_type,
            "recompute_grad": bool(_flag("recompute_grad", False))}


def _flag(name, default):
    """Value of a shared flag, or `default` if this script did not define it
    or the flags are not parsed (a script imported as a library)."""
    if name in FLAGS and FLAGS.is_parsed():
        return getattr(FLAGS, name)
    return default


def init_from_checkpoint(init_checkpoint, use_tpu):
    """Sets up the graph's trainable variables to start from `init_checkpoint`
    (those whose names and shapes it holds; the others keep their random
    initialisers) and logs every trainable variable, marking the restored
    ones with ", *INIT_FROM_CKPT*".

    Args:
      init_checkpoint: checkpoint path prefix, or None/"" for none.
      use_tpu: whether the model_fn is built for TPUEstimator.

    Returns:
      The scaffold_fn for TPUEstimatorSpec: on TPU the restore has to be set
      up inside it; None otherwise (or without a checkpoint).
    """
    variables = tf.trainable_variables()
    restored = {}
    scaffold_fn = None
    if init_checkpoint:
        # Trainable variables only, like the original: taking the source's
        # global_step as well would start a new run (fine-tuning, or
        # pre-training continued in a new --output_dir) at the source's step,
        # past its own num_train_steps and learning-rate schedule.
        assignment_map, restored = modeling.get_assignment_map_from_checkpoint(
            variables, init_checkpoint)
        if use_tpu:
            def restoring_scaffold():
                tf.train.init_from_checkpoint(init_checkpoint, assignment_map)
                return tf.train.Scaffold()

            scaffold_fn = restoring_scaffold
        else:
            tf.train.init_from_checkpoint(init_checkpoint, assignment_map)

    tf.logging.info("**** Trainable Variables ****")
    for var in variables:
        mark = ", *INIT_FROM_CKPT*" if var.name in restored else ""
        tf.logging.info("  name = %s, shape = %s%s", var.name, var.shape, mark)
    return scaffold_fn


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Shortens two token lists in place until together they hold at most
    `max_length` tokens, always dropping the last token of the longer list
    (of `tokens_b` when both are equally long).

    Trimming the longer side keeps most of a short text, where each token
    tends to carry more information than a token of a long one.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        longer.pop()


def pack_sequence_pair(tokens_a, tokens_b, max_seq_length, tokenizer):
    """Lays out one text or a text pair the way BERT reads it.

      one text:  [CLS] a1 a2 a3 [SEP]             segment ids 0 0 0 0 0
      a pair:    [CLS] a1 a2 [SEP] b1 b2 b3 [SEP] segment ids 0 0 0 0 1 1 1 1

    Too long inputs are cut first: a single text at its end, a pair with
    `truncate_seq_pair`. The id lists are then zero-padded to max_seq_length.

    Args:
      tokens_a: word pieces of the first text (a pair's is shortened in
        place).
      tokens_b: word pieces of the second text; None or empty for one text.
      max_seq_length: length of the returned id lists.
      tokenizer: FullTokenizer, to map tokens to ids.

    Returns:
      (tokens, input_ids, input_mask, segment_ids): the tokens with [CLS] and
      [SEP] and without padding, then three lists of max_seq_length ints;
      input_mask is 1 on real tokens and 0 on padding.
    """
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS], 2 x [SEP]
    else:
        tokens_a = tokens_a[:max_seq_length - 2]  # [CLS], [SEP]

    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)

    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = [0] * (max_seq_length - len(input_ids))
    return tokens, input_ids + padding, input_mask + padding, segment_ids + padding


def log_example(fields):
    """Logs one converted example (the scripts do so for their first five):
    a "*** Example ***" line, then "name: value" per (name, value) of
    `fields`, lists written space-separated."""
    tf.logging.info("*** Example ***")
    for name, value in fields:
        if isinstance(value, (list, tuple)):
            value = " ".join(str(v) for v in value)
        tf.logging.info("%s: %s", name, value)


def log_phase(title, details):
    """Logs the start of a phase of a run the way the original scripts do:
    "***** <title> *****", then "  <name> = <value>" per (name, value) of
    `details`."""
    tf.logging.info("***** %s *****", title)
    for name, value in details:
        tf.logging.info("  %s = %s", name, value)


def int64_feature(values):
    """A tf.train.Feature holding the ints `values`."""
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values):
    """A tf.train.Feature holding the floats `values`."""
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def decode_record(record, name_to_features):
    """Parses one serialized tf.train.Example into a dict of tensors.

    tf.train.Example stores integers as int64 only, while TPUs work on int32:
    int64 features come back as int32. Float features are left as they are.

    Args:
      record: scalar string tensor.
      name_to_features: name -> tf.io.FixedLenFeature.

    Returns:
      dict name -> tensor of the feature's shape.
    """
    example = tf.io.parse_single_example(record, name_to_features)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
            for name, t in example.items()}


def log_features(features):
    """Logs the name and shape of every input feature (each model_fn
    starts with it)."""
    tf.logging.info("*** Features ***")
    for name in sorted(features):
        tf.logging.info("  name = %s, shape = %s", name, features[name].shape)


def create_train_op(loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu):
    """`optimization.create_optimizer` with the option flags applied
    (--gradient_accumulation_steps, dynamic loss scaling for --precision=fp16).
    """
    loss_scale = None
    if _flag("precision", "fp32") == "fp16":
        import mixed_precision
        loss_scale = mixed_precision.DynamicLossScale()
    return optimization.create_optimizer(
        loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
        gradient_accumulation_steps=_flag("gradient_accumulation_steps", 1),
        loss_scale_manager=loss_scale)


def num_train_steps(num_examples, train_batch_size, num_train_epochs):
    """Number of optimizer updates for `num_train_epochs` over `num_examples`.

    One update consumes `train_batch_size * --gradient_accumulation_steps`
    examples, so with accumulation the schedule (warm-up, decay, max_steps)
    stays in optimizer updates while covering the same epochs.
    """
    accumulation = max(1, _flag("gradient_accumulation_steps", 1) or 1)
    return int(num_examples / (train_batch_size * accumulation) * num_train_epochs)


class _ThroughputHookMethods:
    """Logs loss, examples/s and (optionally) tokens/s every N steps.

    `ThroughputHook` is this plus tf.train.SessionRunHook, made on first use
    (see `__getattr__`) so that importing run_common does not load TensorFlow.
    """

    def __init__(self, loss, examples_per_step, tokens_per_step=None, every_n_steps=None):
        self._loss = loss
        self._examples_per_step = examples_per_step
        self._tokens_per_step = tokens_per_step
        self._every_n = every_n_steps or 10
        self._step = 0
        self._start = None
        self._losses = []

    def before_run(self, run_context):
        if self._start is None:
            self._start = time.time()
        return tf.train.SessionRunArgs({"loss": self._loss,
                                        "step": tf.train.get_global_step()})

    def after_run(self, run_context, run_values):
        self._step += 1
        self._losses.append(float(run_values.results["loss"]))
        if self._step % self._every_n == 0:
            elapsed = max(time.time() - self._start, 1e-9)
            examples = self._examples_per_step * self._every_n / elapsed
            message = "step %d: loss = %.4f, %.2f examples/s" % (
                run_values.results["step"], sum(self._losses) / len(self._losses), examples)
            if self._tokens_per_step:
                message += ", %.0f tokens/s" % (self._tokens_per_step * self._every_n / elapsed)
            tf.logging.info(message)
            self._losses = []
            self._start = time.time()


def training_hooks(loss, examples_per_step, tokens_per_step=None, use_tpu=False,
                   every_n_steps=None):
    """Hooks logging the training loss and throughput on CPU/GPU.

    On TPU, device tensors cannot be read by host hooks, so none are added
    (TPUEstimator logs loss and examples/s itself there).
    """
    if use_tpu:
        return []
    return [_throughput_hook_class()(loss, examples_per_step, tokens_per_step,
                                     every_n_steps=every_n_steps)]


_THROUGHPUT_HOOK = []


def _throughput_hook_class():
    """`ThroughputHook`: a tf.train.SessionRunHook, created once, lazily."""
    if not _THROUGHPUT_HOOK:
        _THROUGHPUT_HOOK.append(type("ThroughputHook", (_ThroughputHookMethods,
                                                        tf.train.SessionRunHook),
                                     {"__module__": __name__}))
    return _THROUGHPUT_HOOK[0]


def __getattr__(name):
    # PEP 562: `run_common.ThroughputHook` still works, without importing
    # TensorFlow when run_common itself is imported.
    if name == "ThroughputHook":
        return _throughput_hook_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ---------------------------------------------------------------------------
# Run configuration and the runner (the execution layer lives in runtime.py).

def make_run_config(output_dir, save_checkpoints_steps, iterations_per_loop=1000,
                    use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8, keep_checkpoint_max=5,
                    tpu_job_name=None):
    """`runtime.make_run_config` with the option flags applied (--use_xla,
    --distribution_strategy, --num_gpus)."""
    import runtime
    with _config_errors_as_input_errors():
        return runtime.make_run_config(
            output_dir, save_checkpoints_steps, iterations_per_loop=iterations_per_loop,
            use_tpu=use_tpu, tpu_name=tpu_name, tpu_zone=tpu_zone, gcp_project=gcp_project,
            master=master, num_tpu_cores=num_tpu_cores,
            keep_checkpoint_max=keep_checkpoint_max, tpu_job_name=tpu_job_name,
            use_xla=_flag("use_xla", False),
            distribution_strategy=_flag("distribution_strategy", "none"),
            num_gpus=_flag("num_gpus", 0))


def make_estimator(model_fn, run_config, use_tpu, train_batch_size=None,
                   eval_batch_size=None, predict_batch_size=None):
    """`runtime.make_estimator`: the runner for the scripts' model_fn."""
    import runtime
    with _config_errors_as_input_errors():
        return runtime.make_estimator(model_fn, run_config, use_tpu,
                                      train_batch_size=train_batch_size,
                                      eval_batch_size=eval_batch_size,
                                      predict_batch_size=predict_batch_size)


@contextlib.contextmanager
def _config_errors_as_input_errors():
    import runtime
    try:
        yield
    except runtime.ConfigError as e:
        raise InputError(str(e))


# ---------------------------------------------------------------------------
# Output files (through tf.io.gfile, so gs:// paths work).

@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path` for the caller to write; on
    success it is renamed to `path`, on failure removed, so a half-written
    file never looks complete."""
    tmp_path = "%s.tmp-%d" % (path, os.getpid())
    try:
        yield tmp_path
        tf.io.gfile.rename(tmp_path, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp_path):
            tf.io.gfile.remove(tmp_path)
        raise


@contextlib.contextmanager
def atomic_output(path, mode="w"):
    """Opens `path` for writing through `atomic_path`.

    Yields:
      A writable tf.io.gfile.GFile.
    """
    with atomic_path(path) as tmp_path:
        with tf.io.gfile.GFile(tmp_path, mode) as writer:
            yield writer


def write_eval_results(result, output_dir, file_name="eval_results.txt",
                       header="***** Eval results *****"):
    """Logs `result` (name -> value) under `header` and writes it to
    output_dir/file_name as "key = value" lines sorted by key (the
    original's eval_results.txt format).

    Returns:
      The path written.
    """
    path = os.path.join(output_dir, file_name)
    with atomic_output(path) as writer:
        tf.logging.info(header)
        for key in sorted(result):
            line = "%s = %s" % (key, result[key])
            tf.logging.info("  %s", line)
            writer.write(line + "\n")
    return path
