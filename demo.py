"""End-to-end demo: every step of BERT, from raw text to answers, in minutes
on a CPU.

On the small synthetic data shipped in demo_data/ (see
demo_data/make_demo_data.py), this runs the repository's real scripts, each
as a subprocess with its real flags, printing every command first:

  1. create_vocab.py             learn a WordPiece vocabulary from the corpus
  2. create_pretraining_data.py  masked-LM / next-sentence training examples
  3. run_pretraining.py          pre-train a small BERT, evaluated before and
                                 after (--eval_at_start)
  4. run_classifier.py           fine-tune it on a sentiment task laid out
                                 like GLUE's SST-2, and evaluate
  5. run_squad.py                fine-tune it on a SQuAD 1.1-format set,
                                 predict and score the dev questions, and
                                 export the model as a raw-text SavedModel
  6. predict.py                  answer dev questions with that export
  7. extract_features.py         contextual vectors for a few sentences
  8. run_ner.py                  fine-tune it to tag persons, places and
                                 organisations (CoNLL-2003 layout)
  9. run_swag.py                 fine-tune it for multiple choice (SWAG
                                 layout)

and prints a summary. Everything goes to one folder (--output_dir, default
demo_output/): each step's outputs, its full log (logs/), the model config
and summary.txt.

    ./run_demo.sh                         # sets up .venv first if needed
    .venv/bin/python demo.py --quick      # a fast smoke run (a minute or so)
"""

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(REPO, "demo_data")
MARKER = ".bert_demo_output"  # marks a folder the demo may clear on a rerun

# The model: small enough to pre-train in about a minute on two CPU cores.
MODEL = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 512,
    "hidden_act": "gelu",
    # No dropout: the data is small and clean and training is short.
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 128,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}

# Amount of work per mode. "quick" only checks that everything runs.
WORK = {
    "full": {"dupe_factor": 5, "pretrain_steps": 400, "pretrain_lr": "5e-4",
             "max_eval_steps": 10, "classifier_epochs": "6.0", "squad_epochs": "3.0",
             "ner_epochs": "8.0", "swag_epochs": "3.0"},
    "quick": {"dupe_factor": 1, "pretrain_steps": 20, "pretrain_lr": "5e-4",
              "max_eval_steps": 2, "classifier_epochs": "0.2", "squad_epochs": "0.2",
              "ner_epochs": "0.5", "swag_epochs": "0.2"},
}


# The questions the exported SQuAD model answers (the first of the dev set),
# and its answers.
QUESTIONS_FILE = "questions.jsonl"
ANSWERS_FILE = "answers.jsonl"
NUM_QUESTIONS = 5


class Step(object):
    """One script run: `script` with `flags` [(name, value)], logged to
    logs/<name>.log."""

    def __init__(self, name, title, script, flags, about):
        self.name = name
        self.title = title
        self.script = script
        self.flags = flags
        self.about = about
        self.seconds = None

    def argv(self):
        return [self.script] + ["--%s=%s" % (k, v) for k, v in self.flags]


