"""Pure renderers: result records in, text out. Nothing here touches files, env or network."""
