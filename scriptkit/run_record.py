"""The run record: what a training run leaves in its --output_dir for the
runs that come after it (run_config.json): the script that made it, the
task, the labels, the model's config and the flags that shape its inputs.

Evaluations, predictions and exports without --do_train follow it
(`follow`: its flags for those the command line leaves unset);
conversions read it (`convert_checkpoint.py --to_hf`); a run whose
--output_dir holds another script's record stops before any work
(`check_script`).

In: a run's settings and its folders. Out: RunRecord, run_config.json.
Imports TensorFlow (for its log).
"""

import dataclasses
import json
import os

import tensorflow.compat.v1 as tf

from scriptkit import file_io
from scriptkit import settings as settings_lib
from scriptkit.errors import InputError

FILE = "run_config.json"

# The kinds of task a run record names (Hugging Face's problem_type names for
# the classifiers; "pretraining": run_pretraining.py's masked LM and next
# sentence prediction).
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression",
                 "token_classification", "multiple_choice", "question_answering",
                 "pretraining")


def find_file(name, output_dir, init_checkpoint=None):
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


def write(output_dir, script, problem_type, bert_config, values, labels=None):
    """Writes <output_dir>/run_config.json for the runs that come after a
    training run: predictions, evaluations and exports without --do_train
    read it (`read`, `follow`), and so can conversions.

    Args:
      output_dir: the run's --output_dir.
      script: the script of the run ("run_classifier.py", ...).
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
    record = {"script": script, "problem_type": problem_type,
              "labels": labels, "flags": values, "bert_config": bert_config.to_dict()}
    path = os.path.join(output_dir, FILE)
    with file_io.atomic_output(path) as writer:
        writer.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    file_io.report_output(path, "the run record (%s)" % (
        "model config, input settings" if problem_type == "pretraining"
        else "task, labels, model config, input settings"))
    return path


def read(output_dir, init_checkpoint=None, script=None):
    """The `RunRecord` of an earlier training run (see `find_file`), or
    None. InputError naming the file if it is not a run record.

    With `script` (the script reading it), a record made by another
    script is not followed (None, with a log line); `check_script`
    stops a run whose `output_dir` holds one."""
    path = find_file(FILE, output_dir, init_checkpoint)
    if path is None:
        return None
    record = _read_record(path)
    if script is not None and record.script != script:
        tf.logging.info("Not following %s, the run record of %s", path, record.script)
        return None
    return record


def check_script(output_dir, script):
    """Checks, before a run of `script` does any work, that a run record in
    `output_dir` was made by `script`: one folder holds one training run's
    files, whose checkpoints and settings another script would misread.

    Raises:
      InputError: naming the script that made the record.
    """
    path = os.path.join(output_dir, FILE) if output_dir else None
    if path is None or not file_io.exists(path):
        return
    made_by = _read_record(path).script
    if made_by != script:
        raise InputError("--output_dir %s holds a run of %s (%s): give %s an --output_dir of "
                         "its own" % (output_dir, made_by, path, script))


def _read_record(path):
    """The `RunRecord` in the file `path`."""
    values = file_io.read_json_object(path, None)
    try:
        return RunRecord(path, values["script"], values["problem_type"], values["labels"],
                         dict(values["flags"]), dict(values["bert_config"]))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError("%s is not a run record of this project (%s): move it away or "
                         "train again" % (path, e))


def follow(settings, record):
    """The settings of a run that follows the `RunRecord` `record` (None:
    `settings` as they are): each flag the record holds that the command
    line did not give (`settings.given`) takes the recorded value (one line
    names them all); a flag given with another value keeps it, with a
    warning. A recorded --vocab_file that no longer exists is not taken.

    Args:
      settings: a script's settings (a `scriptkit.settings` dataclass).
      record: the `RunRecord` the run follows, or None.

    Returns:
      The settings (a new dataclass where the record changed any).
    """
    if record is None:
        return settings
    names = set(settings_lib.field_names(settings))
    taken, changes = [], {}
    for name, value in sorted(record.flags.items()):
        if name not in names or value is None:
            continue
        if name not in settings.given:
            if name == "vocab_file" and not file_io.exists(value):
                tf.logging.warning("%s names --vocab_file=%s, which does not exist (any more)",
                                   record.path, value)
                continue
            changes[name] = value
            taken.append("--%s=%s" % (name, value))
        elif getattr(settings, name) != value and not (
                name == "vocab_file" and _same_file(getattr(settings, name), value)):
            tf.logging.warning("--%s=%s differs from the training run's %s in %s; using %s",
                               name, getattr(settings, name), value, record.path,
                               getattr(settings, name))
    if taken:
        tf.logging.info("Settings of the training run, from %s: %s", record.path,
                        " ".join(taken))
    return dataclasses.replace(settings, **changes)


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
