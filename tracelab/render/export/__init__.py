"""Machine-readable outputs: the `analyze --json` document and Perfetto / Chrome trace JSON."""
