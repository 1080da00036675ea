"""The fine-tuning protocol that run_classifier.py, run_ner.py,
run_swag.py and run_squad.py follow around their model, written once:
`prepare_run` reads the flags once (the run record, run_config.json, that
later runs follow; the flags and data files a run needs; the model inputs
loaded and checked before any work; the training options) and returns the
`Run` that the script's phases take: its settings, the checkpoint to
predict or export with, the runner. Also the `model_fn` skeleton that each
task (and run_pretraining.py) fills with its head (`task_model_fn`, `Head`),
the predict loop (`iter_predictions`, `predict`), the arguments of an export
and the eval_results.txt file.

In: the parsed flags (read in `use_run_record` only). Out: a `Run`,
predictions, files in --output_dir. Imports TensorFlow.
"""

import dataclasses
import itertools
import json
import os
import sys
import types

import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

import checkpoints
import file_io
import input_pipeline
import logs
import modeling
import output_lock
import runtime
import serving
import shared_flags
import training
import training_progress
from errors import InputError

FLAGS = flags.FLAGS


# ---------------------------------------------------------------------------
# What a fine-tuning run leaves for later runs: the run record.

RUN_RECORD_FILE = "run_config.json"

# The kinds of task a run record names (Hugging Face's problem_type names for
# the classifiers).
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression",
                 "token_classification", "multiple_choice", "question_answering")


def find_run_file(name, output_dir, init_checkpoint=None):
    """The file `name` (run_config.json, labels.txt, ...) that a training run
    wrote: in `output_dir`, else next to `init_checkpoint` (inside it, if it
    is a directory of checkpoints). None where neither has it."""
    folders = [output_dir] if output_dir else []
    if init_checkpoint:
        folders.append(init_checkpoint if file_io.isdir(init_checkpoint)
                       else os.path.dirname(init_checkpoint))
    for folder in folders:
        path = os.path.join(folder, name)
        if file_io.exists(path):
            return path
    return None


@dataclasses.dataclass
class RunRecord:
    """The run record of a fine-tuning run (its run_config.json).

    Attributes:
      path: the file.
      script: the script that wrote it ("run_classifier.py", ...).
      problem_type: one of PROBLEM_TYPES.
      labels: the label list in the order of the model's outputs (NER: the
        tags), or None (regression, multiple choice, question answering).
      flags: name -> value of the flags that define the model's task and
        inputs (task, casing, sequence length, vocabulary, ...).
      bert_config: the model's bert_config.json object.
    """

    path: str
    script: str
    problem_type: str
    labels: list
    flags: dict
    bert_config: dict


def write_run_record(output_dir, problem_type, bert_config, values, labels=None):
    """Writes <output_dir>/run_config.json for the runs that come after a
    fine-tuning run: predictions, evaluations and exports without
    --do_train read it (`use_run_record`), and so can conversions.

    Args:
      output_dir: the run's --output_dir.
      problem_type: one of PROBLEM_TYPES.
      bert_config: the modeling.BertConfig trained.
      values: flag name -> value in this run, for the flags to record
        (--vocab_file is recorded as an absolute path).
      labels: the label list, or None.

    Returns:
      The path written.
    """
    values = dict(values)
    vocab_file = values.get("vocab_file")
    if vocab_file and not file_io.is_remote(vocab_file):
        values["vocab_file"] = os.path.abspath(vocab_file)
    record = {"script": os.path.basename(sys.argv[0]), "problem_type": problem_type,
              "labels": labels, "flags": values, "bert_config": bert_config.to_dict()}
    path = os.path.join(output_dir, RUN_RECORD_FILE)
    with file_io.atomic_output(path) as writer:
        writer.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    file_io.report_output(path, "the run record (task, labels, model config, input settings)")
    return path


