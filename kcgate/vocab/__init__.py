"""The vocabulary every layer shares: dtypes, device kinds, the op catalogue, the contract classes, the diff
categories and the failure causes. Each concept is one table here; nothing here imports torch."""
