"""The conversion rules every engine shares, written once below the engines.

options (the frozen ConversionOptions and their validation), plan (the conversion decided once,
before an engine starts), columns (input columns against the schema), parsing (CSV / JSON Lines
text to Arrow batches and rejects), small_files (small input files parsed together), dealing
(Example rows dealt to even, mixed shards through an engine's shuffle), grouping (SequenceExample
groups), splits (TFX ExampleGen's train/eval assignment), failure (how a started conversion fails,
and the worker's own error line).  Imports no engine."""