def read_run_record(output_dir, init_checkpoint=None):
    """The `RunRecord` of an earlier training run (see `find_run_file`), or
    None. InputError naming the file if it is not a run record."""
    path = find_run_file(RUN_RECORD_FILE, output_dir, init_checkpoint)
    if path is None:
        return None
    values = file_io.read_json_object(path, None)
    try:
        return RunRecord(path, values["script"], values["problem_type"], values["labels"],
                         dict(values["flags"]), dict(values["bert_config"]))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError("%s is not a run record of this project (%s): move it away or "
                         "train again" % (path, e))


def use_run_record(defaults=None):
    """The settings of a run: the parsed flags' values, and where the run
    has no --do_train, those of the `RunRecord` it follows for the flags
    the command line leaves unset. The flags themselves are left as parsed.

    `defaults` (name -> value, what `shared_flags.define_flags` returns)
    are the script's own defaults, which the flags the command line leaves
    unset take first (the process may have defined a shared flag with
    another script's default).

    The record is found in --output_dir, else next to --init_checkpoint.
    Each flag it records that the command line does not give takes the
    recorded value (one line names them all); a flag given with another
    value keeps the command line's value, with a warning. A training run
    reads none: it writes its own.

    Returns:
      (record, settings): the `RunRecord` or None; a namespace with one
      attribute per flag (the run's value of the flag).
    """
    settings = types.SimpleNamespace(**{
        name: shared_flags.flag_value(name, defaults or {}) for name in FLAGS})
    if FLAGS.do_train:
        return None, settings
    record = read_run_record(FLAGS.output_dir, FLAGS.init_checkpoint)
    if record is None:
        return None, settings
    taken = []
    for name, value in sorted(record.flags.items()):
        if name not in FLAGS or value is None:
            continue
        flag = FLAGS[name]
        if flag.using_default_value:
            if name == "vocab_file" and not file_io.exists(value):
                tf.logging.warning("%s names --vocab_file=%s, which does not exist (any more)",
                                   record.path, value)
                continue
            setattr(settings, name, value)
            taken.append("--%s=%s" % (name, value))
        elif flag.value != value and not (name == "vocab_file"
                                          and _same_file(flag.value, value)):
            tf.logging.warning("--%s=%s differs from the training run's %s in %s; using %s",
                               name, flag.value, value, record.path, flag.value)
    if taken:
        tf.logging.info("Settings of the training run, from %s: %s", record.path,
                        " ".join(taken))
    return record, settings


def _same_file(given, recorded):
    """Whether the path `given` on the command line and the path `recorded`
    in a run record name the same file: the same file once resolved (a
    relative path, a link), or two files of the same content (a copy)."""
    try:
        if not file_io.is_remote(given) and not file_io.is_remote(recorded):
            if os.path.exists(given) and os.path.exists(recorded) and \
                    os.path.samefile(given, recorded):
                return True
        return (file_io.exists(given) and file_io.exists(recorded)
                and file_io.file_size(given) == file_io.file_size(recorded)
                and file_io.read_file_bytes(given) == file_io.read_file_bytes(recorded))
    except (OSError, tf.errors.OpError):
        return False


# ---------------------------------------------------------------------------
# The flags, data files and model inputs of a run, checked before any work.

def check_run_flags(settings, min_seq_length):
    """The first checks of a fine-tuning script's `settings` (see
    `use_run_record`): something to do (--do_train, --do_eval, --do_predict
    or --export_dir), an existing --data_dir if one is given, and a
    --max_seq_length of at least `min_seq_length` ([CLS], [SEP]s and one
    piece of text)."""
    if not (settings.do_train or settings.do_eval or settings.do_predict
            or settings.export_dir):
        raise InputError("At least one of `do_train`, `do_eval`, `do_predict` or "
                         "`export_dir` must be set.")
    if settings.data_dir and not tf.io.gfile.isdir(settings.data_dir):
        raise InputError("--data_dir: directory not found: %s" % settings.data_dir)
    if settings.max_seq_length < min_seq_length:
        raise InputError("--max_seq_length must be at least %d, got %d"
                         % (min_seq_length, settings.max_seq_length))


