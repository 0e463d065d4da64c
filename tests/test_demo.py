"""`make demo` runs `tfrecord-io demo`: the whole path on sample data, as a user sees it."""

import re

from tfrecord_io.commands.demo import BAD_ROWS


def test_demo_end_to_end(spark_cli, tmp_path):
    proc = spark_cli("demo", "--rows", "3000", "--epochs", "1", "--workdir", str(tmp_path), check=False)
    out = proc.stdout
    assert proc.returncode == 0, f"demo failed:\n{out[-3000:]}\n{proc.stderr[-5000:]}"
    m = re.search(r"([\d,]+) input rows -> ([\d,]+) records \+ ([\d,]+) rejected", out)
    assert m, out
    rows, records, rejected = (int(g.replace(",", "")) for g in m.groups())
    assert (rows, records, rejected) == (3000 + len(BAD_ROWS), 3000, len(BAD_ROWS))
    assert out.count("reject: ") == len(BAD_ROWS)
    assert len(list((tmp_path / "tfrecords").glob("part-*-of-00004.tfrecord.gz"))) == 4
    assert (tmp_path / "tfrecords" / "_SUCCESS").exists()
    assert re.search(r"3,000 examples in [\d.]+s = [\d,]+ examples/s", out), out
    # Nothing that reads like a failure (#32 item 6): the JVM this command starts logs through our
    # log4j2 configuration (engines/spark_log4j2.properties), without Spark's start-up notices; the
    # JVM's own "Using incubator modules" line (Spark's launcher adds the module) is all that stays.
    noise = [ln for ln in proc.stderr.splitlines()
             if ln.strip() and not ln.startswith("WARNING: Using incubator modules")]
    assert noise == [], "\n".join(noise)
