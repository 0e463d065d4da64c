"""The README says what the code does: its sample schema is the demo schema's, its command list the CLI's."""

from __future__ import annotations

import re

import yaml

from helpers import REPO
from tfrecord_io.commands.cli import SUBCOMMANDS

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
