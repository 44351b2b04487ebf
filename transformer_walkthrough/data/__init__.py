"""Package data: the JSON Schema of the exports (read by ``files.export.schema``)."""
