"""conversion.dealing: how Example rows reach their shards in the default layout (both engines).

Units on real Arrow data: every row reaches exactly one shard, shards are even, pieces stay under
their size, the same input deals the same pieces, and a shard's order does not depend on the order
the shuffle delivered its pieces in.  The engines' end-to-end runs are in test_spark_job / test_beam.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from tfrecord_io.conversion import dealing


def _batches(n: int, size: int) -> list[pa.RecordBatch]:
    """``n`` rows in batches of ``size``: an id, a float and a string column."""
    out = []
    for start in range(0, n, size):
        ids = np.arange(start, min(n, start + size), dtype=np.int64)
        out.append(pa.RecordBatch.from_arrays([pa.array(ids), pa.array(ids * 0.5, pa.float32()),
                                               pa.array([f"row {i}" for i in ids])], names=["id", "x", "s"]))
    return out


def _deal(batches, num_shards: int, first: int = 0) -> list[tuple[int, bytes]]:
    """(shard, ipc bytes) of the pieces, checking their keys: the task's origin and 0, 1, 2... in order."""
    dealer = dealing.Dealer(num_shards, first=first, origin="task")
    pieces = [p for b in batches for p in dealer.deal(b)] + list(dealer.finish())
    assert [key for _, (key, _) in pieces] == [("task", n) for n in range(len(pieces))]
    return [(shard, data) for shard, (_, data) in pieces]


def _ids(batches) -> list[int]:
    return [i for b in batches for i in b.column(0).to_pylist()]


@pytest.mark.parametrize("rows,size,shards", [(10_000, 8192, 2), (10_000, 7, 3), (50_000, 8192, 37), (5, 5, 8),
                                              (0, 1, 4)])
