"""Writes the output-contract goldens: what a conversion of ``input.csv`` with ``schema.yaml`` commits.

    .venv/bin/python tests/golden/contract/make_contract_golden.py

Runs the Beam pipeline (FnApiRunner) into a temporary directory, once as one output of two shards
and once with ``--split train=1,eval=1``, and writes next to itself:

* ``manifest.json`` and ``manifest.split.json`` (plus ``manifest.split-train.json`` and
  ``manifest.split-eval.json``): the committed ``_manifest.json`` files as they came (``created``
  and ``engine`` are the run's, and the records per shard the engine's);
* ``rejects.jsonl``: the committed ``_rejects`` rows, ``source`` made relative to this directory.

``tests/test_output_contract.py`` runs both engines on the same input and compares what they commit
with these files field by field (see there for which fields are engine- or run-specific).  Review
a change to them as a change to the contract (``docs/wire-contract.md``, "The output directory").
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent.parent))

from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from tfrecord_io import beam  # noqa: E402  (the stable name a user calls)


def convert(out: Path, **kw) -> None:
    conv = beam.ConversionOptions(inputs=str(HERE / "input.csv"), input_format="csv", schema=str(HERE / "schema.yaml"),
                                  output=str(out), num_shards=2, max_reject_fraction=0.5, **kw)
    beam.run_conversion(conv, PipelineOptions(["--runner=FnApiRunner"]))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one, split = Path(tmp) / "one", Path(tmp) / "split"
        convert(one)
        convert(split, split="train=1,eval=1")
        (HERE / "manifest.json").write_text((one / "_manifest.json").read_text())
        (HERE / "manifest.split.json").write_text((split / "_manifest.json").read_text())
        for name in ("train", "eval"):
            (HERE / f"manifest.split-{name}.json").write_text((split / name / "_manifest.json").read_text())
        rows = [json.loads(line) for f in sorted((one / "_rejects").iterdir()) for line in f.read_text().splitlines()]
        for r in rows:
            r["source"] = Path(r["source"]).name
        (HERE / "rejects.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                    for r in sorted(rows, key=lambda r: r["line"])))


if __name__ == "__main__":
    main()
