"""Small files read in packs (the loader's "Small files"): many whole small files through one
TensorFlow reader, checked before and after as a whole, with the same guarantees as a file read
on its own -- every record exactly once, every epoch, and a bad file named with its offset.

The pack path is asserted to have run (``_RangeGuard.pack`` is wrapped to count its calls, the
real function still doing the work), so a change that stops packing cannot pass unseen.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from test_tfdata import (SCHEMA, _huge_length, assert_all_once, corrupt_record, records, record_offsets, unbatch,
                         write_output, write_tf)
from tfrecord_io.core.framing import CorruptRecordError
from tfrecord_io.engines.loader import LoaderStats, make_dataset
from tfrecord_io.engines.loader.checks import _RangeGuard
from tfrecord_io.engines.loader.files import _FileTable
from tfrecord_io.engines.loader.options import PACK_BYTES, PACK_FILE_BYTES, PACK_FILES
from tfrecord_io.engines.loader.plan import _EpochPlan
from tfrecord_io.storage.sources import SourceFile

FILES, PER_FILE = 40, 25


@pytest.fixture
def packs(monkeypatch) -> list[int]:
    """The number of files of each pack the guard checks, as the loader reads."""
    seen: list[int] = []
    real = _RangeGuard.pack

    def counting(self, paths_b, files):
        seen.append(len(files))
        return real(self, paths_b, files)

    monkeypatch.setattr(_RangeGuard, "pack", counting)
    return seen


# -- the plan (no TensorFlow) -----------------------------------------------------------------------
def _table(compressions: list[str]) -> _FileTable:
    return _FileTable([SourceFile(uri=f"/d/f{k}", name=f"f{k}", compression=c, records=10)
                       for k, c in enumerate(compressions)])


def test_the_plan_packs_runs_of_whole_small_files_of_one_compression():
    kinds = ["none"] * 4 + ["gzip"] * 2 + ["none"] * 3
    sizes = np.array([100, 100, PACK_FILE_BYTES + 1, 100, 100, 100, 100, -1, 100], dtype=np.int64)
    plan = _EpochPlan(_table(kinds), None, False, None, pack_sizes=sizes)
    *_, bounds, _ = plan(1, 0, 0)
    # [0 1] pack; 2 too big, alone; [3] one small file; [4 5] gzip pack; [6] then 7 (size unknown) alone; [8]
    assert bounds.tolist() == [0, 2, 3, 4, 6, 7, 8, 9]
    assert _EpochPlan(_table(kinds), None, False, None)(1, 0, 0)[4].tolist() == list(range(10))  # no packs


def test_a_pack_holds_at_most_pack_files_files_and_pack_bytes_bytes():
    n = PACK_FILES + 5
    plan = _EpochPlan(_table(["none"] * n), None, True, None, pack_sizes=np.full(n, 10, np.int64))
    files, *_, bounds, _ = plan(3, 1, 0)
    assert np.diff(bounds).tolist() == [PACK_FILES, 5] and sorted(files.tolist()) == list(range(n))
    per = PACK_BYTES // PACK_FILE_BYTES  # files of the largest packed size that fill a pack
    plan = _EpochPlan(_table(["none"] * (per + 2)), None, False, None,
                      pack_sizes=np.full(per + 2, PACK_FILE_BYTES, np.int64))
    assert np.diff(plan(3, 1, 0)[4]).tolist() == [per, 2]


# -- reading -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shuffle", [False, True])
def test_many_small_files_of_an_output_are_read_whole_in_packs_every_epoch(tmp_path, packs, shuffle):
    out = str(tmp_path / "out")
    write_output(out, [(k * PER_FILE, PER_FILE) for k in range(FILES)])
    stats = LoaderStats()
    ds = make_dataset(out, batch_size=32, shuffle=shuffle, seed=4, num_epochs=3, stats=stats)
    got = unbatch(ds)
    for epoch in range(3):
        assert_all_once(got[epoch * FILES * PER_FILE:(epoch + 1) * FILES * PER_FILE], range(FILES * PER_FILE))
    assert packs and sum(packs) == 3 * FILES, packs  # every file of every epoch went through a pack
    assert (stats.files_read, stats.records_read, stats.corrupt_files) == (3 * FILES, 3 * FILES * PER_FILE, 0)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_files_of_other_writers_are_packed_too(tmp_path, packs, compression):
    ext = ".gz" if compression == "gzip" else ""
    for k in range(FILES):
        write_tf(str(tmp_path / f"part-{k:03d}.tfrecord{ext}"), records(k * PER_FILE, PER_FILE), compression)
    got = unbatch(make_dataset(str(tmp_path / "part-*"), schema=SCHEMA, batch_size=50, shuffle=False))
    assert_all_once(got, range(FILES * PER_FILE))
    assert sum(packs) == FILES, packs


def test_a_corrupt_record_in_a_pack_is_named_by_its_file_and_offset(tmp_path, packs):
    for k in range(FILES):
        write_tf(str(tmp_path / f"part-{k:03d}.tfrecord"), records(k * PER_FILE, PER_FILE))
    bad = str(tmp_path / "part-017.tfrecord")
    offset = corrupt_record(bad, 11)
    with pytest.raises(tf.errors.OpError) as info:
        list(make_dataset(str(tmp_path / "part-*"), schema=SCHEMA, batch_size=16, shuffle=True, seed=1))
    assert isinstance(info.value, CorruptRecordError), type(info.value)
    assert (info.value.path, info.value.offset, info.value.check) == (bad, offset, "data CRC")
    assert info.value.message.startswith(f"{bad}: corrupt TFRecord at byte offset {offset}: data CRC: ")
    assert packs


def test_a_huge_length_field_in_a_pack_is_refused_before_tensorflow_reads_it(tmp_path, packs):
    """A length of 2**40 with a valid length CRC would make TensorFlow's reader allocate it."""
    for k in range(FILES):
        write_tf(str(tmp_path / f"part-{k:03d}.tfrecord"), records(k * PER_FILE, PER_FILE))
    bad = str(tmp_path / "part-029.tfrecord")
    offset = _huge_length(bad, 3, "none")
    with pytest.raises(tf.errors.OpError) as info:
        list(make_dataset(str(tmp_path / "part-*"), schema=SCHEMA, batch_size=16, shuffle=False))
    assert f"{bad}: corrupt TFRecord at byte offset {offset}: truncated data" in info.value.message
    assert packs


