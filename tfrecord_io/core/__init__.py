"""The format core: what a TFRecord of tf.train.Example holds, with no engine and no storage.

schema (the YAML schema), values (how a CSV cell or JSON value becomes a typed value), codec /
decode (mirror-image Example and SequenceExample encoding), record_schema (the schema that decoded
records imply), framing (TFRecord framing and its masked CRC32C), checksum (a whole file's CRC-32C).  Imports only numpy, pyarrow,
pyyaml and google-crc32c."""
