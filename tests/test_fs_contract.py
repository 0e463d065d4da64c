"""One contract for ``tfrecord_io.storage.fs``, run on a local dir, ``file://`` URIs and the real HDFS.

Permission failures need a second identity.  On HDFS that is ``HADOOP_USER_NAME=someoneelse``
in a fresh client.  Locally, root ignores mode bits, so when the tests run as root the
"other user" is an effective uid of ``nobody`` (``os.seteuid``, restored afterwards); as an
ordinary user the private dir is made mode 000 instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, ContextManager

import hdfs_native
import pytest

from tfrecord_io.storage import fs

NOBODY = 65534


@dataclasses.dataclass
class Backend:
    name: str
    root: str                                          # an empty, writable dir (path or URI)
    private_and_public: Callable[[], tuple[str, str]]  # (mode 700 dir, mode 777 dir)
    as_other_user: Callable[[], ContextManager]        # a second identity, see module doc
    cleanup: Callable[[], None] = lambda: None


def _local_backend(root: str, to_path: Callable[[str], str]) -> Backend:
    made: list[str] = []

    def private_and_public():
        # Under a fresh world-traversable dir, so `nobody` is stopped by `private` itself.
        base = tempfile.mkdtemp(prefix="tfrecord-io-perm-")
        made.append(base)
        os.chmod(base, 0o755)
        private, public = os.path.join(base, "private"), os.path.join(base, "public")
        os.mkdir(private, 0o700)
        os.mkdir(public)
        os.chmod(public, 0o777)
        with open(os.path.join(private, "secret"), "wb") as f:
            f.write(b"secret")
        prefix = root[: len(root) - len(to_path(root))]  # "" or "file://"
        return prefix + private, prefix + public

    @contextlib.contextmanager
    def as_other_user():
        if os.geteuid() == 0:
            os.seteuid(NOBODY)
            try:
                yield
            finally:
                os.seteuid(0)
        else:
            private = os.path.join(made[-1], "private")
            os.chmod(private, 0o000)
            try:
                yield
            finally:
                os.chmod(private, 0o700)

    def cleanup():
        for d in made:
            shutil.rmtree(d, ignore_errors=True)

    return Backend("local", root, private_and_public, as_other_user, cleanup)


@pytest.fixture(params=["path", "file-uri", pytest.param("hdfs", marks=pytest.mark.hdfs)])
def backend(request, tmp_path, monkeypatch):
    if request.param != "hdfs":
        directory = tmp_path / "root"
        directory.mkdir()
        if request.param == "path":
            b = _local_backend(str(directory), lambda p: p)
        else:
            b = _local_backend(f"file://{directory}", lambda u: u.removeprefix("file://"))
        yield b
        b.cleanup()
        return

    cluster = request.getfixturevalue("hdfs")
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)  # act as the superuser
    root = cluster.uri(f"/contract/{uuid.uuid4().hex}")
    fs.makedirs(root)
    admin = hdfs_native.Client(cluster.namenode_uri)

    def private_and_public():
        private, public = fs.join(root, "private"), fs.join(root, "public")
        fs.makedirs(private)
        fs.makedirs(public)
        with fs.open(fs.join(private, "secret"), "wb") as f:
            f.write(b"secret")
        admin.set_permission(private.removeprefix(cluster.namenode_uri), 0o700)
        admin.set_permission(public.removeprefix(cluster.namenode_uri), 0o777)
        return private, public

    @contextlib.contextmanager
    def as_other_user():
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HADOOP_USER_NAME", "someoneelse")  # fs hands out a fresh client
            yield

    yield Backend("hdfs", root, private_and_public, as_other_user)
    fs.delete(root, recursive=True)


def _write(uri: str, data: bytes) -> None:
    with fs.open(uri, "wb") as f:
        f.write(data)


def _read(uri: str) -> bytes:
    with fs.open(uri) as f:
        return f.read()


class TestFileSystemContract:
    def test_write_read_round_trip(self, backend):
        uri = fs.join(backend.root, "hello.txt")
        _write(uri, b"hello, world\n")
        assert _read(uri) == b"hello, world\n"
        assert fs.size(uri) == 13

    def test_multi_mb_file_streams_in_chunks(self, backend):
        uri = fs.join(backend.root, "big.bin")
        data = os.urandom(5 * 1024 * 1024 + 4321)  # > the read buffer, several HDFS blocks
        with fs.open(uri, "wb") as f:
            for i in range(0, len(data), 777_777):  # odd-sized writes
                f.write(data[i:i + 777_777])
        assert fs.size(uri) == len(data)
        with fs.open(uri) as f:
            head = f.read(10)
            assert head == data[:10] and f.tell() == 10
            assert f.raw.tell() < len(data)  # only a buffer's worth fetched, not the file
            chunks = [head]
            while chunk := f.read(64 * 1024):
                assert len(chunk) <= 64 * 1024
                chunks.append(chunk)
        assert b"".join(chunks) == data
        with fs.open(uri) as f:
            f.seek(len(data) - 5)
            assert f.read() == data[-5:]

    def test_reads_after_seeks_anywhere_give_the_bytes_there(self, backend):
        """A streamed read (hdfs://) ends at a seek and starts again where the next read is;
        readinto fills across packets; every byte is the file's."""
        uri = fs.join(backend.root, "seeks.bin")
        data = os.urandom(3 * 1024 * 1024 + 17)
        _write(uri, data)
        with fs.open(uri) as f:
            assert f.read(100) == data[:100]
            f.seek(2_000_000)
            assert f.read(5000) == data[2_000_000:2_005_000]
            f.seek(50)
            assert f.read(10) == data[50:60] and f.tell() == 60
            f.seek(-7, os.SEEK_END)
            assert f.read() == data[-7:] and f.read(1) == b""
            raw = f.raw
            raw.seek(1234)
            buf = bytearray(1536 * 1024)
            got = bytearray()
            while n := raw.readinto(buf):
                got += buf[:n]
            assert bytes(got) == data[1234:]

    def test_wb_creates_parents_and_truncates_xb_refuses(self, backend):
        uri = fs.join(backend.root, "a", "b", "c.bin")
        _write(uri, b"long contents")
        assert fs.isdir(fs.join(backend.root, "a", "b"))
        _write(uri, b"short")
        assert _read(uri) == b"short"
        with pytest.raises(FileExistsError):
            fs.open(uri, "xb")
        with fs.open(fs.join(backend.root, "new.bin"), "xb") as f:
            f.write(b"x")
        assert _read(fs.join(backend.root, "new.bin")) == b"x"
        with pytest.raises(ValueError):
            fs.open(uri, "r")

    def test_exists_isdir_size(self, backend):
        file_uri, dir_uri = fs.join(backend.root, "f"), fs.join(backend.root, "d")
        _write(file_uri, b"1234")
        fs.makedirs(dir_uri)
        assert fs.exists(file_uri) and fs.exists(dir_uri)
        assert not fs.isdir(file_uri) and fs.isdir(dir_uri)
        missing = fs.join(backend.root, "missing")
        assert not fs.exists(missing) and not fs.isdir(missing)
        assert not fs.exists(fs.join(file_uri, "below-a-file"))
        assert fs.size(file_uri) == 4
        with pytest.raises(IsADirectoryError):
            fs.size(dir_uri)

    def test_ls_is_sorted_full_uris(self, backend):
        for name in ("b", "a", "_SUCCESS", ".hidden"):
            _write(fs.join(backend.root, name), b"")
        fs.makedirs(fs.join(backend.root, "c"))
        assert fs.ls(backend.root) == sorted(fs.join(backend.root, n)
                                             for n in (".hidden", "_SUCCESS", "a", "b", "c"))
        assert fs.ls(fs.join(backend.root, "c")) == []
        with pytest.raises(NotADirectoryError):
            fs.ls(fs.join(backend.root, "a"))
        with pytest.raises(FileNotFoundError):
            fs.ls(fs.join(backend.root, "missing"))

    def test_glob(self, backend):
        r = backend.root
        names = ["part-00000.tfrecord", "part-00001.tfrecord", "part-00010.tfrecord", "_SUCCESS",
                 ".part-00000.crc", "x1/data/f.json", "x2/data/f.json", "y1/data/f.json",
                 "x3/other/f.json"]
        for name in names:
            _write(fs.join(r, name), b"")
        expect = lambda *ns: sorted(fs.join(r, n) for n in ns)  # noqa: E731
        assert fs.glob(fs.join(r, "part-*.tfrecord")) == expect(*names[:3])
        assert fs.glob(fs.join(r, "part-0000?.tfrecord")) == expect(*names[:2])
        assert fs.glob(fs.join(r, "part-000[01]0.tfrecord")) == expect(names[0], names[2])
        assert fs.glob(fs.join(r, "part-0000[!0].tfrecord")) == expect(names[1])
        assert fs.glob(fs.join(r, "x*/data/*.json")) == expect(names[5], names[6])
        assert fs.glob(fs.join(r, "?1/*/f.json")) == expect(names[5], names[7])
        assert fs.glob(fs.join(r, "*", "data")) == expect("x1/data", "x2/data", "y1/data")
        assert fs.glob(fs.join(r, ".*")) == expect(".part-00000.crc")
        assert fs.glob(fs.join(r, "_SUCCESS")) == expect("_SUCCESS")  # no wildcard
        assert fs.glob(fs.join(r, "nothing-*")) == []
        assert fs.glob(fs.join(r, "missing", "*")) == []
        assert fs.glob(fs.join(r, "_SUCCESS", "*")) == []  # below a file

    def test_rename(self, backend):
        src, dst = fs.join(backend.root, "src.bin"), fs.join(backend.root, "dst.bin")
        _write(src, b"payload")
        fs.rename(src, dst)
        assert not fs.exists(src) and _read(dst) == b"payload"

        fs.makedirs(fs.join(backend.root, "dir", "inner"))
        fs.rename(fs.join(backend.root, "dir"), fs.join(backend.root, "moved"))
        assert fs.isdir(fs.join(backend.root, "moved", "inner"))

        _write(src, b"new")
        with pytest.raises(FileExistsError) as e:  # onto an existing file: never replaced
            fs.rename(src, dst)
        assert dst in str(e.value)
        assert _read(dst) == b"payload" and _read(src) == b"new"
        with pytest.raises(FileExistsError):  # onto an existing directory
            fs.rename(src, fs.join(backend.root, "moved"))
        with pytest.raises(FileNotFoundError):
            fs.rename(fs.join(backend.root, "missing"), fs.join(backend.root, "x"))

    def test_delete(self, backend):
        f = fs.join(backend.root, "f")
        _write(f, b"x")
        fs.delete(f)
        assert not fs.exists(f)
        empty = fs.join(backend.root, "empty")
        fs.makedirs(empty)
        fs.delete(empty)
        assert not fs.exists(empty)
        full = fs.join(backend.root, "full")
        _write(fs.join(full, "sub", "g"), b"x")
        with pytest.raises(OSError) as e:
            fs.delete(full)
        assert e.value.errno == errno.ENOTEMPTY and full in str(e.value)
        assert fs.exists(fs.join(full, "sub", "g"))
        fs.delete(full, recursive=True)
        assert not fs.exists(full)
        with pytest.raises(FileNotFoundError):
            fs.delete(fs.join(backend.root, "missing"))

    def test_makedirs(self, backend):
        d = fs.join(backend.root, "x", "y", "z")
        fs.makedirs(d)
        fs.makedirs(d)  # exist_ok by default
        assert fs.isdir(d)
        with pytest.raises(FileExistsError):
            fs.makedirs(d, exist_ok=False)
        f = fs.join(backend.root, "file")
        _write(f, b"")
        with pytest.raises(FileExistsError):
            fs.makedirs(f)
        with pytest.raises(NotADirectoryError):  # a file on the way (a typo in a path) is named as such
            fs.makedirs(fs.join(f, "sub", "dir"))

    def test_permission_and_chmod(self, backend):
        f, d = fs.join(backend.root, "perm", "f.txt"), fs.join(backend.root, "perm")
        _write(f, b"x")
        for mode in (0o640, 0o600, 0o644):
            fs.chmod(f, mode)
            assert fs.permission(f) == mode
        fs.chmod(d, 0o750)
        assert fs.permission(d) == 0o750
        missing = fs.join(backend.root, "perm", "missing")
        for op in (lambda: fs.permission(missing), lambda: fs.chmod(missing, 0o600)):
            with pytest.raises(FileNotFoundError, match="missing"):
                op()

    def test_missing_and_wrong_kind_errors_name_the_uri(self, backend):
        missing = fs.join(backend.root, "nope", "missing.bin")
        for call in (lambda: fs.open(missing), lambda: fs.size(missing)):
            with pytest.raises(FileNotFoundError) as e:
                call()
            assert missing in str(e.value) and e.value.__cause__ is not None
        d = fs.join(backend.root, "adir")
        fs.makedirs(d)
        for mode in ("rb", "wb"):
            with pytest.raises(IsADirectoryError) as e:
                fs.open(d, mode)
            assert d in str(e.value)

    def test_get_file_copies_whole_files_and_leaves_nothing_on_failure(self, backend, tmp_path):
        uri = fs.join(backend.root, "big.bin")
        data = os.urandom(3 * 1024 * 1024 + 4321)  # several HDFS blocks
        _write(uri, data)
        local = str(tmp_path / "copy.bin")
        with open(local, "wb") as f:
            f.write(b"old contents that must go")
        assert fs.get_file(uri, local) == len(data)
        with open(local, "rb") as f:
            assert f.read() == data
        empty = fs.join(backend.root, "empty.bin")
        _write(empty, b"")
        assert fs.get_file(empty, local) == 0 and os.path.getsize(local) == 0

        # A source that cannot be opened leaves the local file as it was...
        for error, source in ((FileNotFoundError, fs.join(backend.root, "missing.bin")),
                              (IsADirectoryError, backend.root)):
            with pytest.raises(error) as e:
                fs.get_file(source, local)
            assert source in str(e.value) and os.path.getsize(local) == 0, error
        # ...a copy stopped half-way leaves none.
        with pytest.raises(InterruptedError) as e:
            fs.get_file(uri, local, cancelled=lambda: True)
        assert uri in str(e.value) and not os.path.exists(local), "a partial copy was left"
        with pytest.raises(FileNotFoundError) as e:  # the local side's errors name the local path
            fs.get_file(uri, str(tmp_path / "no" / "such" / "dir" / "copy.bin"))
        assert str(tmp_path / "no") in str(e.value)

    def test_permission_denied(self, backend):
        private, public = backend.private_and_public()
        secret = fs.join(private, "secret")
        with backend.as_other_user():
            assert fs.ls(public) == []  # the other identity works in general...
            _write(fs.join(public, "mine"), b"ok")
            calls = {  # ...but not inside the private dir
                "open": lambda: fs.open(secret),
                "write": lambda: fs.open(fs.join(private, "new"), "wb"),
                "ls": lambda: fs.ls(private),
                "exists": lambda: fs.exists(secret),
                "delete": lambda: fs.delete(secret),
            }
            for what, call in calls.items():
                with pytest.raises(PermissionError) as e:
                    call()
                assert private in str(e.value), what
        assert _read(secret) == b"secret"

    def test_join(self, backend):
        assert fs.join(backend.root, "a", "b/", "/c") == backend.root + "/a/b/c"
        assert fs.join(backend.root + "/", "a") == backend.root + "/a"


# ----------------------------------------------------------------------------- HDFS specifics


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_namenode_fails_within_the_bound(record_property):
    uri = f"hdfs://127.0.0.1:{_closed_port()}/data"
    for call in (lambda: fs.exists(uri), lambda: fs.ls(uri), lambda: fs.open(uri)):
        started = time.monotonic()
        with pytest.raises(fs.NameNodeUnreachableError) as e:
            call()
        elapsed = time.monotonic() - started
        record_property("unreachable_seconds", round(elapsed, 2))
        assert isinstance(e.value, ConnectionError) and isinstance(e.value, TimeoutError)
        assert uri in str(e.value)
        assert elapsed < fs.hdfs_timeout(), f"took {elapsed:.1f}s"


def test_silent_namenode_times_out(monkeypatch, record_property):
    """A NameNode that accepts connections but never answers: bounded by the timeout."""
    monkeypatch.setenv("TFRECORD_IO_HDFS_TIMEOUT", "2")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"hdfs://127.0.0.1:{silent.getsockname()[1]}/data"
        started = time.monotonic()
        with pytest.raises(TimeoutError) as e:
            fs.exists(uri)
        elapsed = time.monotonic() - started
    record_property("silent_seconds", round(elapsed, 2))
    assert uri in str(e.value) and "TFRECORD_IO_HDFS_TIMEOUT" in str(e.value)
    assert 1.9 < elapsed < 4, f"took {elapsed:.1f}s"


def test_get_file_gives_up_on_a_datanode_that_stops_sending(hdfs, tmp_path, monkeypatch,
                                                            record_property):
    """A real stall: the cluster's JVM is stopped (SIGSTOP) once the copy is under way."""
    monkeypatch.setenv("TFRECORD_IO_HDFS_TIMEOUT", "2")
    uri = hdfs.uri(f"/stall/{uuid.uuid4().hex}.bin")
    data = os.urandom(48 * 1024 * 1024)  # 48 blocks: far more than the socket buffers hold
    _write(uri, data)
    local = str(tmp_path / "copy.bin")
    stopped = []

    def stop_the_cluster_mid_copy():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.path.exists(local) and os.path.getsize(local) >= 1024 * 1024:
                os.kill(hdfs.pid, signal.SIGSTOP)
                stopped.append(os.path.getsize(local))
                return
            time.sleep(0.0005)

    watcher = threading.Thread(target=stop_the_cluster_mid_copy, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError) as e:
            fs.get_file(uri, local)
        elapsed = time.monotonic() - started
    finally:
        watcher.join(35)
        os.kill(hdfs.pid, signal.SIGCONT)
    record_property("stall_seconds", round(elapsed, 2))
    assert stopped and stopped[0] < len(data), "the copy finished before the cluster was stopped"
    assert uri in str(e.value) and "TFRECORD_IO_HDFS_TIMEOUT" in str(e.value)
    assert elapsed < 2 + 3, f"took {elapsed:.1f}s"
    assert not os.path.exists(local)
    # The cluster is back, and a fresh copy works.
    assert fs.get_file(uri, local) == len(data)


def test_a_datanode_that_dies_mid_read_is_a_connection_error_naming_the_uri(tmp_path, monkeypatch, own_hdfs):
    """Its own cluster, killed (SIGKILL) after the reader has its block locations."""
    from tfrecord_io.clusters import hdfs_local

    cluster = hdfs_local.start(tmp_path / "doomed", detach=False)
    try:
        uri = cluster.uri("/doomed.bin")
        _write(uri, os.urandom(8 * 1024 * 1024))  # 8 blocks, with the default timeout (a loaded
        # NameNode may answer a block request slowly: NotReplicatedYet, which is not under test)
        monkeypatch.setenv("TFRECORD_IO_HDFS_TIMEOUT", "5")  # a fresh client for the read
        with fs.open(uri) as f:
            assert len(f.read(1024 * 1024)) == 1024 * 1024
            os.kill(cluster.pid, signal.SIGKILL)
            started = time.monotonic()
            with pytest.raises(ConnectionError) as e:
                while f.read(1024 * 1024):
                    pass
            elapsed = time.monotonic() - started
    finally:
        cluster.stop()
    message = str(e.value)
    assert uri in message and "DatanodeInfoProto" not in message, message
    assert elapsed < 5 + 10, f"took {elapsed:.1f}s: the 5 s bound did not hold"  # (slack for a loaded machine)


def test_hdfs_uri_without_authority_uses_hadoop_conf_dir(hdfs, monkeypatch):
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    name = f"/noauth-{uuid.uuid4().hex}.txt"
    _write(hdfs.uri(name), b"via fs.defaultFS")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hdfs.conf_dir))
    assert _read(f"hdfs://{name}") == b"via fs.defaultFS"
    assert f"hdfs://{name}" in fs.glob("hdfs:///noauth-*.txt")
    monkeypatch.delenv("HADOOP_CONF_DIR")
    with pytest.raises(ValueError, match="HADOOP_CONF_DIR"):
        fs.exists(f"hdfs://{name}")


_CHILD = """
import pickle, sys
from tfrecord_io.storage import fs
filesystem, uri = pickle.load(sys.stdin.buffer)
with filesystem.open(uri) as f:
    sys.stdout.write(f.read().decode())
"""


def test_hdfs_filesystem_pickles_into_a_new_process_and_survives_fork(hdfs, monkeypatch):
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    uri = hdfs.uri(f"/pickled-{uuid.uuid4().hex}.txt")
    _write(uri, b"from the parent")
    filesystem = fs.filesystem_for(uri)
    assert filesystem.exists(uri)  # the parent has a live client before the child starts

    child = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps((filesystem, uri)),
                           capture_output=True, timeout=120)
    assert child.returncode == 0, child.stderr.decode()
    assert child.stdout == b"from the parent"

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # like a forked Spark/Beam worker: must not reuse the parent's client
        try:
            os.write(write_fd, _read(uri))
        except BaseException as e:  # noqa: BLE001 - reported through the pipe
            os.write(write_fd, f"child failed: {e!r}".encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_fd, "rb") as r:
        assert (r.read(), status) == (b"from the parent", 0)
