"""BERT's Transformer encoder, written on TensorFlow's v1 graph API.

The model is the one of Devlin et al. (2018) as released by Google: the same
public functions, the same numerics and the same variable names and shapes, so
Google's checkpoints load unchanged. Only core ops of ``tensorflow.compat.v1``
are used (no ``tf.contrib``, no ``tf.layers``, no Keras), which keeps graphs
buildable on TensorFlow 2.16 and later.

Differences from the original:

The public functions, the numerics and the variables are the same. New are
three keyword arguments of `BertModel`, which the training scripts expose
as memory and speed options:

* ``compute_type``: ``tf.float32`` (default), ``tf.float16`` or
  ``tf.bfloat16``. Variables stay float32, so checkpoints do not change;
  matmuls and activations run in the compute type, LayerNorm statistics and
  the attention softmax in float32, and every accessor returns float32.
* ``recompute_grad``: rebuild each Transformer layer in the backward pass
  instead of keeping its activations (gradient checkpointing, `recompute.py`),
  for roughly one more forward pass of compute.
* ``fused_ops``: which of GELU, LayerNorm and dropout run as XLA-compiled
  loops (`bert_ops.py`); by default all three where no GPU is visible.

Whatever the options, the backward pass keeps less than a plain graph would:
GELU and dropout (and LayerNorm, when fused) carry gradients that keep only
what they need (`bert_ops.py`), and the feed-forward output projection
recomputes the GELU it consumed.
"""

import collections
import copy
import dataclasses
import functools
import json
import math
import re

import tensorflow.compat.v1 as tf

import bert_ops
import recompute


