"""Terminal text: `analyze`, `compare`, `runs`, `sql` and the sections and prose they share."""
