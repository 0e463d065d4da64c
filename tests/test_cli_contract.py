"""One CLI contract (issue #12, item 6): every command exits 0 done, 1 failed, 2 bad usage or an
unreadable source, 3 too many rejects (convert) or problems found (verify, stats); errors are one
``error:`` line naming the path, never a traceback."""

from __future__ import annotations

import gzip
import json
import re
import shlex

import pytest

from helpers import REPO, tfrecord_io_cli
from schemas import ID_X, write_schema
from tfrecord_io.core.schema import Schema


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    write_schema(d / "s.yaml", ID_X)
    (d / "good.csv").write_text("id,x\n" + "".join(f"{i},{i / 2}\n" for i in range(20)))
    (d / "bad.csv").write_text("id,x\n" + "".join(f"{i},{i / 2}\n" for i in range(5)) + "".join("z,1\n" * 5))
    whole = gzip.compress(("id,x\n" + "".join(f"{i},{i * 7919 % 10007}\n" for i in range(50_000))).encode())
    (d / "cut.csv.gz").write_bytes(whole[:len(whole) // 2])
    out = d / "out"
    tfrecord_io_cli("convert", "--engine", "beam", "--input", str(d / "good.csv"), "--format", "csv",
                    "--schema", str(d / "s.yaml"), "--output", str(out), "--engine-arg=--runner=FnApiRunner")
    lying = d / "lying"
    lying.mkdir()
    for p in out.iterdir():
        (lying / p.name).write_bytes(p.read_bytes())
    manifest = json.loads((lying / "_manifest.json").read_text())
    manifest["files"][0]["records"] += 5
    (lying / "_manifest.json").write_text(json.dumps(manifest))
    corrupt = d / "corrupt.tfrecord"  # cut inside its third record
    corrupt.write_bytes((out / manifest["files"][0]["path"]).read_bytes()[:110])
    return d


def _convert(d, inp, out, *extra, schema="s.yaml"):
    return ["convert", "--engine", "beam", "--input", str(d / inp), "--format", "csv", "--schema", str(d / schema),
            "--output", str(d / out), "--engine-arg=--runner=FnApiRunner", *extra]


CASES = [
    ("convert: done", lambda d: _convert(d, "good.csv", "o1"), 0, None),
    ("convert: a truncated input fails the run", lambda d: _convert(d, "cut.csv.gz", "o2"), 1, "cut.csv.gz"),
    ("convert: a missing input", lambda d: _convert(d, "nope.csv", "o3"), 2, "nope.csv"),
    ("convert: a missing schema", lambda d: _convert(d, "good.csv", "o4", schema="no.yaml"), 2, "no.yaml"),
    ("convert: bad usage", lambda d: ["convert", "--format", "csv"], 2, None),
    ("convert: too many rejects", lambda d: _convert(d, "bad.csv", "o5"), 3, "5 of 10 input rows"),
    ("infer-schema: done", lambda d: ["infer-schema", "--input", str(d / "good.csv"), "--format", "csv"], 0, None),
    ("infer-schema: unreadable", lambda d: ["infer-schema", "--input", str(d / "nope.csv"), "--format", "csv"], 2,
     "nope.csv"),
    ("infer-schema: not JSON", lambda d: ["infer-schema", "--input", str(d / "good.csv"), "--format", "json"], 2,
     "good.csv: line 1"),
    ("inspect: done", lambda d: ["inspect", str(d / "out")], 0, None),
    ("inspect: unreadable", lambda d: ["inspect", str(d / "nope")], 2, "nope"),
    ("inspect: a corrupt record", lambda d: ["inspect", str(d / "corrupt.tfrecord"), "--head", "100"], 1,
     "corrupt.tfrecord"),
    ("verify: done", lambda d: ["verify", str(d / "out")], 0, None),
    ("verify: problems found", lambda d: ["verify", str(d / "lying")], 3, None),
    ("verify: unreadable", lambda d: ["verify", str(d / "nope")], 2, "nope"),
    ("stats: done", lambda d: ["stats", str(d / "out"), "--logdir", str(d / "logs1")], 0, None),
    ("stats: the manifest lies", lambda d: ["stats", str(d / "lying"), "--logdir", str(d / "logs2")], 3, "lying"),
    ("stats: unreadable", lambda d: ["stats", str(d / "nope"), "--logdir", str(d / "logs3")], 2, "nope"),
    ("stats --compare: unreadable B", lambda d: ["stats", str(d / "out"), "--compare", str(d / "nope"),
                                                 "--logdir", str(d / "logs4")], 2, "nope"),
    ("pack-env: bad usage", lambda d: ["pack-env"], 2, None),
    ("pack-env: a file where its folder must be", lambda d: ["pack-env", str(d / "good.csv" / "env.tar.gz")], 2,
     "good.csv is a file, not a directory"),
    ("copy: a file where a folder must be", lambda d: ["copy", str(d / "good.csv"), str(d / "good.csv" / "a" / "b.csv")],
     2, "good.csv is a file, not a directory"),
    ("hdfs-local: nothing running", lambda d: ["hdfs-local", "status", "--dir", str(d / "no-cluster")], 1, None),
    ("flink-local: nothing running", lambda d: ["flink-local", "status", "--dir", str(d / "no-server")], 1, None),
    ("no command", lambda d: [], 2, None),
]


def _converted(d, proc) -> None:
    manifest = json.loads((d / "o1" / "_manifest.json").read_text())
    assert (d / "o1" / "_SUCCESS").exists() and manifest["totals"] == {"input_rows": 20, "records": 20, "rejected": 0}
    done = json.loads([ln for ln in proc.stdout.splitlines() if '"tfrecord-io-done"' in ln][-1])
    assert done["totals"] == manifest["totals"] and "wrote 20 example records" in proc.stderr


def _inferred(d, proc) -> None:
    schema = Schema.from_yaml(proc.stdout)
    assert [(f.name, f.type) for f in schema.features] == [("id", "int64"), ("x", "float")]


def _inspected(d, proc) -> None:
    assert "records:     20 (from the manifest)" in proc.stdout and "schema (from the manifest)" in proc.stdout


def _verified(d, proc) -> None:
    assert proc.stdout.rstrip().endswith("OK: all checks hold"), proc.stdout


def _described(d, proc) -> None:
    assert any((d / "logs1").rglob("events.out.tfevents.*")), "no TensorBoard summaries written"
    assert "id" in proc.stdout and "x" in proc.stdout


DONE = {"convert: done": _converted, "infer-schema: done": _inferred, "inspect: done": _inspected,
        "verify: done": _verified, "stats: done": _described}  # what "done" means, row by row


@pytest.mark.parametrize("name,args,code,names", CASES, ids=[c[0] for c in CASES])
def test_every_command_keeps_the_contract(made, name, args, code, names):
    proc = tfrecord_io_cli(*args(made), check=False)
    assert proc.returncode == code, f"{name}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    if code and names:
        errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
        assert len(errors) == 1 and names in errors[0], proc.stderr[-3000:]
        assert "[Errno" not in errors[0], errors  # OSErrors said as "<file>: <what>", not Python's repr
    if code == 0:
        DONE[name](made, proc)


def test_every_done_row_says_what_done_means():
    assert {c[0] for c in CASES if c[2] == 0} == set(DONE)


# ---------------------------------------------------------------------------------------------
# hdfs-local: one parser per action (issue #32), so each action's --help lists its flags only.
# Nothing here starts a cluster: parsing and --help need no Java.
# ---------------------------------------------------------------------------------------------
HDFS_LOCAL_FLAGS = {
    "start": {"--dir", "--timeout", "--port", "--http-port", "--block-size", "--datanodes", "--ha", "--kerberos",
              "--data-protection", "--ticket-lifetime", "--yarn"},
    "stop": {"--dir"},
    "status": {"--dir"},
    "failover": {"--dir", "--timeout"},
    "stop-datanode": {"--dir", "--timeout", "--index"},
    "fetch": set(),
}


def _usage_flags(help_text: str) -> set[str]:
    """The flags a --help's usage lines name (the usage ends at the first blank line)."""
    usage = help_text.split("\n\n", 1)[0]
    return set(re.findall(r"\[?(--[a-z][a-z-]*)", usage)) - {"--help"}


@pytest.mark.parametrize("action", sorted(HDFS_LOCAL_FLAGS))
def test_each_hdfs_local_action_has_its_own_help(action):
    proc = tfrecord_io_cli("hdfs-local", action, "--help")
    text = proc.stdout
    assert text.startswith(f"usage: tfrecord-io hdfs-local {action} "), text
    assert _usage_flags(text) == HDFS_LOCAL_FLAGS[action], text
    options = text.split("\noptions:\n", 1)[1]
    for flag in HDFS_LOCAL_FLAGS[action]:  # each flag is explained, not only named
        assert re.search(rf"^  {flag}\b.*\S", options, re.MULTILINE), f"{flag} has no help line:\n{text}"
    others = set().union(*HDFS_LOCAL_FLAGS.values()) - HDFS_LOCAL_FLAGS[action]
    assert not {f for f in others if re.search(rf"^  {f}\b", options, re.MULTILINE)}, text


def test_hdfs_local_help_lists_the_actions():
    text = tfrecord_io_cli("hdfs-local", "--help").stdout
    listed = re.findall(r"^    ([a-z-]+)", text, re.MULTILINE)
    assert listed == ["start", "stop", "status", "failover", "stop-datanode", "fetch"], text
    options = text.split("\noptions:\n", 1)[1]
    assert re.findall(r"^  (-\S+)", options, re.MULTILINE) == ["-h,"], text  # the actions' flags are theirs
    assert "ACTION --help" in text, text  # and it says where they are


@pytest.mark.parametrize("args,names", [
    (["bogus"], "invalid choice: 'bogus'"),
    ([], "ACTION"),
    (["stop", "--kerberos"], "unrecognized arguments: --kerberos"),
    (["fetch", "--yarn"], "unrecognized arguments: --yarn"),
    (["stop-datanode", "--dir", "/nonexistent"], "--index"),
    (["start", "--block-size", "lots"], "not a size: 'lots'"),
], ids=["unknown action", "no action", "another action's flag", "a flag of no action", "stop-datanode without --index",
        "a bad value"])
def test_hdfs_local_bad_usage_exits_2_with_the_actions_usage(args, names):
    proc = tfrecord_io_cli("hdfs-local", *args, check=False)
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr and proc.stdout == "", proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and names in errors[0], proc.stderr
    action = args[0] if args and args[0] in HDFS_LOCAL_FLAGS else None
    usage = f"usage: tfrecord-io hdfs-local {action} " if action else "usage: tfrecord-io hdfs-local [-h] ACTION"
    assert proc.stderr.startswith(usage), proc.stderr  # the usage of what was mistyped, not of tfrecord-io


# flink-local: the same, one parser per action (issue #32).
FLINK_LOCAL_FLAGS = {"fetch": {"--runner"}, "start": {"--runner", "--dir", "--port", "--timeout"},
                     "stop": {"--runner", "--dir"}, "status": {"--runner", "--dir"}}


@pytest.mark.parametrize("action", sorted(FLINK_LOCAL_FLAGS))
def test_each_flink_local_action_has_its_own_help(action):
    text = tfrecord_io_cli("flink-local", action, "--help").stdout
    assert text.startswith(f"usage: tfrecord-io flink-local {action} "), text
    assert _usage_flags(text) == FLINK_LOCAL_FLAGS[action], text
    options = text.split("\noptions:\n", 1)[1]
    for flag in FLINK_LOCAL_FLAGS[action]:
        assert re.search(rf"^  {flag}\b.*\S", options, re.MULTILINE), f"{flag} has no help line:\n{text}"


@pytest.mark.parametrize("args,names", [
    (["stop", "--port", "3"], "unrecognized arguments: --port 3"),
    (["fetch", "--dir", "/x"], "unrecognized arguments: --dir /x"),
    (["bogus"], "invalid choice: 'bogus'"),
], ids=["another action's flag", "a flag fetch does not take", "unknown action"])
def test_flink_local_bad_usage_exits_2_with_the_actions_usage(args, names):
    proc = tfrecord_io_cli("flink-local", *args, check=False)
    assert proc.returncode == 2 and proc.stdout == "", f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and names in errors[0], proc.stderr
    action = args[0] if args[0] in FLINK_LOCAL_FLAGS else None
    usage = f"usage: tfrecord-io flink-local {action} " if action else "usage: tfrecord-io flink-local [-h] ACTION"
    assert proc.stderr.startswith(usage), proc.stderr


@pytest.mark.parametrize("args", [["status", "--runner", "spark", "--dir", "{d}"],
                                  ["--runner", "spark", "--dir", "{d}", "status"]],
                         ids=["flags after the action", "flags before it, as before the actions had parsers"])
def test_flink_local_flags_reach_the_action_wherever_they_stand(tmp_path, args):
    d = str(tmp_path / "none")
    proc = tfrecord_io_cli("flink-local", *[a.format(d=d) for a in args], check=False)
    assert proc.returncode == 1 and f"no job server running in {d}" in proc.stdout, proc.stdout + proc.stderr


def _documented_hdfs_local_invocations() -> list[str]:
    found = []
    for path in [REPO / "README.md", REPO / "Makefile", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]:
        found += [m.strip() for m in re.findall(r"tfrecord-io hdfs-local ([^`#\n]*)", path.read_text())]
    return found


def test_every_documented_hdfs_local_invocation_still_parses():
    from tfrecord_io.commands.cli import build_parser

    documented = _documented_hdfs_local_invocations()
    assert {line.split()[0] for line in documented} == set(HDFS_LOCAL_FLAGS), documented  # every action
    parser = build_parser()
    for line in documented:
        args = parser.parse_args(["hdfs-local", *shlex.split(line)])  # argparse exits 2 on one that does not parse
        assert args.action == line.split()[0], line
    secure = parser.parse_args(shlex.split("hdfs-local start --kerberos --ha --datanodes 3 --yarn --dir /tmp/secure"))
    assert (secure.kerberos, secure.ha, secure.datanodes, secure.yarn) == (True, True, 3, True) and secure.dir == "/tmp/secure"
    assert (secure.block_size, secure.ticket_lifetime, secure.timeout) == (1 << 20, 86400, 180.0)
    assert parser.parse_args(shlex.split("hdfs-local stop-datanode --index 1 --dir /d")).index == 1
    for argv in ("hdfs-local --dir /d status", "hdfs-local status --dir /d"):  # --dir before the action still works
        assert parser.parse_args(shlex.split(argv)).dir == "/d", argv
    assert parser.parse_args(["hdfs-local", "stop"]).dir is None  # the default: hdfs_local.default_base_dir()
