"""Running cases: plan -> run loop -> executors (in-process or isolated worker) -> one case -> harness."""
