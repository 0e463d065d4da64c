"""The format core: what a TFRecord of tf.train.Example holds, and what is computed from records,
with no engine and no storage.

schema (the YAML schema), values (how a CSV cell or JSON value becomes a typed value), codec /
decode (mirror-image Example and SequenceExample encoding), wire_scan (the protobuf wire scanner:
what a batch of records holds, vectorized), arrow_decode (records straight into Arrow columns, from
a scan), record_schema (the schema that decoded records imply), framing (TFRecord
framing and its masked CRC32C), checksum (a whole file's CRC-32C), gzip_blocks (one gzip stream
compressed in blocks on threads), sketches (mergeable numeric and string summaries in bounded
memory, for ``stats``).  Imports only numpy, pyarrow, pyyaml and google-crc32c."""