def data_file(settings, flag_name, names, required_for):
    """A data file: its flag (--train_file, ...) in `settings`, else the
    first of `names` found in --data_dir.

    Returns:
      The path, or None if there is none and `required_for` is None.

    Raises:
      InputError: there is none and `required_for` ("--do_train", ...) needs
        it; the message names what was tried.
    """
    path = getattr(settings, flag_name)
    if path:
        return path
    data_dir = settings.data_dir
    for name in names if data_dir else ():
        path = os.path.join(data_dir, name)
        if file_io.exists(path):
            return path
    if required_for:
        where = ("in --data_dir=%s (%s)" % (data_dir, ", ".join(names))
                 if data_dir else "(no --data_dir)")
        raise InputError("%s needs --%s or a data file %s" % (required_for, flag_name, where))
    return None


def require_model_flags(record, settings, *names, data_files=()):
    """`shared_flags.require_flags` for the flags `names`, then --vocab_file,
    --bert_config_file (unless the `RunRecord` `record` holds the config) and
    --output_dir, in one message, with the data files of `data_files` (see
    `shared_flags.require_flags`), all read in `settings`."""
    config_flag = () if record is not None and record.bert_config else ("bert_config_file",)
    shared_flags.require_flags(*names, "vocab_file", *config_flag, "output_dir",
                               data_files=data_files, settings=settings)


def data_file_flags(settings, *actions):
    """The data file flags that the run reads, of (action flag, file flag)
    pairs such as ("do_train", "train_file"): those whose action is set in
    `settings`."""
    return [file_flag for action, file_flag in actions if getattr(settings, action)]


def load_model_inputs(settings, record=None, max_seq_length=None):
    """What a fine-tuning script loads and checks before any work (after
    `require_model_flags`): the tokenizer (--vocab_file, --do_lower_case),
    the BERT config (--bert_config_file, else the `RunRecord` `record`'s),
    --init_checkpoint resolved (`checkpoints.resolve_checkpoint`) and checked against
    the config, and --output_dir checked; the flags read in `settings`.

    Args:
      settings: the run's settings (`use_run_record`).
      record: the run's `RunRecord`, or None.
      max_seq_length: checked against the config's max_position_embeddings.

    Returns:
      (tokenizer, bert_config, init_checkpoint).
    """
    tokenizer = checkpoints.load_tokenizer(settings.vocab_file, settings.do_lower_case,
                                           settings.init_checkpoint)
    init_checkpoint = checkpoints.resolve_checkpoint("init_checkpoint",
                                                     settings.init_checkpoint)
    bert_config = checkpoints.load_bert_config(
        settings.bert_config_file, max_seq_length=max_seq_length, vocab=tokenizer.vocab,
        vocab_file=settings.vocab_file, record=record)
    file_io.check_output_dir(settings.output_dir)
    if init_checkpoint:
        checkpoints.check_init_checkpoint("init_checkpoint", init_checkpoint, bert_config,
                                          settings.bert_config_file or record.path)
    return tokenizer, bert_config, init_checkpoint


# ---------------------------------------------------------------------------
# The prepared run that a script's phases take.

