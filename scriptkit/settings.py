"""A script's settings: one frozen, typed dataclass of the flags the script
uses, read from absl's flags once, in its `main` (`from_flags`), and passed
down from there; no other function reads the flags.

A script declares its settings as a dataclass whose fields are its flags'
names, with the script's own defaults (those of the shared flags may
differ between scripts: --max_seq_length is 128 for run_classifier.py and
384 for run_squad.py), built from the groups below where it has their
flags. Tests build settings directly, as any dataclass.

`given` holds the names of the flags the command line set: a run that
follows another run's record (`fine_tuning.follow_record`) keeps those
and takes the record's values for the rest.

In: absl's parsed flags (`from_flags` only). Out: frozen dataclasses. Needs
no TensorFlow.
"""

import dataclasses
from typing import Optional

from absl import flags

from scriptkit.errors import InputError

FLAGS = flags.FLAGS


def from_flags(cls):
    """The settings `cls` (a dataclass of flag names) of this process's
    parsed flags: each field the flag of its name as parsed, or, where the
    command line leaves it unset, the field's default (the script's own,
    whichever script defined a shared flag first in this process); `given`,
    the fields the command line set.

    This is the one function that reads absl's FLAGS for a script.
    """
    values, given = {}, set()
    for field in dataclasses.fields(cls):
        if field.name == "given":
            continue
        flag = FLAGS[field.name]
        if flag.using_default_value:
            continue  # The field's default: the script's own.
        values[field.name] = flag.value
        given.add(field.name)
    return cls(given=frozenset(given), **values)


def field_names(settings):
    """The flag names of `settings` (a settings dataclass or its class)."""
    return [f.name for f in dataclasses.fields(settings) if f.name != "given"]


def default_of(settings, name):
    """The script's default of the flag `name` in `settings`' class."""
    field = next(f for f in dataclasses.fields(settings) if f.name == name)
    return field.default


def require(settings, *names, data_files=()):
    """Raises InputError naming, in one line, every listed flag that is
    unset in `settings`.

    Args:
      settings: a settings dataclass.
      *names: the required flags.
      data_files: flags of data files (train_file, ...) that the script may
        find in --data_dir instead: the unset ones, where --data_dir is unset
        too, are named first, as "--data_dir (or --train_file and
        --dev_file)".
    """
    missing = ["--" + n for n in names if getattr(settings, n) in (None, "")]
    files = ["--" + n for n in data_files if getattr(settings, n) in (None, "")]
    if files and getattr(settings, "data_dir", None) in (None, ""):
        listed = files[0] if len(files) == 1 else "%s and %s" % (", ".join(files[:-1]),
                                                                files[-1])
        missing.insert(0, "--data_dir (or %s)" % listed)
    if missing:
        raise InputError("Missing required flag(s): %s" % ", ".join(missing))


# ---------------------------------------------------------------------------
# The groups of flags that several scripts share, with the shared flags'
# defaults (shared_flags.py); a script whose default differs says so in its
# own dataclass.

@dataclasses.dataclass(frozen=True)
class Common:
    """What every script has."""

    log_every_seconds: int = 30
    given: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class TPU(Common):
    """Where the model runs: a Cloud TPU, or this machine
    (shared_flags.TPU_FLAGS)."""

    use_tpu: bool = False
    tpu_name: Optional[str] = None
    tpu_zone: Optional[str] = None
    gcp_project: Optional[str] = None
    master: Optional[str] = None
    num_tpu_cores: int = 8
    tpu_job_name: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class TrainingOptions(Common):
    """Memory, speed, devices and the input's seed
    (shared_flags.TRAINING_OPTION_FLAGS; `training.training_options`)."""

    gradient_accumulation_steps: int = 1
    recompute_grad: bool = False
    use_xla: bool = False
    precision: str = "fp32"
    distribution_strategy: str = "none"
    num_gpus: int = 0
    limit_memory_fragmentation: bool = False
    fused_ops: str = "auto"
    optimizer: str = "adamw"
    poly_power: float = 1.0
    start_warmup_step: int = 0
    input_seed: int = 0


@dataclasses.dataclass(frozen=True)
class Masking(Common):
    """How pre-training's sequences are cut and masked: by
    create_pretraining_data.py as it writes them, or, for data written with
    --dynamic_masking, by run_pretraining.py as it reads them."""

    vocab_file: Optional[str] = None
    do_lower_case: bool = True
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    do_whole_word_mask: bool = False
    random_seed: int = 12345
    masked_lm_prob: float = 0.15


@dataclasses.dataclass(frozen=True)
class Training(TPU, TrainingOptions):
    """What every script that trains has (run_pretraining.py and the
    fine-tuning scripts): the model and its vocabulary, the checkpoints,
    training's batch and learning rate, the device, the training options and
    the export."""

    bert_config_file: Optional[str] = None
    vocab_file: Optional[str] = None
    do_lower_case: bool = True
    output_dir: Optional[str] = None
    init_checkpoint: Optional[str] = None
    max_seq_length: int = 128
    do_train: bool = False
    train_batch_size: int = 32
    learning_rate: float = 5e-5
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    export_dir: Optional[str] = None
    export_precision: str = "fp32"


@dataclasses.dataclass(frozen=True)
class FineTuningCore(Training):
    """What every fine-tuning script has (run_squad.py's files are named
    flags, without --do_eval and --data_dir): training's, prediction, the
    schedule, the training file and input padding."""

    do_predict: bool = False
    predict_batch_size: int = 8
    num_train_epochs: float = 3.0
    max_train_steps: int = 0
    warmup_proportion: float = 0.1
    train_file: Optional[str] = None
    dynamic_padding: bool = False
    length_buckets: Optional[list] = None


@dataclasses.dataclass(frozen=True)
class FineTuning(FineTuningCore):
    """A fine-tuning script's (shared_flags.FINE_TUNING_FLAGS): the core's,
    evaluation and the data files (in --data_dir, or each named)."""

    do_eval: bool = False
    eval_batch_size: int = 8
    data_dir: Optional[str] = None
    dev_file: Optional[str] = None
    test_file: Optional[str] = None
