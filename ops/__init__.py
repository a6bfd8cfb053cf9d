"""Operating a deployed stack: repairs after interrupted operations."""
