"""Code that runs in the engine's provider process: the dynamic providers, pickled
into the state by reference (module path and class name), and what they call.

Never rename or move a provider class without an entry in `legacy.ALIASES`.
"""
