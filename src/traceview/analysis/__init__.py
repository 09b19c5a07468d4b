"""Analysis stage: hardware specs, kernel categories, steps and phases, roofline, model accounting.

`pipeline.analyze` runs them in dependency order over an ingested trace.
"""