@dataclasses.dataclass(eq=False)
class BertConfig:
    """Hyperparameters of a `BertModel`, the content of a `bert_config.json`.

    Attributes:
      vocab_size: rows of the word embedding table; `input_ids` lie in
        [0, vocab_size).
      hidden_size: width H of the embeddings, of every encoder layer and of
        the pooler.
      num_hidden_layers: number L of Transformer layers.
      num_attention_heads: heads A per self-attention layer; must divide
        `hidden_size`.
      intermediate_size: width of the feed-forward layer inside each
        Transformer layer (4 H in the released models).
      hidden_act: that feed-forward layer's activation, a callable or a name
        understood by `get_activation`. "gelu" is the tanh approximation the
        released checkpoints were trained with, "gelu_exact" the erf form.
      hidden_dropout_prob: dropout rate on the embeddings and on each dense
        projection that feeds a residual sum.
      attention_probs_dropout_prob: dropout rate on the attention weights.
      max_position_embeddings: rows of the position embedding table, hence the
        longest sequence the model accepts.
      type_vocab_size: number of distinct `token_type_ids` (segments).
      initializer_range: standard deviation of the truncated normal that
        initialises every weight matrix.

    Keys read by `from_dict` that are not listed here (written by other
    toolkits) become attributes too and round-trip through `to_dict`.
    """

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: object = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02

    @classmethod
    def from_dict(cls, json_object):
        """Builds a config from a dict; every key becomes an attribute."""
        config = cls(vocab_size=None)
        config.__dict__.update(json_object)
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """Builds a config from a JSON file holding one object.

        Raises:
          ValueError: naming the file, when it is missing, is not JSON or
            holds something other than an object.
        """
        if not tf.io.gfile.exists(json_file):
            raise ValueError("BERT config file not found: %s" % json_file)
        with tf.io.gfile.GFile(json_file, "r") as reader:
            text = reader.read()
        try:
            parsed = json.loads(text)
        except ValueError as e:
            raise ValueError("BERT config file %s is not valid JSON: %s" % (json_file, e))
        if not isinstance(parsed, dict):
            raise ValueError("BERT config file %s must hold a JSON object" % json_file)
        return cls.from_dict(parsed)

    def to_dict(self):
        """Returns a deep copy of every attribute, as a dict."""
        return copy.deepcopy(self.__dict__)

    def to_json_string(self):
        """Returns the attributes as indented JSON with sorted keys."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel:
    """BERT ("Bidirectional Encoder Representations from Transformers").

    Building one adds the embeddings, the encoder and the pooler to the
    default graph under the variable scope `scope` ("bert" by default):

        config = modeling.BertConfig.from_json_file("bert_config.json")
        model = modeling.BertModel(config, is_training=True,
                                   input_ids=ids,          # int32 [B, S]
                                   input_mask=mask,        # 1 = real token
                                   token_type_ids=segments)
        logits = tf.matmul(model.get_pooled_output(), class_weights)

    A task head reads `get_pooled_output()` (one vector per sequence) or
    `get_sequence_output()` (one per token).
    """

    def __init__(self, config, is_training, input_ids, input_mask=None, token_type_ids=None,
                 use_one_hot_embeddings=False, scope=None, compute_type=tf.float32,
                 recompute_grad=False, fused_ops=None):
        """Builds the model.

        Args:
          config: `BertConfig`. Not modified.
          is_training: bool. When False both dropout rates are taken as 0.
          input_ids: int32 Tensor [batch_size, seq_length] of WordPiece ids.
          input_mask: optional int32 Tensor [batch_size, seq_length], 1 for
            tokens to attend to and 0 for padding; default all ones.
          token_type_ids: optional int32 Tensor [batch_size, seq_length] of
            segment ids; default all zeros.
          use_one_hot_embeddings: bool. Look words up with a one-hot matmul
            (fast on TPUs) instead of a gather.
          scope: optional variable scope name; default "bert".
          compute_type: dtype of the encoder's matmuls and activations.
          recompute_grad: bool. Recompute each layer in the backward pass
            instead of keeping its activations.
          fused_ops: which kernels to build as XLA-compiled loops: a
            bert_ops.FusedOps, or a setting of `bert_ops.choose_fused_ops`
            (default "auto", for a graph trained when `is_training`). The
            choice made is `self.fused_ops`.

        Raises:
          ValueError: the config is unusable or a tensor has the wrong rank.
        """
        config = copy.deepcopy(config)
        validate_config(config)
        # Resolved first, so that an unknown name fails before any variable
        # is created.
        activation = get_activation(config.hidden_act)
        self.fused_ops = bert_ops.choose_fused_ops(fused_ops, training=is_training)
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0

        batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
        if input_mask is None:
            input_mask = tf.ones([batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros([batch_size, seq_length], dtype=tf.int32)

        with tf.variable_scope(scope, default_name="bert"):
            with tf.variable_scope("embeddings"):
                word_vectors, self.embedding_table = embedding_lookup(
                    input_ids, config.vocab_size, embedding_size=config.hidden_size,
                    initializer_range=config.initializer_range,
                    use_one_hot_embeddings=use_one_hot_embeddings)
                # Segment and position embeddings are added, then LayerNorm
                # and dropout: the encoder's input.
                self.embedding_output = embedding_postprocessor(
                    word_vectors, use_token_type=True, token_type_ids=token_type_ids,
                    token_type_vocab_size=config.type_vocab_size,
                    initializer_range=config.initializer_range,
                    max_position_embeddings=config.max_position_embeddings,
                    dropout_prob=config.hidden_dropout_prob, fused_ops=self.fused_ops)

            # The encoder runs in `compute_type`; its outputs are cast back.
            with tf.variable_scope("encoder"):
                attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
                encoder_input = self.embedding_output
                if compute_type != tf.float32:
                    encoder_input = tf.cast(encoder_input, compute_type)
                layers = transformer_model(
                    encoder_input, attention_mask=attention_mask,
                    hidden_size=config.hidden_size,
                    num_hidden_layers=config.num_hidden_layers,
                    num_attention_heads=config.num_attention_heads,
                    intermediate_size=config.intermediate_size,
                    intermediate_act_fn=activation,
                    hidden_dropout_prob=config.hidden_dropout_prob,
                    attention_probs_dropout_prob=config.attention_probs_dropout_prob,
                    initializer_range=config.initializer_range,
                    do_return_all_layers=True, recompute_grad=recompute_grad,
                    fused_ops=self.fused_ops)
                self.all_encoder_layers = [_as_float32(layer) for layer in layers]
            self.sequence_output = self.all_encoder_layers[-1]

            with tf.variable_scope("pooler"):
                # One vector per sequence for classification: the final hidden
                # state of the first token ([CLS]) through a dense tanh layer,
                # which pre-training fits through next sentence prediction.
                first_token = self.sequence_output[:, 0, :]
                self.pooled_output = dense(
                    first_token, config.hidden_size, activation=tf.tanh,
                    kernel_initializer=create_initializer(config.initializer_range))

    def get_pooled_output(self):
        """Returns the pooler's output, float32 [batch_size, hidden_size]."""
        return self.pooled_output

    def get_sequence_output(self):
        """Returns the last encoder layer, float32 [batch_size, seq_length,
        hidden_size]: one vector per token."""
        return self.sequence_output

    def get_all_encoder_layers(self):
        """Returns every encoder layer's output, lowest first: a list of
        `num_hidden_layers` float32 Tensors [batch_size, seq_length,
        hidden_size]."""
        return self.all_encoder_layers

    def get_embedding_output(self):
        """Returns the encoder's input, float32 [batch_size, seq_length,
        hidden_size]: word + segment + position embeddings after LayerNorm
        (and dropout when training)."""
        return self.embedding_output

    def get_embedding_table(self):
        """Returns the word embedding variable [vocab_size, hidden_size]
        (the masked LM output layer shares it)."""
        return self.embedding_table


def _as_float32(tensor):
    """`tensor` cast to float32 when it is of a reduced-precision type."""
    return tensor if tensor.dtype == tf.float32 else tf.cast(tensor, tf.float32)


