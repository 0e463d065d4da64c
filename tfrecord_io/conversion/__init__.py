"""The conversion rules every engine shares, written once below the engines.

options (the frozen ConversionOptions and their validation), columns (input columns against
the schema), parsing (CSV / JSON Lines text to Arrow batches and rejects), splits (TFX
ExampleGen's train/eval assignment)."""
