"""``--overwrite`` never destroys first (#31 item 2): :mod:`tfrecord_io.storage.replace`.

The previous output stays readable until the new one is committed; a commit that fails at any
step is taken back, leaving the previous output byte for byte as it was; a kill at any instant of
the commit leaves a complete output or a state the next ``--overwrite`` finishes, and that the
refusal without it names; deletion touches only what a conversion wrote and its manifests
confirm, so a manifest that claims a user's directory is refused as tampered.

Real refusals only: files made immutable (``chattr +i``: the kernel refuses even root), a real
second user (a process that drops to ``nobody`` before it touches the output), a real second
identity on a real HDFS (``HADOOP_USER_NAME``) against a sticky directory, real SIGKILLs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from helpers import tfrecord_io_cli
from schemas import ID
from tfrecord_io.commands.reading import resolve_source
from tfrecord_io.commands.verify import verify_source
from tfrecord_io.conversion.splits import Splits
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import fs, output, replace

SCHEMA = Schema.from_yaml(ID)
NOBODY = 65534


def batch(start: int, n: int) -> pa.Array:
    return encode_examples(pa.RecordBatch.from_pydict({"id": list(range(start, start + n))},
                                                      schema=SCHEMA.arrow_schema()), SCHEMA)


def write(out, shards: int, start: int = 0, per_shard: int = 10) -> dict:
    return output.write_output(str(out), [[batch(start + k * per_shard, per_shard)] for k in range(shards)],
                               schema=SCHEMA, engine="test")


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (but _temporary) with its bytes (None: a directory)."""
    found = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != output.TEMPORARY]
        for d in dirs:
            found[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in files:
            p = os.path.join(dirpath, f)
            found[os.path.relpath(p, root)] = Path(p).read_bytes()
    return found


def verified(out) -> bool:
    return verify_source(resolve_source(str(out))).ok


def verified_but_staging(out) -> bool:
    """Verifies, but for the ``_temporary/`` a run left (what verify reports of it, and only that)."""
    result = verify_source(resolve_source(str(out)))
    return [(p.check, p.file) for p in result.problems] == [("manifest", output.TEMPORARY)] and result.records > 0


@pytest.fixture
def immutable():
    """``immutable(path)``: chattr +i, undone at the end (the kernel then refuses rename and unlink)."""
    done = []

    def make(path: Path) -> None:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        done.append(path)

    yield make
    for path in done:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_the_previous_output_stays_readable_until_the_new_one_is_committed(tmp_path):
    out = tmp_path / "out"
    write(out, 3)
    before = tree(out)
    output.prepare_output(str(out), overwrite=True)  # the run starts: nothing of the old output goes
    assert tree(out) == before and verified(out)
    manifest = write(out, 2, start=100)  # the run commits: the old output is replaced, nothing of it left
    assert manifest["totals"]["records"] == 20
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_manifest.json", *(output.shard_name(k, 2)
                                                                                     for k in range(2))]
    assert verified(out)


def test_a_split_output_and_its_indexes_are_replaced_whole(tmp_path):
    out = tmp_path / "out"
    splits = Splits.parse("train=1,eval=1")
    output.prepare_output(str(out), overwrite=False)
    names = [f"{s}/{output.shard_name(0, 1)}" for s in splits.names]
    written = output.write_split_shards([(batch(0, 40), [k % 2 for k in range(40)])], str(out), "a0", names, "none")
    output.commit_splits(str(out), splits, written, [], output.ConversionTotals(40, 40, 0), schema=SCHEMA,
                         compression="none", engine="test")
    assert tfrecord_io_cli("index", str(out / "train"), "--format", "dali").returncode == 0
    output.prepare_output(str(out), overwrite=True)
    write(out, 1)
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_manifest.json", output.shard_name(0, 1)]


def _claim(out: Path, key: str, value) -> None:
    manifest = json.loads((out / output.MANIFEST).read_text())
    manifest[key] = value
    (out / output.MANIFEST).write_text(json.dumps(manifest))


def _resize(out: Path) -> None:
    manifest = json.loads((out / output.MANIFEST).read_text())
    manifest["files"][0]["bytes"] += 1
    (out / output.MANIFEST).write_text(json.dumps(manifest))


