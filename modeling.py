"""The main BERT model and related functions.

A faithful re-implementation of Google's original BERT research code
(``modeling.py``) on ``tensorflow.compat.v1`` core ops only: no ``tf.contrib``,
no ``tf.compat.v1.layers`` and no Keras, so graphs also build on TF 2.16+.
Variable names and shapes are exactly those of Google's released checkpoints.

Beyond the original, ``BertModel`` takes two optional keyword arguments used by
the training scripts' memory and speed options:

* ``compute_type``: ``tf.float32`` (default), ``tf.float16`` or ``tf.bfloat16``.
  Variables stay float32 (checkpoints unchanged); matmuls and activations run in
  the compute type; LayerNorm statistics and softmax are computed in float32;
  every output accessor returns float32.
* ``recompute_grad``: when True, each Transformer layer's activations are
  recomputed in the backward pass instead of being kept (gradient
  checkpointing), trading about one extra forward pass for memory.
"""

import collections
import contextlib
import copy
import json
import math
import re

import numpy as np
import tensorflow.compat.v1 as tf


class BertConfig(object):
    """Configuration for `BertModel`."""

    def __init__(self,
                 vocab_size,
                 hidden_size=768,
                 num_hidden_layers=12,
                 num_attention_heads=12,
                 intermediate_size=3072,
                 hidden_act="gelu",
                 hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1,
                 max_position_embeddings=512,
                 type_vocab_size=16,
                 initializer_range=0.02):
        """Constructs BertConfig.

        Args:
          vocab_size: Vocabulary size of `input_ids` in `BertModel`.
          hidden_size: Size of the encoder layers and the pooler layer.
          num_hidden_layers: Number of hidden layers in the Transformer encoder.
          num_attention_heads: Number of attention heads for each attention
            layer in the Transformer encoder.
          intermediate_size: The size of the "intermediate" (i.e.,
            feed-forward) layer in the Transformer encoder.
          hidden_act: The non-linear activation function (function or string)
            in the encoder and pooler. "gelu" is the tanh approximation used by
            Google's checkpoints; "gelu_exact" is the erf form.
          hidden_dropout_prob: The dropout probability for all fully connected
            layers in the embeddings, encoder, and pooler.
          attention_probs_dropout_prob: The dropout ratio for the attention
            probabilities.
          max_position_embeddings: The maximum sequence length that this model
            might ever be used with.
          type_vocab_size: The vocabulary size of the `token_type_ids`.
          initializer_range: The stdev of the truncated_normal_initializer for
            initializing all weight matrices.
        """
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range

    @classmethod
    def from_dict(cls, json_object):
        """Constructs a `BertConfig` from a Python dictionary of parameters.

        Keys the model does not know (written by other toolkits) are kept as
        attributes, as in the original, and never cause an error.
        """
        config = BertConfig(vocab_size=None)
        for (key, value) in json_object.items():
            config.__dict__[key] = value
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """Constructs a `BertConfig` from a json file of parameters.

        Raises:
          ValueError: naming the file, if it is missing or not a JSON object.
        """
        if not tf.io.gfile.exists(json_file):
            raise ValueError("BERT config file not found: %s" % json_file)
        with tf.io.gfile.GFile(json_file, "r") as reader:
            text = reader.read()
        try:
            json_object = json.loads(text)
        except ValueError as e:
            raise ValueError("BERT config file %s is not valid JSON: %s" % (json_file, e))
        if not isinstance(json_object, dict):
            raise ValueError("BERT config file %s must hold a JSON object" % json_file)
        return cls.from_dict(json_object)

    def to_dict(self):
        """Serializes this instance to a Python dictionary."""
        return copy.deepcopy(self.__dict__)

    def to_json_string(self):
        """Serializes this instance to a JSON string."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel(object):
    """BERT model ("Bidirectional Encoder Representations from Transformers").

    Example usage:

    ```python
    # Already been converted into WordPiece token ids
    input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
    input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
    token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])

    config = modeling.BertConfig(vocab_size=32000, hidden_size=512,
      num_hidden_layers=8, num_attention_heads=6, intermediate_size=1024)

    model = modeling.BertModel(config=config, is_training=True,
      input_ids=input_ids, input_mask=input_mask, token_type_ids=token_type_ids)

    label_embeddings = tf.get_variable(...)
    pooled_output = model.get_pooled_output()
    logits = tf.matmul(pooled_output, label_embeddings)
    ...
    ```
    """

    def __init__(self,
                 config,
                 is_training,
                 input_ids,
                 input_mask=None,
                 token_type_ids=None,
                 use_one_hot_embeddings=False,
                 scope=None,
                 compute_type=tf.float32,
                 recompute_grad=False):
        """Constructor for BertModel.

        Args:
          config: `BertConfig` instance.
          is_training: bool. true for training model, false for eval model.
            Controls whether dropout will be applied.
          input_ids: int32 Tensor of shape [batch_size, seq_length].
          input_mask: (optional) int32 Tensor of shape [batch_size, seq_length].
          token_type_ids: (optional) int32 Tensor of shape [batch_size,
            seq_length].
          use_one_hot_embeddings: (optional) bool. Whether to use one-hot word
            embeddings (faster on TPUs) or tf.gather().
          scope: (optional) variable scope. Defaults to "bert".
          compute_type: (optional) dtype of the matmuls and activations.
          recompute_grad: (optional) bool. Recompute each layer's activations
            in the backward pass instead of storing them.

        Raises:
          ValueError: The config is invalid or one of the input tensor shapes
            is invalid.
        """
        config = copy.deepcopy(config)
        _validate_config(config)
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0

        input_shape = get_shape_list(input_ids, expected_rank=2)
        batch_size = input_shape[0]
        seq_length = input_shape[1]

        if input_mask is None:
            input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)

        if token_type_ids is None:
            token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)

        with tf.variable_scope(scope, default_name="bert"):
            with tf.variable_scope("embeddings"):
                # Perform embedding lookup on the word ids.
                (self.embedding_output, self.embedding_table) = embedding_lookup(
                    input_ids=input_ids,
                    vocab_size=config.vocab_size,
                    embedding_size=config.hidden_size,
                    initializer_range=config.initializer_range,
                    word_embedding_name="word_embeddings",
                    use_one_hot_embeddings=use_one_hot_embeddings)

                # Add positional embeddings and token type embeddings, then
                # layer normalize and perform dropout.
                self.embedding_output = embedding_postprocessor(
                    input_tensor=self.embedding_output,
                    use_token_type=True,
                    token_type_ids=token_type_ids,
                    token_type_vocab_size=config.type_vocab_size,
                    token_type_embedding_name="token_type_embeddings",
                    use_position_embeddings=True,
                    position_embedding_name="position_embeddings",
                    initializer_range=config.initializer_range,
                    max_position_embeddings=config.max_position_embeddings,
                    dropout_prob=config.hidden_dropout_prob)

            with tf.variable_scope("encoder"):
                # This converts a 2D mask of shape [batch_size, seq_length] to
                # a 3D mask of shape [batch_size, seq_length, seq_length] which
                # is used for the attention scores.
                attention_mask = create_attention_mask_from_input_mask(
                    input_ids, input_mask)

                # Run the stacked transformer.
                # `sequence_output` shape = [batch_size, seq_length, hidden_size].
                encoder_input = self.embedding_output
                if compute_type != tf.float32:
                    encoder_input = tf.cast(encoder_input, compute_type)
                all_encoder_layers = transformer_model(
                    input_tensor=encoder_input,
                    attention_mask=attention_mask,
                    hidden_size=config.hidden_size,
                    num_hidden_layers=config.num_hidden_layers,
                    num_attention_heads=config.num_attention_heads,
                    intermediate_size=config.intermediate_size,
                    intermediate_act_fn=get_activation(config.hidden_act),
                    hidden_dropout_prob=config.hidden_dropout_prob,
                    attention_probs_dropout_prob=config.attention_probs_dropout_prob,
                    initializer_range=config.initializer_range,
                    do_return_all_layers=True,
                    recompute_grad=recompute_grad)
                self.all_encoder_layers = [
                    tf.cast(layer, tf.float32) if layer.dtype != tf.float32 else layer
                    for layer in all_encoder_layers
                ]

            self.sequence_output = self.all_encoder_layers[-1]
            # The "pooler" converts the encoded sequence tensor of shape
            # [batch_size, seq_length, hidden_size] to a tensor of shape
            # [batch_size, hidden_size]. This is necessary for segment-pair
            # level classification tasks where we need a fixed dimensional
            # representation of the segment.
            with tf.variable_scope("pooler"):
                # We "pool" the model by simply taking the hidden state
                # corresponding to the first token. We assume that this has
                # been pre-trained.
                first_token_tensor = self.sequence_output[:, 0, :]
                self.pooled_output = dense(
                    first_token_tensor,
                    config.hidden_size,
                    activation=tf.tanh,
                    kernel_initializer=create_initializer(config.initializer_range))

    def get_pooled_output(self):
        """Returns the pooled output, float32 Tensor [batch_size, hidden_size]."""
        return self.pooled_output

    def get_sequence_output(self):
        """Gets final hidden layer of encoder.

        Returns:
          float32 Tensor of shape [batch_size, seq_length, hidden_size]
          corresponding to the final hidden of the transformer encoder.
        """
        return self.sequence_output

    def get_all_encoder_layers(self):
        """Returns a list of `num_hidden_layers` float32 Tensors, each of shape
        [batch_size, seq_length, hidden_size], first layer first."""
        return self.all_encoder_layers

    def get_embedding_output(self):
        """Gets output of the embedding lookup (i.e., input to the transformer).

        Returns:
          float32 Tensor of shape [batch_size, seq_length, hidden_size]
          corresponding to the output of the embedding layer, after summing the
          word embeddings with the positional embeddings and the token type
          embeddings, then performing layer normalization. This is the input
          to the transformer.
        """
        return self.embedding_output

    def get_embedding_table(self):
        """Returns the word embedding table, [vocab_size, hidden_size]."""
        return self.embedding_table


def _validate_config(config):
    """Raises a clear ValueError for configs the model cannot be built from."""
    if config.vocab_size is None or int(config.vocab_size) <= 0:
        raise ValueError("BertConfig.vocab_size must be a positive integer, got %r"
                         % (config.vocab_size,))
    if config.hidden_size % config.num_attention_heads != 0:
        raise ValueError(
            "The hidden size (%d) is not a multiple of the number of attention "
            "heads (%d)" % (config.hidden_size, config.num_attention_heads))


def _gelu_tanh(x):
    """The forward GELU computation (tanh form), shared by `gelu` and the
    fused feed-forward layer so that both give bit-identical values."""
    cdf = 0.5 * (1.0 + tf.tanh(
        (np.sqrt(2 / np.pi) * (x + 0.044715 * (x * x * x)))))
    return x * cdf


def _gelu_tanh_grad(x, dy):
    """dy * d gelu(x) / dx for the tanh form, from `x` alone.

    d/dx [x * 0.5 * (1 + t)] = 0.5 * (1 + t) + 0.5 * x * (1 - t^2) * t'
    with t = tanh(c * (x + 0.044715 x^3)), t' = c * (1 + 3 * 0.044715 x^2).
    """
    c = np.sqrt(2 / np.pi)
    x2 = x * x
    t = tf.tanh(c * (x + 0.044715 * (x2 * x)))
    derivative = 0.5 * (1.0 + t) + (0.5 * x) * ((1.0 - t * t) * (c * (1.0 + 0.134145 * x2)))
    return dy * derivative


def _after(tensor, dependency):
    """`tensor` through an Identity that runs only after `dependency`.

    Recomputations in a backward pass read their inputs through this: the
    distinct input keeps grappler from merging the recomputation with the
    forward computation (which would keep the forward's intermediates
    alive until the backward pass, defeating the purpose), and the control
    dependency keeps the executor from running it early.
    """
    with tf.control_dependencies([dependency]):
        return tf.identity(tensor)


def gelu(x):
    """Gaussian Error Linear Unit, tanh approximation (Google's "gelu").

    This is a smoother version of the RELU.
    Original paper: https://arxiv.org/abs/1606.08415

    The gradient is computed from `x` alone, so the backward pass keeps one
    tensor instead of the four or five intermediates of the formula (the
    feed-forward layer's largest activations).

    Args:
      x: float Tensor to perform activation.

    Returns:
      `x` with the GELU activation applied.
    """
    @tf.custom_gradient
    def _gelu(x):
        def grad(dy):
            return _gelu_tanh_grad(_after(x, dy), dy)
        return _gelu_tanh(x), grad

    return _gelu(tf.convert_to_tensor(x))


def gelu_exact(x):
    """Exact Gaussian Error Linear Unit, x * Phi(x) with the erf form.

    This is what Hugging Face calls "gelu"; Google's "gelu" is `gelu` above.
    """
    return x * (0.5 * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0)))))


def get_activation(activation_string):
    """Maps a string to a Python function, e.g., "relu" => `tf.nn.relu`.

    Args:
      activation_string: String name of the activation function, or a callable
        (returned unchanged).

    Returns:
      A Python function corresponding to the activation function. If
      `activation_string` is None, empty, or "linear", this will return None.
      If `activation_string` is not a string, it will return
      `activation_string`.

    Raises:
      ValueError: The `activation_string` does not correspond to a known
        activation.
    """
    # We assume that anything that's not a string is already an activation
    # function, so we just return it.
    if not isinstance(activation_string, str):
        return activation_string

    if not activation_string:
        return None

    act = activation_string.lower()
    if act == "linear":
        return None
    elif act == "relu":
        return tf.nn.relu
    elif act in ("gelu", "gelu_new"):
        return gelu
    elif act == "gelu_exact":
        return gelu_exact
    elif act == "tanh":
        return tf.tanh
    else:
        raise ValueError("Unsupported activation: %s (known: linear, relu, gelu, "
                         "gelu_new, gelu_exact, tanh)" % act)


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
    """Compute the union of the current variables and checkpoint variables.

    Args:
      tvars: list of variables of the graph.
      init_checkpoint: checkpoint path or prefix.

    Returns:
      (assignment_map, initialized_variable_names): an OrderedDict mapping
      checkpoint names to graph names for every variable present in both, and
      a dict holding those names (with and without ":0").

    Raises:
      ValueError: a variable present in both has different shapes (for
        example a vocabulary or config mismatch); the message names it.
    """
    initialized_variable_names = {}

    name_to_variable = collections.OrderedDict()
    for var in tvars:
        name = var.name
        m = re.match("^(.*):\\d+$", name)
        if m is not None:
            name = m.group(1)
        name_to_variable[name] = var

    init_vars = tf.train.list_variables(init_checkpoint)

    assignment_map = collections.OrderedDict()
    for x in init_vars:
        (name, shape) = (x[0], x[1])
        if name not in name_to_variable:
            continue
        var_shape = name_to_variable[name].shape.as_list()
        if list(shape) != var_shape:
            raise ValueError(
                "Variable %s has shape %s in checkpoint %s but %s in the model: "
                "does --bert_config_file (and the vocabulary) match the "
                "checkpoint?" % (name, list(shape), init_checkpoint, var_shape))
        assignment_map[name] = name
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1

    return (assignment_map, initialized_variable_names)


# Seeds for stateless dropout, innermost last: see `stateless_dropout_seed`.
_DROPOUT_SEEDS = []


@contextlib.contextmanager
def stateless_dropout_seed(seed):
    """Within this context, `dropout` draws its masks from `seed`.

    The k-th `dropout` call inside the context uses the stateless seed
    ``seed + [0, k]``, so building the same layer twice from the same seed
    tensor reproduces the same masks. Recomputation (`recompute.py`) relies
    on this to recompute a layer exactly in the backward pass.

    Args:
      seed: int32 Tensor of shape [2].
    """
    _DROPOUT_SEEDS.append([seed, 0])
    try:
        yield
    finally:
        _DROPOUT_SEEDS.pop()


def dropout(input_tensor, dropout_prob):
    """Perform dropout.

    Args:
      input_tensor: float Tensor.
      dropout_prob: Python float. The probability of dropping out a value (NOT
        of *keeping* a dimension as in `tf.nn.dropout`).

    Returns:
      A version of `input_tensor` with dropout applied.
    """
    if dropout_prob is None or dropout_prob == 0.0:
        return input_tensor

    if _DROPOUT_SEEDS:
        state = _DROPOUT_SEEDS[-1]
        seed = state[0] + tf.constant([0, state[1]], dtype=state[0].dtype)
        state[1] += 1
        keep = tf.random.stateless_uniform(tf.shape(input_tensor), seed=seed) >= dropout_prob
    else:
        # What tf.nn.dropout draws (same op, dtype and comparison).
        keep = tf.random.uniform(tf.shape(input_tensor), dtype=input_tensor.dtype) >= dropout_prob
    return _apply_dropout_mask(input_tensor, keep, 1.0 / (1.0 - dropout_prob))


def _apply_dropout_mask(x, keep, scale):
    """`x * scale` where `keep` is True, 0 elsewhere.

    Unlike tf.nn.dropout, whose gradient keeps a float copy of the mask, the
    backward pass keeps only the boolean mask (a quarter of the memory).

    Args:
      x: float Tensor.
      keep: bool Tensor of the shape of `x`.
      scale: Python float, 1 / (1 - dropout_prob).

    Returns:
      Tensor of the shape and dtype of `x`.
    """
    zero = tf.zeros([], dtype=x.dtype)

    @tf.custom_gradient
    def _dropout(x):
        def grad(dy):
            return tf.compat.v2.where(keep, dy * tf.cast(scale, dy.dtype), zero)
        return tf.compat.v2.where(keep, x * tf.cast(scale, x.dtype), zero), grad

    return _dropout(x)


def layer_norm(input_tensor, name=None):
    """Run layer normalization on the last dimension of the tensor.

    Same variables (`<name>/beta`, `<name>/gamma`, name defaulting to
    "LayerNorm") and numerics (epsilon 1e-12) as
    `tf.contrib.layers.layer_norm(begin_norm_axis=-1, begin_params_axis=-1)`.
    Statistics are computed in float32 whatever the input dtype.

    Args:
      input_tensor: float Tensor [..., width].
      name: variable scope name, default "LayerNorm".

    Returns:
      Tensor of the same shape and dtype as `input_tensor`.
    """
    with tf.variable_scope(name, default_name="LayerNorm"):
        width = input_tensor.shape[-1]
        beta = tf.get_variable("beta", shape=[width], initializer=tf.zeros_initializer())
        gamma = tf.get_variable("gamma", shape=[width], initializer=tf.ones_initializer())
        x = input_tensor
        if x.dtype != tf.float32:
            x = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        # Folding gamma into the inverse standard deviation saves one
        # elementwise pass over the activations.
        scale = tf.math.rsqrt(variance + 1e-12) * gamma
        output = x * scale + (beta - mean * scale)
        if output.dtype != input_tensor.dtype:
            output = tf.cast(output, input_tensor.dtype)
        return output


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
    """Runs layer normalization followed by dropout."""
    output_tensor = layer_norm(input_tensor, name)
    output_tensor = dropout(output_tensor, dropout_prob)
    return output_tensor


def create_initializer(initializer_range=0.02):
    """Creates a `truncated_normal_initializer` with the given range."""
    return tf.truncated_normal_initializer(stddev=initializer_range)


def dense(input_tensor, units, activation=None, kernel_initializer=None, name="dense"):
    """A fully connected layer with the variables of `tf.layers.dense`.

    Creates `<name>/kernel` [in, units] and `<name>/bias` [units] (zeros). The
    kernel is cast to the input's dtype, so float32 master weights serve a
    float16/bfloat16 computation.

    Args:
      input_tensor: float Tensor [rows, in] (rank 2 keeps the matmul direct).
      units: output width.
      activation: optional callable applied to the result.
      kernel_initializer: initializer of the kernel.
      name: variable scope name.

    Returns:
      Tensor [rows, units] of the input's dtype.
    """
    kernel, bias = _dense_variables(input_tensor, units, kernel_initializer, name)
    if input_tensor.shape.ndims == 2:
        output = tf.matmul(input_tensor, kernel)
    else:
        output = tf.tensordot(input_tensor, kernel, [[input_tensor.shape.ndims - 1], [0]])
    output = tf.nn.bias_add(output, bias)
    if activation is not None:
        output = activation(output)
    return output


def _dense_variables(input_tensor, units, kernel_initializer, name):
    """Creates (or reuses) `<name>/kernel` [in, units] and `<name>/bias`
    [units] (zeros), as tf.layers.dense does.

    Returns:
      (kernel, bias) tensors in the input's dtype: float32 master weights
      cast for a float16/bfloat16 computation.
    """
    width = input_tensor.shape[-1]
    with tf.variable_scope(name):
        kernel = tf.get_variable("kernel", shape=[width, units], initializer=kernel_initializer)
        bias = tf.get_variable("bias", shape=[units], initializer=tf.zeros_initializer())
    kernel = tf.convert_to_tensor(kernel)
    bias = tf.convert_to_tensor(bias)
    if input_tensor.dtype != kernel.dtype:
        kernel = tf.cast(kernel, input_tensor.dtype)
        bias = tf.cast(bias, input_tensor.dtype)
    return kernel, bias


def _gelu_dense(pre_activation, units, kernel_initializer=None, name="dense"):
    """`dense(gelu(pre_activation), units)` keeping only `pre_activation`.

    Same variables and the same forward values as `dense` applied to `gelu`
    (the activation is computed by the same ops); the backward pass
    recomputes the activation from `pre_activation` for the kernel gradient
    instead of keeping it, and differentiates it from `pre_activation` too.

    Args:
      pre_activation: float Tensor [rows, in].
      units: output width.
      kernel_initializer: initializer of the kernel.
      name: variable scope name.

    Returns:
      Tensor [rows, units] of the input's dtype.
    """
    kernel, bias = _dense_variables(pre_activation, units, kernel_initializer, name)

    @tf.custom_gradient
    def _fused(x, kernel, bias):
        output = tf.nn.bias_add(tf.matmul(_gelu_tanh(x), kernel), bias)

        def grad(dy):
            x_again = _after(x, dy)
            activation = _gelu_tanh(x_again)
            d_kernel = tf.matmul(activation, dy, transpose_a=True)
            d_bias = tf.raw_ops.BiasAddGrad(out_backprop=dy)
            d_activation = tf.matmul(dy, kernel, transpose_b=True)
            return _gelu_tanh_grad(x_again, d_activation), d_kernel, d_bias

        return output, grad

    return _fused(pre_activation, kernel, bias)


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
    """Looks up words embeddings for id tensor.

    Args:
      input_ids: int32 Tensor of shape [batch_size, seq_length] containing word
        ids.
      vocab_size: int. Size of the embedding vocabulary.
      embedding_size: int. Width of the word embeddings.
      initializer_range: float. Embedding initialization range.
      word_embedding_name: string. Name of the embedding table.
      use_one_hot_embeddings: bool. If True, use one-hot method for word
        embeddings. If False, use `tf.gather()`.

    Returns:
      (output [batch_size, seq_length, embedding_size], table
      [vocab_size, embedding_size]).
    """
    # This function assumes that the input is of shape [batch_size, seq_length,
    # num_inputs].
    #
    # If the input is a 2D tensor of shape [batch_size, seq_length], we
    # reshape to [batch_size, seq_length, 1].
    if input_ids.shape.ndims == 2:
        input_ids = tf.expand_dims(input_ids, axis=[-1])

    embedding_table = tf.get_variable(
        name=word_embedding_name,
        shape=[vocab_size, embedding_size],
        initializer=create_initializer(initializer_range))

    flat_input_ids = tf.reshape(input_ids, [-1])
    if use_one_hot_embeddings:
        one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size)
        output = tf.matmul(one_hot_input_ids, embedding_table)
    else:
        output = tf.gather(embedding_table, flat_input_ids)

    input_shape = get_shape_list(input_ids)

    output = tf.reshape(output, input_shape[0:-1] + [input_shape[-1] * embedding_size])
    return (output, embedding_table)


def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1):
    """Performs various post-processing on a word embedding tensor.

    Args:
      input_tensor: float Tensor of shape [batch_size, seq_length,
        embedding_size].
      use_token_type: bool. Whether to add embeddings for `token_type_ids`.
      token_type_ids: (optional) int32 Tensor of shape [batch_size,
        seq_length]. Must be specified if `use_token_type` is True.
      token_type_vocab_size: int. The vocabulary size of `token_type_ids`.
      token_type_embedding_name: string. The name of the embedding table
        variable for token type ids.
      use_position_embeddings: bool. Whether to add position embeddings for the
        position of each token in the sequence.
      position_embedding_name: string. The name of the embedding table variable
        for positional embeddings.
      initializer_range: float. Range of the weight initialization.
      max_position_embeddings: int. Maximum sequence length that might ever be
        used with this model. This can be longer than the sequence length of
        input_tensor, but cannot be shorter.
      dropout_prob: float. Dropout probability applied to the final output
        tensor.

    Returns:
      float tensor with same shape as `input_tensor`.

    Raises:
      ValueError: One of the tensor shapes or input values is invalid.
    """
    input_shape = get_shape_list(input_tensor, expected_rank=3)
    batch_size = input_shape[0]
    seq_length = input_shape[1]
    width = input_shape[2]

    output = input_tensor

    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be specified if"
                             "`use_token_type` is True.")
        token_type_table = tf.get_variable(
            name=token_type_embedding_name,
            shape=[token_type_vocab_size, width],
            initializer=create_initializer(initializer_range))
        # This vocab will be small so we always do one-hot here, since it is
        # always faster for a small vocabulary.
        flat_token_type_ids = tf.reshape(token_type_ids, [-1])
        one_hot_ids = tf.one_hot(flat_token_type_ids, depth=token_type_vocab_size)
        token_type_embeddings = tf.matmul(one_hot_ids, token_type_table)
        token_type_embeddings = tf.reshape(token_type_embeddings,
                                           [batch_size, seq_length, width])
        output += token_type_embeddings

    if use_position_embeddings:
        if isinstance(seq_length, int) and seq_length > max_position_embeddings:
            raise ValueError(
                "Sequence length %d is longer than max_position_embeddings=%d of "
                "the BERT config" % (seq_length, max_position_embeddings))
        assert_op = tf.debugging.assert_less_equal(
            seq_length, max_position_embeddings,
            message="sequence length is longer than max_position_embeddings")
        with tf.control_dependencies([assert_op]):
            full_position_embeddings = tf.get_variable(
                name=position_embedding_name,
                shape=[max_position_embeddings, width],
                initializer=create_initializer(initializer_range))
            # Since the position embedding table is a learned variable, we
            # create it using a (long) sequence length
            # `max_position_embeddings`. The actual sequence length might be
            # shorter than this, for faster training of tasks that do not have
            # long sequences.
            #
            # So `full_position_embeddings` is effectively an embedding table
            # for position [0, 1, 2, ..., max_position_embeddings-1], and the
            # current sequence has positions [0, 1, 2, ... seq_length-1], so we
            # can just perform a slice.
            position_embeddings = tf.slice(full_position_embeddings, [0, 0],
                                           [seq_length, -1])
            num_dims = len(output.shape.as_list())

            # Only the last two dimensions are relevant (`seq_length` and
            # `width`), so we broadcast among the first dimensions, which is
            # typically just the batch size.
            position_broadcast_shape = []
            for _ in range(num_dims - 2):
                position_broadcast_shape.append(1)
            position_broadcast_shape.extend([seq_length, width])
            position_embeddings = tf.reshape(position_embeddings,
                                             position_broadcast_shape)
            output += position_embeddings

    output = layer_norm_and_dropout(output, dropout_prob)
    return output


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """Create 3D attention mask from a 2D tensor mask.

    Args:
      from_tensor: 2D or 3D Tensor of shape [batch_size, from_seq_length, ...].
      to_mask: int32 Tensor of shape [batch_size, to_seq_length].

    Returns:
      float Tensor of shape [batch_size, from_seq_length, to_seq_length].
    """
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    batch_size = from_shape[0]
    from_seq_length = from_shape[1]

    to_shape = get_shape_list(to_mask, expected_rank=2)
    to_seq_length = to_shape[1]

    to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)

    # We don't assume that `from_tensor` is a mask (although it could be). We
    # don't actually care if we attend *from* padding tokens (only *to* padding)
    # tokens so we create a tensor of all ones.
    #
    # `broadcast_ones` = [batch_size, from_seq_length, 1]
    broadcast_ones = tf.ones(shape=[batch_size, from_seq_length, 1], dtype=tf.float32)

    # Here we broadcast along two dimensions to create the mask.
    mask = broadcast_ones * to_mask

    return mask


def _attention_bias_from_mask(attention_mask, dtype):
    """Turns a [batch, from, to] 0/1 mask into an additive bias.

    Returns:
      Tensor [batch, 1, from, to] of `dtype`: 0 where attention is allowed,
      -10000 where it is masked (the original's constant).
    """
    attention_mask = tf.expand_dims(attention_mask, axis=[1])
    adder = (1.0 - tf.cast(attention_mask, tf.float32)) * -10000.0
    if dtype != tf.float32:
        adder = tf.cast(adder, dtype)
    return adder


def _self_attention(layer_input_2d, attention_bias, num_attention_heads, size_per_head,
                    attention_probs_dropout_prob, initializer_range, batch_size,
                    from_seq_length, to_tensor_2d=None, to_seq_length=None,
                    query_act=None, key_act=None, value_act=None):
    """Multi-headed attention on rank-2 inputs, with a precomputed bias.

    Args:
      layer_input_2d: [batch_size * from_seq_length, from_width].
      attention_bias: None or [batch_size, 1, from_seq_length, to_seq_length]
        additive bias (see `_attention_bias_from_mask`).
      to_tensor_2d: [batch_size * to_seq_length, to_width]; defaults to
        `layer_input_2d` (self-attention).

    Returns:
      Tensor [batch_size * from_seq_length, num_attention_heads * size_per_head].
    """
    if to_tensor_2d is None:
        to_tensor_2d = layer_input_2d
        to_seq_length = from_seq_length
    init = create_initializer(initializer_range)
    width = num_attention_heads * size_per_head

    # `query_layer` = [B*F, N*H]
    query_layer = dense(layer_input_2d, width, activation=query_act, name="query",
                        kernel_initializer=init)
    # `key_layer` = [B*T, N*H]
    key_layer = dense(to_tensor_2d, width, activation=key_act, name="key",
                      kernel_initializer=init)
    # `value_layer` = [B*T, N*H]
    value_layer = dense(to_tensor_2d, width, activation=value_act, name="value",
                        kernel_initializer=init)

    # Scaling the query [B*F, N*H] instead of the scores [B, N, F, T] is the
    # same math on a smaller tensor (and exact when size_per_head is a power
    # of four, as 1/sqrt(64) = 0.125 is a power of two).
    query_layer = query_layer * tf.cast(1.0 / math.sqrt(float(size_per_head)),
                                        query_layer.dtype)

    # [B, N, F, H] and [B, N, T, H]
    query_layer = tf.transpose(
        tf.reshape(query_layer, [batch_size, from_seq_length, num_attention_heads, size_per_head]),
        [0, 2, 1, 3])
    key_layer = tf.transpose(
        tf.reshape(key_layer, [batch_size, to_seq_length, num_attention_heads, size_per_head]),
        [0, 2, 1, 3])

    # Take the dot product between "query" and "key" to get the raw
    # attention scores. `attention_scores` = [B, N, F, T]
    attention_scores = tf.matmul(query_layer, key_layer, transpose_b=True)

    if attention_bias is not None:
        # Since we are adding it to the raw scores before the softmax, this is
        # effectively the same as removing these entirely.
        attention_scores += attention_bias

    # Normalize the attention scores to probabilities (in float32 for
    # reduced-precision compute types). `attention_probs` = [B, N, F, T]
    if attention_scores.dtype != tf.float32:
        attention_probs = tf.cast(tf.nn.softmax(tf.cast(attention_scores, tf.float32)),
                                  attention_scores.dtype)
    else:
        attention_probs = tf.nn.softmax(attention_scores)

    # This is actually dropping out entire tokens to attend to, which might
    # seem a bit unusual, but is taken from the original Transformer paper.
    attention_probs = dropout(attention_probs, attention_probs_dropout_prob)

    # `value_layer` = [B, N, T, H]
    value_layer = tf.transpose(
        tf.reshape(value_layer, [batch_size, to_seq_length, num_attention_heads, size_per_head]),
        [0, 2, 1, 3])

    # `context_layer` = [B, N, F, H] -> [B, F, N, H] -> [B*F, N*H]
    context_layer = tf.matmul(attention_probs, value_layer)
    context_layer = tf.transpose(context_layer, [0, 2, 1, 3])
    return tf.reshape(context_layer, [batch_size * from_seq_length, width])


def attention_layer(from_tensor,
                    to_tensor,
                    attention_mask=None,
                    num_attention_heads=1,
                    size_per_head=512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob=0.0,
                    initializer_range=0.02,
                    do_return_2d_tensor=False,
                    batch_size=None,
                    from_seq_length=None,
                    to_seq_length=None):
    """Performs multi-headed attention from `from_tensor` to `to_tensor`.

    This is an implementation of multi-headed attention based on "Attention
    is all you Need". If `from_tensor` and `to_tensor` are the same, then
    this is self-attention. Each timestep in `from_tensor` attends to the
    corresponding sequence in `to_tensor`, and returns a fixed-width vector.

    Args:
      from_tensor: float Tensor of shape [batch_size, from_seq_length,
        from_width] (or rank 2, with the sizes given).
      to_tensor: float Tensor of shape [batch_size, to_seq_length, to_width].
      attention_mask: (optional) int32 Tensor of shape [batch_size,
        from_seq_length, to_seq_length]. The values should be 1 or 0. The
        attention scores will effectively be set to -infinity for any positions
        in the mask that are 0, and will be unchanged for positions that are 1.
      num_attention_heads: int. Number of attention heads.
      size_per_head: int. Size of each attention head.
      query_act: (optional) Activation function for the query transform.
      key_act: (optional) Activation function for the key transform.
      value_act: (optional) Activation function for the value transform.
      attention_probs_dropout_prob: (optional) float. Dropout probability of
        the attention probabilities.
      initializer_range: float. Range of the weight initializer.
      do_return_2d_tensor: bool. If True, the output will be of shape
        [batch_size * from_seq_length, num_attention_heads * size_per_head].
        If False, the output will be of shape [batch_size, from_seq_length,
        num_attention_heads * size_per_head].
      batch_size: (Optional) int. If the input is 2D, this might be the batch
        size of the 3D version of the `from_tensor` and `to_tensor`.
      from_seq_length: (Optional) If the input is 2D, this might be the seq
        length of the 3D version of the `from_tensor`.
      to_seq_length: (Optional) If the input is 2D, this might be the seq
        length of the 3D version of the `to_tensor`.

    Returns:
      float Tensor of shape [batch_size, from_seq_length,
        num_attention_heads * size_per_head] (or its 2D form).

    Raises:
      ValueError: Any of the arguments or tensor shapes are invalid.
    """
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])

    if len(from_shape) != len(to_shape):
        raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")

    if len(from_shape) == 3:
        batch_size = from_shape[0]
        from_seq_length = from_shape[1]
        to_seq_length = to_shape[1]
    elif len(from_shape) == 2:
        if batch_size is None or from_seq_length is None or to_seq_length is None:
            raise ValueError(
                "When passing in rank 2 tensors to attention_layer, the values "
                "for `batch_size`, `from_seq_length`, and `to_seq_length` "
                "must all be specified.")

    attention_bias = None
    if attention_mask is not None:
        attention_bias = _attention_bias_from_mask(attention_mask, from_tensor.dtype)

    context_layer = _self_attention(
        reshape_to_matrix(from_tensor), attention_bias, num_attention_heads,
        size_per_head, attention_probs_dropout_prob, initializer_range, batch_size,
        from_seq_length, to_tensor_2d=reshape_to_matrix(to_tensor),
        to_seq_length=to_seq_length, query_act=query_act, key_act=key_act,
        value_act=value_act)

    if not do_return_2d_tensor:
        context_layer = tf.reshape(
            context_layer,
            [batch_size, from_seq_length, num_attention_heads * size_per_head])
    return context_layer


def _transformer_layer(layer_input, attention_bias, hidden_size, num_attention_heads,
                       attention_head_size, intermediate_size, intermediate_act_fn,
                       hidden_dropout_prob, attention_probs_dropout_prob,
                       initializer_range, batch_size, seq_length):
    """One Transformer encoder layer on [batch_size * seq_length, hidden_size].

    Creates the variables `attention/self/{query,key,value}`,
    `attention/output/{dense,LayerNorm}`, `intermediate/dense` and
    `output/{dense,LayerNorm}` under the current variable scope.

    Returns:
      Tensor [batch_size * seq_length, hidden_size].
    """
    init = create_initializer(initializer_range)
    with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
            attention_output = _self_attention(
                layer_input, attention_bias, num_attention_heads, attention_head_size,
                attention_probs_dropout_prob, initializer_range, batch_size, seq_length)

        # Run a linear projection of `hidden_size` then add a residual
        # with `layer_input`.
        with tf.variable_scope("output"):
            attention_output = dense(attention_output, hidden_size, kernel_initializer=init)
            attention_output = dropout(attention_output, hidden_dropout_prob)
            attention_output = layer_norm(attention_output + layer_input)

    # The activation is only applied to the "intermediate" hidden layer. With
    # Google's GELU it is fused into the next layer's matmul (same values),
    # so that the backward pass keeps only the [rows, intermediate_size]
    # pre-activation instead of it, the activation and its intermediates.
    fuse_gelu = intermediate_act_fn is gelu
    with tf.variable_scope("intermediate"):
        intermediate_output = dense(attention_output, intermediate_size,
                                    activation=None if fuse_gelu else intermediate_act_fn,
                                    kernel_initializer=init)

    # Down-project back to `hidden_size` then add the residual.
    with tf.variable_scope("output"):
        if fuse_gelu:
            layer_output = _gelu_dense(intermediate_output, hidden_size, kernel_initializer=init)
        else:
            layer_output = dense(intermediate_output, hidden_size, kernel_initializer=init)
        layer_output = dropout(layer_output, hidden_dropout_prob)
        layer_output = layer_norm(layer_output + attention_output)
    return layer_output


def transformer_model(input_tensor,
                      attention_mask=None,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False,
                      recompute_grad=False):
    """Multi-headed, multi-layer Transformer from "Attention is All You Need".

    This is almost an exact implementation of the original Transformer encoder.

    See the original paper:
    https://arxiv.org/abs/1706.03762

    Args:
      input_tensor: float Tensor of shape [batch_size, seq_length, hidden_size].
      attention_mask: (optional) int32 Tensor of shape [batch_size, seq_length,
        seq_length], with 1 for positions that can be attended to and 0 in
        positions that should not be.
      hidden_size: int. Hidden size of the Transformer.
      num_hidden_layers: int. Number of layers (blocks) in the Transformer.
      num_attention_heads: int. Number of attention heads in the Transformer.
      intermediate_size: int. The size of the "intermediate" (a.k.a., feed
        forward) layer.
      intermediate_act_fn: function. The non-linear activation function to apply
        to the output of the intermediate/feed-forward layer.
      hidden_dropout_prob: float. Dropout probability for the hidden layers.
      attention_probs_dropout_prob: float. Dropout probability of the attention
        probabilities.
      initializer_range: float. Range of the initializer (stddev of truncated
        normal).
      do_return_all_layers: Whether to also return all layers or just the final
        layer.
      recompute_grad: bool. Recompute each layer's activations in the backward
        pass (gradient checkpointing) instead of storing them.

    Returns:
      float Tensor of shape [batch_size, seq_length, hidden_size], the final
      hidden layer of the Transformer (or the list of all layers).

    Raises:
      ValueError: A Tensor shape or parameter is invalid.
    """
    if hidden_size % num_attention_heads != 0:
        raise ValueError(
            "The hidden size (%d) is not a multiple of the number of attention "
            "heads (%d)" % (hidden_size, num_attention_heads))

    attention_head_size = int(hidden_size / num_attention_heads)
    input_shape = get_shape_list(input_tensor, expected_rank=3)
    batch_size = input_shape[0]
    seq_length = input_shape[1]
    input_width = input_shape[2]

    # The Transformer performs sum residuals on all layers so the input needs
    # to be the same as the hidden size.
    if input_width != hidden_size:
        raise ValueError("The width of the input tensor (%d) != hidden size (%d)" %
                         (input_width, hidden_size))

    # The mask becomes an additive bias once, not once per layer.
    attention_bias = None
    if attention_mask is not None:
        attention_bias = _attention_bias_from_mask(attention_mask, input_tensor.dtype)

    # We keep the representation as a 2D tensor to avoid re-shaping it back and
    # forth from a 3D tensor to a 2D tensor. Re-shapes are normally free on
    # the GPU/CPU but may not be free on the TPU, so we want to minimize them
    # to help the optimizer.
    prev_output = reshape_to_matrix(input_tensor)

    def layer_fn(layer_input, bias):
        return _transformer_layer(
            layer_input, bias, hidden_size, num_attention_heads, attention_head_size,
            intermediate_size, intermediate_act_fn, hidden_dropout_prob,
            attention_probs_dropout_prob, initializer_range, batch_size, seq_length)

    all_layer_outputs = []
    for layer_idx in range(num_hidden_layers):
        with tf.variable_scope("layer_%d" % layer_idx):
            if recompute_grad:
                import recompute  # Local import: only the memory option needs it.
                layer_output = recompute.recompute_layer(layer_fn, prev_output,
                                                         attention_bias)
            else:
                layer_output = layer_fn(prev_output, attention_bias)
            prev_output = layer_output
            all_layer_outputs.append(layer_output)

    if do_return_all_layers:
        final_outputs = []
        for layer_output in all_layer_outputs:
            final_output = reshape_from_matrix(layer_output, input_shape)
            final_outputs.append(final_output)
        return final_outputs
    else:
        final_output = reshape_from_matrix(prev_output, input_shape)
        return final_output


def get_shape_list(tensor, expected_rank=None, name=None):
    """Returns a list of the shape of tensor, preferring static dimensions.

    Args:
      tensor: A tf.Tensor object to find the shape of.
      expected_rank: (optional) int. The expected rank of `tensor`. If this is
        specified and the `tensor` has a different rank, and exception will be
        thrown.
      name: Optional name of the tensor for the error message.

    Returns:
      A list of dimensions of the shape of tensor. All static dimensions will
      be returned as python integers, and dynamic dimensions will be returned
      as tf.Tensor scalars.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")

    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)

    shape = tensor.shape.as_list()

    non_static_indexes = []
    for (index, dim) in enumerate(shape):
        if dim is None:
            non_static_indexes.append(index)

    if not non_static_indexes:
        return shape

    dyn_shape = tf.shape(tensor)
    for index in non_static_indexes:
        shape[index] = dyn_shape[index]
    return shape


def reshape_to_matrix(input_tensor):
    """Reshapes a >= rank 2 tensor to a rank 2 tensor (i.e., a matrix)."""
    ndims = input_tensor.shape.ndims
    if ndims < 2:
        raise ValueError("Input tensor must have at least rank 2. Shape = %s" %
                         (input_tensor.shape))
    if ndims == 2:
        return input_tensor

    width = input_tensor.shape[-1]
    output_tensor = tf.reshape(input_tensor, [-1, width])
    return output_tensor


def reshape_from_matrix(output_tensor, orig_shape_list):
    """Reshapes a rank 2 tensor back to its original rank >= 2 tensor."""
    if len(orig_shape_list) == 2:
        return output_tensor

    output_shape = get_shape_list(output_tensor)

    orig_dims = orig_shape_list[0:-1]
    width = output_shape[-1]

    return tf.reshape(output_tensor, orig_dims + [width])


def assert_rank(tensor, expected_rank, name=None):
    """Raises an exception if the tensor rank is not of the expected rank.

    Args:
      tensor: A tf.Tensor to check the rank of.
      expected_rank: Python integer or list of integers, expected rank.
      name: Optional name of the tensor for the error message.

    Raises:
      ValueError: If the expected shape doesn't match the actual shape.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")

    expected_rank_dict = {}
    if isinstance(expected_rank, int):
        expected_rank_dict[expected_rank] = True
    else:
        for x in expected_rank:
            expected_rank_dict[x] = True

    actual_rank = tensor.shape.ndims
    if actual_rank not in expected_rank_dict:
        scope_name = tf.get_variable_scope().name
        raise ValueError(
            "For the tensor `%s` in scope `%s`, the actual rank `%d` (shape = %s) is not "
            "equal to the expected rank `%s`" %
            (name, scope_name, actual_rank, str(tensor.shape), str(expected_rank)))