def validate_config(config):
    """Rejects, with a readable ValueError, configs no model can be built from."""
    if config.vocab_size is None or int(config.vocab_size) <= 0:
        raise ValueError("BertConfig.vocab_size must be a positive integer, got %r"
                         % (config.vocab_size,))
    if config.hidden_size % config.num_attention_heads != 0:
        raise ValueError(
            "The hidden size (%d) is not a multiple of the number of attention "
            "heads (%d)" % (config.hidden_size, config.num_attention_heads))


# ---------------------------------------------------------------------------
# Activations, dropout, LayerNorm, dense layers. GELU, dropout and LayerNorm
# are bert_ops.py's, with Google's signatures and an optional `fused_ops`
# (a bert_ops.FusedOps; None: bert_ops.choose_fused_ops("auto")).


def _fused(fused_ops, name):
    """Whether kernel `name` is fused under the choice `fused_ops` (None:
    left to the kernel's "auto")."""
    return None if fused_ops is None else getattr(bert_ops.choose_fused_ops(fused_ops), name)


def gelu(x, fused_ops=None):
    """Gaussian Error Linear Unit, tanh approximation (Google's "gelu").

    Args:
      x: float Tensor.
      fused_ops: optional bert_ops.FusedOps.

    Returns:
      Tensor of the shape and dtype of `x` (see `bert_ops.gelu`).
    """
    return bert_ops.gelu(x, fused=_fused(fused_ops, "gelu"))


gelu_exact = bert_ops.gelu_exact

_ACTIVATIONS = {
    "linear": None,
    "relu": tf.nn.relu,
    "gelu": gelu,
    "gelu_new": gelu,  # Hugging Face's name for the tanh form.
    "gelu_exact": gelu_exact,
    "tanh": tf.tanh,
}


def get_activation(activation_string, fused_ops=None):
    """Resolves an activation given by name (case-insensitive).

    Args:
      activation_string: "linear", "relu", "gelu", "gelu_new",
        "gelu_exact" or "tanh"; a callable is returned unchanged.
      fused_ops: optional bert_ops.FusedOps for the GELU returned.

    Returns:
      The activation function, or None for "linear", "" and None.

    Raises:
      ValueError: an unknown name.
    """
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string:
        return None
    name = activation_string.lower()
    if name not in _ACTIVATIONS:
        raise ValueError("Unsupported activation: %s (known: %s)"
                         % (name, ", ".join(_ACTIVATIONS)))
    activation = _ACTIVATIONS[name]
    if activation is gelu and fused_ops is not None:
        return functools.partial(gelu, fused_ops=fused_ops)
    return activation


def dropout(input_tensor, dropout_prob, fused_ops=None):
    """Zeroes each value with probability `dropout_prob` (of *dropping*; 0 or
    None: `input_tensor` itself), scales the rest by 1 / (1 - dropout_prob).

    Returns:
      Tensor of the shape and dtype of `input_tensor` (see
      `bert_ops.dropout`).
    """
    return bert_ops.dropout(input_tensor, dropout_prob, fused=_fused(fused_ops, "dropout"))


def layer_norm(input_tensor, name=None, fused_ops=None):
    """Layer normalization over the last axis.

    Variables `<name>/beta` (zeros) and `<name>/gamma` (ones), `name`
    defaulting to "LayerNorm", and epsilon 1e-12: those of
    `tf.contrib.layers.layer_norm(begin_norm_axis=-1, begin_params_axis=-1)`
    that Google's checkpoints hold. Statistics are float32 for any input type.

    Args:
      input_tensor: float Tensor [..., width] of known rank.
      name: optional variable scope name.
      fused_ops: optional bert_ops.FusedOps.

    Returns:
      Tensor of the shape and dtype of `input_tensor`.
    """
    with tf.variable_scope(name, default_name="LayerNorm"):
        width = input_tensor.shape[-1]
        beta = tf.get_variable("beta", shape=[width], initializer=tf.zeros_initializer())
        gamma = tf.get_variable("gamma", shape=[width], initializer=tf.ones_initializer())
        return bert_ops.layer_norm(input_tensor, gamma, beta,
                                  fused=_fused(fused_ops, "layer_norm"))


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None, fused_ops=None):
    """`layer_norm` then `dropout`."""
    return dropout(layer_norm(input_tensor, name, fused_ops), dropout_prob, fused_ops)


def create_initializer(initializer_range=0.02):
    """The weight initializer: truncated normal, stddev `initializer_range`."""
    return tf.truncated_normal_initializer(stddev=initializer_range)


def _dense_variables(input_tensor, units, kernel_initializer, name):
    """Gets `<name>/kernel` [in, units] and `<name>/bias` [units] (zeros),
    the variables of `tf.layers.dense`, creating them if needed.

    Returns:
      (kernel, bias) Tensors in the input's dtype: the float32 variables are
      cast for a float16 or bfloat16 computation.
    """
    with tf.variable_scope(name):
        kernel = tf.get_variable("kernel", shape=[input_tensor.shape[-1], units],
                                 initializer=kernel_initializer)
        bias = tf.get_variable("bias", shape=[units], initializer=tf.zeros_initializer())
    dtype = input_tensor.dtype
    return tf.cast(kernel, dtype), tf.cast(bias, dtype)


