"""Text in and out, one layer: coded diagnostics (`diagnostics`) and their one renderer (`render`),
outside text escaped and bounded (`escape`), the one bounded reader of local files (`localfile`), YAML with
positions and budgets (`yamlload`), schema errors as coded diagnostics (`schemacheck`), the log lines an
engine integration writes (`loglines`) and the immutable records every report is made of (`records`).

Why one package: each of these answers "how does text get into or out of the toolkit safely"; a reader
looking for where a message is escaped, bounded or rendered finds all of it here. Imports nothing above
the base layer (surgery/data/layers.yaml)."""
