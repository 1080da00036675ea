"""Dynamic loss scaling for float16 training (``--precision=fp16``).

float16 gradients of small magnitude underflow to zero. The loss is multiplied
by a large scale before differentiation and the gradients divided by it
afterwards; when a step produces non-finite gradients the scale is halved and
the step skipped, and after `increment_period` finite steps in a row it is
doubled. This is the standard algorithm (as in `tf.keras.mixed_precision`),
written on core graph ops so it works inside an Estimator `model_fn`.
bfloat16 has float32's exponent range and needs no loss scaling.
"""

import tensorflow.compat.v1 as tf


class DynamicLossScale(object):
    """Loss scale state kept in two non-trainable variables (checkpointed).

    Args:
      initial_scale: starting loss scale.
      increment_period: finite steps in a row before the scale doubles.
      multiplier: factor of each increase / decrease.
    """

    def __init__(self, initial_scale=2.0 ** 15, increment_period=2000, multiplier=2.0):
        self._increment_period = increment_period
        self._multiplier = multiplier
        with tf.variable_scope("loss_scale", reuse=tf.AUTO_REUSE):
            self._scale = tf.get_variable(
                "scale", shape=[], dtype=tf.float32, trainable=False,
                initializer=tf.constant_initializer(initial_scale),
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self._good_steps = tf.get_variable(
                "good_steps", shape=[], dtype=tf.int64, trainable=False,
                initializer=tf.zeros_initializer(),
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    @property
    def scale(self):
        """float32 scalar tensor: the current loss scale."""
        return tf.identity(self._scale)

    def update(self, all_finite):
        """Op updating the scale after a step.

        Args:
          all_finite: scalar bool tensor, True if every gradient was finite.

        Returns:
          An op: on a finite step counts it and doubles the scale every
          `increment_period` steps; otherwise halves the scale (not below 1)
          and resets the count.
        """
        def on_finite():
            good = self._good_steps + 1
            grow = good >= self._increment_period
            new_scale = tf.where(grow, self._scale * self._multiplier, self._scale)
            new_good = tf.where(grow, tf.zeros_like(good), good)
            return tf.group(self._scale.assign(new_scale), self._good_steps.assign(new_good))

        def on_overflow():
            new_scale = tf.maximum(self._scale / self._multiplier, 1.0)
            return tf.group(self._scale.assign(new_scale),
                            self._good_steps.assign(tf.zeros_like(self._good_steps)))

        return tf.cond(all_finite, on_finite, on_overflow)
