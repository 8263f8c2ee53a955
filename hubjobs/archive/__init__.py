"""The backup archive format, written by the backup kind and read by restore."""