def build_steps(out, quick=False):
    """The demo's commands, for output folder `out` (a path as it should be
    printed: relative to the repository root when inside it)."""
    s = WORK["quick" if quick else "full"]
    data = _display_path(DATA)
    vocab = os.path.join(out, "vocab.txt")
    config = os.path.join(out, "bert_config.json")
    records = os.path.join(out, "pretraining_data.tfrecord")
    pretrained = os.path.join(out, "pretraining", "model.ckpt-%d" % s["pretrain_steps"])
    model = [("vocab_file", vocab), ("bert_config_file", config)]
    return [
        Step("vocab", "Learning a WordPiece vocabulary", "create_vocab.py", [
            ("input_file", os.path.join(data, "corpus.txt")),
            ("output_file", vocab),
            ("vocab_size", 400),
            ("do_lower_case", True),
        ], "The corpus: %d short documents about invented people and towns "
           "(demo_data/corpus.txt)." % _num_documents()),
        Step("pretraining_data", "Creating pre-training data",
             "create_pretraining_data.py", [
                 ("input_file", os.path.join(data, "corpus.txt")),
                 ("output_file", records),
                 ("vocab_file", vocab),
                 ("do_lower_case", True),
                 ("max_seq_length", 32),
                 ("max_predictions_per_seq", 5),
                 ("masked_lm_prob", 0.15),
                 ("dupe_factor", s["dupe_factor"]),
                 ("random_seed", 12345),
             ], "Sentence pairs (half of them consecutive) with 15%% of the word "
                "pieces masked, each document used %d times with different masks."
                % s["dupe_factor"]),
        Step("pretraining", "Pre-training a small BERT", "run_pretraining.py", [
            ("input_file", records),
            ("output_dir", os.path.join(out, "pretraining")),
            ("bert_config_file", config),
            ("do_train", True),
            ("do_eval", True),
            ("eval_at_start", True),
            ("max_seq_length", 32),
            ("max_predictions_per_seq", 5),
            ("train_batch_size", 64),
            ("eval_batch_size", 64),
            ("max_eval_steps", s["max_eval_steps"]),
            ("num_train_steps", s["pretrain_steps"]),
            ("num_warmup_steps", s["pretrain_steps"] // 10),
            ("learning_rate", s["pretrain_lr"]),
            ("save_checkpoints_steps", s["pretrain_steps"]),
        ], "From random weights; masked-LM and next-sentence accuracy are measured "
           "on the pre-training data before and after (as in Google's README)."),
        Step("classifier", "Fine-tuning a sentiment classifier", "run_classifier.py", [
            ("task_name", "SST-2"),
            ("do_train", True),
            ("do_eval", True),
            ("data_dir", os.path.join(data, "sentiment")),
        ] + model + [
            ("init_checkpoint", pretrained),
            ("do_lower_case", True),
            ("max_seq_length", 32),
            ("train_batch_size", 32),
            ("eval_batch_size", 64),
            ("learning_rate", "1e-4"),
            ("num_train_epochs", s["classifier_epochs"]),
            ("output_dir", os.path.join(out, "classifier")),
        ], "Restaurant-review sentences in the GLUE SST-2 layout (label 1 = "
           "positive): 'not' flips an adjective, and in 'X but Y' the clause Y "
           "decides."),
        Step("squad", "Fine-tuning for question answering (SQuAD 1.1 format)",
             "run_squad.py", model + [
                 ("init_checkpoint", pretrained),
                 ("do_lower_case", True),
                 ("do_train", True),
                 ("train_file", os.path.join(data, "squad", "train.json")),
                 ("do_predict", True),
                 ("predict_file", os.path.join(data, "squad", "dev.json")),
                 ("train_batch_size", 32),
                 ("predict_batch_size", 64),
                 ("learning_rate", "5e-4"),
                 ("num_train_epochs", s["squad_epochs"]),
                 ("max_seq_length", 96),
                 ("doc_stride", 48),
                 ("max_query_length", 24),
                 ("output_dir", os.path.join(out, "squad")),
                 ("export_dir", os.path.join(out, "squad", "export")),
             ], "Questions about short biographies ('When was Mara born?'); the "
                "model marks the answer's span in the paragraph, and leaves as a "
                "SavedModel that takes raw text."),
        Step("qa_export", "Answering questions with the exported model", "predict.py", [
            ("model_dir", os.path.join(out, "squad", "export")),
            ("input_file", os.path.join(out, QUESTIONS_FILE)),
            ("output_file", os.path.join(out, ANSWERS_FILE)),
        ], "The SavedModel alone (tokenizer, windows and span search in its graph) "
           "answers the first dev questions, as it would behind TensorFlow Serving's "
           "REST API (predict.py --port)."),
        Step("features", "Extracting contextual features", "extract_features.py", [
            ("input_file", os.path.join(data, "sentences.txt")),
            ("output_file", os.path.join(out, "features.jsonl")),
        ] + model + [
            ("init_checkpoint", pretrained),
            ("do_lower_case", True),
            ("layers", "-1,-2"),
            ("max_seq_length", 32),
            ("batch_size", 8),
        ], "The pre-trained model's last two layers for each word piece of "
           "demo_data/sentences.txt."),
        Step("ner", "Fine-tuning a named-entity tagger (CoNLL-2003 layout)", "run_ner.py",
             model + [
                 ("init_checkpoint", pretrained),
                 ("do_lower_case", True),
                 ("data_dir", os.path.join(data, "ner")),
                 ("do_train", True),
                 ("do_eval", True),
                 ("do_predict", True),
                 ("max_seq_length", 64),
                 ("doc_stride", 32),
                 ("train_batch_size", 32),
                 ("predict_batch_size", 64),
                 ("learning_rate", "1e-3"),
                 ("num_train_epochs", s["ner_epochs"]),
                 ("output_dir", os.path.join(out, "ner")),
             ], "Persons, places and organisations in short documents, IOB1 tags as in "
                "the original CoNLL files; a town's name can be any of the three, and "
                "only its neighbours tell which."),
        Step("swag", "Fine-tuning for multiple choice (SWAG layout)", "run_swag.py",
             model + [
                 ("init_checkpoint", pretrained),
                 ("do_lower_case", True),
                 ("data_dir", os.path.join(data, "swag")),
                 ("do_train", True),
                 ("do_eval", True),
                 ("do_predict", True),
                 ("max_seq_length", 48),
                 ("train_batch_size", 16),
                 ("predict_batch_size", 32),
                 ("learning_rate", "2e-4"),
                 ("num_train_epochs", s["swag_epochs"]),
                 ("output_dir", os.path.join(out, "swag")),
             ], "Pick the ending that fits a short biography, of four: the person's "
                "workplace, their vehicle's colour, how their dinner went."),
    ]


def _num_documents():
    with open(os.path.join(DATA, "corpus.txt"), encoding="utf-8") as f:
        return f.read().strip().count("\n\n") + 1


# ---------------------------------------------------------------------------
# Running a step.

# What to show of a script's log on the console (the full log is saved).
_LOG_PREFIX = re.compile(r"^(?:INFO:tensorflow:|WARNING:tensorflow:|"
                         r"[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] )")
# The training progress lines (one at the first step, then about every
# --log_every_seconds, and one at the end), the section headers ("*****
# Running training *****", "***** Eval results *****", "***** Test results
# *****", ...) with their "  key = value" lines, and the files written.
_INTERESTING = re.compile(
    r"^step \d+(?: of \d+)?: loss|^\*{5} .* \*{5}$|^  \w+ = [-+.\de]+$|^Wrote |"
    r"words, \d+ distinct|"
    r"as checkpoint 0|Num examples|Num steps|Converted \d+ examples|"
    r"^\s*\"(exact_match|f1)\"|Writing predictions|"
    r"Could not find answer for|ERROR|Error|Traceback")


def _console_line(raw):
    """The message of log line `raw` if worth showing, else None."""
    message = _LOG_PREFIX.sub("", raw.rstrip("\n"))
    return message if _INTERESTING.search(message) else None


def run_step(step, index, total, out_abs, python_shown):
    """Runs `step`, streaming the interesting lines; returns its exit status."""
    print("\n[%d/%d] %s (%s)" % (index, total, step.title, step.script), flush=True)
    print("      %s" % step.about, flush=True)
    print(format_command(python_shown, step.argv()), flush=True)
    log_path = os.path.join(out_abs, "logs", step.name + ".log")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.time()
    last = None
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [sys.executable] + step.argv(), cwd=REPO, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            encoding="utf-8", errors="replace")
        for raw in process.stdout:
            log.write(raw)
            message = _console_line(raw)
            # absl logs each message twice (Python and C++ formats).
            if message is not None and message != last:
                print("      | " + message, flush=True)
            last = message if message is not None else last
        status = process.wait()
    step.seconds = time.time() - start
    if status != 0:
        print("\n%s failed (exit status %d). The end of its log, %s:"
              % (step.script, status, _display_path(log_path)))
        with open(log_path, encoding="utf-8", errors="replace") as log:
            for line in log.readlines()[-25:]:
                print("      " + line.rstrip())
    else:
        print("      done in %.0f s; full log: %s" % (step.seconds, _display_path(log_path)),
              flush=True)
    return status