@dataclasses.dataclass
class Run:
    """A fine-tuning run, prepared from the flags by `prepare_run`: what
    its phases (training, evaluation, prediction, export) take.

    Attributes:
      settings: one attribute per flag, the run's value (the command line's,
        or the run record's where the command line leaves a flag unset).
      record: the `RunRecord` followed (a run without --do_train), or None.
      tokenizer: the tokenization.FullTokenizer of --vocab_file.
      bert_config: the modeling.BertConfig.
      init_checkpoint: --init_checkpoint resolved to a checkpoint, or None.
      options: the `training.TrainingOptions`.
      head_variable: a variable of the task's head ("swag/output_weights",
        ...): a checkpoint that holds it is fine-tuned (`checkpoint`).
      task: what the task's flag checks returned (`prepare_run`'s
        `check_flags`), or None.
    """

    settings: types.SimpleNamespace
    record: RunRecord
    tokenizer: object
    bert_config: object
    init_checkpoint: str
    options: training.TrainingOptions
    head_variable: str = None
    task: object = None

    @property
    def output_dir(self):
        """--output_dir."""
        return self.settings.output_dir

    @property
    def fixed_batches(self):
        """Whether every batch must be full (on a TPU, where shapes are
        fixed): evaluation and prediction inputs then get padding
        examples."""
        return bool(self.settings.use_tpu)

    def checkpoint(self, preferred=None):
        """The checkpoint to evaluate, predict and export with: `preferred`
        (the best one kept), else the latest in --output_dir, else
        --init_checkpoint if it holds the task's head
        (`checkpoints.fine_tuned_checkpoint`); None if there is none."""
        return checkpoints.fine_tuned_checkpoint(self.output_dir, self.init_checkpoint,
                                                 self.head_variable, preferred)

    def check_export_checkpoint(self):
        """Raises InputError if --export_dir is set in a run without
        --do_train that has no fine-tuned checkpoint to export."""
        s = self.settings
        if s.export_dir and not s.do_train and self.checkpoint() is None:
            raise InputError("--export_dir: no fine-tuned checkpoint in --output_dir=%s or "
                             "--init_checkpoint to export (train first with --do_train)"
                             % self.output_dir)

    def data_file(self, flag_name, names, required_for):
        """`data_file` of this run's settings."""
        return data_file(self.settings, flag_name, names, required_for)

    def train_schedule(self, num_examples, what="training examples", announce=True):
        """(num_train_steps, num_warmup_steps) of `num_examples`
        (`training.train_schedule` with this run's flags)."""
        s = self.settings
        return training.train_schedule(
            num_examples, s.train_batch_size, s.num_train_epochs, s.max_train_steps,
            s.warmup_proportion, self.options.gradient_accumulation_steps, what=what,
            announce=announce)

    def start_output(self, problem_type=None, record_flags=(), labels=None):
        """Makes --output_dir; in a training run, first takes it for this
        run alone (`output_lock.lock_output_dir`), and writes the run record
        (`write_run_record`) of `problem_type`, the flags `record_flags` and
        the `labels` after it, where `problem_type` is given."""
        if self.settings.do_train:  # The one training run of --output_dir.
            output_lock.lock_output_dir(self.output_dir)
        tf.io.gfile.makedirs(self.output_dir)
        if self.settings.do_train and problem_type:
            self.write_record(problem_type, record_flags, labels)

    def write_record(self, problem_type, record_flags, labels=None):
        """`write_run_record` of this run: the flags `record_flags` with
        their values in it."""
        write_run_record(self.output_dir, problem_type, self.bert_config,
                         {name: getattr(self.settings, name) for name in record_flags},
                         labels=labels)

    def trainer(self, model_fn, eval_batch_size=True):
        """The `training.ResumableTrainer` of `model_fn` for this run (its
        --output_dir, checkpoint, TPU and batch size flags). Without
        `eval_batch_size`, the runner evaluates with no batch size of its
        own (a script without evaluation)."""
        s = self.settings
        batch_sizes = dict(train_batch_size=s.train_batch_size,
                           predict_batch_size=s.predict_batch_size)
        if eval_batch_size:
            batch_sizes["eval_batch_size"] = s.eval_batch_size
        return training.estimator_from_flags(model_fn, self.options, s, **batch_sizes)


