"""The fine-tuning protocol that run_classifier.py, run_ner.py,
run_swag.py and run_squad.py follow around their model, written once.

`prepare_run` takes a script's settings (its `scriptkit.settings`
dataclass, read from the flags in its main), follows the run record of an
earlier training run (`run_record.follow`), and checks every input before
any work: the flags and data files a run needs, the tokenizer, the config,
--init_checkpoint, --export_dir and the training options. The `Run` it
returns carries the phases of a script's main as methods: the schedule
(`train_schedule`), the output folder and run record (`start_output`), the
model_fn's arguments (`model_fn_args`) and runner (`trainer`), training
(`train`), evaluation (`evaluate`), prediction (`predict`), and what an
export takes (`export_source`). Also the predict loop (`iter_predictions`)
and the eval_results.txt file.

In: a script's settings. Out: a `Run`, predictions, files in --output_dir.
Imports TensorFlow.
"""

import dataclasses
import itertools
import os

from scriptkit import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf

import modeling
from scriptkit import checkpoints
from scriptkit import evaluation
from scriptkit import file_io
from scriptkit import logs
from scriptkit import output_lock
from scriptkit import run_record
from scriptkit import serving
from scriptkit import settings as settings_lib
from scriptkit import training
from scriptkit import training_progress
from scriptkit.errors import InputError


# ---------------------------------------------------------------------------
# The flags, data files and model inputs of a run, checked before any work.