def dense(input_tensor, units, activation=None, kernel_initializer=None, name="dense"):
    """Fully connected layer: activation(input_tensor @ kernel + bias).

    Args:
      input_tensor: float Tensor [rows, in] (or of higher rank, contracted on
        its last axis).
      units: output width.
      activation: optional callable applied to the result.
      kernel_initializer: the kernel's initializer.
      name: variable scope of `kernel` and `bias`.

    Returns:
      Tensor [rows, units] (or [..., units]) of the input's dtype.
    """
    kernel, bias = _dense_variables(input_tensor, units, kernel_initializer, name)
    rank = input_tensor.shape.ndims
    if rank == 2:
        product = tf.matmul(input_tensor, kernel)
    else:
        product = tf.tensordot(input_tensor, kernel, [[rank - 1], [0]])
    output = tf.nn.bias_add(product, bias)
    return output if activation is None else activation(output)


def _gelu_dense(pre_activation, units, kernel_initializer=None, name="dense", fused_ops=None):
    """`dense(gelu(pre_activation), units)` with the same variables and
    values, whose backward pass keeps only `pre_activation`
    (`bert_ops.gelu_matmul`).

    Args:
      pre_activation: float Tensor [rows, in].

    Returns:
      Tensor [rows, units] of the input's dtype.
    """
    kernel, bias = _dense_variables(pre_activation, units, kernel_initializer, name)
    product = bert_ops.gelu_matmul(pre_activation, kernel, fused=_fused(fused_ops, "gelu"))
    return tf.nn.bias_add(product, bias)


# ---------------------------------------------------------------------------
# Embeddings.


def embedding_lookup(input_ids, vocab_size, embedding_size=128, initializer_range=0.02,
                     word_embedding_name="word_embeddings", use_one_hot_embeddings=False):
    """Word embeddings of `input_ids`, creating the table.

    Args:
      input_ids: int32 Tensor [batch_size, seq_length] (or [batch_size,
        seq_length, n], whose n embeddings per position are concatenated).
      vocab_size: rows of the table.
      embedding_size: width of an embedding.
      initializer_range: stddev of the table's initializer.
      word_embedding_name: name of the table variable.
      use_one_hot_embeddings: bool. Multiply one-hot vectors with the table
        (fast on TPUs) instead of gathering rows.

    Returns:
      (output, table): float32 [batch_size, seq_length, n * embedding_size]
      and the variable [vocab_size, embedding_size].
    """
    if input_ids.shape.ndims == 2:
        input_ids = tf.expand_dims(input_ids, axis=[-1])
    embedding_table = tf.get_variable(
        name=word_embedding_name, shape=[vocab_size, embedding_size],
        initializer=create_initializer(initializer_range))

    flat_ids = tf.reshape(input_ids, [-1])
    if use_one_hot_embeddings:
        rows = tf.matmul(tf.one_hot(flat_ids, depth=vocab_size), embedding_table)
    else:
        # Gather from a plain read of the table, not from the variable: a
        # gather on the variable itself (ResourceGather) switches it to
        # copy-on-read for good, after which every later read, and the
        # optimizer's update too, copies the whole table (89 MiB at
        # BERT-Base size): pre-training's tied output layer would hold such
        # a copy through the backward pass. Same rows, same gradient.
        rows = tf.gather(tf.convert_to_tensor(embedding_table), flat_ids)

    *outer_dims, ids_per_position = get_shape_list(input_ids)
    output = tf.reshape(rows, outer_dims + [ids_per_position * embedding_size])
    return output, embedding_table