def prepare_run(defaults, min_seq_length=None, needs=None, check_flags=None,
                check_model=None, export=True, head_variable=None):
    """Prepares a fine-tuning run from the parsed flags (logging at INFO level
    from now on), checking every input before any work: the run record
    (`use_run_record`), the required flags and data files, the flags against
    each other, the tokenizer, the config and --init_checkpoint
    (`load_model_inputs`), --export_dir and the training options, in this
    order.

    Args:
      defaults: the script's flag defaults (`use_run_record`).
      min_seq_length: the least --max_seq_length (`check_run_flags`); None:
        the script checks its flags itself (`check_flags`), and
        --max_seq_length against the model's positions is still checked.
      needs: settings -> (names, data files): the flags the task requires
        besides the model's, and the data file flags it reads (see
        `require_model_flags`). None: none.
      check_flags: settings -> anything, the task's own checks of its
        flags, raising InputError (after the shared ones); what it returns
        is the run's `task` (a task's processor, ...).
      check_model: (settings, bert_config) -> None, the task's checks
        against the model config.
      export: whether the script takes --export_dir.
      head_variable: `Run.head_variable`.

    Returns:
      The `Run`.
    """
    tf.logging.set_verbosity(tf.logging.INFO)
    record, settings = use_run_record(defaults)
    names, data_files = needs(settings) if needs else ((), ())
    require_model_flags(record, settings, *names, data_files=data_files)
    if min_seq_length is not None:
        check_run_flags(settings, min_seq_length)
    task = check_flags(settings) if check_flags else None
    tokenizer, bert_config, init_checkpoint = load_model_inputs(
        settings, record, settings.max_seq_length)
    if check_model:
        check_model(settings, bert_config)
    if export and settings.export_dir:
        serving.check_export_flags(settings.vocab_file, settings.export_dir)
    options = training.training_options_from_flags(settings, training=settings.do_train)
    return Run(settings, record, tokenizer, bert_config, init_checkpoint, options,
               head_variable, task)


# ---------------------------------------------------------------------------
# The model_fn: one skeleton around each task's head.

@dataclasses.dataclass
class Head:
    """What a task's head builds for one mode of `task_model_fn`: the parts
    of that mode's spec.

    Attributes:
      loss: float32 scalar, the mean loss (TRAIN and EVAL).
      eval_metrics: (metric_fn, tensors), the EVAL metrics (see
        `runtime.TPUEstimatorSpec`).
      predictions: name -> tensor [batch, ...], what PREDICT returns.
      export_outputs: name -> tensor [batch, ...], the outputs of the
        default serving signature in PREDICT; None: none (the task exports
        otherwise).
    """

    loss: object = None
    eval_metrics: tuple = None
    predictions: dict = None
    export_outputs: dict = None


def task_model_fn(build_head, init_checkpoint, learning_rate, num_train_steps,
                  num_warmup_steps, use_tpu, options=None, count_tokens=True,
                  passed_through=(), modes=(runtime.ModeKeys.TRAIN, runtime.ModeKeys.EVAL,
                                            runtime.ModeKeys.PREDICT)):
    """A task's model_fn for the runner (TPUEstimator API), from its head:
    logs the features, builds the head, sets the trainable variables up to
    start from `init_checkpoint` (`checkpoints.init_from_checkpoint`, which
    logs them), then makes the spec of the mode: TRAIN, the train op of the
    head's loss (`training.train_spec`); EVAL, its metrics; PREDICT, its
    predictions and serving signature.

    Args:
      build_head: (features, mode) -> `Head`: the model and the task's head
        built on `features` (name -> tensor [batch, ...]) for `mode` (a
        `runtime.ModeKeys`; dropout in TRAIN only), with the parts that
        mode's spec takes.
      init_checkpoint: the checkpoint to start from, or None.
      learning_rate, num_train_steps, num_warmup_steps: the optimizer's
        schedule (TRAIN only).
      use_tpu: build for TPUEstimator (restore through a scaffold).
      options: `training.TrainingOptions` (None: the defaults).
      count_tokens: whether the progress lines count tokens: every position
        of input_ids [batch, ...] in a training batch.
      passed_through: names of features that PREDICT returns as they come,
        where the features have them (label_ids and is_real_example, to
        score the predictions by).
      modes: the modes the task has; another raises ValueError.

    Returns:
      model_fn(features, labels, mode, params) -> runtime.TPUEstimatorSpec.
      `labels` goes unused (the targets come among the features);
      params["batch_size"] is a training batch's size.
    """

    def model_fn(features, labels, mode, params):
        """See task_model_fn."""
        del labels  # The targets are among the features.
        if mode not in modes:
            raise ValueError("%s's model_fn supports %s, not %s"
                             % (build_head.__module__, " and ".join(modes), mode))
        input_pipeline.log_features(features)
        head = build_head(features, mode)
        scaffold_fn = checkpoints.init_from_checkpoint(init_checkpoint, use_tpu)

        if mode == runtime.ModeKeys.TRAIN:
            tokens_per_step = None
            if count_tokens:
                tokens_per_step = params["batch_size"]
                for size in modeling.get_shape_list(features["input_ids"])[1:]:
                    tokens_per_step = tokens_per_step * size
            return training.train_spec(
                head.loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
                options, examples_per_step=params["batch_size"],
                tokens_per_step=tokens_per_step, scaffold_fn=scaffold_fn)

        if mode == runtime.ModeKeys.EVAL:
            return runtime.TPUEstimatorSpec(mode=mode, loss=head.loss,
                                            eval_metrics=head.eval_metrics,
                                            scaffold_fn=scaffold_fn)

        predictions = dict(head.predictions)
        for name in passed_through:
            if name in features:
                predictions[name] = features[name]
        export_outputs = None
        if head.export_outputs is not None:
            export_outputs = {tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
                              runtime.PredictOutput(head.export_outputs)}
        return runtime.TPUEstimatorSpec(mode=mode, predictions=predictions,
                                        export_outputs=export_outputs, scaffold_fn=scaffold_fn)

    return model_fn


