"""What the explorer reads from the store, as plain Python records (no connection outlives a query)."""