def embedding_postprocessor(input_tensor, use_token_type=False, token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02, max_position_embeddings=512,
                            dropout_prob=0.1, fused_ops=None):
    """Adds segment and position embeddings to word embeddings, then applies
    LayerNorm and dropout.

    Args:
      input_tensor: float Tensor [batch_size, seq_length, width].
      use_token_type: bool. Add an embedding of `token_type_ids`.
      token_type_ids: int32 Tensor [batch_size, seq_length]; required when
        `use_token_type`.
      token_type_vocab_size: rows of the segment table.
      token_type_embedding_name: name of the segment table variable.
      use_position_embeddings: bool. Add a learned embedding of each
        position 0, 1, ..., seq_length - 1.
      position_embedding_name: name of the position table variable.
      initializer_range: stddev of the tables' initializer.
      max_position_embeddings: rows of the position table, the longest
        `seq_length` allowed (checked when the graph is built if the length
        is static, when it runs otherwise).
      dropout_prob: dropout rate on the result.
      fused_ops: optional bert_ops.FusedOps for the LayerNorm and dropout.

    Returns:
      float Tensor of the shape of `input_tensor`.

    Raises:
      ValueError: bad rank, missing `token_type_ids`, or a static sequence
        length above `max_position_embeddings`.
    """
    batch_size, seq_length, width = get_shape_list(input_tensor, expected_rank=3)
    output = input_tensor

    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be given when `use_token_type` is True.")
        token_type_table = tf.get_variable(
            name=token_type_embedding_name, shape=[token_type_vocab_size, width],
            initializer=create_initializer(initializer_range))
        # A one-hot matmul rather than a gather: with so few rows it is the
        # faster of the two.
        one_hot_types = tf.one_hot(tf.reshape(token_type_ids, [-1]),
                                   depth=token_type_vocab_size)
        segment_vectors = tf.matmul(one_hot_types, token_type_table)
        output += tf.reshape(segment_vectors, [batch_size, seq_length, width])

    if use_position_embeddings:
        if isinstance(seq_length, int) and seq_length > max_position_embeddings:
            raise ValueError(
                "Sequence length %d is longer than max_position_embeddings=%d of "
                "the BERT config" % (seq_length, max_position_embeddings))
        full_position_embeddings = tf.get_variable(
            name=position_embedding_name, shape=[max_position_embeddings, width],
            initializer=create_initializer(initializer_range))
        length_ok = tf.debugging.assert_less_equal(
            seq_length, max_position_embeddings,
            message="sequence length is longer than max_position_embeddings")
        with tf.control_dependencies([length_ok]):
            # The table covers the longest sequence; this batch uses its
            # first seq_length rows, the same for every example.
            position_vectors = tf.slice(full_position_embeddings, [0, 0], [seq_length, -1])
        leading_ones = [1] * (output.shape.ndims - 2)
        output += tf.reshape(position_vectors, leading_ones + [seq_length, width])

    return layer_norm_and_dropout(output, dropout_prob, fused_ops=fused_ops)


# ---------------------------------------------------------------------------
# Attention and the Transformer.


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """Expands a padding mask to one row per attending position.

    Args:
      from_tensor: Tensor [batch_size, from_seq_length, ...] (rank 2 or 3);
        only its shape is used.
      to_mask: int32 Tensor [batch_size, to_seq_length], 1 for positions
        that may be attended to.

    Returns:
      float32 Tensor [batch_size, from_seq_length, to_seq_length]: row i of
      example b is `to_mask[b]`. Padding positions still attend (their
      outputs are simply ignored downstream); nothing attends to them.
    """
    batch_size, from_seq_length = get_shape_list(from_tensor, expected_rank=[2, 3])[:2]
    to_seq_length = get_shape_list(to_mask, expected_rank=2)[1]
    to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
    # Broadcasting [B, 1, T] against [B, F, 1] repeats the mask F times.
    return tf.ones([batch_size, from_seq_length, 1], dtype=tf.float32) * to_mask


def _attention_bias_from_mask(attention_mask, dtype):
    """Converts a 0/1 mask [batch, from, to] to the bias added to scores.

    Returns:
      Tensor [batch, 1, from, to] of `dtype` (broadcast over heads): 0 where
      attention is allowed and -10000 where it is not, which after softmax
      is as good as removing those positions (Google's constant).
    """
    allowed = tf.cast(tf.expand_dims(attention_mask, axis=[1]), tf.float32)
    return tf.cast((1.0 - allowed) * -10000.0, dtype)


def _split_heads(matrix, batch_size, seq_length, num_heads, head_size):
    """[batch_size * seq_length, num_heads * head_size] ->
    [batch_size, num_heads, seq_length, head_size]."""
    matrix = tf.reshape(matrix, [batch_size, seq_length, num_heads, head_size])
    return tf.transpose(matrix, [0, 2, 1, 3])


