"""Each experiment's grid of conditions, declared once, in modules that import nothing heavy: the experiment
runs them and the CLI's help and defaults show them, and `qreplay --help` starts without DuckDB or polars."""