def test_a_truncated_gzip_file_in_a_pack_is_named(tmp_path, packs):
    for k in range(FILES):
        write_tf(str(tmp_path / f"part-{k:03d}.tfrecord.gz"), records(k * PER_FILE, PER_FILE), "gzip")
    bad = tmp_path / "part-005.tfrecord.gz"
    bad.write_bytes(bad.read_bytes()[:-40])
    with pytest.raises(tf.errors.OpError) as info:
        list(make_dataset(str(tmp_path / "part-*"), schema=SCHEMA, batch_size=16, shuffle=False))
    assert info.value.message.startswith(f"{bad}: "), info.value.message[:300]
    assert packs


def test_a_shard_changed_under_its_manifest_is_refused_before_its_records_are_read(tmp_path, packs):
    out = tmp_path / "out"
    write_output(str(out), [(k * PER_FILE, PER_FILE) for k in range(FILES)])
    shard = sorted(out.glob("part-*"))[7]
    data = bytearray(shard.read_bytes())
    at = record_offsets(bytes(data))[4] + 12 + 3
    data[at] ^= 0x01  # one bit of a value: same size, same lengths; the CRCs no longer match
    shard.write_bytes(bytes(data))
    with pytest.raises(tf.errors.OpError) as info:
        list(make_dataset(str(out), batch_size=16, shuffle=False))
    assert shard.name in info.value.message
    assert re.search(r"its bytes have CRC-32C [0-9a-f]{8}, but _manifest.json says [0-9a-f]{8}", info.value.message)
    assert packs


def test_skip_mode_reads_each_file_on_its_own(tmp_path, packs):
    for k in range(4):
        write_tf(str(tmp_path / f"part-{k}.tfrecord"), records(k * PER_FILE, PER_FILE))
    corrupt_record(str(tmp_path / "part-2.tfrecord"), 10)
    stats = LoaderStats()
    got = unbatch(make_dataset(str(tmp_path / "part-*"), schema=SCHEMA, batch_size=8, shuffle=False,
                               on_corrupt="skip", stats=stats))
    ids = sorted(i for i, _ in got)
    assert ids == list(range(2 * PER_FILE + 10)) + list(range(3 * PER_FILE, 4 * PER_FILE))
    assert not packs and stats.corrupt_files == 1


def test_a_gzip_pack_without_manifest_counts_checks_each_files_size_trailer(tmp_path):
    """Packs of gzip files are complete when the records' framed bytes are the sum of the ISIZE trailers."""
    for k in range(3):
        write_tf(str(tmp_path / f"p-{k}.tfrecord.gz"), records(k * PER_FILE, PER_FILE), "gzip")
    total = sum(len(gzip.decompress(Path(tmp_path / f"p-{k}.tfrecord.gz").read_bytes())) for k in range(3))
    payload = sum(len(r) for r in records(0, 3 * PER_FILE))
    assert total == payload + 16 * 3 * PER_FILE  # the identity the end check relies on
    assert len(unbatch(make_dataset(str(tmp_path / "p-*"), schema=SCHEMA, batch_size=8))) == 3 * PER_FILE