def format_command(python, argv):
    """'python script.py \\' then one '--flag=value \\' line per flag."""
    lines = ["  $ %s %s" % (python, argv[0])] + ["      %s" % shlex.quote(a)
                                                  for a in argv[1:]]
    return " \\\n".join(lines)


def _display_path(path):
    """`path` relative to the repository root if inside it (the commands run
    there), else absolute."""
    path = os.path.abspath(path)
    relative = os.path.relpath(path, REPO)
    return path if relative.startswith("..") else relative


# ---------------------------------------------------------------------------
# Results.

def write_bert_config(vocab_path, config_path):
    """bert_config.json for the demo model, vocab_size = lines of the vocab."""
    with open(vocab_path, encoding="utf-8") as f:
        vocab_size = sum(1 for line in f if line.strip())
    config = dict(MODEL, vocab_size=vocab_size)
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return config


def dev_questions(count=NUM_QUESTIONS):
    """The first `count` questions of the demo's SQuAD dev set:
    [(question, context, gold answer texts)]."""
    with open(os.path.join(DATA, "squad", "dev.json"), encoding="utf-8") as f:
        data = json.load(f)["data"]
    questions = [(qa["question"], paragraph["context"], [a["text"] for a in qa["answers"]])
                 for article in data for paragraph in article["paragraphs"]
                 for qa in paragraph["qas"]]
    return questions[:count]