def _self_attention(layer_input_2d, attention_bias, num_attention_heads, size_per_head,
                    attention_probs_dropout_prob, initializer_range, batch_size,
                    from_seq_length, to_tensor_2d=None, to_seq_length=None,
                    query_act=None, key_act=None, value_act=None, fused_ops=None):
    """Multi-head scaled dot-product attention on matrices.

    Creates the dense layers `query`, `key` and `value` under the current
    variable scope. Shapes below: B batch, F / T attending / attended
    sequence lengths, N heads, H head size.

    Args:
      layer_input_2d: [B * F, from_width], the attending positions.
      attention_bias: None, or the additive bias [B, 1, F, T] of
        `_attention_bias_from_mask`.
      to_tensor_2d: [B * T, to_width], the attended positions; default
        `layer_input_2d` (self-attention, T = F).
      fused_ops: optional bert_ops.FusedOps for the dropout.

    Returns:
      Tensor [B * F, N * H]: for each position, the heads' value averages
      side by side.
    """
    if to_tensor_2d is None:
        to_tensor_2d, to_seq_length = layer_input_2d, from_seq_length
    init = create_initializer(initializer_range)
    width = num_attention_heads * size_per_head

    query = dense(layer_input_2d, width, query_act, init, name="query")
    key = dense(to_tensor_2d, width, key_act, init, name="key")
    value = dense(to_tensor_2d, width, value_act, init, name="value")

    # Scores are q.k / sqrt(H). Scaling q [B*F, N*H] instead of the scores
    # [B, N, F, T] is the same arithmetic on fewer values, and exact when
    # 1 / sqrt(H) is a power of two (H = 64 in the released models).
    query *= tf.cast(1.0 / math.sqrt(float(size_per_head)), query.dtype)
    query = _split_heads(query, batch_size, from_seq_length, num_attention_heads, size_per_head)
    key = _split_heads(key, batch_size, to_seq_length, num_attention_heads, size_per_head)
    scores = tf.matmul(query, key, transpose_b=True)  # [B, N, F, T]
    if attention_bias is not None:
        scores += attention_bias

    # Softmax in float32 whatever the compute type.
    probs = tf.cast(tf.nn.softmax(_as_float32(scores)), scores.dtype)
    # Dropping whole attended positions, as the Transformer paper does.
    probs = dropout(probs, attention_probs_dropout_prob, fused_ops)

    value = _split_heads(value, batch_size, to_seq_length, num_attention_heads, size_per_head)
    context = tf.matmul(probs, value)  # [B, N, F, H]
    context = tf.transpose(context, [0, 2, 1, 3])
    return tf.reshape(context, [batch_size * from_seq_length, width])


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1,
                    size_per_head=512, query_act=None, key_act=None, value_act=None,
                    attention_probs_dropout_prob=0.0, initializer_range=0.02,
                    do_return_2d_tensor=False, batch_size=None, from_seq_length=None,
                    to_seq_length=None, fused_ops=None):
    """Multi-head attention of `from_tensor` over `to_tensor` ("Attention Is
    All You Need"); self-attention when both are the same tensor.

    Each attending position gets, per head, the average of the attended
    positions' values weighted by softmax(query . key / sqrt(size_per_head)).

    Args:
      from_tensor: float Tensor [batch_size, from_seq_length, from_width], or
        its [batch_size * from_seq_length, from_width] matrix.
      to_tensor: float Tensor [batch_size, to_seq_length, to_width], or its
        matrix; of the rank of `from_tensor`.
      attention_mask: optional int32 Tensor [batch_size, from_seq_length,
        to_seq_length], 1 where attending is allowed, 0 where not.
      num_attention_heads: number of heads N.
      size_per_head: width H of a head's query, key and value.
      query_act, key_act, value_act: optional activations of the three
        projections.
      attention_probs_dropout_prob: dropout rate on the attention weights.
      initializer_range: stddev of the projections' initializer.
      do_return_2d_tensor: bool. Return [batch_size * from_seq_length, N * H]
        instead of [batch_size, from_seq_length, N * H].
      batch_size, from_seq_length, to_seq_length: the 3-D sizes; required
        when the inputs are matrices, ignored otherwise.
      fused_ops: optional bert_ops.FusedOps for the dropout.

    Returns:
      float Tensor [batch_size, from_seq_length, N * H] or its matrix.

    Raises:
      ValueError: ranks differ or are not 2 or 3, or matrices come without
        their sizes.
    """
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
    if len(from_shape) != len(to_shape):
        raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")
    if len(from_shape) == 3:
        batch_size, from_seq_length = from_shape[:2]
        to_seq_length = to_shape[1]
    elif None in (batch_size, from_seq_length, to_seq_length):
        raise ValueError(
            "attention_layer needs `batch_size`, `from_seq_length` and "
            "`to_seq_length` when given rank 2 tensors.")

    attention_bias = None
    if attention_mask is not None:
        attention_bias = _attention_bias_from_mask(attention_mask, from_tensor.dtype)
    context = _self_attention(
        reshape_to_matrix(from_tensor), attention_bias, num_attention_heads, size_per_head,
        attention_probs_dropout_prob, initializer_range, batch_size, from_seq_length,
        to_tensor_2d=reshape_to_matrix(to_tensor), to_seq_length=to_seq_length,
        query_act=query_act, key_act=key_act, value_act=value_act, fused_ops=fused_ops)
    if do_return_2d_tensor:
        return context
    return tf.reshape(context, [batch_size, from_seq_length, num_attention_heads * size_per_head])


