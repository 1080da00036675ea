"""What the fine-tuning scripts (run_classifier.py, run_ner.py, run_swag.py,
run_squad.py) share around their model: the run record (run_config.json)
that later runs follow, the data files and flags a run needs, the model
inputs loaded and checked before any work, the arguments of an export, and
the eval_results.txt file.

In: the parsed flags. Out: a `RunRecord`, paths, (tokenizer, config,
checkpoint), files in --output_dir. Imports TensorFlow.
"""

import dataclasses
import json
import os
import sys

import quiet_tf  # noqa: F401  (first: imports TensorFlow without its start-up noise)
import tensorflow.compat.v1 as tf
from absl import flags

import checkpoints
import file_io
import shared_flags
import training
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


def write_run_record(output_dir, problem_type, bert_config, flag_names, labels=None):
    """Writes <output_dir>/run_config.json for the runs that come after a
    fine-tuning run: predictions, evaluations and exports without
    --do_train read it (`use_run_record`), and so can conversions.

    Args:
      output_dir: the run's --output_dir.
      problem_type: one of PROBLEM_TYPES.
      bert_config: the modeling.BertConfig trained.
      flag_names: the flags to record, with their values in this run
        (--vocab_file as an absolute path).
      labels: the label list, or None.

    Returns:
      The path written.
    """
    values = {}
    for name in flag_names:
        value = FLAGS[name].value
        if name == "vocab_file" and value and not file_io.is_remote(value):
            value = os.path.abspath(value)
        values[name] = value
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


def use_run_record():
    """The `RunRecord` that a run without --do_train follows, or None.

    It is found in --output_dir, else next to --init_checkpoint. Each flag it
    records that the command line does not give takes the recorded value
    (one line names them all); a flag given with another value keeps the
    command line's value, with a warning. A training run reads none: it
    writes its own.
    """
    if FLAGS.do_train:
        return None
    record = read_run_record(FLAGS.output_dir, FLAGS.init_checkpoint)
    if record is None:
        return None
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
            flag.value = value
            taken.append("--%s=%s" % (name, value))
        elif flag.value != value and not (name == "vocab_file"
                                          and _same_file(flag.value, value)):
            tf.logging.warning("--%s=%s differs from the training run's %s in %s; using %s",
                               name, flag.value, value, record.path, flag.value)
    if taken:
        tf.logging.info("Settings of the training run, from %s: %s", record.path,
                        " ".join(taken))
    return record


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

def check_run_flags(min_seq_length):
    """The first checks of a fine-tuning script's flags: something to do
    (--do_train, --do_eval, --do_predict or --export_dir), an existing
    --data_dir if one is given, and a --max_seq_length of at least
    `min_seq_length` ([CLS], [SEP]s and one piece of text)."""
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir):
        raise InputError("At least one of `do_train`, `do_eval`, `do_predict` or "
                         "`export_dir` must be set.")
    if FLAGS.data_dir and not tf.io.gfile.isdir(FLAGS.data_dir):
        raise InputError("--data_dir: directory not found: %s" % FLAGS.data_dir)
    if FLAGS.max_seq_length < min_seq_length:
        raise InputError("--max_seq_length must be at least %d, got %d"
                         % (min_seq_length, FLAGS.max_seq_length))


def data_file(flag_name, names, required_for):
    """A data file: its flag (--train_file, ...), else the first of `names`
    found in --data_dir.

    Returns:
      The path, or None if there is none and `required_for` is None.

    Raises:
      InputError: there is none and `required_for` ("--do_train", ...) needs
        it; the message names what was tried.
    """
    path = getattr(FLAGS, flag_name)
    if path:
        return path
    for name in names if FLAGS.data_dir else ():
        path = os.path.join(FLAGS.data_dir, name)
        if file_io.exists(path):
            return path
    if required_for:
        where = ("in --data_dir=%s (%s)" % (FLAGS.data_dir, ", ".join(names))
                 if FLAGS.data_dir else "(no --data_dir)")
        raise InputError("%s needs --%s or a data file %s" % (required_for, flag_name, where))
    return None


def require_model_flags(record, *names, data_files=()):
    """`shared_flags.require_flags` for the flags `names`, then --vocab_file,
    --bert_config_file (unless the `RunRecord` `record` holds the config) and
    --output_dir, in one message, with the data files of `data_files` (see
    `shared_flags.require_flags`)."""
    config_flag = () if record is not None and record.bert_config else ("bert_config_file",)
    shared_flags.require_flags(*names, "vocab_file", *config_flag, "output_dir",
                               data_files=data_files)


def data_file_flags(*actions):
    """The data file flags that the run reads, of (action flag, file flag)
    pairs such as ("do_train", "train_file"): those whose action is set."""
    return [file_flag for action, file_flag in actions if getattr(FLAGS, action)]


def load_model_inputs(record=None, max_seq_length=None):
    """What a fine-tuning script loads and checks before any work (after
    `require_model_flags`): the tokenizer (--vocab_file, --do_lower_case),
    the BERT config (--bert_config_file, else the `RunRecord` `record`'s),
    --init_checkpoint resolved (`checkpoints.resolve_checkpoint`) and checked against
    the config, and --output_dir checked.

    Args:
      record: the run's `RunRecord`, or None.
      max_seq_length: checked against the config's max_position_embeddings.

    Returns:
      (tokenizer, bert_config, init_checkpoint).
    """
    tokenizer = checkpoints.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case,
                                           FLAGS.init_checkpoint)
    init_checkpoint = checkpoints.resolve_checkpoint("init_checkpoint", FLAGS.init_checkpoint)
    bert_config = checkpoints.load_bert_config(
        FLAGS.bert_config_file, max_seq_length=max_seq_length, vocab=tokenizer.vocab,
        vocab_file=FLAGS.vocab_file, record=record)
    file_io.check_output_dir(FLAGS.output_dir)
    if init_checkpoint:
        checkpoints.check_init_checkpoint("init_checkpoint", init_checkpoint, bert_config,
                                          FLAGS.bert_config_file or record.path)
    return tokenizer, bert_config, init_checkpoint


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