TAMPERED = {  # what is done to a committed output -> what the refusal names
    "partitions claims the user's directory": (
        lambda out: _claim(out, "partitions", {"mine": {"records": 0}}), "tampered"),
    "a partition claimed where the user's directory has a file of that name": (
        lambda out: _claim(out, "partitions", {"mine=1": {"records": 0}}), "tampered"),
    "splits claims the user's directory": (lambda out: _claim(out, "splits", {"mine": {"records": 0}}), "tampered"),
    "a split named by a path": (lambda out: _claim(out, "splits", {"../mine": {}}), "tampered"),
    "a shard whose size the manifest does not give": (_resize, "tampered"),
    "a shard name the manifest does not list": (
        lambda out: (out / output.shard_name(7, 8)).write_bytes(b"mine"), "part-00007-of-00008"),
    "a file among the rejects": (
        lambda out: (out / output.REJECTS).mkdir() or (out / output.REJECTS / "notes.txt").write_text("mine"),
        "notes.txt"),
    "a file among the indexes": (
        lambda out: (out / "_index").mkdir() or (out / "_index" / "notes.idx").write_text("mine"), "notes.idx"),
    "a manifest that is not one": (lambda out: (out / output.MANIFEST).write_text("{}"), "not one a conversion"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_manifest_that_claims_what_its_files_do_not_is_refused_and_nothing_is_touched(case, tmp_path):
    out = tmp_path / "out"
    write(out, 2)
    mine = out / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own")
    (out / "mine=1").mkdir()
    (out / "mine=1" / output.MANIFEST).write_text("{}")
    tamper, named = TAMPERED[case]
    tamper(out)
    before = tree(out)
    with pytest.raises(FileExistsError, match=named) as refused:
        output.prepare_output(str(out), overwrite=True)
    assert "--overwrite" in str(refused.value)
    assert tree(out) == before and not (out / output.TEMPORARY).exists()
    with pytest.raises(replace.CommitError, match=named):  # and at the commit, were it reached some other way
        write(out, 1)
    assert tree(out) == before


def test_a_commit_refused_by_the_kernel_is_taken_back_and_the_cli_says_so_in_one_line(tmp_path, immutable):
    csv, schema, out = tmp_path / "in.csv", tmp_path / "s.yaml", tmp_path / "out"
    csv.write_text("id\n" + "".join(f"{i}\n" for i in range(50)))
    schema.write_text(ID)
    args = ["convert", "--engine", "beam", "--engine-arg=--runner=FnApiRunner", "--format", "csv", "--input",
            str(csv), "--schema", str(schema), "--output", str(out), "--num-shards", "3"]
    tfrecord_io_cli(*args)
    (out / output.REJECTS).mkdir()  # an old output with rejects: moved aside as a directory
    immutable(out / output.shard_name(2, 3))  # the last entry the commit would set aside
    before = tree(out)
    proc = tfrecord_io_cli(*args, "--overwrite", "--num-shards", "2", check=False)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tfrecord-io convert: error: output {out}: the commit failed ({out}/part-00002-of-00003")
    assert "Operation not permitted" in last, proc.stderr
    assert "taken back: the previous output is in place, as it was" in last and "Traceback" not in proc.stderr
    assert tree(out) == before and verified(out)  # byte for byte, and it reads
    assert not (out / output.TEMPORARY).exists()  # the failed run's staging went with it


def test_a_previous_output_that_cannot_be_deleted_after_the_commit_is_named_and_the_new_one_stands(
        tmp_path, immutable, caplog):
    out = tmp_path / "out"
    write(out, 2)
    (out / "_index").mkdir()  # an index `tfrecord-io index` wrote: moves aside, but cannot be deleted
    idx = out / "_index" / (output.shard_name(0, 2) + ".idx")
    idx.write_bytes(b"x")
    immutable(idx)
    manifest = write(out, 3, start=50)
    assert manifest["totals"]["records"] == 30 and verified_but_staging(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([output.TEMPORARY, output.SUCCESS, output.MANIFEST,
                                                            *(output.shard_name(k, 3) for k in range(3))])
    assert (out / output.TEMPORARY / replace.PREVIOUS / "_index" / idx.name).exists()
    assert any("committed, but the previous output's files" in r.getMessage() and str(out) in r.getMessage()
               for r in caplog.records)


KILLED_AT_STEP = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    from test_overwrite import batch, SCHEMA
    from tfrecord_io.storage import fs, output

    def commit(out, kill_at, n=40):
        output.prepare_output(out, overwrite=True)
        files = [output.write_shard([batch(5000 + 10 * k, 10)], out, "a", output.shard_name(k, n), "none")
                 for k in range(n)]
        steps = 0

        def step(fn):
            def counted(*args, **kwargs):
                nonlocal steps
                steps += 1
                if steps == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)  # a real kill, at this step of the commit
                return fn(*args, **kwargs)
            return counted

        for name in ("rename", "delete", "makedirs"):
            setattr(fs, name, step(getattr(fs, name)))
        real_open = fs.open
        fs.open = lambda uri, mode="rb": (step(real_open) if mode != "rb" else real_open)(uri, mode)
        output.commit(out, files, [], output.ConversionTotals(10 * n, 10 * n, 0), schema=SCHEMA,
                      compression="none", engine="test")
        return steps

    # One start-up for all the runs: each commit in a child of its own, forked before this process
    # has done anything but import; the child's exit status is the commit's (-9: killed).
    results = []
    for out, kill_at in json.loads(sys.argv[2]):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, str(commit(out, kill_at)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            said = pipe.read()
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        results.append({"returncode": status, "steps": int(said) if said else None})
    print(json.dumps(results), flush=True)
""")


def test_a_kill_at_any_step_of_the_commit_leaves_an_output_or_says_how_to_finish(tmp_path):
    """A real SIGKILL at steps spread over a commit that replaces a 50-shard output with a 40-shard
    one (every phase: setting the old aside, moving the new in, the manifest, _SUCCESS, the
    cleanup): each time the output is the old one or the new one, whole, or the next run without
    --overwrite refuses naming the cut commit; and the next run with it finishes."""
    def run(runs: list[tuple[Path, int]]) -> list[dict]:
        """Each (output, step) in a commit of its own, killed at that step (0: never)."""
        for out, _ in runs:
            write(out, 50, per_shard=5)  # 250 records; the new output has 400
        proc = subprocess.run([sys.executable, "-c", KILLED_AT_STEP, str(Path(__file__).parent),
                               json.dumps([(str(out), kill_at) for out, kill_at in runs])],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.splitlines()[-1])

    [whole] = run([(tmp_path / "whole", 0)])
    assert whole["returncode"] == 0, whole
    total = whole["steps"]  # the steps of an uncut commit: 52 aside + 40 in + 2 files + ...
    assert total > 90, total
    seen = {}
    kill_ats = sorted({1, 2, 3, 27, 52, 53, 54, 75, total - 4, total - 3, total - 2, total - 1, total})
    for kill_at, proc in zip(kill_ats, run([(tmp_path / f"out{k}", k) for k in kill_ats]), strict=True):
        out = tmp_path / f"out{kill_at}"
        assert proc["returncode"] == -signal.SIGKILL, (kill_at, proc)
        if (out / output.SUCCESS).exists():
            records = json.loads((out / output.MANIFEST).read_text())["totals"]["records"]
            result = verify_source(resolve_source(str(out)))
            # the old output, or the new one, whole; at most the staging of the killed run beside it
            assert records in (250, 400) and [p.file for p in result.problems] in ([], [output.TEMPORARY]), \
                (kill_at, records, result.problems)
            seen[kill_at] = "old" if records == 250 else "new"
        else:
            seen[kill_at] = "cut"
            with pytest.raises(FileExistsError, match="cut short") as refused:
                output.prepare_output(str(out), overwrite=False)
            assert "--overwrite" in str(refused.value)
        output.prepare_output(str(out), overwrite=True)
        write(out, 1, start=9000)
        assert verified(out) and sorted(p.name for p in out.iterdir()) == \
            ["_SUCCESS", "_manifest.json", output.shard_name(0, 1)], (kill_at, seen[kill_at])
    assert {"old", "cut", "new"} <= set(seen.values()), seen


AS_NOBODY = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[2])
    from test_overwrite import write
    from tfrecord_io.storage import output
    os.setgid(65534)
    os.setuid(65534)  # a real second user from here on: the kernel checks every step
    try:
        output.prepare_output(sys.argv[1], overwrite=True)
        write(sys.argv[1], 1, start=500)
        print("committed")
    except OSError as e:
        print(type(e).__name__, e)
    except RuntimeError as e:
        print(type(e).__name__, e)
""")


def _as_nobody(out: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", AS_NOBODY, str(out), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture
def shared_dir(tmp_path):
    """A directory another user may write in (tmp_path itself is root's, 0700)."""
    d = Path(subprocess.run(["mktemp", "-d", "/tmp/tfrecord-io-overwrite.XXXXXX"], capture_output=True, text=True,
                            check=True).stdout.strip())
    d.chmod(0o777)
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=False)


def test_a_second_user_who_may_remove_only_part_is_refused_at_the_start_with_nothing_touched(shared_dir):
    if os.geteuid() != 0:
        pytest.fail("this test acts as a second user (setuid to nobody): run the suite as root, as CI does")
    out = shared_dir / "out"
    write(out, 2)
    out.chmod(0o777)
    (out / output.REJECTS).mkdir(mode=0o755)  # root's: the other user may not empty it
    before = tree(out)
    said = _as_nobody(out)
    assert said.startswith("PermissionError") and f"{out / output.REJECTS}" in said and "untouched" in said, said
    assert tree(out) == before and verified(out)
    out.chmod(0o1777)  # a sticky directory: only the owner of an entry may move it
    (out / output.REJECTS).rmdir()
    before = tree(out)
    said = _as_nobody(out)
    assert said.startswith("PermissionError") and "sticky" in said and "untouched" in said, said
    assert tree(out) == before and verified(out)
    out.chmod(0o777)  # and where the user may: replaced
    assert _as_nobody(out) == "committed"
    assert verified(out) and json.loads((out / output.MANIFEST).read_text())["totals"]["records"] == 10


def test_overwrite_on_hdfs_replaces_refuses_tampering_and_takes_back_a_refused_commit(hdfs, monkeypatch):
    """On a real HDFS: a replace; a tampered manifest refused; a second identity whose commit the
    NameNode refuses (a sticky directory: it may not move the owner's files) is taken back."""
    import hdfs_native

    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)  # the superuser
    out = hdfs.uri(f"/overwrite/{os.urandom(4).hex()}/out")
    write(out, 3)
    output.prepare_output(out, overwrite=True)
    assert verify_source(resolve_source(out)).ok and len(output.read_manifest(out)["files"]) == 3  # still the old
    write(out, 2, start=100)
    assert sorted(e.rsplit("/", 1)[1] for e in fs.ls(out)) == ["_SUCCESS", "_manifest.json",
                                                                output.shard_name(0, 2), output.shard_name(1, 2)]
    fs.makedirs(fs.join(out, "mine"))
    with fs.open(fs.join(out, "mine", "notes.txt"), "wb") as f:
        f.write(b"the user's own")
    manifest = output.read_manifest(out)
    manifest["partitions"] = {"mine": {"records": 0}}
    with fs.open(fs.join(out, output.MANIFEST), "wb") as f:
        f.write(json.dumps(manifest).encode())
    with pytest.raises(FileExistsError, match="tampered"):
        output.prepare_output(out, overwrite=True)
    assert fs.exists(fs.join(out, "mine", "notes.txt"))
    fs.delete(fs.join(out, "mine"), recursive=True)
    manifest.pop("partitions")
    with fs.open(fs.join(out, output.MANIFEST), "wb") as f:
        f.write(json.dumps(manifest).encode())
    hdfs_native.Client(hdfs.namenode_uri).set_permission(out.removeprefix(hdfs.namenode_uri), 0o1777)
    before = {e: fs.size(e) for e in fs.ls(out)}
    monkeypatch.setenv("HADOOP_USER_NAME", "someoneelse")  # fs hands out a fresh client
    output.prepare_output(out, overwrite=True)
    with pytest.raises(replace.CommitError, match="taken back: the previous output is in place") as failed:
        write(out, 1, start=500)
    assert "someoneelse" in str(failed.value) or "Permission" in str(failed.value) or "ermission" in str(failed.value)
    output.abort(out)
    monkeypatch.delenv("HADOOP_USER_NAME")
    assert {e: fs.size(e) for e in fs.ls(out)} == before and verify_source(resolve_source(out)).ok
