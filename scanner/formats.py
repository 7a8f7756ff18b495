"""The formats a scan report is printed in: apart from the report's code, so that the command lines offering
them (qscan report, quictp-demo) need not import polars and DuckDB to list them in --help."""

FORMATS = ("table", "csv", "json", "markdown")
