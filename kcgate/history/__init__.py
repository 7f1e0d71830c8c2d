"""The history of every contract on every runner over commits: records, their append-only log files, the
SQLite store, and the questions asked of it (drift over commits, runners diverging). No torch."""