def example_labels(features, label_shape=(), dtype=tf.int32):
    """The label_ids and is_real_example of `features` (input_ids [batch,
    ...] and, but in a serving request, label_ids and is_real_example
    [batch]); a serving request gets zero labels, each example real.

    Args:
      label_shape: the shape of one example's label ([num_labels] for
        multi-label tasks).
      dtype: the zero labels' dtype.

    Returns:
      (label_ids [batch, *label_shape], is_real_example float32 [batch]).
    """
    # The batch's shape only where it is needed: an op more in the graph
    # would shift the seeds of its random ops under a graph-level seed.
    if "label_ids" in features:
        label_ids = features["label_ids"]
    else:  # A serving request.
        shape = tf.shape(features["input_ids"])[:1]
        if label_shape:
            shape = tf.concat([shape, label_shape], axis=0)
        label_ids = tf.zeros(shape, dtype=dtype)
    if "is_real_example" in features:
        is_real_example = tf.cast(features["is_real_example"], dtype=tf.float32)
    else:
        is_real_example = tf.ones(tf.shape(features["input_ids"])[:1], dtype=tf.float32)
    return label_ids, is_real_example


def loss_and_accuracy(accuracy=True):
    """The EVAL metric_fn of a head that picks one of its logits:
    metric_fn(per_example_loss [batch], label_ids [batch], logits [batch,
    classes], is_real_example [batch]) -> {"eval_loss", and if `accuracy`
    "eval_accuracy" (of the argmax)}, streaming metrics over the real
    examples."""

    def metric_fn(per_example_loss, label_ids, logits, is_real_example):
        # Padding examples (TPU) have is_real_example 0: no weight.
        metrics = {"eval_loss": tf.metrics.mean(values=per_example_loss,
                                                weights=is_real_example)}
        if accuracy:
            predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
            metrics["eval_accuracy"] = tf.metrics.accuracy(
                labels=label_ids, predictions=predicted, weights=is_real_example)
        return metrics

    return metric_fn


# ---------------------------------------------------------------------------
# Prediction.