def _transformer_layer(layer_input, attention_bias, hidden_size, num_attention_heads,
                       attention_head_size, intermediate_size, intermediate_act_fn,
                       hidden_dropout_prob, attention_probs_dropout_prob,
                       initializer_range, batch_size, seq_length, fused_ops,
                       final_layer_norm=True):
    """One encoder layer on a [batch_size * seq_length, hidden_size] matrix.

    Self-attention, projection, dropout, residual and LayerNorm; then the
    feed-forward block (up to `intermediate_size` with the activation, back
    down), dropout, residual and LayerNorm. Variables, under the current
    scope: attention/self/{query,key,value}, attention/output/{dense,
    LayerNorm}, intermediate/dense and output/{dense,LayerNorm}. GELU,
    LayerNorm and dropout are built as `fused_ops` (a bert_ops.FusedOps) says.
    With `final_layer_norm` False the last LayerNorm is left to the caller
    (`_final_layer_norm`).

    Returns:
      Tensor [batch_size * seq_length, hidden_size]: the layer's output, or
      the input of its last LayerNorm.
    """
    init = create_initializer(initializer_range)
    with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
            context = _self_attention(
                layer_input, attention_bias, num_attention_heads, attention_head_size,
                attention_probs_dropout_prob, initializer_range, batch_size, seq_length,
                fused_ops=fused_ops)
        with tf.variable_scope("output"):
            attended = dropout(dense(context, hidden_size, kernel_initializer=init),
                               hidden_dropout_prob, fused_ops)
            attended = layer_norm(attended + layer_input, fused_ops=fused_ops)

    # With Google's GELU the activation moves into the down-projection
    # (`_gelu_dense`, same values), whose backward pass then keeps only the
    # pre-activation.
    fuse_gelu = intermediate_act_fn is gelu
    with tf.variable_scope("intermediate"):
        expanded = dense(attended, intermediate_size,
                         activation=None if fuse_gelu else intermediate_act_fn,
                         kernel_initializer=init)
    with tf.variable_scope("output"):
        if fuse_gelu:
            projected = _gelu_dense(expanded, hidden_size, kernel_initializer=init,
                                    fused_ops=fused_ops)
        else:
            projected = dense(expanded, hidden_size, kernel_initializer=init)
        summed = dropout(projected, hidden_dropout_prob, fused_ops) + attended
        if not final_layer_norm:
            return summed
        return layer_norm(summed, fused_ops=fused_ops)


def _final_layer_norm(summed, fused_ops):
    """The last LayerNorm of a `_transformer_layer` built with
    `final_layer_norm=False`, under the layer's variable scope: the same
    variables (output/LayerNorm/{beta,gamma}) and values."""
    with tf.variable_scope("output"):
        return layer_norm(summed, fused_ops=fused_ops)


def transformer_model(input_tensor, attention_mask=None, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      initializer_range=0.02, do_return_all_layers=False,
                      recompute_grad=False, fused_ops=None):
    """The Transformer encoder of "Attention Is All You Need"
    (https://arxiv.org/abs/1706.03762): a stack of `_transformer_layer`s,
    under variable scopes layer_0, layer_1, ...

    Args:
      input_tensor: float Tensor [batch_size, seq_length, hidden_size].
      attention_mask: optional int32 Tensor [batch_size, seq_length,
        seq_length], 1 where attending is allowed, 0 where not.
      hidden_size: width of every layer (residual sums need the input's).
      num_hidden_layers: number of layers.
      num_attention_heads: heads per layer; must divide `hidden_size`.
      intermediate_size: width of the feed-forward layer.
      intermediate_act_fn: the feed-forward activation.
      hidden_dropout_prob: dropout rate before each residual sum.
      attention_probs_dropout_prob: dropout rate on the attention weights.
      initializer_range: stddev of the weight initializer.
      do_return_all_layers: bool. Return every layer's output, not just the
        last.
      recompute_grad: bool. Recompute each layer in the backward pass
        instead of keeping its activations (`recompute.recompute_layer`).
      fused_ops: which kernels to build as XLA-compiled loops (see
        `BertModel`).

    Returns:
      float Tensor [batch_size, seq_length, hidden_size], the last layer's
      output, or the list of all layers' outputs, lowest first.

    Raises:
      ValueError: heads do not divide `hidden_size`, or the input's width is
        not `hidden_size`.
    """
    if hidden_size % num_attention_heads != 0:
        raise ValueError(
            "The hidden size (%d) is not a multiple of the number of attention "
            "heads (%d)" % (hidden_size, num_attention_heads))
    head_size = hidden_size // num_attention_heads
    fused_ops = bert_ops.choose_fused_ops(fused_ops)
    input_shape = get_shape_list(input_tensor, expected_rank=3)
    batch_size, seq_length, input_width = input_shape
    if input_width != hidden_size:
        raise ValueError("The width of the input tensor (%d) != hidden size (%d)" %
                         (input_width, hidden_size))

    # One bias for all layers rather than one conversion per layer.
    attention_bias = None
    if attention_mask is not None:
        attention_bias = _attention_bias_from_mask(attention_mask, input_tensor.dtype)

    def layer_fn(layer_input, bias, seed=None):
        """Builds one layer; `seed` (from `recompute_layer`) fixes its
        dropout, and then the last LayerNorm is left to `recompute_layer`
        (its input is kept, which spares recomputing the feed-forward
        output projection)."""
        def build():
            return _transformer_layer(
                layer_input, bias, hidden_size, num_attention_heads, head_size,
                intermediate_size, intermediate_act_fn, hidden_dropout_prob,
                attention_probs_dropout_prob, initializer_range, batch_size, seq_length,
                fused_ops, final_layer_norm=seed is None)
        if seed is None:
            return build()
        with bert_ops.stateless_dropout_seed(seed):
            return build()

    # Layers pass matrices [batch_size * seq_length, hidden_size] to each
    # other: reshapes are free on CPU and GPU but not always on TPU.
    hidden = reshape_to_matrix(input_tensor)
    outputs = []
    for index in range(num_hidden_layers):
        with tf.variable_scope("layer_%d" % index):
            if recompute_grad:
                hidden = recompute.recompute_layer(
                    layer_fn, hidden, attention_bias,
                    output_fn=functools.partial(_final_layer_norm, fused_ops=fused_ops))
            else:
                hidden = layer_fn(hidden, attention_bias)
        outputs.append(hidden)

    if do_return_all_layers:
        return [reshape_from_matrix(output, input_shape) for output in outputs]
    return reshape_from_matrix(hidden, input_shape)


