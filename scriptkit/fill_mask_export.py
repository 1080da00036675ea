"""Fill-mask as a SavedModel: what `run_pretraining.py --export_dir` writes.

A pre-trained checkpoint's masked-LM head (the `cls/predictions/*`
variables of `run_pretraining.get_masked_lm_output`) predicts the word
piece behind each ``[MASK]`` of a text. The export (see serving.py for the
layout and the ``serving_ids`` signature) has a ``serving_default`` that
takes ``text``, tf.string [batch], each text holding one or more literal
``[MASK]`` markers, and returns:

* ``tokens`` string [batch, masks, k]: per mask, the k most likely word
  pieces (as in the vocabulary, "##" included), best first;
* ``token_ids`` int32 [batch, masks, k] and ``scores`` float32 [batch,
  masks, k]: their ids and probabilities (a softmax over the whole
  vocabulary);
* ``num_masks`` int32 [batch]: how many masks of each text were predicted;
* ``filled`` string [batch]: the text with each predicted ``[MASK]``
  replaced by its best piece, the piece's "##" (if any) dropped, so that
  "walk[MASK]" with "##ing" reads "walking"; the rest of the text is kept
  character for character.

The masks axis is as long as the most masks of a text in the batch; a
text with fewer is padded with "" (tokens), -1 (token_ids) and 0.0
(scores) after its own. A text without a ``[MASK]`` is no error: it has
num_masks 0, only padding, and ``filled`` is the text itself. A text
longer than the model reads (max_seq_length - 2 pieces) is cut as the
scripts cut it; its masks after the cut are not predicted (they do not
count in num_masks) and stay ``[MASK]`` in ``filled``.

How the marker is found: `graph_tokenization.GraphTokenizer`, like
`tokenization.FullTokenizer`, splits "[MASK]" into the pieces of "[",
"mask" and "]". So the text is split at each literal "[MASK]" (case
sensitive, as Hugging Face's tokenizers match their special tokens) first;
the parts between the markers are tokenized alone and joined again with
the [MASK] id between them. A word therefore ends at a marker:
"walk[MASK]" is "walk" followed by a mask.

The k, the vocabulary's [MASK] id and max_seq_length are recorded in
assets/tokenizer_config.json.
"""


import tensorflow.compat.v1 as tf

from scriptkit import errors
from scriptkit import file_io
from scriptkit import graph_tokenization
from scriptkit import runtime
from scriptkit import serving
from scriptkit import training

MASK_TOKEN = "[MASK]"

# The outputs of the export's signatures.
TOKENS = "tokens"
TOKEN_IDS = "token_ids"
SCORES = "scores"
NUM_MASKS = "num_masks"
FILLED = "filled"

# The variables a fill-mask export reads beyond the encoder (the head's
# output projection is the word embedding table).
HEAD_VARIABLES = ("cls/predictions/transform/dense/kernel",
                  "cls/predictions/transform/dense/bias",
                  "cls/predictions/transform/LayerNorm/beta",
                  "cls/predictions/transform/LayerNorm/gamma",
                  "cls/predictions/output_bias")


def check_export_flags(vocab_file, export_dir, top_k, precision="fp32"):
    """Checks up front what --export_dir will need: a folder it can write, a
    vocabulary the graph's tokenizer reads that holds [MASK], a positive
    --top_k and the runtime of --export_precision=`precision`
    (`serving.check_export_flags`). Returns the [MASK] id; raises
    errors.InputError."""
    serving.check_export_flags(vocab_file, export_dir, precision)
    if top_k < 1:
        raise errors.InputError("--top_k=%d: the export returns the top_k pieces per mask; "
                                "give 1 or more" % top_k)
    vocab = graph_tokenization.check_vocab(vocab_file)
    if MASK_TOKEN not in vocab:
        raise errors.InputError("--vocab_file %s has no %s: fill-mask needs the token the "
                                "model was pre-trained to fill" % (vocab_file, MASK_TOKEN))
    return vocab[MASK_TOKEN]


def check_masked_lm_head(checkpoint, flag_name="init_checkpoint"):
    """Raises errors.InputError naming `flag_name` where `checkpoint` lacks
    the masked-LM head (a fine-tuned model, or an encoder converted without
    its pre-training heads)."""
    stored = dict(tf.train.list_variables(checkpoint))
    missing = [name for name in HEAD_VARIABLES if name not in stored]
    if missing:
        raise errors.InputError(
            "--%s %s has no masked-LM head (%s): fill-mask needs a pre-trained checkpoint "
            "with Google's cls/predictions variables" % (flag_name, checkpoint, missing[0]))


