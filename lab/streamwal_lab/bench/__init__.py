"""``streamwal bench``: WAL against the raw Pulsar client, side by side in one run."""