def write_questions(path):
    """The dev questions as predict.py's input (JSON Lines of question and
    context)."""
    with open(path, "w", encoding="utf-8") as f:
        for question, context, _ in dev_questions():
            f.write(json.dumps({"question": question, "context": context}) + "\n")


def read_key_values(path):
    """'key = value' lines (eval_results.txt) -> {key: float}."""
    result = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if " = " in line:
                key, value = line.split(" = ", 1)
                result[key.strip()] = float(value)
    return result


def count_tfrecords(path):
    """Number of records in a TFRecord file (read from its framing: an 8-byte
    length, a 4-byte CRC, the data and a 4-byte CRC per record)."""
    count = 0
    with open(path, "rb") as f:
        while True:
            header = f.read(8)
            if len(header) < 8:
                return count
            (length,) = struct.unpack("<Q", header)
            f.seek(4 + length + 4, os.SEEK_CUR)
            count += 1


def majority_baseline(train_tsv, dev_tsv):
    """(label, dev accuracy) of always predicting train_tsv's most frequent
    label. Files: a header line, then 'sentence<TAB>label' rows."""
    def labels(path):
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n").split("\t")[-1] for line in f.readlines()[1:]
                    if line.strip()]
    train, dev = labels(train_tsv), labels(dev_tsv)
    majority = max(sorted(set(train)), key=train.count)
    return majority, dev.count(majority) / len(dev)


