"""Batch-1 latency of an exported classifier SavedModel (run_classifier's
export), the way a Python server would call it.

    .venv/bin/python benchmarks/bench_serving.py --threads=1 --requests=100
    .venv/bin/python benchmarks/bench_serving.py --layers=2 --requests=20   # quick

The parent writes a BERT-Base-shaped checkpoint with random weights (or uses
--init_checkpoint and --bert_config_file) and a vocabulary, exports it with
`run_classifier.export_model` (a single-text task; --seq_length is the
export's max_seq_length), then times each variant in its own child process,
interleaved over --rounds:

  text        the raw-text signature (serving_default) called with one
              sentence of each length in --words (English-like words of the
              vocabulary): tokenized in the graph, padded to its own length.
  signature   serving_ids, called eagerly with int32 [1, seq_length]
              tensors, 3/4 of them real tokens (the id signature, padded as
              a client of the original's exports pads).
  xla         the same signature wrapped in tf.function(jit_compile=True).
  session     the TensorFlow 1 way: loader.load into a Session, sess.run
              with a feed dict (what TF Serving-style wrappers around the
              original's exports do), on serving_ids.
  hf          for comparison, Hugging Face transformers'
              BertForSequenceClassification in PyTorch with the same shape
              (random weights, tanh GELU, eval mode, torch.inference_mode),
              batch-1 [1, seq_length] requests with the same padding; run with
              --hf_python, an interpreter with benchmarks/requirements-hf.txt.

All but text are called through tf.saved_model.load(...).signatures unless
said otherwise. Each child sends --warmup requests, then --requests timed
ones, and reports the median (p50), 99th percentile (p99) and mean latency
in milliseconds; the table shows, per variant, the median of the rounds'
figures.
"""

import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