def test_every_row_reaches_one_shard_and_shards_are_even(rows, size, shards):
    pieces = _deal(_batches(rows, size), shards, first=5)
    per_shard = Counter()
    seen = []
    for shard, data in pieces:
        assert 0 <= shard < shards
        got = dealing.from_ipc(data)
        assert got and all(b.schema.names == ["id", "x", "s"] for b in got)
        per_shard[shard] += sum(b.num_rows for b in got)
        seen += _ids(got)
    assert sorted(seen) == list(range(rows))
    if rows:
        # Dealt in slices, in turn: no shard is more than one slice (at most a batch / shards + 1 rows,
        # and at most one row for each batch a shard was skipped in) from another.
        counts = [per_shard[s] for s in range(shards)]
        batches = -(-rows // size)
        assert max(counts) - min(counts) <= max(1, -(-min(size, rows) // shards)) + batches, counts


def test_pieces_stay_near_their_size_and_the_same_input_deals_the_same_pieces():
    batches = _batches(800_000, 8192)  # 21 MB: more than two full pieces
    pieces = _deal(batches, 2)
    limit = dealing.piece_bytes(2)
    slice_bytes = max(b.nbytes for b in batches) // 2 + 1
    assert len(pieces) > 2  # buckets leave the task as they fill, not all at the end
    assert all(len(data) < limit + 2 * slice_bytes for _, data in pieces)
    assert pieces == _deal(_batches(800_000, 8192), 2)  # a recomputed read task sends the same bytes
    assert dealing.piece_bytes(1) == dealing.MAX_PIECE_BYTES
    assert dealing.piece_bytes(10_000) == dealing.MIN_PIECE_BYTES


def test_a_shard_is_mixed_and_its_order_does_not_depend_on_arrival():
    """Sorted input: the first tenth of a shuffled shard already spans the whole input, the rows are
    each there once, and the pieces in any arrival order give the same order."""
    batches = _batches(40_000, 1000)
    keyed = [((task, n), data) for task in range(2) for n, (_, data) in
             enumerate(_deal(batches[task * 20:(task + 1) * 20], 1, first=task))]
    out = _ids(dealing.shuffled(keyed, np.random.default_rng(3)))
    assert sorted(out) == list(range(40_000))
    head = out[:4000]
    assert min(head) < 4000 and max(head) > 36_000
    reversed_arrival = _ids(dealing.shuffled(list(reversed(keyed)), np.random.default_rng(3)))
    assert reversed_arrival == out
    assert _ids(dealing.in_order(keyed)) == list(range(40_000))


def test_a_shard_larger_than_the_hold_is_mixed_window_by_window():
    batches = _batches(30_000, 1000)
    keyed = [((0, n), dealing.to_ipc(b)) for n, b in enumerate(batches)]  # pieces of 1,000 rows
    window = sum(len(d) for _, d in keyed) // 3 + 1
    out = _ids(dealing.shuffled(keyed, np.random.default_rng(0), hold_bytes=window))
    assert sorted(out) == list(range(30_000))
    first, last = out[:5000], out[-5000:]
    assert max(first) < 20_000 < min(last)  # each window is its own part of the input...
    assert max(first) - min(first) > 5000  # ...mixed within



@pytest.mark.parametrize("shards,per", [(10, 3), (37, 37), (5, 1), (1000, 64)])
def test_writer_groups_give_each_shard_the_rows_and_order_it_gets_alone(shards, per):
    """Pieces of several shards (``shards_per_piece``), split back by shard in a writer, give every
    shard the same rows in the same (permuted) order as pieces of one shard each."""
    batches = _batches(20_000, 700)

    def per_shard(k: int, rng: bool) -> dict[int, list[int]]:
        dealer = dealing.Dealer(shards, first=3, origin="task", shards_per_piece=k)
        by_group: dict[int, list] = {}
        for group, piece in [p for b in batches for p in dealer.deal(b)] + list(dealer.finish()):
            by_group.setdefault(group, []).append(piece)
        out: dict[int, list[int]] = {}
        rngs = {} if rng else None
        for group, pieces in by_group.items():
            for window in dealing.windows(reversed(pieces), by_key=True):  # arrival order does not matter
                rows, spans = dealing.split_window(window, group, rngs)
                assert rows.column_names == ["id", "x", "s"]  # the shard column is dropped
                for shard, start, n in spans:
                    assert shard // k == group
                    out.setdefault(shard, []).extend(rows.column(0).slice(start, n).to_pylist())
        return out

    for rng in (True, False):
        alone, grouped = per_shard(1, rng), per_shard(per, rng)
        assert grouped == alone
        assert sorted(i for ids in grouped.values() for i in ids) == list(range(20_000))
    # The per-shard pieces permuted by dealing.shuffled: the same order again.
    dealer = dealing.Dealer(shards, first=3, origin="task")
    pieces = [p for b in batches for p in dealer.deal(b)] + list(dealer.finish())
    for shard in {s for s, _ in pieces}:
        mine = [piece for s, piece in pieces if s == shard]
        assert _ids(dealing.shuffled(mine, np.random.default_rng(shard))) == per_shard(per, True)[shard]
        break


def test_shards_per_writer_groups_small_shards_only():
    assert dealing.shards_per_writer(10_000, 148 << 20) == dealing.MAX_SHARDS_PER_WRITER
    assert dealing.shards_per_writer(18, 18 * (128 << 20)) == 1  # default shards: one each
    assert dealing.shards_per_writer(3, 1000) == 3
    assert dealing.writer_groups(10_000, 1024) == 10 and dealing.writer_groups(7, 1) == 7


@pytest.mark.parametrize("per", [1, 4])
def test_spilled_pieces_are_the_bytes_the_shuffle_would_carry(tmp_path, per):
    """Dealer(spill=...) writes each piece's IPC stream straight into the spill file: the references
    read back (spill.read_pieces) are the very bytes an unspilled dealing sends, one after another
    in one file, and the keys and shards are the same."""
    from tfrecord_io.conversion import spill

    batches = _batches(30_000, 4096)
    plain = dealing.Dealer(8, first=3, origin="task", shards_per_piece=per)
    expected = [p for b in batches for p in plain.deal(b)] + list(plain.finish())
    with spill.SpillWriter(str(tmp_path / "attempt")) as spilled:
        dealer = dealing.Dealer(8, first=3, origin="task", shards_per_piece=per, spill=spilled)
        got = [p for b in batches for p in dealer.deal(b)] + list(dealer.finish())
    assert len(got) == len(expected) > 1
    assert [(shard, key) for shard, (key, _) in got] == [(shard, key) for shard, (key, _) in expected]
    refs = [ref for _, (_, ref) in got]
    assert all(spill.is_spilled(ref) and ref[0] == str(tmp_path / "attempt" / spill.SPILL_NAME) for ref in refs)
    assert [ref[1] for ref in refs] == [sum(r[2] for r in refs[:i]) for i in range(len(refs))]  # back to back
    read = list(spill.read_pieces((key, ref) for _, (key, ref) in got))
    assert [data for _, data in read] == [data for _, (_, data) in expected]