def summarize(steps, out_abs, quick):
    """The summary lines, from the files the steps wrote."""
    by_name = {s.name: s for s in steps}
    rows = []

    def add(step_name, result):
        step = by_name[step_name]
        seconds = "-" if step.seconds is None else "%.0f s" % step.seconds
        rows.append((step.script, seconds, result))

    vocab = os.path.join(out_abs, "vocab.txt")
    with open(vocab, encoding="utf-8") as f:
        add("vocab", "%d tokens in %s" % (sum(1 for _ in f), _display_path(vocab)))
    records = os.path.join(out_abs, "pretraining_data.tfrecord")
    add("pretraining_data", "%d training examples" % count_tfrecords(records))
    start = read_key_values(os.path.join(out_abs, "pretraining", "eval_results_at_start.txt"))
    end = read_key_values(os.path.join(out_abs, "pretraining", "eval_results.txt"))
    add("pretraining", "masked-LM accuracy %.3f -> %.3f, next-sentence accuracy "
        "%.3f -> %.3f (%d steps)" % (
            start["masked_lm_accuracy"], end["masked_lm_accuracy"],
            start["next_sentence_accuracy"], end["next_sentence_accuracy"],
            end["global_step"]))
    classifier = read_key_values(os.path.join(out_abs, "classifier", "eval_results.txt"))
    label, baseline = majority_baseline(os.path.join(DATA, "sentiment", "train.tsv"),
                                        os.path.join(DATA, "sentiment", "dev.tsv"))
    add("classifier", "dev accuracy %.3f (majority-class baseline %.3f: always '%s')"
        % (classifier["eval_accuracy"], baseline, label))
    with open(os.path.join(out_abs, "squad", "eval_results.json")) as f:
        squad = json.load(f)
    add("squad", "dev exact match %.1f, F1 %.1f (of 100)" % (squad["exact_match"], squad["f1"]))
    with open(os.path.join(out_abs, ANSWERS_FILE), encoding="utf-8") as f:
        answers = [json.loads(line)["answer"] for line in f]
    questions = dev_questions()
    right = sum(answer in gold for answer, (_, _, gold) in zip(answers, questions))
    add("qa_export", "%d of %d dev questions answered as the gold answer by the export; "
        "%r -> %r" % (right, len(questions), questions[0][0], answers[0]))
    features = os.path.join(out_abs, "features.jsonl")
    with open(features, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    tokens = sum(len(line["features"]) for line in lines)
    width = len(lines[0]["features"][0]["layers"][0]["values"])
    add("features", "%d lines, %d tokens x 2 layers x %d values in %s"
        % (len(lines), tokens, width, _display_path(features)))
    ner = read_key_values(os.path.join(out_abs, "ner", "eval_results.txt"))
    add("ner", "dev entity F1 %.3f (PER %.3f, LOC %.3f, ORG %.3f), word accuracy %.3f"
        % (ner["eval_f1"], ner.get("eval_f1_PER", 0.0), ner.get("eval_f1_LOC", 0.0),
           ner.get("eval_f1_ORG", 0.0), ner["eval_accuracy"]))
    swag = read_key_values(os.path.join(out_abs, "swag", "eval_results.txt"))
    add("swag", "dev accuracy %.3f (chance 0.250: 4 endings)" % swag["eval_accuracy"])

    checks = [
        ("masked-LM accuracy rose",
         end["masked_lm_accuracy"] > start["masked_lm_accuracy"] + 0.05),
        ("classifier beat the majority-class baseline",
         classifier["eval_accuracy"] > baseline),
        ("multiple choice beat chance", swag["eval_accuracy"] > 0.25),
    ]
    width_script = max(len(r[0]) for r in rows)
    text = ["", "=" * 78, "Summary%s" % (" (--quick: too little training to learn much)"
                                         if quick else ""), "=" * 78]
    for script, seconds, result in rows:
        text.append("%-*s %6s  %s" % (width_script, script, seconds, result))
    total = sum(s.seconds or 0 for s in steps)
    text.append("%-*s %6s" % (width_script, "total", "%.0f s" % total))
    text.append("")
    for what, ok in checks:
        # --quick trains too little for the checks to mean anything: shown,
        # not judged.
        mark = "[--]  " if quick else "[ok]  " if ok else "[no]  "
        text.append("%s %s" % (mark, what))
    text.append("")
    text.append("All outputs: %s/ (logs in %s/logs/, summary in %s/summary.txt)"
                % ((_display_path(out_abs),) * 3))
    return text, dict(checks)


# ---------------------------------------------------------------------------

def prepare_output_dir(out_abs):
    """Creates the output folder; clears it if an earlier demo made it.
    Returns an error message for a folder the demo must not touch."""
    if os.path.exists(out_abs) and not os.path.isdir(out_abs):
        return "--output_dir %s is a file, not a folder" % out_abs
    if os.path.isdir(out_abs) and os.listdir(out_abs):
        if not os.path.exists(os.path.join(out_abs, MARKER)):
            return ("--output_dir %s is not empty and was not made by the demo; "
                    "choose another folder" % out_abs)
        shutil.rmtree(out_abs)
    os.makedirs(os.path.join(out_abs, "logs"))
    open(os.path.join(out_abs, MARKER), "w").close()
    return None


@dataclasses.dataclass(frozen=True)
class Settings:
    """The demo's command line (`parse_settings`): the folder of its outputs,
    and whether to train far less (a smoke run)."""

    output_dir: str = os.path.join(REPO, "demo_output")
    quick: bool = False


def parse_settings(argv=None):
    """The `Settings` of the command line `argv` (None: sys.argv[1:])."""
    parser = argparse.ArgumentParser(
        description="End-to-end BERT demo: vocabulary, pre-training, classification, "
                    "SQuAD, feature extraction, named entities and multiple choice on "
                    "shipped data.")
    parser.add_argument("--output_dir", default=Settings.output_dir,
                        help="folder for all outputs (default: demo_output/ in the "
                             "repository; cleared first if an earlier demo made it)")
    parser.add_argument("--quick", action="store_true",
                        help="a fast smoke run with far less training")
    args = parser.parse_args(argv)
    return Settings(output_dir=args.output_dir, quick=args.quick)


def main(argv=None):
    settings = parse_settings(argv)
    out_abs = os.path.abspath(settings.output_dir)
    error = prepare_output_dir(out_abs)
    if error:
        print("ERROR: " + error, file=sys.stderr)
        return 1
    out = _display_path(out_abs)
    python_shown = _display_path(sys.executable) if _display_path(
        sys.executable) != os.path.abspath(sys.executable) else "python"
    steps = build_steps(out, quick=settings.quick)

    print("BERT end-to-end demo%s: %d steps, outputs in %s/" % (
        " (--quick)" if settings.quick else "", len(steps), out))
    print("Each command is printed before it runs (from the repository root); "
          "copy it to run it yourself.")
    for index, step in enumerate(steps, 1):
        if run_step(step, index, len(steps), out_abs, python_shown) != 0:
            return 1
        if step.name == "vocab":
            config = write_bert_config(os.path.join(out_abs, "vocab.txt"),
                                       os.path.join(out_abs, "bert_config.json"))
            print("\n      Wrote %s/bert_config.json: vocab_size %d (the lines of vocab.txt), "
                  "%d layers, hidden size %d, %d attention heads."
                  % (out, config["vocab_size"], config["num_hidden_layers"],
                     config["hidden_size"], config["num_attention_heads"]))
        if step.name == "squad":
            write_questions(os.path.join(out_abs, QUESTIONS_FILE))
            print("\n      Wrote %s/%s: the first %d dev questions with their paragraphs."
                  % (out, QUESTIONS_FILE, NUM_QUESTIONS))

    text, checks = summarize(steps, out_abs, settings.quick)
    print("\n".join(text))
    with open(os.path.join(out_abs, "summary.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(text).strip() + "\n")
    failed = [what for what, ok in checks.items() if not ok]
    if failed and not settings.quick:
        print("ERROR: the demo's check(s) failed: %s" % "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
