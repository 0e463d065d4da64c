"""The loader's iterators resume after a real kill, in a new process (issue #21 items 1 and 3).

Each test runs the training side in child processes of its own (``CHILD`` below): one saves an
iterator's checkpoint (or Keras' backup) and dies at once with ``os._exit`` -- no clean-up, no
atexit -- and a fresh one restores it and reads on.  What the children saw is compared with the
same pipeline read here without interruption.  The multi-worker test runs two real
``MultiWorkerMirroredStrategy`` workers on localhost (TF_CONFIG), each fitting a small Keras
model for one epoch on uneven shards.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import Counter

import pytest
import tensorflow as tf

from tfrecord_io.engines.tfdata import make_dataset, steps_per_epoch
from test_tfdata import write_output

CHILD = r'''
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
config = json.loads(sys.argv[1])
if config["mode"] == "worker":
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": config["workers"]},
                                          "task": {"type": "worker", "index": config["index"]}})
import tensorflow as tf
from tfrecord_io.engines.tfdata import input_fn, make_dataset

def ids(batch):
    return batch[0]["id"].numpy().tolist()

def dump(result):
    with open(config["out"], "w") as f:
        json.dump(result, f)

if config["mode"] in ("save", "restore"):
    seen = {}
    for k, sc in enumerate(config["scenarios"]):
        it = iter(make_dataset(sc["source"], batch_size=sc["batch"], prefetch_to_device=False, **sc["options"]))
        ckpt = tf.train.Checkpoint(iterator=it)
        if config["mode"] == "save":
            seen[sc["name"]] = [ids(next(it)) for _ in range(sc["before"])]
            ckpt.write(os.path.join(config["dir"], f"ckpt-{k}"))
        else:
            ckpt.read(os.path.join(config["dir"], f"ckpt-{k}")).assert_consumed()
            seen[sc["name"]] = [ids(b) for b in it]
    dump(seen)
    os._exit(0)  # a kill: nothing runs after the checkpoint is written

import keras

class Recorder(keras.Model):
    """Records the ids of every batch it trains on (the first column of x)."""
    trained = []

    def train_step(self, data):
        x, y = data
        tf.py_function(lambda t: Recorder.trained.append([int(v) for v in t.numpy()]) or 0, [x[:, 0]], tf.int64)
        logs = super().train_step((x[:, 1:], y))
        if config["mode"] == "worker":
            # keras-team/keras#20585: under MultiWorkerMirroredStrategy fit reduces each log with
            # strategy.reduce("MEAN", v, axis=0), which needs a dimension to reduce
            logs = {k: tf.reshape(v, [1]) for k, v in logs.items()}
        return logs

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # keras-team/keras#20585: fit reduces a peeked batch with strategy.reduce, which
        # MultiWorkerMirroredStrategy refuses; build from this worker's own batch instead
        if iterator is not None and self.distribute_strategy.num_replicas_in_sync > 1:
            for _, _, it in iterator:
                x, y = tf.nest.map_structure(
                    lambda v: self.distribute_strategy.experimental_local_results(v)[0], next(it))
                data_batch = (x[:, 1:], y)
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

def model():
    x = keras.Input(shape=(1,))
    out = Recorder(x, keras.layers.Dense(1)(x))
    out.compile("sgd", "mse")
    return out

def as_xy(features, label):
    return tf.stack([tf.cast(features["id"], tf.float32), features["x"]], 1), tf.cast(label, tf.float32)

if config["mode"] == "keras":
    from tfrecord_io.engines.resume import BackupAndRestore

    ds = make_dataset(config["source"], batch_size=config["batch"], seed=11, features=["id", "x"],
                      prefetch_to_device=False)

    class Kill(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if len(Recorder.trained) == config["kill_after"]:
                dump(Recorder.trained)
                os._exit(17)  # right after BackupAndRestore (before this callback) saved

    backup = BackupAndRestore(config["dir"], data=ds, save_freq=config["save_freq"])
    model().fit(ds.map(as_xy), epochs=config["epochs"], verbose=0, callbacks=[backup, Kill()])
    dump(Recorder.trained)
    os._exit(0)

if config["mode"] == "worker":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    fn = input_fn(config["source"], batch_size=config["batch"], features=["id", "x"], seed=5)
    with strategy.scope():
        m = model()
    dist = strategy.distribute_datasets_from_function(lambda ctx: fn(ctx).map(as_xy))
    m.fit(dist, epochs=1, verbose=0)
    dump({"batches": Recorder.trained})
    os._exit(0)
'''


def run_child(tmp_path, config: dict, name: str, expect: int = 0) -> object:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    config = dict(config, out=str(tmp_path / f"{name}.json"))
    proc = subprocess.run([sys.executable, str(script), json.dumps(config)], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == expect, f"{name} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads((tmp_path / f"{name}.json").read_text())


def reference(source: str, batch: int, options: dict) -> list[list[int]]:
    return [b[0]["id"].numpy().tolist() for b in make_dataset(source, batch_size=batch, prefetch_to_device=False,
                                                              **options)]


def resume_scenarios(tmp_path, scenarios: list[dict]) -> None:
    """Save each scenario's iterator after ``before`` batches in one process, die, restore in another."""
    config = {"dir": str(tmp_path), "scenarios": scenarios}
    saved = run_child(tmp_path, dict(config, mode="save"), "saved")
    restored = run_child(tmp_path, dict(config, mode="restore"), "restored")
    for sc in scenarios:
        got = saved[sc["name"]] + restored[sc["name"]]
        if sc["options"].get("seed") is not None or sc["options"].get("shuffle") is False:
            assert got == reference(sc["source"], sc["batch"], sc["options"]), f"{sc['name']}: other batches"
        per_epoch = Counter(i for b in got for i in b)
        assert set(per_epoch.values()) == {sc["options"].get("num_epochs", 1)}, f"{sc['name']}: a record twice/never"
        assert sorted(per_epoch) == list(range(sc["records"])), sc["name"]


