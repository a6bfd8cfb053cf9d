"""The program's component resources, one per concern, each built from an `Args`
dataclass holding exactly what it uses (config sections, upstream components)."""
