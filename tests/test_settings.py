"""Each script's settings (scriptkit/settings.py): one frozen dataclass whose
fields are exactly the script's flags, with the script's defaults; read from
the flags once (`from_flags`), the command line's flags named in `given`,
and a run record's values taken for the others (`run_record.follow`)."""

import dataclasses
import importlib
import json

import pytest
from absl import flags
from absl.testing import flagsaver

import modeling
import tiny
from scriptkit import run_record
from scriptkit import settings as settings_lib
from scriptkit import shared_flags

FLAGS = flags.FLAGS

SCRIPTS = ["run_swag", "predict", "run_pretraining", "create_pretraining_data",
           "extract_features", "convert_checkpoint", "create_vocab", "run_classifier",
           "run_ner", "run_squad"]


def _module(script):
    return importlib.import_module(script)


@pytest.mark.parametrize("script", SCRIPTS)
def test_settings_are_the_scripts_flags_with_its_defaults(script):
    """The fields are the flags the script's --help lists as its own (its
    key flags, the shared ones included), each with the script's default:
    a shared flag's as `define_settings_flags` registered it for this
    script, another the flag's own default."""
    module = _module(script)
    fields = {f.name: f for f in dataclasses.fields(module.Settings) if f.name != "given"}
    key_flags = {flag.name for flag in FLAGS.get_key_flags_for_module(module)}
    assert set(fields) == key_flags - {"helpfull", "helpshort", "helpxml", "help",
                                       "only_check_args", "flagfile", "undefok"}
    for name, field in fields.items():
        if name not in shared_flags._SHARED_FLAGS:
            assert field.default == FLAGS[name].default, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        module.Settings().do_train = True


def test_from_flags_reads_the_command_line_and_names_what_it_gave():
    """Unset flags take the dataclass's default (the script's own, whichever
    script registered a shared flag first in this process); set ones their
    value, named in `given`."""
    module = _module("run_swag")
    if not FLAGS.is_parsed():
        FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(max_seq_length=64, do_train=True, input_format="jsonl"):
        settings = settings_lib.from_flags(module.Settings)
    assert (settings.max_seq_length, settings.do_train, settings.input_format) == (
        64, True, "jsonl")
    assert settings.given == {"max_seq_length", "do_train", "input_format"}
    assert settings.learning_rate == 5e-5 and settings.export_dir is None
    assert settings_lib.from_flags(module.Settings).given == frozenset()


def test_follow_takes_the_records_values_for_flags_not_given(tmp_path):
    """A run record's flags replace the defaults, not what the command line
    gave; flags the script has not are left out."""
    module = _module("run_swag")
    config = modeling.BertConfig.from_dict(tiny.tiny_config_dict(30))
    vocab = tiny.write_vocab(str(tmp_path), ["a"])
    run_record.write(str(tmp_path), "run_swag.py", "multiple_choice", config,
                     {"max_seq_length": 48, "do_lower_case": False, "vocab_file": vocab,
                      "task_name": "mrpc"})
    record = run_record.read(str(tmp_path), None, "run_swag.py")
    with tiny.LogMessages.collecting() as log:
        followed = run_record.follow(module.Settings(do_lower_case=True,
                                                     given=frozenset({"do_lower_case"})),
                                     record)
    assert (followed.max_seq_length, followed.do_lower_case) == (48, True)
    assert followed.vocab_file == json.load(open(record.path))["flags"]["vocab_file"]
    assert "--do_lower_case=True differs from the training run's False" in log.text
    assert run_record.follow(module.Settings(), None) == module.Settings()
