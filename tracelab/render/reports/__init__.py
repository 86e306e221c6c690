"""`tracelab report`: one self-contained HTML file or Markdown, with its figures."""