def mask_positions(input_ids, mask_id):
    """Where the masks are.

    Args:
      input_ids: int32 [batch, seq_length].
      mask_id: the id of [MASK].

    Returns:
      (positions int32 [batch, masks], num_masks int32 [batch]): each
      sequence's mask positions in order, zero-padded to the most masks of
      a sequence of the batch.
    """
    found = tf.where(tf.equal(input_ids, mask_id))  # [n, 2], in row-major order.
    per_row = tf.RaggedTensor.from_value_rowids(
        found[:, 1], found[:, 0], nrows=tf.shape(input_ids, out_type=tf.int64)[0])
    return (tf.cast(per_row.to_tensor(default_value=0), tf.int32),
            tf.cast(per_row.row_lengths(), tf.int32))


def fill_mask_model_fn_builder(bert_config, masked_lm_output, vocab_file, mask_id, top_k,
                               options=None):
    """Builds the model_fn of a fill-mask export (`serving.export` calls it
    in PREDICT mode; the export restores the weights).

    Args:
      bert_config: modeling.BertConfig.
      masked_lm_output: `run_pretraining.get_masked_lm_output` (the head,
        passed in: run_pretraining imports this module).
      vocab_file: the vocabulary, for the pieces' strings.
      mask_id: the id of [MASK].
      top_k: pieces per mask (at most the vocabulary's size).
      options: training.TrainingOptions for the export (`for_export`).

    Returns:
      model_fn taking int32 input_ids, input_mask and segment_ids [batch,
      seq_length]; its predictions and export outputs are tokens,
      token_ids, scores [batch, masks, k] and num_masks [batch] (see the
      module docstring).
    """
    k = min(top_k, bert_config.vocab_size)

    def model_fn(features, labels, mode, params):
        """See fill_mask_model_fn_builder."""
        del labels, params  # Unused.
        if mode != runtime.ModeKeys.PREDICT:
            raise ValueError("A fill-mask export only predicts; got mode %s" % mode)
        input_ids = features["input_ids"]
        model = training.bert_model(bert_config, False, input_ids, features["input_mask"],
                                    features["segment_ids"], False, options)
        positions, num_masks = mask_positions(input_ids, mask_id)
        # The head as pre-training builds it; its loss (on dummy labels)
        # feeds no output, so the session prunes it.
        _, _, log_probs = masked_lm_output(
            bert_config, model.get_sequence_output(), model.get_embedding_table(),
            positions, tf.zeros_like(positions), tf.zeros_like(positions, tf.float32),
            fused_ops=model.fused_ops)
        scores, ids = tf.nn.top_k(tf.exp(tf.cast(log_probs, tf.float32)), k=k)
        shape = tf.concat([tf.shape(positions), [k]], axis=0)
        scores, ids = tf.reshape(scores, shape), tf.reshape(ids, shape)
        is_mask = (tf.range(tf.shape(positions)[1])[tf.newaxis, :, tf.newaxis]
                   < num_masks[:, tf.newaxis, tf.newaxis])
        is_mask = tf.broadcast_to(is_mask, shape)
        # The table lives in the export's graph, outside the loop the
        # model may run in (`serving.run_in_chunks`), where it is
        # initialised once when the SavedModel loads.
        with tf.init_scope():
            pieces = tf.lookup.StaticHashTable(
                tf.lookup.TextFileInitializer(
                    vocab_file, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER,
                    tf.string, tf.lookup.TextFileIndex.WHOLE_LINE), default_value="")
        predictions = {
            TOKENS: tf.where_v2(is_mask, pieces.lookup(tf.cast(ids, tf.int64)), ""),
            TOKEN_IDS: tf.where_v2(is_mask, ids, -1),
            SCORES: tf.where_v2(is_mask, scores, 0.0),
            NUM_MASKS: num_masks}
        return runtime.TPUEstimatorSpec(
            mode=mode, predictions=predictions,
            export_outputs={serving.TEXT_SIGNATURE: runtime.PredictOutput(predictions)})

    return model_fn


def split_at_masks(texts):
    """texts: string [batch] -> RaggedTensor string [batch, (masks + 1)]:
    the parts of each text around its literal [MASK] markers (a text
    without one is one part)."""
    return tf.strings.split(texts, sep=MASK_TOKEN, result_type="RaggedTensor")