# ---------------------------------------------------------------------------
# Shape helpers.


def get_shape_list(tensor, expected_rank=None, name=None):
    """The dimensions of `tensor`, static ones as ints, others as scalar
    int32 Tensors.

    Args:
      tensor: a Tensor.
      expected_rank: optional int or list of ints; other ranks raise.
      name: optional name for the error message (default: the tensor's).

    Returns:
      A list with one entry per dimension.

    Raises:
      ValueError: the rank is not an expected one.
    """
    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)
    dims = tensor.shape.as_list()
    if None in dims:
        dynamic = tf.shape(tensor)
        dims = [dynamic[i] if dim is None else dim for i, dim in enumerate(dims)]
    return dims


def reshape_to_matrix(input_tensor):
    """[..., width] -> [rows, width]; a matrix is returned as is.

    Raises:
      ValueError: the rank is below 2.
    """
    rank = input_tensor.shape.ndims
    if rank < 2:
        raise ValueError("Input tensor must have at least rank 2. Shape = %s" %
                         (input_tensor.shape))
    if rank == 2:
        return input_tensor
    return tf.reshape(input_tensor, [-1, input_tensor.shape[-1]])


def reshape_from_matrix(output_tensor, orig_shape_list):
    """Inverse of `reshape_to_matrix`: [rows, width] -> the original leading
    dimensions `orig_shape_list[:-1]` followed by the matrix's width."""
    if len(orig_shape_list) == 2:
        return output_tensor
    width = get_shape_list(output_tensor)[-1]
    return tf.reshape(output_tensor, list(orig_shape_list[:-1]) + [width])


def assert_rank(tensor, expected_rank, name=None):
    """Checks the static rank of `tensor`.

    Args:
      tensor: a Tensor.
      expected_rank: int or list of ints.
      name: optional name for the message (default: the tensor's).

    Raises:
      ValueError: naming the tensor and the variable scope, if the rank is
        not an expected one.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")
    allowed = [expected_rank] if isinstance(expected_rank, int) else list(expected_rank)
    actual_rank = tensor.shape.ndims
    if actual_rank not in allowed:
        raise ValueError(
            "For the tensor `%s` in scope `%s`, the actual rank `%d` (shape = %s) is not "
            "equal to the expected rank `%s`"
            % (name, tf.get_variable_scope().name, actual_rank, tensor.shape,
               expected_rank))



# ---------------------------------------------------------------------------
# Checkpoints.


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
    """Matches graph variables with checkpoint variables by name.

    Args:
      tvars: the graph's variables (names such as "bert/pooler/dense/bias:0").
      init_checkpoint: checkpoint path or prefix.

    Returns:
      (assignment_map, initialized_variable_names): an OrderedDict mapping
      each name present in both to itself (the form `tf.train.
      init_from_checkpoint` takes), in checkpoint order, and a dict holding
      those names with and without the ":0" suffix.

    Raises:
      ValueError: a shared name has different shapes in the graph and the
        checkpoint (typically a config or vocabulary mismatch).
    """
    graph_variables = collections.OrderedDict(
        (re.sub(r":\d+$", "", var.name), var) for var in tvars)
    assignment_map = collections.OrderedDict()
    initialized_variable_names = {}
    for name, shape in tf.train.list_variables(init_checkpoint):
        if name not in graph_variables:
            continue
        graph_shape = graph_variables[name].shape.as_list()
        if list(shape) != graph_shape:
            raise ValueError(
                "Variable %s has shape %s in checkpoint %s but %s in the model: "
                "does --bert_config_file (and the vocabulary) match the "
                "checkpoint?" % (name, list(shape), init_checkpoint, graph_shape))
        assignment_map[name] = name
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1
    return assignment_map, initialized_variable_names
