"""The contract format: the field table, contracts.toml -> frozen Project/Contract records, validation,
static kernel location, discovery, shape classes and the [policy] table. Torch-free."""