def pieces_with_masks(tokenizer, parts, mask_id):
    """The WordPiece ids of texts split at their markers, the [MASK] id
    between the parts.

    Args:
      tokenizer: graph_tokenization.GraphTokenizer.
      parts: RaggedTensor string [batch, (parts)], from `split_at_masks`.
      mask_id: the id of [MASK].

    Returns:
      RaggedTensor int32 [batch, (pieces)].
    """
    part_pieces = tokenizer.tokenize(parts.flat_values)  # [parts, (pieces)]
    part_rows = parts.value_rowids()
    is_last = tf.equal(tf.range(tf.size(part_rows, out_type=tf.int64)),
                       tf.gather(parts.row_limits() - 1, part_rows))
    # Each part's pieces, then (but after a text's last part) one [MASK];
    # gathered from [the pieces of every part, mask_id].
    own = tf.cast(part_pieces.row_lengths(), tf.int32)
    lengths = own + tf.cast(tf.logical_not(is_last), tf.int32)
    part_of = tf.repeat(tf.range(tf.size(lengths)), lengths)
    within = tf.range(tf.reduce_sum(lengths)) - tf.gather(tf.cumsum(lengths, exclusive=True),
                                                         part_of)
    values = tf.concat([tf.cast(part_pieces.values, tf.int32), [mask_id]], axis=0)
    index = tf.where(within < tf.gather(own, part_of),
                     tf.gather(tf.cast(part_pieces.row_starts(), tf.int32), part_of) + within,
                     tf.fill(tf.shape(within), tf.size(part_pieces.values)))
    return tf.RaggedTensor.from_value_rowids(
        tf.gather(values, index), tf.gather(part_rows, part_of),
        nrows=tf.shape(parts.row_splits, out_type=tf.int64)[0] - 1, validate=False)


def fill(parts, tokens, num_masks):
    """The texts with their predicted masks filled (see the module
    docstring).

    Args:
      parts: RaggedTensor string [batch, (parts)], from `split_at_masks`.
      tokens: string [batch, masks, k], best first.
      num_masks: int32 [batch], the masks predicted per text.

    Returns:
      string [batch].
    """
    best = tf.strings.regex_replace(tokens[:, :, 0], "^##", "")
    # One "" column, for the place after each text's last part.
    best = tf.concat([best, tf.fill([tf.shape(best)[0], 1], "")], axis=1)
    rows = tf.cast(parts.value_rowids(), tf.int32)
    within = tf.cast(tf.range(tf.size(rows)) - tf.gather(
        tf.cast(parts.row_starts(), tf.int32), rows), tf.int32)
    masks_in_text = tf.gather(tf.cast(parts.row_lengths(), tf.int32) - 1, rows)
    column = tf.minimum(within, tf.shape(best)[1] - 1)
    after = tf.gather_nd(best, tf.stack([rows, column], axis=1))
    after = tf.where(within < tf.gather(num_masks, rows), after,
                     tf.where(within < masks_in_text, tf.fill(tf.shape(after), MASK_TOKEN),
                              tf.fill(tf.shape(after), "")))
    joined = parts.with_flat_values(tf.strings.join([parts.flat_values, after]))
    return tf.strings.reduce_join(joined, axis=1)


def export_fill_mask(source, masked_lm_output, top_k=5):
    """Exports a fill-mask SavedModel (tag "serve", see the module
    docstring) of the `serving.ExportSource` `source` and returns its
    directory (timestamped, in source.export_dir).

    Args:
      source: the model, its weights (a checkpoint prefix holding the
        encoder and the masked-LM head), the folder, the tokenizer built
        into the export, the most pieces read per text (max_seq_length,
        [CLS] and [SEP] included) and the options (its precision is kept).
      masked_lm_output: `run_pretraining.get_masked_lm_output`.
      top_k: pieces per mask.

    Raises:
      errors.InputError: the vocabulary lacks [MASK] or the checkpoint the
        head (checked before anything is written).
    """
    mask_id = check_export_flags(source.vocab_file, source.export_dir, top_k, source.precision)
    check_masked_lm_head(source.checkpoint)
    model_fn = fill_mask_model_fn_builder(
        source.bert_config, masked_lm_output, source.vocab_file, mask_id, top_k,
        (source.options or training.TrainingOptions()).for_export())
    max_seq_length = source.max_seq_length

    def text_signature(tokenizer):
        text = serving.string_input("text")
        parts = split_at_masks(text)
        features = serving.pack(pieces_with_masks(tokenizer, parts, mask_id), None,
                                max_seq_length, tokenizer.cls_id, tokenizer.sep_id)

        def outputs(predictions):
            result = dict(predictions)
            result[FILLED] = fill(parts, predictions[TOKENS], predictions[NUM_MASKS])
            return result

        return {"text": text}, features, outputs

    settings = {"max_seq_length": max_seq_length, "top_k": top_k, "mask_token": MASK_TOKEN,
                "mask_id": mask_id}
    # Rows run in chunks (`serving.run_in_chunks`) are padded to the most
    # masks of any chunk as the model pads them to its chunk's: no piece.
    # The vocabulary's lines, as the graph's table reads them (for the
    # ONNX model of an --export_precision other than fp32).
    pieces = [line[:-1] if line.endswith("\r") else line for line in
              file_io.read_file_bytes(source.vocab_file).decode("utf-8").split("\n")]
    return serving.export(model_fn, source, text_signature, settings=settings,
                          padding={TOKEN_IDS: -1},
                          warmup_text="A text with a %s to fill." % MASK_TOKEN,
                          onnx_head=("fill_mask", (mask_id, top_k, pieces)))
