"""Command runners: the top layer, which may import every layer below it and is imported by none
but the CLI (docs/architecture.md, surgery/data/layers.yaml). Issue 43 moves every command's runner
here; `convert_folder` is the first."""
