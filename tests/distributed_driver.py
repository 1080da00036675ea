"""Trains a tiny BERT classifier through training.py's estimator for the
distribution tests (tests/test_distributed.py), then saves its variables.

Usage:
  distributed_driver.py OUT_NPZ MODEL_DIR init
      writes MODEL_DIR/init.ckpt from NumPy random values, so that every run
      starts from identical weights;
  distributed_driver.py OUT_NPZ MODEL_DIR single INIT_CKPT
      one device, global batch 8;
  distributed_driver.py OUT_NPZ MODEL_DIR mirrored INIT_CKPT
      MirroredStrategy over two logical CPU devices in this process;
  distributed_driver.py OUT_NPZ MODEL_DIR mirrored_dynamic INIT_CKPT
      the same, each batch cut to its longest input (dynamic padding);
  distributed_driver.py OUT_NPZ MODEL_DIR worker INDEX PORTS INIT_CKPT
      one of two MultiWorkerMirroredStrategy workers on localhost ports
      PORTS ("p0,p1"), configured through TF_CONFIG.

The training modes take one more, optional argument: the --optimizer
(adamw, the default, or lamb).
"""

import json
import os
import sys

import numpy as np

GLOBAL_BATCH = 8
STEPS = 3


def main():
    out_npz, model_dir, mode = sys.argv[1:4]
    if mode == "worker":
        index, ports = int(sys.argv[4]), sys.argv[5].split(",")
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": ["localhost:%s" % p for p in ports]},
            "task": {"type": "worker", "index": index}})
    import tensorflow as tf2
    if mode.startswith("mirrored"):
        cpu = tf2.config.list_physical_devices("CPU")[0]
        tf2.config.set_logical_device_configuration(
            cpu, [tf2.config.LogicalDeviceConfiguration()] * 2)
    import tensorflow.compat.v1 as tf
    from absl import flags

    from scriptkit import checkpoints
    from scriptkit import input_pipeline
    import modeling
    from scriptkit import runtime
    from scriptkit import shared_flags
    from scriptkit import training
    shared_flags.define_flags(shared_flags.TRAINING_OPTION_FLAGS)
    strategy_name = {"init": "none", "single": "none", "mirrored": "mirrored",
                     "mirrored_dynamic": "mirrored", "worker": "multi_worker_mirrored"}[mode]
    extra = sys.argv[7:] if mode == "worker" else sys.argv[5:]
    optimizer = extra[0] if extra else "adamw"
    flags.FLAGS(["driver", "--distribution_strategy=" + strategy_name,
                 "--optimizer=" + optimizer])
    options = training.training_options(flags.FLAGS)

    config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=32,
                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                 max_position_embeddings=16, type_vocab_size=2)
    rng = np.random.RandomState(0)
    ids = rng.randint(1, 30, (GLOBAL_BATCH * STEPS, 8)).astype(np.int32)
    # Inputs of 2 to 8 positions, zero-padded to 8.
    mask = (np.arange(8)[None, :] < rng.randint(2, 9, (GLOBAL_BATCH * STEPS, 1))).astype(
        np.int32)
    ids *= mask
    label_values = (ids[:, 0] > 15).astype(np.int32)

    def build_loss(input_ids, label, input_mask=None):
        model = modeling.BertModel(config, True, input_ids, input_mask)
        weights = tf.get_variable("output_weights", [2, 16],
                                  initializer=tf.truncated_normal_initializer(stddev=0.02))
        logits = tf.matmul(model.get_pooled_output(), weights, transpose_b=True)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=label, logits=logits))

    init_checkpoint = sys.argv[6] if mode == "worker" else sys.argv[4] if mode != "init" else None
    if mode == "init":
        with tf.Graph().as_default():
            build_loss(tf.constant(ids[:2]), tf.constant(label_values[:2]))
            values = np.random.RandomState(7)
            with tf.Session() as sess:
                for var in tf.global_variables():
                    var.load(values.normal(0, 0.05, var.shape.as_list()).astype(np.float32),
                             sess)
                tf.train.Saver().save(sess, os.path.join(model_dir, "init.ckpt"))
        return

    def model_fn(features, labels, mode, params):  # noqa: ARG001 (names required)
        loss = build_loss(features["input_ids"], features["label"], features["input_mask"])
        checkpoints.init_from_checkpoint(init_checkpoint, False)
        train_op = training.create_train_op(loss, 1e-2, 10, 0, False, options)
        return runtime.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)

    # The data in order, through the scripts' input pipeline.
    records = os.path.join(os.path.dirname(os.path.abspath(out_npz)),
                           os.path.basename(out_npz) + ".tf_record")
    with tf.io.TFRecordWriter(records) as writer:
        for row_ids, row_mask, label in zip(ids, mask, label_values):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "input_ids": input_pipeline.int64_feature(row_ids.tolist()),
                "input_mask": input_pipeline.int64_feature(row_mask.tolist()),
                "segment_ids": input_pipeline.int64_feature([0] * 8),
                "label": input_pipeline.int64_feature([int(label)])})).SerializeToString())
    names = {name: tf.io.FixedLenFeature([8], tf.int64)
             for name in ("input_ids", "input_mask", "segment_ids")}
    names["label"] = tf.io.FixedLenFeature([], tf.int64)
    input_fn = input_pipeline.tfrecord_input_fn(
        records, names, is_training=False, drop_remainder=True,
        length_buckets=(4, 8) if mode == "mirrored_dynamic" else None)

    run_config = training.make_run_config(model_dir, save_checkpoints_steps=STEPS,
                                          options=options)
    estimator = training.make_estimator(model_fn, run_config, False,
                                        train_batch_size=GLOBAL_BATCH)
    if mode in ("mirrored", "worker"):
        # Two replicas in sync, each fed half of the global batch.
        assert estimator._replicas == 2, estimator._replicas
    estimator.train(input_fn, max_steps=STEPS)
    if mode == "worker" and int(sys.argv[4]) != 0:
        return
    checkpoint = tf.train.latest_checkpoint(model_dir)
    reader = tf.train.load_checkpoint(checkpoint)
    values = {name: reader.get_tensor(name)
              for name, _ in tf.train.list_variables(checkpoint)
              if not name.endswith(("adam_m", "adam_v")) and "global_step" not in name}
    values["global_step"] = reader.get_tensor("global_step")
    np.savez(out_npz, **values)


if __name__ == "__main__":
    main()