import bench_common  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_integer("threads", 1, "intra_op and inter_op parallelism threads.")
flags.DEFINE_integer("seq_length", 128, "Sequence length of the signature.")
flags.DEFINE_integer("layers", 12, "Transformer layers of the random model (12 = BERT-Base).")
flags.DEFINE_string("bert_config_file", None, "Use this config (with --init_checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "Export this checkpoint instead of random weights.")
flags.DEFINE_string(
    "hf_model", None,
    "A Hugging Face BERT folder (all-MiniLM-L6-v2, say) to time instead of random weights: "
    "converted, given a random classifier layer and exported; hf_pipeline loads it as it is.")
flags.DEFINE_integer("batch", 32, "Sentences per call of the batch variant.")
flags.DEFINE_integer("requests", 100, "Timed requests per child.")
flags.DEFINE_integer("warmup", 5, "Untimed requests first.")
flags.DEFINE_integer("rounds", 3, "Children per variant, interleaved.")
flags.DEFINE_list("variants", "text,signature", "Variants to time.")
flags.DEFINE_list("words", "10,100", "Sentence lengths in words of the text variant.")
flags.DEFINE_string("hf_python", sys.executable,
                    "Interpreter for the hf variant (with torch and transformers).")
flags.DEFINE_string("child", None, "Internal: 'variant:export_dir' to time in this process.")


def _base_config(layers):
    return {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": layers,
            "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}


# The words of the benchmark's sentences; each is in the vocabulary.
WORDS = ("the a of to and in is it that for on was with as by at from this be are an or "
         "film story actors plot music scene good bad great long short new old first last "
         "best every often never really quite very most little many people time year day "
         "way man woman world life work part place case week city country house group "
         "problem fact hand eye night water money point home room mother area kind").split()


def _write_vocab(path, vocab_size):
    """A vocabulary of `vocab_size` entries: BERT's special tokens, WORDS,
    then filler entries."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + WORDS
    tokens += ["w%d" % i for i in range(vocab_size - len(tokens))]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")


def _sentence(num_words, rng):
    """A sentence of `num_words` random WORDS and a full stop."""
    return " ".join(rng.choice(WORDS) for _ in range(num_words)) + "."


def export(workdir):
    """Writes (or takes) a checkpoint and exports it; returns the SavedModel dir."""
    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import tensorflow.compat.v1 as tf

    import modeling
    import run_classifier
    from scriptkit import serving
    config_path = FLAGS.bert_config_file
    checkpoint = FLAGS.init_checkpoint
    vocab_file = os.path.join(workdir, "vocab.txt")
    do_lower_case = True
    encoder = None
    if FLAGS.hf_model:
        import shutil

        import convert_checkpoint
        converted = convert_checkpoint.convert(FLAGS.hf_model,
                                               os.path.join(workdir, "converted"))
        config_path, encoder = converted["bert_config_file"], converted["checkpoint"]
        shutil.copy(converted["vocab_file"], vocab_file)
        with open(os.path.join(FLAGS.hf_model, "tokenizer_config.json")) as f:
            do_lower_case = json.load(f).get("do_lower_case", True)
    elif not checkpoint:
        config_path = os.path.join(workdir, "bert_config.json")
        with open(config_path, "w") as f:
            json.dump(_base_config(FLAGS.layers), f)
    if not checkpoint:
        checkpoint = os.path.join(workdir, "classifier.ckpt")
        with tf.Graph().as_default():
            # A fine-tuned classifier's variables: BERT's (the converted
            # encoder's, or random), the output layer's and the global step.
            ids = tf.zeros([1, 8], tf.int32)
            run_classifier.create_model(modeling.BertConfig.from_json_file(config_path),
                                        False, ids, ids, ids, tf.zeros([1], tf.int32), 2,
                                        False)
            tf.train.get_or_create_global_step()
            if encoder:
                tf.train.init_from_checkpoint(encoder, {"bert/": "bert/"})
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                tf.train.Saver().save(sess, checkpoint)
    config = modeling.BertConfig.from_json_file(config_path)
    if not FLAGS.hf_model:
        _write_vocab(vocab_file, config.vocab_size)
    return run_classifier.export_model(
        serving.ExportSource(config, checkpoint, os.path.join(workdir, "export"), vocab_file,
                             do_lower_case=do_lower_case, max_seq_length=FLAGS.seq_length),
        run_classifier.Sst2Processor(), ["0", "1"])


def _request(seq_length, rng):
    """One request: random ids for 3/4 of the length, then padding."""
    import numpy as np
    used = seq_length * 3 // 4
    ids = np.zeros([1, seq_length], np.int32)
    ids[0, :used] = rng.randint(1000, 30000, size=used)
    mask = (ids > 0).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def _latencies(call, requests):
    """Calls `call` on each request; returns the timed ones' latencies in ms."""
    latencies = []
    for index, request in enumerate(requests):
        start = time.perf_counter()
        call(request)
        if index >= FLAGS.warmup:
            latencies.append((time.perf_counter() - start) * 1000.0)
    return latencies


def _run_hf_child(requests):
    import torch
    import transformers
    torch.set_num_threads(FLAGS.threads)
    torch.set_num_interop_threads(FLAGS.threads)
    torch.manual_seed(0)
    base = _base_config(FLAGS.layers)
    # The same shape, and Google's (tanh) GELU.
    config = transformers.BertConfig(num_labels=2, **dict(base, hidden_act="gelu_new"))
    model = transformers.BertForSequenceClassification(config).eval()

    def call(request):
        with torch.inference_mode():
            logits = model(input_ids=torch.from_numpy(request["input_ids"]).long(),
                           attention_mask=torch.from_numpy(request["input_mask"]).long(),
                           token_type_ids=torch.from_numpy(request["segment_ids"]).long()).logits
            return torch.softmax(logits, -1).numpy()
    return _latencies(call, requests)


def _sentences(num_words, count):
    """`count` sentences of `num_words` words, the same in every child."""
    import random
    rng = random.Random(num_words)
    return [_sentence(num_words, rng) for _ in range(count)]


def _text_call(variant, export_dir):
    """The call that labels one sentence in `variant`: "text" (the
    SavedModel's text signature), "line" (predict.py's path for one input
    line: JSON in, JSON out) or "server" (an HTTP request to predict.py's
    server, end to end, on a kept-alive connection)."""
    import http.client
    import threading

    import tensorflow as tf

    from scriptkit import exported_model
    from scriptkit import rest_server
    if variant == "text":
        signature = tf.saved_model.load(export_dir).signatures["serving_default"]
        return lambda text: signature(text_a=tf.constant([text]))["probabilities"].numpy()
    model = exported_model.Model(export_dir)
    if variant == "line":
        signature = model.signature("serving_default")

        def label_line(text):
            row = json.loads(json.dumps({"text_a": text}))
            outputs = signature({"text_a": [row["text_a"]]})
            return json.dumps(exported_model.split_outputs(outputs)[0], sort_keys=True)
        return label_line
    server = rest_server.make_server(model, "127.0.0.1", 0, "default", 1 << 26)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1])

    def post(text):
        connection.request("POST", "/v1/models/default:predict",
                           json.dumps({"instances": [{"text_a": text}]}),
                           {"Content-Type": "application/json"})
        return json.loads(connection.getresponse().read())
    return post


def _run_text_child(variant, export_dir):
    """{words: latencies} of `variant`, per --words length (batch: one
    length, --batch sentences per call)."""
    count = FLAGS.warmup + FLAGS.requests
    if variant == "hf_pipeline":
        call = _hf_pipeline(os.path.dirname(os.path.dirname(export_dir)))
    elif variant == "batch":
        import tensorflow as tf
        signature = tf.saved_model.load(export_dir).signatures["serving_default"]
        words = FLAGS.words[0]
        sentences = _sentences(int(words), count * FLAGS.batch)
        batches = [sentences[i:i + FLAGS.batch] for i in range(0, len(sentences), FLAGS.batch)]
        return {words: _latencies(lambda batch: signature(text_a=tf.constant(batch)), batches)}
    else:
        call = _text_call(variant, export_dir)
    return {words: _latencies(call, _sentences(int(words), count)) for words in FLAGS.words}