def check_run_flags(settings, min_seq_length):
    """The first checks of a fine-tuning script's `settings`: something to
    do (--do_train, --do_eval, --do_predict or --export_dir), an existing
    --data_dir if one is given, and a
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
    """`settings.require` for the flags `names`, then --vocab_file,
    --bert_config_file (unless the `RunRecord` `record` holds the config) and
    --output_dir, in one message, with the data files of `data_files` (see
    `settings.require`), all read in `settings`."""
    config_flag = () if record is not None and record.bert_config else ("bert_config_file",)
    settings_lib.require(settings, *names, "vocab_file", *config_flag, "output_dir",
                         data_files=data_files)


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
      settings: the run's settings.
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
# The prepared run, and the phases of a script's main.

@dataclasses.dataclass
class Run:
    """A fine-tuning run, prepared by `prepare_run`: what its phases
    (training, evaluation, prediction, export) take, and the phases
    themselves.

    Attributes:
      script: the script of the run ("run_classifier.py", ...).
      settings: the script's settings (a `scriptkit.settings` dataclass): the
        command line's, and the run record's where the command line leaves a
        flag unset.
      record: the `run_record.RunRecord` followed (a run without
        --do_train), or None.
      tokenizer: the tokenization.FullTokenizer of --vocab_file.
      bert_config: the modeling.BertConfig.
      init_checkpoint: --init_checkpoint resolved to a checkpoint, or None.
      options: the `training.TrainingOptions`.
      head_variable: a variable of the task's head ("swag/output_weights",
        ...): a checkpoint that holds it is fine-tuned (`checkpoint`).
      task: what the task's flag checks returned (`prepare_run`'s
        `check_flags`), or None.
    """

    script: str
    settings: settings_lib.FineTuningCore  # a FineTuning but for run_squad.py
    record: run_record.RunRecord
    tokenizer: object
    bert_config: modeling.BertConfig
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

    def check_output_dir(self, head_shapes):
        """Raises InputError (before any work) where --output_dir holds a
        checkpoint of another model, which would be restored and fail:
        `head_shapes` (variable -> shape) are the task head's."""
        checkpoints.check_output_dir_checkpoint(self.output_dir, self.bert_config,
                                                head_shapes)

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
        (`write_record`) of `problem_type`, the flags `record_flags` and
        the `labels` after it, where `problem_type` is given."""
        if self.settings.do_train:  # The one training run of --output_dir.
            output_lock.lock_output_dir(self.output_dir)
        tf.io.gfile.makedirs(self.output_dir)
        if self.settings.do_train and problem_type:
            self.write_record(problem_type, record_flags, labels)

    def write_record(self, problem_type, record_flags, labels=None):
        """`run_record.write` of this run: the flags `record_flags` with
        their values in it."""
        run_record.write(self.output_dir, self.script, problem_type, self.bert_config,
                         {name: getattr(self.settings, name) for name in record_flags},
                         labels=labels)

    def model_fn_args(self, num_train_steps=None, num_warmup_steps=None):
        """The arguments every task's model_fn builder takes from the run:
        the config, the checkpoint to start from, the schedule, the device
        and the training options (a dict of keyword arguments)."""
        s = self.settings
        # One-hot embedding lookups are faster on TPUs, gathers elsewhere.
        return dict(bert_config=self.bert_config, init_checkpoint=self.init_checkpoint,
                    learning_rate=s.learning_rate, num_train_steps=num_train_steps,
                    num_warmup_steps=num_warmup_steps, use_tpu=s.use_tpu,
                    use_one_hot_embeddings=s.use_tpu, options=self.options)

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
        return training.make_trainer(model_fn, self.options, s, **batch_sizes)

    def train(self, trainer, input_fn, num_train_steps, count, train=None):
        """Trains: logs the training's header (`count`: (name, value) rows
        such as ("Num examples", 100)), trains `trainer` on `input_fn` up to
        `num_train_steps`, and reports the checkpoint it leaves.

        Args:
          train: () -> result, a training of the script's own (with
            evaluations along the way) instead of the plain one.

        Returns:
          What `train` returned, or None.
        """
        training_progress.log_training(self.options, count, num_train_steps,
                                       self.settings.train_batch_size)
        result = train() if train is not None else trainer.train(
            input_fn=input_fn, max_steps=num_train_steps)
        checkpoints.report_trained_checkpoint(self.output_dir)
        return result if train is not None else None

    def evaluate(self, trainer, input_fn, num_records, checkpoint=None):
        """The evaluation of `checkpoint` (None: the latest, else
        --init_checkpoint's weights) on the `num_records` records of
        `input_fn`, in batches of --eval_batch_size (on a TPU, whole
        batches: the padding records count nowhere): name -> value
        (`evaluation.evaluate`)."""
        batches = training_progress.num_batches(num_records, self.settings.eval_batch_size)
        return evaluation.evaluate(trainer, input_fn, batches, checkpoint,
                                   self.init_checkpoint,
                                   steps=batches if self.fixed_batches else None)

    def predict(self, trainer, input_fn, num_records, count, checkpoint=None, **kwargs):
        """The first `count` predictions of `checkpoint` on the
        `num_records` records of `input_fn`, in batches of
        --predict_batch_size, as a list (`iter_predictions`, which takes
        `kwargs`)."""
        return list(self.iter_predictions(trainer, input_fn, num_records, count, checkpoint,
                                          **kwargs))

    def iter_predictions(self, trainer, input_fn, num_records, count, checkpoint=None,
                         batch_size=None, **kwargs):
        """`iter_predictions` of this run: batches of `batch_size` (default
        --predict_batch_size), --init_checkpoint the weights where no
        checkpoint is fine-tuned."""
        return iter_predictions(trainer, input_fn, num_records,
                                batch_size or self.settings.predict_batch_size, count,
                                checkpoint, self.init_checkpoint, **kwargs)

    def export_source(self, checkpoint):
        """What every export of this run takes (`serving.ExportSource`): the
        model and weights of `checkpoint`, --export_dir, the tokenizer's
        files and the input length."""
        s = self.settings
        return serving.ExportSource(
            bert_config=self.bert_config, checkpoint=checkpoint, export_dir=s.export_dir,
            vocab_file=s.vocab_file, do_lower_case=s.do_lower_case,
            max_seq_length=s.max_seq_length, options=self.options,
            precision=s.export_precision)


def prepare_run(settings, script, min_seq_length=None, needs=None, check_flags=None,
                check_model=None, export=True, head_variable=None):
    """Prepares a fine-tuning run (logging at INFO level from now on),
    checking every input before any work: the run record in --output_dir
    (made by this script, or none), the record followed
    (`run_record.follow`), the required flags and data files, the flags
    against each other, the tokenizer, the config and --init_checkpoint
    (`load_model_inputs`), --export_dir and the training options, in this
    order.

    Args:
      settings: the script's settings (read from the flags in its main).
      script: the script's file name ("run_classifier.py", ...): its run
        records name it, and it follows no other script's.
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
    run_record.check_script(settings.output_dir, script)
    record = None
    if not settings.do_train:  # A training run writes its own.
        record = run_record.read(settings.output_dir, settings.init_checkpoint, script)
        settings = run_record.follow(settings, record)
    names, data_files = needs(settings) if needs else ((), ())
    require_model_flags(record, settings, *names, data_files=data_files)
    if min_seq_length is not None:
        check_run_flags(settings, min_seq_length)
    task = check_flags(settings) if check_flags else None
    tokenizer, bert_config, init_checkpoint = load_model_inputs(
        settings, record, settings.max_seq_length)
    if check_model:
        check_model(settings, bert_config)
    if export:
        serving.check_export_flags(settings.vocab_file, settings.export_dir,
                                   settings.export_precision)
    options = training.training_options(settings, training=settings.do_train)
    return Run(script, settings, record, tokenizer, bert_config, init_checkpoint, options,
               head_variable, task)


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
