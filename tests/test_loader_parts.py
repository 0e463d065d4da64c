"""The loader's TensorFlow-free parts, run where TensorFlow cannot be imported (issue #28 item 5).

``tfrecord_io.engines.loader`` keeps the decisions -- options, the epoch plan, the length and
end-of-segment checks, the global shuffle's reader, the data identity -- in modules that import
no TensorFlow, so they are tested as plain functions.  The child process below blocks
``tensorflow`` and ``keras`` at import, writes a real output with our writer, and drives each part
on it.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from helpers import REPO

TF_FREE = ("options", "state", "files", "plan", "checks", "offsets")

CHILD = r'''
import importlib.abc, json, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras"):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Blocked())

import numpy as np
import pyarrow as pa

from tfrecord_io.core.codec import encode_examples
from tfrecord_io.core.framing import CorruptRecordError, read_records
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import output, source_identity
from tfrecord_io.engines.loader.checks import _RangeGuard, _SegmentChecker
from tfrecord_io.engines.loader.files import _FileTable, resolve_source
from tfrecord_io.engines.loader.offsets import _RecordReader
from tfrecord_io.engines.loader.options import LoaderOptions
from tfrecord_io.engines.loader.plan import _EpochPlan, _share
from tfrecord_io.engines.loader.state import LoaderStats, _SameData

out = sys.argv[1]
schema = Schema.from_dict({"features": [{"name": "id", "type": "int64"}, {"name": "x", "type": "float"}]})

def rows(start, n):
    return pa.RecordBatch.from_pydict({"id": np.arange(start, start + n), "x": np.ones(n, np.float32)},
                                      schema=schema.arrow_schema())

sizes = [700, 1500, 300]
starts = np.cumsum([0] + sizes[:-1])
output.write_output(out, [[encode_examples(rows(int(s), n), schema)] for s, n in zip(starts, sizes)],
                    schema=schema, compression="none", engine="test")
src = resolve_source(out)
table = _FileTable(src.files, src.manifest)
stats = LoaderStats()

# options: one dataclass, unknown names refused with the closest
try:
    LoaderOptions.from_options("make_dataset", batch_size=10, shufle=False)
    raise SystemExit("an unknown option was accepted")
except TypeError as e:
    assert "did you mean 'shuffle'" in str(e), e
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert LoaderOptions(batch_size=10, cache_files=2).cache_files == 3
assert "cache_files=2 is below its least, 3" in str(caught[0].message), caught

# the plan: two pipelines of one replica each, batch 100: equal shares, every record at most once
class Context:
    num_input_pipelines, num_replicas_in_sync = 2, 2
    def __init__(self, k):
        self.input_pipeline_id = k

seen = []
for k in range(2):
    share = _share(table.counts(), Context(k), 100, "drop")
    files, firsts, counts, wholes, _, _ = _EpochPlan(table, share, True, None)(7, 0, 1)
    assert int(counts.sum()) == 1200, (k, counts)
    for i, first, count in zip(files, firsts, counts):
        seen += [(int(i), r) for r in range(int(first), int(first + count))]
assert len(seen) == len(set(seen)) == 2400, len(set(seen))

# the length check: ranges of the first file, then a corrupt length field named by its offset
guard = _RangeGuard(table, "error", stats, None)
path = table.files[0].uri
start, skip, n, nxt, last = guard(path.encode(), 0, -1, 0, -1, 0)
assert (int(start), int(n), bool(last)) == (0, 700, True), (start, n, last)
# a segment's ranges at once: the first of 1,024 records, then the rest; and a part of a file
p1 = table.files[1].uri.encode()
starts, skips, ns, lasts, firsts = guard.segment(p1, 1, 0, -1)
offsets1 = table.index(1).offsets
assert (ns.tolist(), skips.tolist(), lasts.tolist()) == ([1024, 476], [0, 0], [False, True]), (ns, lasts)
assert starts.tolist() == [0, int(offsets1[1024])] and firsts.tolist() == [0, 1024], (starts, firsts)
starts, skips, ns, lasts, firsts = guard.segment(p1, 1, 100, 50)
assert (starts.tolist(), ns.tolist(), lasts.tolist()) == ([int(offsets1[100])], [50], [True])
data = bytearray(open(path, "rb").read())
index = table.index(0)
at = int(index.offsets[5])
data[at:at + 8] = (10 ** 9).to_bytes(8, "little")
open(path, "wb").write(bytes(data))
assert guard(path.encode(), 0, -1, 0, -1, 0)[2] == 700  # the plan comes from the index; verify() reads
try:
    guard.verify(path.encode(), 0, 0, 700)
    raise SystemExit("a corrupt length passed the check")
except (CorruptRecordError, ValueError) as e:
    assert str(at) in str(e), e
assert int(guard.verify(path.encode(), 0, 6, 694)) == 694  # a range after it is not refused
assert int(_RangeGuard(table, "skip", stats, None).verify(path.encode(), 0, 0, 700)) == 5  # skip: cut before it

# the end-of-segment check: a segment that TensorFlow read whole passes, one read short is named
checker = _SegmentChecker(table, "error", stats, None)
p2 = table.files[1].uri
with open(p2, "rb") as f:
    payload = sum(len(r) for r in read_records(f, name=p2))
assert len(checker(p2.encode(), 1, 0, 1500, 1, 1500, payload)) == 0
try:
    checker(p2.encode(), 1, 0, 1500, 1, 1400, payload)  # TensorFlow said it read 1,400 of 1,500
    raise SystemExit("a short read passed the end-of-segment check")
except ValueError as e:
    assert "1400" in str(e) and "1500" in str(e), e

# the global shuffle's reader: records by id, across files
reader = _RecordReader(table, table.load_indexes(), None, "error", stats)
got = reader(np.array([700, 2199, 701], dtype=np.int64))
assert len(got) == 3 and all(isinstance(r, bytes) and r for r in got), got

# the data identity: equal data passes, a changed shard is named
same = _SameData(source_identity.identity(src), src.uri)
assert same(same.text.encode()) == 0
changed = source_identity.identity(src)
changed["files"][2][2] += 1
try:
    same(__import__("json").dumps(changed, sort_keys=True).encode())
    raise SystemExit("changed data passed")
except ValueError as e:
    assert "rewritten" in str(e) and "part-00002" in str(e), e

assert not [m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")]
print("ok")
'''


def test_the_tensorflow_free_parts_work_without_tensorflow(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("module", TF_FREE)
def test_the_tensorflow_free_modules_import_no_engine(module):
    path = REPO / "tfrecord_io" / "engines" / "loader" / f"{module}.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [f"{module}.py:{node.lineno} imports {n}" for n in names
                  if n.split(".")[0] in ("tensorflow", "keras")
                  or n.startswith("tfrecord_io.engines.loader.") and n.rsplit(".", 1)[-1] not in TF_FREE]
    assert not found, found