def iter_predictions(trainer, input_fn, num_records, batch_size, count, checkpoint=None,
                     init_checkpoint=None, phase="Predicting", what="examples",
                     name_weights=True, unit="batches", last_line=True):
    """Yields the first `count` predictions of `trainer` (a
    `training.ResumableTrainer`, or what `training.make_estimator` returns)
    on the `num_records` records of `input_fn` (the rest are padding
    records), in input order, as they come: the one predict loop of the
    scripts. Logs a first line naming the weights used
    (`checkpoints.log_checkpoint_used`) and a progress line per
    --log_every_seconds, then a last one with the time it took (see
    `last_line`).

    Args:
      batch_size: the records per batch (for the progress lines).
      checkpoint: the checkpoint to predict with; None: the latest in the
        trainer's model_dir (else `init_checkpoint`).
      phase: "Predicting", "Evaluating", ...: the logs' name of the pass.
      what: what the records stand for, in the error message.
      name_weights: whether to log the line naming the weights (False where
        the caller has named them, for a pass of an evaluation).
      unit: "batches": the progress lines count the session's batches
        (`training_progress.ProgressHook`); another unit ("features", ...):
        they count the predictions in that unit (`logs.Progress`), from the
        first one on, so that the rate leaves out building the graph and
        restoring the weights.
      last_line: with a unit other than "batches", whether to log the last
        line (False where the caller reports the count and time itself).

    Yields:
      The predictions (dicts of name -> NumPy array, one record each).

    Raises:
      RuntimeError: fewer than `count` predictions came.
    """
    if name_weights:
        checkpoints.log_checkpoint_used(phase, checkpoint, trainer.model_dir, init_checkpoint)
    hooks = []
    if unit == "batches":
        hooks.append(training_progress.ProgressHook(
            phase, training_progress.num_batches(num_records, batch_size)))
    predictions = iter(trainer.predict(input_fn=input_fn, checkpoint_path=checkpoint,
                                       hooks=hooks))
    progress = None
    done = 0
    for prediction in itertools.islice(predictions, count):
        if progress is None and unit != "batches":
            progress = logs.Progress(phase, num_records, unit=unit)
        done += 1
        yield prediction
        if progress is not None:
            progress.update()
    # The padding records' predictions, read to the end of the pass: a pass
    # left open never ends its session, whose hooks log the last line. At
    # the end TPUEstimator.predict logs this line twice (in its `finally`
    # and after it).
    with logs.once("prediction_loop marked as finished"):
        for _ in predictions:
            pass
    if done != count:
        raise RuntimeError("Got %d predictions for %d %s" % (done, count, what))
    if progress is not None and last_line:
        progress.done()


def predict(trainer, input_fn, num_records, batch_size, count, checkpoint=None,
            init_checkpoint=None, phase="Predicting", what="examples"):
    """`iter_predictions` (see there for the arguments) as a list of the
    `count` predictions (dicts of name -> NumPy array), in input order."""
    return list(iter_predictions(trainer, input_fn, num_records, batch_size, count,
                                 checkpoint, init_checkpoint, phase, what))


# ---------------------------------------------------------------------------
# Exports and result files.

def export_builder_args(options):
    """The arguments of a script's model_fn builder for an export: no
    checkpoint to start from (the export's own restores it), no training,
    no TPU, and the `training.TrainingOptions` `options` made fit for serving
    (`TrainingOptions.for_export`)."""
    return dict(init_checkpoint=None, learning_rate=0.0, num_train_steps=None,
                num_warmup_steps=None, use_tpu=False, use_one_hot_embeddings=False,
                options=(options or training.TrainingOptions()).for_export())


def write_eval_results(result, output_dir, file_name="eval_results.txt",
                       header="***** Eval results *****", headline=None):
    """Logs `result` (name -> value) under `header` and writes it to
    output_dir/file_name as "key = value" lines sorted by key (the
    original's eval_results.txt format), reported with its `headline`
    metric (`file_io.report_output`).

    Returns:
      The path written.
    """
    path = os.path.join(output_dir, file_name)
    with file_io.atomic_output(path) as writer:
        tf.logging.info(header)
        for key in sorted(result):
            line = "%s = %s" % (key, result[key])
            tf.logging.info("  %s", line)
            writer.write(line + "\n")
    file_io.report_output(path, "%s = %s" % (headline, result[headline])
                          if headline in result else "")
    return path
