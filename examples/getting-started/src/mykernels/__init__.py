"""The two-kernel package of docs/getting-started.md."""