def _hf_pipeline(workdir):
    """Hugging Face's pipeline("text-classification") on the same model
    (--hf_model) or one of the same shape (random weights, this run's
    vocabulary), as a call on one sentence."""
    import torch
    import transformers
    torch.set_num_threads(FLAGS.threads)
    torch.set_num_interop_threads(FLAGS.threads)
    torch.manual_seed(0)
    if FLAGS.hf_model:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            FLAGS.hf_model, num_labels=2)
        tokenizer = transformers.AutoTokenizer.from_pretrained(FLAGS.hf_model)
    else:
        config = transformers.BertConfig(num_labels=2, **dict(_base_config(FLAGS.layers),
                                                             hidden_act="gelu_new"))
        model = transformers.BertForSequenceClassification(config)
        tokenizer = transformers.BertTokenizerFast(os.path.join(workdir, "vocab.txt"))
    pipe = transformers.pipeline("text-classification", model=model.eval(),
                                 tokenizer=tokenizer, device="cpu")
    return lambda text: pipe(text)


def run_child(spec):
    import numpy as np
    variant, export_dir = spec.split(":", 1)
    rng = np.random.RandomState(0)
    requests = [_request(FLAGS.seq_length, rng) for _ in range(FLAGS.warmup + FLAGS.requests)]
    if variant == "hf":
        _report(_run_hf_child(requests))
        return
    if variant == "hf_pipeline":
        bench_common.print_result({words: _summary(latencies) for words, latencies
                                   in _run_text_child(variant, export_dir).items()})
        return
    from scriptkit import quiet_tf  # noqa: F401  (TensorFlow as the scripts import it)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (every export holds its WordPiece op)
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)

    if variant in TEXT_VARIANTS:
        bench_common.print_result({words: _summary(latencies) for words, latencies
                                   in _run_text_child(variant, export_dir).items()})
        return
    if variant == "session":
        tf1 = tf.compat.v1
        tf1.disable_eager_execution()
        config = tf1.ConfigProto(intra_op_parallelism_threads=FLAGS.threads,
                                 inter_op_parallelism_threads=FLAGS.threads)
        sess = tf1.Session(config=config)
        meta = tf1.saved_model.loader.load(sess, ["serve"], export_dir)
        signature = meta.signature_def["serving_ids"]
        output = signature.outputs["probabilities"].name
        inputs = {name: signature.inputs[name].name for name in requests[0]}

        def call(request):
            return sess.run(output, {inputs[k]: v for k, v in request.items()})
    else:
        serving = tf.saved_model.load(export_dir).signatures["serving_ids"]
        function = tf.function(serving, jit_compile=True) if variant == "xla" else serving

        def call(request):
            return function(**{k: tf.constant(v) for k, v in request.items()})[
                "probabilities"].numpy()

    _report(_latencies(call, requests))


def _summary(latencies):
    """p50, p99 and mean of some latencies."""
    latencies = sorted(latencies)
    p99 = latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))]
    return {"p50": statistics.median(latencies), "p99": p99,
            "mean": statistics.mean(latencies)}


def _report(latencies):
    """Prints the RESULT line of a child."""
    bench_common.print_result(_summary(latencies))


# The variants that label sentences, one result per --words length.
TEXT_VARIANTS = ("text", "line", "server", "batch", "hf_pipeline")


def _measure(variant, export_dir):
    flag_args = [a for a in sys.argv[1:] if not a.startswith("--child")]
    python = FLAGS.hf_python if variant.startswith("hf") else sys.executable
    return bench_common.run_child(
        [os.path.abspath(__file__), "--child=%s:%s" % (variant, export_dir)] + flag_args,
        python=python)


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child)
        return
    with tempfile.TemporaryDirectory() as workdir:
        export_dir = export(workdir)
        results = {}
        for _ in range(FLAGS.rounds):
            for variant in FLAGS.variants:
                result = _measure(variant, export_dir)
                if variant not in TEXT_VARIANTS or "error" in result:
                    results.setdefault(variant, []).append(result)
                    continue
                for words, summary in result.items():
                    name = ("batch %d x %s words" % (FLAGS.batch, words) if variant == "batch"
                            else "%s %s words" % (variant, words))
                    results.setdefault(name, []).append(summary)
    model = FLAGS.hf_model or "BERT L=%d (random weights)" % FLAGS.layers
    print("%s, max_seq_length %d, %d thread(s), %d requests after %d warm-up, median of %d "
          "rounds" % (model, FLAGS.seq_length, FLAGS.threads, FLAGS.requests, FLAGS.warmup,
                      FLAGS.rounds))
    print("%-24s %10s %10s %10s %10s" % ("variant", "p50 ms", "p99 ms", "mean ms",
                                         "inputs/s"))
    for variant, rounds in results.items():
        good = [r for r in rounds if "error" not in r]
        if not good:
            print("%-24s failed: %s" % (variant, rounds[0]["error"]))
            continue
        p50, p99, mean = (statistics.median(r[key] for r in good)
                          for key in ("p50", "p99", "mean"))
        inputs = FLAGS.batch if variant.startswith("batch") else 1
        print("%-24s %10.1f %10.1f %10.1f %10.1f" % (variant, p50, p99, mean,
                                                    inputs * 1000.0 / mean))


if __name__ == "__main__":
    app.run(main)
