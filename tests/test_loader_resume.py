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
import random
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import tensorflow as tf

from tfrecord_io.engines.loader import input_fn, make_dataset, steps_per_epoch
from test_tfdata import write_output

# Every test here trains or reads in child processes killed and restarted: tens of seconds each
pytestmark = pytest.mark.slow

CHILD = r'''
import json, os, sys, warnings
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
config = json.loads(sys.argv[1])
if config["mode"] == "worker":
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": config["workers"]},
                                          "task": {"type": "worker", "index": config["index"]}})
import tensorflow as tf
from tfrecord_io.engines.loader import input_fn, make_dataset

def ids(batch):
    return batch[0]["id"].numpy().tolist()

def dump(result):
    with open(config["out"] + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(config["out"] + ".tmp", config["out"])  # a worker killed from outside leaves a whole file

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
    from tfrecord_io import BackupAndRestore
    from tfrecord_io.engines import resume

    ds = make_dataset(config["source"], batch_size=config["batch"], seed=11, features=["id", "x"],
                      prefetch_to_device=False)
    epoch_of = []  # the epoch of each batch trained, as Keras numbers them

    class Kill(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            Kill.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            epoch_of.extend([Kill.epoch] * (len(Recorder.trained) - len(epoch_of)))
            if len(Recorder.trained) == config["kill_after"]:
                dump({"trained": Recorder.trained, "epochs": epoch_of})
                os._exit(17)  # right after BackupAndRestore (before this callback) saved, or not

    if config.get("kill_in_save") is not None:
        # Die inside the n-th save, at its k-th flush (1: the weights written, 2: the state written,
        # 3: renamed into place): a kill at that instant of the real save code.
        save_no, flush_no = config["kill_in_save"]
        real_fsync, calls = resume._fsync, []

        def fsync(path, directory=False):
            calls.append(path)
            if len(calls) == 3 * (save_no - 1) + flush_no:
                dump({"trained": Recorder.trained, "epochs": epoch_of})
                os._exit(19)
            real_fsync(path, directory)

        resume._fsync = fsync
    backup = BackupAndRestore(config["dir"], data=ds, save_freq=config["save_freq"], delete_checkpoint=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model().fit(ds.map(as_xy), epochs=config["epochs"], verbose=0, callbacks=[backup, Kill()])
    dump({"trained": Recorder.trained, "epochs": epoch_of, "warnings": [str(w.message) for w in caught]})
    os._exit(0)

if config["mode"] == "worker":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    fn = input_fn(config["source"], batch_size=config["batch"], features=["id", "x"], seed=5)
    with strategy.scope():
        m = model()
    dist = strategy.distribute_datasets_from_function(lambda ctx: fn(ctx).map(as_xy))
    callbacks, epoch_of = [], []
    if config.get("dir"):
        from tfrecord_io import BackupAndRestore

        class Kill(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                Kill.epoch = epoch

            def on_train_batch_end(self, batch, logs=None):
                epoch_of.extend([Kill.epoch] * (len(Recorder.trained) - len(epoch_of)))
                dump({"batches": Recorder.trained, "epochs": epoch_of})  # the other worker is killed from outside
                if len(Recorder.trained) == config["kill_after"]:
                    os._exit(17)

        callbacks = [BackupAndRestore(config["dir"], data=fn, save_freq=config["save_freq"], delete_checkpoint=False),
                     Kill()]
    m.fit(dist, epochs=config.get("epochs", 1), verbose=0, callbacks=callbacks)
    dump({"batches": Recorder.trained, "epochs": epoch_of})
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


def epochs_of(out: str, batch: int, epochs: int) -> list[list[list[int]]]:
    """The batches of each epoch of an uninterrupted fit (BackupAndRestore starts epoch e at e)."""
    ds = make_dataset(out, batch_size=batch, seed=11, prefetch_to_device=False)
    want = []
    for epoch in range(epochs):
        ds.loader_resume.start_epoch(epoch)
        want.append([b[0]["id"].numpy().tolist() for b in ds])
    return want


def saved_position(backup: Path, per_epoch: int) -> int:
    """Batches since training began at the newest complete state in ``backup`` (0: none)."""
    states = sorted(backup.glob("state-*")) if backup.exists() else []
    if not states:
        return 0
    state = json.loads((states[-1] / "state.json").read_text())
    return state["epoch"] * per_epoch + state["batches_done"]


def fit_with_kills(tmp_path, out: str, kills: list[dict], *, batch: int = 50, epochs: int = 4, save_freq: int = 3,
                   per_epoch: int = 17) -> tuple[list[list[int]], dict]:
    """Fit in a child process, killed as each of ``kills`` says and run again each time, then once
    to the end; the batches whose training the saved states kept, in order, and the last run's result."""
    backup = tmp_path / "backup"
    config = {"mode": "keras", "source": out, "batch": batch, "dir": str(backup), "save_freq": save_freq,
              "epochs": epochs}
    kept, position = [], 0
    for n, kill in enumerate(kills):
        run = run_child(tmp_path, dict(config, **kill), f"killed-{n}", expect=19 if "kill_in_save" in kill else 17)
        now = saved_position(backup, per_epoch)
        assert now >= position, f"run {n}: the backup went back from batch {position} to {now}"
        kept += run["trained"][: now - position]  # this run began at `position`; what the save kept of it
        position = now
    last = run_child(tmp_path, dict(config, kill_after=-1), "restarted")
    return kept + last["trained"], last


def per_epoch_ids(batches: list[list[int]], per_epoch: int) -> list[Counter]:
    return [Counter(i for b in batches[k:k + per_epoch] for i in b) for k in range(0, len(batches), per_epoch)]


@pytest.mark.parametrize("seed", [1])  # (one seed: each is five child fits; the targets below span every epoch)
def test_keras_resume_is_exact_in_every_epoch_after_kills_anywhere(tmp_path, seed):
    """Four epochs of 17 batches, killed at random batches in the first, a middle and the last epoch
    (and once more within an epoch just resumed): what the saves kept plus the last run is exactly
    the uninterrupted fit, batch for batch; the last run trains every later epoch whole, with no
    "ran out of data" warning."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 250), (550, 300)])  # 850 records: 17 batches of 50
    rng = random.Random(seed)
    first = rng.randrange(4, 17)
    targets = [first, first + 2 + rng.randrange(6), 17 * 2 + rng.randrange(17), 51 + rng.randrange(16)]
    # kill_after counts the batches one run trains, and each run starts at the last save (every 3rd batch)
    position, kills = 0, []
    for absolute in targets:
        kills.append({"kill_after": max(1, absolute - position)})
        position = (position + kills[-1]["kill_after"]) // 3 * 3
    want = epochs_of(out, 50, 4)
    got, final = fit_with_kills(tmp_path, out, kills)
    assert got == [b for epoch in want for b in epoch], f"kills {kills}: not the uninterrupted batches"
    assert all(set(c.values()) == {1} and sorted(c) == list(range(850)) for c in per_epoch_ids(got, 17))
    runs = Counter(final["epochs"])
    resumed = min(runs)
    assert all(runs[e] == 17 for e in runs if e > resumed), f"later epochs cut short: {runs}"
    assert not [w for w in final["warnings"] if "ran out of data" in w], final["warnings"]


def test_an_uninterrupted_fit_declares_its_epochs_and_keras_warns_nothing(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 250), (550, 300)])
    got, final = fit_with_kills(tmp_path, out, [], epochs=2)
    assert got == [b for epoch in epochs_of(out, 50, 2) for b in epoch]
    assert Counter(final["epochs"]) == {0: 17, 1: 17}
    assert not [w for w in final["warnings"] if "ran out of data" in w], final["warnings"]


@pytest.mark.parametrize("flush", [1, 2, 3])
def test_a_kill_inside_a_save_resumes_from_the_last_complete_one(tmp_path, flush):
    """Killed inside the 5th save (at batch 15), after the weights are written (1), after the state
    is (2), after the rename (3): the restart resumes from the 4th save (1, 2) or the 5th (3)."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 250), (550, 300)])
    got, final = fit_with_kills(tmp_path, out, [{"kill_after": -1, "kill_in_save": [5, flush]}], epochs=2)
    assert got == [b for epoch in epochs_of(out, 50, 2) for b in epoch]
    resumed_at = 15 if flush == 3 else 12
    assert len(final["trained"]) == 34 - resumed_at
    assert not [w for w in final["warnings"] if "torn" in w or "starts over" in w], final["warnings"]


def test_torn_backup_files_resume_from_the_state_before_or_start_over(tmp_path):
    """Each file of the newest state truncated in turn: the restart passes it over with a warning
    and resumes from the state before; both states torn: one warning, training starts over."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 250), (550, 300)])
    backup = tmp_path / "backup"
    config = {"mode": "keras", "source": out, "batch": 50, "dir": str(backup), "save_freq": 3, "epochs": 1}
    run_child(tmp_path, dict(config, kill_after=10), "killed", expect=17)  # saved at 3, 6, 9: two states kept
    pristine = tmp_path / "pristine"
    shutil.copytree(backup, pristine)
    states = sorted(backup.glob("state-*"))
    assert len(states) == 2
    config.update(save_freq=100, kill_after=-1)
    # each file torn in the newest state; both states torn once (the weights: the file a kill tears)
    for name, torn in (("model.weights.h5", [states[-1]]), ("state.json", [states[-1]]), ("model.weights.h5", states)):
        shutil.rmtree(backup)
        shutil.copytree(pristine, backup)
        for state in torn:
            path = state / name
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        run = run_child(tmp_path, config, f"torn-{name}-{len(torn)}")
        warned = [w for w in run["warnings"] if str(backup) in w]
        if len(torn) == 1:
            assert len(run["trained"]) == 17 - 6, f"{name} torn: not resumed from the save at batch 6"
            assert len(warned) == 1 and "passed over a torn backup" in warned[0] and name in warned[0], warned
        else:
            assert len(run["trained"]) == 17, f"{name} torn in both: not started over"
            assert len(warned) == 1 and "training starts over" in warned[0], warned


def test_a_backup_saved_over_other_data_stops_the_restart_naming_the_change(tmp_path):
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 250), (550, 300)])
    fit_with_kills(tmp_path, out, [{"kill_after": 5}], epochs=1)
    shutil.rmtree(out)
    write_output(out, [(0, 300), (300, 250), (550, 300), (850, 40)])  # another conversion: a shard more
    config = {"mode": "keras", "source": out, "batch": 50, "dir": str(tmp_path / "backup"), "save_freq": 3,
              "epochs": 1, "kill_after": -1}
    with pytest.raises(AssertionError, match="exited 1") as e:
        run_child(tmp_path, config, "changed")
    lines = [line.strip() for line in str(e.value).splitlines() if line.strip().startswith("ValueError")]
    assert len(lines) == 1 and "the data changed since the backup" in lines[0], str(e.value)[-2000:]
    assert "4 file(s) added" in lines[0] and "3 file(s) removed" in lines[0]


def test_an_iterator_restored_over_changed_data_says_what_changed(tmp_path):
    """A bare tf.train.Checkpoint of the iterator, restored after a shard was rewritten, added or
    removed: the restore fails with one line naming it (never other records in silence)."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 300), (300, 250), (550, 300)])
    it = iter(make_dataset(out, batch_size=50, seed=3, prefetch_to_device=False))
    next(it)
    path = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ckpt" / "it"))
    manifest = json.loads((Path(out) / "_manifest.json").read_text())
    shard = Path(out) / manifest["files"][1]["path"]
    for change, expect in [("rewritten", "rewritten: part-00001"), ("removed", "removed"), ("added", "added")]:
        changed = tmp_path / change
        shutil.copytree(out, changed)
        m = json.loads((changed / "_manifest.json").read_text())
        if change == "rewritten":
            m["files"][1]["records"] -= 1
            m["files"][1]["bytes"] -= 10
        elif change == "removed":
            del m["files"][1]
            (changed / shard.name).unlink()
        else:
            m["files"].append(dict(m["files"][1], path="part-extra.tfrecord"))
            shutil.copy(shard, changed / "part-extra.tfrecord")
        (changed / "_manifest.json").write_text(json.dumps(m))
        restored = iter(make_dataset(str(changed), batch_size=50, seed=3, prefetch_to_device=False))
        with pytest.raises(ValueError, match=f"the data changed since this iterator was saved: .*{expect}"):
            tf.train.Checkpoint(iterator=restored).read(path)
    restored = iter(make_dataset(out, batch_size=50, seed=3, prefetch_to_device=False))
    tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
    assert len(list(restored)) == 16


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


def run_workers(tmp_path, config: dict, name: str, kill_after: list[int]) -> list[dict | None]:
    """Two MultiWorkerMirroredStrategy workers; a worker that dies (exit 17 after ``kill_after``
    batches) takes the job down: the other is killed too, as a preempted job's are."""
    workers = [f"localhost:{free_port()}" for _ in range(2)]
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    procs = []
    for k in range(2):
        cfg = dict(config, mode="worker", workers=workers, index=k, kill_after=kill_after[k],
                   out=str(tmp_path / f"{name}-{k}.json"))
        procs.append(subprocess.Popen([sys.executable, str(script), json.dumps(cfg)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 300
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        if any(p.poll() == 17 for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.kill()
        errors = [p.communicate(timeout=240)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    codes = [p.returncode for p in procs]
    expected = [17 if k >= 0 else 0 for k in kill_after]
    assert all(c == e or (e == 0 and 17 in expected) for c, e in zip(codes, expected)), \
        f"{name}: workers exited {codes}:\n" + "\n".join(e[-3000:] for e in errors)
    return [json.loads((tmp_path / f"{name}-{k}.json").read_text()) for k in range(2)]


def test_multi_worker_fit_resumes_exactly_after_a_worker_is_killed(tmp_path):
    """input_fn under two MultiWorkerMirroredStrategy workers, 3 epochs of 24 steps; worker 0 (the
    chief, which alone writes the backup) dies in the middle epoch and the job with it; restarted,
    each worker's kept batches are exactly its batches of an uninterrupted fit, every epoch whole,
    and each epoch trains every record once but the remainder."""
    out = str(tmp_path / "out")
    write_output(out, [(0, 130), (130, 170), (300, 90)])  # 390 records, global batch 16: 24 steps, 6 left over
    steps, epochs = 24, 3
    config = {"source": out, "batch": 16, "dir": str(tmp_path / "backup"), "save_freq": 5, "epochs": epochs}
    killed = run_workers(tmp_path, config, "killed", [steps + 13, -1])
    position = saved_position(tmp_path / "backup", steps)
    # saves every 5 batches, counted across the epoch's end: after batches 5, ..., 20, 25, 30, 35
    assert position == steps + 11, f"the chief's last save was at batch {position}, not {steps + 11}"
    last = run_workers(tmp_path, config, "restarted", [-1, -1])
    fn = input_fn(out, batch_size=16, features=["id", "x"], seed=5)
    for k in range(2):
        ds = fn(tf.distribute.InputContext(2, k, 2))
        want = []
        for epoch in range(epochs):
            ds.loader_resume.start_epoch(epoch)
            want += [b[0]["id"].numpy().tolist() for b in ds]
        got = killed[k]["batches"][:position] + last[k]["batches"]
        assert got == want, f"worker {k}: not the batches of an uninterrupted fit"
        assert Counter(last[k]["epochs"]) == {1: 2 * steps - position, 2: steps}, Counter(last[k]["epochs"])
    for epoch in range(epochs):
        ids = Counter(i for k in range(2) for b in (killed[k]["batches"][:position] + last[k]["batches"])
                      [epoch * steps:(epoch + 1) * steps] for i in b)
        assert set(ids.values()) == {1} and len(ids) == steps * 16, f"epoch {epoch}: a record twice or never"
