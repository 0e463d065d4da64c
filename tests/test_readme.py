"""The README says what the code does: its sample schema is the demo schema's, its command list the CLI's,
and its PyTorch example runs as written and keeps every feature."""

from __future__ import annotations

import ast
import builtins
import json
import re

import numpy as np
import pyarrow as pa
import yaml

from helpers import REPO
from tfrecord_io.commands.cli import SUBCOMMANDS
from tfrecord_io.core.codec import encode_examples
from tfrecord_io.core.schema import Schema
from tfrecord_io.storage import output

README = (REPO / "README.md").read_text()


def test_the_readme_sample_schema_is_an_abridged_conf_taxi_yaml():
    block = re.search(r"```yaml\n# conf/taxi\.yaml \(abridged\)\n(.*?)```", README, re.S)
    assert block, "the README's Usage section should show conf/taxi.yaml (abridged)"
    sample = yaml.safe_load(block.group(1))
    full = yaml.safe_load((REPO / "conf" / "taxi.yaml").read_text())
    by_name = {f["name"]: f for f in full["features"]}
    for feature in sample["features"]:
        assert by_name.get(feature["name"]) == feature, f"README feature {feature} is not conf/taxi.yaml's"
    assert {k: v for k, v in sample.items() if k != "features"} == \
        {k: v for k, v in full.items() if k != "features"}


def test_the_readme_names_every_subcommand():
    line = next(line for line in README.splitlines() if line.startswith("| `tfrecord-io` | CLI:"))
    named = set(re.findall(r"`([a-z-]+)`", line.split("CLI:", 1)[1]))
    assert named == {name for name, _, _ in SUBCOMMANDS}


# ---------------------------------------------------------------------------------------------
# The PyTorch example (issue #32): its torch-free generator runs here as the README writes it;
# torch is no dependency of the project, so the IterableDataset around it is checked for what it uses.
# ---------------------------------------------------------------------------------------------
def _python_block(containing: str) -> str:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if containing in b]
    assert len(blocks) == 1, f"the README should have one python block with {containing!r}, has {len(blocks)}"
    return blocks[0]


TORCH_SCHEMA = Schema.from_dict({"features": [
    {"name": "trip_id", "type": "int64"}, {"name": "fare", "type": "float"},
    {"name": "payment_type", "type": "string"}, {"name": "raw", "type": "bytes"},
    {"name": "pickup", "type": "float", "shape": [2]}, {"name": "tags", "type": "string", "shape": [-1]},
    {"name": "zones", "type": "int64", "shape": [-1]}, {"name": "tipped", "type": "int64"}], "label": "tipped"})


def _torch_rows(start: int, n: int) -> dict[str, list]:
    ids = list(range(start, start + n))
    return {"trip_id": ids, "fare": [i / 4 for i in ids], "payment_type": [f"card-{i % 3}é" for i in ids],
            "raw": [bytes([i % 256, 0, 255]) for i in ids], "pickup": [[i / 2, -i / 2] for i in ids],
            "tags": [[f"t{j}" for j in range(i % 4)] for i in ids], "zones": [list(range(i % 3)) for i in ids],
            "tipped": [i % 2 for i in ids]}


def test_the_readme_pytorch_generator_keeps_every_feature_and_yields_the_label_apart(tmp_path):
    out = str(tmp_path / "trips")
    shards = [(0, 40), (40, 25), (65, 1)]
    output.write_output(out, [[encode_examples(pa.RecordBatch.from_pydict(_torch_rows(a, n),
                                                                          schema=TORCH_SCHEMA.arrow_schema()),
                                               TORCH_SCHEMA)] for a, n in shards], schema=TORCH_SCHEMA,
                        compression="gzip", engine="test")
    manifest = json.loads((tmp_path / "trips" / "_manifest.json").read_text())
    records = manifest["totals"]["records"]
    assert records == sum(f["records"] for f in manifest["files"]) == 66

    example = {}
    exec(compile(_python_block("def labelled_batches"), "README.md", "exec"), example)  # as written
    labelled_batches = example["labelled_batches"]
    batches = list(labelled_batches(out, "tipped", batch_size=16))
    want = _torch_rows(0, records)
    got: dict[str, list] = {name: [] for name in want}
    for batch in batches:
        assert isinstance(batch, tuple) and len(batch) == 2, type(batch)
        features, label = batch
        assert set(features) == {f.name for f in TORCH_SCHEMA.features} - {"tipped"}, sorted(features)
        n = len(label)
        assert isinstance(label, np.ndarray) and label.dtype == np.int64
        assert isinstance(features["payment_type"], list) and all(isinstance(v, str) for v in features["payment_type"])
        assert isinstance(features["raw"], list) and all(isinstance(v, bytes) for v in features["raw"])
        assert features["fare"].dtype == np.float32 and features["pickup"].shape == (n, 2)
        for name in ("tags", "zones"):  # [-1] lists: (values, row_splits)
            values, splits = features[name]
            assert len(splits) == n + 1 and isinstance(splits, np.ndarray)
            got[name] += [values[splits[i]:splits[i + 1]] for i in range(n)]
        assert isinstance(features["tags"][0], list) and isinstance(features["zones"][0], np.ndarray)
        for name in ("trip_id", "fare", "payment_type", "raw", "pickup"):
            got[name] += list(features[name])
        got["tipped"] += label.tolist()
    assert len(got["tipped"]) == records  # the manifest's count: no record lost or doubled
    assert got["trip_id"] == want["trip_id"] and got["tipped"] == want["tipped"]
    assert got["payment_type"] == want["payment_type"] and got["raw"] == want["raw"]  # the strings arrive
    assert got["tags"] == want["tags"] and [list(z) for z in got["zones"]] == want["zones"]
    assert [float(v) for v in got["fare"]] == [float(np.float32(v)) for v in want["fare"]]
    assert [p.tolist() for p in got["pickup"]] == [[float(np.float32(a)), float(np.float32(b))]
                                                   for a, b in want["pickup"]]

    # The shards the IterableDataset asks for (shard=(worker, workers)): every record once among them.
    sharded = [i for k in range(4) for x, _ in labelled_batches(out, "tipped", batch_size=16, shard=(k, 4))
               for i in x["trip_id"].tolist()]
    assert sorted(sharded) == want["trip_id"]


def test_the_readme_iterable_dataset_wraps_that_generator():
    """Without torch (no dependency of the project) the IterableDataset cannot run here: it must parse, and
    every name it uses must be its own, a builtin, or the generator block's."""
    generator, dataset = _python_block("def labelled_batches"), _python_block("IterableDataset")
    tree = ast.parse(dataset)
    defined = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    defined |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    defined |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    from_generator = {n.name for n in ast.parse(generator).body if isinstance(n, ast.FunctionDef)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert used - defined - set(dir(builtins)) == {"labelled_batches"} <= from_generator, used - defined
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    assert ast.unparse(cls.bases[0]) == "torch.utils.data.IterableDataset"
    calls = [ast.unparse(n) for n in ast.walk(cls) if isinstance(n, ast.Call)
             and ast.unparse(n.func) == "labelled_batches"]
    assert calls and all("shard=" in c for c in calls), calls  # each worker its own shard