def test_iterators_resume_in_a_fresh_process_after_a_kill(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 700), (700, 1500), (2200, 300)])
    gz = str(tmp_path / "gz")
    write_output(gz, [(0, 1200), (1200, 800)], "gzip")
    resume_scenarios(tmp_path, [
        {"name": "window shuffle, seed, 2 epochs", "source": out, "batch": 100, "records": 2500, "before": 31,
         "options": {"seed": 3, "num_epochs": 2}},
        {"name": "no seed", "source": out, "batch": 100, "records": 2500, "before": 7, "options": {}},
        {"name": "in order, gzip", "source": gz, "batch": 128, "records": 2000, "before": 9,
         "options": {"shuffle": False}},
        {"name": "global shuffle", "source": out, "batch": 100, "records": 2500, "before": 12,
         "options": {"shuffle": "global", "seed": 8}},
    ])


def test_an_hdfs_iterator_resumes_in_a_fresh_process_after_a_kill(hdfs, tmp_path):
    out = hdfs.uri("/resume/out")
    write_output(out, [(0, 900), (900, 1100), (2000, 500)])
    resume_scenarios(tmp_path, [
        {"name": "hdfs, shard cache", "source": out, "batch": 100, "records": 2500, "before": 14,
         "options": {"seed": 4, "cache_dir": str(tmp_path / "cache")}},
        {"name": "hdfs, global shuffle", "source": out, "batch": 100, "records": 2500, "before": 5,
         "options": {"seed": 4, "shuffle": "global", "cache_dir": str(tmp_path / "staged")}},
    ])


def test_prefetch_to_device_cannot_be_checkpointed(tmp_path):
    """What the docs say: a multi-device prefetch (a GeneratorDataset inside) has no saveable state."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 100)])
    ds = make_dataset(out, batch_size=10, prefetch_to_device=False)
    it = iter(ds.apply(tf.data.experimental.prefetch_to_device("/cpu:0")))
    next(it)
    with pytest.raises(tf.errors.UnimplementedError, match="GeneratorDataset does not support checkpointing"):
        tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ckpt"))


def test_keras_backup_and_restore_resumes_mid_epoch(tmp_path):
    """Killed right after the save at the 4th batch of epoch 1; the restart trains epoch 1's 5th
    batch on, exactly the batches an uninterrupted run trains, each record of the epoch once."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 250), (550, 300)])  # 850 records: 17 batches of 50
    config = {"mode": "keras", "source": out, "batch": 50, "dir": str(tmp_path / "backup"), "save_freq": 3,
              "epochs": 2, "kill_after": 17 + 4}
    first = run_child(tmp_path, config, "killed", expect=17)
    second = run_child(tmp_path, dict(config, kill_after=-1), "restarted")
    assert len(first) == 21 and len(second) == 13
    ds = make_dataset(out, batch_size=50, seed=11, prefetch_to_device=False)
    want = []
    for epoch in range(2):
        ds.loader_resume.start_epoch(epoch)
        want.append([b[0]["id"].numpy().tolist() for b in ds])
    assert first[:17] == want[0] and first[17:] + second == want[1]
    assert sorted(i for b in first[17:] + second for i in b) == list(range(850))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_multi_worker_fit_equal_steps_every_record_once(tmp_path):
    """Two MultiWorkerMirroredStrategy workers, uneven shards (one empty, one smaller than a batch):
    the same steps on both, no hang, and together every record once but the remainder."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 13), (13, 140), (153, 7), (160, 0), (160, 61)])  # 221 records
    workers = [f"localhost:{free_port()}" for _ in range(2)]
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    procs = []
    for k in range(2):
        config = {"mode": "worker", "source": out, "batch": 16, "workers": workers, "index": k,
                  "out": str(tmp_path / f"worker-{k}.json")}
        procs.append(subprocess.Popen([sys.executable, str(script), json.dumps(config)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    try:
        errors = [p.communicate(timeout=240)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(e[-3000:] for e in errors)
    batches = [json.loads((tmp_path / f"worker-{k}.json").read_text())["batches"] for k in range(2)]
    steps = steps_per_epoch(out, 16, tf.distribute.InputContext(2, 0, 2))
    assert steps == 221 // 16 == 13
    assert [len(b) for b in batches] == [steps, steps]
    seen = Counter(i for worker in batches for b in worker for i in b)
    assert set(seen.values()) == {1} and len(seen) == steps * 16 and set(seen) <= set(range(221))
