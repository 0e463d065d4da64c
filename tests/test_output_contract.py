"""The output contract itself, against goldens: what a conversion of a fixed input commits.

``tests/golden/contract/`` holds a fixed input (``input.csv``: 8 rows, 2 of them bad), its schema,
and what a conversion of it committed (``make_contract_golden.py`` wrote them): the
``_manifest.json`` of one output of two shards, the three manifests of a ``--split train=1,eval=1``
output, and the rejects.  Both engines run the same input here and their outputs are compared
with the goldens field by field: the same fields in the same order, each equal, except those that
are the run's or the engine's own -- ``engine``, ``created`` (an ISO 8601 UTC time), and how the
records spread over the shards (the shard files, their names, record counts that sum to the
totals, and byte sizes that are the files' own).  ``docs/wire-contract.md`` ("The output
directory") documents every field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import google_crc32c
import pytest

from helpers import convert
from tfrecord_io.storage import fs
from tfrecord_io.storage.index import decode_lengths

GOLDEN = Path(__file__).resolve().parent / "golden" / "contract"
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
ENGINE_NAMES = {"spark": "spark", "beam": "beam"}


def golden(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def assert_like_golden(got: dict, want: dict, *, engine: str, out: Path) -> None:
    assert list(got) == list(want), f"fields {list(got)} != the golden's {list(want)}"
    for key, value in want.items():
        if key == "engine":
            assert got[key] == ENGINE_NAMES[engine]
        elif key == "created":
            assert ISO_UTC.fullmatch(got[key]), got[key]
        elif key == "files":
            assert [f["path"] for f in got[key]] == [f["path"] for f in value]
            assert all(list(f) == ["path", "records", "bytes", "crc32c"] for f in got[key])
            assert sum(f["records"] for f in got[key]) == got["totals"]["records"]
            assert all(f["bytes"] == (out / f["path"]).stat().st_size for f in got[key])
            # the content checksum is the CRC-32C of the file's bytes, as any crc32c tool computes it
            assert all(f["crc32c"] == f"{google_crc32c.value((out / f['path']).read_bytes()):08x}" for f in got[key])
        elif key == "index":  # which record lands in which shard is the engine's; the lengths are the records'
            assert got[key]["version"] == value["version"] and list(got[key]["lengths"]) == list(value["lengths"])
            lengths = {name: decode_lengths(text, name) for name, text in got[key]["lengths"].items()}
            for f in got["files"]:
                n = lengths[f["path"]]
                assert len(n) == f["records"] and int(n.sum()) + 16 * len(n) == f["bytes"], f["path"]
            assert sorted(int(x) for n in lengths.values() for x in n) == sorted(
                int(x) for name, text in value["lengths"].items() for x in decode_lengths(text, name))
        elif key == "rejects":
            # how many reject files: which task met which bad row (the shard a row hashes to depends
            # on where the input lies); each entry's fields and the rows in all are the contract
            assert bool(got[key]) == bool(value) and all(list(r) == ["path", "rows"] for r in got[key]), got[key]
            assert all(re.fullmatch(r"_rejects/part-\d{5}\.jsonl", r["path"]) for r in got[key])
            assert sum(r["rows"] for r in got[key]) == sum(r["rows"] for r in value)
        else:
            assert got[key] == value, f"{key}: {got[key]!r} != the golden's {value!r}"


def rejects(out: Path) -> list[dict]:
    rows = [json.loads(line) for f in sorted((out / "_rejects").iterdir()) for line in f.read_text().splitlines()]
    for r in rows:
        r["source"] = Path(r["source"]).name
    return sorted(rows, key=lambda r: r["line"])


def run(engine: str, session, out: Path, **kw) -> None:
    convert(engine, session, str(GOLDEN / "input.csv"), "csv", str(GOLDEN / "schema.yaml"), str(out), num_shards=2,
            **kw)


def test_one_output_commits_the_golden_manifest_and_rejects(engine, session, tmp_path):
    out = tmp_path / "out"
    run(engine, session, out)
    assert_like_golden(json.loads((out / "_manifest.json").read_text()), golden("manifest.json"), engine=engine,
                       out=out)
    want = [json.loads(line) for line in (GOLDEN / "rejects.jsonl").read_text().splitlines()]
    assert rejects(out) == want
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_manifest.json", "_rejects",
                                                     "part-00000-of-00002.tfrecord", "part-00001-of-00002.tfrecord"]
    assert fs.size(str(out / "_SUCCESS")) == 0


def test_a_split_output_commits_the_golden_manifests(engine, session, tmp_path):
    out = tmp_path / "out"
    run(engine, session, out, split="train=1,eval=1")
    assert_like_golden(json.loads((out / "_manifest.json").read_text()), golden("manifest.split.json"),
                       engine=engine, out=out)
    for name in ("train", "eval"):
        assert_like_golden(json.loads((out / name / "_manifest.json").read_text()),
                           golden(f"manifest.split-{name}.json"), engine=engine, out=out / name)
        assert (out / name / "_SUCCESS").exists()
    assert rejects(out) == [json.loads(line) for line in (GOLDEN / "rejects.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", ["manifest.json", "manifest.split.json", "manifest.split-train.json"])
def test_the_goldens_hold_what_the_contract_documents(name):
    """Every top-level field of a golden manifest is documented in docs/wire-contract.md."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "wire-contract.md").read_text()
    section = doc.split("## The output directory", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in golden(name) if f"`{key}`" not in section]
    assert not missing, f"fields of {name} that docs/wire-contract.md does not document: {missing}"
